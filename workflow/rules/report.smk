# Every run's eval/<section>.json -> runs.csv -> Tables 1-7, the claims table and the figures.


rule summarize:
    input:
        EVAL_OUTPUTS,
    output:
        csv=f"{RESULTS}/summary/runs.csv",
        headline=f"{RESULTS}/summary/metrics.json",
    log:
        f"{RESULTS}/summary/summarize.log",
    params:
        grid=json.dumps(config, sort_keys=True),  # summarize expands the same grid (bayesncl.grid)
    localrule: True
    conda:
        "../envs/bayesncl.yaml"
    shell:
        "bayesncl summarize --grid-json {params.grid:q} --out {output.csv} > {log} 2>&1"


rule report:
    input:
        rules.summarize.output.csv,
    output:
        TABLES,
        [REPORTED.get(f, f) for f in FIGURES],  # the PNGs, in Snakemake's report (rules/document.smk)
    log:
        f"{RESULTS}/summary/report.log",
    params:
        out=lambda wc, output: os.path.dirname(os.path.dirname(output[0])),
        grid=GRID_FILE,
    localrule: True
    conda:
        "../envs/bayesncl.yaml"
    shell:
        "bayesncl report --summary {input} --out {params.out} --grid {params.grid:q} 2>&1 | tee {log}"  # the outcome, on the terminal too
