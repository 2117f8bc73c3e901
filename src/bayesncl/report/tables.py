"""Tables 1-7 as LaTeX (booktabs) and Markdown, from the runs summary.

Conventions (the same for every table):
- Rows are the runs whose ``sets`` contain the table's set, grouped by (dataset, arch, variant) in
  order of first appearance (= the grid's order); one block per dataset. The arch is appended to the
  row label only when a block mixes architectures.
- A cell is ``mean ± std`` over the group's runs (seeds); std is the sample std (ddof = 1). With a
  single value the cell shows the mean alone: "± 0.00" would claim a spread that was never measured.
  LaTeX writes the std as a subscript (``$30.00_{\\pm 1.50}$``) so that the tables fit the page.
- Every accuracy and share is printed in percent (``Metric.scale`` turns 0-1 fractions into percent).
- NaN values (a run whose value is undefined, e.g. collapsed to no active dimension) are left out of
  mean/std, and a cell averaged over k of its row's n runs says so (``Stat.of``: a superscript k/n in
  LaTeX, "(k/n)" in text, explained in the caption); a cell with no value is a dash and is never bold.
- Bold marks the best value of a column within a dataset block, in the metric's direction
  (``Metric.better``), only when it differs from the runner-up at the printed precision (no bold on
  ties as printed). Columns without a direction (Act., alive dims, background measures, Table 3
  correlations) are never bold and have no arrow.
- Flags: a row whose runs trained the same weights as an earlier row's runs (equal ``weights_sha``),
  or a Top-k NCL row whose top-k mask never bound (``topk_bound`` 0), repeats another result: it is
  marked with a double dagger, explained in the caption, and never bold.
- The caption states the seed count; when groups differ, rows off the most common count are marked.
- One caption per table, written once with ``$...$`` math: LaTeX keeps the math, Markdown gets a
  plain-text rendering of it (``caption_text``).
- What differs between tables is a field of ``TableSpec`` (values not reported for some methods, the
  block title's values, caption notes), never a test of the table's name.
- Layout: a two-column paper with the ICML geometry (text width 6.75 in = 487.8 pt, column width
  3.25 in = 234.9 pt, 10 pt body, tables in ``\\small``). ``TableSpec.wide`` tables are ``table*``
  (full text width); the others fit one column. tests/test_latex.py compiles them and fails on an
  overfull box.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pandas as pd

from ..settings.registry import method_traits
from .cells import MARKS, METRICS, Fmt, Stat, bold_best, stat
from .groups import Group, blocks, parse_list
from .table_files import render_context, table_context, write_table
from .names import ARCH_NAMES, DATASET_NAMES
from .summary import prepare

__all__ = ["TABLES", "build_table", "render_table", "render_tables"]

PROBE_PROTOCOLS = {
    "fast": "fast protocol (linear classifier on cached features, no augmentation; not the paper's)",
    "paper": "paper protocol (50 epochs, RandomResizedCrop + flip)",
}


# ----------------------------------------------------------------------------- rows and captions
def _label(g: Group, block: list[Group], fmt: Fmt) -> str:
    text = g.variant + (" (imported)" if imported(g) else "")
    if len({x.arch for x in block}) > 1:
        text += f" ({ARCH_NAMES.get(g.arch, g.arch)})"
    label = fmt.esc(text)
    for mark in g.marks:
        label += fmt.mark(mark) if mark in MARKS else fmt.seeds_mark(int(mark))
    return label


NAN_NOTE = ("A cell marked $^{k/n}$ averages the k of its row's n seeds whose value is defined; the others are "
            "NaN (e.g. a run collapsed to no active dimension).")


def _seed_caption(groups: list[Group]) -> str:
    """Caption sentence on seed counts; marks groups off the most common count."""
    counts = Counter(g.n for g in groups)
    if not counts:
        return "No runs in this set."
    mode = max(counts, key=lambda n: (counts[n], n))
    for g in groups:
        if g.n != mode:
            g.marks.append(str(g.n))
    text = "Single seed (mean only, no std)" if mode == 1 else f"Mean ± std over {mode} seeds"
    if len(counts) > 1:
        text += ("; seed counts differ between rows: rows marked $^{n=k}$ have k seeds "
                 "(a single seed shows the mean only)")
    return text + "."


def _protocol_note(groups: list[Group], column: str, what: str, names: dict[str, str] | None = None) -> str:
    """One sentence on the protocol(s) used; with mixed protocols the rows off the base protocol
    ("paper" if present) get a dagger."""
    proto = {id(g): ";".join(sorted({r[column] for r in g.rows if r[column]})) for g in groups}
    seen = [p for p in dict.fromkeys(proto.values()) if p]
    if not seen:
        return f"{what} protocol not recorded." if groups else ""
    base = "paper" if "paper" in seen else seen[0]
    names = names or {}
    text = f"{what}: {names.get(base, base + ' protocol')}"
    others = [p for p in seen if p != base]
    if others:
        for g in groups:
            if proto[id(g)] and proto[id(g)] != base:
                g.marks.insert(0, "†")
        text += "; rows marked † use the " + ", ".join(names.get(p, p + " protocol") for p in others)
    return text + "."


BN_MODES = {"batch": "batch statistics of each test batch, as the released evaluation (eval.bn=batch)",
            "running": "running statistics (eval mode, eval.bn=running)"}


def _run_flag_note(groups: list[Group], column: str, mark: str, text: str) -> str:
    """Marks (``mark``) the rows with a run whose ``column`` is 1 and returns the caption's count of them,
    "<mark> k of the table's n runs <text>"; "" when none is."""
    runs = [r for g in groups for r in g.rows]
    flagged = sum(r.get(column) == 1 for r in runs)
    if not flagged:
        return ""
    for g in groups:
        if any(r.get(column) == 1 for r in g.rows):
            g.marks.append(mark)
    return f"{mark} {flagged} of the table's {len(runs)} runs {text}"


def learning_note(groups: list[Group]) -> str:
    """Runs still learning when they stopped (§; docs/METHOD.md section 10)."""
    return _run_flag_note(groups, "still_learning", "§", "were still learning when they stopped (their InfoNCE "
                          "loss still fell over the last 20% of epochs, the slope's 95% interval below 0).")


def collapse_note(groups: list[Group]) -> str:
    """Runs that collapsed (¶; bayesncl.measures.learning.collapse): their numbers stay in the row's mean and
    interval."""
    return _run_flag_note(groups, "collapsed", "¶", "collapsed (their InfoNCE loss climbed back more than half the "
                          "way to chance, ln(2N-1), after falling; docs/METHOD.md section 10); they stay in the means.")


def stale_note(groups: list[Group]) -> str:
    """Runs trained under other settings than the grid gives them today (runs.csv's ``stale``; bayesncl.grid.stale):
    each differing key, its recorded values, how many of the table's runs have each, and today's value."""
    runs = [r for g in groups for r in g.rows]
    seen: dict[str, Counter] = {}
    today: dict[str, str] = {}
    for r in runs:
        for key, (was, now) in (json.loads(r["stale"]) if r.get("stale") else {}).items():
            seen.setdefault(key, Counter())[str(was)] += 1
            today[key] = str(now)
    if not seen:
        return ""
    parts = [", ".join(f"{key} {v} in {n} of the table's {len(runs)} runs" for v, n in counts.items())
             + f" (today {today[key]})" for key, counts in seen.items()]
    return ("Runs trained under other settings than the workflow config gives them today: " + "; ".join(parts)
            + ". `bayesncl stale` lists them; `snakemake` retrains them.")


def imported(g: Group) -> bool:
    """Whether the group's weights were imported (the released code's checkpoints), not trained by the grid."""
    return any(r.get("imported") for r in g.rows)


def imported_note(groups: list[Group]) -> str:
    """The caption's note on rows whose weights were imported: each checkpoint's file and sha256."""
    rows = [r for g in groups if imported(g) for r in g.rows if r.get("imported")]
    if not rows:
        return ""
    files = "; ".join(dict.fromkeys(f"{r['variant']}: {r['imported_from'] or 'a checkpoint'} (sha256 "
                                    f"{r['imported'][:16]})" for r in rows))
    return ("Rows marked (imported) evaluate weights imported from the released code's checkpoints (bayesncl "
            f"import), not trained by this workflow: {files}.")


def repeat_note(groups: list[Group], multi_dataset: bool) -> str:
    """The caption's footnote for flagged groups (and their ‡ mark)."""
    notes = []
    for g in groups:
        if g.repeats:
            g.marks.append("‡")
            where = f" on {DATASET_NAMES.get(g.dataset, g.dataset)}" if multi_dataset else ""
            notes.append(f"{g.variant}{where} is {g.repeats}")
    if not notes:
        return ""
    return "‡ Not a separate result: " + "; ".join(dict.fromkeys(notes)) + "."


