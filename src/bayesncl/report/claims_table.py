"""The claims table (``results/tables/claims.{tex,md}``) and the outcome printed to the terminal: the judged
comparisons of claims.py (judge.py's ``claims_rows``) as cells, in LaTeX, Markdown or plain text.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from typing import Sequence, TextIO

import pandas as pd
from tabulate import tabulate

from ..settings.registry import method_traits
from .cells import METRICS, Fmt, Stat
from .claims import PRIMARY, SAME_INIT, Claim, Comparison, Side
from .judge import Judged, judge
from .groups import flag_repeats, group_rows
from .tables import render_context, table_context, write_table
from .lines import rows_in_set, saturation_verdict
from .names import ARCH_NAMES, DATASET_NAMES, HEADLINE, is_main
from .reading import reading, rows_of
from .summary import prepare
from .verdicts import ALPHA, FAILS, HOLDS, LOOK_ALPHAS, NOT_RUN, UNCONTROLLED, VERDICTS, Outcome, decision

__all__ = ["CAPTION", "build_claims", "claim_cells", "dataset_title", "family_tally", "gate_sentence",
           "outcome", "print_outcome", "render_claims", "write_claims"]



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


def _diff_cell(c: Comparison, fmt: Fmt, r: Outcome | None = None) -> str:
    """The mean difference (``r``, else the comparison's) and its 95% interval, in the claim's direction;
    relative tolerances in percent of the right side."""
    r = c.result if r is None else r
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


def _init_cell(c: Comparison, fmt: Fmt) -> str:
    """Delta at initialisation with its interval (the untrained twins), or why there is none."""
    if c.init is None:
        return fmt.text(c.init_note) or fmt.dash()
    return _diff_cell(c, fmt, c.init)


def _training_cell(c: Comparison, fmt: Fmt) -> str:
    """The verdict on what training changed (Delta - Delta at initialisation, per seed); a dash without it, and
    SAME_INIT where Delta at init is 0 by construction (the verdict would repeat the plain one)."""
    if c.same_init:
        return SAME_INIT
    return c.change.verdict if c.change is not None else fmt.dash()


def _margin_cell(c: Comparison, fmt: Fmt) -> str:
    """The claim's margin, signed as its bound on Delta, and where it comes from (claims.MARGINS)."""
    k = c.kind
    if k.name == "better":
        return fmt.dash()
    value = f"{k.margin * 100:g}%" if k.relative else f"{k.margin:g}"
    sign = {"not worse": "$-$", "within": "$\\pm$"}.get(k.name, "$+$")
    return fmt.text(f"{sign}{value}" + (f" ({k.source})" if k.source else ""))


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
    "the interval clears the claim's bound ($>$: 0; $\\geq$: $-$margin; within: strictly inside $\\pm$margin; "
    "at most: below the margin, one-sided, for 12a-b relative to the right side, $\\Delta$ = left $-$ right in %, "
    "a cheaper left side satisfying it), does not hold when it lies wholly beyond it, otherwise "
    "inconclusive, leaning by $\\Delta$ alone (always so with fewer than 2 seeds on a side: no CI); not run: "
    "no finite value on a side. Claim 7 reads the last recorded epoch; claim 11 compares the best inner sweep "
    "point (chosen after seeing the means) with each end and shows the weaker part. Margin: the claim's bound on "
    "$\\Delta$ and its source: paper (the paper's own words or numbers), spec (declared in docs/METHOD.md section 9, "
    "per metric; the paper reports no seed spread), declared (a declared claim's tolerance). Paper: ImageNet-100 "
    "unless stated. Controls (docs/METHOD.md section 9): $\\Delta$ at init is the same comparison on the same "
    "seeds' untrained networks (their own initialisation, no step taken, the same evaluation); Training judges "
    "by the same rule and margins what training changed, each seed's $\\Delta$ minus its $\\Delta$ at init (n/a: "
    "a metric that does not exist before training; same network at init: both sides start from the same "
    "untrained runs, $\\Delta$ at init is 0 by construction and Training would repeat the verdict). Family: "
    "a graphical procedure (Bretz et al. 2009) at level 0.05 over the one-sided t-tests that the intervals read (p "
    "doubled, so that a family of one gives the plain verdict), once for holds and once for does not hold: the "
    "primary claims (1a and 2a on each dataset) share the level; one that holds passes half its share to the other "
    "primary claims and half to the secondary claims (the rest), which pass theirs on among themselves (Holm's "
    "step-down once every primary claim holds), so that a primary claim that cannot be decided no longer silences "
    "the others; a secondary verdict the graph gave no level is the plain one, marked not controlled. A verdict "
    "holds or does not hold (family) only where its p is below its share of the level; comparisons without an "
    "interval are not counted.")
