"""The claims table (``results/tables/claims.{tex,md}``): each claim of docs/METHOD.md section 9, checked on the
grid's own runs, and the outcome printed to the terminal when the report is written.

Each row is one comparison between two sides (a claim with several parts gets one row per part: 1a-c,
2a-b, 6a-c, 7a-d, 10a and one 10b per width D, 11a-b, 12a-b). A side is the group of runs (seeds) of one
variant in the set the claim reads, found by its settings, not its display name (e.g. BayesNCL = method
``bayesncl``, STE gate, detach, 2-layer head), within one dataset and one architecture: a claim never
pools runs of two architectures (claim 9 reads Table 5's runs, the others Tables 1-4, 6, 7 and Figure 4's).

The verdict rule (docs/METHOD.md section 9), in ``compare``:

- the evidence is the seeds: with at least 2 seeds whose values are finite on both sides, the difference is
  paired by seed (d_s = left_s - right_s, a one-sample t on d, n - 1 degrees of freedom); otherwise the
  sides are compared unpaired (Welch, Welch-Satterthwaite degrees of freedom); claims 7a/7b compare one
  side with 0 (one-sample t);
- the difference is signed so that the claimed direction is positive: "down" metrics (SE, |rho|, the sign
  of 7b) use right - left;
- the 95% Student-t interval [lo, hi] of the mean difference decides, by the claim's kind: "better" holds
  when lo > 0 and does not hold when hi < 0; "not worse" (margin delta) holds when lo > -delta and does
  not hold when hi < -delta; "within tol" holds when [lo, hi] lies inside [-tol, tol] and does not hold
  when it lies wholly on one side outside it (12a/12b: tol relative to the right side's mean);
- otherwise "inconclusive", leaning for or against the claim by where the mean difference alone falls;
  without an interval (fewer than 2 seeds on a side) always inconclusive; "not run" when a side has no
  finite value. A std of 0 (GFLOPs) gives the degenerate interval [d, d], decided like any other.

Claim 7 reads the gradient-dynamics correlations at each run's last recorded epoch; "weakens" compares
absolute values. Claim 11 compares the best inner sweep point (chosen after seeing the means) with each end;
it holds only when both parts hold and does not hold when either does not. Runs that repeat another result
(equal ``weights_sha``, a Top-k mask that never bound; see tables.flag_repeats) are marked with a double
dagger.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence, TextIO

import numpy as np
import pandas as pd
from tabulate import tabulate

from ..atomic import atomic_write_text
from .summary import prepare, sweep_rows
from .tables import (ARCH_NAMES, DATASET_NAMES, METRICS, Fmt, Group, Metric, Stat, flag_repeats, group_rows,
                     in_set, parse_list, render_context, stat, table_context)

__all__ = ["BETTER", "CLAIMS", "NOT_WORSE", "VERDICTS", "Comparison", "Kind", "Outcome", "build_claims",
           "claims_rows", "combine", "compare", "outcome", "render_claims", "within", "write_claims"]

HOLDS, FAILS, NOT_RUN = "holds", "does not hold", "not run"
LEANS_FOR, LEANS_AGAINST = "inconclusive (leans for)", "inconclusive (leans against)"
VERDICTS = (HOLDS, LEANS_FOR, LEANS_AGAINST, FAILS, NOT_RUN)
_STRENGTH = {HOLDS: 4, LEANS_FOR: 3, LEANS_AGAINST: 2, FAILS: 1, NOT_RUN: 0}
CONFIDENCE = 0.95

Values = Sequence[tuple[float, float]]  # (seed, value) per run; the value NaN when undefined


# ----------------------------------------------------------------------------- verdict rule
@dataclass(frozen=True)
class Kind:
    """How a claim is decided: "better" (>), "not worse" (>= with margin ``margin``) or "within" (|d| <=
    ``margin``; with ``relative``, ``margin`` x |mean of the right side|)."""
    name: str
    margin: float = 0.0
    relative: bool = False


BETTER = Kind("better")
NOT_WORSE = Kind("not worse", 1.0)  # 1 point of accuracy, P@k or SC


def within(tol: float, relative: bool = False) -> Kind:
    return Kind("within", tol, relative)


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

    @property
    def has_interval(self) -> bool:
        return math.isfinite(self.low) and math.isfinite(self.high)


def _finite(values: Values) -> list[tuple[float, float]]:
    return [(s, float(v)) for s, v in values if v is not None and math.isfinite(v)]


def _t(df: float) -> float:
    from scipy import stats  # lazy: the report imports claims; scipy.stats costs ~0.3 s

    return float(stats.t.ppf(0.5 + CONFIDENCE / 2, df))


def _interval(mean: float, se: float, df: float) -> tuple[float, float]:
    half = _t(df) * se  # se 0 (every difference equal, e.g. GFLOPs): the degenerate interval [d, d]
    return mean - half, mean + half


def _judge(kind: Kind, diff: float, low: float, high: float, tol: float) -> str:
    """The verdict from the interval (NaN bounds: none), else the lean of the mean difference."""
    if kind.name == "within":
        holds, fails, leans = (-tol <= low and high <= tol), (low > tol or high < -tol), abs(diff) <= tol
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
    "down"; ignored for "within"."""
    if better not in ("up", "down"):
        raise ValueError(f"better must be 'up' or 'down', not {better!r}")
    sign = -1.0 if better == "down" and kind.name != "within" else 1.0
    lf = _finite(left)
    if isinstance(right, (int, float)):  # one-sample against a constant
        d = np.array([sign * (v - right) for _, v in lf])
        ref = abs(float(right))
        tol = kind.margin * ref if kind.relative else kind.margin
        if d.size == 0:
            return Outcome(NOT_RUN)
        diff = float(d.mean())
        low = high = math.nan
        if d.size >= 2:
            low, high = _interval(diff, float(d.std(ddof=1)) / math.sqrt(d.size), d.size - 1)
        return Outcome(_judge(kind, diff, low, high, tol), "one-sample", (int(d.size),), diff, low, high, tol,
                       ref, tuple(v for _, v in lf), ())
    rf = _finite(right)
    if not lf or not rf:
        return Outcome(NOT_RUN)
    lseeds, rseeds = [s for s, _ in lf], [s for s, _ in rf]
    unique = len(set(lseeds)) == len(lseeds) and len(set(rseeds)) == len(rseeds)
    shared = [s for s in lseeds if s in set(rseeds)] if unique else []
    if len(shared) >= 2:
        lv, rv = dict(lf), dict(rf)
        a, b = np.array([lv[s] for s in shared]), np.array([rv[s] for s in shared])
        d = sign * (a - b)
        diff = float(d.mean())
        low, high = _interval(diff, float(d.std(ddof=1)) / math.sqrt(d.size), d.size - 1)
        test, n = "paired", (int(d.size),)
    else:
        a, b = np.array([v for _, v in lf]), np.array([v for _, v in rf])
        diff = sign * float(a.mean() - b.mean())
        low = high = math.nan
        if a.size >= 2 and b.size >= 2:
            va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
            se = math.sqrt(va + vb)
            df = (va + vb) ** 2 / (va ** 2 / (a.size - 1) + vb ** 2 / (b.size - 1)) if se > 0 else math.inf
            low, high = _interval(diff, se, df)
        test, n = "Welch", (int(a.size), int(b.size))
    ref = abs(float(b.mean()))
    tol = kind.margin * ref if kind.relative else kind.margin
    return Outcome(_judge(kind, diff, low, high, tol), test, n, diff, low, high, tol, ref,
                   tuple(a.tolist()), tuple(b.tolist()))


