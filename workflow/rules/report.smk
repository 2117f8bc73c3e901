# Every run's eval/<section>.json -> runs.csv -> Tables 1-7, the claims table and the figures.
import json
import os

from_common("ATLAS", "BENCHMARKS", "EVAL_OUTPUTS", "FIGURES", "GRID_FILES", "JOBS", "PLAN", "REPORTED", "RESULTS",
            "SMOKE", "TABLES", "benchmark_file", "launch")


rule summarize:
    input:
        EVAL_OUTPUTS,
    output:
        csv=f"{RESULTS}/summary/runs.csv",
        headline=f"{RESULTS}/summary/metrics.json",
    log:
        f"{RESULTS}/summary/summarize.log",
    benchmark:
        benchmark_file("summarize")
    params:
        grid=json.dumps(config, sort_keys=True),  # summarize expands the same grid (bayesncl.grid.expand)
        launch=launch("summarize"),
    localrule: True
    conda:
        "../envs/bayesncl.yaml"
    shell:
        "{params.launch}bayesncl summarize --grid-json {params.grid:q} --out {output.csv} > {log} 2>&1"


rule report:
    input:
        rules.summarize.output.csv,
    output:
        TABLES,
        [REPORTED.get(f, f) for f in FIGURES],  # the PNGs, in Snakemake's report (REPORTED)
    log:
        f"{RESULTS}/summary/report.log",
    benchmark:
        benchmark_file("report")
    params:
        out=lambda wc, output: os.path.dirname(os.path.dirname(output[0])),
        grid=GRID_FILES,
        smoke="--smoke" if SMOKE else "",
        launch=launch("report"),
    localrule: True
    conda:
        "../envs/bayesncl.yaml"
    shell:
        "{params.launch}bayesncl report --summary {input} --out {params.out} --grid {params.grid:q} {params.smoke} 2>&1 | tee {log}"  # the outcome, on the terminal too


# The seeds each claim needs (docs/METHOD.md section 9, "Planning"): this grid's runs as the pilot, the overlay that
# adds the seeds (`--configfile` after the grid's), printed on the terminal too. A grid grown by a plan says so.
rule plan:
    input:
        rules.summarize.output.csv,
    output:
        md=PLAN[0],
        overlay=PLAN[1],
    log:
        f"{RESULTS}/summary/plan.log",
    benchmark:
        benchmark_file("plan")
    params:
        grid=json.dumps(config, sort_keys=True),  # the grid as merged from every --configfile
        launch=launch("plan"),
    localrule: True
    conda:
        "../envs/bayesncl.yaml"
    shell:
        "{params.launch}bayesncl plan --pilot {input} --grid-json {params.grid:q} --out {output.overlay:q} "
        "--text {output.md:q} 2>&1 | tee {log}"


# What each job cost: every rule's benchmark file (wall time, peak memory; the resources it was given) in one
# CSV, and the totals per rule with the GPU-hours of the grid as run. Last, so that it sees every other job.
rule jobs:
    input:
        TABLES,
        FIGURES,
        ATLAS,
        PLAN,
    output:
        csv=JOBS[0],
        md=JOBS[1],
    log:
        f"{RESULTS}/summary/jobs.log",
    params:
        benchmarks=BENCHMARKS,
        smoke="--smoke" if SMOKE else "",
    localrule: True
    conda:
        "../envs/bayesncl.yaml"
    shell:
        "bayesncl jobs --benchmarks {params.benchmarks:q} --out {output.csv:q} {params.smoke} 2>&1 | tee {log}"
