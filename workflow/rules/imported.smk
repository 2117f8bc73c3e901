# The workflow config's `imported:` checkpoints (bayesncl.grid.expand.imported_runs): their model.pt is imported from
# the released code's checkpoint, never trained; evaluation and the report then read it as any run's.
import json
import os
import re

from_common("IMPORTED", "RESULTS", "benchmark_file", "launch")


ruleorder: import_weights > pretrain


rule import_weights:
    input:
        ckpt=lambda wc: IMPORTED[wc.run]["checkpoint"],
        args=lambda wc: [IMPORTED[wc.run]["args"]] if IMPORTED[wc.run]["args"] else [],
    output:
        f"{RESULTS}/runs/{{run}}/model.pt",
    log:
        f"{RESULTS}/runs/{{run}}/import.log",
    benchmark:
        benchmark_file("import_weights", "run")
    wildcard_constraints:
        run="|".join(re.escape(rid) for rid in IMPORTED) or "(?!)",  # only the imported runs
    params:
        # the run config the grid gave the run (derived: takes output); the trigger is the checkpoint's hash
        config=lambda wc, output: json.dumps(IMPORTED[wc.run]["config"], sort_keys=True),
        trigger=lambda wc: IMPORTED[wc.run]["sha256"],
        args=lambda wc, input: f"--args {input.args}" if input.args else "",
        out=lambda wc, output: os.path.dirname(output[0]),
        launch=launch("import_weights", "run"),
    threads: 1
    localrule: True
    conda:
        "../envs/bayesncl.yaml"
    shell:
        "{params.launch}bayesncl import --checkpoint {input.ckpt:q} {params.args} --out {params.out} "
        "--config-json {params.config:q} > {log} 2>&1"
