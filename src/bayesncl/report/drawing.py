"""How the report draws a figure: the rc settings, the canvas (matplotlib's Agg, no pyplot), a mean line with
its std band or error bars, colours, titles that name the values held fixed, one legend per figure, and saving
with the provenance stamp in the metadata (no creation date: the same data gives the same bytes).
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ..core.atomic import atomic_path
from .lines import seeds_text
from .names import ARCH_NAMES, DATASET_NAMES

__all__ = ["BAND_ALPHA", "RC", "arch_text", "chars_across", "dataset_name", "draw", "fmt_value", "legend", "line_colors",
           "new_figure", "no_runs", "save_figure", "suptitle"]

RC = {"font.size": 8, "axes.titlesize": 8.5, "axes.labelsize": 8, "legend.fontsize": 7,
      "figure.titlesize": 9.5, "figure.dpi": 100, "savefig.dpi": 150, "lines.linewidth": 1.4,
      "lines.markersize": 4}
BAND_ALPHA = 0.2




def draw(ax, pts, color, label, xmap=lambda v: v, linestyle="-", marker="o"):
    """A mean line with a +-std band where a point has two or more seeds; returns the line."""
    xv = [xmap(p[0]) for p in pts]
    mv, sv, nv = (np.array([p[i] for p in pts], dtype=float) for i in (1, 2, 3))
    (line,) = ax.plot(xv, mv, color=color, marker=marker, linestyle=linestyle,
                      label=f"{label} ({seeds_text(nv)})")
    # Bands over runs of consecutive points with two or more seeds; a lone seeded point gets an error bar.
    lone = []
    for run in np.split(np.arange(len(nv)), np.flatnonzero(np.diff(nv > 1)) + 1):
        if nv[run[0]] <= 1:
            continue
        if len(run) == 1:
            lone.append(run[0])
        else:
            ax.fill_between([xv[i] for i in run], mv[run] - sv[run], mv[run] + sv[run], color=color,
                            alpha=BAND_ALPHA, linewidth=0)
    if lone:
        ax.errorbar([xv[i] for i in lone], mv[lone], yerr=sv[lone], color=color, linestyle="none",
                    capsize=2.5, elinewidth=1)
    return line


def line_colors(labels) -> dict[str, tuple]:
    from matplotlib import colormaps
    cmap = colormaps["tab10"]
    return {lab: cmap(i % 10) for i, lab in enumerate(dict.fromkeys(labels))}


def no_runs(ax, text: str = "no runs", note: str = "") -> None:
    """An empty panel says so, and why where its set's `note` says (a panel is about 40 characters wide)."""
    if note:
        import textwrap

        text += "\n\n" + textwrap.fill(note, 40)
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="0.4")


def new_figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def chars_across(fig, fontsize: float) -> int:
    """About how many characters of ``fontsize`` fit across the figure (0.6 em a character: the sans-serif
    default's mixed text runs at about 0.55)."""
    return max(20, int(fig.get_figwidth() * 72 / (0.6 * fontsize)))


def suptitle(fig, title: str, fixed: list[str]) -> None:
    """Title, then the values held fixed, each wrapped to the figure's width."""
    size = RC["figure.titlesize"]
    lines = textwrap.wrap(title, chars_across(fig, size))
    for part in fixed:
        lines += textwrap.wrap(part, chars_across(fig, size))
    fig.suptitle("\n".join(lines))


def legend(fig, axes) -> None:
    """One legend for the whole figure, below the panels, one entry per label."""
    entries: dict[str, object] = {}
    for ax in np.ravel(axes):
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if not lab.startswith("_"):
                entries.setdefault(lab, h)
    if entries:
        # Columns as wide as the longest label (+ handle) allow, so no entry runs off the figure.
        per_col = max(len(lab) for lab in entries) + 6
        ncols = max(1, min(len(entries), chars_across(fig, RC["legend.fontsize"]) // per_col))
        fig.legend(list(entries.values()), list(entries), loc="outside lower center", ncols=ncols,
                   frameon=False)


def fmt_value(v: float) -> str:
    """3e-5, not 3e-05 or 0.00003; 0.8 stays 0.8."""
    if not math.isfinite(v):
        return "?"
    if v and abs(v) < 1e-2:
        return np.format_float_scientific(v, trim="-", exp_digits=1)
    return f"{v:g}"


def dataset_name(ds: str) -> str:
    return DATASET_NAMES.get(ds, ds) or "(no dataset)"


def arch_text(rows: pd.DataFrame) -> str:
    archs = [ARCH_NAMES.get(a, a) for a in dict.fromkeys(rows["arch"]) if a]
    return "/".join(archs)


def save_figure(fig: Figure, out_dir: Path, stem: str, formats: tuple[str, ...], stamp: str | None = None) -> list[Path]:
    """Save ``fig`` in each format; ``stamp`` (provenance.stamp: commit and grid) goes into the metadata."""
    paths = []
    for ext in formats:
        meta = None
        if ext == "pdf":  # no timestamp: reproducible bytes
            meta = {"CreationDate": None, **({"Subject": stamp} if stamp else {})}
        elif ext == "png" and stamp:
            meta = {"Comment": stamp}
        path = out_dir / f"{stem}.{ext}"
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=ext, metadata=meta)
        paths.append(path)
    return paths
