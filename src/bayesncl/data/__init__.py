"""Datasets and batched on-device SimCLR augmentation (contract: docs/DESIGN.md, "Data").

``load_split(data_cfg, split)`` returns an :class:`ImageSet`; ``iter_batches`` yields uint8 batches on
the training device, where :class:`SimCLRAugment` (or :func:`eval_transform`) turns them into float
inputs (the set: imageset.py; the feed: feed.py; the registry's loader adapters: loaders.py).  Datasets:

- ``synthetic``: generated locally (shape = class, texture = background), in memory.
- ``cifar10`` / ``cifar100``: torchvision's on-disk pickles under ``root``, in memory.
- ``imagenet100``: ImageNet-1k ``root/{train,val}/<wnid>/`` restricted to the shipped 100-wnid list,
  file-backed (decoded by PIL, stored short-side-resized + centre-cropped to ``imagenet_stored_size``), read
  from its prepared copy under ``cache_dir`` when ``bayesncl prepare-imagenet`` has made one.
- ``waterbirds`` (also :func:`load_waterbirds`): ``root/metadata.csv`` + images, file-backed.

Errors about missing or malformed data are :class:`DataError` and name the path, the expected layout
and the fix.
"""

from __future__ import annotations

from ..errors import ConfigError, DataError  # DataError re-exported: its old home
from ..registry import DATASETS as _REGISTRY
from .augment import SimCLRAugment, eval_transform
from .cifar import check_cifar, load_cifar  # noqa: F401 - the loaders, importable from here as before
from .feed import iter_batches
from .imagenet import check_imagenet100, load_imagenet100  # noqa: F401
from .imageset import (CIFAR10_MEAN, CIFAR10_STD, CIFAR100_MEAN, CIFAR100_STD, IMAGENET_MEAN, IMAGENET_STD,
                       ImageSet)
from .synthetic import load_synthetic, make_synthetic, resolve_params  # noqa: F401
from .waterbirds import check_waterbirds, load_waterbirds  # noqa: F401

__all__ = [
    "ImageSet",
    "DataError",
    "CIFAR10_MEAN",
    "CIFAR10_STD",
    "CIFAR100_MEAN",
    "CIFAR100_STD",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "LOADERS",
    "load_split",
    "check_data",
    "iter_batches",
    "load_waterbirds",
    "make_synthetic",
    "SimCLRAugment",
    "eval_transform",
]



def __getattr__(name: str):
    # The registry's names as they are now (a plugin may add some): every dataset load_split reads (Waterbirds
    # too, the background probe's data, never trained on); the training datasets: registry.training_datasets().
    if name == "LOADERS":
        return _REGISTRY.names()
    raise AttributeError(name)


def _spec(data_cfg: dict):
    from ..registry import DATASETS

    try:
        return DATASETS[data_cfg.get("dataset", "synthetic")]
    except ConfigError as e:
        raise DataError(str(e)) from None


def load_split(data_cfg: dict, split: str) -> ImageSet:
    """Load ``split`` ("train" or "test"; Waterbirds also "val") of ``data_cfg["dataset"]``, by its loader in
    bayesncl.registry.DATASETS.

    ImageNet-100 reads ``train/`` for "train" and ``val/`` for "test".  Optional keys: ``classes`` (a
    list of wnids or a path to a one-wnid-per-line file) overrides the shipped 100-class list;
    ``imagenet_crop_size`` (default 224) sets ``crop_size`` for ImageNet-100 and Waterbirds.
    """
    return _spec(data_cfg).loader()(data_cfg, split)


def check_data(data_cfg: dict) -> None:
    """Cheap existence checks before training starts; raises :class:`DataError` naming what is missing."""
    _spec(data_cfg).checker()(data_cfg)
