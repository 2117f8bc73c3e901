"""Efficiency numbers of docs/METHOD.md section 7 (Table 7): FLOPs, parameters, time, peak memory."""

from __future__ import annotations

import json
import math
import os
import sys
from typing import Any, Callable

import torch
from torch import nn

__all__ = ["count_flops_per_image", "count_params", "peak_memory_mb", "reset_peak_memory", "training_time_from_log"]


def _batch_size(example_input: Any) -> int:
    if isinstance(example_input, torch.Tensor):
        return int(example_input.shape[0])
    if isinstance(example_input, (tuple, list)) and example_input:
        return _batch_size(example_input[0])
    if isinstance(example_input, dict) and example_input:
        return _batch_size(next(iter(example_input.values())))
    raise ValueError("cannot infer the batch size from example_input; pass batch_size=")


def count_flops_per_image(
    fn: Callable[[Any], Any], example_input: Any, *, batch_size: int | None = None, no_grad: bool = True
) -> float:
    """Forward FLOPs of fn(example_input) divided by the batch size.

    Counted by torch.utils.flop_counter.FlopCounterMode, which counts a multiply-add as 2 FLOPs and
    covers matmul / conv / attention kernels (elementwise ops, norms and activations are not counted).
    fn should run the training forward of interest (backbone + projector + gating head); with
    no_grad=True (default) only the forward is traced, whatever fn does with autograd.
    """
    from torch.utils.flop_counter import FlopCounterMode

    bs = batch_size if batch_size is not None else _batch_size(example_input)
    counter = FlopCounterMode(display=False)
    with counter, torch.set_grad_enabled(not no_grad):
        fn(example_input)
    return float(counter.get_total_flops()) / bs


def count_params(module: nn.Module, trainable_only: bool = False) -> int:
    """Number of parameters (shared parameters counted once)."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad or not trainable_only)


def reset_peak_memory(device: str | torch.device) -> None:
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory_mb(device: str | torch.device, cpu_rss: bool = False) -> float | None:
    """Peak accelerator memory in MiB: torch.cuda.max_memory_allocated (since the last
    reset_peak_memory). On CPU returns None (there is no accelerator), or with cpu_rss=True the
    process's peak resident set size (ru_maxrss, whole process lifetime)."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    if not cpu_rss:
        return None
    import resource

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 2**20 if sys.platform == "darwin" else rss / 2**10  # bytes on macOS, KiB on Linux


def training_time_from_log(log_path: str | os.PathLike) -> dict:
    """Timing summary of a JSON-lines training log (one line per epoch with `epoch`,
    `epoch_seconds`, `img_per_s`).

    A resumed run may log the same epoch twice: each epoch counts once, the last line wins.
    Blank lines, lines without `epoch` and a truncated last line (crash mid-write) are skipped.
    Returns dict(train_minutes = sum of epoch_seconds / 60, sec_per_epoch = mean epoch_seconds,
    img_per_s = mean img_per_s), the keys of metrics.json's cost section; NaN where nothing was logged.
    """
    by_epoch: dict[int, dict] = {}
    with open(log_path, encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(rec, dict) and "epoch" in rec:
                by_epoch[int(rec["epoch"])] = rec

    def values(key: str) -> list[float]:
        out = []
        for rec in by_epoch.values():
            v = rec.get(key)
            if isinstance(v, (int, float)) and math.isfinite(v):
                out.append(float(v))
        return out

    secs, ips = values("epoch_seconds"), values("img_per_s")
    return {
        "train_minutes": sum(secs) / 60 if secs else math.nan,
        "sec_per_epoch": sum(secs) / len(secs) if secs else math.nan,
        "img_per_s": sum(ips) / len(ips) if ips else math.nan,
    }
