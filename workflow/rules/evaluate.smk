# Evaluation, one rule per section of bayesncl.evaluation.sections.SECTIONS, each writing eval/<section>.json.
# `features` embeds the test (and, where needed, train) split once on the GPU; the CPU sections read its
# cache, so a failed or preempted probe reruns alone and a new section reruns no pretraining. Which
# sections a run gets: bayesncl.grid.evaluation_sections (common.smk, EVAL_OUTPUTS).


rule features:
    input:
        model=f"{RESULTS}/runs/{{run}}/model.pt",
        prepared=lambda wc: PREPARED_OF[wc.run],  # rules/prepare.smk
    output:
        json=f"{RESULTS}/runs/{{run}}/eval/features.json",  # written last: eval/features_train.npz too, where needed
        test=f"{RESULTS}/runs/{{run}}/eval/features.npz",
    log:
        f"{RESULTS}/runs/{{run}}/eval/features.log",
    params:
        cmd=evaluate_command("features"),
        gpu_slot=gpu_slot,
    resources:
        gpu=section_gpus("features"),
        cpus_per_task=8,  # data loading; one GPU
        mem_mb=64000,
        runtime=60,
    conda:
        "../envs/bayesncl.yaml"
    shell:
        "{params.gpu_slot}{params.cmd} > {log} 2>&1"


rule interpretability:
    input:
        features=rules.features.output.json,
    output:
        json=f"{RESULTS}/runs/{{run}}/eval/interpretability.json",
        vectors=f"{RESULTS}/runs/{{run}}/eval/vectors.npz",
    log:
        f"{RESULTS}/runs/{{run}}/eval/interpretability.log",
    params:
        cmd=evaluate_command("interpretability"),
    resources:
        cpus_per_task=4,
        mem_mb=16000,
        runtime=30,
    conda:
        "../envs/bayesncl.yaml"
    shell:
        "{params.cmd} > {log} 2>&1"


rule retrieval:
    input:
        features=rules.features.output.json,
    output:
        f"{RESULTS}/runs/{{run}}/eval/retrieval.json",
    log:
        f"{RESULTS}/runs/{{run}}/eval/retrieval.log",
    params:
        cmd=evaluate_command("retrieval"),
    resources:
        cpus_per_task=8,  # all-pairs similarities over the test split, at every K of the curve
        mem_mb=32000,
        runtime=60,
    conda:
        "../envs/bayesncl.yaml"
    shell:
        "{params.cmd} > {log} 2>&1"


rule linear_probe:
    input:
        features=rules.features.output.json,
        model=f"{RESULTS}/runs/{{run}}/model.pt",
        prepared=lambda wc: PREPARED_OF[wc.run],  # rules/prepare.smk
    output:
        f"{RESULTS}/runs/{{run}}/eval/linear_probe.json",
    log:
        f"{RESULTS}/runs/{{run}}/eval/linear_probe.log",
    params:
        cmd=evaluate_command("linear_probe"),
        gpu_slot=gpu_slot,
    resources:
        gpu=section_gpus("linear_probe"),  # the paper protocol (augmented crops); the fast one runs on the CPU
        cpus_per_task=8,
        mem_mb=64000,
        runtime=240,
    conda:
        "../envs/bayesncl.yaml"
    shell:
        "{params.gpu_slot}{params.cmd} > {log} 2>&1"


rule background_probe:
    input:
        features=rules.features.output.json,
        model=f"{RESULTS}/runs/{{run}}/model.pt",
    output:
        f"{RESULTS}/runs/{{run}}/eval/background_probe.json",
    log:
        f"{RESULTS}/runs/{{run}}/eval/background_probe.log",
    params:
        cmd=evaluate_command("background_probe"),
        gpu_slot=gpu_slot,
    resources:
        gpu=section_gpus("background_probe"),  # Waterbirds is embedded on the GPU; the synthetic label is cached
        cpus_per_task=8,
        mem_mb=32000,
        runtime=60,
    conda:
        "../envs/bayesncl.yaml"
    shell:
        "{params.gpu_slot}{params.cmd} > {log} 2>&1"


rule dynamics:
    input:
        model=f"{RESULTS}/runs/{{run}}/model.pt",  # dynamics.pt is written just before it
    output:
        f"{RESULTS}/runs/{{run}}/eval/dynamics.json",
    log:
        f"{RESULTS}/runs/{{run}}/eval/dynamics.log",
    params:
        cmd=evaluate_command("dynamics"),
    resources:
        cpus_per_task=1,
        mem_mb=4000,
        runtime=15,
    conda:
        "../envs/bayesncl.yaml"
    shell:
        "{params.cmd} > {log} 2>&1"


rule cost:
    input:
        model=f"{RESULTS}/runs/{{run}}/model.pt",
    output:
        f"{RESULTS}/runs/{{run}}/eval/cost.json",
    log:
        f"{RESULTS}/runs/{{run}}/eval/cost.log",
    params:
        cmd=evaluate_command("cost"),
    resources:
        cpus_per_task=2,  # FLOPs are counted, not timed; time and peak memory come from the training log
        mem_mb=16000,
        runtime=15,
    conda:
        "../envs/bayesncl.yaml"
    shell:
        "{params.cmd} > {log} 2>&1"
