# One pretraining job per distinct run config (the config travels as JSON); what reruns it is its trigger
# (common.smk, pretrain_trigger). On a cluster, a run of train.epochs 0 (an untrained twin: it only saves its
# initialisation) is a job of its evaluation submission (group eval_<run>), not a submission of its own.
import os
import shlex

from_common("PREPARED_OF", "RESULTS", "STOP_MARGIN_S", "benchmark_file", "launch", "pretrain_group",
            "pretrain_minutes", "pretrain_trigger", "run_config_text", "run_gpus", "run_gres", "within_allocation")


rule pretrain:
    input:
        lambda wc: PREPARED_OF[wc.run],  # the prepared ImageNet-100 copy (common.smk, rule in prepare.smk)
    output:
        f"{RESULTS}/runs/{{run}}/model.pt",
    log:
        f"{RESULTS}/runs/{{run}}/pretrain.log",
    benchmark:
        benchmark_file("pretrain", "run")
    group:
        pretrain_group  # an untrained twin's initialisation: in its evaluation submission (common.smk)
    params:
        config=run_config_text,  # derived (takes output): not a rerun trigger
        trigger=pretrain_trigger,
        # derived (takes output): the run's own folder, replaced whole where it holds a run of another config or
        # plugin code (what reran this job: bayesncl.runs.ownership), resumed where it holds this run's checkpoint
        out=lambda wc, output: f"{shlex.quote(os.path.dirname(output[0]))} --replace",
        launch=launch("pretrain", "run"),
        allocation=within_allocation,
    threads: 1
    # What one job of the paper grid needs (SLURM reads these; locally only `gpu` is enforced, see
    # common.smk). Its time request comes from bayesncl.planning.time_requests, at most the partition's limit
    # (common.smk, pretrain_minutes), its CPUs per GPU from the profile (slurm/config.yaml); a run longer than one
    # allocation stops stop_margin_s before its end, checkpoints and requeues its job (common.smk, within_allocation); a
    # preempted one resumes from its checkpoint.
    resources:
        gpu=run_gpus,
        gres=run_gres,
        mem_mb=64000,
        stop_margin_s=STOP_MARGIN_S,
        runtime=pretrain_minutes,
    conda:
        "../envs/bayesncl.yaml"
    shell:
        "{params.launch}{params.allocation}bayesncl pretrain --config-json {params.config:q} --out {params.out}"
        " --quiet > {log} 2>&1"
