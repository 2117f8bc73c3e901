"""Where and how a model runs: device choice, bf16 autocast, channels_last, peak memory, and `embed`, the
evaluation-mode pass over a split. Pretraining and every evaluation section use these; nothing here knows
about either."""

from __future__ import annotations

import contextlib
import sys

import torch

from .config import ConfigError
from .data import eval_transform, iter_batches

__all__ = ["autocast", "channels_last", "embed", "peak_memory_mb", "resolve_device"]


def resolve_device(cfg: dict) -> torch.device:
    want = cfg["train"]["device"]
    if want == "cuda" and not torch.cuda.is_available():
        raise ConfigError("train.device: 'cuda' was asked for but no CUDA device is available")
    if want == "auto":
        want = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(want)


def autocast(device: torch.device, precision: str, *, cache: bool = True):
    """bf16 autocast where `precision` asks for it. cache=False for a step captured in a CUDA graph (autocast's
    weight-cast cache would otherwise hold tensors of the capture)."""
    use_bf16 = precision == "bf16" or (precision == "auto" and device.type == "cuda")
    if use_bf16:
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


@torch.no_grad()
def embed(model, ds, cfg: dict, device, key: str | tuple[str, ...] = "feature") -> tuple[torch.Tensor, ...]:
    """Evaluation-mode outputs `key` (a tuple of keys allowed) over a whole split, in dataset order, on the CPU."""
    keys = (key,) if isinstance(key, str) else tuple(key)
    was_training = model.training
    model.eval()
    outs: dict[str, list] = {k: [] for k in keys}
    for x, _, _ in iter_batches(ds, cfg["eval"]["batch_size"], shuffle=False, seed=0, drop_last=False,
                                device=device, num_workers=cfg["data"]["num_workers"]):
        x = eval_transform(x, ds.mean, ds.std, ds.crop_size)
        if channels_last(cfg, device):
            x = x.contiguous(memory_format=torch.channels_last)
        with autocast(device, cfg["train"]["precision"]):
            out = model(x)
        for k in keys:
            outs[k].append(out[k].float().cpu())
    model.train(was_training)
    return tuple(torch.cat(outs[k]) for k in keys)
