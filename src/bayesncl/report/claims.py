"""The claims table (``results/tables/claims.{tex,md}``): each claim of docs/METHOD.md section 9, checked on the
grid's own runs, and the outcome printed to the terminal when the report is written.

Each row is one comparison between two sides (a claim with several parts gets one row per part: 1a-c,
2a-b, 6a-c, 7a-d, 10a and one 10b per width D, 11a-b, 12a-b). A side is the group of runs (seeds) of one
variant in the set the claim reads, found by its settings, not its display name (e.g. BayesNCL = method
``bayesncl``, STE gate, detach, 2-layer head). Verdicts (docs/METHOD.md section 9):

- directional claims: "holds" when the means differ in the stated direction by more than the larger of
  the two stds, with at least 2 seeds on both sides; "same direction, within noise" when only the means
  agree (or a side has fewer than 2 seeds); "does not hold" otherwise (equal means included);
- tolerance claims (8: background accuracy within 1 point; 12: GFLOPs within 1%, training time within
  6%): "holds" when |difference| <= tolerance with at least 2 seeds on both sides, "same direction,
  within noise" when so with fewer seeds, "does not hold" when the difference exceeds the tolerance;
- claim 11 (inverted U over lambda, over rho; judged on SC): the best inner point against each end of
  the sweep, the weaker of the two verdicts decides; it needs at least 3 sweep points;
- "not run" when the grid lacks a side's runs.

Claim 7 reads the gradient-dynamics correlations at each run's last recorded epoch; "weakens" compares
absolute values. Runs that repeat another result (equal ``weights_sha``, a Top-k mask that never
bound; see tables.flag_repeats) are marked with a double dagger.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, TextIO

import pandas as pd
from tabulate import tabulate

from ..atomic import atomic_write_text
from .summary import prepare, sweep_rows
from .tables import (DATASET_NAMES, METRICS, Fmt, Group, Metric, Stat, flag_repeats, group_rows, in_set,
                     parse_list, render_context, table_context)

__all__ = ["CLAIMS", "VERDICTS", "Comparison", "build_claims", "claims_rows", "outcome", "render_claims",
           "verdict", "verdict_within", "write_claims"]

HOLDS, NOISE, FAILS, NOT_RUN = "holds", "same direction, within noise", "does not hold", "not run"
VERDICTS = (HOLDS, NOISE, FAILS, NOT_RUN)
_STRENGTH = {HOLDS: 3, NOISE: 2, FAILS: 1, NOT_RUN: 0}


# ----------------------------------------------------------------------------- verdict rule
def verdict(a: Stat, b: Stat, better: str, b_exact: bool = False) -> str:
    """``a`` better than ``b`` in direction ``better`` ("up": higher, "down": lower). ``b_exact``: b is a
    constant (e.g. 0), so only ``a`` needs seeds."""
    if a.n == 0 or b.n == 0 or not (math.isfinite(a.mean) and math.isfinite(b.mean)):
        return NOT_RUN
    diff = a.mean - b.mean if better == "up" else b.mean - a.mean
    if diff <= 0:
        return FAILS
    seeded = a.n >= 2 and (b_exact or b.n >= 2)
    spread = max(_std(a), 0.0 if b_exact else _std(b))
    return HOLDS if seeded and diff > spread else NOISE


def verdict_within(a: Stat, b: Stat, tol: float) -> str:
    """``a`` within ``tol`` (absolute) of ``b``."""
    if a.n == 0 or b.n == 0 or not (math.isfinite(a.mean) and math.isfinite(b.mean)):
        return NOT_RUN
    if abs(a.mean - b.mean) > tol:
        return FAILS
    return HOLDS if a.n >= 2 and b.n >= 2 else NOISE


def _std(s: Stat) -> float:
    return s.std if math.isfinite(s.std) else 0.0


def weakest(verdicts: list[str]) -> str:
    return min(verdicts, key=_STRENGTH.__getitem__) if verdicts else NOT_RUN


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
    label: str
    stat: Stat
    repeats: str = ""  # flag note (the group repeats another result)


class Runs:
    """The records of one dataset, grouped per set with the tables' flags."""

    def __init__(self, records: list[dict]):
        self.records = records
        self._groups: dict[str, list[Group]] = {}

    def groups(self, set_name: str) -> list[Group]:
        if set_name not in self._groups:
            gs = group_rows(r for r in self.records if in_set(r["sets"], set_name))
            flag_repeats(gs)
            self._groups[set_name] = gs
        return self._groups[set_name]

    def has(self, *set_names: str) -> bool:
        return any(self.groups(s) for s in set_names)

    def side(self, set_names: tuple[str, ...], role: str, values: Callable[[Group], list[float]],
             metric: "Metric | int", where: Callable[[dict], bool] = lambda r: True) -> Side:
        """The first group in the first set that has one matching ``role`` (and ``where``); ``metric``
        formats the values (or a number of decimals)."""
        m = metric if isinstance(metric, Metric) else Metric("", "", metric, None)
        for s in set_names:
            for g in self.groups(s):
                rows = [r for r in g.rows if ROLES[role](r) and where(r)]
                if rows:
                    part = Group(g.dataset, g.arch, g.variant, rows)
                    return Side(g.variant, m.stat(values(part)), g.repeats)
        return Side(DEFAULT_LABELS[role], Stat(math.nan, math.nan, 0, m.decimals))