# ----------------------------------------------------------------------------- table specs
def _protocol(column: str, what: str, names: dict[str, str] | None = None) -> Callable[[list[Group]], str]:
    """A caption note on the protocol(s) in ``column`` (see ``_protocol_note``)."""
    return functools.partial(_protocol_note, column=column, what=what, names=names)


@dataclass(frozen=True)
class TableSpec:
    name: str
    set_name: str
    caption: str      # first caption sentence(s); "$...$" is math (see caption_text)
    columns: tuple[str, ...]
    kind: str = "metrics"  # "metrics" or "dynamics"
    wide: bool = False     # table* over both columns
    # {column prefix: whether a method's values of the matching columns are not reported (a dash)}
    not_reported: dict[str, Callable[[str], bool]] = field(default_factory=dict)
    # (column, math symbol): the block title lists the reported values of the column, e.g. "(K = 64)"
    title_values: tuple[str, str] | None = None
    # caption notes after ``caption``, each from the table's groups (may mark groups, e.g. with a dagger)
    notes: tuple[Callable[[list[Group]], str], ...] = ()

    def reported(self, column: str, method: str) -> bool:
        return not any(column.startswith(prefix) and hidden(method) for prefix, hidden in self.not_reported.items())


TABLES = [
    TableSpec("table1", "table1",
              "Interpretability of the evaluation features. SC: semantic consistency (%); "
              "SE-Sum/Mean/Freq: semantic entropy (nats); Act.: activation ratio (%); "
              "Alive: active dimensions.",
              ("sc", "se_sum", "se_mean", "se_freq", "act", "alive"), wide=True,
              notes=(_protocol("eval_bn", "Evaluation features' BatchNorm", BN_MODES),)),
    TableSpec("table2", "table2",
              "Linear probe accuracy (%) on the frozen backbone feature and image retrieval precision "
              "P@$k$ (%) with the top-$K$ feature dimensions ($K$ in the block header; retrieval is not "
              "reported for SimCLR).",
              ("probe_top1", "probe_top5", "ret_p1", "ret_p3", "ret_p5", "ret_p10"), wide=True,
              not_reported={"ret_": lambda m: not method_traits(m).nonnegative}, title_values=("ret_K", "K"),
              notes=(_protocol("probe_protocol", "Linear probe", PROBE_PROTOCOLS),
                     _protocol("eval_bn", "Retrieval features' BatchNorm", BN_MODES))),
    TableSpec("table3", "table3",
              "Gradient dynamics: Spearman correlations between per-dimension activation frequency "
              "(AF), gradient variance (GV) and semantic consistency (SC) of $z^+$ at each recorded epoch.",
              ("dyn_af_gv", "dyn_gv_sc", "dyn_af_sc"), kind="dynamics", wide=True),
    TableSpec("table4", "table4",
              "Gating ablations (gate type, gradient isolation, gating-head depth): SC (%), SE-Sum "
              "(nats), activation ratio (%) and linear probe top-1 (%).",
              ("sc", "se_sum", "act", "probe_top1"), wide=True,
              notes=(_protocol("eval_bn", "Evaluation features' BatchNorm", BN_MODES),)),
    TableSpec("table5", "table5",
              "ResNet-50 backbone: SC (%), SE-Sum (nats), activation ratio (%), linear probe top-1 (%) "
              "and retrieval P@10 (%).",
              ("sc", "se_sum", "act", "probe_top1", "ret_p10"), wide=True,
              notes=(_protocol("eval_bn", "Evaluation features' BatchNorm", BN_MODES),)),
    TableSpec("table6", "table6",
              "Background probe and background dimensions. BG acc.: accuracy (%) of a linear classifier "
              "predicting the background (Waterbirds place for ImageNet-100 models; the background label "
              "of the synthetic set) from the frozen backbone feature (no better direction: the paper's "
              "claim is that it stays comparable). BG-dom.: share (%) of active dimensions of $z^+$ and "
              "of the evaluation feature whose lift over the base rate is larger for the background than "
              "for the class. Closed BG / cls.: closed-gate rate (%) on the background- and "
              "class-dominated dimensions of $z^+$ (BayesNCL only).",
              ("bg_acc", "bg_dominated_zplus", "bg_dominated_feature", "closed_bg", "closed_cls"), wide=True,
              notes=(_protocol("bg_protocol", "Background probe"),)),
    TableSpec("table7", "table7",
              "Training cost: forward GFLOPs per image (backbone, projector, gating head), parameters, "
              "seconds per epoch, throughput, peak accelerator memory and total pretraining time; the times "
              "are training steps only (torch.compile and CUDA-graph capture time is recorded apart, as "
              "the cost section's compile seconds).",
              ("gflops", "params_m", "sec_per_epoch", "img_per_s", "peak_mem_mb", "train_minutes"), wide=True),
]
_SPECS = {t.name: t for t in TABLES}


