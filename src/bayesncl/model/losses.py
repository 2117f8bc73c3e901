"""Pure loss and gate functions (docs/METHOD.md section 1). No state, no modules."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

KL_CLAMP = (0.01, 0.99)
GUMBEL_EPS = 1e-4


def info_nce(f1: torch.Tensor, f2: torch.Tensor, temperature: float = 0.2, *, normalized: bool = False) -> torch.Tensor:
    """NT-Xent over 2N views: each view's positive is the other view of its image.

    Inputs are the features fed to InfoNCE, normalized inside (cosine similarity) unless `normalized` says
    every row already has norm 1 or 0 (the methods' features): normalizing such rows again changes values
    by rounding only, and its gradient (a projection onto the sphere's tangent) is already applied by the
    normalization that made them. Computed as cross-entropy on logits with the self-similarity masked out.
    """
    f = torch.cat([f1, f2], dim=0).float()
    if not normalized:
        f = F.normalize(f, dim=1)
    n2 = f.shape[0]
    logits = (f @ f.t()).div_(temperature)
    logits = logits.masked_fill(torch.eye(n2, dtype=torch.bool, device=f.device), float("-inf"))
    targets = torch.arange(n2, device=f.device).add_(n2 // 2).remainder_(n2)  # view i's positive: i + N mod 2N
    return F.cross_entropy(logits, targets)


# The functions below have hand-written backward passes: each is one autograd node instead of the chain of
# small ops its formula spells out, the same values up to rounding (tests/test_losses.py compares each with
# the formula under autograd).


class _RepReLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z):
        ctx.save_for_backward(z)
        return F.relu(z)

    @staticmethod
    def backward(ctx, grad):
        (z,) = ctx.saved_tensors
        return torch.ops.aten.gelu_backward(grad, z)


def rep_relu(z: torch.Tensor) -> torch.Tensor:
    """Forward ReLU, backward the gradient of GELU (NCL's reparameterised ReLU):
    gelu(z) - sg[gelu(z)] + sg[relu(z)], as one node."""
    return _RepReLU.apply(z)


def _inv_norm(x: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(row norms [B,1], 1 / max(norm, eps)) as F.normalize divides by."""
    n = torch.linalg.vector_norm(x, dim=1, keepdim=True)
    return n, n.clamp_min(eps).reciprocal()


def _normalize_backward(y: torch.Tensor, inv: torch.Tensor, live: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """d/dx of y = x / |x| for the rows in `live` (|x| > eps), zero for the others."""
    radial = (grad * y).sum(1, keepdim=True)
    return torch.addcmul(grad, y, radial, value=-1).mul_(inv * live)


class _Normalize(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, eps):
        n, inv = _inv_norm(x, eps)
        y = x * inv
        ctx.save_for_backward(y, inv, n > eps)
        return y

    @staticmethod
    def backward(ctx, grad):
        y, inv, live = ctx.saved_tensors
        return _normalize_backward(y, inv, live, grad), None


def normalize(x: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """F.normalize over dim 1, but no gradient through a row of norm <= eps (same forward value).

    A non-negative feature can be exactly zero (every entry of z+ off, or every active dim gated off). Its
    direction is undefined, and F.normalize's 1/eps slope there overflows to NaN once rep_relu's
    surrogate gradient (or a gate's) reaches it; under plain ReLU the true gradient there is zero anyway.
    """
    return _Normalize.apply(x, eps)


class _GatedNormalize(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, m, eps):
        n1, inv1 = _inv_norm(x, eps)
        u = x * inv1
        y = u * m
        n2, inv2 = _inv_norm(y, eps)
        f = y * inv2
        ctx.save_for_backward(u, m, inv1, n1 > eps, f, inv2, n2 > eps)
        return f

    @staticmethod
    def backward(ctx, grad):
        u, m, inv1, live1, f, inv2, live2 = ctx.saved_tensors
        dy = _normalize_backward(f, inv2, live2, grad)
        dm = dy * u if ctx.needs_input_grad[1] else None
        dx = _normalize_backward(u, inv1, live1, dy * m) if ctx.needs_input_grad[0] else None
        return dx, dm, None


def gated_normalize(x: torch.Tensor, m: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """normalize(normalize(x) * m) (BayesNCL's feature) as one node, gradients to x and the mask m."""
    return _GatedNormalize.apply(x, m, eps)


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


class _STE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, alpha):
        return (alpha > 0.5).to(alpha.dtype)

    @staticmethod
    def backward(ctx, grad):
        return grad


def ste_gate(alpha: torch.Tensor) -> torch.Tensor:
    """Straight-through: forward 1[alpha > 0.5], backward d/d alpha (sg[hard - alpha] + alpha as one node;
    that sum is exactly the hard value in floating point, so the forward is the same)."""
    return _STE.apply(alpha)


def gumbel_noise(shape, *, generator: torch.Generator | None = None, device=None, dtype=None) -> torch.Tensor:
    u = torch.rand(shape, generator=generator, device=device, dtype=dtype)
    return gumbel_from_uniform(u)


def gumbel_from_uniform(u: torch.Tensor) -> torch.Tensor:
    """G = -log(-log(u + 1e-4) + 1e-4) from uniform draws u (docs/METHOD.md section 1)."""
    return u.add(GUMBEL_EPS).log_().neg_().add_(GUMBEL_EPS).log_().neg_()


def gate_mask(logits: torch.Tensor, gate: str, tau: float = 1.0, *, training: bool,
              noise: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (mask m, alpha) for a gate kind. `noise` is the Gumbel noise G (training only; drawn from the
    global generator when not given).

    alpha is always the noise-free sigmoid(logits / tau): it is what the KL prior sees.
    """
    scaled = logits if tau == 1 else logits / tau  # x / 1 == x: one op fewer at the default tau
    alpha = torch.sigmoid(scaled)
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


class _BernoulliKL(torch.autograd.Function):
    @staticmethod
    def forward(ctx, alpha, rho, weight):
        a = alpha.clamp(*KL_CLAMP)
        l1a = torch.log1p(-a)
        # slope = logit(a) - logit(rho) = d KL / d a; KL = a * slope + log(1 - a) - log(1 - rho)
        slope = (a.log() - l1a).sub_(math.log(rho) - math.log1p(-rho))
        kl = torch.addcmul(l1a.sub_(math.log1p(-rho)), a, slope)
        ctx.save_for_backward(alpha, slope)
        ctx.scale = weight / alpha.shape[0]
        return kl.sum().mul_(ctx.scale)

    @staticmethod
    def backward(ctx, grad):
        alpha, slope = ctx.saved_tensors
        # torch.clamp passes the gradient strictly inside its range (none on the bounds)
        inside = (alpha > KL_CLAMP[0]) & (alpha < KL_CLAMP[1])
        return slope * inside * (grad * ctx.scale), None, None


def bernoulli_kl(alpha: torch.Tensor, rho: float, weight: float = 1.0) -> torch.Tensor:
    """weight * KL(Bern(alpha) || Bern(rho)) summed over dims, averaged over rows; both clamped to
    [0.01, 0.99]. One node, computed as a (logit a - logit r) + log(1 - a) - log(1 - r), the same sum
    regrouped (a log(a / r) + (1 - a) log((1 - a) / (1 - r)) up to rounding)."""
    r = min(max(float(rho), KL_CLAMP[0]), KL_CLAMP[1])
    return _BernoulliKL.apply(alpha.float(), r, float(weight))
