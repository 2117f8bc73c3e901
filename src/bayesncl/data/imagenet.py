"""ImageNet-100 (the CMC 100-class subset of ImageNet-1k), file-backed; also the JPEG dataset class.

Layout: an ImageNet-1k tree of class folders,
  <root>/train/<wnid>/*.JPEG   (split "train")
  <root>/val/<wnid>/*.JPEG     (split "test"; the flat official val/ is sorted into class folders
                                once by `bayesncl arrange-val`, bayesncl.data.ilsvrc_val)
of which only the wnids in ``imagenet100_classes.txt`` (shipped with the package) are read.
Labels are the index of the wnid in the SORTED class list, as torchvision's ImageFolder would number
a folder holding just those classes.

[choice] Images are stored at ``stored_size`` (default 256): decoded with PIL, short side resized
to ``stored_size`` (bicubic, antialiased), centre-cropped to a square.  Random-resized-crop to 224 then
happens on the device from that 256x256 image (so crops see the central square of the photo, not the
full frame); evaluation centre-crops 224 of 256, the standard Resize(256)+CenterCrop(224).

``classes`` (argument or ``data.classes``) overrides the class list: a list of wnids or a path to a
one-wnid-per-line file.  Used by tests and for other subsets; every listed class must be present.

Prepared copy ([choice], docs/METHOD.md section 3): :func:`prepare_imagenet100` (``bayesncl prepare-imagenet``)
decodes every image of a split once with :func:`decode_image` and stores the result, uint8 [N,3,S,S], in one
file under ``<cache_dir>/imagenet100/``; the loader then reads that file through a memory map instead of
decoding JPEGs (same pixels, several times the images/s per core: docs/BENCHMARKS.md).  The copy is used
only when its manifest (written last, atomically) names the same key: a hash of every source file's
relative path, byte size and label, the class list, the stored size and the decoder version, and only when
its data file is that split's, of the right size, and the sampled block checksums match (``data/prepared.py``;
``bayesncl prepare-imagenet --verify`` checks every block and mends those that differ).  Otherwise the loader
decodes the JPEGs as before and warns.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from importlib import resources
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from torch.utils.data import Dataset

from ..core.errors import DataError
from .imageset import IMAGENET_MEAN, IMAGENET_STD, ImageSet
from . import prepared as P

NAME = "imagenet100"  # its name in bayesncl.settings.registry

__all__ = [
    "IMAGE_EXTENSIONS",
    "ImageFileDataset",
    "PreparedImages",
    "decode_image",
    "imagenet100_classes",
    "check_imagenet100",
    "load_imagenet100",
    "prepare_imagenet100",
    "prepared_dir",
    "make_prepared_dir",
    "prepared_manifests",
    "PREPARED_SPLITS",
]

IMAGE_EXTENSIONS = (".jpeg", ".jpg", ".png", ".bmp", ".webp")
_SPLIT_DIR = {"train": "train", "test": "val", "val": "val"}
_LAYOUT = "<root>/train/<wnid>/*.JPEG and <root>/val/<wnid>/*.JPEG (ImageNet-1k class folders)"

# The prepared copy. Bump DECODE_VERSION whenever decode_image's output changes: old copies then no longer
# match and are never read.
PREPARED_FORMAT = "bayesncl-imagenet100-prepared"
DECODE_VERSION = 1
PREPARED_SPLITS = ("train", "test")


def decode_image(path: str | os.PathLike, stored_size: int) -> torch.Tensor:
    """uint8 [3, S, S]: RGB, short side resized to S (bicubic), centre square crop."""
    from PIL import Image

    try:
        with Image.open(path) as im:
            # JPEG DCT-domain downscale to >= S on both sides: much faster decode, then exact resize.
            im.draft("RGB", (stored_size, stored_size))
            im = im.convert("RGB")
            w, h = im.size
            scale = stored_size / min(w, h)
            nw, nh = max(stored_size, round(w * scale)), max(stored_size, round(h * scale))
            if (nw, nh) != (w, h):
                im = im.resize((nw, nh), Image.Resampling.BICUBIC, reducing_gap=None)
            left, top = (nw - stored_size) // 2, (nh - stored_size) // 2
            im = im.crop((left, top, left + stored_size, top + stored_size))
            arr = np.asarray(im, dtype=np.uint8)
    except FileNotFoundError as exc:
        raise DataError(f"{path}: image file not found") from exc
    except OSError as exc:
        raise DataError(f"{path}: cannot decode image ({exc})") from exc
    return torch.from_numpy(arr.copy()).permute(2, 0, 1).contiguous()


class ImageFileDataset(Dataset):
    """Items ``(uint8 [3,S,S], label, background)``; background -1 when ``backgrounds`` is None."""

    def __init__(
        self,
        paths: Sequence[str],
        labels: Sequence[int],
        stored_size: int,
        backgrounds: Sequence[int] | None = None,
    ) -> None:
        if len(paths) != len(labels) or (backgrounds is not None and len(backgrounds) != len(paths)):
            raise ValueError("paths, labels and backgrounds must have the same length")
        # Plain lists of str/int: cheap to pickle into DataLoader workers.
        self.paths = [str(p) for p in paths]
        self.labels = [int(y) for y in labels]
        self.backgrounds = [int(b) for b in backgrounds] if backgrounds is not None else None
        self.stored_size = int(stored_size)

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int):
        x = decode_image(self.paths[i], self.stored_size)
        bg = self.backgrounds[i] if self.backgrounds is not None else -1
        return x, self.labels[i], bg


class PreparedImages(Dataset):
    """A prepared split: uint8 [N,3,S,S] in one raw file, read through a memory map.

    Items as :class:`ImageFileDataset`'s (background -1 when ``backgrounds`` is None); :meth:`fetch` reads a
    whole batch (``iter_batches`` uses it, in threads). The map is opened on first use in each process and
    never pickled.
    """

    def __init__(self, path: str | os.PathLike, stored_size: int, labels: Sequence[int],
                 backgrounds: Sequence[int] | None = None) -> None:
        self.path = str(path)
        self.stored_size = int(stored_size)
        self.labels = torch.as_tensor(list(labels), dtype=torch.int64)
        self.backgrounds = (torch.as_tensor(list(backgrounds), dtype=torch.int64) if backgrounds is not None
                            else torch.full_like(self.labels, -1))
        if self.backgrounds.shape != self.labels.shape:
            raise ValueError("labels and backgrounds must have the same length")
        self._images: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_images": None}

    def images(self) -> np.ndarray:
        if self._images is None:
            s = self.stored_size
            self._images = np.memmap(self.path, dtype=np.uint8, mode="r", shape=(len(self), 3, s, s))
        return self._images

    def __getitem__(self, i: int):
        i = int(i)
        return torch.from_numpy(np.array(self.images()[i])), int(self.labels[i]), int(self.backgrounds[i])

    def fetch(self, idx, pin: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(x uint8 [B,3,S,S], y [B], bg [B])`` for the indices ``idx``, in their order; ``pin``:
        ``x`` in page-locked memory, ready for an asynchronous copy to the GPU."""
        idx = torch.as_tensor(idx, dtype=torch.int64)
        images, s = self.images(), self.stored_size
        x = torch.empty((len(idx), 3, s, s), dtype=torch.uint8, pin_memory=pin)
        out = x.numpy()
        for j, i in enumerate(idx.tolist()):  # one contiguous copy per image (numpy releases the GIL)
            out[j] = images[i]
        y, bg = self.labels[idx], self.backgrounds[idx]
        if pin:  # all three: a copy from pageable memory would wait for the GPU's queue to drain
            y, bg = y.pin_memory(), bg.pin_memory()
        return x, y, bg


