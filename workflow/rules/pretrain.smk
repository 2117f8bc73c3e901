# One pretraining job per distinct run config (the config travels as JSON; a change reruns the job).


rule pretrain:
    output:
        f"{RESULTS}/runs/{{run}}/model.pt",
    log:
        f"{RESULTS}/runs/{{run}}/pretrain.log",
    params:
        config=run_config_text,
        out=lambda wc, output: os.path.dirname(output[0]),
    threads: 1
    conda:
        "../envs/bayesncl.yaml"
    shell:
        "bayesncl pretrain --config-json {params.config:q} --out {params.out} --quiet > {log} 2>&1"