def _column(key: str) -> Callable[[Group], list[float]]:
    return lambda g: g.values(key)


def _last(key: str, absolute: bool = False) -> Callable[[Group], list[float]]:
    """Per run, the value at its last recorded dynamics epoch (claim 7); a run whose last value is
    missing (NaN) gives none."""
    def values(g: Group) -> list[float]:
        last = [vals[-1] for vals in (parse_list(r[key]) for r in g.rows) if vals and math.isfinite(vals[-1])]
        return [abs(v) for v in last] if absolute else last
    return values


# ----------------------------------------------------------------------------- comparisons
@dataclass
class Comparison:
    claim: str              # "1a"
    text: str               # statement; "$...$" is math, "@A" / "@B" stand for the sides' labels
    left: Side
    right: Side
    verdict: str
    paper: str = ""         # the paper's values (docs/METHOD.md section 8), "$...$" math
    right_text: str | None = None  # shown instead of the right side's value (a constant)


@dataclass(frozen=True)
class Claim:
    number: int
    sets: tuple[str, ...]
    title: str  # what the paper states (docs/METHOD.md section 9), in short
    build: Callable[[Runs], list[Comparison]]


def _directional(cid: str, text: str, sets: tuple[str, ...], metric: str, left: str, right: str,
                 paper: str = "") -> Callable:
    m = METRICS[metric]

    def build(runs: Runs) -> list[Comparison]:
        get = _column(metric)
        a, b = runs.side(sets, left, get, m), runs.side(sets, right, get, m)
        return [Comparison(cid, text, a, b, verdict(a.stat, b.stat, m.better or "up"), paper)]
    return build


def _sign(cid: str, text: str, key: str, better: str) -> Callable:
    def build(runs: Runs) -> list[Comparison]:
        a = runs.side(("table3",), "ncl", _last(key), 3)
        zero = Side("0", Stat(0.0, math.nan, 1, 3))
        return [Comparison(cid, text, a, zero, verdict(a.stat, zero.stat, better, b_exact=True), right_text="0")]
    return build


def _weakens(cid: str, text: str, key: str) -> Callable:
    def build(runs: Runs) -> list[Comparison]:
        a = runs.side(("table3",), "bayes", _last(key, absolute=True), 3)
        b = runs.side(("table3",), "ncl", _last(key, absolute=True), 3)
        return [Comparison(cid, text, a, b, verdict(a.stat, b.stat, "down"))]
    return build


def _within(cid: str, text: str, set_name: str, metric: str, tol: float, relative: bool, paper: str) -> Callable:
    m = METRICS[metric]

    def build(runs: Runs) -> list[Comparison]:
        a = runs.side((set_name,), "bayes", _column(metric), m)
        b = runs.side((set_name,), "ncl", _column(metric), m)
        t = tol * abs(b.stat.mean) if relative and math.isfinite(b.stat.mean) else tol
        return [Comparison(cid, text, a, b, verdict_within(a.stat, b.stat, t), paper)]
    return build


