"""``imagefolder``: any folder of class subfolders, file-backed, with an optional background label per image.

Layout:
  <root>/train/<class>/*.jpg|.jpeg|.png|.bmp|.webp   (split "train")
  <root>/val/<class>/*.jpg|...                       (split "test"; "val" is accepted too)
  <root>/backgrounds.csv                             (optional)
One subfolder per class, the same class names in train/ and val/; folders and files whose names start with
"." and files of other extensions are ignored. Labels are the index of the class in the SORTED class names
(as torchvision's ImageFolder numbers them), so ``class_names[label]`` is the folder name. Links are followed
(out of the root too) and a name need not be UTF-8; a link loop, a broken link or a folder that cannot be read is
one DataError naming it.

``backgrounds.csv``: header ``path,background``, then one row per image: ``path`` relative to ``root`` with
"/" separators (``train/cat/001.png``), ``background`` a name (``grass``). Background ids are the indices of
the SORTED distinct names of the whole file, so train and test agree. [choice] When the file exists it must
give a background to every image of train/ and val/, and every row must name such an image: an image without
one would have no place in the background measures, so a gap is an error naming the first missing path,
never a silent -1. Without the file ``backgrounds`` is None, as for CIFAR.

Images are stored like ImageNet-100's (:func:`bayesncl.data.imagenet.decode_image`: short side resized to
``stored_size``, centre square); training crops ``crop_size`` from them. The per-channel mean and std ([0,1]
units) are those of the train split's stored images, computed once (exactly, from pixel-value counts) and
recorded in ``mean_std.json`` in the prepared copy's folder, bound to the train listing's key: changing a
train image, the class list or ``stored_size`` computes them again, nothing else does.

Prepared copy (as ImageNet-100's, ``data/prepared.py``): :func:`prepare_imagefolder` decodes each split once
into ``<cache_dir>/imagefolder/<S>px-<hash of the resolved root>/`` (``train.json``/``test.json`` manifests,
written last); the loader reads it through a memory map when its manifest matches the listing, else decodes
the files and warns. Background labels are not part of the copy: they are read from the csv at every load.
"""

from __future__ import annotations

import csv
import errno
import hashlib
import json
import math
import os
import sys
import warnings
from pathlib import Path, PurePosixPath
from typing import Sequence

import numpy as np
import torch

from ..core.errors import DataError, LayoutError
from .imageset import ImageSet
from . import imagenet as I
from . import prepared as P

NAME = "imagefolder"  # its name in bayesncl.settings.registry

__all__ = [
    "NAME",
    "BACKGROUND_FILE",
    "BACKGROUND_HEADER",
    "MEAN_STD_FILE",
    "PREPARED_FORMAT",
    "check_imagefolder",
    "compute_mean_std",
    "imagefolder_manifests",
    "load_imagefolder",
    "prepare_imagefolder",
    "prepared_dir",
    "verify_images",
]

BACKGROUND_FILE = "backgrounds.csv"
BACKGROUND_HEADER = ("path", "background")
MEAN_STD_FILE = "mean_std.json"
PREPARED_FORMAT = "bayesncl-imagefolder-prepared"
_MEAN_STD_FORMAT = "bayesncl-imagefolder-mean-std"
_SPLIT_DIR = {"train": "train", "test": "val", "val": "val"}
_LAYOUT = ("<root>/train/<class>/<image> and <root>/val/<class>/<image> (one folder per class, the same classes "
           "in both; images " + ", ".join(I.IMAGE_EXTENSIONS) + ")")

_Listing = tuple[list[str], list[int]]  # (image paths, labels) of one split


def _root_path(root) -> Path:
    if not root:
        raise DataError(f"imagefolder: data.root is not set; expected {_LAYOUT}; set data.root=/path/to/folder")
    return Path(root).expanduser()


def _root(root) -> Path:
    root_p = _root_path(root)
    if not root_p.is_dir():
        raise DataError(f"{root_p}: folder not found; expected {_LAYOUT}; point data.root at that folder")
    return root_p


def _split(split: str) -> str:
    if split not in _SPLIT_DIR:
        raise DataError(f"imagefolder: split must be 'train' or 'test', got {split!r}")
    return "test" if split == "val" else split


def _entries(folder: Path) -> list[os.DirEntry]:
    """The folder's entries; one line naming it where it cannot be read."""
    try:
        with os.scandir(folder) as it:
            return list(it)
    except OSError as exc:
        raise LayoutError(f"{folder}: cannot read the folder ({exc.strerror}); give this user read access to it or "
                        f"remove it; expected {_LAYOUT}") from None


