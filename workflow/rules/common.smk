# Grid expansion: config -> distinct runs (bayesncl.grid); everything the rules need is derived here.
import json
import os

from snakemake.utils import validate

from bayesncl.config import ConfigError
from bayesncl.grid import check_workflow_config, evaluation_sections, expand_grid
from bayesncl.report.atlas import atlas_runs


validate(config, workflow.source_path("../schemas/config.schema.yaml"))
try:
    check_workflow_config(config)
    RUNS = expand_grid(config)
except ConfigError as e:
    raise WorkflowError(f"invalid workflow config: {e}")

RESULTS = config["results"]
TABLE_NAMES = [f"table{i}" for i in range(1, 8)] + ["claims"]
FIGURE_NAMES = ["figure3", "figure4a", "figure4b", "gates"]
TABLES = expand(f"{RESULTS}/tables/{{name}}.{{ext}}", name=TABLE_NAMES, ext=["tex", "md"])
FIGURES = expand(f"{RESULTS}/figures/{{name}}.{{ext}}", name=FIGURE_NAMES, ext=["pdf", "png"])
ATLAS_RUNS = atlas_runs(RUNS)  # {dataset: [NCL run, BayesNCL (STE) run]}, rules/atlas.smk
ATLAS = expand(f"{RESULTS}/figures/atlas_{{ds}}.{{ext}}", ds=list(ATLAS_RUNS), ext=["pdf", "png"])
METRICS = [f"{RESULTS}/runs/{rid}/eval/metrics.json" for rid in RUNS]


wildcard_constraints:
    run="[^/].*?",


def run_config_text(wildcards):
    return json.dumps(RUNS[wildcards.run].config, sort_keys=True)


def run_sections(wildcards):
    return " ".join(evaluation_sections(RUNS[wildcards.run]))


def manifest():
    return [
        {
            "metrics": f"{RESULTS}/runs/{rid}/eval/metrics.json",
            "sets": run.sets,
            "variant": run.variant,
            "sweep": run.sweeps,
        }
        for rid, run in RUNS.items()
    ]
