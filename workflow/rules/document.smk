# The reproduction report: results/report.pdf (where pdflatex exists) and what `snakemake --report
# results/report.html` shows: the claims table, Tables 1-7 (as HTML, per dataset), the figures and the atlas,
# each with its caption (bayesncl.report.document), and the provenance on its front page.
# Included before `rule all` (which asks for DOCUMENT); report.smk and atlas.smk mark their figures with
# `reported`.
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
HTML_PAGES = [f"{DOCUMENT_DIR}/html/{p.name}.html" for p in PAGES.values() if p.category in ("Claims", "Tables")]
DOCUMENT = HTML_PAGES + ([PDF] if shutil.which("pdflatex") else [])  # for `rule all`
if not shutil.which("pdflatex"):
    print(PDFLATEX_HINT, file=sys.stderr)


def caption_file(name):
    """The caption `bayesncl document` writes for a page of the report (absolute: Snakemake reads captions
    relative to the rule file, and this one lies under the results folder)."""
    return os.path.abspath(f"{DOCUMENT_DIR}/captions/{name}.rst")


def reported(path):
    """``path`` marked for Snakemake's report when it is a page of it (a table's HTML, a figure's PNG)."""
    page = PAGES.get(Path(path).stem)
    if page is None or Path(path).suffix not in (".html", ".png"):
        return path
    return report(path, caption=caption_file(page.name), category=page.category, labels=page.labels)


rule document:
    input:
        summary=f"{RESULTS}/summary/runs.csv",
        tables=TABLES,
        figures=FIGURES,
        atlas=ATLAS,
    output:
        tex=f"{DOCUMENT_DIR}/report.tex",
        html=[reported(f) for f in HTML_PAGES],
        captions=[f"{DOCUMENT_DIR}/captions/{name}.rst" for name in PAGES],
        provenance=f"{DOCUMENT_DIR}/provenance.rst",
        plots=directory(f"{RESULTS}/plots"),
    log:
        f"{RESULTS}/summary/document.log",
    params:
        out=RESULTS,
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
