"""Tests for bayesncl.atomic and bayesncl.report (fast; no torch)."""

from __future__ import annotations

import os
import stat

import pytest

from bayesncl.atomic import atomic_path, atomic_write_bytes, atomic_write_text


# --------------------------------------------------------------------------- atomic writes
def test_atomic_write_text_creates_parents_and_replaces(tmp_path):
    target = tmp_path / "a" / "b" / "metrics.json"
    atomic_write_text(target, "one\n")
    assert target.read_text() == "one\n"
    atomic_write_text(target, "two\n")
    assert target.read_text() == "two\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["metrics.json"]
    # Same permissions as a plain open() would give, not mkstemp's 0600.
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~mask


def test_atomic_write_bytes(tmp_path):
    target = tmp_path / "x.bin"
    atomic_write_bytes(target, b"\x00\x01")
    assert target.read_bytes() == b"\x00\x01"


def test_atomic_path_failure_leaves_no_file_and_no_temp(tmp_path):
    target = tmp_path / "out" / "table.tex"
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("partial")
            raise RuntimeError("boom")
    assert not target.exists()
    assert list(target.parent.iterdir()) == []


def test_atomic_path_failure_keeps_previous_content(tmp_path):
    target = tmp_path / "table.tex"
    target.write_text("old")
    with pytest.raises(KeyboardInterrupt):
        with atomic_path(target) as tmp:
            tmp.write_text("new")
            raise KeyboardInterrupt
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["table.tex"]


def test_atomic_path_temp_is_sibling_with_same_suffix(tmp_path):
    target = tmp_path / "vectors.npz"
    with atomic_path(target) as tmp:
        assert tmp.parent == target.parent and tmp.suffix == ".npz" and tmp != target
        assert not target.exists()  # invisible until the block succeeds
        tmp.write_bytes(b"data")
    assert target.read_bytes() == b"data"


# --------------------------------------------------------------------------- report helpers
import io  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import re  # noqa: E402
from pathlib import Path  # noqa: E402

import pandas as pd  # noqa: E402

from bayesncl.report import summary as summ  # noqa: E402
from bayesncl.report import tables  # noqa: E402

GOLDEN = Path(__file__).with_name("golden")


def _frame(rows):
    """A summary frame from partial row dicts (missing columns become NaN / "")."""
    return summ.prepare(pd.DataFrame(rows))


def _row(variant, seed, dataset="cifar10", method="bayesncl", sets="table1", **metrics):
    return {"run_id": f"{dataset}/{variant}/seed~{seed}", "dataset": dataset, "arch": "resnet18",
            "method": method, "variant": variant, "sets": sets, "seed": seed, **metrics}


def _cells(tex: str, label: str) -> list[str]:
    """The cells of the LaTeX row starting with ``label``."""
    for line in tex.splitlines():
        if line.startswith(label + " &") or line.startswith(label + "$^"):
            return [c.strip() for c in line.removesuffix(r"\\").split(" & ")][1:]
    raise AssertionError(f"no row {label!r} in\n{tex}")


def _md_rows(md: str) -> list[list[str]]:
    """The cells of every Markdown table row (the header first; the alignment row left out)."""
    rows = [[c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]] for line in md.splitlines()
            if line.startswith("|")]
    return [r for r in rows if not all(set(c) <= set(":-") for c in r)]


def _md_cells(md: str, label: str) -> list[str]:
    rows = [r for r in _md_rows(md) if r[0] == label]
    assert rows, f"no row {label!r} in\n{md}"
    return rows[0][1:]


def _write_metrics(path: Path, data: dict) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return str(path)


