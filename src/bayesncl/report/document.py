"""The reproduction report: one PDF, and the pages of Snakemake's HTML report, from the generated files.

``write_document(summary_csv, results, grid, figures)`` writes, under ``<results>/report/``:

- ``report.tex``: the claims table and the outcome line, Tables 1-7 (each ``\\input`` from ``tables/``, never
  retyped) with the claims that read them and the paper's numbers, the figures (``figures/*.pdf``) and a
  provenance page. ``build_pdf`` compiles it with pdflatex into ``<results>/report.pdf``.
- ``html/<page>.html``: each table as an HTML page (per dataset; the claims table whole) for
  ``snakemake --report``, and ``captions/<page>.rst``: the caption of each page of that report (a table's
  own caption; a figure's from ``FIGURE_CAPTIONS``). ``report_pages`` lists the pages: the workflow
  declares the same list at DAG time.
- ``provenance.rst`` (the HTML report's front page) and ``provenance.json``.

and the DVC plot data under ``<results>/plots/`` (``plots.write_plots``).
"""

from __future__ import annotations

import html
import math
import re
import shutil
import string
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from ..core.atomic import atomic_path, atomic_write_text
from ..core.errors import BayesNCLError, MissingInputError
from ..measures.learning import saturation_rule
from . import provenance
from .cells import Fmt, caption_text, latex_escape
from .claims import Comparison
from .claims_table import build_claims, claim_cells, dataset_title, family_tally
from .judge import claims_rows
from .reading import reading, rows_of
from .tables import environment
from .names import DATASET_NAMES
from .tables import TABLES, build_table
from .verdicts import VERDICTS

__all__ = ["FIGURE_CAPTIONS", "PDFLATEX_HINT", "Page", "build_pdf", "builds_pdf", "report_pages", "write_document"]

PDFLATEX_HINT = ("pdflatex not found, so results/report.pdf is not built; install it with "
                 "`apt-get install texlive-latex-base texlive-latex-recommended` (Debian, as .ci/run does)")


def builds_pdf() -> bool:
    """Whether the workflow builds results/report.pdf: where pdflatex is found (else PDFLATEX_HINT says how)."""
    return shutil.which("pdflatex") is not None

# Figure captions: what the figure shows and how to read it (each figure's title names its settings);
# "$...$" is math, as in the tables' captions (cells.caption_text).
FIGURE_CAPTIONS = {
    "figure3": ("Figure 3", r"Retrieval precision P@10 (%) against the number $K$ of feature dimensions kept, "
                r"one line per method, one panel per dataset; the $K$ of Table 2 is marked. Lines are means "
                r"over seeds, bands mean $\pm$ std where a point has two or more seeds; the legend gives n."),
    "figure4a": ("Figure 4a", r"Semantic consistency (SC, %) and linear-probe top-1 (%) against the latent width "
                 r"$D$ of $z^+$, BayesNCL and NCL; the default $D$ (the main comparison's) is marked."),
    "figure4b": ("Figure 4b", r"Sensitivity of SC and linear-probe top-1 to the prior keep rate $\rho$ and the KL "
                 r"weight $\lambda$ (BayesNCL); NCL's value at the same dataset, backbone and $D$ is the dashed "
                 r"line. $\lambda = 0$ is drawn apart, left of the log axis."),
    "gates": ("Open gates", r"Open-gate fraction (% of all gates over the training batches) per pretraining "
              r"epoch, for the BayesNCL variants at the default operating point and the $\lambda$ sweep: do "
              r"the gates leave their initial state?"),
    "sc_training": ("SC over training", r"Semantic consistency (SC, %) of the evaluation feature at the "
                    r"recorded pretraining epochs, NCL and BayesNCL (STE), one panel per dataset: the mean over "
                    r"seeds with each seed drawn faintly; beside it, BayesNCL $-$ NCL paired by seed with its 95% "
                    r"t-interval. Do the curves cross, i.e. does claim 1a depend on when training stops?"),
    "saturation": ("Saturation", r"Final InfoNCE, SC (%) and linear-probe top-1 (%) of complete runs against "
                   r"their training budget (each with its own warm-up and cosine; 0 epochs: the random-init "
                   r"network), one line per variant the grid ran (NCL; BayesNCL (STE) where it ran), mean $\pm$ "
                   r"std over seeds. The title gives the saturation criterion's verdict, fixed on NCL alone: "
                   + saturation_rule() + "."),
    "atlas": ("Feature atlas", r"Per dimension of $z^+$: activation frequency against SC (colour: closed-gate "
              r"rate), then the top activating test images of the most consistent and of the most often "
              r"gated dimensions; NCL and BayesNCL (STE) side by side, at the lowest seed of the main comparison."),
}


