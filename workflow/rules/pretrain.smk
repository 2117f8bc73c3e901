# One pretraining job per distinct run config.


rule run_config:
    output:
        f"{RESULTS}/runs/{{run}}/config.yaml",
    log:
        f"{RESULTS}/runs/{{run}}/config.log",
    params:
        config=run_config_text,
    localrule: True
    run:
        import yaml

        from bayesncl.atomic import atomic_write_text

        atomic_write_text(output[0], yaml.safe_dump(json.loads(params.config), sort_keys=False))


rule pretrain:
    input:
        f"{RESULTS}/runs/{{run}}/config.yaml",
    output:
        f"{RESULTS}/runs/{{run}}/model.pt",
    log:
        f"{RESULTS}/runs/{{run}}/pretrain.log",
    params:
        out=lambda wc: f"{RESULTS}/runs/{wc.run}",
    threads: 1
    conda:
        "../envs/bayesncl.yaml"
    shell:
        "bayesncl pretrain --config {input} --out {params.out} > {log} 2>&1"
