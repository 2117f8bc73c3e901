# runs.csv -> Tables 1-7 and Figures 3-4.


rule manifest:
    output:
        f"{RESULTS}/summary/manifest.json",
    log:
        f"{RESULTS}/summary/manifest.log",
    params:
        entries=lambda wc: json.dumps(manifest()),
    localrule: True
    run:
        from bayesncl.atomic import atomic_write_text

        atomic_write_text(output[0], json.dumps(json.loads(params.entries), indent=1) + "\n")


rule summarize:
    input:
        manifest=f"{RESULTS}/summary/manifest.json",
        metrics=METRICS,
    output:
        f"{RESULTS}/summary/runs.csv",
    log:
        f"{RESULTS}/summary/summarize.log",
    localrule: True
    conda:
        "../envs/bayesncl.yaml"
    shell:
        "bayesncl summarize --manifest {input.manifest} --out {output} > {log} 2>&1"


rule report:
    input:
        f"{RESULTS}/summary/runs.csv",
    output:
        TABLES,
        FIGURES,
    log:
        f"{RESULTS}/summary/report.log",
    params:
        out=lambda wc, output: os.path.dirname(os.path.dirname(output[0])),
    localrule: True
    conda:
        "../envs/bayesncl.yaml"
    shell:
        "bayesncl report --summary {input} --out {params.out} > {log} 2>&1"
