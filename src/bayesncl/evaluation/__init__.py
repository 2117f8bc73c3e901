"""Evaluation: the measures of docs/METHOD.md sections 4-7 and the sections that apply them to a run.

    metrics, retrieval, probe, dynamics, cost   pure measures on tensors (and the recorders pretraining uses)
    arrays, linear                              the same measures in NumPy for the sections that read the
                                                features cache (interpretability, retrieval, the fast probes)
    sections                                    the registry SECTIONS: one workflow job per section
    runner                                      evaluate(checkpoint, out, only=...): runs sections, writes JSON

This file imports nothing, so pretraining can use the measures without loading the sections above them.
"""
