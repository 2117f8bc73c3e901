"""Gradient dynamics of docs/METHOD.md section 6 (Table 3).

Over one epoch, for every dim j of z+ (the non-negative projector output, before any gate):
- AF_j: fraction of the epoch's training views with z+_j > eps;
- GV_j: variance over the epoch's iterations of the batch-mean gradient dL_InfoNCE/dz+_j
  [choice: population variance, i.e. divided by the number of iterations].
SC_j comes from arrays.consistency_per_dim on the test split; spearman_table correlates the three.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import torch
from torch import Tensor

__all__ = ["GradientStats", "spearman_table"]


class GradientStats:
    """Accumulates AF counts and a Welford mean / M2 of the per-iteration batch-mean gradient.

    Call update() once per iteration with the views' z+ and dL/dz+ (both [B, D], B = 2N views);
    everything stays on the inputs' device in float64 (no host sync per iteration).
    """

    def __init__(self, D: int):
        self.D = int(D)
        self.reset()

    def reset(self) -> None:
        self._active = None  # [D] float64 counts of views with z+_j > eps
        self._mean = None  # Welford running mean of batch-mean gradients
        self._m2 = None  # Welford sum of squared deviations
        self.n_iters = 0
        self.n_views = 0

    @torch.no_grad()
    def update(self, zplus: Tensor, grad: Tensor, eps: float = 1e-5) -> None:
        if zplus.shape != grad.shape or zplus.dim() != 2 or zplus.shape[1] != self.D:
            raise ValueError(
                f"expected zplus and grad of shape [B, {self.D}], got {tuple(zplus.shape)} and {tuple(grad.shape)}"
            )
        if self._active is None:
            z = torch.zeros(self.D, dtype=torch.float64, device=zplus.device)
            self._active, self._mean, self._m2 = z, z.clone(), z.clone()
        self._active += (zplus.detach() > eps).sum(0).double()
        self.n_views += zplus.shape[0]
        g = grad.detach().double().mean(0)
        self.n_iters += 1
        # Welford: no cancellation, unlike sumsq/n - mean^2 (batch-mean gradients are tiny).
        delta = g - self._mean
        self._mean += delta / self.n_iters
        self._m2 += delta * (g - self._mean)

    def result(self) -> dict:
        """dict(af [D], gv [D], n_iters, n_views); af and gv are CPU float64, NaN before any update."""
        if self.n_iters == 0:
            nan = torch.full((self.D,), math.nan, dtype=torch.float64)
            return {"af": nan, "gv": nan.clone(), "n_iters": 0, "n_views": 0}
        return {
            "af": (self._active / self.n_views).cpu(),
            "gv": (self._m2 / self.n_iters).cpu(),
            "n_iters": self.n_iters,
            "n_views": self.n_views,
        }


def _np(v) -> np.ndarray:
    if isinstance(v, Tensor):
        v = v.detach().cpu().double().numpy()
    return np.asarray(v, dtype=np.float64).reshape(-1)


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    from scipy.stats import spearmanr

    if len(a) < 3:
        return math.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # constant input -> NaN with a warning; NaN is the answer
        return float(spearmanr(a, b).statistic)


def spearman_table(af, gv, sc) -> dict:
    """Spearman rho(AF, GV), rho(GV, SC), rho(AF, SC) over the dims where all three are finite
    (dead dims have NaN SC); NaN when fewer than 3 such dims or an input is constant."""
    af, gv, sc = _np(af), _np(gv), _np(sc)
    if not (len(af) == len(gv) == len(sc)):
        raise ValueError(f"length mismatch: af {len(af)}, gv {len(gv)}, sc {len(sc)}")
    ok = np.isfinite(af) & np.isfinite(gv) & np.isfinite(sc)
    af, gv, sc = af[ok], gv[ok], sc[ok]
    return {
        "af_gv": _spearman(af, gv),
        "gv_sc": _spearman(gv, sc),
        "af_sc": _spearman(af, sc),
        "n_dims": int(ok.sum()),
    }