def _widths(runs: Runs) -> list[Comparison]:
    """Claim 10: SC rises with D (BayesNCL, largest vs smallest D); BayesNCL beats NCL at each D."""
    get, dec = _column("sc"), METRICS["sc"]
    dims = sorted({r["proj_dim"] for g in runs.groups("figure4a") for r in g.rows if math.isfinite(r["proj_dim"])})
    at = lambda d: (lambda r: r["proj_dim"] == d)  # noqa: E731
    out = []
    if len(dims) >= 2:
        a = runs.side(("figure4a",), "bayes", get, dec, at(dims[-1]))
        b = runs.side(("figure4a",), "bayes", get, dec, at(dims[0]))
        out.append(Comparison("10a", f"SC: @A at $D = {dims[-1]:g}$ $>$ at $D = {dims[0]:g}$", a, b,
                              verdict(a.stat, b.stat, "up"), "36.14 at $D = 2048$"))
    else:
        none = Side(DEFAULT_LABELS["bayes"], Stat(math.nan, math.nan, 0, dec.decimals))
        out.append(Comparison("10a", "SC: @A rises with $D$", none, none, NOT_RUN, "36.14 at $D = 2048$"))
    for d in dims or [math.nan]:
        a = runs.side(("figure4a",), "bayes", get, dec, at(d))
        b = runs.side(("figure4a",), "ncl", get, dec, at(d))
        where = f"at $D = {d:g}$" if math.isfinite(d) else "at each $D$"
        out.append(Comparison("10b", f"SC {where}: @A $>$ @B", a, b, verdict(a.stat, b.stat, "up"),
                              "$2\\times$ NCL at $D = 2048$" if d == 2048 else ""))
    return out


def _inverted_u(cid: str, param: str, symbol: str, paper: str) -> Callable:
    def build(runs: Runs) -> list[Comparison]:
        sc = METRICS["sc"]
        dec = sc.decimals
        rows = [r for g in runs.groups("figure4b") for r in g.rows if ROLES["bayes"](r)]
        points: dict[float, Stat] = {}
        if rows:
            sweep = sweep_rows(prepare(pd.DataFrame(rows)), param)
            for value, part in sweep.groupby(param, sort=True):
                points[float(value)] = sc.stat(part["sc"])
        xs = sorted(points)
        label = rows[0]["variant"] if rows else DEFAULT_LABELS["bayes"]
        if len(xs) < 3:
            none = Side(label, Stat(math.nan, math.nan, 0, dec))
            return [Comparison(cid, f"SC of @A: inverted U over ${symbol}$", none, none, NOT_RUN, paper)]
        inner = max(xs[1:-1], key=lambda x: points[x].mean)
        ends = (xs[0], xs[-1])
        best_end = max(ends, key=lambda x: points[x].mean)
        text = f"SC of @A: inner ${symbol}$ = {inner:g} $>$ ends ({xs[0]:g}, {xs[-1]:g})"
        v = weakest([verdict(points[inner], points[e], "up") for e in ends])
        return [Comparison(cid, text, Side(label, points[inner]), Side(label, points[best_end]), v, paper)]
    return build