def combine(parts: list[Outcome]) -> tuple[str, Outcome]:
    """A claim of several comparisons: "does not hold" when any part does not hold, "holds" only when every
    part holds, else inconclusive with the lean of the weakest part; returns the verdict and the part
    that decides it (the weakest; among equals, the smallest mean difference). ``parts`` is not empty."""
    weakest = min(parts, key=lambda p: (_STRENGTH[p.verdict], p.diff))  # "not run" is the weakest
    return weakest.verdict, weakest


# ----------------------------------------------------------------------------- sides
def _flag(v, default: float) -> float:
    return default if v is None or not math.isfinite(v) else float(v)


def _bayes(gate: str = "ste", detach: bool = True, depth: int = 2) -> Callable[[dict], bool]:
    def pick(r: dict) -> bool:
        return (r["method"] == "bayesncl" and (r["gate"] or "ste") == gate
                and bool(_flag(r["detach"], 1.0)) == detach and _flag(r["head_depth"], 2.0) == depth)
    return pick


ROLES: dict[str, Callable[[dict], bool]] = {
    "bayes": _bayes(),
    "ncl": lambda r: r["method"] == "ncl",
    "topk": lambda r: r["method"] == "topk_ncl",
    "simclr": lambda r: r["method"] == "cl",
    "gumbel": _bayes(gate="gumbel"),
    "soft": _bayes(gate="soft"),
    "nodetach": _bayes(detach=False),
    "head1": _bayes(depth=1),
    "head3": _bayes(depth=3),
}
DEFAULT_LABELS = {"bayes": "BayesNCL", "ncl": "NCL", "topk": "Top-k NCL", "simclr": "SimCLR",
                  "gumbel": "BayesNCL (Gumbel)", "soft": "Soft gate", "nodetach": "w/o detach",
                  "head1": "1-layer head", "head3": "3-layer head"}