def _block_title(dataset: str, groups: list[Group], spec: TableSpec, fmt: Fmt) -> str:
    title = fmt.esc(DATASET_NAMES.get(dataset, dataset) or "(unknown dataset)")
    if spec.title_values:
        col, symbol = spec.title_values
        values = sorted({r[col] for g in groups for r in g.rows
                         if spec.reported(col, r["method"]) and math.isfinite(r[col])})
        if values:
            title += " (" + fmt.text(f"${symbol} = " + ", ".join(f"{v:g}" for v in values) + "$") + ")"
    return title


def _metric_rows(groups: list[Group], block: list[Group], spec: TableSpec, fmt: Fmt) -> list[list]:
    metrics = [METRICS[c] for c in spec.columns]
    rows = []
    for g in groups:
        cells = []
        for m in metrics:
            values = [r[m.key] for r in g.rows if spec.reported(m.key, r["method"])]
            c = m.stat(values)
            c.mark, c.of = ("‡" if g.repeats else ""), len(values)
            cells.append(c)
        rows.append([_label(g, block, fmt), *cells])
    for j, m in enumerate(metrics):
        bold_best([r[1 + j] for r in rows], m.better)
    for r in rows:  # the row label carries the flag; cells only need it to skip the bold
        for c in r[1:]:
            c.mark = ""
    return rows

