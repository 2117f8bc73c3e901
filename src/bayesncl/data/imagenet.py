"""ImageNet-100 (the CMC 100-class subset of ImageNet-1k), file-backed; also the JPEG dataset class.

Layout: an ImageNet-1k tree of class folders,
  <root>/train/<wnid>/*.JPEG   (split "train")
  <root>/val/<wnid>/*.JPEG     (split "test"; the flat official val/ must first be sorted into
                                class folders, e.g. with the usual valprep.sh)
of which only the wnids in ``imagenet100_classes.txt`` (shipped with the package) are read.
Labels are the index of the wnid in the SORTED class list, as torchvision's ImageFolder would number
a folder holding just those classes.

[choice] Images are stored at ``stored_size`` (default 256): decoded with PIL, short side resized
to ``stored_size`` (bicubic, antialiased), centre-cropped to a square.  Random-resized-crop to 224 then
happens on the device from that 256x256 image (so crops see the central square of the photo, not the
full frame); evaluation centre-crops 224 of 256, the standard Resize(256)+CenterCrop(224).

``classes`` (argument or ``data.classes``) overrides the class list: a list of wnids or a path to a
one-wnid-per-line file.  Used by tests and for other subsets; every listed class must be present.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from torch.utils.data import Dataset

from . import IMAGENET_MEAN, IMAGENET_STD, DataError, ImageSet

__all__ = [
    "IMAGE_EXTENSIONS",
    "ImageFileDataset",
    "decode_image",
    "imagenet100_classes",
    "check_imagenet100",
    "load_imagenet100",
]

IMAGE_EXTENSIONS = (".jpeg", ".jpg", ".png", ".bmp", ".webp")
_SPLIT_DIR = {"train": "train", "test": "val", "val": "val"}
_LAYOUT = "<root>/train/<wnid>/*.JPEG and <root>/val/<wnid>/*.JPEG (ImageNet-1k class folders)"


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
            " with every wnid of the class list (val/ must be sorted into class folders)"
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


def load_imagenet100(
    root,
    split: str,
    *,
    stored_size: int = 256,
    crop_size: int = 224,
    classes: str | os.PathLike | Sequence[str] | None = None,
) -> ImageSet:
    """``split`` "train" reads ``train/``, "test" (or "val") reads ``val/``."""
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
    return ImageSet(
        images=None,
        dataset=ImageFileDataset(paths, labels, stored_size),
        labels=torch.tensor(labels, dtype=torch.int64),
        backgrounds=None,
        num_classes=len(wnids),
        num_backgrounds=0,
        mean=IMAGENET_MEAN,
        std=IMAGENET_STD,
        crop_size=int(crop_size),
        name="imagenet100",
        class_names=wnids,
    )
