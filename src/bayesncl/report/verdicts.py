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

The familywise control (``p_values``, ``holm``, ``family_verdicts``): each comparison's interval is two
one-sided t-tests against its bound; their p-values, doubled so that p < 0.05 is exactly the 95% interval
clearing the bound, are adjusted by Holm's step-down. The primary comparisons (claims.PRIMARY) are one family,
tested first; only when every one of them holds is the secondary family (the rest) tested, again by Holm at
the full level (serial gatekeeping); otherwise the secondary verdicts are the plain ones, marked "not
controlled". Only comparisons with an interval count in a family's size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

__all__ = ["ALPHA", "BETTER", "NOT_WORSE", "VERDICTS", "Family", "Kind", "Outcome", "Values", "at_most",
           "combine", "compare", "decision", "family_verdicts", "finite", "holm", "mean_interval", "p_values",
           "within"]

HOLDS, FAILS, NOT_RUN = "holds", "does not hold", "not run"
LEANS_FOR, LEANS_AGAINST = "inconclusive (leans for)", "inconclusive (leans against)"
VERDICTS = (HOLDS, LEANS_FOR, LEANS_AGAINST, FAILS, NOT_RUN)
_STRENGTH = {HOLDS: 4, LEANS_FOR: 3, LEANS_AGAINST: 2, FAILS: 1, NOT_RUN: 0}
CONFIDENCE = 0.95
ALPHA = 0.05  # the familywise error rate of the table's family of claims
FAMILY_HOLDS, FAMILY_FAILS, FAMILY_OPEN = "holds (family)", "does not hold (family)", "inconclusive (family)"
UNCONTROLLED = "not controlled"  # a secondary verdict while a primary claim does not hold (gatekeeping)

Values = Sequence[tuple[float, float]]  # (seed, value) per run; the value NaN when undefined


# ----------------------------------------------------------------------------- verdict rule
@dataclass(frozen=True)
class Kind:
    """How a claim is decided: "better" (>), "not worse" (>= with margin ``margin``), "within" (|d| <
    ``margin``) or "at most" (left - right < ``margin``, one-sided); with ``relative``, ``margin`` x |mean of
    the right side|."""
    name: str
    margin: float = 0.0
    relative: bool = False


BETTER = Kind("better")
NOT_WORSE = Kind("not worse", 1.0)  # 1 point of accuracy, P@k or SC


def within(tol: float, relative: bool = False) -> Kind:
    return Kind("within", tol, relative)


def at_most(tol: float, relative: bool = False) -> Kind:
    """At most ``tol`` more than the right side (a cost): a cheaper left side satisfies it."""
    return Kind("at most", tol, relative)


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
# A grown grid (`bayesncl plan`) is judged in two looks: the familywise level split over them, so that the chance of a
# false "holds" over both stays at ALPHA whatever the pilot made the planner add (docs/METHOD.md section 9).
LOOK_ALPHAS = (0.01, 0.04)
HOLD, FAIL, OPEN = 1, -1, 0  # familywise decision codes


def p_arrays(diff, se, dof, tol, kind: Kind) -> tuple[np.ndarray, np.ndarray]:
    """(p for, p against) of ``p_values`` for arrays of comparisons of one kind (the simulations' form)."""
    from scipy import stats  # lazy: the report imports claims; scipy.stats costs ~0.3 s

    diff, se, dof, tol = (np.asarray(x, dtype=float) for x in (diff, se, dof, tol))

    def above(b):  # H0: mean <= b
        return np.minimum(1.0, 2.0 * stats.t.sf((diff - b) / se, dof))

    def below(b):  # H0: mean >= b
        return np.minimum(1.0, 2.0 * stats.t.cdf((diff - b) / se, dof))

    with np.errstate(divide="ignore", invalid="ignore"):
        if kind.name == "within":
            return np.maximum(above(-tol), below(tol)), np.minimum(above(tol), below(-tol))
        if kind.name == "at most":
            return below(tol), above(tol)
        return above(-tol), below(-tol)


def p_values(r: Outcome, kind: Kind) -> tuple[float, float]:
    """(p for, p against): the p-values of the one-sided t-tests the verdict's interval reads (docs/METHOD.md
    section 9, "Controls"), doubled so that p < ALPHA is exactly the 95% interval clearing its bound: a family of
    one gives the plain verdict. "For" tests that the mean difference lies beyond -tol ("within": inside
    [-tol, tol], the larger of its two p-values; "at most": below tol); "against" the opposite side of the same
    bound ("within": wholly outside it, the smaller). NaN without an interval; a degenerate interval (se 0) gives
    0 or 1 by its verdict."""
    if not r.has_interval:
        return math.nan, math.nan
    if not r.se > 0:
        return float(r.verdict != HOLDS), float(r.verdict != FAILS)
    pf, pa = p_arrays(r.diff, r.se, r.dof, r.tol, kind)
    return float(pf), float(pa)


def holm(p) -> np.ndarray:
    """Holm's step-down adjusted p-values (statsmodels' multipletests(method="holm"), transcribed) along the last
    axis: sorted ascending, the i-th smallest (from 0) times (m - i), made non-decreasing, capped at 1; in the
    input's order. NaN (a comparison without an interval) stays NaN and does not count in m."""
    p = np.asarray(p, dtype=float)
    m = np.sum(np.isfinite(p), axis=-1, keepdims=True)
    order = np.argsort(np.where(np.isfinite(p), p, np.inf), axis=-1, kind="stable")
    ranked = np.take_along_axis(p, order, axis=-1)
    adjusted = np.fmax.accumulate(np.minimum(1.0, (m - np.arange(p.shape[-1])) * ranked), axis=-1)
    adjusted = np.where(np.isfinite(ranked), adjusted, np.nan)
    out = np.empty_like(adjusted)
    np.put_along_axis(out, order, adjusted, axis=-1)
    return out