def _dynamics_rows(groups: list[Group], block: list[Group], spec: TableSpec, fmt: Fmt) -> list[list]:
    metrics = [METRICS[c] for c in spec.columns]
    rows = []
    for g in groups:
        per_epoch: dict[float, dict[str, list[float]]] = {}
        for r in g.rows:
            epochs = parse_list(r["dyn_epochs"])
            for m in metrics:
                for e, v in zip(epochs, parse_list(r[m.key])):
                    per_epoch.setdefault(e, {k.key: [] for k in metrics})[m.key].append(v)
        label = _label(g, block, fmt)
        if not per_epoch:
            rows.append([label, fmt.dash(), *[Stat(math.nan, math.nan, 0, m.decimals) for m in metrics]])
            continue
        for i, e in enumerate(sorted(per_epoch)):
            epoch = str(int(e)) if float(e).is_integer() else str(e)
            rows.append([label if i == 0 else "", epoch,
                         *[dataclasses.replace(stat(per_epoch[e][m.key], m.decimals), of=len(per_epoch[e][m.key]))
                           for m in metrics]])
    return rows


def build_table(df: pd.DataFrame, name: str, kind: str = "tex") -> dict:
    """The context of one table (``kind`` "tex", "md" or "txt"); cells are final strings."""
    spec, fmt = _SPECS[name], Fmt(kind)
    df = prepare(df)
    table_blocks = blocks(df, spec.set_name)
    groups = [g for _, gs in table_blocks for g in gs]
    notes = [note(groups) for note in spec.notes]
    notes.append(repeat_note(groups, multi_dataset=len(table_blocks) > 1))
    notes.append(learning_note(groups))
    notes.append(collapse_note(groups))
    notes.append(stale_note(groups))
    notes.append(imported_note(groups))
    notes.append(_seed_caption(groups))
    metrics = [METRICS[c] for c in spec.columns]
    header = ["Method"] + (["Epoch"] if spec.kind == "dynamics" else []) + [fmt.header(m) for m in metrics]
    make_rows: Callable = _dynamics_rows if spec.kind == "dynamics" else _metric_rows
    out_blocks, partial = [], False
    for dataset, gs in table_blocks:
        rows = make_rows(gs, gs, spec, fmt)
        partial |= any(isinstance(c, Stat) and 0 < c.n < c.of for r in rows for c in r)
        out_blocks.append({"title": _block_title(dataset, gs, spec, fmt),
                           "rows": [[fmt.cell(c) for c in r] for r in rows]})
    if partial:
        notes.append(NAN_NOTE)
    caption = fmt.text(" ".join([spec.caption, *[n for n in notes if n]]))
    return table_context(name, name.removeprefix("table"), caption, header, out_blocks, wide=spec.wide)

def render_table(df: pd.DataFrame, name: str, kind: str = "tex") -> str:
    """One table as LaTeX ("tex") or Markdown ("md")."""
    return render_context(build_table(df, name, kind), kind)


def render_tables(df: pd.DataFrame, out_dir: str | os.PathLike, stamp: str | None = None,
                  smoke: bool = False) -> list[Path]:
    """Write table1..7 .tex and .md into ``out_dir``, each once (``layout.write_table``: the provenance
    ``stamp`` and, with ``smoke``, the smoke note in it); returns the paths written."""
    out = Path(out_dir)
    df = prepare(df)
    return [write_table(out / f"{spec.name}.{kind}", render_table(df, spec.name, kind), stamp, smoke)
            for spec in TABLES for kind in ("tex", "md")]
