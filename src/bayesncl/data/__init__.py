"""Datasets and batched on-device SimCLR augmentation (contract: docs/DESIGN.md, "Data").

``load_split(data_cfg, split)`` returns an :class:`ImageSet`; ``iter_batches`` yields uint8 batches on
the training device, where :class:`SimCLRAugment` (or :func:`eval_transform`) turns them into float
inputs.  Datasets:

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

from dataclasses import dataclass, field
from typing import Any, Iterator

import torch

from ..errors import ConfigError, DataError  # DataError re-exported: its old home
from ..registry import DATASETS as _REGISTRY

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

# docs/METHOD.md section 2.
CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)
CIFAR100_MEAN = (0.5071, 0.4865, 0.4409)
CIFAR100_STD = (0.2673, 0.2564, 0.2762)
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def __getattr__(name: str):
    # The registry's names as they are now (a plugin may add some): every dataset load_split reads (Waterbirds
    # too, the background probe's data, never trained on); the training datasets: registry.training_datasets().
    if name == "LOADERS":
        return _REGISTRY.names()
    raise AttributeError(name)


@dataclass
class ImageSet:
    """One split of a dataset.

    Exactly one of ``images`` (uint8 [N,3,S,S], in memory) and ``dataset`` (a torch Dataset whose items
    are ``(uint8 [3,S,S], label, background)``, background -1 when there is none) is set.
    ``backgrounds`` is None for datasets without a background label (CIFAR, ImageNet-100).
    ``mean``/``std`` are per-channel normalisation constants in [0, 1] units; ``crop_size`` is the
    network input size (augmentation/eval output), S the stored size.
    """

    images: torch.Tensor | None
    dataset: Any | None
    labels: torch.Tensor
    backgrounds: torch.Tensor | None
    num_classes: int
    num_backgrounds: int
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    crop_size: int
    name: str
    class_names: list[str] | None = None
    background_names: list[str] | None = None
    # device -> (images, labels, backgrounds) copies, so iter_batches moves an in-memory set only once.
    _device_cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    @property
    def file_backed(self) -> bool:
        return self.images is None

    @property
    def stored_size(self) -> int:
        if self.images is not None:
            return int(self.images.shape[-1])
        return int(getattr(self.dataset, "stored_size"))


# Submodules import ImageSet/DataError from here, so they are imported after those are defined.
from .augment import SimCLRAugment, eval_transform  # noqa: E402
from .cifar import check_cifar, load_cifar  # noqa: E402
from .imagenet import check_imagenet100, load_imagenet100  # noqa: E402
from .synthetic import load_synthetic, make_synthetic, resolve_params  # noqa: E402
from .waterbirds import check_waterbirds, load_waterbirds  # noqa: E402


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


# The built-in datasets' loaders and checks on a data config (bayesncl.registry names them).
def _load_synthetic(data_cfg: dict, split: str) -> ImageSet:
    return load_synthetic(data_cfg.get("synthetic"), split, data_cfg.get("cache_dir"))


def _check_synthetic(data_cfg: dict) -> None:
    resolve_params(data_cfg.get("synthetic"))  # validates; generation happens at load time


def _load_cifar(data_cfg: dict, split: str) -> ImageSet:
    return load_cifar(data_cfg.get("root"), data_cfg["dataset"], split, download=bool(data_cfg.get("download", False)))


def _check_cifar(data_cfg: dict) -> None:
    check_cifar(data_cfg.get("root"), data_cfg["dataset"], download=bool(data_cfg.get("download", False)))


def _load_imagenet100(data_cfg: dict, split: str) -> ImageSet:
    return load_imagenet100(
        data_cfg.get("root"),
        split,
        stored_size=int(data_cfg.get("imagenet_stored_size", 256)),
        crop_size=int(data_cfg.get("imagenet_crop_size", 224)),
        classes=data_cfg.get("classes"),
        cache_dir=data_cfg.get("cache_dir"),
    )


def _check_imagenet100(data_cfg: dict) -> None:
    check_imagenet100(data_cfg.get("root"), classes=data_cfg.get("classes"))


def _load_waterbirds(data_cfg: dict, split: str) -> ImageSet:
    return load_waterbirds(
        data_cfg.get("root"),
        split,
        image_size=int(data_cfg.get("imagenet_crop_size", 224)),
        stored_size=int(data_cfg.get("imagenet_stored_size", 256)),
    )


def _check_waterbirds(data_cfg: dict) -> None:
    check_waterbirds(data_cfg.get("root"))


def _folder_sizes(data_cfg: dict) -> dict:
    sizes = data_cfg.get("imagefolder") or {}
    return {"stored_size": int(sizes.get("stored_size", 256)), "crop_size": int(sizes.get("crop_size", 224))}


def _load_imagefolder(data_cfg: dict, split: str) -> ImageSet:
    from .imagefolder import load_imagefolder

    return load_imagefolder(data_cfg.get("root"), split, cache_dir=data_cfg.get("cache_dir"), **_folder_sizes(data_cfg))


def _check_imagefolder(data_cfg: dict) -> None:
    from .imagefolder import check_imagefolder

    check_imagefolder(data_cfg.get("root"))


def _imagefolder_backgrounds(data_cfg: dict) -> bool:
    from pathlib import Path

    from .imagefolder import BACKGROUND_FILE

    return bool(data_cfg.get("root")) and (Path(data_cfg["root"]) / BACKGROUND_FILE).is_file()


def _imagefolder_manifests(data_cfg: dict) -> list[str]:
    from .imagefolder import imagefolder_manifests

    sizes = _folder_sizes(data_cfg)
    return imagefolder_manifests(data_cfg.get("root"), sizes["stored_size"], data_cfg.get("cache_dir"))


def _prepare_imagefolder(data_cfg: dict, workers: int, verify: bool) -> list[str]:
    from .imagefolder import prepare_imagefolder

    done = prepare_imagefolder(data_cfg.get("root"), stored_size=_folder_sizes(data_cfg)["stored_size"],
                               cache_dir=data_cfg.get("cache_dir"), progress=False, workers=workers, verify=verify)
    return [f"{split}: {_state(decoded, verify)}: {manifest}" for split, (manifest, decoded) in done.items()]


def _prepare_imagenet100(data_cfg: dict, workers: int, verify: bool) -> list[str]:
    from .imagenet import PREPARED_SPLITS, make_prepared_dir, prepare_imagenet100, prepared_dir

    d = data_cfg
    make_prepared_dir(prepared_dir(d["root"], d["imagenet_stored_size"], d["classes"], d["cache_dir"]))
    lines = []
    for split in PREPARED_SPLITS:
        manifest, decoded = prepare_imagenet100(d["root"], split, stored_size=d["imagenet_stored_size"],
                                                classes=d["classes"], cache_dir=d["cache_dir"], workers=workers,
                                                verify=verify)
        lines.append(f"{split}: {_state(decoded, verify)}: {manifest}")
    return lines


def _state(decoded, verify: bool) -> str:
    if isinstance(decoded, list):
        return f"repaired {len(decoded)} block(s) that differed from their checksums"
    return "prepared" if decoded else ("already prepared, every block verified" if verify else "already prepared")


def iter_batches(
    ds: ImageSet,
    batch_size: int,
    *,
    shuffle: bool,
    seed: int,
    drop_last: bool,
    device: torch.device | str,
    num_workers: int = 0,
    start: int = 0,
) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]]:
    """An iterator of ``(x_uint8 [B,3,S,S], y [B], bg [B] or None)`` on ``device``.

    The order is a permutation drawn from a CPU ``torch.Generator`` seeded with ``seed`` alone (pass
    e.g. ``seed * 1000 + epoch`` for a per-epoch order), identical for in-memory and file-backed sets.
    In-memory sets are copied to ``device`` once (cached on the ImageSet) and indexed there;
    file-backed sets go through a DataLoader with ``num_workers`` workers, except those that read whole
    batches (a prepared ImageNet-100 copy), which ``num_workers`` threads read ahead. ``start`` skips that many
    batches of the same order without loading them (a resumed epoch).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:  # one cache entry for "cuda" and "cuda:0"
        device = torch.device("cuda", torch.cuda.current_device())
    n = len(ds)
    if shuffle:
        g = torch.Generator().manual_seed(int(seed))
        order = torch.randperm(n, generator=g)
    else:
        order = torch.arange(n)
    stop = (n // batch_size) * batch_size if drop_last else n
    first = min(start * batch_size, stop)

    if ds.images is not None:
        # The copies to the device happen here, when called (a training epoch's start), not at the first batch:
        # every batch after is indexed on the device (tests/test_fake_cuda.py guards the loop).
        key = str(device)
        if key not in ds._device_cache:
            bg = ds.backgrounds.to(device) if ds.backgrounds is not None else None
            ds._device_cache[key] = (ds.images.to(device), ds.labels.to(device), bg)
        return _memory_batches(*ds._device_cache[key], order.to(device), first, stop, batch_size)
    if hasattr(ds.dataset, "fetch"):
        return _fetched_batches(ds, order, first, stop, batch_size, device, num_workers)
    return _loader_batches(ds, order, first, stop, batch_size, device, num_workers)


def _memory_batches(images, labels, backgrounds, order, first: int, stop: int, batch_size: int):
    for s in range(first, stop, batch_size):
        idx = order[s : min(s + batch_size, stop)]
        yield images[idx], labels[idx], (backgrounds[idx] if backgrounds is not None else None)


def _loader_batches(ds: ImageSet, order, first: int, stop: int, batch_size: int, device, num_workers: int):
    """Batches of a file-backed dataset through a DataLoader (page-locked and copied asynchronously on CUDA)."""
    from torch.utils.data import DataLoader

    workers = num_workers > 0
    loader = DataLoader(
        _ReportDataErrors(ds.dataset) if workers else ds.dataset,
        batch_size=batch_size,
        sampler=order[first:stop].tolist(),
        num_workers=num_workers,
        collate_fn=_collate_or_error if workers else None,
        drop_last=False,  # already cut to whole batches above
        pin_memory=device.type == "cuda",
        persistent_workers=False,
    )
    non_blocking = device.type == "cuda"
    for batch in loader:
        if isinstance(batch, _ItemError):
            raise DataError(batch.message)
        x, y, bg = batch
        yield (
            x.to(device, non_blocking=non_blocking),
            y.to(device, non_blocking=non_blocking),
            bg.to(device, non_blocking=non_blocking) if ds.backgrounds is not None else None,
        )


# A DataError raised in a DataLoader worker reaches the main process re-raised with the worker's whole
# traceback in its message; passing it back as a value keeps the one-line message of num_workers=0.
class _ItemError:
    def __init__(self, message: str) -> None:
        self.message = message


class _ReportDataErrors(torch.utils.data.Dataset):
    def __init__(self, dataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i):
        try:
            return self.dataset[i]
        except DataError as e:
            return _ItemError(str(e))


def _fetched_batches(ds: ImageSet, order, first: int, stop: int, batch_size: int, device, num_workers: int):
    """Batches of a dataset that reads whole batches (``fetch``, a prepared copy), in order.

    ``num_workers`` > 0: that many threads read ahead (two batches each), not processes: a batch is one
    memory copy per image, which releases the GIL, and handing it back through shared memory would cost
    more than reading it. On CUDA the batch is read straight into page-locked memory.
    """
    from concurrent.futures import ThreadPoolExecutor

    cuda = device.type == "cuda"
    pending = [order[s : min(s + batch_size, stop)] for s in range(first, stop, batch_size)]

    def move(batch):
        x, y, bg = batch
        return (x.to(device, non_blocking=cuda), y.to(device, non_blocking=cuda),
                bg.to(device, non_blocking=cuda) if ds.backgrounds is not None else None)

    if num_workers == 0:
        for idx in pending:
            yield move(ds.dataset.fetch(idx, pin=cuda))
        return
    pool = ThreadPoolExecutor(num_workers, thread_name_prefix="bayesncl-fetch")
    try:
        ahead = [pool.submit(ds.dataset.fetch, idx, cuda) for idx in pending[: 2 * num_workers]]
        for k in range(len(pending)):
            batch = ahead[k].result()
            ahead[k] = None  # let the batch go once the consumer has
            if k + 2 * num_workers < len(pending):
                ahead.append(pool.submit(ds.dataset.fetch, pending[k + 2 * num_workers], cuda))
            yield move(batch)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _collate_or_error(items: list):
    from torch.utils.data import default_collate

    for item in items:
        if isinstance(item, _ItemError):
            return item
    return default_collate(items)
