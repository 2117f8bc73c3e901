# `bayesncl evaluate` on each run, with the sections its sets need.


rule evaluate:
    input:
        model=f"{RESULTS}/runs/{{run}}/model.pt",
    output:
        metrics=f"{RESULTS}/runs/{{run}}/eval/metrics.json",
        vectors=f"{RESULTS}/runs/{{run}}/eval/vectors.npz",
    log:
        f"{RESULTS}/runs/{{run}}/evaluate.log",
    params:
        out=lambda wc, output: os.path.dirname(output.metrics),
        sections=run_sections,
        gpu_slot=gpu_slot,
    threads: 1
    resources:
        gpu=run_gpus,
        cpus_per_gpu=8,
        mem_mb=64000,
        runtime=240,
    conda:
        "../envs/bayesncl.yaml"
    shell:
        "{params.gpu_slot}bayesncl evaluate --checkpoint {input.model} --out {params.out} "
        "--only {params.sections} --quiet > {log} 2>&1"
