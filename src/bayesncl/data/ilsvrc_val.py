"""The official ILSVRC-2012 validation folder, flat as it ships, sorted into the class folders the loader reads
(`bayesncl arrange-val ROOT --labels FILE`).

ImageNet-1k's `val/` ships as 50,000 JPEGs in one folder (`ILSVRC2012_val_00000001.JPEG` ...). Its labels come
either from the common `LOC_val_solution.csv` (`ImageId,PredictionString`; the first word of the prediction
string is the wnid) or from the devkit: `ILSVRC2012_validation_ground_truth.txt` (one ILSVRC2012_ID per line,
image 1 first) with `meta.mat` (its `synsets`: ILSVRC2012_ID -> WNID). The images are linked, never copied or
moved: `val/<wnid>/<file>` is a hard link (or with `symlink`, a relative symbolic link) to `val/<file>`, for the
100 classes of the class list (bayesncl.data.imagenet) or every class. Each class folder is filled under a
temporary name and renamed into place when whole, so an interrupted run leaves no half class folder; a rerun
keeps the folders already there (checked to hold exactly their images) and makes the rest.
"""

from __future__ import annotations

import csv
import os
import re
import shutil
from collections import defaultdict
from pathlib import Path

from .imagenet import imagenet100_classes
from ..core.errors import DataError

__all__ = ["arrange_val", "read_val_labels"]

_NAME = re.compile(r"ILSVRC2012_val_(\d{8})")
_WNID = re.compile(r"n\d{8}")


def _image_name(n: int) -> str:
    return f"ILSVRC2012_val_{n:08d}"


def _from_csv(path: Path) -> dict[str, str]:
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        if not reader.fieldnames or not {"ImageId", "PredictionString"} <= set(reader.fieldnames):
            raise DataError(f"--labels {path}: expected the columns ImageId,PredictionString of LOC_val_solution.csv, "
                            f"found {', '.join(reader.fieldnames or ['none'])}")
        out = {}
        for i, row in enumerate(reader, start=2):
            words = (row["PredictionString"] or "").split()
            if not _NAME.fullmatch(row["ImageId"] or "") or not words or not _WNID.fullmatch(words[0]):
                raise DataError(f"--labels {path}, line {i}: expected ILSVRC2012_val_NNNNNNNN,nXXXXXXXX ..., got "
                                f"{row['ImageId']},{row['PredictionString']}")
            out[row["ImageId"]] = words[0]
    return out


def _devkit_wnids(meta: Path) -> dict[int, str]:
    """ILSVRC2012_ID -> WNID from the devkit's meta.mat."""
    from scipy.io import loadmat

    try:
        synsets = loadmat(str(meta), squeeze_me=True)["synsets"]
        return {int(i): str(w) for i, w in zip(synsets["ILSVRC2012_ID"], synsets["WNID"])}
    except Exception as e:  # not a MATLAB file, or one without synsets
        raise DataError(f"--meta {meta}: not the devkit's meta.mat (a 'synsets' table with ILSVRC2012_ID and WNID): "
                        f"{e}") from None


def _from_devkit(path: Path, meta: Path | None) -> dict[str, str]:
    if meta is None:
        raise DataError(f"--labels {path}: the devkit's ground truth holds class numbers; give --meta with the "
                        "devkit's data/meta.mat, which names them")
    if not meta.is_file():
        raise DataError(f"--meta {meta}: does not exist; give the devkit's data/meta.mat")
    wnids = _devkit_wnids(meta)
    out = {}
    for n, line in enumerate((ln.strip() for ln in path.read_text().splitlines() if ln.strip()), start=1):
        if not line.isdigit() or int(line) not in wnids:
            raise DataError(f"--labels {path}, line {n}: {line!r} is no ILSVRC2012_ID of {meta}")
        out[_image_name(n)] = wnids[int(line)]
    return out


def read_val_labels(labels: str | os.PathLike, meta: str | os.PathLike | None = None) -> dict[str, str]:
    """{image name without extension: wnid} from LOC_val_solution.csv or the devkit's ground truth + meta.mat."""
    path = Path(labels)
    if not path.is_file():
        raise DataError(f"--labels {path}: does not exist; give LOC_val_solution.csv or the devkit's "
                        "data/ILSVRC2012_validation_ground_truth.txt")
    with open(path, errors="replace") as f:
        first = f.readline()
    out = _from_csv(path) if "ImageId" in first else _from_devkit(path, Path(meta) if meta else None)
    if not out:
        raise DataError(f"--labels {path}: holds no labels")
    return out


def _link(src: Path, dst: Path, symlink: bool) -> None:
    if symlink:
        os.symlink(os.path.relpath(src, dst.parent), dst)
        return
    try:
        os.link(src, dst)
    except OSError as e:
        raise DataError(f"{dst}: cannot hard-link {src} ({e.strerror}); rerun with --symlink") from None


def arrange_val(root: str | os.PathLike, labels: str | os.PathLike, meta: str | os.PathLike | None = None,
                classes: str | None = None, symlink: bool = False, progress: bool = True) -> list[str]:
    """Link ROOT/val/<file> into ROOT/val/<wnid>/<file> for the classes (None: the shipped ImageNet-100 list, a
    one-wnid-per-line file, or "all"). Returns a line per outcome for the command to print."""
    from tqdm.auto import tqdm

    val = Path(root).expanduser() / "val"
    if not val.is_dir():
        raise DataError(f"{val}: folder not found; give the ImageNet root that holds the flat official val/")
    of = read_val_labels(labels, meta)
    wanted = sorted(set(of.values())) if classes == "all" else imagenet100_classes(classes)
    unknown = [w for w in wanted if w not in set(of.values())]
    if unknown:
        raise DataError(f"--labels {labels}: no image of {len(unknown)} listed classes ({', '.join(unknown[:3])}); "
                        "is it the ILSVRC-2012 validation list?")
    files = {}  # image name -> file in val/ (the extension as it ships)
    with os.scandir(val) as it:
        for e in it:
            stem = e.name.rsplit(".", 1)[0]
            if e.is_file(follow_symlinks=False) and stem in of:
                files[stem] = e.name
    by_class: dict[str, list[str]] = defaultdict(list)
    for stem, wnid in of.items():
        by_class[wnid].append(stem)
    needed = [s for w in wanted for s in by_class[w]]
    missing = [s for s in needed if s not in files]
    if missing:
        raise DataError(f"{val}: {len(missing)} of the {len(needed)} labelled images of these classes are not there "
                        f"(e.g. {missing[0]}.JPEG); is it the flat official val/?")
    made = kept = 0
    bar = tqdm(total=len(needed), disable=not progress, desc="arrange val/", unit="image", dynamic_ncols=True)
    try:
        for wnid in wanted:
            names = sorted(files[s] for s in by_class[wnid])
            final = val / wnid
            if final.is_dir():
                there = sorted(p.name for p in final.iterdir())
                if there != names:
                    raise DataError(f"{final}: holds {len(there)} files, not the {len(names)} images of {wnid} in "
                                    "the labels; remove the folder and rerun")
                kept += 1
                bar.update(len(names))
                continue
            tmp = val / f".{wnid}.arranging"
            shutil.rmtree(tmp, ignore_errors=True)  # an interrupted run's
            tmp.mkdir()
            for name in names:
                _link(val / name, tmp / name, symlink)
                bar.update(1)
            os.rename(tmp, final)
            made += 1
    finally:
        bar.close()
    return [f"{val}: {made} class folders made, {kept} already there ({len(needed)} images, "
            f"{'symbolic' if symlink else 'hard'} links)",
            f"data.root for this copy: {Path(root).expanduser()}"]