@dataclass
class Side:
    """One side of a comparison: its runs' (seed, value) pairs; ``stat`` is set from the values the test
    used (mean +- std over them)."""
    label: str
    values: list[tuple[float, float]] = field(default_factory=list)
    decimals: int = 2
    sig: int | None = None
    repeats: str = ""  # flag note (the group repeats another result)
    stat: Stat = field(default_factory=lambda: Stat(math.nan, math.nan, 0, 2))

    @property
    def runs(self) -> int:
        return len(self.values)

    @property
    def nan(self) -> int:
        return sum(1 for _, v in self.values if v is None or not math.isfinite(v))

    def use(self, used: Sequence[float]) -> None:
        self.stat = stat(used, self.decimals, sig=self.sig)


class Runs:
    """The records of one dataset and one architecture, grouped per set with the tables' flags."""

    def __init__(self, records: list[dict], arch: str = ""):
        self.records, self.arch = records, arch
        self._groups: dict[str, list[Group]] = {}

    def groups(self, set_name: str) -> list[Group]:
        if set_name not in self._groups:
            gs = group_rows(r for r in self.records if in_set(r["sets"], set_name))
            flag_repeats(gs)
            self._groups[set_name] = gs
        return self._groups[set_name]

    def has(self, *set_names: str) -> bool:
        return any(self.groups(s) for s in set_names)

    def side(self, set_names: tuple[str, ...], role: str, values: Callable[[dict], float], m: Metric,
             where: Callable[[dict], bool] = lambda r: True) -> Side:
        """The first group in the first set that has runs matching ``role`` (and ``where``); ``values``
        gives a run's value (in the units of ``m``, which formats it)."""
        for s in set_names:
            for g in self.groups(s):
                rows = [r for r in g.rows if ROLES[role](r) and where(r)]
                if rows:
                    return Side(g.variant, [(r["seed"], values(r)) for r in rows], m.decimals, m.sig, g.repeats)
        return Side(DEFAULT_LABELS[role], [], m.decimals, m.sig)


RHO = Metric("rho", "$\\rho$", 3, None)  # claim 7's correlations (the last recorded epoch's)


def _column(key: str) -> Callable[[dict], float]:
    # Every metric a claim reads is printed in its runs.csv unit (Metric.scale 1).
    return lambda r: r[key]


def _last(key: str, absolute: bool = False) -> Callable[[dict], float]:
    """A run's value at its last recorded dynamics epoch (claim 7); NaN when missing (never an earlier
    epoch's)."""
    def value(r: dict) -> float:
        vals = parse_list(r[key])
        v = vals[-1] if vals else math.nan
        return abs(v) if absolute else v
    return value


# ----------------------------------------------------------------------------- comparisons
@dataclass
class Comparison:
    claim: str              # "1a"
    text: str               # statement; "$...$" is math, "@A" / "@B" stand for the sides' labels
    left: Side
    right: Side
    result: Outcome
    kind: Kind = BETTER
    paper: str = ""         # the paper's values (docs/METHOD.md section 8), "$...$" math
    right_text: str | None = None  # shown instead of the right side's value (a constant)
    delta: str = ""         # how the difference is taken when not left - right ("right $-$ left")

    @property
    def verdict(self) -> str:
        return self.result.verdict


