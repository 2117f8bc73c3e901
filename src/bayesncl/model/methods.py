"""Methods of docs/METHOD.md section 1, in a registry keyed by the name config and workflow use.

Every method shares backbone + projector + InfoNCE; they differ in the feature fed to InfoNCE (and used at
evaluation) and in an extra loss. `training_loss` returns the total loss and its named parts.
"""

from __future__ import annotations

import functools
import operator
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import losses
from .backbones import build_backbone
from ..settings.config import topk_k
from ..settings.registry import METHODS as REGISTRY


def register(name: str) -> Callable[[type], type]:
    """A built-in method's class, declared in bayesncl.settings.registry under this name."""
    def deco(cls):
        cls.name = name
        assert REGISTRY[name].impl == f"{__name__}:{cls.__name__}", \
            f"bayesncl.settings.registry names another class for {name}"
        return cls

    return deco


def mlp(dims: list[int]) -> nn.Sequential:
    """Linear -> ReLU -> ... -> Linear, no BatchNorm."""
    layers: list[nn.Module] = []
    for i in range(len(dims) - 1):
        layers.append(nn.Linear(dims[i], dims[i + 1]))
        if i < len(dims) - 2:
            layers.append(nn.ReLU(inplace=True))
    return nn.Sequential(*layers)