def _is(entry: os.DirEntry, kind: str) -> bool:
    """Whether the entry is (or links to) a folder / file; a link that leads nowhere is one line naming it."""
    try:
        found = entry.is_dir() if kind == "dir" else entry.is_file()
        if not found and entry.is_symlink() and not os.path.exists(entry.path):
            raise FileNotFoundError(errno.ENOENT, "a broken symbolic link")
        return found
    except OSError as exc:
        why = ("a symbolic link that leads back to itself" if exc.errno == errno.ELOOP
               else exc.strerror or str(exc))
        raise LayoutError(f"{entry.path}: {why}; remove the link or point it at "
                        f"{'a class folder' if kind == 'dir' else 'an image'}") from None


def _class_dirs(split_dir: Path) -> list[str]:
    return sorted(e.name for e in _entries(split_dir) if not e.name.startswith(".") and _is(e, "dir"))


def _classes(root_p: Path) -> list[str]:
    """The sorted class names, after checking that train/ and val/ hold the same, non-empty set."""
    found = {}
    for d in ("train", "val"):
        split_dir = root_p / d
        if not split_dir.is_dir():
            raise DataError(f"{split_dir}: folder not found; expected {_LAYOUT}")
        found[d] = _class_dirs(split_dir)
        if not found[d]:
            raise LayoutError(f"{split_dir}: no class subfolders; expected {_LAYOUT}; put each class's images in "
                            f"{split_dir}/<class>/")
    if found["train"] != found["val"]:
        only_t = sorted(set(found["train"]) - set(found["val"]))
        only_v = sorted(set(found["val"]) - set(found["train"]))

        def shown(names):
            return ", ".join(names[:3]) + (" ..." if len(names) > 3 else "") if names else "none"

        raise LayoutError(f"{root_p}: train/ and val/ have different class folders (only in train/: {shown(only_t)}; "
                        f"only in val/: {shown(only_v)}); expected {_LAYOUT}; add or remove class folders so both "
                        f"splits name the same classes")
    return found["train"]


def _list_split(root_p: Path, split: str, classes: list[str]) -> _Listing:
    split_dir = root_p / _SPLIT_DIR[split]
    paths: list[str] = []
    labels: list[int] = []
    for label, c in enumerate(classes):
        folder = split_dir / c
        names = sorted(e.name for e in _entries(folder)  # sorted: order independent of the filesystem
                       if not e.name.startswith(".") and e.name.lower().endswith(I.IMAGE_EXTENSIONS)
                       and _is(e, "file"))
        if not names:
            raise LayoutError(f"{folder}: class folder has no images (looked for {', '.join(I.IMAGE_EXTENSIONS)}); "
                            f"add images or remove the folder from both train/ and val/")
        paths += [str(folder / n) for n in names]
        labels += [label] * len(names)
    return paths, labels


def _rel(root_p: Path, path: str) -> str:
    return Path(path).relative_to(root_p).as_posix()


def _read_backgrounds(root_p: Path) -> dict[str, str] | None:
    """``{relative path: background name}`` from ``backgrounds.csv``, None without the file; rows checked."""
    path = root_p / BACKGROUND_FILE
    if not path.exists():
        return None
    expected = (f"expected the header {','.join(BACKGROUND_HEADER)} then one row per image, its path relative to "
                f"{root_p} (e.g. train/<class>/<image>) and a background name")
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:  # -sig: a spreadsheet's byte-order mark
            rows = list(csv.reader(fh))
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: cannot read the background file ({exc}); {expected}") from None
    header = [h.strip() for h in rows[0]] if rows else None
    if header != list(BACKGROUND_HEADER):
        found = "an empty file" if header is None else f"header {','.join(header)!r}"
        raise DataError(f"{path}: found {found}; {expected}")
    out: dict[str, str] = {}
    for lineno, row in enumerate(rows[1:], start=2):
        if not any(f.strip() for f in row):
            continue  # blank line
        if len(row) != 2 or not row[0].strip() or not row[1].strip():
            raise DataError(f"{path}: line {lineno} is {','.join(row)!r}; {expected}; fix or remove that line")
        rel = PurePosixPath(row[0].strip()).as_posix()
        if rel in out:
            raise DataError(f"{path}: line {lineno}: {rel} has a second row; give each image one background")
        out[rel] = row[1].strip()
    return out