def _judged(cid: str, text: str, left: Side, right: "Side | float", kind: Kind, better: str,
            paper: str = "") -> Comparison:
    """A comparison of two sides (or of a side with a constant), the sides' stats set from the values used."""
    const = not isinstance(right, Side)
    res = compare(left.values, right if const else right.values, kind, better)
    right_side = Side(f"{right:g}") if const else right
    left.use(res.left if res.test else [v for _, v in _finite(left.values)])
    if not const:
        right_side.use(res.right if res.test else [v for _, v in _finite(right_side.values)])
    delta = ("$-$left" if const else "right $-$ left") if better == "down" and kind.name != "within" else ""
    return Comparison(cid, text, left, right_side, res, kind, paper, f"{right:g}" if const else None, delta)


def _directional(cid: str, text: str, sets: tuple[str, ...], metric: str, left: str, right: str,
                 paper: str = "", kind: Kind = BETTER) -> Callable[["Runs"], list[Comparison]]:
    m = METRICS[metric]

    def build(runs: Runs) -> list[Comparison]:
        get = _column(metric)
        a, b = runs.side(sets, left, get, m), runs.side(sets, right, get, m)
        return [_judged(cid, text, a, b, kind, m.better, paper)]
    return build


def _sign(cid: str, text: str, key: str, better: str) -> Callable:
    def build(runs: Runs) -> list[Comparison]:
        a = runs.side(("table3",), "ncl", _last(key), RHO)
        return [_judged(cid, text, a, 0.0, BETTER, better)]
    return build


def _weakens(cid: str, text: str, key: str) -> Callable:
    def build(runs: Runs) -> list[Comparison]:
        a = runs.side(("table3",), "bayes", _last(key, absolute=True), RHO)
        b = runs.side(("table3",), "ncl", _last(key, absolute=True), RHO)
        return [_judged(cid, text, a, b, BETTER, "down")]
    return build


def _within(cid: str, text: str, set_name: str, metric: str, kind: Kind, paper: str) -> Callable:
    m = METRICS[metric]

    def build(runs: Runs) -> list[Comparison]:
        a = runs.side((set_name,), "bayes", _column(metric), m)
        b = runs.side((set_name,), "ncl", _column(metric), m)
        return [_judged(cid, text, a, b, kind, "up", paper)]
    return build


def _widths(runs: Runs) -> list[Comparison]:
    """Claim 10: SC rises with D (BayesNCL, largest vs smallest D); BayesNCL beats NCL at each D."""
    get, sc = _column("sc"), METRICS["sc"]
    dims = sorted({r["proj_dim"] for g in runs.groups("figure4a") for r in g.rows if math.isfinite(r["proj_dim"])})
    at = lambda d: (lambda r: r["proj_dim"] == d)  # noqa: E731
    out = []
    if len(dims) >= 2:
        a = runs.side(("figure4a",), "bayes", get, sc, at(dims[-1]))
        b = runs.side(("figure4a",), "bayes", get, sc, at(dims[0]))
        out.append(_judged("10a", f"SC: @A at $D = {dims[-1]:g}$ $>$ at $D = {dims[0]:g}$", a, b, BETTER, "up",
                           "36.14 at $D = 2048$"))
    else:
        none = Side(DEFAULT_LABELS["bayes"], [], sc.decimals)
        out.append(_judged("10a", "SC: @A rises with $D$", none, Side(none.label, [], sc.decimals), BETTER, "up",
                           "36.14 at $D = 2048$"))
    for d in dims or [math.nan]:
        a = runs.side(("figure4a",), "bayes", get, sc, at(d))
        b = runs.side(("figure4a",), "ncl", get, sc, at(d))
        where = f"at $D = {d:g}$" if math.isfinite(d) else "at each $D$"
        out.append(_judged("10b", f"SC {where}: @A $>$ @B", a, b, BETTER, "up",
                           "$2\\times$ NCL at $D = 2048$" if d == 2048 else ""))
    return out


