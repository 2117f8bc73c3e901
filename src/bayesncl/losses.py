"""Pure loss and gate functions (docs/METHOD.md section 1). No state, no modules."""

from __future__ import annotations

import torch
import torch.nn.functional as F

KL_CLAMP = (0.01, 0.99)
GUMBEL_EPS = 1e-4


def info_nce(f1: torch.Tensor, f2: torch.Tensor, temperature: float = 0.2) -> torch.Tensor:
    """NT-Xent over 2N views: each view's positive is the other view of its image.

    Inputs are the features fed to InfoNCE (normalized inside, so cosine similarity).
    Computed as cross-entropy on logits with the self-similarity masked out.
    """
    n = f1.shape[0]
    f = F.normalize(torch.cat([f1, f2], dim=0).float(), dim=1)
    logits = f @ f.t() / temperature
    logits = logits.masked_fill(torch.eye(2 * n, dtype=torch.bool, device=f.device), float("-inf"))
    targets = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)]).to(f.device)
    return F.cross_entropy(logits, targets)


def normalize(x: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """F.normalize over dim 1, but no gradient through a row of norm <= eps (same forward value).

    A non-negative feature can be exactly zero (every entry of z+ off, or every active dim gated off). Its
    direction is undefined, and F.normalize's 1/eps slope there overflows to NaN once rep_relu's
    surrogate gradient (or a gate's) reaches it; under plain ReLU the true gradient there is zero anyway.
    """
    y = F.normalize(x, dim=1, eps=eps)
    dead = torch.linalg.vector_norm(x.detach(), dim=1, keepdim=True) <= eps
    return torch.where(dead, y.detach(), y)


def rep_relu(z: torch.Tensor) -> torch.Tensor:
    """Forward ReLU, backward the gradient of GELU (NCL's reparameterised ReLU)."""
    g = F.gelu(z)
    return g - g.detach() + F.relu(z).detach()


def nonneg(z: torch.Tensor, kind: str) -> torch.Tensor:
    if kind == "relu":
        return F.relu(z)
    if kind == "rep_relu":
        return rep_relu(z)
    raise ValueError(f"unknown non-negativity {kind!r}; allowed: relu, rep_relu")


def topk_mask(x: torch.Tensor, k: int) -> torch.Tensor:
    """1 on the k largest entries of each row, 0 elsewhere; carries no gradient."""
    x = x.detach()
    mask = torch.zeros_like(x)
    if k > 0:
        mask.scatter_(1, x.topk(k, dim=1).indices, 1.0)
    return mask


def ste_gate(alpha: torch.Tensor) -> torch.Tensor:
    """Straight-through: forward 1[alpha > 0.5], backward d/d alpha."""
    hard = (alpha > 0.5).to(alpha.dtype)
    return (hard - alpha).detach() + alpha


def gumbel_noise(shape, *, generator: torch.Generator | None = None, device=None, dtype=None) -> torch.Tensor:
    u = torch.rand(shape, generator=generator, device=device, dtype=dtype)
    return -torch.log(-torch.log(u + GUMBEL_EPS) + GUMBEL_EPS)


def gate_mask(logits: torch.Tensor, gate: str, tau: float = 1.0, *, training: bool,
              noise: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (mask m, alpha) for a gate kind. `noise` is the Gumbel noise G (training only).

    alpha is always the noise-free sigmoid(logits / tau): it is what the KL prior sees.
    """
    alpha = torch.sigmoid(logits / tau)
    if gate == "ste":
        return ste_gate(alpha), alpha
    if gate == "gumbel":
        if training:
            if noise is None:
                noise = gumbel_noise(logits.shape, device=logits.device, dtype=logits.dtype)
            return ste_gate(torch.sigmoid((logits + noise) / tau)), alpha
        return ste_gate(alpha), alpha
    if gate == "soft":
        return alpha, alpha
    raise ValueError(f"unknown gate {gate!r}; allowed: ste, gumbel, soft")


def bernoulli_kl(alpha: torch.Tensor, rho: float) -> torch.Tensor:
    """KL(Bern(alpha) || Bern(rho)) summed over dims, averaged over rows; both clamped to [0.01, 0.99]."""
    a = alpha.float().clamp(*KL_CLAMP)
    r = min(max(float(rho), KL_CLAMP[0]), KL_CLAMP[1])
    kl = a * torch.log(a / r) + (1 - a) * torch.log((1 - a) / (1 - r))
    return kl.sum(dim=1).mean()
