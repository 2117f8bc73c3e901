"""Efficiency numbers of docs/METHOD.md section 7 (Table 7): FLOPs, parameters, training time."""

from __future__ import annotations

import math
from typing import Any, Callable

import torch
from torch import nn

__all__ = ["count_flops_per_image", "count_params", "training_time"]


def count_flops_per_image(fn: Callable[[Any], Any], x: torch.Tensor) -> float:
    """Forward FLOPs of fn(x) (no autograd) divided by the batch size x.shape[0].

    Counted by torch.utils.flop_counter.FlopCounterMode, which counts a multiply-add as 2 FLOPs and
    covers matmul / conv / attention kernels (elementwise ops, norms and activations are not counted).
    fn should run the training forward of interest (backbone + projector + gating head).
    """
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        fn(x)
    return float(counter.get_total_flops()) / x.shape[0]


def count_params(module: nn.Module, trainable_only: bool = False) -> int:
    """Number of parameters (shared parameters counted once)."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad or not trainable_only)


def training_time(log: list[dict]) -> dict:
    """Timing of a training log (`bayesncl.runs.files.read_log`: one record per epoch with `epoch_seconds`,
    `img_per_s`, `peak_mem_mb`): train_minutes = sum of epoch_seconds / 60, sec_per_epoch and img_per_s = means
    over epochs, peak_mem_mb = the largest (None on CPU); NaN where nothing was logged. epoch_seconds is
    training time only: compile_seconds = the sum of the records' `compile_seconds` (torch.compile and CUDA-graph
    capture with train.graph compile or cudagraph, logged apart; 0 for an eager run)."""
    secs = [float(r["epoch_seconds"]) for r in log]
    ips = [float(r["img_per_s"]) for r in log]
    peaks = [r["peak_mem_mb"] for r in log if r.get("peak_mem_mb") is not None]
    return {
        "train_minutes": sum(secs) / 60 if secs else math.nan,
        "sec_per_epoch": sum(secs) / len(secs) if secs else math.nan,
        "img_per_s": sum(ips) / len(ips) if ips else math.nan,
        "peak_mem_mb": max(peaks) if peaks else None,
        "compile_seconds": sum(float(r.get("compile_seconds", 0.0)) for r in log) if log else math.nan,
    }
