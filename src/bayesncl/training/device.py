"""Where a model runs: the device, deterministic kernels, bf16/fp16 autocast, channels_last and peak memory.
Pretraining and every evaluation section use these; nothing here knows about either."""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Callable

import torch

from ..core.errors import ConfigError

__all__ = ["autocast", "channels_last", "peak_memory_mb", "reset_peak_memory", "resolve_device", "set_deterministic"]


# cuBLAS is deterministic only with a fixed workspace, read when its first handle is made (train.deterministic)
CUBLAS_WORKSPACE = ":4096:8"


def resolve_device(cfg: dict) -> torch.device:
    want = cfg["train"]["device"]
    if want == "cuda" and not torch.cuda.is_available():
        raise ConfigError("train.device: 'cuda' was asked for but no CUDA device is available")
    if want == "auto":
        want = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(want)


def set_deterministic(on: bool) -> Callable[[], None]:
    """train.deterministic: deterministic algorithms, deterministic cuDNN kernels, no cuDNN autotuning and cuBLAS's
    fixed workspace for what runs next; returns what puts the previous settings back. An operator without a
    deterministic kernel warns, naming itself, instead of stopping a long run. Off: nothing changes."""
    import torch.utils.deterministic as det

    prev = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
            torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark,
            os.environ.get("CUBLAS_WORKSPACE_CONFIG"), det.fill_uninitialized_memory)
    if not on:
        return lambda: None
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    # a debugging aid of deterministic mode, a pass over every new tensor: nothing here reads memory it did not write
    det.fill_uninitialized_memory = False

    def restore() -> None:
        torch.use_deterministic_algorithms(prev[0], warn_only=prev[1])
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = prev[2], prev[3]
        det.fill_uninitialized_memory = prev[5]
        if prev[4] is None:  # a workspace given before is kept as it was (setdefault)
            os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
    return restore


def autocast(device: torch.device, precision: str, *, cache: bool = True):
    """bf16 (or fp16) autocast where `precision` asks for it. cache=False for a step captured in a CUDA graph
    (autocast's weight-cast cache would otherwise hold tensors of the capture)."""
    if precision == "fp16":
        return torch.autocast(device.type, dtype=torch.float16, cache_enabled=cache)
    if precision == "bf16" or (precision == "auto" and device.type == "cuda"):
        return torch.autocast(device.type, dtype=torch.bfloat16, cache_enabled=cache)
    return contextlib.nullcontext()


def channels_last(cfg: dict, device: torch.device) -> bool:
    """channels_last speeds up convolutions on GPUs; on CPU it crashes some oneDNN kernels for tiny widths."""
    return cfg["train"]["channels_last"] and device.type == "cuda"


def peak_memory_mb(device: str | torch.device, cpu_rss: bool = False) -> float | None:
    """Peak accelerator memory in MiB (torch.cuda.max_memory_allocated). On CPU: None, or with cpu_rss=True
    the process's peak resident set size (ru_maxrss, whole process lifetime)."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    if not cpu_rss:
        return None
    import resource

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 2**20 if sys.platform == "darwin" else rss / 2**10  # bytes on macOS, KiB on Linux


def reset_peak_memory(device: str | torch.device) -> None:
    """Start peak_memory_mb's count afresh (each run reports its own peak, not the process's highest so far)."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