CLAIMS = [
    Claim(1, ("table1",), "BayesNCL SC above NCL and Top-k NCL; SE lower", lambda runs: [
        *_directional("1a", "SC: @A $>$ @B", ("table1",), "sc", "bayes", "ncl", "36.14 vs 14.93")(runs),
        *_directional("1b", "SC: @A $>$ @B", ("table1",), "sc", "bayes", "topk")(runs),
        *_directional("1c", "SE-Sum: @A $<$ @B", ("table1",), "se_sum", "bayes", "ncl")(runs)]),
    Claim(2, ("table2",), "BayesNCL linear probe at least NCL's and SimCLR's", lambda runs: [
        *_directional("2a", "Top-1: @A $\\geq$ @B", ("table2",), "probe_top1", "bayes", "ncl",
                      "70.44 vs 69.63")(runs),
        *_directional("2b", "Top-1: @A $\\geq$ @B", ("table2",), "probe_top1", "bayes", "simclr",
                      "70.44 vs 68.31")(runs)]),
    Claim(3, ("table2",), "BayesNCL retrieval with the top-K dims at least NCL's",
          _directional("3", "P@10 (top-$K$ dims): @A $\\geq$ @B", ("table2",), "ret_p10", "bayes", "ncl")),
    Claim(4, ("table1", "table4"), "STE gate SC at least Gumbel's",
          _directional("4", "SC: @A $\\geq$ @B", ("table1", "table4"), "sc", "bayes", "gumbel")),
    Claim(5, ("table4",), "Hard gate SC above soft gate, by a wide margin",
          _directional("5", "SC: @A $>$ @B", ("table4",), "sc", "bayes", "soft", "22.0 vs 8.5 (CIFAR-100)")),
    Claim(6, ("table4",), "Gradient isolation helps; the 2-layer head is best", lambda runs: [
        *_directional("6a", "SC: @A $\\geq$ @B", ("table4",), "sc", "bayes", "nodetach")(runs),
        *_directional("6b", "SC: @A $>$ @B", ("table4",), "sc", "bayes", "head1")(runs),
        *_directional("6c", "SC: @A $>$ @B", ("table4",), "sc", "bayes", "head3")(runs)]),
    Claim(7, ("table3",), "NCL couples AF with GV and GV against SC; BayesNCL weakens both", lambda runs: [
        *_sign("7a", "$\\rho$(AF, GV) of @A $>$ 0", "dyn_af_gv", "up")(runs),
        *_sign("7b", "$\\rho$(GV, SC) of @A $<$ 0", "dyn_gv_sc", "down")(runs),
        *_weakens("7c", "$|\\rho(\\mathrm{AF}, \\mathrm{GV})|$: @A $<$ @B", "dyn_af_gv")(runs),
        *_weakens("7d", "$|\\rho(\\mathrm{GV}, \\mathrm{SC})|$: @A $<$ @B", "dyn_gv_sc")(runs)]),
    Claim(8, ("table6",), "Background probe within about 1 point of NCL",
          _within("8", "BG acc.: @A within 1 point of @B", "table6", "bg_acc", 1.0, False, "93.38 vs 93.33")),
    Claim(9, ("table5",), "BayesNCL SC above NCL on ResNet-50",
          _directional("9", "SC (ResNet-50): @A $>$ @B", ("table5",), "sc", "bayes", "ncl")),
    Claim(10, ("figure4a",), "SC rises with D; BayesNCL beats NCL at each D", _widths),
    Claim(11, ("figure4b",), "Inverted U over lambda and rho", lambda runs: [
        *_inverted_u("11a", "lambda", "\\lambda", "worse for $\\lambda >$ 4e-5")(runs),
        *_inverted_u("11b", "rho", "\\rho", "inverted U")(runs)]),
    Claim(12, ("table7",), "Cost: GFLOPs within 1%, training time within 6% of NCL", lambda runs: [
        *_within("12a", "GFLOPs: @A within 1% of @B", "table7", "gflops", 0.01, True, "1.419 vs 1.416")(runs),
        *_within("12b", "Train time: @A within 6% of @B", "table7", "train_minutes", 0.06, True,
                 "75.12 vs 70.95 min")(runs)]),
]


# ----------------------------------------------------------------------------- the table
def claims_rows(df: pd.DataFrame) -> list[tuple[str, list[Comparison]]]:
    """[(dataset, comparisons), ...]: per dataset, the claims whose sets it has runs in; a last block
    ("") holds the claims no dataset ran, as "not run"."""
    df = prepare(df)
    records = df.to_dict("records")
    datasets = list(dict.fromkeys(r["dataset"] for r in records))
    blocks, ran = [], set()
    for d in datasets:
        runs = Runs([r for r in records if r["dataset"] == d])
        comps = []
        for claim in CLAIMS:
            if runs.has(*claim.sets):
                ran.add(claim.number)
                comps += claim.build(runs)
        if comps:
            blocks.append((d, comps))
    empty = Runs([])
    missing = [c for claim in CLAIMS if claim.number not in ran for c in claim.build(empty)]
    if missing:
        blocks.append(("", missing))
    return blocks


def _side_cell(side: Side, fmt: Fmt) -> str:
    c = Stat(side.stat.mean, side.stat.std, side.stat.n, side.stat.decimals, mark="‡" if side.repeats else "")
    if not math.isfinite(c.mean):
        return fmt.dash()
    return fmt.cell(c, with_n=True)


