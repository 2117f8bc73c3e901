"""Every generated table compiles with pdflatex and fits a two-column paper (no overfull box).

Geometry: the ICML style's (10 pt, two columns, text width 6.75 in, column separation 0.25 in, so a
column is 3.25 in). ``table`` floats must fit the column, ``table*`` floats the text width.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pandas as pd
import pytest

from bayesncl.report import claims_table, summary, tables
from helpers.claims import frame, full_grid, row, with_twins
from helpers.report import GOLDEN

pytestmark = pytest.mark.skipif(
    shutil.which("pdflatex") is None,
    reason="pdflatex not installed (Debian: apt-get install texlive-latex-base texlive-latex-recommended; "
           ".ci/run installs them)")

DOCUMENT = r"""\documentclass[twocolumn,10pt]{article}
\usepackage[letterpaper,textwidth=6.75in,textheight=9in,columnsep=0.25in]{geometry}
\usepackage{booktabs,array}
\begin{document}
%s
\end{document}
"""


def _long_names():
    """The demo grid with longer names and larger numbers than any config of the project uses."""
    df = full_grid()
    df["variant"] = df["variant"].replace({"BayesNCL (Gumbel)": "BayesNCL (Gumbel, 3-layer)"})
    df.loc[df["variant"] == "NCL", "img_per_s"] = 123456.0
    df.loc[df["variant"] == "NCL", "sc"] = -100.0  # a sign and three digits
    df.loc[df["variant"] == "Top-k NCL", "topk_bound"] = 0.0  # flagged rows
    # A collapsed seed (NaN) on each side of the claims: cells that count "(k/n; j NaN)"
    df.loc[(df["variant"] == "BayesNCL (STE)") & (df["seed"] == 1), ["sc", "se_sum", "probe_top1"]] = float("nan")
    df.loc[(df["variant"] == "NCL") & (df["seed"] == 2), ["dyn_af_gv", "bg_acc"]] = ["[0.1, null]", float("nan")]
    extra = [row(v, 0, "figure4a", dataset=d, proj_dim=2048.0, sc=-123.45, probe_top1=60.0)  # the paper's 4 widths
             for d in ("synthetic", "cifar100") for v in ("NCL", "BayesNCL (STE)")]
    return pd.concat([df, frame(extra)], ignore_index=True)


def _sources():
    yield "golden", summary.read_summary(GOLDEN / "runs.csv")
    yield "full", full_grid()
    yield "long", _long_names()
    yield "mixed", frame([row("NCL", 0, "table1;table2;table6", sc=1.0, probe_protocol="fast", bg_protocol="fast"),
                          row("BayesNCL (STE)", 0, "table1;table2;table6", sc=2.0, probe_protocol="paper",
                              bg_protocol="paper", arch="resnet50"),
                          row("BayesNCL (STE)", 1, "table1;table2", sc=3.0, probe_protocol="paper")])
    yield "empty", frame([])
    # the initialisation control's cells filled (untrained twins of every run, as grid.expand.plan_init_runs plans them)
    yield "twins", with_twins(_long_names(), lambda r: {"sc": -50.5 + r["seed"], "se_sum": 2.5 - r["seed"] / 10,
                                                        "probe_top1": 12.25 * (1 + r["seed"]), "ret_p10": 10.0,
                                                        "bg_acc": 50.0 + r["seed"]})


def _compile(tmp_path, name: str, files: list[str]) -> str:
    parts = [f"\\typeout{{@@ {f}}}\\input{{{f}}}\\clearpage" for f in files]
    (tmp_path / f"{name}.tex").write_text(DOCUMENT % "\n".join(parts))
    proc = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", f"{name}.tex"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    log = (tmp_path / f"{name}.log").read_text(errors="replace")
    assert proc.returncode == 0, f"pdflatex failed on {name}:\n{log[-3000:]}"
    return log


@pytest.mark.parametrize("source", [s for s, _ in _sources()])
def test_every_table_compiles_without_overfull_boxes(tmp_path, source):
    df = dict(_sources())[source]
    written = tables.render_tables(df, tmp_path) + claims_table.write_claims(df, tmp_path)
    files = sorted(p.name for p in written if p.suffix == ".tex")
    assert len(files) == len(tables.TABLES) + 1
    log = _compile(tmp_path, "doc", files)
    current, overfull = None, []
    for line in log.splitlines():
        if line.startswith("@@ "):
            current = line[3:]
        m = re.match(r"Overfull \\hbox \(([\d.]+)pt too wide\)", line)
        if m:
            overfull.append(f"{current}: {m.group(1)} pt too wide")
    assert not overfull, f"{source}: " + "; ".join(overfull)
    assert "Float too large" not in log, f"{source}: a table is taller than the page"


def test_overfull_boxes_are_detected(tmp_path):
    """The check above can fail: a table too wide for a column is reported."""
    (tmp_path / "wide.tex").write_text(r"\begin{table}\begin{tabular}{l}" + "x" * 200 + r"\end{tabular}\end{table}")
    assert re.search(r"Overfull \\hbox", _compile(tmp_path, "doc", ["wide.tex"]))
