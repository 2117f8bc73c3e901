"""Image retrieval with feature selection (docs/METHOD.md section 5, Table 2 and Figure 3).

Normalise F per sample; rank dimensions globally by sum_i F_ij (descending); keep the top K;
renormalise; cosine similarity; every sample queries all the others (itself excluded);
P@k = fraction of the k nearest neighbours that share the query's label, averaged over queries.
Precisions are returned as fractions in [0, 1].
"""

from __future__ import annotations

import torch
from torch import Tensor

from .arrays import default_Ks  # one definition: the NumPy sections use it without torch

__all__ = ["select_dims", "retrieval_precision", "retrieval_curve", "default_Ks"]


def _normalize(F: Tensor) -> Tensor:
    # All-zero rows stay zero (cosine 0 to everything) instead of becoming NaN.
    return F / F.norm(dim=1, keepdim=True).clamp_min(1e-12)


def select_dims(F: Tensor, K: int | None) -> tuple[Tensor, Tensor]:
    """Return (features [N, K] renormalised, kept dimension indices [K], best first).

    K None or >= D keeps every dim. Ranking uses a stable sort, so equal scores keep index order.
    """
    Fn = _normalize(F.float())
    D = Fn.shape[1]
    if K is None or K >= D:
        return Fn, torch.arange(D, device=F.device)
    if K < 1:
        raise ValueError(f"K must be >= 1, got {K}")
    idx = torch.argsort(Fn.sum(0), descending=True, stable=True)[:K]
    return _normalize(Fn[:, idx]), idx


def retrieval_precision(
    F: Tensor,
    y: Tensor,
    ks: tuple[int, ...] = (1, 3, 5, 10),
    K: int | None = None,
    chunk_size: int = 1024,
) -> dict:
    """{"p@1": ..., "p@3": ...} for feature matrix F [N, D] and labels y [N].

    Queries are processed chunk_size at a time, so memory is O(chunk_size * N). k larger than N - 1
    is capped at N - 1 (all other samples).
    """
    y = torch.as_tensor(y, device=F.device).long().reshape(-1)
    N = F.shape[0]
    if y.numel() != N:
        raise ValueError(f"{y.numel()} labels for {N} feature rows")
    if N < 2:
        raise ValueError("retrieval needs at least 2 samples")
    X, _ = select_dims(F, K)
    kmax = min(max(ks), N - 1)
    hits = torch.zeros(kmax, dtype=torch.float64, device=F.device)  # hits[r] = matches at rank r
    for s in range(0, N, chunk_size):
        q = X[s : s + chunk_size]
        sim = q @ X.T
        rows = torch.arange(q.shape[0], device=F.device)
        sim[rows, rows + s] = -float("inf")  # exclude the query itself
        nn = sim.topk(kmax, dim=1).indices
        hits += (y[nn] == y[s : s + chunk_size, None]).sum(0).double()
    cum = hits.cumsum(0)
    out = {}
    for k in ks:
        kk = min(k, kmax)
        out[f"p@{k}"] = float(cum[kk - 1]) / (N * kk)
    return out


def retrieval_curve(F: Tensor, y: Tensor, Ks, k: int = 10, chunk_size: int = 1024) -> dict:
    """{K: P@k} for each number of kept dims K (Figure 3 plots P@10 against K)."""
    return {int(K): retrieval_precision(F, y, ks=(k,), K=int(K), chunk_size=chunk_size)[f"p@{k}"] for K in Ks}
