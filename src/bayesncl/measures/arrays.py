"""The measures of docs/METHOD.md section 4 (interpretability, Tables 1, 4, 5, the background-dominance share)
and section 5 (retrieval, Table 2, Figure 3), on NumPy arrays: the one implementation. The evaluation
sections, pretraining's gradient dynamics (SC of the test split at dynamics epochs) and the atlas use it;
a job that reads the features cache never imports torch.

Interpretability. F is an N x D feature matrix (the evaluation feature of docs/METHOD.md section 1), y
labels in 0..C-1, eps = 1e-5. With E_ij = 1[|F_ij| > eps]:

- active dims  A = { j : sum_i |F_ij| > eps }
- SC_j   = max_c #{i in S_j : y_i = c} / |S_j|,  S_j = { i : E_ij = 1 };  SC = 100 * mean_{j in A} SC_j
- H_j    = -sum_c p_jc ln p_jc over p_jc > eps, averaged over A, with p_jc proportional to
    SE-Sum:  sum_{i: y_i=c} |F_ij|
    SE-Mean: (sum_{i: y_i=c} |F_ij|) / n_c   (classes with n_c = 0 are left out)
    SE-Freq: #{ i : y_i = c, E_ij = 1 }
- Act    = 100 * mean_ij E_ij; alive = |A|; alive_frac = |A| / D.

Everything comes from two class-by-dimension matrices (sum of |F| and count of E per class), each one
matrix product with the one-hot labels; no loop over dimensions. Per-dimension values are fractions
(SC_j in [0, 1]); only the scalar SC and Act are percentages.

Retrieval. Normalise F per sample; rank dimensions globally by sum_i F_ij (descending); keep the top K;
renormalise; cosine similarity; every sample queries all the others (itself excluded); P@k = fraction of
the k nearest neighbours that share the query's label, averaged over queries (a fraction in [0, 1]).
"""

from __future__ import annotations

import math

import numpy as np

EPS = 1e-5

__all__ = ["EPS", "class_dim_matrices", "interpretability", "consistency_per_dim", "background_dominance",
           "closed_gate_rate", "topk_binding", "select_dims", "retrieval_precision", "retrieval_curve", "default_Ks"]


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
    """(sums, counts), float64 [num_labels, D]: sums[c, j] = sum_{i: y_i=c} |F_ij|,
    counts[c, j] = #{ i : y_i = c, |F_ij| > eps }; one_hot(y)^T @ |F| and one_hot(y)^T @ 1[|F| > eps]."""
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
    """All section-4 metrics of one feature matrix.

    Returns a dict with floats ``sc`` (percent), ``se_sum``, ``se_mean``, ``se_freq`` (nats, mean over
    A), ``act`` (percent), int ``alive`` (|A|), float ``alive_frac`` (|A| / D), and ``per_dim``: float64
    vectors over all D dims ``sc`` (fraction), ``h_sum``, ``h_mean``, ``h_freq`` (NaN off A), ``freq``
    (activation frequency #{i : |F_ij| > eps} / N, defined for every dim) and bool ``active``.

    No active dim gives NaN SC / SE with alive = 0. A dim in A with no single entry above eps (only
    possible when many sub-eps entries add up past eps) has no SC_j or SE-Freq; it is NaN there and
    left out of those two means [choice]. SE-Mean: classes absent from y (n_c = 0) carry no mass and
    are dropped, not divided by.
    """
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
    """SC_j (fraction in [0, 1]) of every dim w.r.t. any labelling (classes, backgrounds, ...);
    NaN for dims outside A (or with no entry above eps). float64 [D]."""
    sums, counts = class_dim_matrices(F, labels, num_labels, eps)
    return _sc(counts, sums.sum(0) > eps)


def _lift(sc: np.ndarray, labels, num_labels: int) -> np.ndarray:
    """(SC_j - b) / (1 - b), b = the majority label's share of the evaluated images."""
    counts = np.bincount(np.asarray(labels).astype(np.int64).reshape(-1), minlength=num_labels)
    b = counts.max() / counts.sum() if counts.sum() else math.nan
    return (sc - b) / (1 - b) if b < 1 else np.full_like(sc, math.nan)


def background_dominance(F, y, bg, num_classes: int, num_backgrounds: int, eps: float = EPS) -> dict:
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
    ok = np.isfinite(lift_cls) & np.isfinite(lift_bg)
    with np.errstate(invalid="ignore"):
        bg_dom = ok & (lift_bg > lift_cls) & (lift_bg > 0)
        cls_dom = ok & (lift_cls > lift_bg) & (lift_cls > 0)
    n = int(ok.sum())
    return {"share": float(bg_dom.sum()) / n if n else math.nan, "n_active": n, "bg_dom": bg_dom,
            "cls_dom": cls_dom, "lift_bg": lift_bg, "lift_cls": lift_cls, "bg_sc": bg_sc, "cls_sc": cls_sc}


def closed_gate_rate(zplus, gate, eps: float = EPS) -> np.ndarray:
    """Per dim: share of the images with z+_ij > eps whose gate m_ij is 0 (NaN where z+_j never fires).
    float64 [D]."""
    fires = np.abs(np.asarray(zplus)) > eps
    n = fires.sum(0).astype(np.float64)
    closed = (fires & (np.asarray(gate) <= 0.5)).sum(0).astype(np.float64)
    return np.where(n > 0, closed / np.maximum(n, 1), math.nan)


def topk_binding(zplus, mask, eps: float = EPS) -> dict:
    """How often the top-k mask removed a positive entry of z+: `bound`, the fraction of images where it
    removed at least one, and `removed`, the mean fraction of positive entries removed (over images with
    any). bound == 0 means Top-k NCL computed exactly NCL's feature."""
    pos = np.abs(np.asarray(zplus)) > eps
    removed = (pos & (np.asarray(mask) <= 0.5)).sum(1).astype(np.float64)
    npos = pos.sum(1).astype(np.float64)
    has = npos > 0
    return {"bound": float((removed > 0).mean()) if removed.size else math.nan,
            "removed": float((removed[has] / npos[has]).mean()) if has.any() else math.nan}


# ---------------------------------------------------------------------------------------------- retrieval
def _normalize(F: np.ndarray) -> np.ndarray:
    # All-zero rows stay zero (cosine 0 to everything) instead of becoming NaN.
    return F / np.maximum(np.linalg.norm(F, axis=1, keepdims=True), 1e-12)


def select_dims(F, K: int | None) -> tuple[np.ndarray, np.ndarray]:
    """(float32 features [N, K] renormalised on the top-K dims by total mass, their indices [K], best first).

    K None or >= D keeps every dim. Ranking uses a stable sort, so equal scores keep index order.
    """
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
    """{"p@1": ..., "p@3": ...} for feature matrix F [N, D] and labels y [N], the query itself excluded.

    Queries are processed chunk_size at a time, so memory is O(chunk_size * N). k larger than N - 1
    is capped at N - 1 (all other samples).
    """
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
    """{K: P@k} for each number of kept dims K (Figure 3 plots P@10 against K)."""
    return {int(K): retrieval_precision(F, y, ks=(k,), K=int(K), chunk_size=chunk_size)[f"p@{k}"] for K in Ks}


def default_Ks(D: int) -> list[int]:
    """The Ks of Figure 3: 32, 64, ... up to min(512, D), the end point included; [D] when D < 32."""
    top = min(512, D)
    Ks, K = [], 32
    while K <= top:
        Ks.append(K)
        K *= 2
    if not Ks or Ks[-1] != top:
        Ks.append(top)
    return Ks