DECLARED_NOTE = (" Paper \"declared\": a claim that is not the paper's (the workflow config's claims:, or a "
                 "plugin's; docs/EXTENDING.md), judged by the same rule.")


TEX_ROWS = 8  # rows per LaTeX float (up to five lines each: the margin has its own)
FAMILY_HEADER = "Family (graph)"  # the familywise column (report/reading.py finds it by its first word)


def claim_cells(c: Comparison, fmt: Fmt) -> dict[str, str]:
    """One comparison's cells in ``fmt``: id, text, left, right, diff, test, margin, init, paper, verdict,
    training, family. LaTeX breaks a verdict before its lean."""
    text = fmt.text(c.text).replace("@A", fmt.esc(c.left.label)).replace("@B", fmt.esc(c.right.label))
    marks = (fmt.mark("§") if still_learning(c) else "") + (fmt.mark("¶") if collapsed(c) else "")
    return {"id": c.claim + marks, "text": text, "left": _side_cell(c.left, fmt),
            "right": c.right_text if c.right_text is not None else _side_cell(c.right, fmt),
            "diff": _diff_cell(c, fmt), "test": _test_cell(c, fmt), "margin": _margin_cell(c, fmt),
            "init": _init_cell(c, fmt),
            "paper": fmt.text(c.paper) or fmt.dash(), "verdict": _broken(c.verdict, fmt),
            "training": _broken(_training_cell(c, fmt), fmt), "family": _broken(c.family, fmt)}


def _broken(verdict: str, fmt: Fmt) -> str:
    return verdict.replace(" (", r" \newline (") if fmt.tex else verdict


def controlled(c: Comparison) -> str | None:
    """The comparison's familywise decision (HOLDS, FAILS), None when it has none or is not controlled."""
    return decision(c.family) if "(family" in c.family else None


def family_tally(comps: list[Comparison]) -> str:
    """How many decisive verdicts survive the familywise control, in words."""
    decisive = [c for c in comps if c.verdict in (HOLDS, FAILS)]
    kept = [c for c in decisive if controlled(c) == c.verdict]
    tested = sum(c.result.has_interval for c in comps)
    return (f"{len(kept)} of the {len(decisive)} decisive verdicts survive the familywise control (the graph over "
            f"{tested} comparisons with an interval)")


def gate_sentence(judged: Judged) -> str:
    """The primary claims' outcome and the level the secondary claims were tested at: "primary: 2 of 2 hold;
    secondary tested at 0.05", "primary: 1 of 2 hold (2a inconclusive); secondary tested at 0.0125 passed on", or
    "secondary not controlled: primary 1a inconclusive, 2a inconclusive" where no secondary claim got any level."""
    prim = [(d, c) for d, comps in judged.blocks for c in comps if c.primary and c.verdict != NOT_RUN]
    levels = f"{ALPHA:g}" + (" over two looks" if judged.pilot else "")
    if not prim:
        return f"no primary claim ({', '.join(PRIMARY)}) ran: every comparison in one family, tested at {levels}"
    if not any(c.result.has_interval for _, c in prim):
        return (f"no primary claim ({', '.join(PRIMARY)}) has an interval: the others one family, tested at "
                f"{levels}")
    many = len({d for d, _ in prim}) > 1
    blocking = [(d, c) for d, c in prim if controlled(c) != HOLDS]
    if not blocking:
        return f"primary: {len(prim)} of {len(prim)} hold; secondary tested at {levels}"
    what = ", ".join(f"{c.claim}{f' ({dataset_title(d)})' if many else ''} "
                     f"{c.family.split(' (')[0]}" for d, c in blocking)
    secondary = [c for _, comps in judged.blocks for c in comps if not c.primary and c.result.has_interval]
    if secondary and all(UNCONTROLLED in c.family for c in secondary):
        return f"secondary {UNCONTROLLED}: primary {what}"
    level = judged.families[-1].secondary if judged.families else 0.0
    return (f"primary: {len(prim) - len(blocking)} of {len(prim)} hold ({what}); secondary tested at {level:.3g} "
            f"of {levels}, the level the primary claims that hold passed on")


def looks_sentence(judged: Judged) -> str:
    """A grown grid's two looks, for the caption ("" for one look)."""
    if not judged.pilot:
        return ""
    return (f" Two looks (docs/METHOD.md section 9, \"Planning\"): look 1 judged the pilot's seeds at "
            f"{LOOK_ALPHAS[0]:g}, look 2 all the seeds at the rest of {ALPHA:g}, combining the pilot's t-test with "
            "the added seeds' own (the inverse normal combination, equal stage weights fixed before any seed ran); a "
            "verdict decided at look 1 stands, and the Family column says which look gave each.")


def still_learning(c: Comparison) -> int:
    """How many of the comparison's runs were still learning when they stopped (docs/METHOD.md section 10)."""
    return c.left.learning + c.right.learning


