"""Evaluation: the measures of docs/METHOD.md sections 4-7 and the sections that apply them to a run.

    metrics, retrieval, probe, dynamics, cost   pure measures on tensors (and the recorders training uses)
    sections                                    the registry SECTIONS: one job per section, what each reads
    runner                                      `evaluate(checkpoint, out, only=...)`: runs sections, writes JSON
"""

from __future__ import annotations

from .sections import SECTIONS

__all__ = ["SECTIONS", "evaluate"]


def evaluate(*args, **kwargs):
    """See bayesncl.evaluation.runner.evaluate (imported on use: it loads torch)."""
    from .runner import evaluate as _evaluate

    return _evaluate(*args, **kwargs)