def _inverted_u(cid: str, param: str, symbol: str, paper: str) -> Callable:
    def build(runs: Runs) -> list[Comparison]:
        sc = METRICS["sc"]
        rows = [r for g in runs.groups("figure4b") for r in g.rows if ROLES["bayes"](r)]
        points: dict[float, list[tuple[float, float]]] = {}
        if rows:
            sweep = sweep_rows(prepare(pd.DataFrame(rows)), param)
            for value, part in sweep.groupby(param):
                points[float(value)] = list(zip(part["seed"], part["sc"]))
        label = rows[0]["variant"] if rows else DEFAULT_LABELS["bayes"]
        xs = sorted(points)
        mean = {x: np.mean(f) if (f := [v for _, v in _finite(points[x])]) else -math.inf for x in xs}
        inner = [x for x in xs[1:-1] if math.isfinite(mean[x])]
        if len(xs) < 3 or not inner:
            none = Side(label, [], sc.decimals)
            return [_judged(cid, f"SC of @A: inverted U over ${symbol}$", none, Side(label, [], sc.decimals),
                            BETTER, "up", paper)]
        best = max(inner, key=mean.__getitem__)  # chosen after seeing the means (post hoc)
        ends = (xs[0], xs[-1])
        parts = [compare(points[best], points[e]) for e in ends]
        _, part = combine(parts)
        end = ends[parts.index(part)]  # the weakest part: its verdict is the claim's
        text = f"SC of @A: ${symbol}$ = {best:g} $>$ ends {xs[0]:g}, {xs[-1]:g} (right: {end:g})"
        return [_judged(cid, text, Side(label, points[best], sc.decimals), Side(label, points[end], sc.decimals),
                        BETTER, "up", paper)]
    return build


@dataclass(frozen=True)
class Claim:
    number: int
    sets: tuple[str, ...]
    title: str  # what the paper states (docs/METHOD.md section 9), in short
    build: Callable[[Runs], list[Comparison]]


CLAIMS = [
    Claim(1, ("table1",), "BayesNCL SC above NCL and Top-k NCL; SE lower", lambda runs: [
        *_directional("1a", "SC: @A $>$ @B", ("table1",), "sc", "bayes", "ncl", "36.14 vs 14.93")(runs),
        *_directional("1b", "SC: @A $>$ @B", ("table1",), "sc", "bayes", "topk")(runs),
        *_directional("1c", "SE-Sum: @A $<$ @B", ("table1",), "se_sum", "bayes", "ncl")(runs)]),
    Claim(2, ("table2",), "BayesNCL linear probe at least NCL's and SimCLR's", lambda runs: [
        *_directional("2a", "Top-1: @A $\\geq$ @B", ("table2",), "probe_top1", "bayes", "ncl",
                      "70.44 vs 69.63", NOT_WORSE)(runs),
        *_directional("2b", "Top-1: @A $\\geq$ @B", ("table2",), "probe_top1", "bayes", "simclr",
                      "70.44 vs 68.31", NOT_WORSE)(runs)]),
    Claim(3, ("table2",), "BayesNCL retrieval with the top-K dims at least NCL's",
          _directional("3", "P@10 (top-$K$ dims): @A $\\geq$ @B", ("table2",), "ret_p10", "bayes", "ncl",
                       kind=NOT_WORSE)),
    Claim(4, ("table1", "table4"), "STE gate SC at least Gumbel's",
          _directional("4", "SC: @A $\\geq$ @B", ("table1", "table4"), "sc", "bayes", "gumbel", kind=NOT_WORSE)),
    Claim(5, ("table4",), "Hard gate SC above soft gate, by a wide margin",
          _directional("5", "SC: @A $>$ @B", ("table4",), "sc", "bayes", "soft", "22.0 vs 8.5 (CIFAR-100)")),
    Claim(6, ("table4",), "Gradient isolation helps; the 2-layer head is best", lambda runs: [
        *_directional("6a", "SC: @A $\\geq$ @B", ("table4",), "sc", "bayes", "nodetach", kind=NOT_WORSE)(runs),
        *_directional("6b", "SC: @A $>$ @B", ("table4",), "sc", "bayes", "head1")(runs),
        *_directional("6c", "SC: @A $>$ @B", ("table4",), "sc", "bayes", "head3")(runs)]),
    Claim(7, ("table3",), "NCL couples AF with GV and GV against SC; BayesNCL weakens both", lambda runs: [
        *_sign("7a", "$\\rho$(AF, GV) of @A $>$ 0", "dyn_af_gv", "up")(runs),
        *_sign("7b", "$\\rho$(GV, SC) of @A $<$ 0", "dyn_gv_sc", "down")(runs),
        *_weakens("7c", "$|\\rho(\\mathrm{AF}, \\mathrm{GV})|$: @A $<$ @B", "dyn_af_gv")(runs),
        *_weakens("7d", "$|\\rho(\\mathrm{GV}, \\mathrm{SC})|$: @A $<$ @B", "dyn_gv_sc")(runs)]),
    Claim(8, ("table6",), "Background probe within about 1 point of NCL",
          _within("8", "BG acc.: @A within 1 point of @B", "table6", "bg_acc", within(1.0), "93.38 vs 93.33")),
    Claim(9, ("table5",), "BayesNCL SC above NCL on ResNet-50",
          _directional("9", "SC (@arch): @A $>$ @B", ("table5",), "sc", "bayes", "ncl")),
    Claim(10, ("figure4a",), "SC rises with D; BayesNCL beats NCL at each D", _widths),
    Claim(11, ("figure4b",), "Inverted U over lambda and rho", lambda runs: [
        *_inverted_u("11a", "lambda", "\\lambda", "worse for $\\lambda >$ 4e-5")(runs),
        *_inverted_u("11b", "rho", "\\rho", "inverted U")(runs)]),
    Claim(12, ("table7",), "Cost: GFLOPs within 1%, training time within 6% of NCL", lambda runs: [
        *_within("12a", "GFLOPs: @A within 1% of @B", "table7", "gflops", within(0.01, relative=True),
                 "1.419 vs 1.416")(runs),
        *_within("12b", "Train time: @A within 6% of @B", "table7", "train_minutes", within(0.06, relative=True),
                 "75.12 vs 70.95 min")(runs)]),
]


