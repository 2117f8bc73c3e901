"""Runs summary (runs.csv), LaTeX/Markdown tables and figures for the paper's Tables 1-7, Figures 3-4.

API:
    summarize(grid_config) -> DataFrame         one row per run of the workflow config's grid, read from
                                                its eval/ files (see summary.COLUMNS)
    write_summary(grid_config, out_csv)         the same, written atomically to CSV
    read_summary(csv_path) -> DataFrame         runs.csv back with stable dtypes
    render_tables(df, out_dir)                  table1..7 .tex/.md
    write_claims(df, out_dir)                   claims.tex/.md (docs/METHOD.md section 9)
Modules: names (shared labels and sets), cells (metrics, cell statistic, formats), groups (runs grouped per
table row / claim side), verdicts (the claims' statistics), tables (Tables 1-7, a table's context as text, the one
writer of table files), claims (the comparisons), claims_table (their table and the terminal's outcome), figures
(with lines: the rows behind each line), plots, document, provenance, jobs, atlas, smoke.
    render_figures(df, out_dir)                 figure3, figure4a, figure4b, gates .pdf/.png
    write_report(summary_csv, out_root)         out_root/tables/* and out_root/figures/*, then prints the
                                                claims and the main comparison to the terminal
    write_document(summary_csv, results, ...)   the reproduction report: report.tex (-> report.pdf), the
                                                pages of Snakemake's HTML report, DVC plot data (document.py)
Every generated file carries ``provenance.stamp``: the commit and the grid config file(s) that made it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence, TextIO, Union

from .summary import COLUMNS, read_summary, summarize, write_summary

__all__ = ["COLUMNS", "read_summary", "render_figures", "render_tables", "summarize",
           "write_claims", "write_document", "write_report", "write_summary"]

# The grid config a report came from: one file, a grid and its overlays in order, or None (made by hand).
Grid = Union[str, os.PathLike, Sequence[Union[str, os.PathLike]], None]


def render_tables(df, out_dir, stamp=None, smoke=False):  # lazy: jinja2 is only needed for the report step
    from .tables import render_tables as _render
    return _render(df, out_dir, stamp, smoke)


def write_claims(df, out_dir, stamp=None, smoke=False, declared=()):
    from .claims_table import write_claims as _write
    return _write(df, out_dir, stamp, smoke, declared)


def render_figures(df, out_dir, formats=("pdf", "png"), stamp=None, notes=None):  # lazy: matplotlib is slow to import
    from .figures import render_figures as _render
    return _render(df, out_dir, formats, stamp, notes)


def write_document(summary_csv, results, grid=None, figures=(), overrides=None):
    from .document import write_document as _write
    return _write(summary_csv, results, grid, figures, overrides)


def grid_claims(grid: Grid) -> list:
    """The claims a report's workflow config declares (claims:), parsed for this report: judged beside the
    registered ones."""
    from .claims import declared_claims
    from .provenance import grid_config

    return declared_claims(grid_config(grid))


def set_notes(grid: Grid) -> dict[str, str]:
    """{set: its note} of a workflow config's sets (`sets.<name>.note`: why its figure has a panel without runs)."""
    from .provenance import grid_config

    sets = grid_config(grid).get("sets")
    return {name: str(spec["note"]) for name, spec in (sets if isinstance(sets, dict) else {}).items()
            if isinstance(spec, dict) and spec.get("note")}


def write_report(summary_csv: str | os.PathLike, out_root: str | os.PathLike, *, echo: bool = True,
                 stream: TextIO | None = None, grid: Grid = None,
                 smoke: bool = False) -> list[Path]:
    """Render every table into ``out_root/tables`` and every figure into ``out_root/figures``, each
    stamped with the commit and the grid config file(s) ``grid`` (provenance.stamp) and, with ``smoke``, each
    table marked as a smoke run's; then, with ``echo``, print the outcome (claims, main comparison) to
    ``stream`` (default: the current stdout)."""
    from .claims_table import print_outcome
    from .provenance import stamp

    df = read_summary(summary_csv)
    declared = grid_claims(grid)
    root = Path(out_root)
    made_by = stamp(grid)
    tables = (render_tables(df, root / "tables", made_by, smoke)
              + write_claims(df, root / "tables", made_by, smoke, declared))
    written = tables + render_figures(df, root / "figures", stamp=made_by, notes=set_notes(grid))
    if echo:
        print_outcome(df, stream, declared)
    return written