def _backgrounds(root_p: Path, lists: dict[str, _Listing]) -> tuple[dict[str, list[int]], list[str]] | None:
    """Per split, the background id of each image, and the sorted background names; None without the file."""
    table = _read_backgrounds(root_p)
    if table is None:
        return None
    path = root_p / BACKGROUND_FILE
    rels = {s: [_rel(root_p, p) for p in paths] for s, (paths, _) in lists.items()}
    missing = [r for s in ("train", "test") for r in rels[s] if r not in table]
    if missing:
        more = f" (and {len(missing) - 1} more images)" if len(missing) > 1 else ""
        raise DataError(f"{path}: no row for {missing[0]}{more}; when the file exists every image under train/ and "
                        f"val/ needs a row path,background; add the rows or remove the file")
    known = set(rels["train"]) | set(rels["test"])
    stray = [r for r in table if r not in known]
    if stray:
        more = f" (and {len(stray) - 1} more rows)" if len(stray) > 1 else ""
        raise DataError(f"{path}: the row for {stray[0]}{more} names no image of {_LAYOUT}; fix the path (relative "
                        f"to {root_p}) or remove the row")
    names = sorted(set(table.values()))
    ids = {n: i for i, n in enumerate(names)}
    return {s: [ids[table[r]] for r in rels[s]] for s in rels}, names


def check_imagefolder(root) -> None:
    """Cheap: the root, train/ and val/ with the same class folders, and the background file's header."""
    root_p = _root(root)
    _classes(root_p)
    bg = root_p / BACKGROUND_FILE
    if bg.exists():
        try:
            with open(bg, newline="", encoding="utf-8-sig") as fh:
                header = next(csv.reader(fh), None)
        except (OSError, UnicodeDecodeError) as exc:
            raise LayoutError(f"{bg}: cannot read the background file ({exc}); expected a csv with the header "
                            f"{','.join(BACKGROUND_HEADER)}") from None
        if header is None or [h.strip() for h in header] != list(BACKGROUND_HEADER):
            found = "an empty file" if header is None else f"header {','.join(header)!r}"
            raise LayoutError(f"{bg}: found {found}; expected the header {','.join(BACKGROUND_HEADER)} then one row "
                            f"per image (its path relative to {root_p} and a background name)")


def verify_images(data_cfg: dict) -> None:
    """Every image of train/ and val/ identified and read through before any is decoded (the workflow's pre-flight
    runs this where the prepared copy is still to be made): PIL's verify, which checks a PNG's chunks and their
    checksums and a JPEG's markers without decoding, so a file that is no image or a damaged PNG is one line naming
    it on the console instead of a failed prepare job. It reads each file once; a JPEG whose coded data alone is
    damaged is still found only when prepare decodes it (one line in that job's log)."""
    from PIL import Image, UnidentifiedImageError

    root_p = _root(data_cfg.get("root"))
    classes = _classes(root_p)
    for split in ("train", "test"):
        for path in _list_split(root_p, split, classes)[0]:
            try:
                with Image.open(path) as im:
                    im.verify()
            except UnidentifiedImageError:
                raise LayoutError(f"{path}: not a decodable image (no image format PIL reads); replace the file with "
                                  "the image or remove it") from None
            except Exception as exc:  # noqa: BLE001 - PIL raises OSError, SyntaxError, ValueError ... for a bad file
                why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise LayoutError(f"{path}: not a decodable image ({why}); replace the file with the image or remove "
                                  "it") from None


def _sizes(stored_size, crop_size=None) -> tuple[int, int]:
    s = int(stored_size)
    c = s if crop_size is None else int(crop_size)
    if s < 1 or c < 1:
        raise DataError(f"imagefolder: stored_size {s} and crop_size {c} must be positive")
    if c > s:
        raise DataError(f"imagefolder: crop_size {c} is larger than stored_size {s}; crops are taken from the "
                        f"stored image, so set crop_size <= stored_size")
    return s, c


def prepared_dir(root, stored_size: int, cache_dir=None) -> Path:
    """Where this root's prepared splits and mean/std live at this stored size (nothing is read there).

    ``<cache_dir>/imagefolder/<S>px-<hash of the resolved root>``; ``cache_dir`` None: ``$BAYESNCL_CACHE``,
    else ``~/.cache/bayesncl``. The class list is not in the name: the listing key in each manifest covers it.
    """
    from .synthetic import default_cache_dir

    tag = hashlib.sha256(json.dumps([str(_root_path(root).resolve())]).encode()).hexdigest()[:12]
    base = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    return base / NAME / f"{int(stored_size)}px-{tag}"


