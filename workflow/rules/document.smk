# The reproduction report: results/report.pdf (where pdflatex exists) and what `snakemake --report
# results/report.html` shows: the claims table, Tables 1-7 (as HTML, per dataset), the figures and the atlas,
# each with its caption (bayesncl.report.document), and the provenance on its front page.
# Included before `rule all` (which asks for DOCUMENT); report.smk marks its figures from REPORTED.
import shutil
from pathlib import Path

from bayesncl.report.document import PDFLATEX_HINT, report_pages


report: "../report/workflow.rst"


# The grid config file(s) this run read: named, with their hash, in every generated file.
GRID_FILES = [os.path.relpath(f) for f in workflow.configfiles] or ["config/config.yaml"]
GRID_FILE = GRID_FILES[-1]
OVERRIDES = dict(workflow.config_settings.config or {})  # --config key=value (not the config files)
FIGURE_STEMS = [Path(f).stem for f in FIGURES + ATLAS if f.endswith(".pdf")]
PAGES = {p.name: p for p in report_pages([(r.config["data"]["dataset"], r.sets) for r in RUNS.values()],
                                         FIGURE_STEMS)}
DOCUMENT_DIR = f"{RESULTS}/report"
PDF = f"{RESULTS}/report.pdf"
# The report's pages as files: a table's HTML (rule document), a figure's PNG (rule report; the atlas marks
# its own, by wildcard, in atlas.smk).
PAGE_FILES = {
    name: f"{DOCUMENT_DIR}/html/{name}.html" if p.category in ("Claims", "Tables") else f"{RESULTS}/figures/{name}.png"
    for name, p in PAGES.items()
    if p.category != "Atlas"
}
HTML_PAGES = [path for path in PAGE_FILES.values() if path.endswith(".html")]
DOCUMENT = HTML_PAGES + ([PDF] if shutil.which("pdflatex") else [])  # for `rule all`
if not shutil.which("pdflatex"):
    print(PDFLATEX_HINT, file=sys.stderr)
# Each page marked for the report. Its caption is the file `bayesncl document` writes (absolute: Snakemake
# reads captions relative to the rule file, and these lie under the results folder).
REPORTED = {
    path: report(path, caption=os.path.abspath(f"{DOCUMENT_DIR}/captions/{name}.rst"),
                 category=PAGES[name].category, labels=PAGES[name].labels)
    for name, path in PAGE_FILES.items()
}


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
        grid=GRID_FILE,
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