FULL_METRICS = {
    "run": {"dataset": "cifar100", "arch": "resnet18", "method": "bayesncl", "gate": "ste",
            "detach": True, "head_depth": 2, "rho": 0.8, "lambda": 3e-5, "proj_dim": 256, "seed": 1},
    "interpretability": {"sc": 36.1, "se_sum": 1.2, "se_mean": 1.3, "se_freq": 1.4, "act": 12.5,
                         "alive": 200, "alive_frac": 0.78, "bg_dominated_zplus": 0.1,
                         "bg_dominated_feature": 0.05, "closed_bg": 0.7, "closed_cls": 0.2},
    "linear_probe": {"top1": 70.4, "top5": 91.0, "protocol": "fast"},
    "retrieval": {"K": 128, "p@1": 0.60, "p@3": 0.58, "p@5": 0.57, "p@10": 0.55,  # fractions
                  "curve": {"128": 0.55, "32": 0.40, "64": 0.50}},
    "background": {"acc": 93.4, "protocol": "fast", "target": "place"},
    "dynamics": {"epochs": [10, 20], "af_gv": [0.5, 0.3], "gv_sc": [-0.4, -0.2], "af_sc": [0.1, 0.2]},
    "cost": {"gflops": 1.419, "params_m": 11.9, "sec_per_epoch": 21.0, "img_per_s": 2400.0,
             "peak_mem_mb": 5000.0, "train_minutes": 75.1},
    "training": {"epochs": [1, 2, 3], "loss": [5.0, 4.5, None], "open_gates": [1.0, 0.8, 0.55],
                 "open_gates_last": 0.55},
}
FULL_METRICS["run"]["weights_sha"] = "0123456789ab"


# --------------------------------------------------------------------------- summary
def test_summarize_flattens_every_section(tmp_path):
    m = _write_metrics(tmp_path / "results/runs/cifar100/resnet18/bayesncl/rho~0.8/seed~1/eval/metrics.json",
                       FULL_METRICS)
    df = summ.summarize([{"metrics": m, "sets": ["table1", "figure3"], "variant": "BayesNCL (STE)",
                          "sweep": "rho"}])
    assert list(df.columns) == summ.COLUMNS
    r = df.iloc[0]
    assert r["run_id"] == "cifar100/resnet18/bayesncl/rho~0.8/seed~1"
    assert (r["dataset"], r["arch"], r["method"], r["variant"]) == ("cifar100", "resnet18", "bayesncl",
                                                                    "BayesNCL (STE)")
    assert r["sets"] == "table1;figure3" and r["sweep"] == "rho" and r["gate"] == "ste"
    assert (r["rho"], r["lambda"], r["proj_dim"], r["seed"], r["head_depth"]) == (0.8, 3e-5, 256, 1, 2)
    assert r["sc"] == 36.1 and r["alive"] == 200 and r["bg_dominated_feature"] == 0.05
    assert (r["probe_top1"], r["probe_top5"], r["probe_protocol"]) == (70.4, 91.0, "fast")
    assert r["ret_K"] == 128  # P@k: a fraction in metrics.json, percent in runs.csv
    assert (r["ret_p1"], r["ret_p10"]) == (pytest.approx(60.0), pytest.approx(55.0))
    assert json.loads(r["ret_curve"]) == pytest.approx({"32": 40.0, "64": 50.0, "128": 55.0})
    assert list(json.loads(r["ret_curve"])) == ["32", "64", "128"]  # sorted numerically
    assert (r["bg_acc"], r["bg_protocol"]) == (93.4, "fast")
    assert json.loads(r["dyn_gv_sc"]) == [-0.4, -0.2] and json.loads(r["dyn_epochs"]) == [10, 20]
    assert (r["gflops"], r["train_minutes"]) == (1.419, 75.1)
    assert r["weights_sha"] == "0123456789ab" and (r["closed_bg"], r["closed_cls"]) == (0.7, 0.2)
    assert math.isnan(r["topk_bound"]) and math.isnan(r["topk_removed"])  # Top-k NCL only
    assert r["open_gates_last"] == 0.55 and json.loads(r["gate_curve"]) == [1.0, 0.8, 0.55]
    assert json.loads(r["loss_curve"]) == [5.0, 4.5, None]


def test_summarize_topk_fields(tmp_path):
    m = _write_metrics(tmp_path / "runs/t/seed~0/eval/metrics.json",
                       {"run": {"dataset": "synthetic", "method": "topk_ncl", "weights_sha": "00ff"},
                        "interpretability": {"sc": 5.0, "topk_bound": 0.0, "topk_removed": 0.0}})
    r = summ.summarize([{"metrics": m, "sets": ["table1"]}]).iloc[0]
    assert (r["topk_bound"], r["topk_removed"], r["weights_sha"]) == (0.0, 0.0, "00ff")
    assert r["gate_curve"] == "" and math.isnan(r["open_gates_last"]) and math.isnan(r["closed_bg"])