def imagefolder_manifests(root, stored_size: int, cache_dir=None) -> list[str]:
    """The manifest paths of the prepared train and test splits (what the workflow's prepare rule makes)."""
    folder = prepared_dir(root, stored_size, cache_dir)
    return [str(folder / f"{split}.json") for split in I.PREPARED_SPLITS]


def _key(root_p: Path, split: str, classes: list[str], listing: _Listing, stored_size: int) -> str:
    # The decoder is ImageNet-100's, so its version is shared: a change to decode_image invalidates both.
    header = {"format": PREPARED_FORMAT, "decode": I.DECODE_VERSION, "stored_size": stored_size, "classes": classes}
    return P.listing_key(header, root_p / _SPLIT_DIR[split], *listing)


def _open(root_p: Path, split: str, classes, listing: _Listing, bg: list[int] | None, stored_size: int,
          cache_dir, prepared: bool, warn: bool):
    """The split's dataset: the prepared copy when valid (and ``prepared``), else the files."""
    paths, labels = listing
    if prepared:
        folder = prepared_dir(root_p, stored_size, cache_dir)
        data, why = P.open_copy(folder, split, fmt=PREPARED_FORMAT, count=len(paths), stored_size=stored_size,
                                key=lambda: _key(root_p, split, classes, listing, stored_size))
        if data is not None:
            return I.PreparedImages(data, stored_size, labels, bg)
        if warn:
            warnings.warn(f"imagefolder {split}: the prepared copy is not used ({why}); decoding the images, several "
                          f"times slower per core. prepare_imagefolder (the workflow's prepare rule) makes it once.",
                          RuntimeWarning, stacklevel=5)  # the caller of load_imagefolder
    return I.ImageFileDataset(paths, labels, stored_size, bg)


def _image_set(dataset, listing: _Listing, bg, names, classes, mean, std, crop_size: int) -> ImageSet:
    return ImageSet(images=None, dataset=dataset, labels=torch.tensor(listing[1], dtype=torch.int64),
                    backgrounds=torch.tensor(bg, dtype=torch.int64) if bg is not None else None,
                    num_classes=len(classes), num_backgrounds=len(names) if names else 0, mean=mean, std=std,
                    crop_size=crop_size, name=NAME, class_names=list(classes),
                    background_names=list(names) if names else None)


def compute_mean_std(ds: ImageSet, batch_size: int = 64) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and (population) std, in [0,1] units, of every pixel of every stored image of ``ds``.

    Exact: from per-channel counts of the 256 pixel values, so the result does not depend on the order or the
    batch size, and the prepared copy and the decoded files give the same numbers.
    """
    from .feed import iter_batches

    counts = np.zeros((3, 256), dtype=np.int64)
    for x, _, _ in iter_batches(ds, batch_size, shuffle=False, seed=0, drop_last=False, device="cpu"):
        xb = x.numpy()
        for c in range(3):
            counts[c] += np.bincount(xb[:, c].ravel(), minlength=256)
    v = np.arange(256, dtype=np.int64)
    mean, std = [], []
    for c in range(3):
        n, s1, s2 = int(counts[c].sum()), int(counts[c] @ v), int(counts[c] @ (v * v))
        if n == 0:
            raise DataError(f"imagefolder: no pixels to compute the mean and std from ({ds.name} train split)")
        mean.append(s1 / n / 255)
        std.append(math.sqrt((n * s2 - s1 * s1) / (n * n)) / 255)  # integers until here: exact variance
    return tuple(mean), tuple(std)


def _read_mean_std(path: Path, key: str):
    try:
        m = json.loads(path.read_text())
        if m.get("format") == _MEAN_STD_FORMAT and m.get("key") == key:
            mean, std = tuple(float(v) for v in m["mean"]), tuple(float(v) for v in m["std"])
            if len(mean) == len(std) == 3 and all(math.isfinite(v) for v in mean + std):
                return mean, std
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        pass
    return None


def _mean_std(root_p: Path, classes, train: _Listing, train_set, stored_size: int, cache_dir):
    """The train split's mean and std: recorded ones when their key matches, else computed once and recorded."""
    from ..core.atomic import atomic_write_text

    key = _key(root_p, "train", classes, train, stored_size)
    folder = prepared_dir(root_p, stored_size, cache_dir)
    path = folder / MEAN_STD_FILE
    got = _read_mean_std(path, key)
    if got is not None:
        return got
    mean, std = compute_mean_std(train_set())
    P.make_dir(folder)
    record = {"format": _MEAN_STD_FORMAT, "key": key, "stored_size": stored_size, "count": len(train[0]),
              "classes": classes, "mean": list(mean), "std": list(std)}
    atomic_write_text(path, json.dumps(record, indent=1) + "\n")
    return mean, std


