"""Evaluation: the jobs that apply the measures (bayesncl.measures) to a trained run, one workflow job per section.

    sections      the registry SECTIONS (`@section`): what each section computes, reads and needs
    context       Context: what a section reads (the run's config, model, cached features)
    probe         the paper protocol's linear probe, in torch
    runner        evaluate(checkpoint, out, only=...): runs sections, writes JSON
"""