def build_claims(df: pd.DataFrame, kind: str = "tex") -> dict:
    """The claims table's context (``kind`` "tex", "md" or "txt")."""
    fmt = Fmt(kind)
    blocks, flags = [], []
    for dataset, comps in claims_rows(df):
        rows = []
        for c in comps:
            text = fmt.text(c.text).replace("@A", fmt.esc(c.left.label)).replace("@B", fmt.esc(c.right.label))
            right = c.right_text if c.right_text is not None else _side_cell(c.right, fmt)
            rows.append([c.claim, text, _side_cell(c.left, fmt), right, fmt.text(c.paper) or fmt.dash(),
                         c.verdict])
            for s in (c.left, c.right):
                if s.repeats:
                    where = f" on {DATASET_NAMES.get(dataset, dataset)}" if dataset else ""
                    flags.append(f"{s.label}{where} is {s.repeats}")
        title = DATASET_NAMES.get(dataset, dataset) if dataset else "Not run on any dataset"
        blocks.append({"title": fmt.esc(title), "rows": rows})
    caption = ("The paper's claims (docs/METHOD.md section 9) on this grid's runs, one row per comparison. "
               "Left, right: the two sides of the claim, mean ± std (seeds); paper: the paper's values "
               "(ImageNet-100 unless stated). Verdict: holds when the means differ in the stated direction by more "
               "than the larger std, with at least 2 seeds per side; same direction, within noise when only "
               "the means agree (or a side has fewer than 2 seeds); does not hold otherwise; not run when the "
               "grid lacks the runs. Claims 8 and 12 hold within their tolerance (at least 2 seeds per side). "
               "Claim 7 reads the last recorded epoch. Claim 11 compares the best inner sweep point (SC) with "
               "each end, the weaker verdict decides; right: the better end.")
    if flags:
        caption += " ‡ Not a separate result: " + "; ".join(dict.fromkeys(flags)) + "."
    header = ["", "Claim", "Left", "Right", "Paper", "Verdict"]
    rag = r">{\raggedright\arraybackslash}"
    colspec = f"@{{}}l{rag}p{{5.0cm}}rr{rag}p{{2.1cm}}l@{{}}"
    return table_context("claims", "Claims", fmt.text(caption), header, blocks, wide=True, colspec=colspec,
                         align=["left", "left", "right", "right", "left", "left"], size="footnotesize")


def render_claims(df: pd.DataFrame, kind: str = "tex") -> str:
    return render_context(build_claims(df, kind), kind)


def write_claims(df: pd.DataFrame, out_dir: str | os.PathLike) -> list[Path]:
    """Write claims.tex and claims.md into ``out_dir`` (atomically)."""
    out = Path(out_dir)
    return [atomic_write_text(out / f"claims.{kind}", render_claims(df, kind)) for kind in ("tex", "md")]


# ----------------------------------------------------------------------------- the terminal
HEADLINE = ("sc", "se_sum", "act", "probe_top1", "ret_p10")


def _headline(df: pd.DataFrame, fmt: Fmt) -> str:
    """The main comparison (the runs of Tables 1 and 2), one row per dataset and variant."""
    recs = [r for r in prepare(df).to_dict("records") if in_set(r["sets"], "table1") or in_set(r["sets"], "table2")]
    groups = group_rows(recs)
    for d in dict.fromkeys(g.dataset for g in groups):
        flag_repeats([g for g in groups if g.dataset == d])
    rows = []
    for g in groups:
        cells = [METRICS[k].stat([r[k] for r in g.rows if not (k.startswith("ret_") and r["method"] == "cl")])
                 for k in HEADLINE]
        rows.append([DATASET_NAMES.get(g.dataset, g.dataset), g.variant + (" ‡" if g.repeats else ""), g.n,
                     *[fmt.cell(c) for c in cells]])
    header = ["Dataset", "Method", "Seeds", *[fmt.header(METRICS[k]) for k in HEADLINE]]
    return tabulate(rows, headers=header, tablefmt="simple", disable_numparse=True)


def outcome(df: pd.DataFrame) -> str:
    """What the run showed, for the terminal: the claims and the headline rows of Tables 1 and 2."""
    fmt = Fmt("txt")
    ctx = build_claims(df, "txt")
    lines = []
    for block in ctx["blocks"]:
        for i, row in enumerate(block["rows"]):
            lines.append([block["title"] if i == 0 else "", *row[:4], row[5]])
    claims = tabulate(lines, headers=["Dataset", "", "Claim", "Left", "Right", "Verdict"], tablefmt="simple",
                      disable_numparse=True, maxcolwidths=[None, None, 48, None, None, None])
    counts = pd.Series([r[-1] for r in lines]).value_counts()
    tally = "; ".join(f"{v}: {counts[v]}" for v in VERDICTS if v in counts)
    return (f"Claims (docs/METHOD.md section 9; mean ± std (seeds), left vs right): {tally}\n{claims}\n\n"
            f"Main comparison (Tables 1-2; ‡ repeats another row's result):\n{_headline(df, fmt)}\n")


def print_outcome(df: pd.DataFrame, stream: TextIO | None = None) -> None:
    print(outcome(df), file=stream or sys.stdout, flush=True)
