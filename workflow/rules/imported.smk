# The workflow config's `imported:` checkpoints (bayesncl.grid.imported_runs): their model.pt is imported from the
# released code's checkpoint, never trained; evaluation and the report then read it as any run's.
import json
import os
import re

from_common("IMPORTED", "RESULTS", "RUNS", "benchmark_file", "launch")


ruleorder: import_weights > pretrain


def import_inputs(wildcards):
    entry = IMPORTED[wildcards.run]
    return [entry["checkpoint"]] + ([entry["args"]] if entry["args"] else [])


def import_config_text(wildcards, output):
    """The run config the grid gave the run (derived: the trigger is the checkpoint's hash)."""
    return json.dumps(RUNS[wildcards.run].config, sort_keys=True)


rule import_weights:
    input:
        import_inputs,
    output:
        f"{RESULTS}/runs/{{run}}/model.pt",
    log:
        f"{RESULTS}/runs/{{run}}/import.log",
    benchmark:
        benchmark_file("import_weights", "run")
    wildcard_constraints:
        run="|".join(re.escape(rid) for rid in IMPORTED) or "(?!)",  # only the imported runs
    params:
        config=import_config_text,
        trigger=lambda wc: IMPORTED[wc.run]["sha256"],
        args=lambda wc: f"--args {IMPORTED[wc.run]['args']}" if IMPORTED[wc.run]["args"] else "",
        out=lambda wc, output: os.path.dirname(output[0]),
        launch=launch("import_weights", "run"),
    threads: 1
    localrule: True
    conda:
        "../envs/bayesncl.yaml"
    shell:
        "{params.launch}bayesncl import --checkpoint {input[0]:q} {params.args} --out {params.out} "
        "--config-json {params.config:q} > {log} 2>&1"
