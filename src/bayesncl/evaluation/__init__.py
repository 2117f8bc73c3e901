"""Evaluation: the sections that apply the measures (bayesncl.measures) to a trained run (workflow jobs: one per section,
or one per run with the grid's evaluation_jobs: per_run; workflow/rules/evaluate.smk).

    sections      the registry SECTIONS (`@section`): what each section computes, reads and needs
    probe         the paper protocol's linear probe, in torch
    runner        evaluate(checkpoint, out, only=...): runs sections, writes JSON; Context: what a section reads
"""