def gatekeep(p_for, p_against, primary, ran, alpha: float = ALPHA) -> tuple[np.ndarray, np.ndarray]:
    """Serial gatekeeping over the last axis (one family per row): Holm at ``alpha`` over the primary comparisons
    that ran, then over the others only where every primary one that ran holds. Returns (codes: HOLD, FAIL or
    OPEN; controlled: False for the others where the gate stayed closed). NaN p: no interval (never decided,
    not in m); a primary comparison that ran without an interval cannot hold and so keeps the gate closed."""
    pf, pa = np.asarray(p_for, dtype=float), np.asarray(p_against, dtype=float)
    primary, ran = np.broadcast_to(primary, pf.shape), np.broadcast_to(ran, pf.shape)

    def holm_codes(member):
        af, aa = holm(np.where(member, pf, np.nan)), holm(np.where(member, pa, np.nan))
        with np.errstate(invalid="ignore"):
            return np.where(af < alpha, HOLD, np.where(aa < alpha, FAIL, OPEN))

    first = holm_codes(primary & ran)
    blocked = np.any(primary & ran & (first != HOLD), axis=-1, keepdims=True)
    codes = np.where(primary, first, np.where(blocked, OPEN, holm_codes(~primary & ran)))
    return np.where(ran, codes, OPEN), primary | ~blocked


def two_looks(p1, ran1, p2, ran2, primary) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A grown grid's familywise decisions: look 1 (``p1`` = (p for, p against) on the pilot's seeds) gatekept at
    LOOK_ALPHAS[0] decides what it can; look 2 (the added seeds alone) tests the rest at LOOK_ALPHAS[1], the
    primary family first again: a primary comparison that held at look 1 counts as holding, one that did not hold,
    or is open with no added seeds, keeps the gate closed. Returns (codes, controlled, look: 1 or 2 per
    comparison)."""
    c1, ctl1 = gatekeep(*p1, primary, ran1, LOOK_ALPHAS[0])
    decided = ctl1 & (c1 != OPEN) & np.broadcast_to(ran1, c1.shape)
    second = np.broadcast_to(ran2, c1.shape) & ~decided
    c2, ctl2 = gatekeep(*p2, primary, second, LOOK_ALPHAS[1])
    primary = np.broadcast_to(primary, c1.shape)
    ran_any = np.broadcast_to(ran1, c1.shape) | np.broadcast_to(ran2, c1.shape)
    stuck = primary & ran_any & ~(decided & (c1 == HOLD)) & ~(second & (c2 == HOLD))
    ctl2 = ctl2 & ~(np.any(stuck, axis=-1, keepdims=True) & ~primary)
    codes = np.where(decided, c1, np.where(second, c2, c1))
    controlled = np.where(decided, True, np.where(second, ctl2, ctl1))
    return codes, controlled, np.where(second, 2, 1)


@dataclass(frozen=True)
class Family:
    """The familywise verdicts of a table (``verdicts``, in the input's order) and the gate: ``primary`` the
    indices of the primary comparisons that ran, ``blocking`` those of them that do not hold familywise (the
    secondary family is tested only when it is empty)."""
    verdicts: list[str]
    primary: tuple[int, ...] = ()
    blocking: tuple[int, ...] = ()
    alpha: float = ALPHA

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
    """A familywise verdict in words: "holds (family)", "inconclusive (family, look 2)", or a secondary verdict the
    gate left uncontrolled: the plain one, "holds (not controlled)"; "not run" stays."""
    if plain == NOT_RUN:
        return NOT_RUN
    at = f", look {look}" if look else ""
    if not controlled:
        return f"{decision(plain) or 'inconclusive'} ({UNCONTROLLED}{at})"
    return {HOLD: HOLDS, FAIL: FAILS}.get(int(code), "inconclusive") + f" (family{at})"


def _p_lists(judged: Sequence[tuple[Outcome, Kind]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    ps = [p_values(r, k) for r, k in judged]
    ran = np.array([r.verdict != NOT_RUN for r, _ in judged], dtype=bool)
    return np.array([p for p, _ in ps], dtype=float), np.array([p for _, p in ps], dtype=float), ran


def family_verdicts(judged: Sequence[tuple[Outcome, Kind]], primary: Sequence[bool] | None = None,
                    alpha: float = ALPHA) -> Family:
    """Each comparison's familywise verdict by serial gatekeeping (``gatekeep``): the primary comparisons
    (``primary`` True; none: the whole table is one family) by Holm at ``alpha``; then, only when every primary
    comparison that ran holds familywise, the others by Holm at ``alpha``; otherwise the others' plain verdicts,
    marked "not controlled". "holds (family)" when the Holm-adjusted p for is below ``alpha``, "does not hold
    (family)" when the adjusted p against is; "not run" as the plain verdict; else inconclusive."""
    prim = np.array(list(primary) if primary is not None else [False] * len(judged), dtype=bool)
    if not judged:
        return Family([], alpha=alpha)
    pf, pa, ran = _p_lists(judged)
    codes, controlled = gatekeep(pf, pa, prim, ran, alpha)
    out = [label(c, k, r.verdict) for c, k, (r, _) in zip(codes, controlled, judged)]
    first = tuple(int(i) for i in np.flatnonzero(prim & ran))
    return Family(out, first, tuple(i for i in first if codes[i] != HOLD), alpha)