def imagenet100_classes(classes: str | os.PathLike | Sequence[str] | None = None) -> list[str]:
    """The wnid list: shipped file when ``classes`` is None, else the given list or file."""
    if classes is None:
        text = resources.files("bayesncl.data").joinpath("imagenet100_classes.txt").read_text()
        source = "imagenet100_classes.txt (shipped)"
    elif isinstance(classes, (str, os.PathLike)):
        path = Path(classes).expanduser()
        if not path.is_file():
            raise DataError(f"data.classes: class list file {path} not found (expected one wnid per line)")
        text, source = path.read_text(), str(path)
    else:
        text, source = "\n".join(str(c) for c in classes), "data.classes"
    wnids = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
    if not wnids:
        raise DataError(f"{source}: the class list is empty")
    if len(set(wnids)) != len(wnids):
        raise DataError(f"{source}: the class list has duplicate wnids")
    return sorted(wnids)


def _require_root(root) -> Path:
    if not root:
        raise DataError(f"data.root is not set: ImageNet-100 is read from {_LAYOUT}; set data.root=/path/to/imagenet")
    return Path(root).expanduser()


def _missing_classes(split_dir: Path, wnids: list[str]) -> list[str]:
    return [w for w in wnids if not (split_dir / w).is_dir()]


def _check_split_dir(root: Path, split_dir: Path, wnids: list[str]) -> None:
    if not split_dir.is_dir():
        raise DataError(f"{split_dir}: folder not found; expected {_LAYOUT} under data.root={root}")
    missing = _missing_classes(split_dir, wnids)
    if missing:
        shown = ", ".join(str(split_dir / w) for w in missing[:3]) + (" ..." if len(missing) > 3 else "")
        raise DataError(
            f"ImageNet-100: {len(missing)} of {len(wnids)} class folders missing: {shown}; expected {_LAYOUT}"
            " with every wnid of the class list (the flat official val/ is sorted into class folders by "
            "`bayesncl arrange-val ROOT --labels LOC_val_solution.csv`)"
        )


