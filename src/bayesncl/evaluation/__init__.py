"""Evaluation: the measures of docs/METHOD.md sections 4-7 and the sections that apply them to a run.

    arrays                    the interpretability and retrieval measures, on NumPy arrays (the one
                              implementation: sections, pretraining's dynamics and the atlas use it)
    linear                    the fast linear probe in NumPy
    probe, dynamics, cost     the torch probe, the gradient-dynamics recorder pretraining uses, cost counts
    sections                                    the registry SECTIONS: one workflow job per section
    runner                                      evaluate(checkpoint, out, only=...): runs sections, writes JSON

This file imports nothing, so pretraining can use the measures without loading the sections above them.
"""
