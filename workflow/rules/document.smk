# The reproduction report: results/report.pdf (where pdflatex exists) and what `snakemake --report
# results/report.html` shows: the claims table, Tables 1-7 (as HTML, per dataset), the figures and the atlas,
# each with its caption (bayesncl.report.document), and the provenance on its front page.
import json
import os

from_common("ATLAS", "DOCUMENT_DIR", "FIGURES", "FIGURE_STEMS", "GRID_FILES", "HTML_PAGES", "JOBS", "PAGES", "PDF",
            "REPORTED", "RESULTS", "TABLES")


report: "../report/workflow.rst"


OVERRIDES = dict(workflow.config_settings.config or {})  # --config key=value (not the config files)


rule document:
    input:
        summary=f"{RESULTS}/summary/runs.csv",
        tables=TABLES,
        figures=FIGURES,
        atlas=ATLAS,
        jobs=JOBS[0],  # what each job cost, on the provenance page (rule jobs)
    output:
        tex=f"{DOCUMENT_DIR}/report.tex",
        html=[REPORTED[f] for f in HTML_PAGES],
        captions=[f"{DOCUMENT_DIR}/captions/{name}.rst" for name in PAGES],
        provenance=f"{DOCUMENT_DIR}/provenance.rst",
        plots=directory(f"{RESULTS}/plots"),
    log:
        f"{RESULTS}/summary/document.log",
    params:
        out=lambda wc, input: os.path.dirname(os.path.dirname(input.summary)),
        grid=GRID_FILES,
        figures=FIGURE_STEMS,
        overrides=json.dumps(OVERRIDES, sort_keys=True, default=str),
    localrule: True
    conda:
        "../envs/bayesncl.yaml"
    shell:
        "bayesncl document --summary {input.summary} --out {params.out:q} --grid {params.grid:q} "
        "--figures {params.figures} --overrides-json {params.overrides:q} > {log} 2>&1"


rule pdf:
    input:
        tex=rules.document.output.tex,
        tables=TABLES,
        figures=FIGURES,
        atlas=ATLAS,
    output:
        PDF,
    log:
        f"{RESULTS}/summary/pdf.log",
    localrule: True
    conda:
        "../envs/bayesncl.yaml"
    shell:
        "bayesncl pdf --tex {input.tex} --out {output} > {log} 2>&1"
