"""Runs summary (runs.csv), LaTeX/Markdown tables and figures for the paper's Tables 1-7, Figures 3-4.

API:
    summarize(grid_config) -> DataFrame         one row per run of the workflow config's grid, read from
                                                its eval/ files (see summary.COLUMNS)
    write_summary(grid_config, out_csv)         the same, written atomically to CSV
    read_summary(csv_path) -> DataFrame         runs.csv back with stable dtypes
    render_tables(df, out_dir)                  table1..7 .tex/.md
    write_claims(df, out_dir)                   claims.tex/.md (docs/METHOD.md section 9)
    render_figures(df, out_dir)                 figure3, figure4a, figure4b, gates .pdf/.png
    write_report(summary_csv, out_root)         out_root/tables/* and out_root/figures/*, then prints the
                                                claims and the main comparison to the terminal
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TextIO

from .summary import COLUMNS, MetricsFileError, read_summary, summarize, write_summary

__all__ = ["COLUMNS", "MetricsFileError", "read_summary", "render_figures", "render_tables", "summarize",
           "write_claims", "write_report", "write_summary"]


def render_tables(df, out_dir):  # lazy: jinja2 is only needed for the report step
    from .tables import render_tables as _render
    return _render(df, out_dir)


def write_claims(df, out_dir):
    from .claims import write_claims as _write
    return _write(df, out_dir)


def render_figures(df, out_dir, formats=("pdf", "png")):  # lazy: matplotlib is slow to import
    from .figures import render_figures as _render
    return _render(df, out_dir, formats)


def write_report(summary_csv: str | os.PathLike, out_root: str | os.PathLike, *, echo: bool = True,
                 stream: TextIO | None = None) -> list[Path]:
    """Render every table into ``out_root/tables`` and every figure into ``out_root/figures``; then, with
    ``echo``, print the outcome (claims, main comparison) to ``stream`` (default: the current stdout)."""
    from .claims import print_outcome

    df = read_summary(summary_csv)
    root = Path(out_root)
    written = (render_tables(df, root / "tables") + write_claims(df, root / "tables")
               + render_figures(df, root / "figures"))
    if echo:
        print_outcome(df, stream)
    return written