def test_summarize_missing_sections_are_empty(tmp_path):
    m = _write_metrics(tmp_path / "runs/cifar10/resnet18/cl/seed~2/eval/metrics.json",
                       {"run": {"dataset": "cifar10", "arch": "resnet18", "method": "cl"},
                        "interpretability": {"sc": 10.0}})
    r = summ.summarize([{"metrics": m, "sets": []}]).iloc[0]
    assert r["variant"] == "SimCLR"  # default display name when the manifest gives none
    assert r["seed"] == 2  # recovered from the seed~2 path component
    assert r["sc"] == 10.0 and math.isnan(r["se_sum"]) and math.isnan(r["probe_top1"])
    assert r["ret_curve"] == "" and r["probe_protocol"] == "" and r["dyn_epochs"] == "" and r["sets"] == ""
    assert math.isnan(r["gflops"])


def test_summarize_nested_run_config_and_relative_paths(tmp_path):
    _write_metrics(tmp_path / "results/runs/a/seed~0/eval/metrics.json",
                   {"run": {"dataset": "cifar10", "method": "ncl", "model": {"proj_dim": 128},
                            "seed": 0}})
    df = summ.summarize([{"metrics": "results/runs/a/seed~0/eval/metrics.json", "sets": ["table1"]}],
                        base_dir=tmp_path)
    assert df.iloc[0]["proj_dim"] == 128 and df.iloc[0]["run_id"] == "a/seed~0"


def test_summarize_errors_name_the_file(tmp_path):
    missing = tmp_path / "nope" / "metrics.json"
    with pytest.raises(summ.MetricsFileError, match=re.escape(str(missing))):
        summ.summarize([{"metrics": str(missing), "sets": []}])
    bad = tmp_path / "bad" / "metrics.json"
    bad.parent.mkdir()
    bad.write_text("{not json")
    with pytest.raises(summ.MetricsFileError, match=re.escape(str(bad))):
        summ.summarize([{"metrics": str(bad), "sets": []}])
    with pytest.raises(summ.ManifestError, match="entry 0"):
        summ.summarize([{"sets": ["table1"]}])


def test_summarize_merges_duplicate_entries(tmp_path):
    m = _write_metrics(tmp_path / "runs/x/seed~0/eval/metrics.json", FULL_METRICS)
    df = summ.summarize([{"metrics": m, "sets": ["table1"], "variant": "BayesNCL"},
                         {"metrics": m, "sets": ["table2", "table1"], "variant": "BayesNCL"},
                         {"metrics": m, "sets": ["table4"], "variant": "STE (default)"}])
    assert list(df["sets"]) == ["table1;table2", "table4"]


def test_sweep_hint_accepts_dotted_config_keys(tmp_path):
    m = _write_metrics(tmp_path / "runs/x/seed~0/eval/metrics.json", FULL_METRICS)
    df = summ.summarize([{"metrics": m, "variant": v, "sweep": h} for v, h in
                         (("a", "method.rho"), ("b", "method.lambda"), ("c", "model.proj_dim"),
                          ("d", "width"), ("e", None),
                          ("f", ["model.proj_dim", "method.rho", "method.lambda"]))])
    assert list(df["sweep"]) == ["rho", "lambda", "width", "width", "", "width;rho;lambda"]


def test_write_summary_roundtrip(tmp_path):
    m = _write_metrics(tmp_path / "runs/x/seed~0/eval/metrics.json", FULL_METRICS)
    m2 = _write_metrics(tmp_path / "runs/y/seed~0/eval/metrics.json", {"run": {"dataset": "cifar10"}})
    manifest = tmp_path / "manifest.json"
    m3 = _write_metrics(tmp_path / "runs/z/seed~0/eval/metrics.json", FULL_METRICS)
    manifest.write_text(json.dumps([{"metrics": m, "sets": ["table1"], "variant": "B"},
                                    {"metrics": m2, "sets": ["table2"]},
                                    {"metrics": m3, "sets": ["table4"], "variant": "ablation"}]))
    out = tmp_path / "summary" / "runs.csv"
    df = summ.write_summary(manifest, out)
    back = summ.read_summary(out)
    pd.testing.assert_frame_equal(df, back)
    assert sorted(p.name for p in out.parent.iterdir()) == ["metrics.json", "runs.csv"]  # no temp files left
    headline = json.loads((out.parent / "metrics.json").read_text())
    assert set(headline) == {str(d) for d in df["dataset"]}
    row = df[df["variant"] == "B"].iloc[0]
    assert headline[str(row["dataset"])]["B"]["sc"] == pytest.approx(row["sc"], abs=1e-4)
    assert "ablation" not in headline[str(row["dataset"])]  # only the main comparison (Tables 1-2)
    # JSON-lines manifests and {"runs": [...]} are accepted too.
    manifest.write_text("\n".join(json.dumps(e) for e in [{"metrics": m, "sets": ["table1"]}]))
    assert len(summ.load_manifest(manifest)) == 1
    manifest.write_text(json.dumps({"runs": [{"metrics": m}]}))
    assert len(summ.load_manifest(manifest)) == 1