class Method(nn.Module):
    name = "base"
    extra_names: tuple[str, ...] = ()  # the keys of extra_loss
    stat_names: tuple[str, ...] = ()  # the keys of stats

    def __init__(self, cfg: dict):
        super().__init__()
        m, mc = cfg["model"], cfg["method"]
        self.cfg = cfg
        self.temperature = mc["temperature"]
        self.backbone = build_backbone(m["arch"], m["width"], m["stem"], m["cifar_padding"])
        self.projector = mlp([self.backbone.out_dim, m["proj_hidden"], m["proj_dim"]])

    # The subclass hook: from (h, z) to the InfoNCE/evaluation feature and extra outputs. `gate_u` are uniform
    # draws for a stochastic head (BayesNCL's Gumbel gate; see `gate_draws`), None elsewhere.
    def head(self, h: torch.Tensor, z: torch.Tensor, gate_u: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def extra_loss(self, out: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {}

    def stats(self, out: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Per-step scalars the trainer logs beside the loss parts (epoch means)."""
        return {}

    def gate_draws(self, views: int) -> tuple[int, ...] | None:
        """Shape of the uniform draws a training forward of `views` images needs, or None. The trainer draws
        them from its generator, so that every random number of a step comes from one generator."""
        return None

    def forward(self, x: torch.Tensor, gate_u: torch.Tensor | None = None, views: int = 1) -> dict[str, torch.Tensor]:
        """`views` > 1: x stacks that many equal chunks (views) and the backbone runs once per chunk, so its
        BatchNorm normalises over one view's images and updates its running statistics once per view, as the
        released training step does (docs/METHOD.md section 2). The heads, without BatchNorm, run once."""
        h = self.backbone(x) if views == 1 else torch.cat([self.backbone(c) for c in x.chunk(views)])
        z = self.projector(h)
        out = {"h": h, "z": z}
        out.update(self.head(h, z, gate_u))
        return out

    def training_loss(self, x1: torch.Tensor, x2: torch.Tensor,
                      gate_u: torch.Tensor | None = None) -> tuple[torch.Tensor, dict]:
        """Both views (the backbone once per view); returns (loss, parts). parts["out"] keeps the tensors."""
        return self.views_loss(torch.cat([x1, x2]), gate_u)

    def views_loss(self, x: torch.Tensor, gate_u: torch.Tensor | None = None) -> tuple[torch.Tensor, dict]:
        """training_loss on the two views already stacked: x = [view 1 of N images; view 2 of the same N]."""
        n = x.shape[0] // 2
        out = self(x, gate_u, views=2 if self.cfg["train"]["bn"] == "view" else 1)
        f = out["feature"]
        # Every method's feature is normalized (rows of norm 1, or 0 where nothing is active).
        nce = losses.info_nce(f[:n], f[n:], self.temperature, normalized=True)
        parts = {"infonce": nce, **self.extra_loss(out)}
        loss = functools.reduce(operator.add, parts.values())
        return loss, {**parts, "out": out}

    @torch.no_grad()
    def features(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """Evaluation features (section 1) of a batch; call with the model in eval mode."""
        return self(x)

    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        """Named parameter sets; the optimizer gives `gate_head` its own lr multiplier."""
        return {"main": [p for p in self.parameters() if p.requires_grad]}


@register("cl")
class CL(Method):
    """SimCLR: normalize(z)."""

    def head(self, h, z, gate_u=None):
        return {"feature": F.normalize(z.float(), dim=1)}


@register("ncl")
class NCL(Method):
    """Non-negative CL: normalize(z+), z+ = ReLU(z) (or rep_relu)."""

    def head(self, h, z, gate_u=None):
        zp = losses.nonneg(z, self.cfg["method"]["nonneg"])
        return {"zplus": zp, "feature": losses.normalize(zp.float())}


@register("topk_ncl")
class TopKNCL(Method):
    """Top-k NCL: normalize(z+ * topk_mask(z+, k)), k = `method.topk_k` (default round(D / 10))."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.k = topk_k(cfg)

    def head(self, h, z, gate_u=None):
        zp = losses.nonneg(z, self.cfg["method"]["nonneg"])
        mask = losses.topk_mask(zp, self.k)
        return {"zplus": zp, "mask": mask, "feature": losses.normalize((zp * mask).float())}


@register("bayesncl")
class BayesNCL(Method):
    """NCL with a Bernoulli gate per dimension: normalize(normalize(z+) * m) + lambda * KL(alpha || rho)."""

    extra_names = ("kl",)
    stat_names = ("open_gates",)

    def __init__(self, cfg):
        super().__init__(cfg)
        mc, m = cfg["method"], cfg["model"]
        f, hid, d = self.backbone.out_dim, m["proj_hidden"], m["proj_dim"]
        dims = {1: [f, d], 2: [f, hid, d], 3: [f, hid, max(hid // 2, 1), d]}[mc["head_depth"]]
        self.gate_head = mlp(dims)
        self.gate, self.detach, self.tau = mc["gate"], mc["detach"], mc["tau_g"]
        self.rho, self.lam = mc["rho"], mc["lambda"]

    def head(self, h, z, gate_u=None):
        zp = losses.nonneg(z, self.cfg["method"]["nonneg"])
        logits = self.gate_head(h.detach() if self.detach else h).float()
        noise = losses.gumbel_from_uniform(gate_u) if gate_u is not None and self.training else None
        m, alpha = losses.gate_mask(logits, self.gate, self.tau, training=self.training, noise=noise)
        feat = losses.gated_normalize(zp.float(), m)  # normalize(normalize(z+) * m), one node
        return {"zplus": zp, "alpha": alpha, "gate": m, "feature": feat}

    def extra_loss(self, out):
        return {"kl": losses.bernoulli_kl(out["alpha"], self.rho, weight=self.lam)}

    def stats(self, out):
        m = out["gate"].detach()
        # A hard gate is exactly 0 or 1, so its mean is the open fraction.
        return {"open_gates": (m > 0.5).float().mean() if self.gate == "soft" else m.mean()}

    def gate_draws(self, views):
        return (views, self.cfg["model"]["proj_dim"]) if self.gate == "gumbel" else None

    def param_groups(self):
        head = {id(p) for p in self.gate_head.parameters()}
        return {
            "main": [p for p in self.parameters() if id(p) not in head],
            "gate_head": list(self.gate_head.parameters()),
        }


def build_method(cfg: dict) -> Method:
    return REGISTRY[cfg["method"]["name"]].load()(cfg)