def check_imagenet100(root, classes=None) -> None:
    """Cheap: the split folders and every class folder exist."""
    root_p = _require_root(root)
    if not root_p.is_dir():
        raise DataError(f"{root_p}: data.root not found; expected {_LAYOUT}")
    wnids = imagenet100_classes(classes)
    for d in ("train", "val"):
        _check_split_dir(root_p, root_p / d, wnids)


def _list_images(folder: Path) -> list[str]:
    with os.scandir(folder) as it:
        names = [e.name for e in it if e.is_file() and e.name.lower().endswith(IMAGE_EXTENSIONS)]
    return [str(folder / n) for n in sorted(names)]  # sorted: order independent of the filesystem


def _listing(root, split: str, classes) -> tuple[Path, list[str], list[str], list[int]]:
    """``(split folder, wnids, image paths, labels)`` of a split, checked as the loader needs it."""
    if split not in _SPLIT_DIR:
        raise DataError(f"ImageNet-100: split must be 'train' or 'test', got {split!r}")
    root_p = _require_root(root)
    wnids = imagenet100_classes(classes)
    split_dir = root_p / _SPLIT_DIR[split]
    _check_split_dir(root_p, split_dir, wnids)
    paths: list[str] = []
    labels: list[int] = []
    for label, w in enumerate(wnids):
        files = _list_images(split_dir / w)
        if not files:
            raise DataError(
                f"{split_dir / w}: class folder has no images (looked for {', '.join(IMAGE_EXTENSIONS)})"
            )
        paths += files
        labels += [label] * len(files)
    return split_dir, wnids, paths, labels


def prepared_dir(root, stored_size: int = 256, classes=None, cache_dir=None) -> Path:
    """Where the prepared splits of this root, class list and stored size live (nothing is read there).

    ``<cache_dir>/imagenet100/<S>px-<hash of the resolved root and the class list>``; ``cache_dir`` None:
    ``$BAYESNCL_CACHE``, else ``~/.cache/bayesncl`` (as the synthetic set's cache).
    """
    from .synthetic import default_cache_dir

    root_p = _require_root(root).resolve()
    tag = hashlib.sha256(json.dumps([str(root_p), imagenet100_classes(classes)]).encode()).hexdigest()[:12]
    base = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    return base / "imagenet100" / f"{int(stored_size)}px-{tag}"


def prepared_manifests(data_cfg: dict) -> list[str]:
    """The manifest paths of the prepared splits a run config reads (train, test); [] unless ImageNet-100."""
    if data_cfg.get("dataset") != NAME:
        return []
    folder = prepared_dir(data_cfg.get("root"), int(data_cfg.get("imagenet_stored_size", 256)),
                          data_cfg.get("classes"), data_cfg.get("cache_dir"))
    return [str(folder / f"{split}.json") for split in PREPARED_SPLITS]


SMOKE_CLASSES = 10  # the smoke run's share of the class list: a tenth of ImageNet-100 is decoded and read


