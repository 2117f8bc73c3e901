"""CIFAR-10 / CIFAR-100 from torchvision's on-disk format, as in-memory uint8 [N,3,32,32] tensors.

Layout (what ``torchvision.datasets.CIFAR10/100(root)`` reads):
  <root>/cifar-10-batches-py/{data_batch_1..5, test_batch, batches.meta}
  <root>/cifar-100-python/{train, test, meta}
Each batch file is a pickle of a dict with ``data`` (uint8 [n, 3072], channel-major RGB) and
``labels`` (CIFAR-10) or ``fine_labels`` (CIFAR-100).

[choice] With ``download=False`` the pickles are read here directly, with the same parsing as
torchvision but without its md5 check of every file (that check hashes ~180 MB per load and rejects
the tiny fixtures the tests write).  With ``download=True`` torchvision's dataset class fetches and
verifies the archive, then the same files are read.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import torch

from ..core.errors import DataError
from .imageset import CIFAR10_MEAN, CIFAR10_STD, CIFAR100_MEAN, CIFAR100_STD, ImageSet

__all__ = ["CIFAR_LAYOUT", "cifar_files", "check_cifar", "load_cifar"]

CIFAR_LAYOUT = {
    "cifar10": {
        "folder": "cifar-10-batches-py",
        "train": [f"data_batch_{i}" for i in range(1, 6)],
        "test": ["test_batch"],
        "meta": ("batches.meta", "label_names"),
        "label_key": "labels",
        "num_classes": 10,
        "mean": CIFAR10_MEAN,
        "std": CIFAR10_STD,
        "pretty": "CIFAR-10",
        "expect": "<root>/cifar-10-batches-py/data_batch_1..5, test_batch, batches.meta",
    },
    "cifar100": {
        "folder": "cifar-100-python",
        "train": ["train"],
        "test": ["test"],
        "meta": ("meta", "fine_label_names"),
        "label_key": "fine_labels",
        "num_classes": 100,
        "mean": CIFAR100_MEAN,
        "std": CIFAR100_STD,
        "pretty": "CIFAR-100",
        "expect": "<root>/cifar-100-python/train, test, meta",
    },
}


def _layout(name: str) -> dict:
    if name not in CIFAR_LAYOUT:
        raise DataError(f"data.dataset: {name!r} is not a CIFAR dataset (cifar10, cifar100)")
    return CIFAR_LAYOUT[name]


def cifar_files(root: str | os.PathLike, name: str) -> list[Path]:
    """Every file the loader reads, in order: train batches, test batches, meta."""
    lay = _layout(name)
    folder = Path(root).expanduser() / lay["folder"]
    return [folder / f for f in lay["train"] + lay["test"] + [lay["meta"][0]]]


def _expected(lay: dict, download: bool) -> str:
    fix = (
        "pass data.download=true to fetch it"
        if not download
        else "check the network, or place the extracted archive there yourself"
    )
    return f"expected {lay['expect']} (torchvision's {lay['pretty']} format); {fix}"


def _require_root(root, lay: dict) -> Path:
    if not root:
        raise DataError(
            f"data.root is not set: {lay['pretty']} is read from "
            f"{lay['expect']} (torchvision's format); set data.root=/path/to/cifar"
        )
    return Path(root).expanduser()


def check_cifar(root: str | os.PathLike | None, name: str, download: bool = False) -> None:
    """Raise :class:`DataError` unless every file exists (or ``download`` will fetch them)."""
    lay = _layout(name)
    root_p = _require_root(root, lay)
    missing = [p for p in cifar_files(root_p, name) if not p.is_file()]
    if not missing:
        return
    if download:
        # torchvision will download into root: it must be creatable/writable.
        probe = root_p
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        if not os.access(probe, os.W_OK):
            raise DataError(f"{root_p}: not writable, cannot download {lay['pretty']} there")
        return
    names = ", ".join(str(p) for p in missing[:3]) + (" ..." if len(missing) > 3 else "")
    raise DataError(f"{lay['pretty']} not found: missing {names}; {_expected(lay, download)}")


def _unpickle(path: Path) -> dict:
    try:
        with open(path, "rb") as fh:
            obj = pickle.load(fh, encoding="latin1")  # the files are Python-2 pickles
    except FileNotFoundError:
        raise
    except Exception as exc:
        raise DataError(f"{path}: not a readable CIFAR pickle ({type(exc).__name__}: {exc})") from exc
    if not isinstance(obj, dict):
        raise DataError(f"{path}: expected a pickled dict, got {type(obj).__name__}")
    # Tolerate bytes keys (files pickled with encoding='bytes' conventions).
    return {(k.decode("latin1") if isinstance(k, bytes) else k): v for k, v in obj.items()}


def _read_batch(path: Path, label_key: str) -> tuple[np.ndarray, np.ndarray]:
    entry = _unpickle(path)
    for key in ("data", label_key):
        if key not in entry:
            raise DataError(f"{path}: missing key {key!r} (found {sorted(entry)}); the file is not in CIFAR format")
    data = np.asarray(entry["data"])
    labels = np.asarray(entry[label_key], dtype=np.int64)
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
        raise DataError(f"{path}: 'data' must be uint8 [n, 3072], got {data.dtype} {list(data.shape)}")
    if labels.shape != (data.shape[0],):
        raise DataError(f"{path}: {label_key!r} has {labels.size} entries for {data.shape[0]} images")
    return data.reshape(-1, 3, 32, 32), labels


def load_cifar(root: str | os.PathLike | None, name: str, split: str, download: bool = False) -> ImageSet:
    """Load ``split`` ("train" or "test") of ``name`` ("cifar10" or "cifar100")."""
    lay = _layout(name)
    if split not in ("train", "test"):
        raise DataError(f"{lay['pretty']}: split must be 'train' or 'test', got {split!r}")
    root_p = _require_root(root, lay)
    if download and any(not p.is_file() for p in cifar_files(root_p, name)):
        try:
            from torchvision import datasets

            cls = datasets.CIFAR10 if name == "cifar10" else datasets.CIFAR100
            cls(root=str(root_p), train=split == "train", download=True)
        except Exception as exc:
            raise DataError(
                f"{lay['pretty']}: download into {root_p} failed ({type(exc).__name__}: {exc}); "
                f"{_expected(lay, True)}"
            ) from exc
    check_cifar(root_p, name, download=False)

    folder = root_p / lay["folder"]
    parts = [_read_batch(folder / f, lay["label_key"]) for f in lay[split]]
    images = np.concatenate([p[0] for p in parts])
    labels = np.concatenate([p[1] for p in parts])
    if len(labels) == 0:
        raise DataError(f"{folder}: the {split} split has no images; {_expected(lay, download)}")
    if labels.min() < 0 or labels.max() >= lay["num_classes"]:
        raise DataError(
            f"{folder}: labels must be in [0, {lay['num_classes'] - 1}], got [{labels.min()}, {labels.max()}]"
        )

    meta_file, meta_key = lay["meta"]
    meta = _unpickle(folder / meta_file)
    if meta_key not in meta:
        raise DataError(f"{folder / meta_file}: missing key {meta_key!r} (found {sorted(meta)})")
    class_names = [str(c) for c in meta[meta_key]]

    return ImageSet(
        images=torch.from_numpy(np.ascontiguousarray(images)),
        dataset=None,
        labels=torch.from_numpy(labels),
        backgrounds=None,
        num_classes=lay["num_classes"],
        num_backgrounds=0,
        mean=lay["mean"],
        std=lay["std"],
        crop_size=32,
        name=name,
        class_names=class_names,
    )
