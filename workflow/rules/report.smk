# runs.csv -> Tables 1-7 and Figures 3-4.


rule manifest:
    output:
        f"{RESULTS}/summary/manifest.json",
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
    localrule: True
    shell:
        "bayesncl summarize --manifest {input.manifest} --out {output}"


rule report:
    input:
        f"{RESULTS}/summary/runs.csv",
    output:
        TABLES,
        FIGURES,
    localrule: True
    shell:
        "bayesncl report --summary {input} --out {RESULTS}"