# --------------------------------------------------------------------------- tables
def test_bold_only_where_the_printed_best_beats_the_runner_up():
    # Both print as 30.00: a tie as printed, so no bold (the unrounded 30.004 is not "best").
    df = _frame([_row("A", 0, sc=30.001), _row("A", 1, sc=30.001),
                 _row("B", 0, sc=30.004), _row("B", 1, sc=30.004), _row("C", 0, sc=10.0), _row("C", 1, sc=10.0)])
    tex = tables.render_table(df, "table1")
    assert _cells(tex, "A")[0] == r"$30.00_{\pm 0.00}$" and _cells(tex, "B")[0] == r"$30.00_{\pm 0.00}$"
    # 30.001 vs 30.006 print as 30.00 vs 30.01: B is the best as printed.
    df = _frame([_row("A", 0, sc=30.001), _row("B", 0, sc=30.006)])
    assert _cells(tables.render_table(df, "table1"), "B")[0] == r"$\mathbf{30.01}$"
    assert _cells(tables.render_table(df, "table1"), "A")[0] == "$30.00$"
    # Table 7: two equal GFLOPs as printed (the old Table 7 bolded one of two equal values).
    cost = _frame([_row("A", 0, sets="table7", gflops=1.4161), _row("B", 0, sets="table7", gflops=1.4159)])
    assert "mathbf" not in tables.render_table(cost, "table7")


def naive_bold(means: list[float], decimals: int, up: bool) -> list[bool]:
    """Reference: bold the unique best of the printed values."""
    printed = [round(m, decimals) for m in means]
    best = max(printed) if up else min(printed)
    return [p == best and printed.count(best) == 1 for p in printed]


def test_bold_matches_naive_rule():
    import random
    rng = random.Random(1)
    for _ in range(20):
        means = [round(rng.uniform(1, 1.02), 4) for _ in range(4)]  # close: ties as printed happen
        df = _frame([_row(v, 0, se_sum=m) for v, m in zip("ABCD", means)])
        tex = tables.render_table(df, "table1")
        got = [r"\mathbf" in _cells(tex, v)[1] for v in "ABCD"]
        assert got == naive_bold(means, 3, up=False), means


def test_directions_and_arrows():
    df = _frame([_row("A", 0, se_sum=1.0, act=40.0, sc=5.0, alive=10),
                 _row("B", 0, se_sum=2.0, act=20.0, sc=9.0, alive=20)])
    tex = tables.render_table(df, "table1")
    a, b = _cells(tex, "A"), _cells(tex, "B")
    assert a[1] == r"$\mathbf{1.000}$" and b[1] == "$2.000$"      # SE-Sum: lower wins
    assert a[0] == "$5.00$" and b[0] == r"$\mathbf{9.00}$"        # SC: higher wins
    assert "mathbf" not in a[4] + b[4] + a[5] + b[5]              # Act. and alive dims: no direction
    assert r"SC $\uparrow$ & SE-Sum $\downarrow$" in tex and r"Act. &" in tex and r"Act. $\downarrow$" not in tex
    cost = _frame([_row("A", 0, sets="table7", gflops=1.0, img_per_s=100.0),
                   _row("B", 0, sets="table7", gflops=2.0, img_per_s=200.0)])
    tex = tables.render_table(cost, "table7")
    assert _cells(tex, "A")[0] == r"$\mathbf{1.000}$" and _cells(tex, "B")[3] == r"$\mathbf{200}$"


