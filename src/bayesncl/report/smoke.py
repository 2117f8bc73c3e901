"""The mark on a smoke run's tables (workflow config `smoke: true`), so that none is taken for a result."""

from __future__ import annotations

__all__ = ["NOTE", "smoke_text"]

NOTE = ("SMOKE RUN: every job of the grid shrunk (1 epoch of 2 steps, a 1-epoch probe, 256-image evaluation "
        "subsets) to test that it runs; these numbers are not results")


def smoke_text(text: str, suffix: str) -> str:
    """``text`` of a table file (``suffix`` ".md": a quote line; ".tex": a comment and a bold line) with NOTE
    at its top."""
    head = (f"> **{NOTE}**\n\n" if suffix == ".md"
            else f"% {NOTE}\n\\noindent\\textbf{{SMOKE RUN: not results}}\\par\n")
    return head + text