# ----------------------------------------------------------------------------- the table
def _arch_name(arch: str) -> str:
    return ARCH_NAMES.get(arch, arch) if arch else "ResNet-50"


def claims_rows(df: pd.DataFrame) -> list[tuple[str, list[Comparison]]]:
    """[(dataset, comparisons), ...]: per dataset, the claims whose sets it has runs in, each judged within
    one architecture (a claim whose sets hold runs of several architectures gets one row per architecture,
    which its text names); a last block ("") holds the claims no dataset ran, as "not run"."""
    df = prepare(df)
    records = df.to_dict("records")
    datasets = list(dict.fromkeys(r["dataset"] for r in records))
    blocks, ran = [], set()
    for d in datasets:
        mine = [r for r in records if r["dataset"] == d]
        parts = [Runs([r for r in mine if r["arch"] == a], a) for a in dict.fromkeys(r["arch"] for r in mine)]
        comps = []
        for claim in CLAIMS:
            where = [runs for runs in parts if runs.has(*claim.sets)]
            for runs in where:
                ran.add(claim.number)
                for c in claim.build(runs):
                    c.text = c.text.replace("@arch", _arch_name(runs.arch))
                    if len(where) > 1 and claim.number != 9:
                        c.text += f" ({_arch_name(runs.arch)})"
                    comps.append(c)
        if comps:
            blocks.append((d, comps))
    empty = Runs([])
    missing = []
    for claim in CLAIMS:
        if claim.number not in ran:
            for c in claim.build(empty):
                c.text = c.text.replace("@arch", _arch_name(""))
                missing.append(c)
    if missing:
        blocks.append(("", missing))
    return blocks


def _count(side: Side) -> str:
    """The side's seeds: "(3)", or "(2/3; 1 NaN)" when the test used 2 of its 3 runs."""
    used, runs, nan = side.stat.n, side.runs, side.nan
    if used == runs:
        return f"({used})"
    return f"({used}/{runs}" + (f"; {nan} NaN)" if nan else ")")


def _side_cell(side: Side, fmt: Fmt) -> str:
    """mean ± std (n); LaTeX puts the count under the value (every row is two lines there)."""
    c = side.stat
    if not math.isfinite(c.mean):
        value, count = fmt.dash(), (f"(0/{side.runs}; {side.nan} NaN)" if side.nan else "")
    else:
        value = fmt.cell(Stat(c.mean, c.std, c.n, c.decimals, mark="‡" if side.repeats else ""))
        count = _count(side)
    if fmt.tex and count:
        return rf"\begin{{tabular}}[t]{{@{{}}r@{{}}}}{value}\\{count}\end{{tabular}}"
    return f"{value} {count}".strip()