def smoke_subset(data_cfg: dict) -> dict:
    """The smoke run's data settings: the first SMOKE_CLASSES classes of the run's list (never all 100 decoded)."""
    return {"classes": imagenet100_classes(data_cfg.get("classes"))[:SMOKE_CLASSES]}


def _listing_key(split_dir: Path, wnids: list[str], paths: list[str], labels: list[int], stored_size: int) -> str:
    """What a prepared split must match: every file's relative path, byte size and label, the class list,
    the stored size and the decoder version (the header's keys and order fix existing copies' keys)."""
    header = {"format": PREPARED_FORMAT, "decode": DECODE_VERSION, "stored_size": stored_size, "classes": wnids}
    return P.listing_key(header, split_dir, paths, labels)


make_prepared_dir = P.make_dir  # its old name and home (cli/main.py, tests)


def prepare_imagenet100(
    root,
    split: str,
    *,
    stored_size: int = 256,
    classes=None,
    cache_dir=None,
    workers: int = 0,
    batch_size: int = 64,
    verify: bool = False,
) -> tuple[Path, bool]:
    """Decode every image of ``split`` once into the prepared copy; returns ``(manifest path, decoded)``.

    Nothing is decoded when a valid copy exists (``decoded`` False); ``verify`` checks every block and mends
    those that differ (``decoded`` is then the list of repaired blocks): :func:`bayesncl.data.prepared.prepare_copy`.
    """
    if workers < 0:
        raise DataError(f"--workers: {workers} decoding processes; give 0 (decode in this process) or more")
    stored_size = int(stored_size)
    split_dir, wnids, paths, labels = _listing(root, split, classes)
    key = _listing_key(split_dir, wnids, paths, labels, stored_size)
    return P.prepare_copy(
        prepared_dir(root, stored_size, classes, cache_dir), "test" if split == "val" else split,
        fmt=PREPARED_FORMAT, decode_version=DECODE_VERSION, key=key, paths=paths, stored_size=stored_size,
        dataset=ImageFileDataset(paths, labels, stored_size),
        decode=lambda i: decode_image(paths[i], stored_size).numpy().tobytes(), what="ImageNet-100",
        manifest_fields={"split_dir": str(split_dir), "classes": wnids}, workers=workers, batch_size=batch_size,
        verify=verify)


def load_imagenet100(
    root,
    split: str,
    *,
    stored_size: int = 256,
    crop_size: int = 224,
    classes: str | os.PathLike | Sequence[str] | None = None,
    cache_dir: str | os.PathLike | None = None,
    prepared: bool = True,
) -> ImageSet:
    """``split`` "train" reads ``train/``, "test" (or "val") reads ``val/``.

    With ``prepared`` (default) the split is read from its prepared copy when a valid one exists
    (:func:`prepare_imagenet100`); the images are the same either way.
    """
    stored_size = int(stored_size)
    split_dir, wnids, paths, labels = _listing(root, split, classes)
    dataset: Dataset = ImageFileDataset(paths, labels, stored_size)
    if prepared:
        folder = prepared_dir(root, stored_size, classes, cache_dir)
        name = "test" if split in ("test", "val") else "train"
        manifest_path = folder / f"{name}.json"
        if manifest_path.is_file():
            data, why = P.open_copy(folder, name, fmt=PREPARED_FORMAT, count=len(paths), stored_size=stored_size,
                                    key=lambda: _listing_key(split_dir, wnids, paths, labels, stored_size))
            if data is not None:
                dataset = PreparedImages(data, stored_size, labels)
            else:
                warnings.warn(f"ImageNet-100 {name}: the prepared copy in {folder} is not used ({why}); decoding "
                              f"the JPEGs instead. Rerun `bayesncl prepare` with this config.",
                              RuntimeWarning, stacklevel=2)
        else:
            warnings.warn(f"ImageNet-100 {name}: no prepared copy ({manifest_path}); decoding the JPEGs, several "
                          f"times slower per core. `bayesncl prepare` with this config makes it once.",
                          RuntimeWarning, stacklevel=2)
    return ImageSet(
        images=None,
        dataset=dataset,
        labels=torch.tensor(labels, dtype=torch.int64),
        backgrounds=None,
        num_classes=len(wnids),
        num_backgrounds=0,
        mean=IMAGENET_MEAN,
        std=IMAGENET_STD,
        crop_size=int(crop_size),
        name=NAME,
        class_names=wnids,
    )