def test_costs_print_significant_digits():
    # The demo's model costs ~0.001 GFLOPs: fixed 3 decimals would print 0.001 for both sides.
    cost = _frame([_row("NCL", 0, method="ncl", sets="table7", gflops=0.0011397, train_minutes=0.00800),
                   _row("BayesNCL", 0, sets="table7", gflops=0.0011432, train_minutes=70.95)])
    tex = tables.render_table(cost, "table7")
    assert _cells(tex, "NCL")[0] == r"$\mathbf{0.001140}$" and _cells(tex, "BayesNCL")[0] == "$0.001143$"
    assert _cells(tex, "NCL")[5] == r"$\mathbf{0.008000}$" and _cells(tex, "BayesNCL")[5] == "$70.95$"


def test_table6_background_columns_in_percent_never_bold():
    df = _frame([_row("NCL", s, method="ncl", sets="table6", bg_acc=90.0 + s, bg_dominated_zplus=0.25,
                      bg_dominated_feature=0.2) for s in range(2)]
                + [_row("BayesNCL", s, sets="table6", bg_acc=95.0 + s, bg_dominated_zplus=0.125,
                        bg_dominated_feature=0.05, closed_bg=0.6 + s / 10, closed_cls=0.1) for s in range(2)])
    tex = tables.render_table(df, "table6")
    assert _cells(tex, "NCL") == [r"$90.50_{\pm 0.71}$", r"$25.0_{\pm 0.0}$", r"$20.0_{\pm 0.0}$", "--", "--"]
    assert _cells(tex, "BayesNCL") == [r"$95.50_{\pm 0.71}$", r"$12.5_{\pm 0.0}$", r"$5.0_{\pm 0.0}$",
                                       r"$65.0_{\pm 7.1}$", r"$10.0_{\pm 0.0}$"]
    assert "mathbf" not in tex and r"\uparrow" not in tex  # no better direction for the background
    md = tables.render_table(df, "table6", "md")
    assert _md_rows(md)[0] == ["Method", "BG acc.", "BG-dom. z+", "BG-dom. feat.", "Closed BG", "Closed cls."]


def test_retrieval_in_percent_from_metrics_json(tmp_path):
    metrics = {"run": {"dataset": "cifar10", "method": "ncl", "seed": 0},
               "linear_probe": {"top1": 55.5, "protocol": "fast"},
               "retrieval": {"K": 64, "p@1": 0.5, "p@3": 0.25, "p@5": 0.125, "p@10": 0.0625}}
    m = _write_metrics(tmp_path / "runs/n/seed~0/eval/metrics.json", metrics)
    df = summ.summarize([{"metrics": m, "sets": ["table2"]}])
    assert _cells(tables.render_table(df, "table2"), "NCL") == ["$55.50$", "--", "$50.00$", "$25.00$", "$12.50$",
                                                                 "$6.25$"]


def test_std_over_seeds_and_caption_seed_count():
    df = _frame([_row("A", s, sc=v) for s, v in enumerate([10.0, 12.0, 14.0])]
                + [_row("B", s, sc=v) for s, v in enumerate([1.0, 2.0, 3.0])])
    tex = tables.render_table(df, "table1")
    assert _cells(tex, "A")[0] == r"$\mathbf{12.00}_{\pm 2.00}$"  # sample std (ddof=1)
    assert r"Mean $\pm$ std over 3 seeds." in tex
    md = tables.render_table(df, "table1", "md")
    assert "Mean ± std over 3 seeds." in md and _md_cells(md, "A")[0] == "**12.00 ± 2.00**"


def test_one_caption_for_both_formats():
    df = _frame([_row("A", s, sc=1.0 + s, probe_protocol="paper") for s in range(3)]
                + [_row("B", 0, sc=5.0, probe_protocol="fast")])
    df["sets"] = ";".join(f"table{i}" for i in range(1, 8))
    for name in [f"table{i}" for i in range(1, 8)]:
        tex, md = tables.build_table(df, name, "tex")["caption"], tables.build_table(df, name, "md")["caption"]
        plain = re.sub(r"\$\^\{(.*?)\}\$", r"(\1)", tex).replace(r"$\pm$", "±").replace(r"\%", "%")
        plain = plain.replace("$z^+$", "z+").replace(r"$^\dagger$", "†").replace("$", "")
        assert plain == md, name