def _num(x: float, decimals: int, plus: bool = False) -> str:
    """``x`` rounded; a small negative keeps its sign ("-0.00": the difference is below 0), an exact 0 has none."""
    x = 0.0 if x == 0 else x
    return f"{x:+.{decimals}f}" if plus else f"{x:.{decimals}f}"


def _diff_cell(c: Comparison, fmt: Fmt) -> str:
    """The mean difference and its 95% interval, in the claim's direction; relative tolerances in percent
    of the right side."""
    r = c.result
    if not r.test:
        return fmt.dash()
    scale, dec, unit = 1.0, c.left.stat.decimals, ""
    if c.kind.relative:
        scale, dec, unit = (100.0 / r.ref if r.ref else math.nan), 2, "%"
    diff = _num(r.diff * scale, dec, plus=True) + unit
    ci = f"[{_num(r.low * scale, dec)}, {_num(r.high * scale, dec)}]" if r.has_interval else "(no CI)"
    if fmt.tex:
        return f"${diff.replace('%', '')}$" + (r"\%" if unit else "") + " " + ci.replace("-", "$-$")
    return f"{diff} {ci}"


def _test_cell(c: Comparison, fmt: Fmt) -> str:
    r = c.result
    if not r.test:
        return fmt.dash()
    return f"{r.test} ({', '.join(str(n) for n in r.n)})" + (f", {fmt.text(c.delta)}" if c.delta else "")


CAPTION = (
    "The paper's claims (docs/METHOD.md section 9) on this grid's runs, one row per comparison within one "
    "dataset and one architecture. Left, right: mean ± std over the seeds used (n); (k/n): k of the side's n "
    "runs used, the others NaN (e.g. collapsed to no active dimension) or, in a paired test, unshared. "
    "$\\Delta$: the mean difference in the claim's direction (left $-$ right unless the test says otherwise) "
    "with its 95% Student-t interval; paired by seed when at least 2 seeds are shared, else Welch. Holds when "
    "the interval clears the claim's bound ($>$: 0; $\\geq$: $-$1 point; within: inside the tolerance, for "
    "12a-b relative to the right side, $\\Delta$ in %), does not hold when it lies wholly beyond it, otherwise "
    "inconclusive, leaning by $\\Delta$ alone (always so with fewer than 2 seeds on a side: no CI); not run: "
    "no finite value on a side. Claim 7 reads the last recorded epoch; claim 11 compares the best inner sweep "
    "point (chosen after seeing the means) with each end and shows the weaker part. Paper: ImageNet-100 "
    "unless stated.")


TEX_ROWS = 14  # rows per LaTeX float (two lines each)


def build_claims(df: pd.DataFrame, kind: str = "tex") -> dict:
    """The claims table's context (``kind`` "tex", "md" or "txt"). LaTeX puts the test under the interval
    and breaks the verdict before its lean, so that every row is two lines of a page-wide table."""
    fmt = Fmt(kind)
    blocks, flags = [], []
    for dataset, comps in claims_rows(df):
        rows = []
        for c in comps:
            text = fmt.text(c.text).replace("@A", fmt.esc(c.left.label)).replace("@B", fmt.esc(c.right.label))
            right = c.right_text if c.right_text is not None else _side_cell(c.right, fmt)
            evidence = [_diff_cell(c, fmt), _test_cell(c, fmt)]
            verdict = c.verdict
            if fmt.tex:
                evidence = [r" \newline ".join(e for e in evidence if e != fmt.dash()) or fmt.dash()]
                verdict = verdict.replace(" (", r" \newline (")
            rows.append([c.claim, text, _side_cell(c.left, fmt), right, *evidence, fmt.text(c.paper) or fmt.dash(),
                         verdict])
            for s in (c.left, c.right):
                if s.repeats:
                    where = f" on {DATASET_NAMES.get(dataset, dataset)}" if dataset else ""
                    flags.append(f"{s.label}{where} is {s.repeats}")
        title = DATASET_NAMES.get(dataset, dataset) if dataset else "Not run on any dataset"
        step = TEX_ROWS if fmt.tex else len(rows)  # a LaTeX float must fit a page: long blocks continue
        for i in range(0, len(rows), step):
            blocks.append({"title": fmt.esc(title + (" (continued)" if i else "")), "rows": rows[i:i + step]})
    caption = CAPTION
    if flags:
        caption += " ‡ Not a separate result: " + "; ".join(dict.fromkeys(flags)) + "."
    rag = r">{\raggedright\arraybackslash}"
    if fmt.tex:
        header = ["", "Claim", "Left", "Right", "$\\Delta$ [95% CI], test (n)", "Paper", "Verdict"]
        colspec = f"@{{}}l{rag}p{{4.3cm}}rr{rag}p{{3.3cm}}{rag}p{{1.75cm}}{rag}p{{1.75cm}}@{{}}"
    else:
        header = ["", "Claim", "Left", "Right", "$\\Delta$ [95% CI]", "Test (n)", "Paper", "Verdict"]
        colspec = None
    align = ["left", "left", "right", "right"] + ["left"] * (len(header) - 4)
    return table_context("claims", "Claims", fmt.text(caption), [fmt.text(h) for h in header], blocks, wide=True,
                         colspec=colspec, align=align, size="footnotesize")