# --------------------------------------------------------------------------- the report's pages
@dataclass(frozen=True)
class Page:
    name: str                 # file stem: "claims", "table1_synthetic", "figure3", "atlas_synthetic"
    category: str             # "Claims", "Tables", "Figures" or "Atlas"
    labels: dict = field(hash=False)
    source: str = ""          # the table ("table1", "claims") or figure stem it shows
    dataset: str | None = None


def _names(datasets) -> str:
    return ", ".join(DATASET_NAMES.get(d, d) for d in datasets) or "none"


def report_pages(runs: list[tuple[str, list[str] | str]], figures: list[str]) -> list[Page]:
    """The pages of Snakemake's report for a grid whose runs are ``[(dataset, sets), ...]`` (sets as a
    list or ";"-joined) and whose figure stems are ``figures`` ("figure3", ..., "atlas_<dataset>")."""
    runs = [(str(d), s.split(";") if isinstance(s, str) else list(s)) for d, s in runs]
    datasets = list(dict.fromkeys(d for d, _ in runs))
    pages = [Page("claims", "Claims", {"table": "Claims", "dataset": _names(datasets)}, "claims")]
    for i, spec in enumerate(TABLES, start=1):
        for ds in dict.fromkeys(d for d, sets in runs if spec.set_name in sets):
            labels = {"table": f"Table {i}", "dataset": DATASET_NAMES.get(ds, ds)}
            pages.append(Page(f"{spec.name}_{ds}", "Tables", labels, spec.name, ds))
    for stem in figures:
        if stem.startswith("atlas_"):
            ds = stem.removeprefix("atlas_")
            pages.append(Page(stem, "Atlas", {"figure": "Feature atlas", "dataset": DATASET_NAMES.get(ds, ds)},
                              stem, ds))
        else:
            in_set = [d for d in datasets if any(d == rd and stem in sets for rd, sets in runs)]
            title = FIGURE_CAPTIONS.get(stem, (stem, ""))[0]
            pages.append(Page(stem, "Figures", {"figure": title, "dataset": _names(in_set or datasets)}, stem))
    return pages


def figure_caption(stem: str, kind: str = "txt") -> tuple[str, str]:
    """(title, caption) of a figure stem as LaTeX (``kind`` "tex") or plain text ("txt"); a figure without
    an entry keeps its own title."""
    title, text = _figure_caption(stem)
    return caption_text(title, kind), caption_text(text, kind)


def _figure_caption(stem: str) -> tuple[str, str]:
    if stem.startswith("atlas_"):
        ds = stem.removeprefix("atlas_")
        title, text = FIGURE_CAPTIONS["atlas"]
        return f"{title}, {DATASET_NAMES.get(ds, ds)}", text
    return FIGURE_CAPTIONS.get(stem, (stem, "See the figure's title for what it shows."))


# --------------------------------------------------------------------------- text in three formats
_RST_SPECIAL = re.compile("([" + re.escape(string.punctuation) + "])")


def rst_text(text: str) -> str:
    """Literal text in reStructuredText: every ASCII punctuation mark escaped (a backslash before any
    character gives the character), so no caption reads as markup, a list or a link."""
    return _RST_SPECIAL.sub(r"\\\1", " ".join(str(text).split()))


def _md_plain(cell: str) -> str:
    return str(cell).replace("\\|", "|")


def _html_cell(cell: str) -> str:
    text = html.escape(_md_plain(cell))
    return re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", text)  # the Markdown table's bold


def _tex_path(path: str) -> str:
    """A path in \\texttt that may break after each slash."""
    return r"\texttt{" + latex_escape(path).replace("/", r"/\allowbreak{}") + "}"