def test_caption_says_when_seed_counts_differ():
    df = _frame([_row("A", s, sc=1.0 + s) for s in range(3)] + [_row("B", 0, sc=5.0)])
    tex = tables.render_table(df, "table1")
    assert "over 3 seeds; seed counts differ" in tex
    assert _cells(tex, "B")[0] == r"$\mathbf{5.00}$"  # single seed: mean only, no "± 0.00"
    assert r"B$^{n=1}$ &" in tex
    assert _md_cells(tables.render_table(df, "table1", "md"), "B (n=1)")[0] == "**5.00**"
    single = tables.render_table(_frame([_row("A", 0, sc=1.0)]), "table1")
    assert "Single seed (mean only, no std)." in single


def test_nan_never_bold_and_rendered_as_dash():
    df = _frame([_row("A", 0, sc=float("nan"), se_sum=1.0), _row("B", 0, sc=5.0, se_sum=2.0),
                 _row("C", 0, sc=4.0, se_sum=3.0)])
    tex = tables.render_table(df, "table1")
    assert _cells(tex, "A")[0] == "--" and _cells(tex, "B")[0] == r"$\mathbf{5.00}$"
    md = tables.render_table(df, "table1", "md")
    assert _md_cells(md, "A")[:2] == ["-", "**1.000**"]


def test_simclr_retrieval_is_a_dash():
    df = _frame([_row("SimCLR", 0, method="cl", sets="table2", probe_top1=80.0, ret_K=64, ret_p1=99.0),
                 _row("NCL", 0, method="ncl", sets="table2", probe_top1=81.0, ret_K=64, ret_p1=50.0)])
    tex = tables.render_table(df, "table2")
    assert _cells(tex, "SimCLR")[2:] == ["--"] * 4
    assert _cells(tex, "NCL")[0] == r"$\mathbf{81.00}$"
    assert "$K = 64$" in tex


def test_probe_protocol_note():
    fast = _frame([_row("A", 0, sets="table2", probe_top1=1.0, probe_protocol="fast")])
    assert "Linear probe: fast protocol" in tables.render_table(fast, "table2")
    mixed = _frame([_row("A", 0, sets="table2", probe_top1=1.0, probe_protocol="fast"),
                    _row("B", 0, sets="table2", probe_top1=2.0, probe_protocol="paper")])
    tex = tables.render_table(mixed, "table2")
    assert "Linear probe: paper protocol" in tex and r"A$^\dagger$ &" in tex
    assert r"rows marked $^\dagger$ use the fast protocol" in tex


def test_latex_escaping():
    assert tables.latex_escape(r"a_b & 50% #1 $x$ {y} ~ ^ \z") == (
        r"a\_b \& 50\% \#1 \$x\$ \{y\} \textasciitilde{} \textasciicircum{} \textbackslash{}z")
    df = _frame([_row("Top-k_NCL & 50%", 0, sc=1.0, dataset="my_data")])
    tex = tables.render_table(df, "table1")
    assert r"Top-k\_NCL \& 50\% &" in tex and r"\textit{my\_data}" in tex
    assert tables.caption_text("share (%) of $z^+$, a|b", "tex") == r"share (\%) of $z^+$, a|b"
    assert tables.caption_text("share (%) of $z^+$, a|b", "md") == r"share (%) of z+, a\|b"


def test_table3_dynamics_per_epoch():
    df = _frame([_row("NCL", s, method="ncl", sets="table3", dyn_epochs="[10, 20]",
                      dyn_af_gv=json.dumps([0.5 + s / 10, 0.4]), dyn_gv_sc="[-0.3, -0.2]",
                      dyn_af_sc="[0.1, 0.2]") for s in range(2)]
                + [_row("BayesNCL", 0, sets="table3")])
    tex = tables.render_table(df, "table3")
    assert r"NCL & 10 & $0.550_{\pm 0.071}$ & $-0.300_{\pm 0.000}$ & $0.100_{\pm 0.000}$ \\" in tex
    assert r" & 20 & $0.400_{\pm 0.000}$" in tex
    assert "BayesNCL$^{n=1}$ & -- & -- & -- & --" in tex


