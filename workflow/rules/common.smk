# Grid expansion: config -> distinct runs (bayesncl.grid); everything the rules need is derived here.
import json
import os
import shlex
import sys

from snakemake.utils import validate

from bayesncl.errors import ConfigError
from bayesncl.grid import evaluation_sections, expand_grid, smoke_results
from bayesncl.report.atlas import atlas_runs
from bayesncl.wfconfig import check_workflow_config, coerce_smoke


def config_error(e):
    """A bad workflow config: one line naming the key, what is wrong and the fix; exit 2 before any job."""
    print(f"invalid workflow config: {e}", file=sys.stderr)
    sys.exit(2)


coerce_smoke(config)  # `--config smoke=true` arrives as a string
try:  # the schema, reported in one line (Snakemake's validate would print the schema)
    check_workflow_config(config, workflow.source_path("../schemas/config.schema.yaml"),
                          " or ".join(map(str, workflow.overwrite_configfiles or [])) or "the workflow config")
except ConfigError as e:
    config_error(e)
validate(config, workflow.source_path("../schemas/config.schema.yaml"))  # passes now; sets the defaults
# The smoke switch (`--config smoke=true`): every job of the grid shrunk (bayesncl.grid.SMOKE) into
# <results>-smoke, its tables marked as a smoke run. Rewritten here, so summarize (given `config`) agrees.
SMOKE = bool(config.get("smoke"))
if SMOKE:
    config["results"] = smoke_results(config["results"])
try:
    RUNS = expand_grid(config)
    for note in (n for run in RUNS.values() for n in run.notes):
        print(f"warning: {note}", file=sys.stderr)
    EVAL_SECTIONS = {rid: evaluation_sections(run) for rid, run in RUNS.items()}
except ConfigError as e:
    config_error(e)

RESULTS = config["results"]
BENCHMARKS = f"{RESULTS}/benchmarks"  # each job's wall time and memory (`benchmark:`), summary/jobs.csv
# The extended benchmark record also names the rule, the wildcards and the resources a job was given (its GPUs,
# for the GPU-hours as run): what `bayesncl jobs` reads. Snakemake's --benchmark-extended, set for every run.
try:
    workflow.output_settings.benchmark_extended = True
except AttributeError:  # a Snakemake without it: jobs.csv then has no GPUs (NA)
    pass
TABLE_NAMES = [f"table{i}" for i in range(1, 8)] + ["claims"]
FIGURE_NAMES = ["figure3", "figure4a", "figure4b", "gates", "sc_training"]
TABLES = expand(f"{RESULTS}/tables/{{name}}.{{ext}}", name=TABLE_NAMES, ext=["tex", "md"])
FIGURES = expand(f"{RESULTS}/figures/{{name}}.{{ext}}", name=FIGURE_NAMES, ext=["pdf", "png"])
ATLAS_RUNS = atlas_runs(RUNS)  # {dataset: [NCL run, BayesNCL (STE) run]}, rules/atlas.smk
ATLAS = expand(f"{RESULTS}/figures/atlas_{{ds}}.{{ext}}", ds=list(ATLAS_RUNS), ext=["pdf", "png"])
EVAL_OUTPUTS = [f"{RESULTS}/runs/{rid}/eval/{name}.json" for rid, names in EVAL_SECTIONS.items() for name in names]
JOBS = [f"{RESULTS}/summary/jobs.csv", f"{RESULTS}/summary/jobs.md"]


wildcard_constraints:
    run="[^/].*?",


def run_config_text(wildcards):
    """What pretraining needs: the run config without eval.* (evaluation options never retrain a run)."""
    cfg = {k: v for k, v in RUNS[wildcards.run].config.items() if k != "eval"}
    return json.dumps(cfg, sort_keys=True)


def evaluate_command(section):
    """`bayesncl evaluate --only <section>` on a run, with the grid's eval.* and data.* settings."""

    def command(wildcards):
        cfg = RUNS[wildcards.run].config
        model, out = f"{RESULTS}/runs/{wildcards.run}/model.pt", f"{RESULTS}/runs/{wildcards.run}/eval"
        settings = json.dumps({"eval": cfg["eval"], "data": cfg["data"]}, sort_keys=True)
        return (f"bayesncl evaluate --checkpoint {shlex.quote(model)} --out {shlex.quote(out)} --only {section} "
                f"--config-json {shlex.quote(settings)} --quiet")

    return command


def preflight(todo, dry_run):
    """Every dataset root a run still to be done reads must pass its check (bayesncl.preflight): one line per
    bad root; it ends Snakemake (exit 2) before any job is queued, and a dry run reports and still plans."""
    from bayesncl.preflight import missing_data

    where = " or ".join(map(str, workflow.overwrite_configfiles or [])) or "the workflow config"
    problems = missing_data(config, RUNS, todo, where)
    for line in problems:
        print(f"pre-flight{' (dry run)' if dry_run else ''}: {line}", file=sys.stderr)
    if problems and not dry_run:
        sys.exit(2)


if workflow.is_main_process and workflow.output_settings.dryrun:  # no DAG to ask yet: judge by the files
    from bayesncl.preflight import todo_from_files

    preflight(todo_from_files(RUNS, EVAL_SECTIONS, RESULTS, ATLAS_RUNS), dry_run=True)


onstart:
    # The DAG is built and nothing is queued yet: what it plans to run is what needs data.
    if not workflow.touch:
        todo = {rid: set() for rid in RUNS}
        for job in workflow.dag.needrun_jobs():
            if "run" in job.wildcards.keys() and job.wildcards.run in todo:
                todo[job.wildcards.run].add(job.rule.name)
            elif job.rule.name == "atlas":
                for rid in ATLAS_RUNS[job.wildcards.dataset]:
                    todo[rid].add("atlas")
        preflight(todo, dry_run=False)