# --------------------------------------------------------------------------- the claims, per table
def outcome_text(verdicts: list[str], family: str = "") -> str:
    """"24 comparisons ...: holds: 5; does not hold: 9; ..." (verdicts in verdicts.VERDICTS order), then
    ``family`` (claims_table.family_tally: how many decisive verdicts survive the familywise control)."""
    counts: dict[str, int] = {}
    for v in verdicts:
        counts[v] = counts.get(v, 0) + 1
    order = [v for v in VERDICTS if v in counts] + [v for v in counts if v not in VERDICTS]
    tally = "; ".join(f"{v}: {counts[v]}" for v in order)
    n = len(verdicts)
    return (f"{n} comparison{'s' if n != 1 else ''} of the paper's claims on this grid's runs: {tally}."
            + (f" {family[0].upper()}{family[1:]}." if family else ""))


def claims_for(set_name: str, judged: list[tuple[str, Comparison]], fmt: Fmt) -> list[dict]:
    """The comparisons (``judged``: (dataset, comparison) pairs, judge.claims_rows flattened) of the claims
    that read ``set_name``, as the box under a table or figure shows them, in ``fmt``."""
    multi = len({d for d, _ in judged}) > 1
    out = []
    for dataset, c in judged:
        if set_name not in c.sets:
            continue
        cell = claim_cells(c, fmt)
        out.append({"id": cell["id"], "where": f" ({fmt.esc(dataset_title(dataset))})" if multi else "",
                    "text": cell["text"], "here": f"here {cell['left']} vs {cell['right']}",
                    "paper": "" if cell["paper"] == fmt.dash() else cell["paper"], "verdict": cell["verdict"]})
    return out


# --------------------------------------------------------------------------- HTML pages and captions
_HTML = """<!DOCTYPE html>
<!-- {title}: generated by bayesncl.report.document from results/summary/runs.csv; do not edit. -->
<!-- {stamp} -->
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; font-size: 13px; margin: 1em;
       color: #222; }}
p.caption {{ max-width: 62em; line-height: 1.4; }}
table {{ border-collapse: collapse; margin-top: 0.6em; }}
th, td {{ padding: 2px 7px; text-align: right; white-space: nowrap; vertical-align: top; }}
th {{ border-top: 2px solid #222; border-bottom: 1px solid #222; }}
td.left, th.left {{ text-align: left; }}
td.wrap {{ white-space: normal; min-width: 9em; max-width: 22em; }}
tr.block td {{ font-style: italic; padding-top: 8px; border-bottom: 1px solid #bbb; text-align: left; }}
tbody tr:last-child td {{ border-bottom: 2px solid #222; }}
p.stamp {{ color: #777; font-size: 11px; margin-top: 1.2em; }}
</style></head>
<body>
<p class="caption"><strong>{title}.</strong> {caption}</p>
<table>
<thead><tr>{header}</tr></thead>
<tbody>
{rows}
</tbody>
</table>
<p class="stamp">{dataset_note}{stamp_text}</p>
</body></html>
"""


def table_html(ctx: dict, title: str, blocks: list[dict], stamp: str, dataset_note: str = "") -> str:
    """A table context (kind "md") as an HTML page: caption, header, a title row per block, the rows."""
    align = ctx["align"]
    wide = {i for i, h in enumerate(ctx["header"]) if h in ("Claim", "Paper", "Verdict")}  # text that may wrap

    def cls(i: int) -> str:
        names = (["left"] if align[i] == "left" else []) + (["wrap"] if i in wide else [])
        return f' class="{" ".join(names)}"' if names else ""

    header = "".join(f"<th{cls(i)}>{_html_cell(h)}</th>" for i, h in enumerate(ctx["header"]))
    rows = []
    for block in blocks:
        rows.append(f'<tr class="block"><td colspan="{ctx["ncols"]}">{_html_cell(block["title"])}</td></tr>')
        rows += ["<tr>" + "".join(f"<td{cls(i)}>{_html_cell(c)}</td>" for i, c in enumerate(row)) + "</tr>"
                 for row in block["rows"]]
    if not blocks:
        rows.append(f'<tr class="block"><td colspan="{ctx["ncols"]}">no runs</td></tr>')
    return _HTML.format(title=html.escape(title), stamp=html.escape(stamp).replace("--", "- -"),
                        caption=_html_cell(ctx["caption"]), header=header, rows="\n".join(rows),
                        dataset_note=html.escape(dataset_note), stamp_text=html.escape(stamp))


def _block_of(blocks: list[dict], dataset: str) -> list[dict]:
    """The blocks of one dataset: their title is the dataset's name, maybe with values after it."""
    name = DATASET_NAMES.get(dataset, dataset)
    return [b for b in blocks if b["title"] == name or str(b["title"]).startswith(name + " (")]


