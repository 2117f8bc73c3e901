"""Figures 3, 4a and 4b (PDF + PNG) from the runs summary.

- figure3: retrieval P@10 against the number of kept dimensions K (``ret_curve``), one line per
  variant, one panel per dataset (set ``figure3``); ``cl`` rows are skipped (no retrieval for SimCLR).
- figure4a: latent width D (``proj_dim``) against SC and against linear-probe top-1 (set ``figure4a``).
- figure4b: sensitivity of SC and top-1 to rho and to lambda (set ``figure4b``). A row belongs to the
  rho sweep when its ``sweep`` hint is "rho", or, without a hint, when its lambda equals the set's most
  common lambda (and the other way round); the base point (both at the most common value) is in both.
  lambda uses a symlog axis so that lambda = 0 is drawn.

Points are means over seeds, error bars the sample std (none with a single seed). Lines are keyed by
everything except the swept parameter and the seed, so variant names that encode the swept value do
not split a line. Uses matplotlib's Agg canvas directly (no pyplot, no global backend switch); PDFs
carry no creation date, so the same data gives the same bytes.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib import rc_context
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ..atomic import atomic_path
from .summary import METHOD_NAMES, prepare
from .tables import ARCH_NAMES, DATASET_NAMES

__all__ = ["render_figures", "sweep_rows"]

_RC = {"font.size": 8, "axes.titlesize": 9, "axes.labelsize": 8, "legend.fontsize": 7,
       "figure.dpi": 100, "savefig.dpi": 150, "lines.linewidth": 1.4, "lines.markersize": 4}


def _in_set(df: pd.DataFrame, name: str) -> pd.DataFrame:
    return df[_mask(df, [name in s.split(";") for s in df["sets"]])]


def _mask(df: pd.DataFrame, keep: list[bool]) -> pd.Series:
    # A boolean Series, not a list: an empty list would select columns instead of rows.
    return pd.Series(keep, index=df.index, dtype=bool)


def _k(value):
    # Grouping key for a value that may be NaN (NaN != NaN would split every group).
    return None if isinstance(value, float) and math.isnan(value) else value


def _mean_std(values) -> tuple[float, float]:
    vals = np.asarray([v for v in values if math.isfinite(v)], dtype=float)
    if vals.size == 0:
        return math.nan, math.nan
    return float(vals.mean()), (float(vals.std(ddof=1)) if vals.size > 1 else 0.0)


def _lines(rows: pd.DataFrame, x: str, multi_dataset: bool) -> list[tuple[str, pd.DataFrame]]:
    """Split rows into lines keyed by every config field except ``x`` and the seed."""
    fields = [f for f in ("dataset", "arch", "method", "gate", "detach", "head_depth",
                          "rho", "lambda", "proj_dim") if f != x]
    out: dict[tuple, list[int]] = {}
    for i, rec in zip(rows.index, rows.to_dict("records")):
        out.setdefault(tuple(_k(rec[f]) for f in fields), []).append(i)
    lines = []
    for idx in out.values():
        part = rows.loc[idx]
        variants = list(dict.fromkeys(part["variant"]))
        rec = part.iloc[0]
        label = variants[0] if len(variants) == 1 else METHOD_NAMES.get(rec["method"], rec["method"])
        if multi_dataset:
            label += f" ({DATASET_NAMES.get(rec['dataset'], rec['dataset'])})"
        lines.append((label, part))
    return lines


def _plot_line(ax, part: pd.DataFrame, x: str, y: str, label: str, color) -> None:
    xs = sorted({v for v in part[x] if math.isfinite(v)})
    stats = [_mean_std(part.loc[part[x] == v, y]) for v in xs]
    pts = [(v, m, s) for v, (m, s) in zip(xs, stats) if math.isfinite(m)]
    if not pts:
        return
    xv, mv, sv = map(list, zip(*pts))
    ax.errorbar(xv, mv, yerr=sv, label=label, color=color, marker="o", capsize=2)


def _no_runs(ax, text: str = "no runs") -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="0.4")


def _colors(labels: list[str]) -> dict[str, tuple]:
    from matplotlib import colormaps
    cmap = colormaps["tab10"]
    return {lab: cmap(i % 10) for i, lab in enumerate(dict.fromkeys(labels))}


def _save(fig: Figure, out_dir: Path, stem: str, formats: tuple[str, ...]) -> list[Path]:
    paths = []
    for ext in formats:
        meta = {"CreationDate": None} if ext == "pdf" else None  # no timestamp: reproducible bytes
        path = out_dir / f"{stem}.{ext}"
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=ext, metadata=meta)  # layout: tight_layout, not a 2nd draw
        paths.append(path)
    return paths


def _curve(text: str) -> dict:
    try:
        curve = json.loads(text) if text else {}
    except ValueError:
        return {}
    return curve if isinstance(curve, dict) else {}


def _figure3(df: pd.DataFrame) -> Figure:
    rows = _in_set(df, "figure3")
    rows = rows[_mask(rows, [m != "cl" for m in rows["method"]])]  # retrieval not reported for SimCLR
    datasets = list(dict.fromkeys(rows["dataset"])) or [""]
    fig = Figure(figsize=(3.2 * len(datasets), 2.6))
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(datasets), squeeze=False)[0]
    groups = list(dict.fromkeys(zip(rows["arch"], rows["variant"])))
    multi_arch = len({a for a, _ in groups}) > 1
    colors = _colors([v for _, v in groups])
    for ax, ds in zip(axes, datasets):
        part = rows[rows["dataset"] == ds]
        ax.set_title(DATASET_NAMES.get(ds, ds) or "figure3")
        ax.set_xlabel("K (kept dimensions)")
        ax.set_ylabel("P@10")
        all_ks: set[int] = set()
        for arch, variant in dict.fromkeys(zip(part["arch"], part["variant"])):
            sub = part[(part["arch"] == arch) & (part["variant"] == variant)]
            per_k: dict[int, list[float]] = {}
            for text in sub["ret_curve"]:
                for k, v in _curve(text).items():
                    per_k.setdefault(int(float(k)), []).append(math.nan if v is None else float(v))
            pts = [(k, *_mean_std(per_k[k])) for k in sorted(per_k)]
            pts = [p for p in pts if math.isfinite(p[1])]
            if not pts:
                continue
            ks, ms, ss = map(list, zip(*pts))
            label = variant + (f" ({ARCH_NAMES.get(arch, arch)})" if multi_arch else "")
            ax.errorbar(ks, ms, yerr=ss, label=label, color=colors[variant], marker="o", capsize=2)
            all_ks.update(ks)
        if all_ks:
            ax.set_xscale("log", base=2)
            ax.set_xticks(sorted(all_ks), [str(k) for k in sorted(all_ks)])
            ax.legend(frameon=False)
        else:
            _no_runs(ax)
    return fig


def _figure4a(df: pd.DataFrame) -> Figure:
    rows = _in_set(df, "figure4a")
    fig = Figure(figsize=(6.4, 2.6))
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 2, squeeze=False)[0]
    lines = _lines(rows, "proj_dim", rows["dataset"].nunique() > 1)
    colors = _colors([lab for lab, _ in lines])
    widths = sorted({int(v) for v in rows["proj_dim"] if math.isfinite(v)})
    for ax, (y, ylabel) in zip(axes, (("sc", "SC"), ("probe_top1", "linear probe top-1"))):
        ax.set_xlabel("latent width D")
        ax.set_ylabel(ylabel)
        for label, part in lines:
            _plot_line(ax, part, "proj_dim", y, label, colors[label])
        if widths:
            ax.set_xscale("log", base=2)
            ax.set_xticks(widths, [str(w) for w in widths])
        if ax.lines:
            ax.legend(frameon=False)
        else:
            _no_runs(ax)
    return fig


def _mode(values) -> float:
    vals = [v for v in values if math.isfinite(v)]
    if not vals:
        return math.nan
    counts = Counter(vals)
    return max(counts, key=lambda v: (counts[v], -v))  # ties: the smaller value, deterministically


def sweep_rows(rows: pd.DataFrame, param: str) -> pd.DataFrame:
    """The rows of a figure4b set that belong to the ``param`` ("rho" or "lambda") sweep."""
    other = "lambda" if param == "rho" else "rho"
    base_p, base_o = _mode(rows[param]), _mode(rows[other])
    keep = []
    for rec in rows.to_dict("records"):
        at_base = rec[param] == base_p and rec[other] == base_o
        hints = set(str(rec["sweep"]).split(";")) if isinstance(rec["sweep"], str) and rec["sweep"] else set()
        if param in hints:
            keep.append(True)
        elif other in hints:
            keep.append(at_base)  # the other sweep's base point is also a point of this one
        elif not hints:
            keep.append(rec[other] == base_o)  # only `param` differs from the set's usual value
        else:
            keep.append(False)  # e.g. "width": belongs to figure 4a
    return rows[_mask(rows, keep)]


def _figure4b(df: pd.DataFrame) -> Figure:
    rows = _in_set(df, "figure4b")
    fig = Figure(figsize=(6.4, 4.8))
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, 2, squeeze=False)
    multi = rows["dataset"].nunique() > 1
    sweeps = {p: sweep_rows(rows, p) for p in ("rho", "lambda")}
    lines = {p: _lines(sweeps[p], p, multi) for p in sweeps}
    colors = _colors([lab for p in lines for lab, _ in lines[p]])
    for r, (y, ylabel) in enumerate((("sc", "SC"), ("probe_top1", "linear probe top-1"))):
        for c, param in enumerate(("rho", "lambda")):
            ax = axes[r][c]
            ax.set_xlabel(r"$\rho$ (prior keep rate)" if param == "rho" else r"$\lambda$ (KL weight)")
            ax.set_ylabel(ylabel)
            for label, part in lines[param]:
                _plot_line(ax, part, param, y, label, colors[label])
            xs = sorted({v for v in sweeps[param][param] if math.isfinite(v)})
            if param == "lambda" and xs:
                positive = [v for v in xs if v > 0]
                if positive and 0 in xs:  # log axis cannot show 0: linear within [0, min positive]
                    ax.set_xscale("symlog", linthresh=min(positive), linscale=0.5)
                elif positive:
                    ax.set_xscale("log")
                ax.set_xticks(xs, [f"{v:g}" for v in xs], rotation=45)
                ax.minorticks_off()
            if ax.lines:
                ax.legend(frameon=False)
            else:
                _no_runs(ax)
    return fig


def render_figures(df: pd.DataFrame, out_dir: str | os.PathLike,
                   formats: tuple[str, ...] = ("pdf", "png")) -> list[Path]:
    """Write figure3, figure4a and figure4b (each in ``formats``) into ``out_dir``; returns the paths."""
    out = Path(out_dir)
    df = prepare(df)
    written = []
    with rc_context(_RC):
        for stem, make in (("figure3", _figure3), ("figure4a", _figure4a), ("figure4b", _figure4b)):
            fig = make(df)
            fig.tight_layout()
            written += _save(fig, out, stem, formats)
    return written
