"""The reproduction report (bayesncl.report.document, provenance, plots) and Snakemake's HTML report.

Fast tests on constructed rows; then the tiny grid end to end (one workflow run for the module): the PDF read
back with pdftotext (skipped without pdflatex/pdftotext; CI installs them), `snakemake --report` read back
from its embedded data, and the provenance line of every generated file.
"""

from __future__ import annotations

import hashlib
import html
import json
import os
import re
import shutil
import subprocess
import sys
import unicodedata
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from bayesncl.report import document, judge, names, dvc_plots as plots, provenance, summary, tables
from bayesncl.report.cells import latex_escape
from helpers.claims import full_grid
from helpers.report import figure_row, gate_curve
from helpers.processes import current

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SNAKEMAKE = shutil.which("snakemake", path=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
HEAD = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()


# --------------------------------------------------------------------------- provenance
def test_stamp_names_the_commit_and_the_grid_file_hash(tmp_path):
    grid = tmp_path / "grid.yaml"
    grid.write_text("seeds: [0]\n")
    text = provenance.stamp(grid)
    assert HEAD and f"commit {HEAD}" in text
    assert f"grid {grid} (sha256 {hashlib.sha256(grid.read_bytes()).hexdigest()[:12]})" in text
    grid.write_text("seeds: [1]\n")  # another config, another hash
    assert provenance.stamp(grid) != text
    dirty = provenance.stamp(grid, provenance.GitState("abc", True, "/x"))
    assert "commit abc + uncommitted changes" in dirty
    assert "made by hand" in provenance.stamp(None)


def test_git_state_sees_uncommitted_changes_to_tracked_files_only(tmp_path):
    run = lambda *a: subprocess.run(["git", *a], cwd=tmp_path, check=True, capture_output=True)  # noqa: E731
    run("init", "-q")
    (tmp_path / "a.txt").write_text("1\n")
    run("add", "a.txt")
    run("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    state = provenance.git_state(tmp_path)
    assert len(state.commit) == 40 and not state.dirty
    (tmp_path / "new.txt").write_text("untracked\n")
    assert not provenance.git_state(tmp_path).dirty
    (tmp_path / "a.txt").write_text("2\n")
    assert provenance.git_state(tmp_path).dirty


def test_stamp_names_the_codes_commit_from_inside_another_checkout(tmp_path, monkeypatch):
    """Run from inside another git repository (a project that calls bayesncl), the stamp still names the
    commit of the checkout that holds the bayesncl code, not the current folder's."""
    code = Path(provenance.__file__).resolve().parent
    ours = subprocess.run(["git", "rev-parse", "HEAD"], cwd=code, capture_output=True, text=True).stdout.strip()
    if not ours:
        pytest.skip("the bayesncl code is not in a git checkout here")
    run = lambda *a: subprocess.run(["git", *a], cwd=tmp_path, check=True, capture_output=True)  # noqa: E731
    run("init", "-q")
    (tmp_path / "a.txt").write_text("1\n")
    run("add", "a.txt")
    run("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "other project")
    other = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True).stdout.strip()
    monkeypatch.chdir(tmp_path)
    assert other != ours and f"commit {ours}" in provenance.stamp(None)
    assert provenance.git_state().commit == ours


@pytest.mark.parametrize("suffix, first, comment", [
    (".tex", "% Table 1: generated ...; do not edit.", "% made by X"),
    (".md", "<!-- Table 1: generated ...; do not edit. -->", "<!-- made by X -->"),
])
def test_stamp_goes_under_the_do_not_edit_line(suffix, first, comment):
    assert provenance.stamp_text(f"{first}\nbody\n", suffix, "made by X").splitlines() == [first, comment, "body"]
    assert provenance.stamp_text("body\n", suffix, "made by X").splitlines() == [comment, "body"]


def test_job_costs_sum_per_rule_and_count_unmeasured_jobs_apart(tmp_path):
    assert provenance.job_costs(tmp_path / "none.csv") is None
    jobs = pd.DataFrame({"rule": ["pretrain", "pretrain", "features", "features", "cost"],
                         "run": ["a", "b", "a", "b", "a"], "seconds": [3600.0, 1800.0, 60.0, None, 5.0],
                         "max_rss_mb": [900.0, 1200.0, 300.0, None, 50.0], "gpus": [1, 2, 1, 1, 0]})
    jobs.to_csv(tmp_path / "jobs.csv", index=False)
    rows = {r["rule"]: r for r in provenance.job_costs(tmp_path / "jobs.csv")}
    assert list(rows) == ["pretrain", "features", "cost", "all"]
    assert rows["pretrain"]["seconds"] == 5400 and rows["pretrain"]["gpu_hours"] == pytest.approx(2.0)
    assert rows["pretrain"]["max_rss_mb"] == 1200 and rows["pretrain"]["jobs"] == 2
    assert rows["features"]["unmeasured"] == 1 and rows["features"]["seconds"] == 60  # NA is not 0
    assert rows["features"]["gpu_hours"] == pytest.approx(60 / 3600)
    assert rows["all"]["seconds"] == 5465 and rows["all"]["gpu_hours"] == pytest.approx(2 + 60 / 3600)
    jobs.drop(columns="gpus").to_csv(tmp_path / "jobs.csv", index=False)
    assert all(np.isnan(r["gpu_hours"]) for r in provenance.job_costs(tmp_path / "jobs.csv"))


# --------------------------------------------------------------------------- pages, captions, HTML
def test_report_pages_one_table_page_per_dataset_that_ran_it():
    runs = [("cifar10", "table1;table2"), ("cifar100", "table1;figure4a"), ("cifar100", "table5")]
    pages = {p.name: p for p in document.report_pages(runs, ["figure3", "figure4a", "atlas_cifar10"])}
    tables_ = sorted(n for n, p in pages.items() if p.category == "Tables")
    assert tables_ == ["table1_cifar10", "table1_cifar100", "table2_cifar10", "table5_cifar100"]
    assert pages["table5_cifar100"].labels == {"table": "Table 5", "dataset": "CIFAR-100"}
    assert pages["claims"].category == "Claims" and pages["claims"].labels["dataset"] == "CIFAR-10, CIFAR-100"
    assert pages["figure4a"].labels == {"figure": "Figure 4a", "dataset": "CIFAR-100"}
    assert pages["figure3"].labels["dataset"] == "CIFAR-10, CIFAR-100"  # in no set: every dataset
    assert pages["atlas_cifar10"].category == "Atlas" and pages["atlas_cifar10"].labels["dataset"] == "CIFAR-10"


def test_rst_text_renders_back_to_the_same_text():
    from docutils.core import publish_parts

    for text in ["1. Not a list: *a* _b_ `c` |d| [e]_ <f> ±2.5 -- ρ", "- not a bullet", "#. x :role:`y`"]:
        body = publish_parts(document.rst_text(text), writer="html")["body"]
        assert html.unescape(re.sub(r"<[^>]+>", "", body)).strip() == text


def test_outcome_text_is_the_written_out_tally():
    verdicts = ["not run", "holds", "does not hold", "holds", "inconclusive (leans for)", "something else", "holds"]
    assert document.outcome_text(verdicts, "2 of the 4 decisive verdicts survive it") == (
        "7 comparisons of the paper's claims on this grid's runs: holds: 3; inconclusive (leans for): 1; "
        "does not hold: 1; not run: 1; something else: 1. 2 of the 4 decisive verdicts survive it.")
    assert document.outcome_text(["inconclusive (leans against)"]) == (
        "1 comparison of the paper's claims on this grid's runs: inconclusive (leans against): 1.")
    assert document.outcome_text([], "a family of none").endswith("runs: . A family of none.")


def test_table_html_keeps_caption_bold_and_one_datasets_block():
    df = full_grid()
    ctx = tables.build_table(df, "table1", "md")
    page = document.table_html(ctx, "Table 1", document._block_of(ctx["blocks"], "cifar100"), "made by X")
    assert html.escape(tables.build_table(df, "table1", "txt")["caption"]) in page
    assert "CIFAR-100" in page and "Synthetic" not in page  # only that dataset's block
    body = page.split("<tbody>")[1]
    assert body.count("<strong>") == sum(c.count("**") // 2 for r in ctx["blocks"][1]["rows"] for c in r) > 0
    assert "<!-- made by X -->" in page


def test_write_document_inputs_every_table_and_figure_and_shows_the_papers_numbers(tmp_path):
    from bayesncl.report import write_report

    csv = tmp_path / "runs.csv"
    full_grid().to_csv(csv, index=False)
    write_report(csv, tmp_path, echo=False, grid=ROOT / "config" / "tiny.yaml")
    stems = list(names.FIGURE_NAMES)
    written = document.write_document(csv, tmp_path, grid=ROOT / "config" / "tiny.yaml", figures=stems)
    tex = (tmp_path / "report" / "report.tex").read_text()
    inputs = re.findall(r"^\\input\{(\w+)\}", tex, re.M)
    assert inputs == ["glyphtounicode", "claims"] + [f"table{i}" for i in range(1, 8)]  # each by \input
    assert re.findall(r"\\includegraphics\[[^]]*\]\{(\w+)\}", tex) == stems
    table1 = tex[tex.index("\\input{table1}"):tex.index("\\input{table2}")]
    assert "paper 36.14 vs 14.93" in table1 and "\\textbf{1a}" in table1 and "\\textbf{2a}" not in table1
    assert provenance.stamp(ROOT / "config" / "tiny.yaml") in tex
    # The outcome line (provenance page and report) tallies the verdicts and the familywise survivors.
    from bayesncl.report.claims_table import family_tally

    judged = [c for _, cs in judge.claims_rows(full_grid()) for c in cs]
    outcome = document.outcome_text([c.verdict for c in judged], family_tally(judged))
    assert "decisive verdicts survive the familywise control" in outcome
    (prov_rst,) = [p for p in written if p.name == "provenance.rst"]
    assert f"**Outcome.** {document.rst_text(outcome)}" in prov_rst.read_text()
    assert latex_escape(outcome) in tex
    pages = document.report_pages(list(zip(full_grid()["dataset"], full_grid()["sets"])), stems)
    made = {p.relative_to(tmp_path / "report").as_posix() for p in written if "report" in p.parts}
    for page in pages:
        assert f"captions/{page.name}.rst" in made
        assert (f"html/{page.name}.html" in made) == (page.category in ("Claims", "Tables"))


def test_figures_carry_the_stamp_in_their_metadata(tmp_path):
    from PIL import Image

    from bayesncl.report import figures

    rows = [figure_row("BayesNCL (STE)", "bayesncl", 0, "table1", gate_curve=gate_curve(0.5, 0))]
    figures.render_figures(summary.prepare(pd.DataFrame(rows)), tmp_path, stamp="made by X (at Y)")
    for stem in names.FIGURE_NAMES:
        assert Image.open(tmp_path / f"{stem}.png").info["Comment"] == "made by X (at Y)"
        assert b"/Subject (made by X \\(at Y\\))" in (tmp_path / f"{stem}.pdf").read_bytes()


# --------------------------------------------------------------------------- DVC plot data
def test_plot_data_is_the_figures_means_one_file_per_line():
    rows = [figure_row("BayesNCL (STE)", "bayesncl", s, "table1;figure4a;figure4b", "figure4a:proj_dim;figure4b:lambda",
                 sc=36.0 + s, probe_top1=61.0 + s, gate_curve=gate_curve(0.5, s)) for s in range(3)]
    rows += [figure_row("BayesNCL (STE)", "bayesncl", 0, "figure4b", "figure4b:lambda", lam=lam, sc=30.0, probe_top1=50.0,
                  gate_curve=gate_curve(0.9, 0)) for lam in (0.0, 1e-3)]
    rows += [figure_row("BayesNCL (STE)", "bayesncl", 0, "figure4a", "figure4a:proj_dim", D=512, sc=40.0,
                        probe_top1=62.0)]
    data = plots.plot_data(summary.prepare(pd.DataFrame(rows)))
    gates = dict(data["gates"])
    assert len(gates) == 3  # the default point and two lambda values: three lines, three names
    default = gates["cifar100_BayesNCL_STE_lambda_3e-05"]
    curves = np.array([json.loads(gate_curve(0.5, s)) for s in range(3)]) * 100
    assert [r["epoch"] for r in default] == list(range(1, 7))
    assert np.allclose([r["open_gates"] for r in default], curves.mean(0)) and default[0]["seeds"] == 3
    (name, fig4a), = data["figure4a"]
    assert name == "cifar100_BayesNCL_STE" and [r["proj_dim"] for r in fig4a] == [256, 512]
    assert fig4a[0]["sc"] == pytest.approx(37.0) and fig4a[1]["probe_top1"] == 62.0
    assert data["figure4b_rho"] == []  # one rho value is no sweep
    (_, lam), = data["figure4b_lambda"]
    assert [r["lambda"] for r in lam] == [0.0, 3e-5, 1e-3] and lam[1]["sc"] == pytest.approx(37.0)


def test_write_plots_replaces_stale_lines(tmp_path):
    (tmp_path / "gates").mkdir()
    (tmp_path / "gates" / "old.csv").write_text("epoch,open_gates\n")
    rows = [figure_row("BayesNCL (STE)", "bayesncl", 0, "table1", gate_curve=gate_curve(0.5, 0))]
    written = plots.write_plots(summary.prepare(pd.DataFrame(rows)), tmp_path)
    assert [p.relative_to(tmp_path).as_posix() for p in written] == ["gates/cifar100_BayesNCL_STE.csv"]
    assert sorted(p.name for p in (tmp_path / "gates").iterdir()) == ["cifar100_BayesNCL_STE.csv"]
    assert list(pd.read_csv(written[0]).columns) == ["epoch", "open_gates", "sd", "seeds"]


# --------------------------------------------------------------------------- the commands' errors
def test_document_and_pdf_commands_fail_in_one_line(tmp_path, monkeypatch, capsys):
    from bayesncl.cli.main import main

    assert main(["document", "--summary", str(tmp_path / "none.csv"), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "none.csv does not exist" in err and "bayesncl summarize" in err
    monkeypatch.setattr(document.shutil, "which", lambda name: None)
    assert main(["pdf", "--tex", str(tmp_path / "report.tex"), "--out", str(tmp_path / "report.pdf")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and document.PDFLATEX_HINT in err


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="needs pdflatex")
def test_pdf_failure_names_the_latex_error_and_the_log(tmp_path):
    tex = tmp_path / "report.tex"
    tex.write_text("\\documentclass{article}\\begin{document}\\undefinedmacro\\end{document}\n")
    with pytest.raises(document.PdfError, match=r"Undefined control sequence.*report\.log"):
        document.build_pdf(tex, tmp_path / "out.pdf")
    assert not (tmp_path / "out.pdf").exists()


# --------------------------------------------------------------------------- the workflow without pdflatex
@pytest.mark.skipif(SNAKEMAKE is None, reason="snakemake not installed (pip install -e '.[workflow]')")
def test_without_pdflatex_the_workflow_says_how_to_get_it_once_and_plans_the_rest(tmp_path):
    bin_dir = tmp_path / "bin"  # the PATH's programs, pdflatex left out
    bin_dir.mkdir()
    for folder in [str(BIN), *os.environ.get("PATH", "").split(os.pathsep)]:
        for exe in Path(folder).glob("*") if Path(folder).is_dir() else ():
            if exe.name != "pdflatex" and not (bin_dir / exe.name).exists():
                (bin_dir / exe.name).symlink_to(exe)
    env = dict(os.environ, PATH=str(bin_dir), PYTHONPATH=str(ROOT / "src"))
    r = current().run([SNAKEMAKE, "-n", "--configfile", "config/tiny.yaml", "--config", f"results={tmp_path}/r"],
                      cwd=ROOT, env=env, capture_output=True, text=True)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    assert out.count(document.PDFLATEX_HINT) == 1 and "texlive-latex-recommended" in document.PDFLATEX_HINT
    assert f"{tmp_path}/r/report.pdf" not in out and not re.search(r"^pdf\s+1$", out, re.M), out[-3000:]
    assert re.search(r"^document\s+1$", out, re.M), out[-3000:]  # the HTML report's pages still come


# --------------------------------------------------------------------------- the tiny grid end to end
@pytest.fixture(scope="module")
def tiny(tiny_grid):
    """The tiny grid run by the workflow (conftest.py; with the PDF where pdflatex exists) and its HTML report."""
    out, args, _ = tiny_grid
    report = out.parent / "report.html"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1")
    r = current().run([SNAKEMAKE, "--report", str(report), *args], cwd=ROOT, env=env, capture_output=True,
                      text=True, timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-5000:]
    return out, report


def _md_caption(path: Path) -> str:
    """A generated Markdown table's caption: the text after its bold title."""
    line = next(ln for ln in path.read_text().splitlines() if ln.startswith("**"))
    return re.sub(r"^\*\*[^*]+\*\* ", "", line).replace("\\|", "|")


def _key(text: str) -> str:
    """Letters and digits only: line breaks, hyphenation and math glyphs do not matter."""
    return re.sub(r"[^a-z0-9]", "", unicodedata.normalize("NFKC", text).lower())


TABLE_FILES = [f"table{i}" for i in range(1, 8)] + ["claims"]


def _claim_ids() -> set[str]:
    return {c.claim for _, comps in judge.claims_rows(summary.prepare(pd.DataFrame())) for c in comps}


@pytest.mark.long
@pytest.mark.skipif(shutil.which("pdflatex") is None or shutil.which("pdftotext") is None,
                    reason="needs pdflatex and pdftotext (Debian: texlive-latex-base texlive-latex-recommended "
                           "poppler-utils; .ci/run installs them)")
def test_pdf_has_every_caption_claim_and_the_commit_and_no_overfull_box(tiny):
    out, _ = tiny
    pdf = out / "report.pdf"
    pages = subprocess.run(["pdftotext", "-layout", str(pdf), "-"], capture_output=True, text=True,
                           check=True).stdout.split("\f")
    text = _key(" ".join(pages))
    for name in TABLE_FILES:
        caption = _md_caption(out / "tables" / f"{name}.md")
        assert _key(caption) in text, f"{name}'s caption is not in {pdf}"
    claims_pages = []
    for page in pages:
        if "Tables 1" in page and "Each table is the generated file" in page:
            break
        claims_pages.append(page)
    # a row's id, its width or architecture suffix (10b-16, 1a-r50) left out: the ids the empty table lists
    ids = {m.group(1) for page in claims_pages for m in re.finditer(r"^\s*(\d+[a-z]?)(?:-\w+)?\s", page, re.M)}
    assert _claim_ids() <= ids, f"claims missing from the claims table: {_claim_ids() - ids}"
    provenance_page = next(p for p in pages if "Provenance" in p and "Grid config" in p)
    assert HEAD in provenance_page and "config/tiny.yaml" in provenance_page
    assert "Seeds" in provenance_page and "torch" in provenance_page and "snakemake" in provenance_page
    log = (out / "report" / "report.log").read_text(errors="replace")
    assert "Overfull \\hbox" not in log and "Overfull \\vbox" not in log and "Float too large" not in log
    for figure in (out / "figures").glob("*.pdf"):  # every figure is in the document
        assert re.search(rf"<\.\./figures/+{figure.name}", log), figure.name


def _report_data(report: Path) -> tuple[dict, dict, str]:
    text = report.read_text()
    results = json.loads(re.search(r"var results = (\{.*?\});\n", text, re.S).group(1))
    categories = json.loads(re.search(r"var categories = (\{.*?\});\n", text, re.S).group(1))
    desc = json.loads(re.search(r"var workflow_desc = (.*?);\n", text, re.S).group(1))
    return results, categories, desc


def _plain(caption_html: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", caption_html)).split())


@pytest.mark.long
def test_html_report_has_every_table_figure_and_caption(tiny):
    out, report = tiny
    results, categories, desc = _report_data(report)
    assert set(categories) == {"Claims", "Tables", "Figures", "Atlas"}
    by_name = {Path(path).name: rec for path, rec in results.items()}
    for name in TABLE_FILES:
        page = "claims.html" if name == "claims" else f"{name}_synthetic.html"
        rec = by_name[page]
        assert rec["mime_type"] == "text/html", page  # rendered, not a download
        assert " ".join(_md_caption(out / "tables" / f"{name}.md").split()) in _plain(rec["caption"]), page
        assert rec["labels"]["dataset"] == "Synthetic"
        body = (out / "report" / "html" / page).read_text()
        assert html.escape(_md_caption(out / "tables" / f"{name}.md")) in body
    for png in (out / "figures").glob("*.png"):
        rec = by_name[png.name]
        title, caption = document.figure_caption(png.stem)
        assert rec["mime_type"] == "image/png" and " ".join(caption.split()) in _plain(rec["caption"]), png.name
    assert HEAD in _plain(desc) and "config/tiny.yaml" in _plain(desc)


@pytest.mark.long
def test_every_generated_file_names_its_commit_and_grid(tiny):
    out, _ = tiny
    from PIL import Image

    want = provenance.stamp("config/tiny.yaml")
    for path in [*(out / "tables").iterdir(), *(out / "report" / "html").iterdir(), out / "report" / "report.tex"]:
        assert want in path.read_text(), path
    for png in (out / "figures").glob("*.png"):
        assert Image.open(png).info.get("Comment") == want, png
    in_pdf = want.replace("(", r"\(").replace(")", r"\)").encode()  # a PDF string escapes parentheses
    for pdf in (out / "figures").glob("*.pdf"):
        assert in_pdf in pdf.read_bytes(), pdf
    prov = json.loads((out / "report" / "provenance.json").read_text())
    assert prov["git"]["commit"] == HEAD and prov["seeds"] == [0] and prov["runs"] > 0
    assert prov["grid_sha256"] == [hashlib.sha256((ROOT / "config" / "tiny.yaml").read_bytes()).hexdigest()]
    assert prov["grid"] == ["config/tiny.yaml"]
    assert yaml.safe_load((ROOT / "config" / "tiny.yaml").read_text())["seeds"] == prov["seeds"]


def test_build_pdf_reads_a_pdflatex_output_with_a_split_utf8_character(tmp_path, monkeypatch):
    """pdflatex wraps its output at 79 bytes, cutting a multi-byte character in two (a '·' of the title did)."""
    from bayesncl.report.document import build_pdf

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "pdflatex"
    fake.write_text("#!/bin/sh\nfor a; do f=$a; done\nprintf 'Grid x \\302\\n\\267 commit\\n'\n"
                    "printf '%%PDF-1.4\\n' > \"${f%.tex}.pdf\"\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    tex = tmp_path / "doc" / "report.tex"
    tex.parent.mkdir()
    tex.write_text("\\documentclass{article}\\begin{document}x\\end{document}\n")
    out = build_pdf(tex, tmp_path / "report.pdf")
    assert out.read_bytes().startswith(b"%PDF")


def test_the_document_judges_the_claims_its_own_grid_declares(tmp_path):
    import yaml

    csv = tmp_path / "runs.csv"
    full_grid().to_csv(csv, index=False)
    grid = tmp_path / "mine.yaml"
    grid.write_text(yaml.safe_dump({"claims": [{"id": "Q7", "metric": "sc", "left": "NCL", "right": "SimCLR",
                                                "relation": ">"}]}))
    shown = {}
    for name, given in (("with", grid), ("without", None)):
        document.write_document(csv, tmp_path / name, grid=given)
        page = (tmp_path / name / "report" / "html" / "claims.html").read_text()
        tex = (tmp_path / name / "report" / "report.tex").read_text()
        shown[name] = ("Q7" in page, "Q7" in tex)
    assert shown == {"with": (True, True), "without": (False, False)}