def caption_rst(title: str, caption: str, stamp: str) -> str:
    return f".. {stamp}\n\n**{rst_text(title)}.** {rst_text(caption)}\n"


# --------------------------------------------------------------------------- the LaTeX document
def _hms(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "--"
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def _cost_rows(costs: list[dict], tex: bool) -> list[dict]:
    esc = latex_escape if tex else (lambda s: s)
    return [{"rule": esc(c["rule"]), "jobs": c["jobs"], "unmeasured": c["unmeasured"], "wall": _hms(c["seconds"]),
             "rss": f"{c['max_rss_mb']:.0f}" if math.isfinite(c["max_rss_mb"]) else ("--" if tex else "-"),
             "gpu": f"{c['gpu_hours']:.2f}" if math.isfinite(c["gpu_hours"]) else "not recorded",
             "last": c["rule"] == "all"} for c in costs]  # "all": the sum over every rule


def _seeds_text(seeds: list[int]) -> str:
    if not seeds:
        return "none"
    return ", ".join(map(str, seeds)) + f" ({len(seeds)} seed{'s' if len(seeds) != 1 else ''})"


def provenance_items(prov, tex: bool) -> list[tuple[str, str]]:
    """(key, value) rows of the provenance page, as LaTeX (``tex``) or plain text."""
    esc = latex_escape if tex else (lambda s: s)
    tt = (lambda s: r"\texttt{" + latex_escape(s) + "}") if tex else (lambda s: s)
    path = _tex_path if tex else (lambda s: s)
    git = prov.git
    if git.commit is None:
        commit = esc("unknown (not a git checkout)")
    else:
        commit = tt(git.commit) + esc(", with uncommitted changes to tracked files" if git.dirty
                                      else ", no uncommitted changes to tracked files")
    files = []
    for file, digest in zip(prov.grid, prov.grid_sha256):  # a grid and its overlays, in order
        text = path(file)
        if digest:  # in full on the page; its first 12 digits on screen (provenance.json has it all)
            text += esc(", SHA-256 ") + (r"{\footnotesize" + tt(digest) + "}" if tex
                                         else digest[:provenance.HASH_CHARS] + "...")
        files.append(text)
    grid = esc("; then ").join(files) if files else esc("none (made by hand)")
    overrides = ", ".join(f"{k}={v}" for k, v in prov.overrides.items())
    per_ds = ", ".join(f"{DATASET_NAMES.get(d, d)}: {n}" for d, n in prov.runs_per_dataset.items())
    devices = ", ".join(f"{d}: {n} run{'s' if n != 1 else ''}" for d, n in prov.devices.items()) or "none"
    v = prov.versions
    versions = ", ".join(f"{k} {v[k]}" for k in ("torch", "torchvision", "snakemake", "dvc")) + \
        "; " + ", ".join(f"{k} {v[k]}" for k in v if k not in ("torch", "torchvision", "snakemake", "dvc"))
    m = prov.machine
    items = [
        ("Commit", commit),
        ("Grid config", grid),
        ("--config overrides" if not tex else r"\texttt{-{}-config}", path(overrides) if overrides else esc("none")),
        ("Seeds", esc(_seeds_text(prov.seeds))),
        ("Runs", esc(f"{prov.runs} ({per_ds})" if per_ds else str(prov.runs))),
        ("Training device", esc(f"train.device {devices}")),
        ("Versions", esc(versions)),
        ("Plugins", esc("; ".join(f"{p['module']} ({p['file']}, SHA-256 {p['sha256'][:provenance.HASH_CHARS]}...)"
                                  for p in prov.plugins) or "none")),
        ("Imported weights", esc("; ".join(f"{r['variant']}: {r['run_id']} from {r['checkpoint']} (SHA-256 "
                                           f"{r['sha256'][:provenance.HASH_CHARS]}...)"
                                           for r in getattr(prov, "imported", [])) or "none")),
        ("CPU", esc(m["cpu"])),
        ("GPU", esc(m["gpu"])),
        ("Machine", esc(f"{m['host']}, {m['os']} (the machine that made this report; local jobs ran here, "
                        "SLURM jobs on the cluster's nodes)")),
        ("Date", esc(prov.date)),
    ]
    return items


def _bold_tex(line: str) -> str:
    """A Markdown line with **bold** as LaTeX."""
    return re.sub(r"\*\*(.+?)\*\*", r"\\textbf{\1}", latex_escape(line))


def _blocks(judged: list[tuple[str, Comparison]]) -> list[tuple[str, list[Comparison]]]:
    out: dict[str, list[Comparison]] = {}
    for d, c in judged:
        out.setdefault(d, []).append(c)
    return list(out.items())


def _latex_context(df, prov, figures: list[str], results: Path, judged: list[tuple[str, Comparison]]) -> dict:
    tex = Fmt("tex")
    stamp = prov.stamp()
    tables = [{"name": spec.name, "number": i, "claims": claims_for(spec.set_name, judged, tex)}
              for i, spec in enumerate(TABLES, start=1)]
    figs = []
    for stem in figures:
        title, caption = figure_caption(stem, "tex")
        figs.append({"file": stem, "title": title, "caption": caption,
                     "height": "0.7" if stem.startswith("atlas_") else "0.6",
                     "claims": claims_for(stem, judged, tex)})
    grid = " + ".join(prov.grid) or "no grid config"
    commit = prov.git.commit[:12] if prov.git.commit else "unknown commit"
    seeds = _seeds_text(prov.seeds)
    return {
        "stamp": stamp, "title": "BayesNCL reproduction report",
        "subtitle": latex_escape(f"Grid {grid} · commit {commit}{' (uncommitted changes)' if prov.git.dirty else ''}"
                                 f" · {prov.date}").replace("·", r"\textperiodcentered{}"),
        "outcome": latex_escape(outcome_text([c.verdict for _, c in judged], family_tally([c for _, c in judged]))),
        "reading": [_bold_tex(line.removeprefix("- ")) for line in reading(rows_of(
            _blocks(judged), dataset_title))],
        "claims_note": latex_escape(f"{prov.runs} runs; seeds {seeds}. The claims table "
                                    "(tables/claims.tex) follows; each row's verdict follows the rule in its caption."),
        "tables": tables, "figures": figs,
        "provenance": provenance_items(prov, tex=True),
        "costs": _cost_rows(prov.costs, tex=True) if prov.costs else None,
        "jobs_csv": _tex_path(_relative(prov.jobs_csv, results)),
        "footer": latex_escape(f"{grid} · commit {commit}{'+' if prov.git.dirty else ''} · {prov.date}")
        .replace("·", r"\textperiodcentered{}"),
        "pdf_title": "BayesNCL reproduction report",
        "pdf_subject": _pdf_string(stamp),
    }


def _relative(path: str, results: Path) -> str:
    p = Path(path)
    try:
        return str(Path(results.name) / p.relative_to(results))
    except ValueError:
        return str(p)


def _pdf_string(text: str) -> str:
    """Text safe in a hyperref option (no TeX specials, balanced braces)."""
    return re.sub(r"[\\{}%#$&^_~]", " ", text)


def _render_tex(ctx: dict) -> str:
    return environment().get_template("report.tex.j2").render(**ctx)


# --------------------------------------------------------------------------- the HTML report's front page
def provenance_rst(prov, outcome: str, results: Path) -> str:
    lines = [f".. {prov.stamp()}", "",
             f"Reproduction of the BayesNCL paper on the grid {rst_text(' + '.join(prov.grid) or 'given by hand')}: "
             "every table, figure and the claims table, each with its caption. The same in one PDF: "
             f"{rst_text(str(Path(results.name) / 'report.pdf'))} (where pdflatex is installed).", "",
             f"**Outcome.** {rst_text(outcome)}", "", "**Provenance**", ""]
    for key, value in provenance_items(prov, tex=False):
        lines.append(f"- **{rst_text(key)}**: {rst_text(value)}")
    lines += ["", "**Wall time and GPU-hours per rule**", ""]
    if prov.costs:
        for r in _cost_rows(prov.costs, tex=False):
            lines.append(f"- {rst_text(r['rule'])}: {r['jobs']} jobs ({r['unmeasured']} unmeasured), wall time "
                         f"(sum of jobs) {rst_text(r['wall'])}, max RSS {rst_text(r['rss'])} MB, "
                         f"GPU-hours {rst_text(r['gpu'])}")
    else:
        lines.append(f"Not recorded: this run wrote no {rst_text(_relative(prov.jobs_csv, results))}.")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- write it all
def write_document(summary_csv: str | Path, results: str | Path, grid: str | Path | None = None,
                   figures: list[str] | tuple[str, ...] = (), overrides: dict | None = None) -> list[Path]:
    """Write report.tex, the HTML pages, their captions, the provenance files and the DVC plot data (see
    the module docstring); returns the paths written. ``figures``: the figure stems to show, in order."""
    from .claims import declared_claims
    from .dvc_plots import write_plots  # matplotlib: not needed when the workflow lists the pages
    from .summary import prepare, read_summary
    summary_csv, results = Path(summary_csv), Path(results)
    if not summary_csv.is_file():
        raise MissingInputError(f"--summary {summary_csv} does not exist; run `bayesncl summarize` first")
    for stem in figures:
        if not (results / "figures" / f"{stem}.pdf").is_file():
            raise MissingInputError(f"figure {results / 'figures' / (stem + '.pdf')} does not exist; "
                                    "run `bayesncl report` (and `bayesncl atlas`) first")
    df = prepare(read_summary(summary_csv))
    prov = provenance.collect(df, results, grid, overrides)
    stamp = prov.stamp()
    out = results / "report"
    written = []
    declared = declared_claims(provenance.grid_config(grid))  # the workflow config's own, beside the registered

    runs = list(zip(df["dataset"], df["sets"]))
    pages = report_pages(runs, list(figures))
    contexts = {spec.name: build_table(df, spec.name, "md") for spec in TABLES}
    contexts["claims"] = build_claims(df, "md", declared)
    for page in pages:
        if page.category in ("Claims", "Tables"):
            ctx = contexts[page.source]
            title = "Claims" if page.source == "claims" else page.labels["table"]
            blocks = ctx["blocks"] if page.dataset is None else _block_of(ctx["blocks"], page.dataset)
            note = "" if page.dataset is None else f"{page.labels['dataset']} runs of {title}; "
            written.append(atomic_write_text(out / "html" / f"{page.name}.html",
                                             table_html(ctx, title, blocks, stamp, note)))
            caption = _md_plain(ctx["caption"])
        else:
            title, caption = figure_caption(page.source)
        written.append(atomic_write_text(out / "captions" / f"{page.name}.rst", caption_rst(title, caption, stamp)))

    judged = [(d, c) for d, comps in claims_rows(df, declared) for c in comps]
    outcome = outcome_text([c.verdict for _, c in judged], family_tally([c for _, c in judged]))
    written.append(atomic_write_text(out / "provenance.rst", provenance_rst(prov, outcome, results)))
    written.append(atomic_write_text(out / "provenance.json", prov.to_json()))
    tex = _render_tex(_latex_context(df, prov, list(figures), results, judged))
    written.append(atomic_write_text(out / "report.tex", tex))
    written += write_plots(df, results / "plots")
    return written


# --------------------------------------------------------------------------- the PDF
class PdfError(BayesNCLError):
    """pdflatex is missing or failed; the message says how to get it or where the log is."""


def build_pdf(tex: str | Path, out_pdf: str | Path, timeout: float = 600) -> Path:
    """Compile ``tex`` with pdflatex in its own folder (the log stays there) and write ``out_pdf``
    atomically. Overfull boxes are printed, one line each."""
    exe = shutil.which("pdflatex")
    if exe is None:
        raise PdfError(PDFLATEX_HINT)
    tex = Path(tex)
    if not tex.is_file():
        raise MissingInputError(f"{tex} does not exist; run `bayesncl document` first")
    proc = subprocess.run([exe, "-interaction=nonstopmode", "-halt-on-error", "-file-line-error", tex.name],
                          cwd=tex.parent, capture_output=True, text=True, errors="replace",  # pdflatex echoes
                          timeout=timeout)  # input bytes as they are: a UTF-8 character may be split in its log
    log = tex.with_suffix(".log")
    text = log.read_text(errors="replace") if log.is_file() else proc.stdout
    if proc.returncode != 0 or not tex.with_suffix(".pdf").is_file():
        first = next((ln for ln in text.splitlines() if ln.startswith("!") or re.match(r"\S+:\d+: ", ln)),
                     "see the log")
        raise PdfError(f"pdflatex failed on {tex}: {first.strip()} (log: {log})")
    for line in text.splitlines():
        if line.startswith(("Overfull", "! ")):
            print(f"{log}: {line}")
    with atomic_path(out_pdf) as tmp:
        shutil.copyfile(tex.with_suffix(".pdf"), tmp)
    return Path(out_pdf)
