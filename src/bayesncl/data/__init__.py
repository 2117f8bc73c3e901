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

Errors about missing or malformed data are bayesncl.core.errors.DataError and name the path, the expected layout
and the fix.
"""

from __future__ import annotations

from ..core.errors import ConfigError, DataError
from ..settings.registry import DATASETS
from .augment import SimCLRAugment, eval_transform
from .feed import iter_batches
from .imageset import IMAGENET_MEAN, IMAGENET_STD, ImageSet
from .waterbirds import load_waterbirds

__all__ = [
    "ImageSet",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "load_split",
    "check_data",
    "iter_batches",
    "load_waterbirds",
    "SimCLRAugment",
    "eval_transform",
]


def _spec(data_cfg: dict):
    """The dataset's spec in bayesncl.settings.registry.DATASETS (every dataset load_split reads: Waterbirds too)."""
    try:
        return DATASETS[data_cfg.get("dataset", "synthetic")]
    except ConfigError as e:
        raise DataError(str(e)) from None


def load_split(data_cfg: dict, split: str) -> ImageSet:
    """Load ``split`` ("train" or "test"; Waterbirds also "val") of ``data_cfg["dataset"]``, by its loader in
    bayesncl.settings.registry.DATASETS.

    ImageNet-100 reads ``train/`` for "train" and ``val/`` for "test".  Optional keys: ``classes`` (a
    list of wnids or a path to a one-wnid-per-line file) overrides the shipped 100-class list;
    ``imagenet_crop_size`` (default 224) sets ``crop_size`` for ImageNet-100 and Waterbirds.
    """
    return _spec(data_cfg).loader()(data_cfg, split)


def check_data(data_cfg: dict) -> None:
    """Cheap existence checks before training starts; raises :class:`DataError` naming what is missing."""
    _spec(data_cfg).checker()(data_cfg)
