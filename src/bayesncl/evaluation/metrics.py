"""Interpretability metrics of docs/METHOD.md section 4 (Table 1, 4, 5) and the background-dominance share.

F is an N x D feature matrix (the evaluation feature of docs/METHOD.md section 1), y labels in 0..C-1,
eps = 1e-5. With E_ij = 1[|F_ij| > eps]:

- active dims  A = { j : sum_i |F_ij| > eps }
- SC_j   = max_c #{i in S_j : y_i = c} / |S_j|,  S_j = { i : E_ij = 1 };  SC = 100 * mean_{j in A} SC_j
- H_j    = -sum_c p_jc ln p_jc over p_jc > eps, averaged over A, with p_jc proportional to
    SE-Sum:  sum_{i: y_i=c} |F_ij|
    SE-Mean: (sum_{i: y_i=c} |F_ij|) / n_c   (classes with n_c = 0 are left out)
    SE-Freq: #{ i : y_i = c, E_ij = 1 }
- Act    = 100 * mean_ij E_ij; alive = |A|; alive_frac = |A| / D.

Everything comes from two class-by-dimension matrices (sum of |F| and count of E per class), built in
one pass over F; no loop over dimensions. Per-dimension values are fractions (SC_j in [0, 1]), only the
scalar SC and Act are percentages.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

EPS = 1e-5

__all__ = [
    "EPS",
    "class_dim_matrices",
    "interpretability",
    "consistency_per_dim",
    "background_dominance",
    "closed_gate_rate",
    "topk_binding",
]


def _check(F: Tensor, labels: Tensor, num_labels: int) -> Tensor:
    if F.dim() != 2:
        raise ValueError(f"features must be 2-D [N, D], got shape {tuple(F.shape)}")
    labels = torch.as_tensor(labels, device=F.device).long().reshape(-1)
    if labels.numel() != F.shape[0]:
        raise ValueError(f"{labels.numel()} labels for {F.shape[0]} feature rows")
    if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= num_labels):
        raise ValueError(f"labels must lie in [0, {num_labels}), got [{int(labels.min())}, {int(labels.max())}]")
    return labels


def _indicator(a: Tensor, eps: float) -> Tensor:
    # 1.0 where a > eps else 0.0. Subtraction keeps the sign exactly, and on CPU this is several
    # times faster than (a > eps).float() (bool -> float conversion is slow).
    return (a - eps).clamp_(min=0).sign_()


def class_dim_matrices(
    F: Tensor, labels: Tensor, num_labels: int, eps: float = EPS, chunk_rows: int = 512
) -> tuple[Tensor, Tensor]:
    """Return (sums, counts), both float64 [num_labels, D]:
    sums[c, j] = sum_{i: y_i=c} |F_ij|, counts[c, j] = #{ i : y_i = c, |F_ij| > eps }.

    Equal to one_hot(y)^T @ |F| and one_hot(y)^T @ 1[|F| > eps]; computed as an index_add per row
    chunk in float32 (a chunk adds few rows per class, so float32 error stays ~1e-7 relative), each
    chunk's result accumulated in float64. Chunks keep the extra memory at O(chunk_rows * D).
    """
    labels = _check(F, labels, num_labels)
    N, D = F.shape
    sums = torch.zeros(num_labels, D, dtype=torch.float64, device=F.device)
    counts = torch.zeros(num_labels, D, dtype=torch.float64, device=F.device)
    part = torch.empty(num_labels, D, dtype=torch.float32, device=F.device)
    for s in range(0, N, chunk_rows):
        a = F[s : s + chunk_rows].abs().float()
        lab = labels[s : s + chunk_rows]
        sums += part.zero_().index_add_(0, lab, a)
        counts += part.zero_().index_add_(0, lab, _indicator(a, eps))
    return sums, counts


def _entropy(P: Tensor, eps: float) -> Tensor:
    """Per-column entropy (nats) of a [C, D] matrix of column-normalised probabilities, over p > eps."""
    safe = torch.where(P > eps, P, torch.ones_like(P))
    return -(torch.where(P > eps, P * safe.log(), torch.zeros_like(P))).sum(0)


def _normalise_columns(M: Tensor) -> Tensor:
    tot = M.sum(0, keepdim=True)
    return M / torch.where(tot > 0, tot, torch.ones_like(tot))


def _sc_from_counts(counts: Tensor, active: Tensor) -> Tensor:
    """SC_j = max_c counts / |S_j| on active dims with |S_j| > 0, NaN elsewhere."""
    size = counts.sum(0)
    ok = active & (size > 0)
    sc = counts.max(0).values / torch.where(ok, size, torch.ones_like(size))
    return torch.where(ok, sc, torch.full_like(sc, math.nan))


def _nanmean(v: Tensor) -> float:
    v = v[torch.isfinite(v)]
    return float(v.mean()) if v.numel() else math.nan


def interpretability(F: Tensor, y: Tensor, num_classes: int, eps: float = EPS) -> dict:
    """All section-4 metrics of one feature matrix.

    Returns a dict with floats ``sc`` (percent), ``se_sum``, ``se_mean``, ``se_freq`` (nats, mean over
    A), ``act`` (percent), int ``alive`` (|A|), float ``alive_frac`` (|A| / D), and ``per_dim``: CPU
    float64 vectors over all D dims ``sc`` (fraction), ``h_sum``, ``h_mean``, ``h_freq`` (NaN off A),
    ``freq`` (activation frequency #{i : |F_ij| > eps} / N, defined for every dim) and bool ``active``.

    No active dim gives NaN SC / SE with alive = 0. A dim in A with no single entry above eps (only
    possible when many sub-eps entries add up past eps) has no SC_j or SE-Freq; it is NaN there and
    left out of those two means [choice].
    """
    y = _check(F, y, num_classes)
    sums, counts = class_dim_matrices(F, y, num_classes, eps)
    N, D = F.shape
    n_c = torch.bincount(y, minlength=num_classes).to(sums)

    active = sums.sum(0) > eps
    nan = torch.full((D,), math.nan, dtype=torch.float64, device=sums.device)

    sc = _sc_from_counts(counts, active)
    h_sum = torch.where(active, _entropy(_normalise_columns(sums), eps), nan)
    # SE-Mean: classes absent from y (n_c = 0) carry no mass and are dropped, not divided by.
    # (their sums row is 0, so clamping the divisor to 1 leaves them at 0).
    means = sums / n_c.clamp_min(1).unsqueeze(1)
    h_mean = torch.where(active, _entropy(_normalise_columns(means), eps), nan)
    size = counts.sum(0)
    h_freq = torch.where(active & (size > 0), _entropy(_normalise_columns(counts), eps), nan)
    freq = size / N if N else nan.clone()

    alive = int(active.sum())
    act = 100.0 * float(counts.sum()) / (N * D) if N * D else math.nan
    return {
        "sc": 100.0 * _nanmean(sc) if alive else math.nan,
        "se_sum": _nanmean(h_sum) if alive else math.nan,
        "se_mean": _nanmean(h_mean) if alive else math.nan,
        "se_freq": _nanmean(h_freq) if alive else math.nan,
        "act": act,
        "alive": alive,
        "alive_frac": alive / D if D else math.nan,
        "per_dim": {
            "sc": sc.cpu(),
            "h_sum": h_sum.cpu(),
            "h_mean": h_mean.cpu(),
            "h_freq": h_freq.cpu(),
            "freq": freq.cpu(),
            "active": active.cpu(),
        },
    }


def consistency_per_dim(F: Tensor, labels: Tensor, num_labels: int, eps: float = EPS) -> Tensor:
    """SC_j (fraction in [0, 1]) of every dim w.r.t. any labelling (classes, backgrounds, ...);
    NaN for dims outside A (or with no entry above eps). CPU float64 [D]."""
    sums, counts = class_dim_matrices(F, labels, num_labels, eps)
    return _sc_from_counts(counts, sums.sum(0) > eps).cpu()


def _lift(sc: Tensor, labels: Tensor, num_labels: int) -> Tensor:
    """(SC_j - b) / (1 - b), b = the majority label's share of the evaluated images."""
    counts = torch.bincount(torch.as_tensor(labels).long().reshape(-1), minlength=num_labels).double()
    b = float(counts.max() / counts.sum()) if counts.sum() else math.nan
    return (sc - b) / (1 - b) if b < 1 else torch.full_like(sc, math.nan)


def background_dominance(
    F: Tensor,
    y: Tensor,
    bg: Tensor,
    num_classes: int,
    num_backgrounds: int,
    eps: float = EPS,
) -> dict:
    """Which dims encode "where" more than "what", on the lift over each label's base rate (docs/METHOD.md
    section 4): lift_L(j) = (SC_L(j) - b_L) / (1 - b_L), b_L the majority share of label L. A dim is
    background-dominated when lift_bg > lift_cls and lift_bg > 0, class-dominated when lift_cls > lift_bg
    and lift_cls > 0; an always-on dim (both lifts 0) is neither. Raw purities are not comparable: an
    always-on dim has class purity 1/C but background purity b_bg.

    Returns dict(share (fraction of active dims that are background-dominated; NaN when none is active),
    n_active, bg_dom, cls_dom (bool [D]), lift_bg, lift_cls, bg_sc, cls_sc (float64 [D], NaN off A)).
    """
    cls_sc = consistency_per_dim(F, y, num_classes, eps)
    bg_sc = consistency_per_dim(F, bg, num_backgrounds, eps)
    lift_cls, lift_bg = _lift(cls_sc, y, num_classes), _lift(bg_sc, bg, num_backgrounds)
    ok = torch.isfinite(lift_cls) & torch.isfinite(lift_bg)
    bg_dom = ok & (lift_bg > lift_cls) & (lift_bg > 0)
    cls_dom = ok & (lift_cls > lift_bg) & (lift_cls > 0)
    n = int(ok.sum())
    return {"share": float(bg_dom.sum()) / n if n else math.nan, "n_active": n, "bg_dom": bg_dom,
            "cls_dom": cls_dom, "lift_bg": lift_bg, "lift_cls": lift_cls, "bg_sc": bg_sc, "cls_sc": cls_sc}


def closed_gate_rate(zplus: Tensor, gate: Tensor, eps: float = EPS) -> Tensor:
    """Per dim: share of the images with z+_ij > eps whose gate m_ij is 0 (NaN where z+_j never fires).
    CPU float64 [D]."""
    fires = zplus.abs() > eps
    n = fires.sum(0).double()
    closed = (fires & (gate <= 0.5)).sum(0).double()
    return torch.where(n > 0, closed / n.clamp_min(1), torch.full_like(n, math.nan)).cpu()


def topk_binding(zplus: Tensor, mask: Tensor, eps: float = EPS) -> dict:
    """How often the top-k mask removed a positive entry of z+: `bound`, the fraction of images where it
    removed at least one, and `removed`, the mean fraction of positive entries removed (over images with
    any). bound == 0 means Top-k NCL computed exactly NCL's feature."""
    pos = zplus.abs() > eps
    removed = (pos & (mask <= 0.5)).sum(1).double()
    npos = pos.sum(1).double()
    has = npos > 0
    return {"bound": float((removed > 0).double().mean()) if len(removed) else math.nan,
            "removed": float((removed[has] / npos[has]).mean()) if bool(has.any()) else math.nan}