def _check_latex(tex: str, ncols: int) -> None:
    body = re.sub(r"\\[{}%&$#_]", "", tex)
    body = "\n".join(line for line in body.splitlines() if not line.startswith("%"))
    assert body.count("{") == body.count("}"), "unbalanced braces"
    assert body.count("$") % 2 == 0, "unbalanced math"
    for word in (r"\toprule", r"\midrule", r"\bottomrule", r"\begin{tabular}", r"\end{table"):
        assert word in tex
    inside = body.split(r"\toprule")[1].split(r"\bottomrule")[0]
    for line in inside.splitlines():
        if line.strip() and line.strip() != r"\midrule" and not line.startswith(r"\multicolumn"):
            assert line.count("&") == ncols - 1, line


def test_every_table_has_every_variant_row_and_is_wellformed(tmp_path):
    sets = ";".join(f"table{i}" for i in range(1, 8))
    rows = [_row(v, s, dataset=d, method=m, sets=sets, sc=float(s), probe_top1=50.0 + s, ret_K=64,
                 ret_p10=40.0, gflops=1.4, bg_acc=93.0, dyn_epochs="[10]", dyn_af_gv="[0.5]",
                 dyn_gv_sc="[0.1]", dyn_af_sc="[0.2]")
            for d in ("cifar10", "imagenet100") for v, m in (("SimCLR", "cl"), ("NCL", "ncl"),
                                                               ("BayesNCL (soft)", "bayesncl"))
            for s in range(2)]
    df = _frame(rows + [_row("Only-in-4", 0, sets="table4", sc=1.0)])
    written = tables.render_tables(df, tmp_path)
    assert sorted(p.name for p in written) == sorted(f"table{i}.{e}" for i in range(1, 8) for e in ("tex", "md"))
    for i in range(1, 8):
        tex = (tmp_path / f"table{i}.tex").read_text()
        md = (tmp_path / f"table{i}.md").read_text()
        ncols = tables.build_table(df, f"table{i}")["ncols"]
        _check_latex(tex, ncols)
        for d in ("CIFAR-10", "ImageNet-100"):
            assert d in tex and d in md
        for v in ("SimCLR", "NCL", "BayesNCL (soft)"):
            assert sum(line.startswith(v + " &") for line in tex.splitlines()) == 2, (i, v)
            assert sum(r[0] == v for r in _md_rows(md)) == 2, (i, v)
        assert all(len(r) == ncols for r in _md_rows(md))
        assert ("Only-in-4" in tex) == (i == 4)
        assert "no runs" not in tex


def test_empty_set_gives_valid_no_runs_table(tmp_path):
    df = _frame([_row("A", 0, sets="figure3")])
    tables.render_tables(df, tmp_path)
    for i in range(1, 8):
        tex = (tmp_path / f"table{i}.tex").read_text()
        assert "no runs" in tex and "No runs in this set." in tex
        _check_latex(tex, tables.build_table(df, f"table{i}")["ncols"])
        assert _md_rows((tmp_path / f"table{i}.md").read_text())[1][0] == "no runs"
    tables.render_tables(summ.prepare(pd.DataFrame()), tmp_path / "empty")  # no rows at all


def test_golden_tables():
    from bayesncl.report import claims
    df = summ.read_summary(GOLDEN / "runs.csv")
    update = os.environ.get("UPDATE_GOLDEN") == "1"
    rendered = {("table1", "tex"): tables.render_table(df, "table1"),
                ("table2", "tex"): tables.render_table(df, "table2"),
                ("table2", "md"): tables.render_table(df, "table2", "md"),
                ("claims", "md"): claims.render_claims(df, "md")}
    for (name, kind), got in rendered.items():
        path = GOLDEN / f"{name}.{kind}"
        if update:
            path.write_text(got, encoding="utf-8")
        assert got.encode() == path.read_bytes(), (
            f"{path.name} differs from the golden file; if the change is intended, rerun with "
            "UPDATE_GOLDEN=1 and review the diff")


