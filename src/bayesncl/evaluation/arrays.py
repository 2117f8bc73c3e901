"""The interpretability (section 4) and retrieval (section 5) measures of docs/METHOD.md on NumPy arrays.

The evaluation sections that read the cached features (interpretability, retrieval) use these, so their
jobs never import torch (about a second of every such job). `metrics` and `retrieval` hold the same
measures on torch tensors, for pretraining's dynamics and the atlas; tests/test_arrays.py checks that
the two give the same numbers. Definitions and edge cases: see those modules.
"""

from __future__ import annotations

import math

import numpy as np

EPS = 1e-5

__all__ = ["interpretability", "background_dominance", "closed_gate_rate", "topk_binding",
           "retrieval_precision", "retrieval_curve", "default_Ks"]


def _labels(F: np.ndarray, labels, num_labels: int) -> np.ndarray:
    if F.ndim != 2:
        raise ValueError(f"features must be 2-D [N, D], got shape {F.shape}")
    y = np.asarray(labels).astype(np.int64).reshape(-1)
    if y.size != F.shape[0]:
        raise ValueError(f"{y.size} labels for {F.shape[0]} feature rows")
    if y.size and (y.min() < 0 or y.max() >= num_labels):
        raise ValueError(f"labels must lie in [0, {num_labels}), got [{y.min()}, {y.max()}]")
    return y


def class_dim_matrices(F, labels, num_labels: int, eps: float = EPS) -> tuple[np.ndarray, np.ndarray]:
    """(sums, counts), float64 [num_labels, D]: per label, the sum of |F| and the count of |F| > eps."""
    F = np.asarray(F)
    y = _labels(F, labels, num_labels)
    onehot = np.zeros((num_labels, F.shape[0]))
    onehot[y, np.arange(F.shape[0])] = 1.0
    a = np.abs(F).astype(np.float64)
    return onehot @ a, onehot @ (a > eps).astype(np.float64)


def _entropy(P: np.ndarray, eps: float) -> np.ndarray:
    return -np.where(P > eps, P * np.log(np.where(P > eps, P, 1.0)), 0.0).sum(0)


def _normalise_columns(M: np.ndarray) -> np.ndarray:
    tot = M.sum(0, keepdims=True)
    return M / np.where(tot > 0, tot, 1.0)


def _sc(counts: np.ndarray, active: np.ndarray) -> np.ndarray:
    size = counts.sum(0)
    ok = active & (size > 0)
    return np.where(ok, counts.max(0, initial=0.0) / np.where(ok, size, 1.0), math.nan)


def _nanmean(v: np.ndarray) -> float:
    v = v[np.isfinite(v)]
    return float(v.mean()) if v.size else math.nan


def interpretability(F, y, num_classes: int, eps: float = EPS) -> dict:
    """metrics.interpretability: SC, SE-Sum/Mean/Freq, Act, alive, and `per_dim` float64 vectors."""
    F = np.asarray(F)
    y = _labels(F, y, num_classes)
    sums, counts = class_dim_matrices(F, y, num_classes, eps)
    N, D = F.shape
    n_c = np.bincount(y, minlength=num_classes).astype(np.float64)
    active = sums.sum(0) > eps
    sc = _sc(counts, active)
    h_sum = np.where(active, _entropy(_normalise_columns(sums), eps), math.nan)
    h_mean = np.where(active, _entropy(_normalise_columns(sums / np.maximum(n_c, 1)[:, None]), eps), math.nan)
    size = counts.sum(0)
    h_freq = np.where(active & (size > 0), _entropy(_normalise_columns(counts), eps), math.nan)
    alive = int(active.sum())
    return {
        "sc": 100.0 * _nanmean(sc) if alive else math.nan,
        "se_sum": _nanmean(h_sum) if alive else math.nan,
        "se_mean": _nanmean(h_mean) if alive else math.nan,
        "se_freq": _nanmean(h_freq) if alive else math.nan,
        "act": 100.0 * float(counts.sum()) / (N * D) if N * D else math.nan,
        "alive": alive,
        "alive_frac": alive / D if D else math.nan,
        "per_dim": {"sc": sc, "h_sum": h_sum, "h_mean": h_mean, "h_freq": h_freq,
                    "freq": size / N if N else np.full(D, math.nan), "active": active},
    }


def consistency_per_dim(F, labels, num_labels: int, eps: float = EPS) -> np.ndarray:
    sums, counts = class_dim_matrices(F, labels, num_labels, eps)
    return _sc(counts, sums.sum(0) > eps)


def _lift(sc: np.ndarray, labels, num_labels: int) -> np.ndarray:
    counts = np.bincount(np.asarray(labels).astype(np.int64).reshape(-1), minlength=num_labels)
    b = counts.max() / counts.sum() if counts.sum() else math.nan
    return (sc - b) / (1 - b) if b < 1 else np.full_like(sc, math.nan)


