# Grid expansion: config -> distinct runs (bayesncl.grid); everything the rules need is derived here.
import json
import os
import shlex
import sys

from snakemake.utils import validate

from bayesncl.errors import ConfigError
from bayesncl.grid import evaluation_sections, expand_grid
from bayesncl.report.atlas import atlas_runs


validate(config, workflow.source_path("../schemas/config.schema.yaml"))
try:
    RUNS = expand_grid(config)
    for note in (n for run in RUNS.values() for n in run.notes):
        print(f"warning: {note}", file=sys.stderr)
    EVAL_SECTIONS = {rid: evaluation_sections(run) for rid, run in RUNS.items()}
except ConfigError as e:
    raise WorkflowError(f"invalid workflow config: {e}")

RESULTS = config["results"]
TABLE_NAMES = [f"table{i}" for i in range(1, 8)] + ["claims"]
FIGURE_NAMES = ["figure3", "figure4a", "figure4b", "gates", "sc_training"]
TABLES = expand(f"{RESULTS}/tables/{{name}}.{{ext}}", name=TABLE_NAMES, ext=["tex", "md"])
FIGURES = expand(f"{RESULTS}/figures/{{name}}.{{ext}}", name=FIGURE_NAMES, ext=["pdf", "png"])
ATLAS_RUNS = atlas_runs(RUNS)  # {dataset: [NCL run, BayesNCL (STE) run]}, rules/atlas.smk
ATLAS = expand(f"{RESULTS}/figures/atlas_{{ds}}.{{ext}}", ds=list(ATLAS_RUNS), ext=["pdf", "png"])
EVAL_OUTPUTS = [f"{RESULTS}/runs/{rid}/eval/{name}.json" for rid, names in EVAL_SECTIONS.items() for name in names]


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