# --------------------------------------------------------------------------- figures / report
def _figure_frame():
    rows = []
    curve = lambda s: json.dumps({"32": 40.0 + s, "64": 50.0 + s, "128": 55.0})  # noqa: E731
    for d in ("cifar10", "cifar100"):
        for v, m in (("NCL", "ncl"), ("BayesNCL", "bayesncl")):
            rows += [_row(v, s, dataset=d, method=m, sets="figure3;table2", ret_curve=curve(s),
                          probe_top1=60.0) for s in range(2)]
    for width in (64, 128, 256):
        rows += [_row(f"BayesNCL D={width}", s, sets="figure4a", proj_dim=width, sc=20.0 + s,
                      probe_top1=60.0 + s) for s in range(2)]
    for rho in (0.6, 0.8, 0.9):
        rows.append(_row("BayesNCL", 0, sets="figure4b", rho=rho, **{"lambda": 3e-5}, sc=rho * 10,
                         probe_top1=60.0))
    for lam in (0.0, 1e-5, 5e-5):
        rows.append(_row("BayesNCL", 0, sets="figure4b", rho=0.8, **{"lambda": lam}, sc=lam * 1e5,
                         probe_top1=60.0))
    return _frame(rows)


def test_figure4b_sweep_membership():
    df = _figure_frame()
    rows = df[df["sets"] == "figure4b"]
    rho = sorted(figures_module().sweep_rows(rows, "rho")["rho"])
    lam = sorted(figures_module().sweep_rows(rows, "lambda")["lambda"])
    assert rho == [0.6, 0.8, 0.9] and lam == [0.0, 1e-5, 3e-5, 5e-5]
    # Hints win over inference: a "width" row at the base rho/lambda is in neither sweep, and a
    # hinted row is kept even when it also moves the other parameter.
    hinted = _frame([_row("B", 0, sets="figure4b", rho=0.8, **{"lambda": 3e-5}, proj_dim=64, sweep="width"),
                     _row("B", 0, sets="figure4b", rho=0.8, **{"lambda": 3e-5}, sweep="rho"),
                     _row("B", 0, sets="figure4b", rho=0.8, **{"lambda": 3e-5}, sweep="rho"),
                     _row("B", 0, sets="figure4b", rho=0.5, **{"lambda": 1e-5}, sweep="rho"),
                     _row("B", 0, sets="figure4b", rho=0.8, **{"lambda": 0.0}, sweep="lambda"),
                     # the default operating point, a point of every sweep
                     _row("B", 0, sets="figure4b", rho=0.8, **{"lambda": 3e-5}, sweep="width;rho;lambda")])
    sweep = figures_module().sweep_rows
    assert sorted(sweep(hinted, "rho")["rho"]) == [0.5, 0.8, 0.8, 0.8]
    assert sorted(sweep(hinted, "lambda")["lambda"]) == [0.0, 3e-5, 3e-5, 3e-5]


def figures_module():
    from bayesncl.report import figures
    return figures


def test_report_writes_tables_and_nonempty_figures(tmp_path):
    from bayesncl.report import write_report
    csv = tmp_path / "runs.csv"
    _figure_frame().to_csv(csv, index=False)
    out = io.StringIO()
    written = write_report(csv, tmp_path / "out", stream=out)
    names = sorted(p.relative_to(tmp_path / "out").as_posix() for p in written)
    assert names == sorted([f"tables/{t}.{e}" for t in [f"table{i}" for i in range(1, 8)] + ["claims"]
                            for e in ("tex", "md")]
                           + [f"figures/{f}.{e}" for f in figures_module().FIGURE_NAMES for e in ("pdf", "png")])
    # The outcome in the terminal: the claims and the main comparison of Tables 1-2.
    text = out.getvalue()
    assert text.startswith("Claims (docs/METHOD.md section 9") and "Main comparison (Tables 1-2" in text
    assert "SC: BayesNCL > NCL" in text and "60.00" in text
    for stem in figures_module().FIGURE_NAMES:
        pdf = (tmp_path / "out/figures" / f"{stem}.pdf").read_bytes()
        png = (tmp_path / "out/figures" / f"{stem}.png").read_bytes()
        assert pdf.startswith(b"%PDF") and len(pdf) > 1000 and b"CreationDate" not in pdf
        assert png.startswith(b"\x89PNG") and len(png) > 1000
    # Empty sets still produce every figure.
    figures_module().render_figures(_frame([_row("A", 0, sets="table1")]), tmp_path / "empty", ("pdf",))
    assert len(list((tmp_path / "empty").glob("*.pdf"))) == len(figures_module().FIGURE_NAMES)
