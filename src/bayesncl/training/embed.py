"""`embed`: a split through the model in evaluation mode, its outputs on the CPU in dataset order. Pretraining's
last record and every evaluation section read features through it."""

from __future__ import annotations

import contextlib

import torch

from ..core.errors import ConfigError
from ..data import eval_transform, iter_batches
from .device import autocast, channels_last

__all__ = ["bn_mode", "embed", "embed_batch"]


@contextlib.contextmanager
def bn_mode(model: torch.nn.Module, mode: str):
    """The model in eval mode, except with mode "batch" its BatchNorm layers, which then normalise with each
    batch's statistics (the released evaluation script never calls model.eval()). Running statistics are put
    back afterwards, so the saved state is unchanged; the model's own training flag is restored."""
    if mode not in ("batch", "running"):
        raise ConfigError(f"eval.bn: {mode!r} is not a BatchNorm mode; use 'batch' or 'running'")
    was_training = model.training
    model.eval()
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)] \
        if mode == "batch" else []
    saved = [{k: v.clone() for k, v in m.named_buffers(recurse=False)} for m in norms]
    for m in norms:
        m.train()
    try:
        yield model
    finally:
        with torch.no_grad():
            for m, bufs in zip(norms, saved):
                for k, v in m.named_buffers(recurse=False):
                    v.copy_(bufs[k])
        model.train(was_training)


@torch.no_grad()
def embed(model, ds, cfg: dict, device, key: str | tuple[str, ...] = "feature",
          bn: str | None = None) -> tuple[torch.Tensor, ...]:
    """Evaluation outputs `key` (a tuple of keys allowed) over a whole split, in dataset order, on the CPU.
    `bn`: the BatchNorm mode (bn_mode; default eval.bn). Batches of eval.batch_size images, or with "batch"
    statistics of train.batch_size (the released evaluation's batch), the last one partial either way."""
    keys = (key,) if isinstance(key, str) else tuple(key)
    outs: dict[str, list] = {k: [] for k in keys}
    bn = bn or cfg["eval"]["bn"]
    batch = cfg["train"]["batch_size"] if bn == "batch" else cfg["eval"]["batch_size"]
    with bn_mode(model, bn):
        for x, _, _ in iter_batches(ds, batch, shuffle=False, seed=0, drop_last=False,
                                    device=device, num_workers=cfg["data"]["num_workers"]):
            out = embed_batch(model, x, ds, cfg, device)
            for k in keys:  # the results to the host: the one copy (and wait) per batch
                outs[k].append(out[k].float().cpu())
    return tuple(torch.cat(outs[k]) for k in keys)


def embed_batch(model, x: torch.Tensor, ds, cfg: dict, device) -> dict[str, torch.Tensor]:
    """`embed`'s device work on one batch (uint8 images already on the device): no host sync."""
    x = eval_transform(x, ds.mean, ds.std, ds.crop_size)
    if channels_last(cfg, device):
        x = x.contiguous(memory_format=torch.channels_last)
    with autocast(device, cfg["train"]["precision"]):
        return model(x)
