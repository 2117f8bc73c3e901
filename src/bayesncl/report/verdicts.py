"""The verdict statistics of the claims table: one comparison of two sides' seeds (or of one side with a
constant) decided on the 95% Student-t interval of the mean difference, paired by seed or Welch.

The verdict rule (docs/METHOD.md section 9), in ``compare``:

- the evidence is the seeds: with at least 2 seeds whose values are finite on both sides, the difference is
  paired by seed (d_s = left_s - right_s, a one-sample t on d, n - 1 degrees of freedom); otherwise the
  sides are compared unpaired (Welch, Welch-Satterthwaite degrees of freedom); claims 7a/7b compare one
  side with 0 (one-sample t);
- the difference is signed so that the claimed direction is positive: "down" metrics (SE, |rho|, the sign
  of 7b) use right - left;
- the 95% Student-t interval [lo, hi] of the mean difference decides, by the claim's kind: "better" holds
  when lo > 0 and does not hold when hi < 0; "not worse" (margin delta) holds when lo > -delta and does
  not hold when hi < -delta; "within tol" holds when [lo, hi] lies strictly inside (-tol, tol) and does
  not hold when it lies wholly on one side outside it; "at most tol more" (12a/12b: tol relative to the
  right side's mean; one-sided, left - right unsigned) holds when hi < tol and does not hold when lo > tol;
- otherwise "inconclusive", leaning for or against the claim by where the mean difference alone falls;
  without an interval (fewer than 2 seeds on a side) always inconclusive; "not run" when a side has no
  finite value. A std of 0 (GFLOPs) gives the degenerate interval [d, d], decided like any other.

The familywise control (``p_values``, ``graph``, ``family_verdicts``): each comparison's interval is two
one-sided t-tests against its bound; their p-values, doubled so that p < 0.05 is exactly the 95% interval clearing
the bound, are tested by a graphical procedure (Bretz et al. 2009): the primary comparisons (claims.PRIMARY) share
the level, and each that holds passes its level on, half to the other primary ones and half to the secondary ones
(the rest), which pass theirs among themselves; a stuck primary claim keeps its share but no longer silences the
others. A comparison the graph gives no level keeps its plain verdict, marked "not controlled". Only comparisons with
an interval are nodes. A grid grown by `bayesncl plan` is judged in two looks, look 2 combining both stages by the
inverse normal method (``look_two_rejects``, ``two_looks``).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

__all__ = ["ALPHA", "BETTER", "EARLY", "LOOK_ALPHAS", "NOT_WORSE", "STAGE_WEIGHTS", "VERDICTS", "Family", "Kind",
           "Outcome", "Values", "at_most", "combine", "compare", "decision", "family_codes", "family_verdicts",
           "finite", "graph", "graph_test", "look_two_bound", "look_two_rejects", "mean_interval", "one_sided",
           "p_values", "passed_on", "two_looks", "within"]

HOLDS, FAILS, NOT_RUN = "holds", "does not hold", "not run"
LEANS_FOR, LEANS_AGAINST = "inconclusive (leans for)", "inconclusive (leans against)"
VERDICTS = (HOLDS, LEANS_FOR, LEANS_AGAINST, FAILS, NOT_RUN)
_STRENGTH = {HOLDS: 4, LEANS_FOR: 3, LEANS_AGAINST: 2, FAILS: 1, NOT_RUN: 0}
CONFIDENCE = 0.95
ALPHA = 0.05  # the familywise error rate of the table's family of claims
FAMILY_HOLDS, FAMILY_FAILS, FAMILY_OPEN = "holds (family)", "does not hold (family)", "inconclusive (family)"
UNCONTROLLED = "not controlled"  # a verdict the family's graph gave no level (no primary claim decided)

Values = Sequence[tuple[float, float]]  # (seed, value) per run; the value NaN when undefined


# ----------------------------------------------------------------------------- verdict rule
@dataclass(frozen=True)
class Kind:
    """How a claim is decided: "better" (>), "not worse" (>= with margin ``margin``), "within" (|d| <
    ``margin``) or "at most" (left - right < ``margin``, one-sided); with ``relative``, ``margin`` x |mean of
    the right side|. ``source``: where the margin comes from (the claims table's Margin column)."""
    name: str
    margin: float = 0.0
    relative: bool = False
    source: str = ""


SPEC = "spec"  # a margin declared in docs/METHOD.md section 9 (the paper reports no seed spread to set it from)
BETTER = Kind("better")
NOT_WORSE = Kind("not worse", 1.0, source=SPEC)  # 1 point of accuracy, P@k or SC (claims.MARGINS, per metric)


def within(tol: float, relative: bool = False, source: str = "") -> Kind:
    return Kind("within", tol, relative, source)


def at_most(tol: float, relative: bool = False, source: str = "") -> Kind:
    """At most ``tol`` more than the right side (a cost): a cheaper left side satisfies it."""
    return Kind("at most", tol, relative, source)


UNSIGNED = ("within", "at most")  # kinds read on left - right whatever the metric's better direction


@dataclass(frozen=True)
class Outcome:
    """A comparison's evidence and verdict. ``diff``, ``low``, ``high`` are signed so that the claimed
    direction is positive (right - left for "down" metrics); ``low``/``high`` are NaN without an
    interval. ``tol`` is the margin in the metric's unit (``ref`` x margin when relative)."""
    verdict: str
    test: str = ""            # "paired", "Welch", "one-sample"; "" when not run
    n: tuple[int, ...] = ()   # paired / one-sample: (n,); Welch: (n_left, n_right)
    diff: float = math.nan
    low: float = math.nan
    high: float = math.nan
    tol: float = 0.0
    ref: float = math.nan     # the right side's mean over the values used (relative tolerances)
    left: tuple[float, ...] = ()   # the values the test used
    right: tuple[float, ...] = ()
    se: float = math.nan      # the standard error of ``diff`` and its t degrees of freedom (the interval's)
    dof: float = math.nan

    @property
    def has_interval(self) -> bool:
        return math.isfinite(self.low) and math.isfinite(self.high)


def finite(values: Values) -> list[tuple[float, float]]:
    return [(s, float(v)) for s, v in values if v is not None and math.isfinite(v)]


def _t(df: float) -> float:
    from scipy import stats  # lazy: the report imports claims; scipy.stats costs ~0.3 s

    return float(stats.t.ppf(0.5 + CONFIDENCE / 2, df))


def _interval(mean: float, se: float, df: float) -> tuple[float, float]:
    half = _t(df) * se  # se 0 (every difference equal, e.g. GFLOPs): the degenerate interval [d, d]
    return mean - half, mean + half


def mean_interval(d) -> tuple[float, float, float]:
    """(mean, low, high): the mean of the values ``d`` (paired differences, or one sample) and its 95%
    Student-t interval, n - 1 degrees of freedom; NaN bounds below two values."""
    d = np.asarray(d, dtype=float)
    diff = float(d.mean())
    if d.size < 2:
        return diff, math.nan, math.nan
    return (diff, *_interval(diff, float(d.std(ddof=1)) / math.sqrt(d.size), d.size - 1))


def _judge(kind: Kind, diff: float, low: float, high: float, tol: float) -> str:
    """The verdict from the interval (NaN bounds: none), else the lean of the mean difference."""
    if kind.name == "within":  # strict, as the family's p < alpha: an interval touching the bound does not hold
        holds, fails, leans = (-tol < low and high < tol), (low > tol or high < -tol), abs(diff) <= tol
    elif kind.name == "at most":
        holds, fails, leans = high < tol, low > tol, diff <= tol
    else:  # "better" is "not worse" with a margin of 0
        holds, fails, leans = low > -tol, high < -tol, diff > -tol
    if holds:
        return HOLDS
    if fails:
        return FAILS
    return LEANS_FOR if leans else LEANS_AGAINST


def compare(left: Values, right: "Values | float", kind: Kind = BETTER, better: str = "up") -> Outcome:
    """Decide ``left`` against ``right`` (the runs of each side as (seed, value) pairs, or a constant for a
    one-sample claim) by the rule of the module docstring. ``better``: "up" (higher is the claim) or
    "down"; ignored for "within" and "at most" (read on left - right)."""
    if better not in ("up", "down"):
        raise ValueError(f"better must be 'up' or 'down', not {better!r}")
    sign = -1.0 if better == "down" and kind.name not in UNSIGNED else 1.0
    lf = finite(left)
    if isinstance(right, (int, float)):  # one-sample against a constant
        d = np.array([sign * (v - right) for _, v in lf])
        ref = abs(float(right))
        tol = kind.margin * ref if kind.relative else kind.margin
        if d.size == 0:
            return Outcome(NOT_RUN)
        diff, low, high = mean_interval(d)
        return Outcome(_judge(kind, diff, low, high, tol), "one-sample", (int(d.size),), diff, low, high, tol,
                       ref, tuple(v for _, v in lf), (), *_se(d))
    rf = finite(right)
    if not lf or not rf:
        return Outcome(NOT_RUN)
    lseeds, rseeds = [s for s, _ in lf], [s for s, _ in rf]
    unique = len(set(lseeds)) == len(lseeds) and len(set(rseeds)) == len(rseeds)
    shared = [s for s in lseeds if s in set(rseeds)] if unique else []
    if len(shared) >= 2:
        lv, rv = dict(lf), dict(rf)
        a, b = np.array([lv[s] for s in shared]), np.array([rv[s] for s in shared])
        diff, low, high = mean_interval(sign * (a - b))
        se, dof = _se(sign * (a - b))
        test, n = "paired", (int(a.size),)
    else:
        a, b = np.array([v for _, v in lf]), np.array([v for _, v in rf])
        diff = sign * float(a.mean() - b.mean())
        low = high = se = dof = math.nan
        if a.size >= 2 and b.size >= 2:
            va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
            se = math.sqrt(va + vb)
            dof = (va + vb) ** 2 / (va ** 2 / (a.size - 1) + vb ** 2 / (b.size - 1)) if se > 0 else math.inf
            low, high = _interval(diff, se, dof)
        test, n = "Welch", (int(a.size), int(b.size))
    ref = abs(float(b.mean()))
    tol = kind.margin * ref if kind.relative else kind.margin
    return Outcome(_judge(kind, diff, low, high, tol), test, n, diff, low, high, tol, ref,
                   tuple(a.tolist()), tuple(b.tolist()), se, dof)


def _se(d) -> tuple[float, float]:
    """(standard error, degrees of freedom) of the mean of ``d``, as mean_interval takes them; NaN below 2."""
    d = np.asarray(d, dtype=float)
    return (float(d.std(ddof=1)) / math.sqrt(d.size), d.size - 1.0) if d.size >= 2 else (math.nan, math.nan)


def combine(parts: list[Outcome]) -> tuple[str, Outcome]:
    """A claim of several comparisons: "does not hold" when any part does not hold, "holds" only when every
    part holds, else inconclusive with the lean of the weakest part; returns the verdict and the part
    that decides it (the weakest; among equals, the smallest mean difference). ``parts`` is not empty."""
    weakest = min(parts, key=lambda p: (_STRENGTH[p.verdict], p.diff))  # "not run" is the weakest
    return weakest.verdict, weakest


# ----------------------------------------------------------------------------- familywise control
# A grown grid (`bayesncl plan`) is judged in two looks, the familywise level spent over them: LOOK_ALPHAS[0] at look
# 1 (the pilot's seeds alone), the rest at look 2, which combines both stages (docs/METHOD.md section 9, "Planning").
LOOK_ALPHAS = (0.01, 0.04)
EARLY = LOOK_ALPHAS[0] / ALPHA  # the share of a comparison's level spent at look 1
# The stages' weights in the inverse normal combination (Lehmacher and Wassmer 1999), fixed here before any pilot ran:
# equal (w1^2 = w2^2 = 1/2), whatever the pilot showed or the planner added.
STAGE_WEIGHTS = (math.sqrt(0.5), math.sqrt(0.5))
# The family's graph (Bretz et al. 2009): the primary claims share the level; one that holds passes PASS_ON of its
# level to the secondary claims and the rest to the other primary claims; a secondary claim that holds passes its
# level to the other secondary claims.
PASS_ON = 0.5
HOLD, FAIL, OPEN = 1, -1, 0  # familywise decision codes


def one_sided(diff, se, dof, tol, kind: Kind) -> np.ndarray:
    """The one-sided t-tests a verdict's interval reads, their p-values not doubled: shape (2, 2, ...) = [for,
    against] x [two tests]. "within": for = inside both bounds (both tests must clear), against = wholly outside
    (either suffices); every other kind one test, given twice. A standard error of 0 (every difference equal) gives
    0 or 1, beyond the bound or not (on it: 1, the strict rule); NaN without an interval."""
    from scipy import stats  # lazy: the report imports claims; scipy.stats costs ~0.3 s

    diff, se, dof, tol = (np.asarray(x, dtype=float) for x in (diff, se, dof, tol))

    def p(bound, above: bool):  # H0: mean <= bound (above), mean >= bound (below)
        with np.errstate(divide="ignore", invalid="ignore"):
            t = (diff - bound) / se
        return np.where((se == 0) & np.isnan(t), 1.0, stats.t.sf(t, dof) if above else stats.t.cdf(t, dof))

    if kind.name == "within":
        tests = ((p(-tol, True), p(tol, False)), (p(tol, True), p(-tol, False)))
    elif kind.name == "at most":
        tests = ((p(tol, False),) * 2, (p(tol, True),) * 2)
    else:
        tests = ((p(-tol, True),) * 2, (p(-tol, False),) * 2)
    return np.array(tests, dtype=float)


def doubled(one) -> tuple[np.ndarray, np.ndarray]:
    """(p for, p against) from ``one_sided``'s tests: doubled, so that p < ALPHA is the 95% interval's side clearing
    its bound; "for" the larger of its two tests, "against" the smaller; at most 1."""
    one = np.asarray(one, dtype=float)
    return np.minimum(1.0, 2.0 * np.max(one[0], axis=0)), np.minimum(1.0, 2.0 * np.min(one[1], axis=0))


def p_arrays(diff, se, dof, tol, kind: Kind) -> tuple[np.ndarray, np.ndarray]:
    """(p for, p against) of ``p_values`` for arrays of comparisons of one kind (the simulations' form)."""
    return doubled(one_sided(diff, se, dof, tol, kind))


def stage_p(r: Outcome, kind: Kind) -> np.ndarray:
    """``one_sided`` of one outcome: its (2, 2) tests, NaN without an interval."""
    if not r.has_interval:
        return np.full((2, 2), math.nan)
    return one_sided(r.diff, r.se, r.dof, r.tol, kind)


def p_values(r: Outcome, kind: Kind) -> tuple[float, float]:
    """(p for, p against): the p-values of the one-sided t-tests the verdict's interval reads (docs/METHOD.md
    section 9, "Controls"), doubled so that p < ALPHA is exactly the 95% interval clearing its bound: a family of
    one gives the plain verdict. "For" tests that the mean difference lies beyond -tol ("within": inside
    [-tol, tol], the larger of its two p-values; "at most": below tol); "against" the opposite side of the same
    bound ("within": wholly outside it, the smaller). NaN without an interval; a degenerate interval (se 0) gives
    0 or 1 by its verdict."""
    pf, pa = doubled(stage_p(r, kind))
    return float(pf), float(pa)


# ----------------------------------------------------------------------------- two looks: the combination test
def _phi2(h, k, rho: float) -> np.ndarray:
    """The bivariate standard normal cdf P(X <= h, Y <= k) at correlation ``rho`` by Owen's T function (Owen 1956):
    (Phi(h) + Phi(k)) / 2 - T(h, a_h) - T(k, a_k) - [hk < 0] / 2, a_h = (k - rho h) / (h sqrt(1 - rho^2))."""
    from scipy import special

    h, k = np.broadcast_arrays(np.asarray(h, dtype=float), np.asarray(k, dtype=float))
    h, k = np.where(h == 0, 1e-300, h), np.where(k == 0, 1e-300, k)  # the formula's limit at 0
    s = math.sqrt(1.0 - rho * rho)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ah, ak = (k - rho * h) / (h * s), (h - rho * k) / (k * s)
    out = (special.ndtr(h) + special.ndtr(k)) / 2 - special.owens_t(h, ah) - special.owens_t(k, ak)
    return np.clip(out - np.where(h * k < 0, 0.5, 0.0), 0.0, 1.0)


def _after_look_one(level, z) -> np.ndarray:
    """P(Z1 <= c1, w1 Z1 + w2 Z2 > z) for independent standard normal Z1, Z2 (the null), c1 = look 1's bound at the
    one-sided ``level``: what look 2 spends of the level at the bound z."""
    from scipy import special

    level, z = np.asarray(level, dtype=float), np.asarray(z, dtype=float)
    c1 = -special.ndtri(EARLY * level)
    return special.ndtr(-z) - _phi2(-c1, -z, STAGE_WEIGHTS[0])  # P(sum > z) less P(Z1 > c1, sum > z)


@functools.lru_cache(maxsize=4096)
def look_two_bound(level: float) -> float:
    """c2, look 2's bound on w1 z1 + w2 z2 at the one-sided ``level`` (a comparison's share of the family's, not
    doubled): look 1 rejects where z1 > c1 (p1 < EARLY x level), look 2 where z1 <= c1 and the combination > c2; the
    two together spend exactly ``level`` under the null."""
    from scipy import optimize

    return float(optimize.brentq(lambda c: float(_after_look_one(level, c)) - (1 - EARLY) * level, -40.0, 40.0,
                                 xtol=1e-13))


def look_two_rejects(one1, one2, level) -> tuple[np.ndarray, np.ndarray]:
    """The two-stage design's decisions (for, against) at the doubled ``level`` (broadcast over the comparisons),
    from each look's ``one_sided`` tests: a test rejects at look 1 where p1 < EARLY x level / 2, at look 2 where
    w1 z1 + w2 z2 > look_two_bound(level / 2), z = the normal quantile 1 - p of each stage's own t-test (Lehmacher
    and Wassmer 1999); "for" needs each of its tests, "against" one. A stage without an interval adds z = 0, no
    evidence (still a valid test: look_two_bound / w is never below the level's own quantile); a test without an
    interval at either look never rejects."""
    from scipy import special

    p1, p2 = np.asarray(one1, dtype=float), np.asarray(one2, dtype=float)
    half = np.broadcast_to(np.asarray(level, dtype=float) / 2, p1.shape[2:])
    values, where = np.unique(half, return_inverse=True)
    c2 = np.array([look_two_bound(float(v)) if v > 0 else math.inf for v in values])[where.reshape(half.shape)]

    def z(p):
        return np.where(np.isnan(p), 0.0, -special.ndtri(np.clip(p, 1e-300, 1 - 1e-16)))

    with np.errstate(invalid="ignore"):
        each = (p1 < EARLY * half) | (STAGE_WEIGHTS[0] * z(p1) + STAGE_WEIGHTS[1] * z(p2) > c2)
    each &= ~(np.isnan(p1) & np.isnan(p2))
    return each[0].all(axis=0), each[1].any(axis=0)


# ----------------------------------------------------------------------------- the family's graph
def graph(primary, node) -> tuple[np.ndarray, np.ndarray]:
    """The family's initial weights w (summing to 1 over its nodes) and transition matrix G (Bretz et al. 2009), over
    the last axis: the nodes are the comparisons with a test (``node``); the primary ones share the weight, each
    passing PASS_ON of it to the secondary ones and the rest to the other primary ones, equally (all of it to one
    kind where the other has no node); a secondary node passes to the other secondary ones (a lone one to the
    primary ones). Without a primary node the secondary ones share the weight equally: Holm's procedure."""
    P = np.asarray(primary, dtype=bool) & np.asarray(node, dtype=bool)
    S = ~np.asarray(primary, dtype=bool) & np.asarray(node, dtype=bool)
    P, S = np.broadcast_arrays(P, S)
    k, s = P.sum(axis=-1, keepdims=True).astype(float), S.sum(axis=-1, keepdims=True).astype(float)

    def each(x):  # 1 / x, 0 where x is 0
        return np.divide(1.0, x, out=np.zeros_like(x), where=x > 0)

    w = np.where(P, each(k), np.where(k == 0, S * each(s), 0.0))
    to_s = (np.where(k > 1, PASS_ON, 1.0) * each(s))[..., None]            # a primary node's, to each secondary
    to_p = (np.where(s > 0, 1.0 - PASS_ON, 1.0) * each(k - 1))[..., None]  # ... to each other primary
    back = (np.where(s == 1, 1.0, 0.0) * each(k))[..., None]               # a lone secondary's, to each primary
    off = ~np.eye(P.shape[-1], dtype=bool)
    Pi, Pj, Si, Sj = P[..., :, None], P[..., None, :], S[..., :, None], S[..., None, :]
    G = (Pi & Pj & off) * to_p + (Pi & Sj) * to_s + (Si & Sj & off) * each(s - 1)[..., None] + (Si & Pj) * back
    return w, G


def _remove(w, G, j) -> tuple[np.ndarray, np.ndarray]:
    """Bretz et al. 2009, Algorithm 1's update for node j (``j`` one-hot over the last axis; a row without one stays):
    w_l += w_j g_jl; g_lk = (g_lk + g_lj g_jk) / (1 - g_lj g_jl) (0 where the denominator is 0); j's edges gone."""
    j = np.asarray(j, dtype=bool)
    act = j.any(axis=-1)
    out_j = np.sum(G * j[..., :, None], axis=-2)  # g_jl, per l
    into_j = np.sum(G * j[..., None, :], axis=-1)  # g_lj, per l
    w = np.where(j, 0.0, w + np.sum(w * j, axis=-1, keepdims=True) * out_j)
    num = G + into_j[..., :, None] * out_j[..., None, :]
    den = (1.0 - into_j * out_j)[..., :, None]
    new = np.divide(num, den, out=np.zeros_like(num), where=den > 1e-12)
    keep = ~j[..., :, None] & ~j[..., None, :] & ~np.eye(G.shape[-1], dtype=bool)
    return w, np.where(act[..., None, None], np.where(keep, new, 0.0), G)


def graph_test(test, w, G, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Bretz et al. 2009, Algorithm 1 (the sequentially rejective graphical procedure) over the last axis: while some
    node's test rejects at its weight x ``alpha``, reject it and pass its weight on (_remove). ``test``: the p-values
    (a node rejects where p < its level; NaN never), or a function of the levels giving where each rejects (a test
    that rejects at a level rejects at any higher one). Returns (rejected, the final weights). The order of the
    rejections does not change the result."""
    if not callable(test):
        p = np.asarray(test, dtype=float)

        def test(level):
            with np.errstate(invalid="ignore"):
                return p < level
        shape = p.shape
    else:
        shape = np.broadcast_shapes(np.shape(w), np.shape(G)[:-1])
    w = np.broadcast_to(w, shape).astype(float)
    G = np.broadcast_to(G, shape + shape[-1:]).astype(float)
    rejected = np.zeros(shape, dtype=bool)
    for _ in range(shape[-1]):
        can = ~rejected & (w > 0) & np.broadcast_to(test(w * alpha), shape)
        if not can.any():
            break
        first = (np.cumsum(can, axis=-1) == 1) & can  # one a row: the first that can go
        w, G = _remove(w, G, first)
        rejected |= first
    return rejected, w


def passed_on(primary, node, removed) -> np.ndarray:
    """The weights of ``graph(primary, node)`` once the nodes ``removed`` (say, the claims expected to hold) have
    passed theirs on: each node's share of the level it is then tested at, at least."""
    w, G = graph(primary, node)
    for j in np.flatnonzero(np.asarray(removed, dtype=bool) & np.asarray(node, dtype=bool)):
        w, G = _remove(w, G, np.arange(w.shape[-1]) == j)
    return w


def family_codes(test_for, test_against, primary, node, alpha: float = ALPHA) -> tuple[np.ndarray, np.ndarray]:
    """The familywise decisions over the last axis: the graph's procedure at ``alpha`` on the tests for (HOLD) and,
    apart, against (FAIL), each direction at the full level (doubled p: one-sided ALPHA / 2 each); a test as
    graph_test takes it. Returns (codes, controlled: False for a node the graph gave no level in either direction)."""
    w, G = graph(primary, node)
    hold, w_for = graph_test(test_for, w, G, alpha)
    fail, w_against = graph_test(test_against, w, G, alpha)
    node = np.broadcast_to(node, hold.shape)
    codes = np.where(hold, HOLD, np.where(fail, FAIL, OPEN))
    return codes, ~node | hold | fail | (w_for > 0) | (w_against > 0)


def two_looks(one1, one2, primary, alpha: float = ALPHA) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A grown grid's familywise decisions over the last axis from each look's ``one_sided`` tests (shape (2, 2,
    ..., m); NaN where a look has no interval): the graph's procedure with each comparison's two-stage test
    (look_two_rejects: look 1 spends EARLY of its level on the pilot's seeds, look 2 the rest on both stages), and
    the same graph at look 1 alone. Returns (codes, controlled, look: 1 where look 1 decided or no seeds were
    added, else 2)."""
    one1, one2 = np.asarray(one1, dtype=float), np.asarray(one2, dtype=float)
    node = np.isfinite(doubled(one1)[0]) | np.isfinite(doubled(one2)[0])
    early = [p / EARLY for p in doubled(one1)]
    first, _ = family_codes(early[0], early[1], primary, node, alpha)
    codes, controlled = family_codes(lambda a: look_two_rejects(one1, one2, a)[0],
                                     lambda a: look_two_rejects(one1, one2, a)[1], primary, node, alpha)
    return codes, controlled, np.where((first != OPEN) | ~np.isfinite(doubled(one2)[0]), 1, 2)


@dataclass(frozen=True)
class Family:
    """The familywise verdicts of a table (``verdicts``, in the input's order): ``primary`` the indices of the primary
    comparisons that ran, ``blocking`` those of them that do not hold familywise, ``secondary`` the level the
    secondary family was tested at in all (what the primary claims that hold passed on)."""
    verdicts: list[str]
    primary: tuple[int, ...] = ()
    blocking: tuple[int, ...] = ()
    alpha: float = ALPHA
    secondary: float = ALPHA

    @property
    def gate_open(self) -> bool:
        return not self.blocking


def decision(verdict: str) -> str | None:
    """HOLDS or FAILS when ``verdict`` (plain or familywise) decides, else None."""
    for v in (FAILS, HOLDS):  # "does not hold" first: it ends in "hold"
        if verdict == v or verdict.startswith(v + " ("):
            return v
    return None


def label(code: int, controlled: bool, plain: str, look: int | None = None) -> str:
    """A familywise verdict in words: "holds (family)", "inconclusive (family, look 2)", or, for a comparison the graph
    gave no level, the plain verdict: "holds (not controlled)"; "not run" stays."""
    if plain == NOT_RUN:
        return NOT_RUN
    at = f", look {look}" if look else ""
    if not controlled:
        return f"{decision(plain) or 'inconclusive'} ({UNCONTROLLED}{at})"
    return {HOLD: HOLDS, FAIL: FAILS}.get(int(code), "inconclusive") + f" (family{at})"


def make_family(verdicts: list[str], codes, node, primary, ran, alpha: float = ALPHA) -> Family:
    """The Family of decided ``codes`` over the graph's nodes ``node``: its primary comparisons that ran, those that do
    not hold, and the level the secondary family got from the primary ones that hold."""
    prim, ran, node = (np.asarray(x, dtype=bool) for x in (primary, ran, node))
    first = tuple(int(i) for i in np.flatnonzero(prim & ran))
    held = prim & (np.asarray(codes) == HOLD)
    secondary = alpha * float(np.sum(passed_on(prim, node, held)[~prim & node])) if len(prim) else alpha
    return Family(verdicts, first, tuple(i for i in first if codes[i] != HOLD), alpha, secondary)


def _p_lists(judged: Sequence[tuple[Outcome, Kind]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    ps = [p_values(r, k) for r, k in judged]
    ran = np.array([r.verdict != NOT_RUN for r, _ in judged], dtype=bool)
    return np.array([p for p, _ in ps], dtype=float), np.array([p for _, p in ps], dtype=float), ran


def family_verdicts(judged: Sequence[tuple[Outcome, Kind]], primary: Sequence[bool] | None = None,
                    alpha: float = ALPHA) -> Family:
    """Each comparison's familywise verdict by the family's graph (``graph``, ``family_codes``) at ``alpha``: the
    primary comparisons (``primary`` True; none: the whole table is one family, Holm) share the level and pass it on
    as they hold. "holds (family)" where the procedure rejects on the p for, "does not hold (family)" where it rejects
    on the p against; a comparison the graph gave no level in either direction keeps its plain verdict, marked "not
    controlled"; "not run" as the plain verdict; else inconclusive. Comparisons without an interval are no node."""
    prim = np.array(list(primary) if primary is not None else [False] * len(judged), dtype=bool)
    if not judged:
        return Family([], alpha=alpha)
    pf, pa, ran = _p_lists(judged)
    codes, controlled = family_codes(pf, pa, prim, np.isfinite(pf), alpha)
    out = [label(c, k, r.verdict) for c, k, (r, _) in zip(codes, controlled, judged)]
    return make_family(out, codes, np.isfinite(pf), prim, ran, alpha)
