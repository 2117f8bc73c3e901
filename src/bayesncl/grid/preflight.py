"""The workflow's pre-flight: before Snakemake queues a job, check every dataset root that a run still to be
trained or evaluated will read (workflow/rules/common.smk: once the DAG is built, from the jobs it plans; in a
dry run, from the outputs that exist; and, as the workflow is read, every root of the grid: where one fails, the
workflow holds Snakemake's lines back until the DAG has said whether it is needed, so that a refusal is all it
prints).

A run reads its dataset's images when it is pretrained, when its features are embedded, in the
paper-protocol probe (sections that run the network: Section.gpu) and for its dataset's atlas; Waterbirds in
the background probe. A run whose outputs exist reads nothing, so moving the data away never blocks
re-rendering the tables. The checks are the cheap ones training starts with (bayesncl.data.check_data), and, for
a dataset whose prepared copy is still to be made, its images read through (DatasetSpec.verify: an undecodable
image found before any job). The hint to set the root is added where the root may be wrong, never to a message
about what a right folder holds (errors.LayoutError), which names its own fix.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..settings.registry import BACKGROUND_PROBE, DATASETS
from ..core.errors import DataError, LayoutError
from ..evaluation.sections import SECTIONS
from ..runs.files import EVAL
from .expand import Run

__all__ = ["missing_data", "todo_from_files", "todo_from_jobs"]


def _key(wf: dict, section: str, field: str, value) -> str:
    """The workflow config key that set `section.field` to `value` (a dataset block, else the defaults)."""
    for name, block in wf.get("datasets", {}).items():
        if (block.get(section) or {}).get(field) == value:
            return f"datasets.{name}.{section}.{field}"
    return f"defaults.{section}.{field}"


def _reads(run: Run, todo: set[str]) -> tuple[bool, bool]:
    """(reads its dataset, reads Waterbirds) for the jobs still to be done in this run: "pretrain", "atlas" (its
    dataset's atlas shows test images) and evaluation sections."""
    cfg = run.config
    dataset = bool(todo & {"pretrain", "atlas"}) or any(
        SECTIONS[s].gpu(cfg) for s in todo if s in SECTIONS and s != "background_probe")
    waterbirds = "background_probe" in todo and bool(cfg["eval"]["waterbirds_root"])
    return dataset, waterbirds


def todo_from_files(runs: dict[str, Run], results: str | Path, atlas: dict[str, list[str]],
                    wf: dict | None = None) -> dict[str, set[str]]:
    """What is still to be done per run, judged by which outputs exist (a dry run has no DAG to ask): the jobs
    bayesncl.grid.stale plans from the files alone ("pretrain", the evaluation sections, the jobs after them), and
    "atlas" for the runs of each dataset's atlas to be drawn."""
    from .stale import planned_jobs

    todo: dict[str, set[str]] = {rid: set() for rid in runs}
    # by the files: all planned; a run's evaluation as the grid (`wf`) runs it, one job per section or per run
    for job in planned_jobs(wf or {}, results, atlas=atlas, compare=False, runs=runs):
        if job.target in todo:
            todo[job.target].update((job.rule, *job.sections))
        elif job.rule == "atlas":
            for rid in atlas[job.target]:
                todo[rid].add("atlas")
    return todo


def missing_data(wf: dict, runs: dict[str, Run], todo: dict[str, set[str]], where: str = "the workflow config",
                 checked: dict | None = None) -> list[str]:
    """One line per dataset root that a run still to be done needs and that fails its check: the dataset,
    the workflow config key that set the root, what is wrong, and the fix. `todo`: run id -> the jobs still
    to be done ("pretrain", "atlas", section names). `checked`: what each root's check found, kept across calls
    (a root is read through once per process)."""
    checks: dict[tuple[str, str, str], str] = {}  # (what, key, root) -> a run that needs it
    for rid, jobs in todo.items():
        run = runs[rid]
        data = run.config["data"]
        reads, waterbirds = _reads(run, jobs)
        if reads and DATASETS[data["dataset"]].needs_root:
            checks.setdefault((data["dataset"], _key(wf, "data", "root", data["root"]), data["root"]), rid)
        if waterbirds:
            root = run.config["eval"]["waterbirds_root"]
            checks.setdefault((BACKGROUND_PROBE, _key(wf, "eval", "waterbirds_root", root), root), rid)
    if not checks:
        return []
    checked = {} if checked is None else checked
    problems = []
    for (what, key, root), rid in checks.items():
        data = runs[rid].config["data"]
        data = {**data, "dataset": what, "root": root} if what == BACKGROUND_PROBE else data
        seen = (what, json.dumps(data, sort_keys=True, default=str))
        if seen not in checked:
            checked[seen] = _check(what, data)
        e = checked[seen]
        if e is not None:
            fix = "" if isinstance(e, LayoutError) else f". Fix: set {key} in {where} to the folder that holds it"
            problems.append(f"{what} ({key}: {root}): {e}{fix} (needed by {rid} and any other run still to be done)")
    return problems


def _check(what: str, data: dict) -> DataError | None:
    """What is wrong with a dataset's root for these data settings, or None: the cheap checks, and every image read
    through where its prepared copy is still to be made."""
    from ..data import check_data  # torch: only where a real dataset is to be read

    try:
        check_data(data)
        spec = DATASETS[what]
        made = spec.manifests(data)
        if spec.verify is not None and not (made and all(Path(m).is_file() for m in made)):
            spec.verifier()(data)  # its prepared copy is still to be made: every image read once, here
    except DataError as e:
        return e
    return None


def todo_from_jobs(jobs, runs: dict[str, Run], atlas: dict[str, list[str]]) -> dict[str, set[str]]:
    """What is still to be done per run, from the jobs Snakemake's DAG plans (each with `.rule.name`, `.wildcards` and
    `.output`): a run's own jobs by their rule, and the sections of a job that runs several (its eval/<section>.json
    outputs: a run's evaluation on one machine); an atlas job for each run its figure reads."""
    todo: dict[str, set[str]] = {rid: set() for rid in runs}
    for job in jobs:
        wildcards = dict(job.wildcards.items())
        if wildcards.get("run") in todo:
            todo[wildcards["run"]].add(job.rule.name)
            todo[wildcards["run"]].update(p.stem for p in map(Path, getattr(job, "output", ()))
                                          if p.parent.name == EVAL and p.suffix == ".json" and p.stem in SECTIONS)
        elif job.rule.name == "atlas":
            for rid in atlas[wildcards["dataset"]]:
                todo[rid].add("atlas")
    return todo