def collapsed(c: Comparison) -> int:
    """How many of the comparison's runs collapsed (bayesncl.measures.learning.collapse; docs/METHOD.md section 10)."""
    return c.left.collapsed + c.right.collapsed


def _before_saturation(df: pd.DataFrame) -> str:
    """A caption sentence per dataset whose grid ran the saturation set and whose NCL runs have not met the
    saturation criterion (figures/saturation): the table's runs stop before the miniature stops learning."""
    rows = rows_in_set(df, "saturation") if len(df) and "epochs" in df else df.iloc[:0]
    out = []
    for ds in dict.fromkeys(rows["dataset"]):
        saturated, words = saturation_verdict(rows[rows["dataset"] == ds])
        if saturated is False:
            out.append(f"{DATASET_NAMES.get(ds, ds)}: {words}")
    if not out:
        return ""
    return (" These runs stop before saturation (figures/saturation; docs/METHOD.md section 10): "
            + "; ".join(out) + ".")


def dataset_title(dataset: str) -> str:
    """A block's title: the dataset's display name; "" is the block of claims no dataset ran."""
    return DATASET_NAMES.get(dataset, dataset) if dataset else "Not run on any dataset"


def build_claims(df: pd.DataFrame, kind: str = "tex", declared: Sequence[Claim] = ()) -> dict:
    """The claims table's context (``kind`` "tex", "md" or "txt"), the workflow config's own claims ``declared``
    after the registered ones. LaTeX puts the test under the interval, so that every row is two lines of a
    page-wide table."""
    fmt = Fmt(kind)
    blocks, flags, learning, fell, shows_declared, every = [], [], [], [], False, []
    judged = judge(df, declared)
    for dataset, comps in judged.blocks:
        rows = []
        for c in comps:
            shows_declared |= c.paper == "declared"
            learning.append(still_learning(c))
            fell.append(collapsed(c))
            cell = claim_cells(c, fmt)
            every.append(c)
            if fmt.tex:  # fewer, stacked columns: the table spans the page
                nl = r" \newline "
                margin = "margin " + cell["margin"] if cell["margin"] != fmt.dash() else fmt.dash()
                evidence = nl.join(e for e in (cell["diff"], cell["test"], margin) if e != fmt.dash()) or fmt.dash()
                control = cell["init"] + (nl + "training: " + cell["training"] if c.change is not None else "")
                family = "" if c.family == c.verdict else nl + "family: " + c.family.removesuffix(" (family)")
                if UNCONTROLLED in c.family:  # the plain verdict stands above it: say only that it is uncontrolled
                    family = nl + "family: " + c.family[c.family.index(UNCONTROLLED):].rstrip(")")
                rows.append([cell["id"], cell["text"], cell["left"], cell["right"], evidence, control, cell["paper"],
                             cell["verdict"] + family])
            else:
                rows.append([cell["id"], cell["text"], cell["left"], cell["right"], cell["diff"], cell["test"],
                             cell["margin"], cell["init"], cell["paper"], cell["verdict"], cell["training"],
                             cell["family"]])
            for s in (c.left, c.right):
                if s.repeats:
                    where = f" on {DATASET_NAMES.get(dataset, dataset)}" if dataset else ""
                    flags.append(f"{s.label}{where} is {s.repeats}")
        title = dataset_title(dataset)
        step = TEX_ROWS if fmt.tex else len(rows)  # a LaTeX float must fit a page: long blocks continue
        for i in range(0, len(rows), step):
            blocks.append({"title": fmt.esc(title + (" (continued)" if i else "")), "rows": rows[i:i + step]})
    caption = (CAPTION + looks_sentence(judged) + (DECLARED_NOTE if shows_declared else "")
               + f" Family: {gate_sentence(judged)}; {family_tally(every)}.")
    if any(learning):
        caption += (f" § {sum(map(bool, learning))} of the {len(learning)} rows compare runs of which some were "
                    "still learning when they stopped (their InfoNCE loss still fell over the last 20% of epochs, "
                    "the slope's 95% interval below 0).")
    if any(fell):
        caption += (f" ¶ {sum(map(bool, fell))} of the {len(fell)} rows compare runs of which some collapsed (their "
                    "InfoNCE loss climbed back more than half the way to chance after falling; docs/METHOD.md "
                    "section 10); those runs stay in the interval.")
    caption += _before_saturation(df)
    if flags:
        caption += " ‡ Not a separate result: " + "; ".join(dict.fromkeys(flags)) + "."
    rag = r">{\raggedright\arraybackslash}"
    if fmt.tex:
        header = ["", "Claim", "Left", "Right", "$\\Delta$ [95% CI], test (n)", "$\\Delta$ at init, training",
                  "Paper", "Verdict, family"]
        colspec = (f"@{{}}l{rag}p{{2.6cm}}rr{rag}p{{2.7cm}}{rag}p{{2.5cm}}{rag}p{{1.15cm}}"
                   f"{rag}p{{1.9cm}}@{{}}")
    else:
        header = ["", "Claim", "Left", "Right", "$\\Delta$ [95% CI]", "Test (n)", "Margin",
                  "$\\Delta$ at init [95% CI]", "Paper", "Verdict", "Training", FAMILY_HEADER]
        colspec = None
    align = ["left", "left", "right", "right"] + ["left"] * (len(header) - 4)
    return table_context("claims", "Claims", fmt.text(caption), [fmt.text(h) for h in header], blocks, wide=True,
                         colspec=colspec, align=align, size="footnotesize")


