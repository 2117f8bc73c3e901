"""Tables 1-7 as LaTeX (booktabs) and Markdown, from the runs summary.

Conventions (the same for every table):
- Rows are the runs whose ``sets`` contain the table's set, grouped by (dataset, arch, variant) in
  order of first appearance (= manifest order); one block per dataset. The arch is appended to the
  row label only when a block mixes architectures.
- A cell is ``mean ± std`` over the group's runs (seeds); std is the sample std (ddof = 1). With a
  single value the cell shows the mean alone: "± 0.00" would claim a spread that was never measured.
- NaN values are ignored in mean/std; a cell with no value is a dash and is never bold.
- Bold marks the best mean of a column within a dataset block, compared on UNROUNDED means, in the
  metric's direction (``Metric.better``); columns without a direction (alive dims, background-dominated
  share, Table 3 correlations) are never bold, nor is a column with fewer than two values in a block
  or one where every value ties; partial exact ties share the bold.
- The caption states the seed count; when groups differ, rows off the most common count are marked.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import jinja2
import numpy as np
import pandas as pd

from ..atomic import atomic_write_text
from .summary import prepare

__all__ = ["METRICS", "TABLES", "Metric", "build_table", "latex_escape", "render_tables"]

TEMPLATE_DIR = Path(__file__).with_name("templates")

DATASET_NAMES = {"cifar10": "CIFAR-10", "cifar100": "CIFAR-100", "imagenet100": "ImageNet-100",
                 "waterbirds": "Waterbirds", "synthetic": "Synthetic"}
ARCH_NAMES = {"resnet18": "ResNet-18", "resnet50": "ResNet-50"}
PROBE_PROTOCOLS = {
    "fast": "fast protocol (linear classifier on cached features, no augmentation; not the paper's)",
    "paper": "paper protocol (50 epochs, RandomResizedCrop + flip)",
}


@dataclass(frozen=True)
class Metric:
    key: str           # summary column
    tex: str           # LaTeX header (already LaTeX)
    md: str            # Markdown header
    decimals: int
    better: str | None  # "up", "down" or None (never bold)


METRICS = {m.key: m for m in [
    Metric("sc", "SC", "SC", 2, "up"),
    Metric("se_sum", "SE-Sum", "SE-Sum", 3, "down"),
    Metric("se_mean", "SE-Mean", "SE-Mean", 3, "down"),
    Metric("se_freq", "SE-Freq", "SE-Freq", 3, "down"),
    Metric("act", "Act.", "Act.", 2, "down"),  # activation ratio: lower = sparser
    Metric("alive", "Alive", "Alive", 1, None),
    Metric("probe_top1", "Top-1", "Top-1", 2, "up"),
    Metric("probe_top5", "Top-5", "Top-5", 2, "up"),
    *[Metric(f"ret_p{k}", f"P@{k}", f"P@{k}", 2, "up") for k in (1, 3, 5, 10)],
    Metric("dyn_af_gv", r"$\rho$(AF, GV)", "ρ(AF, GV)", 3, None),
    Metric("dyn_gv_sc", r"$\rho$(GV, SC)", "ρ(GV, SC)", 3, None),
    Metric("dyn_af_sc", r"$\rho$(AF, SC)", "ρ(AF, SC)", 3, None),
    Metric("bg_acc", "BG acc.", "BG acc.", 2, "up"),
    Metric("bg_dominated_zplus", r"BG-dom.\ $z^+$", "BG-dom. z+", 3, None),
    Metric("bg_dominated_feature", r"BG-dom.\ feature", "BG-dom. feature", 3, None),
    Metric("gflops", "GFLOPs", "GFLOPs", 3, "down"),
    Metric("params_m", "Params (M)", "Params (M)", 2, "down"),
    Metric("sec_per_epoch", "s/epoch", "s/epoch", 1, "down"),
    Metric("img_per_s", "img/s", "img/s", 0, "up"),  # a rate: higher is better
    Metric("peak_mem_mb", "Peak mem (MB)", "Peak mem (MB)", 0, "down"),
    Metric("train_minutes", "Total (min)", "Total (min)", 1, "down"),
]}


# ----------------------------------------------------------------------------- formatting
_TEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}
_TEX_RE = re.compile("|".join(re.escape(c) for c in _TEX_SPECIAL))


def latex_escape(text: str) -> str:
    """Escape LaTeX special characters (one pass, so the inserted backslashes are not re-escaped)."""
    return _TEX_RE.sub(lambda m: _TEX_SPECIAL[m.group()], str(text))


def _md_escape(text: str) -> str:
    return str(text).replace("|", r"\|")


def _num(x: float, decimals: int) -> str:
    s = f"{x:.{decimals}f}"
    return s[1:] if s.startswith("-") and float(s) == 0 else s  # no "-0.00"


@dataclass
class Stat:
    mean: float
    std: float  # NaN when fewer than two values
    n: int
    decimals: int
    bold: bool = False


def _stat(values, decimals: int) -> Stat:
    vals = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if vals.size == 0:
        return Stat(math.nan, math.nan, 0, decimals)
    std = float(np.std(vals, ddof=1)) if vals.size > 1 else math.nan
    return Stat(float(np.mean(vals)), std, int(vals.size), decimals)


class _Fmt:
    """How one output format writes cells, text and marks."""

    def __init__(self, kind: str):
        self.tex = kind == "tex"

    def esc(self, text: str) -> str:
        return latex_escape(text) if self.tex else _md_escape(text)

    def cell(self, c: "Stat | str") -> str:
        if isinstance(c, str):
            return c
        if not math.isfinite(c.mean):
            return "--" if self.tex else "-"
        body = _num(c.mean, c.decimals)
        if math.isfinite(c.std):
            body += (r" \pm " if self.tex else " ± ") + _num(c.std, c.decimals)
        if self.tex:
            return f"$\\mathbf{{{body}}}$" if c.bold else f"${body}$"
        return f"**{body}**" if c.bold else body

    def header(self, m: Metric) -> str:
        arrow = {"up": (r" $\uparrow$", " ↑"), "down": (r" $\downarrow$", " ↓")}.get(m.better or "")
        if self.tex:
            return m.tex + (arrow[0] if arrow else "")
        return m.md + (arrow[1] if arrow else "")

    @property
    def pm(self) -> str:
        return r"$\pm$" if self.tex else "±"

    def seeds_mark(self, n: int) -> str:
        return f"$^{{n={n}}}$" if self.tex else f" (n={n})"

    @property
    def dagger(self) -> str:
        return r"$^\dagger$" if self.tex else "†"

    def math(self, tex: str, md: str) -> str:
        return f"${tex}$" if self.tex else md


# ----------------------------------------------------------------------------- grouping
@dataclass
class Group:
    dataset: str
    arch: str
    variant: str
    rows: list[dict]
    marks: list[str] = field(default_factory=list)

    @property
    def n(self) -> int:
        return len(self.rows)

    def values(self, key: str) -> list[float]:
        return [r[key] for r in self.rows]


def _in_set(sets: str, name: str) -> bool:
    return name in str(sets).split(";")


def _blocks(df: pd.DataFrame, set_name: str) -> list[tuple[str, list[Group]]]:
    """[(dataset, [Group, ...]), ...] in order of first appearance."""
    groups: dict[tuple, Group] = {}
    for rec in df.to_dict("records"):
        if _in_set(rec["sets"], set_name):
            key = (rec["dataset"], rec["arch"], rec["variant"])
            groups.setdefault(key, Group(*key, rows=[])).rows.append(rec)
    blocks: dict[str, list[Group]] = {}
    for g in groups.values():
        blocks.setdefault(g.dataset, []).append(g)
        seeds = [r["seed"] for r in g.rows if math.isfinite(r["seed"])]
        if len(seeds) != len(set(seeds)):
            warnings.warn(f"{set_name}: {g.variant!r} on {g.dataset} has repeated seeds {sorted(seeds)}; "
                          "its runs are averaged as if they were seeds", stacklevel=3)
    return list(blocks.items())


def _label(g: Group, block: list[Group], fmt: _Fmt) -> str:
    text = g.variant
    if len({x.arch for x in block}) > 1:
        text += f" ({ARCH_NAMES.get(g.arch, g.arch)})"
    label = fmt.esc(text)
    for mark in g.marks:
        label += fmt.dagger if mark == "dagger" else fmt.seeds_mark(int(mark))
    return label


def _bold_best(rows: list[list], metrics: list[Metric], offset: int) -> None:
    """Bold the best unrounded mean per column among ``rows`` (cells start at ``offset``)."""
    for j, m in enumerate(metrics):
        if m.better is None:
            continue
        cells = [r[offset + j] for r in rows if isinstance(r[offset + j], Stat) and math.isfinite(r[offset + j].mean)]
        if len(cells) < 2:
            continue
        means = [c.mean for c in cells]
        if max(means) == min(means):
            continue  # every row ties: there is no best to point at
        best = max(means) if m.better == "up" else min(means)
        for c in cells:
            c.bold = abs(c.mean - best) <= 1e-12 * max(1.0, abs(best))  # exact ties share the bold


def _seed_caption(groups: list[Group], fmt: _Fmt) -> str:
    """Caption sentence on seed counts; marks groups off the most common count."""
    counts = Counter(g.n for g in groups)
    if not counts:
        return "No runs in this set."
    mode = max(counts, key=lambda n: (counts[n], n))
    for g in groups:
        if g.n != mode:
            g.marks.append(str(g.n))
    if mode == 1:
        text = "Single seed (mean only, no std)"
    else:
        text = f"Mean {fmt.pm} std over {mode} seeds"
    if len(counts) > 1:
        text += (f"; seed counts differ between rows: rows marked {fmt.math('^{n=k}', '(n=k)')}"
                 " have k seeds (a single seed shows the mean only)")
    return text + "."


def _protocol_note(groups: list[Group], column: str, what: str, fmt: _Fmt,
                   names: dict[str, str] | None = None) -> str:
    """One sentence on the protocol(s) used; with mixed protocols the rows off the base protocol
    ("paper" if present) get a dagger."""
    proto = {id(g): ";".join(sorted({r[column] for r in g.rows if r[column]})) for g in groups}
    seen = [p for p in dict.fromkeys(proto.values()) if p]
    if not seen:
        return f"{what} protocol not recorded." if groups else ""
    base = "paper" if "paper" in seen else seen[0]
    names = names or {}
    text = f"{what}: {names.get(base, fmt.esc(base) + ' protocol')}"
    others = [p for p in seen if p != base]
    if others:
        for g in groups:
            if proto[id(g)] and proto[id(g)] != base:
                g.marks.insert(0, "dagger")
        text += "; rows marked " + fmt.dagger + " use the " + ", ".join(
            names.get(p, fmt.esc(p) + " protocol") for p in others)
    return text + "."


# ----------------------------------------------------------------------------- table specs
@dataclass(frozen=True)
class TableSpec:
    name: str
    set_name: str
    caption: str      # first caption sentence(s), LaTeX-safe plain text; "$...$" kept for LaTeX only
    caption_md: str
    columns: tuple[str, ...]
    kind: str = "metrics"  # "metrics" or "dynamics"


TABLES = [
    TableSpec("table1", "table1",
              r"Interpretability of the evaluation features. SC: semantic consistency (\%); "
              r"SE-Sum/Mean/Freq: semantic entropy (nats); Act.: activation ratio (\%, lower is sparser); "
              r"Alive: active dimensions.",
              "Interpretability of the evaluation features. SC: semantic consistency (%); "
              "SE-Sum/Mean/Freq: semantic entropy (nats); Act.: activation ratio (%, lower is sparser); "
              "Alive: active dimensions.",
              ("sc", "se_sum", "se_mean", "se_freq", "act", "alive")),
    TableSpec("table2", "table2",
              r"Linear probe accuracy on the frozen backbone feature and image retrieval precision "
              r"P@$k$ with the top-$K$ feature dimensions ($K$ in the block header; retrieval is not "
              r"reported for SimCLR).",
              "Linear probe accuracy on the frozen backbone feature and image retrieval precision "
              "P@k with the top-K feature dimensions (K in the block header; retrieval is not "
              "reported for SimCLR).",
              ("probe_top1", "probe_top5", "ret_p1", "ret_p3", "ret_p5", "ret_p10")),
    TableSpec("table3", "table3",
              r"Gradient dynamics: Spearman correlations between per-dimension activation frequency "
              r"(AF), gradient variance (GV) and semantic consistency (SC) of $z^+$ at each recorded epoch.",
              "Gradient dynamics: Spearman correlations between per-dimension activation frequency "
              "(AF), gradient variance (GV) and semantic consistency (SC) of z+ at each recorded epoch.",
              ("dyn_af_gv", "dyn_gv_sc", "dyn_af_sc"), kind="dynamics"),
    TableSpec("table4", "table4",
              r"Gating ablations (gate type, gradient isolation, gating-head depth).",
              "Gating ablations (gate type, gradient isolation, gating-head depth).",
              ("sc", "se_sum", "act", "probe_top1")),
    TableSpec("table5", "table5",
              r"ResNet-50 backbone.",
              "ResNet-50 backbone.",
              ("sc", "se_sum", "act", "probe_top1", "ret_p10")),
    TableSpec("table6", "table6",
              r"Background probe: accuracy of a linear classifier predicting the background (Waterbirds "
              r"place for ImageNet-100 models; the background label of the synthetic set) from the frozen "
              r"backbone feature, and the share of background-dominated "
              r"dimensions of $z^+$ and of the evaluation feature.",
              "Background probe: accuracy of a linear classifier predicting the background (Waterbirds "
              "place for ImageNet-100 models; the background label of the synthetic set) from the frozen "
              "backbone feature, and the share of background-dominated "
              "dimensions of z+ and of the evaluation feature.",
              ("bg_acc", "bg_dominated_zplus", "bg_dominated_feature")),
    TableSpec("table7", "table7",
              r"Training cost: forward GFLOPs per image (backbone, projector, gating head), parameters, "
              r"seconds per epoch, throughput, peak accelerator memory and total pretraining time.",
              "Training cost: forward GFLOPs per image (backbone, projector, gating head), parameters, "
              "seconds per epoch, throughput, peak accelerator memory and total pretraining time.",
              ("gflops", "params_m", "sec_per_epoch", "img_per_s", "peak_mem_mb", "train_minutes")),
]
_SPECS = {t.name: t for t in TABLES}


def _block_title(dataset: str, groups: list[Group], spec: TableSpec, fmt: _Fmt) -> str:
    title = fmt.esc(DATASET_NAMES.get(dataset, dataset) or "(unknown dataset)")
    if spec.name == "table2":
        ks = sorted({int(r["ret_K"]) for g in groups for r in g.rows
                     if r["method"] != "cl" and math.isfinite(r["ret_K"])})
        if ks:
            title += " (" + fmt.math("K = " + ", ".join(map(str, ks)), "K = " + ", ".join(map(str, ks))) + ")"
    return title


def _metric_rows(groups: list[Group], block: list[Group], spec: TableSpec, fmt: _Fmt) -> list[list]:
    metrics = [METRICS[c] for c in spec.columns]
    rows = []
    for g in groups:
        cells = []
        for m in metrics:
            skip_cl = spec.name == "table2" and m.key.startswith("ret_")  # not reported for SimCLR
            cells.append(_stat([r[m.key] for r in g.rows if not (skip_cl and r["method"] == "cl")], m.decimals))
        rows.append([_label(g, block, fmt), *cells])
    _bold_best(rows, metrics, offset=1)
    return rows


def _parse_list(text: str) -> list[float]:
    if not text:
        return []
    try:
        vals = json.loads(text)
    except ValueError:
        return []
    return [math.nan if v is None else float(v) for v in vals] if isinstance(vals, list) else []


def _dynamics_rows(groups: list[Group], block: list[Group], spec: TableSpec, fmt: _Fmt) -> list[list]:
    metrics = [METRICS[c] for c in spec.columns]
    rows = []
    for g in groups:
        per_epoch: dict[float, dict[str, list[float]]] = {}
        for r in g.rows:
            epochs = _parse_list(r["dyn_epochs"])
            for m in metrics:
                for e, v in zip(epochs, _parse_list(r[m.key])):
                    per_epoch.setdefault(e, {k.key: [] for k in metrics})[m.key].append(v)
        label = _label(g, block, fmt)
        if not per_epoch:
            rows.append([label, "--" if fmt.tex else "-",
                         *[Stat(math.nan, math.nan, 0, m.decimals) for m in metrics]])
            continue
        for i, e in enumerate(sorted(per_epoch)):
            epoch = str(int(e)) if float(e).is_integer() else str(e)
            rows.append([label if i == 0 else "", epoch,
                         *[_stat(per_epoch[e][m.key], m.decimals) for m in metrics]])
    return rows


def build_table(df: pd.DataFrame, name: str, kind: str = "tex") -> dict:
    """The template context of one table (``kind`` "tex" or "md"); cells are final strings."""
    spec, fmt = _SPECS[name], _Fmt(kind)
    df = prepare(df)
    blocks = _blocks(df, spec.set_name)
    groups = [g for _, gs in blocks for g in gs]
    notes = []
    if spec.name == "table2":
        notes.append(_protocol_note(groups, "probe_protocol", "Linear probe", fmt, PROBE_PROTOCOLS))
    if spec.name == "table6":
        notes.append(_protocol_note(groups, "bg_protocol", "Background probe", fmt))
    notes.append(_seed_caption(groups, fmt))
    metrics = [METRICS[c] for c in spec.columns]
    header = ["Method"] + (["Epoch"] if spec.kind == "dynamics" else []) + [fmt.header(m) for m in metrics]
    make_rows: Callable = _dynamics_rows if spec.kind == "dynamics" else _metric_rows
    out_blocks = []
    for dataset, gs in blocks:
        rows = make_rows(gs, gs, spec, fmt)
        out_blocks.append({"title": _block_title(dataset, gs, spec, fmt),
                           "rows": [[fmt.cell(c) for c in r] for r in rows]})
    caption = spec.caption if fmt.tex else spec.caption_md
    caption = " ".join([caption, *[n for n in notes if n]])
    ncols = len(header)
    return {"name": name, "number": name.removeprefix("table"), "caption": caption, "header": header,
            "ncols": ncols, "colspec": "l" + "c" * (ncols - 1), "blocks": out_blocks,
            "align": [":---"] + ["---:"] * (ncols - 1)}


@functools.lru_cache(maxsize=1)  # one Environment caches the compiled templates
def _environment() -> jinja2.Environment:
    # LaTeX-friendly delimiters: "{{" / "{%" clash with TeX braces; the same env serves Markdown.
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)),
        block_start_string="<%", block_end_string="%>",
        variable_start_string="<<", variable_end_string=">>",
        comment_start_string="<#", comment_end_string="#>",
        trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined, autoescape=False)


def render_table(df: pd.DataFrame, name: str, kind: str = "tex") -> str:
    """One table as text; a template ``<name>.<kind>.j2`` overrides the generic ``table.<kind>.j2``."""
    env = _environment()
    template = env.select_template([f"{name}.{kind}.j2", f"table.{kind}.j2"])
    return template.render(**build_table(df, name, kind))


def render_tables(df: pd.DataFrame, out_dir: str | os.PathLike) -> list[Path]:
    """Write table1..7 .tex and .md into ``out_dir`` (atomically); returns the paths written."""
    out = Path(out_dir)
    df = prepare(df)
    written = []
    for spec in TABLES:
        for kind in ("tex", "md"):
            written.append(atomic_write_text(out / f"{spec.name}.{kind}", render_table(df, spec.name, kind)))
    return written
