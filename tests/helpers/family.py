"""Naive references for the familywise control (docs/METHOD.md section 9), written out from their papers with loops
and scipy, never from bayesncl.report.verdicts: Bretz et al. 2009's Algorithm 1 (`bretz`), the claims table's graph
as section 9 states it (`design`), and the two-stage inverse normal combination test at a fixed level
(`two_stage_rejects`, its look-2 bound from scipy's bivariate normal)."""

from __future__ import annotations

import functools
import math

from scipy import optimize, stats

PASS_ON = 0.5  # section 9: a primary claim that holds passes half its level to the secondary claims
EARLY = 0.2    # section 9: look 1 spends 0.01 of 0.05
W = math.sqrt(0.5)  # section 9: the stages' weights, equal


def design(primary: list[bool]) -> tuple[list[float], list[list[float]]]:
    """The graph of section 9 over comparisons that all have a test: the primary ones share the weight; each passes
    half of it to the secondary ones and half to the other primary ones, equally (all to one kind where the other
    has none); a secondary one passes to the other secondary ones, a lone one back to the primary ones; without a
    primary one the secondary ones share the weight equally."""
    m = len(primary)
    prim = [i for i in range(m) if primary[i]]
    sec = [i for i in range(m) if not primary[i]]
    w = [0.0] * m
    for i in prim or sec:
        w[i] = 1.0 / len(prim or sec)
    g = [[0.0] * m for _ in range(m)]
    for i in prim:
        others = [j for j in prim if j != i]
        to_sec = (PASS_ON if others else 1.0) if sec else 0.0
        for j in sec:
            g[i][j] = to_sec / len(sec)
        for j in others:
            g[i][j] = (1.0 - to_sec) / len(others)
    for i in sec:
        others = [j for j in sec if j != i]
        for j in others or prim:
            g[i][j] = 1.0 / len(others or prim)
    return w, g


def bretz(p: list[float], w: list[float], g: list[list[float]], alpha: float,
          last: bool = True) -> tuple[set[int], list[float]]:
    """Bretz et al. 2009, Algorithm 1: while some open j has p_j <= w_j alpha (here <, as the table's p < alpha),
    reject it; w_l += w_j g_jl; g_lk = (g_lk + g_lj g_jk) / (1 - g_lj g_jl) for l != k (0 where g_lj g_jl = 1).
    ``last``: reject the last candidate each time (the package takes the first: the result must not depend on it).
    NaN p: never rejected. Returns (the rejected, the final weights)."""
    w, g = list(w), [list(r) for r in g]
    open_, rejected = set(range(len(p))), set()
    while True:
        can = [j for j in sorted(open_) if not math.isnan(p[j]) and p[j] < w[j] * alpha]
        if not can:
            return rejected, w
        j = can[-1] if last else can[0]
        open_.discard(j)
        rejected.add(j)
        new_w = [0.0] * len(p)
        new_g = [[0.0] * len(p) for _ in p]
        for l in open_:
            new_w[l] = w[l] + w[j] * g[j][l]
            for k in open_:
                if l != k and g[l][j] * g[j][l] < 1:
                    new_g[l][k] = (g[l][k] + g[l][j] * g[j][k]) / (1 - g[l][j] * g[j][l])
        w, g = new_w, new_g


@functools.lru_cache(maxsize=None)
def look_two_bound(level: float) -> float:
    """c2 at the one-sided ``level``: P(Z1 <= c1, W Z1 + W Z2 > c2) = (1 - EARLY) level, c1 = the normal quantile
    1 - EARLY level; the probability from scipy's bivariate normal cdf (Genz), not Owen's T."""
    c1 = stats.norm.isf(EARLY * level)
    joint = stats.multivariate_normal(mean=[0.0, 0.0], cov=[[1.0, W], [W, 1.0]], abseps=1e-12, releps=1e-10)

    def spent(c):  # P(Z1 <= c1) - P(Z1 <= c1, sum <= c)
        return stats.norm.cdf(c1) - joint.cdf([c1, c]) - (1 - EARLY) * level
    return optimize.brentq(spent, -10.0, 40.0, xtol=1e-12)


def two_stage_rejects(p1: float, p2: float, level: float) -> bool:
    """The inverse normal combination test (Lehmacher and Wassmer 1999) with early rejection, at the one-sided
    ``level``: p1 < EARLY level, or W z1 + W z2 > c2 with z = the normal quantile 1 - p."""
    if p1 < EARLY * level:
        return True
    return W * stats.norm.isf(p1) + W * stats.norm.isf(p2) > look_two_bound(level)
