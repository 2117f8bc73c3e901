# One pretraining job per distinct run config (the config travels as JSON); what reruns it is its trigger
# (common.smk, pretrain_trigger).
import os

from_common("PREPARED_OF", "RESULTS", "benchmark_file", "launch", "pretrain_trigger", "run_config_text", "run_gpus")


rule pretrain:
    input:
        lambda wc: PREPARED_OF[wc.run],  # the prepared ImageNet-100 copy (common.smk, rule in prepare.smk)
    output:
        f"{RESULTS}/runs/{{run}}/model.pt",
    log:
        f"{RESULTS}/runs/{{run}}/pretrain.log",
    benchmark:
        benchmark_file("pretrain", "run")
    params:
        config=run_config_text,  # derived (takes output): not a rerun trigger
        trigger=pretrain_trigger,
        out=lambda wc, output: os.path.dirname(output[0]),
        launch=launch("pretrain", "run"),
    threads: 1
    # What one job of the paper grid needs (SLURM reads these; locally only `gpu` is enforced, see
    # common.smk). A preempted job resumes from its checkpoint (exit 75, retried).
    resources:
        gpu=run_gpus,
        cpus_per_gpu=8,
        mem_mb=64000,
        runtime=1440,
    conda:
        "../envs/bayesncl.yaml"
    shell:
        "{params.launch}bayesncl pretrain --config-json {params.config:q} --out {params.out} --quiet > {log} 2>&1"