def background_dominance(F, y, bg, num_classes: int, num_backgrounds: int, eps: float = EPS) -> dict:
    """metrics.background_dominance: the share of active dims whose background lift beats their class lift."""
    cls_sc = consistency_per_dim(F, y, num_classes, eps)
    bg_sc = consistency_per_dim(F, bg, num_backgrounds, eps)
    lift_cls, lift_bg = _lift(cls_sc, y, num_classes), _lift(bg_sc, bg, num_backgrounds)
    ok = np.isfinite(lift_cls) & np.isfinite(lift_bg)
    with np.errstate(invalid="ignore"):
        bg_dom = ok & (lift_bg > lift_cls) & (lift_bg > 0)
        cls_dom = ok & (lift_cls > lift_bg) & (lift_cls > 0)
    n = int(ok.sum())
    return {"share": float(bg_dom.sum()) / n if n else math.nan, "n_active": n, "bg_dom": bg_dom,
            "cls_dom": cls_dom, "lift_bg": lift_bg, "lift_cls": lift_cls, "bg_sc": bg_sc, "cls_sc": cls_sc}


def closed_gate_rate(zplus, gate, eps: float = EPS) -> np.ndarray:
    """metrics.closed_gate_rate: per dim, the share of firing entries of z+ whose gate is closed."""
    fires = np.abs(np.asarray(zplus)) > eps
    n = fires.sum(0).astype(np.float64)
    closed = (fires & (np.asarray(gate) <= 0.5)).sum(0).astype(np.float64)
    return np.where(n > 0, closed / np.maximum(n, 1), math.nan)


def topk_binding(zplus, mask, eps: float = EPS) -> dict:
    """metrics.topk_binding: how often the top-k mask removed a positive entry of z+."""
    pos = np.abs(np.asarray(zplus)) > eps
    removed = (pos & (np.asarray(mask) <= 0.5)).sum(1).astype(np.float64)
    npos = pos.sum(1).astype(np.float64)
    has = npos > 0
    return {"bound": float((removed > 0).mean()) if removed.size else math.nan,
            "removed": float((removed[has] / npos[has]).mean()) if has.any() else math.nan}


# ---------------------------------------------------------------------------------------------- retrieval
def _normalize(F: np.ndarray) -> np.ndarray:
    return F / np.maximum(np.linalg.norm(F, axis=1, keepdims=True), 1e-12)


def select_dims(F, K: int | None) -> tuple[np.ndarray, np.ndarray]:
    """retrieval.select_dims: (float32 features renormalised on the top-K dims by total mass, their indices)."""
    Fn = _normalize(np.asarray(F, dtype=np.float32))
    D = Fn.shape[1]
    if K is None or K >= D:
        return Fn, np.arange(D)
    if K < 1:
        raise ValueError(f"K must be >= 1, got {K}")
    idx = np.argsort(-Fn.sum(0), kind="stable")[:K]
    return _normalize(Fn[:, idx]), idx


def retrieval_precision(F, y, ks: tuple[int, ...] = (1, 3, 5, 10), K: int | None = None,
                        chunk_size: int = 1024) -> dict:
    """retrieval.retrieval_precision: P@k over all queries, the query itself excluded."""
    y = np.asarray(y).astype(np.int64).reshape(-1)
    N = np.asarray(F).shape[0]
    if y.size != N:
        raise ValueError(f"{y.size} labels for {N} feature rows")
    if N < 2:
        raise ValueError("retrieval needs at least 2 samples")
    X, _ = select_dims(F, K)
    kmax = min(max(ks), N - 1)
    hits = np.zeros(kmax)
    for s in range(0, N, chunk_size):
        q = X[s: s + chunk_size]
        sim = q @ X.T
        rows = np.arange(q.shape[0])
        sim[rows, rows + s] = -np.inf
        part = np.argpartition(-sim, kmax - 1, axis=1)[:, :kmax]
        order = np.take_along_axis(part, np.argsort(-np.take_along_axis(sim, part, 1), axis=1, kind="stable"), 1)
        hits += (y[order] == y[s: s + chunk_size, None]).sum(0)
    cum = np.cumsum(hits)
    return {f"p@{k}": float(cum[min(k, kmax) - 1]) / (N * min(k, kmax)) for k in ks}


def retrieval_curve(F, y, Ks, k: int = 10, chunk_size: int = 1024) -> dict:
    """retrieval.retrieval_curve: {K: P@k} for each number of kept dims K."""
    return {int(K): retrieval_precision(F, y, ks=(k,), K=int(K), chunk_size=chunk_size)[f"p@{k}"] for K in Ks}


def default_Ks(D: int) -> list[int]:
    """retrieval.default_Ks: 32, 64, ... up to min(512, D), the end point included; [D] when D < 32."""
    top = min(512, D)
    Ks, K = [], 32
    while K <= top:
        Ks.append(K)
        K *= 2
    if not Ks or Ks[-1] != top:
        Ks.append(top)
    return Ks
