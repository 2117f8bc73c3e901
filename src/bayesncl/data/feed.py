"""The batch feed: a split's images as uint8 batches on the training device, in a seeded order (in memory, through
a DataLoader, or read ahead by threads from a prepared copy), resumable at any batch."""

from __future__ import annotations

from typing import Iterator

import torch

from ..core.errors import DataError
from .imageset import ImageSet


def _indexed(device) -> torch.device:
    """The device with its index: one cache entry for "cuda" and "cuda:0"."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


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
    device = _indexed(device)
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