def render_claims(df: pd.DataFrame, kind: str = "tex") -> str:
    return render_context(build_claims(df, kind), kind)


def write_claims(df: pd.DataFrame, out_dir: str | os.PathLike) -> list[Path]:
    """Write claims.tex and claims.md into ``out_dir`` (atomically)."""
    out = Path(out_dir)
    return [atomic_write_text(out / f"claims.{kind}", render_claims(df, kind)) for kind in ("tex", "md")]


# ----------------------------------------------------------------------------- the terminal
HEADLINE = ("sc", "se_sum", "act", "probe_top1", "ret_p10")


def _headline(df: pd.DataFrame, fmt: Fmt) -> str:
    """The main comparison (the runs of Tables 1 and 2), one row per dataset, architecture and variant."""
    recs = [r for r in prepare(df).to_dict("records") if in_set(r["sets"], "table1") or in_set(r["sets"], "table2")]
    groups = group_rows(recs)
    for d, a in dict.fromkeys((g.dataset, g.arch) for g in groups):
        flag_repeats([g for g in groups if (g.dataset, g.arch) == (d, a)])
    rows = []
    for g in groups:
        cells = []
        for k in HEADLINE:
            vals = [r[k] for r in g.rows if not (k.startswith("ret_") and r["method"] == "cl")]
            c = METRICS[k].stat(vals)
            c.of = len(vals)
            cells.append(c)
        rows.append([DATASET_NAMES.get(g.dataset, g.dataset), ARCH_NAMES.get(g.arch, g.arch),
                     g.variant + (" ‡" if g.repeats else ""), g.n, *[fmt.cell(c) for c in cells]])
    header = ["Dataset", "Arch.", "Method", "Seeds", *[fmt.header(METRICS[k]) for k in HEADLINE]]
    return tabulate(rows, headers=header, tablefmt="simple", disable_numparse=True)


def outcome(df: pd.DataFrame) -> str:
    """What the run showed, for the terminal: the claims and the headline rows of Tables 1 and 2."""
    fmt = Fmt("txt")
    ctx = build_claims(df, "txt")
    lines = []
    for block in ctx["blocks"]:
        for i, row in enumerate(block["rows"]):
            lines.append([block["title"] if i == 0 else "", *row[:6], row[7]])
    claims = tabulate(lines, headers=["Dataset", "", "Claim", "Left", "Right", "Δ [95% CI]", "Test (n)", "Verdict"],
                      tablefmt="simple", disable_numparse=True, maxcolwidths=[None, None, 40, None, None, None,
                                                                              None, None])
    counts = pd.Series([r[-1] for r in lines]).value_counts()
    tally = "; ".join(f"{v}: {counts[v]}" for v in VERDICTS if v in counts)
    return (f"Claims (docs/METHOD.md section 9; mean ± std (seeds), left vs right; Δ with its 95% interval, "
            f"in the claim's direction): {tally}\n{claims}\n\n"
            f"Main comparison (Tables 1-2; ‡ repeats another row's result; (k/n): k of n seeds finite):\n"
            f"{_headline(df, fmt)}\n")


def print_outcome(df: pd.DataFrame, stream: TextIO | None = None) -> None:
    print(outcome(df), file=stream or sys.stdout, flush=True)
