"""LARS parameter groups and the warm-up + cosine schedule (docs/METHOD.md section 2)."""

from __future__ import annotations

import math

import torch

from .methods import Method


def peak_lr(train_cfg: dict) -> float:
    return train_cfg["base_lr"] * train_cfg["batch_size"] / 256


def build_optimizer(model: Method, cfg: dict) -> torch.optim.Optimizer:
    """timm's LARS with trust_clip; 1-D parameters (biases, norms) get no weight decay, which in timm's
    LARS also means no trust-ratio scaling. The gating head keeps its own lr multiplier."""
    from timm.optim import Lars  # here, not at module level: importing timm costs seconds per process

    t = cfg["train"]
    groups = []
    mults = {"main": 1.0, "gate_head": cfg["method"]["head_lr_mult"]}
    for name, params in model.param_groups().items():
        decay = [p for p in params if p.ndim > 1]
        no_decay = [p for p in params if p.ndim <= 1]
        for suffix, ps, wd in (("", decay, t["weight_decay"]), ("_no_decay", no_decay, 0.0)):
            if ps:
                groups.append({"params": ps, "weight_decay": wd, "lr_mult": mults[name], "name": name + suffix})
    return Lars(groups, lr=peak_lr(t), momentum=t["momentum"], trust_coeff=t["trust_coeff"], trust_clip=True)


def lr_at(step: int, steps_per_epoch: int, train_cfg: dict) -> float:
    """Linear warm-up from warmup_start_lr to the peak lr, then cosine to 0, per iteration."""
    peak = peak_lr(train_cfg)
    warm = train_cfg["warmup_epochs"] * steps_per_epoch
    total = train_cfg["epochs"] * steps_per_epoch
    if step < warm:
        start = train_cfg["warmup_start_lr"]
        return start + (peak - start) * step / warm
    if total <= warm:
        return peak
    progress = (step - warm) / (total - warm)
    return 0.5 * peak * (1 + math.cos(math.pi * progress))


def set_lr(opt: torch.optim.Optimizer, lr: float) -> None:
    for g in opt.param_groups:
        g["lr"] = lr * g["lr_mult"]