def _load(root, split: str, stored_size: int, crop_size: int, cache_dir, prepared: bool, warn: bool) -> ImageSet:
    split = _split(split)
    stored_size, crop_size = _sizes(stored_size, crop_size)
    root_p = _root(root)
    classes = _classes(root_p)
    lists = {s: _list_split(root_p, s, classes) for s in I.PREPARED_SPLITS}  # both: backgrounds, mean/std
    bgs = _backgrounds(root_p, lists)
    ids, names = bgs if bgs is not None else (None, None)

    def one(s: str, warn_s: bool) -> ImageSet:
        bg = ids[s] if ids is not None else None
        dataset = _open(root_p, s, classes, lists[s], bg, stored_size, cache_dir, prepared, warn_s)
        return _image_set(dataset, lists[s], bg, names, classes, (0.0,) * 3, (1.0,) * 3, crop_size)

    ds = one(split, warn)
    mean, std = _mean_std(root_p, classes, lists["train"], (lambda: ds) if split == "train" else
                          (lambda: one("train", False)), stored_size, cache_dir)
    ds.mean, ds.std = mean, std
    return ds


def load_imagefolder(root, split: str, *, stored_size: int, crop_size: int, cache_dir=None,
                     prepared: bool = True) -> ImageSet:
    """``split`` "train" reads ``train/``, "test" (or "val") reads ``val/``; see the module docstring.

    With ``prepared`` (default) the split is read from its prepared copy when a valid one exists
    (:func:`prepare_imagefolder`); the images are the same either way. The mean and std are the recorded ones
    of the train split, computed here first if there are none for this listing (decoding the train images
    unless the train copy is prepared).
    """
    return _load(root, split, stored_size, crop_size, cache_dir, prepared, warn=True)


def prepare_imagefolder(root, *, stored_size: int, cache_dir=None, splits: Sequence[str] = ("train", "test"),
                        progress: bool = True, workers: int = 0, batch_size: int = 64,
                        verify: bool = False) -> dict[str, tuple[Path, bool | list[int]]]:
    """Decode each split once into the prepared copy and record the train split's mean and std; returns
    ``{split: (manifest path, decoded)}`` as :func:`bayesncl.data.prepared.prepare_copy` (decoded False: a valid
    copy was there; a list: the blocks ``verify`` repaired). ``progress``: one line per split on stderr.
    ``workers`` decoding processes (0: in this process)."""
    stored_size, _ = _sizes(stored_size)
    root_p = _root(root)
    classes = _classes(root_p)
    _read_backgrounds(root_p)  # a bad background file fails now, not at the first training
    folder = prepared_dir(root_p, stored_size, cache_dir)
    out: dict[str, tuple[Path, bool | list[int]]] = {}
    for split in dict.fromkeys(_split(s) for s in splits):
        paths, labels = listing = _list_split(root_p, split, classes)
        out[split] = P.prepare_copy(
            folder, split, fmt=PREPARED_FORMAT, decode_version=I.DECODE_VERSION,
            key=_key(root_p, split, classes, listing, stored_size), paths=paths, stored_size=stored_size,
            dataset=I.ImageFileDataset(paths, labels, stored_size),
            decode=lambda i, paths=paths: I.decode_image(paths[i], stored_size).numpy().tobytes(),
            what=NAME, manifest_fields={"root": str(root_p), "classes": classes}, workers=workers,
            batch_size=batch_size, verify=verify)
        if split == "train":  # from the copy just made: a read, no decoding
            _mean_std(root_p, classes, listing, lambda: _image_set(
                _open(root_p, "train", classes, listing, None, stored_size, cache_dir, True, False), listing, None,
                None, classes, (0.0,) * 3, (1.0,) * 3, stored_size), stored_size, cache_dir)
        if progress:
            manifest, decoded = out[split]
            state = (f"repaired {len(decoded)} block(s)" if isinstance(decoded, list)
                     else "prepared" if decoded else "already prepared")
            print(f"imagefolder {split}: {state}: {manifest}", file=sys.stderr)
    return out