def render_claims(df: pd.DataFrame, kind: str = "tex", declared: Sequence[Claim] = ()) -> str:
    return render_context(build_claims(df, kind, declared), kind)


def write_claims(df: pd.DataFrame, out_dir: str | os.PathLike, stamp: str | None = None,
                 smoke: bool = False, declared: Sequence[Claim] = ()) -> list[Path]:
    """Write claims.tex and claims.md into ``out_dir``, each once (``tables.write_table``)."""
    out = Path(out_dir)
    return [write_table(out / f"claims.{kind}", render_claims(df, kind, declared), stamp, smoke)
            for kind in ("tex", "md")]


# ----------------------------------------------------------------------------- the terminal
def _headline(df: pd.DataFrame, fmt: Fmt) -> str:
    """The main comparison (names.MAIN_SETS), one row per dataset, architecture and variant; a cell averaged
    over k of its row's n seeds (the others NaN) says (k/n)."""
    recs = [r for r in prepare(df).to_dict("records") if is_main(r["sets"])]
    groups = group_rows(recs)
    for d, a in dict.fromkeys((g.dataset, g.arch) for g in groups):
        flag_repeats([g for g in groups if (g.dataset, g.arch) == (d, a)])
    rows = []
    for g in groups:
        cells = []
        for k in HEADLINE:
            vals = [r[k] for r in g.rows if not (k.startswith("ret_") and not method_traits(r["method"]).nonnegative)]
            c = METRICS[k].stat(vals)
            c.of = len(vals)
            cells.append(c)
        rows.append([DATASET_NAMES.get(g.dataset, g.dataset), ARCH_NAMES.get(g.arch, g.arch),
                     g.variant + (" ‡" if g.repeats else ""), g.n, *[fmt.cell(c) for c in cells]])
    header = ["Dataset", "Arch.", "Method", "Seeds", *[fmt.header(METRICS[k]) for k in HEADLINE]]
    return tabulate(rows, headers=header, tablefmt="simple", disable_numparse=True)


def outcome(df: pd.DataFrame, declared: Sequence[Claim] = ()) -> str:
    """What the run showed, for the terminal: the claims (``declared``: the workflow config's own, after the
    registered ones) and the headline rows of Tables 1 and 2."""
    fmt = Fmt("txt")
    lines, judged = [], judge(df, declared)
    blocks = judged.blocks
    for dataset, comps in blocks:
        for i, c in enumerate(comps):
            cell = claim_cells(c, fmt)
            lines.append([dataset_title(dataset) if i == 0 else "",
                          *[cell[k] for k in ("id", "text", "left", "right", "diff", "test", "margin", "init",
                                              "verdict", "training", "family")]])
    every = [c for _, comps in blocks for c in comps]
    claims = tabulate(lines, headers=["Dataset", "", "Claim", "Left", "Right", "Δ [95% CI]", "Test (n)", "Margin",
                                      "Δ at init [95% CI]", "Verdict", "Training", FAMILY_HEADER],
                      tablefmt="simple", disable_numparse=True, maxcolwidths=[None, None, 40, None, None, None,
                                                                              None, None, 24, None, None, None])
    words = "\n".join(reading(rows_of(blocks, dataset_title)))
    counts = pd.Series([c.verdict for c in every]).value_counts()
    tally = ("; ".join(f"{v}: {counts[v]}" for v in VERDICTS if v in counts)
             + f"; family: {gate_sentence(judged)}; {family_tally(every)}")
    return (f"Claims (docs/METHOD.md section 9; mean ± std (seeds), left vs right; Δ with its 95% interval, "
            f"in the claim's direction): {tally}\n{claims}\n\n"
            f"Reading (generated from the verdicts):\n{words}\n\n"
            f"Main comparison (Tables 1-2; ‡ repeats another row's result; (k/n): k of n seeds finite):\n"
            f"{_headline(df, fmt)}\n")


def print_outcome(df: pd.DataFrame, stream: TextIO | None = None, declared: Sequence[Claim] = ()) -> None:
    print(outcome(df, declared), file=stream or sys.stdout, flush=True)
