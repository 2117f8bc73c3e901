# Feature atlas per dataset (CPU): NCL and BayesNCL (STE) at the lowest seed of the main comparison, side by
# side (ATLAS_RUNS in common.smk), from their evaluation outputs (eval/features.npz) and the test images.
from_common("ATLAS_RUNS", "GRID_FILES", "PAGES", "RESULTS", "benchmark_file", "launch")


rule atlas:
    input:
        lambda wc: [f"{RESULTS}/runs/{rid}/eval/features.npz" for rid in ATLAS_RUNS[wc.dataset]],
    output:
        pdf=f"{RESULTS}/figures/atlas_{{dataset}}.pdf",
        png=report(f"{RESULTS}/figures/atlas_{{dataset}}.png", caption="../report/atlas.rst", category="Atlas",
                   labels=lambda wc: PAGES[f"atlas_{wc.dataset}"].labels),  # PAGES: the report pages
    log:
        f"{RESULTS}/summary/atlas_{{dataset}}.log",
    benchmark:
        benchmark_file("atlas", "dataset")
    wildcard_constraints:
        dataset="[^/]+",
    params:
        runs=lambda wc: [f"{RESULTS}/runs/{rid}" for rid in ATLAS_RUNS[wc.dataset]],
        out=lambda wc, output: output.pdf[: -len(".pdf")],
        grid=GRID_FILES,
        launch=launch("atlas", "dataset"),
    threads: 1
    conda:
        "../envs/bayesncl.yaml"
    shell:
        "{params.launch}bayesncl atlas --run {params.runs:q} --out {params.out:q} --grid {params.grid:q} > {log} 2>&1"
