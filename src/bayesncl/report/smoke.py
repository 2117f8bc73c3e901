"""Marks on a smoke run's tables (workflow config `smoke: true`), so that none is taken for a result."""

from __future__ import annotations

from pathlib import Path

from ..atomic import atomic_write_text

__all__ = ["NOTE", "mark_tables"]

NOTE = ("SMOKE RUN: every job of the grid shrunk (1 epoch of 2 steps, a 1-epoch probe, 256-image evaluation "
        "subsets) to test that it runs; these numbers are not results")


def mark_tables(tables: str | Path) -> list[Path]:
    """Put NOTE at the top of every table in `tables` (.md: a quote line; .tex: a comment and a bold line)."""
    marked = []
    for path in sorted(Path(tables).glob("*.md")) + sorted(Path(tables).glob("*.tex")):
        text = path.read_text(encoding="utf-8")
        if "SMOKE RUN" in text.split("\n", 2)[0]:
            continue
        head = (f"> **{NOTE}**\n\n" if path.suffix == ".md"
                else f"% {NOTE}\n\\noindent\\textbf{{SMOKE RUN: not results}}\\par\n")
        atomic_write_text(path, head + text)
        marked.append(path)
    return marked
