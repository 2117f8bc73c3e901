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
    threads: 1
    conda:
        "../envs/bayesncl.yaml"
    shell:
        "bayesncl evaluate --checkpoint {input.model} --out {params.out} "
        "--only {params.sections} --quiet > {log} 2>&1"
