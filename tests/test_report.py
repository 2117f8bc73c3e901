"""Tests for bayesncl.core.atomic and bayesncl.report (fast; no torch)."""

from __future__ import annotations

import os
import stat

import pytest

from bayesncl.core.atomic import atomic_path, atomic_write_bytes, atomic_write_text


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

import yaml  # noqa: E402

from bayesncl.grid import expand as grid  # noqa: E402
from bayesncl.core.errors import ConfigError, MetricsFileError  # noqa: E402
from bayesncl.report import summary as summ  # noqa: E402
from bayesncl.report import cells, tables  # noqa: E402
from bayesncl.report.names import FIGURE_NAMES  # noqa: E402
from helpers.report import GOLDEN, eval_content, tiny_config, write_eval  # noqa: E402


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


MAIN_BAYES = "synthetic/bayesncl/rho~0.8/lambda~3e-05/dyn~1/seed~0"  # tiny.yaml's main BayesNCL run (it records Table 3)


def _by_id(df: pd.DataFrame) -> dict[str, dict]:
    return {r["run_id"]: r for r in df.to_dict("records")}


# --------------------------------------------------------------------------- summary
def test_summarize_one_row_per_grid_run_identity_from_the_grid(tmp_path):
    wf = tiny_config(tmp_path / "results")
    runs = write_eval(wf)
    df = summ.summarize(wf)
    assert list(df.columns) == summ.COLUMNS and list(df["run_id"]) == list(runs)  # the grid's order
    rows = _by_id(df)
    r = rows[MAIN_BAYES]
    assert (r["dataset"], r["arch"], r["method"], r["variant"], r["gate"]) == (
        "synthetic", "resnet18", "bayesncl", "BayesNCL (STE)", "ste")
    assert r["sets"] == "figure3;figure4a;figure4b;table1;table2;table3;table4;table6;table7"  # by name
    assert r["sweep"] == "figure4a:proj_dim;figure4b:rho"  # the default D and rho 0.8 are points; lambda 3e-5 is not
    assert (r["rho"], r["lambda"], r["proj_dim"], r["seed"], r["head_depth"], r["detach"]) == (
        0.8, 3e-5, 16, 0, 2, 1.0)
    narrow = rows["synthetic/bayesncl/D~8/rho~0.8/lambda~3e-05/seed~0"]
    assert (narrow["proj_dim"], narrow["sets"], narrow["sweep"]) == (8, "figure4a", "figure4a:proj_dim")
    r50 = rows["synthetic/ncl/arch~resnet50/width~2/seed~0"]
    assert (r50["arch"], r50["variant"], r50["sets"], r50["sweep"]) == ("resnet50", "NCL", "table5", "")
    soft = rows["synthetic/bayesncl/gate~soft/rho~0.8/lambda~3e-05/seed~0"]
    assert (soft["variant"], soft["gate"], soft["sets"]) == ("Soft gate", "soft", "table4")
    cl = rows["synthetic/cl/seed~0"]
    assert (cl["method"], cl["variant"], cl["sets"], cl["sweep"]) == ("cl", "SimCLR", "table1;table2", "")
    # Numbers are each run's own files: sc = 30 + the run's position in the grid.
    assert list(df["sc"]) == [30.0 + i for i in range(len(runs))]
    assert list(df["weights_sha"]) == [f"sha{i:02d}" for i in range(len(runs))]
    assert set(df["stale"]) == {""}  # each trained with what the grid gives it today (features.json's config)
    # An untrained twin names the sets it serves, ";"-joined like sets; a trained run serves none.
    assert [rows[rid]["init_of"] for rid in runs] == [";".join(run.init_of) for run in runs.values()]
    assert any(len(run.init_of) > 1 for run in runs.values()) and r["init_of"] == ""


def test_summarize_flattens_every_section(tmp_path):
    wf = tiny_config(tmp_path / "results")
    runs = write_eval(wf)
    rows = _by_id(summ.summarize(wf))
    # The main run has every section (table3: dynamics, table6: background, table7: cost); SimCLR, in
    # tables 1-2 only, has no retrieval, background, dynamics or cost.
    assert {"interpretability", "linear_probe", "retrieval", "background_probe", "dynamics", "cost"} <= set(
        grid.evaluation_sections(runs[MAIN_BAYES]))
    assert not {"retrieval", "background_probe", "dynamics", "cost"} & set(
        grid.evaluation_sections(runs["synthetic/cl/seed~0"]))
    r = rows[MAIN_BAYES]
    assert r["alive"] == 200 and r["bg_dominated_feature"] == 0.05 and (r["closed_bg"], r["closed_cls"]) == (0.7, 0.2)
    at = list(runs).index(MAIN_BAYES)  # eval_content: top-1 70 + the run's position in the grid
    assert (r["probe_top1"], r["probe_top5"], r["probe_protocol"]) == (70.0 + at, 91.0, "fast")
    assert r["ret_K"] == 8  # P@k: a fraction in retrieval.json, percent in runs.csv
    assert (r["ret_p1"], r["ret_p10"]) == (pytest.approx(60.0), pytest.approx(55.0))
    assert json.loads(r["ret_curve"]) == pytest.approx({"2": 40.0, "4": 50.0, "8": 55.0})
    assert list(json.loads(r["ret_curve"])) == ["2", "4", "8"]  # sorted numerically
    assert (r["bg_acc"], r["bg_protocol"]) == (93.4, "fast")
    assert json.loads(r["dyn_gv_sc"]) == [-0.4] and json.loads(r["dyn_epochs"]) == [1]
    assert (r["gflops"], r["train_minutes"]) == (1.419, 75.1)
    # Every scalar of the interpretability and cost sections lands in its own column, unscaled.
    main = list(runs).index(MAIN_BAYES)
    for section in ("interpretability", "cost"):
        for key, value in eval_content(section, runs[MAIN_BAYES], main).items():
            assert r[key] == value, (section, key)
    assert math.isnan(r["topk_bound"]) and math.isnan(r["topk_removed"])  # Top-k NCL only
    assert r["open_gates_last"] == 0.55 and json.loads(r["gate_curve"]) == [1.0, 0.8, 0.55]
    assert json.loads(r["loss_curve"]) == [5.0, 4.5, None]
    topk = rows["synthetic/topk_ncl/k~2/seed~0"]
    assert (topk["topk_bound"], topk["topk_removed"]) == (0.0, 0.0)
    assert topk["gate_curve"] == "" and math.isnan(topk["open_gates_last"]) and math.isnan(topk["closed_bg"])
    # Sections a run does not have are empty.
    cl = rows["synthetic/cl/seed~0"]
    at = list(runs).index("synthetic/cl/seed~0")
    assert cl["sc"] == 30.0 + at and cl["probe_top1"] == 70.0 + at and math.isnan(cl["gflops"])
    assert math.isnan(cl["ret_K"]) and math.isnan(cl["ret_p10"]) and cl["ret_curve"] == ""
    assert math.isnan(cl["bg_acc"]) and cl["bg_protocol"] == "" and cl["dyn_epochs"] == ""


def test_summarize_ignores_files_of_sections_the_run_does_not_have(tmp_path):
    wf = tiny_config(tmp_path / "results")
    write_eval(wf)
    stray = tmp_path / "results/runs/synthetic/cl/seed~0/eval/retrieval.json"
    stray.write_text(json.dumps({"run": {}, "retrieval": {"K": 8, "p@10": 0.9}}))
    assert math.isnan(_by_id(summ.summarize(wf))["synthetic/cl/seed~0"]["ret_p10"])


def test_dyn_sc_is_the_evaluation_features_sc_not_zpluss(tmp_path):
    """dynamics.json records SC per epoch of the evaluation feature ("sc") and of z+ ("sc_zplus"); runs.csv's
    dyn_sc (Table 3, the SC-over-training figure) is the former."""
    wf = tiny_config(tmp_path / "results")
    write_eval(wf)
    path = tmp_path / "results" / "runs" / MAIN_BAYES / "eval" / "dynamics.json"
    body = json.loads(path.read_text())
    body["dynamics"].update(epochs=[1, 2], af_gv=[0.5, 0.4], gv_sc=[-0.4, -0.3], af_sc=[0.1, 0.2],
                            sc=[41.0, 43.5], sc_zplus=[37.0, 38.0])
    path.write_text(json.dumps(body))
    r = _by_id(summ.summarize(wf))[MAIN_BAYES]
    assert json.loads(r["dyn_sc"]) == [41.0, 43.5] and json.loads(r["dyn_epochs"]) == [1, 2]


def test_sweep_membership_is_the_grids(tmp_path):
    wf = tiny_config(tmp_path / "results")
    write_eval(wf)
    df = summ.summarize(wf)
    fig4b = df[[("figure4b" in s.split(";")) for s in df["sets"]]]
    assert sorted(summ.sweep_rows(fig4b, "rho", "figure4b")["rho"]) == [0.5, 0.8]
    # The main run (lambda 3e-5) is not a point of tiny's lambda sweep [0, 3e-3]: it is left out.
    assert sorted(summ.sweep_rows(fig4b, "lambda", "figure4b")["lambda"]) == [0.0, 3e-3]
    # With the default lambda among the sweep's values, the main run is a point of both sweeps.
    wf = tiny_config(tmp_path / "both", figure4b={"variants": ["BayesNCL (STE)"],
                                            "sweep": {"method.rho": [0.5, 0.8], "method.lambda": [0.0, 3e-5]}})
    write_eval(wf)
    df = summ.summarize(wf)
    assert _by_id(df)[MAIN_BAYES]["sweep"] == "figure4a:proj_dim;figure4b:lambda;figure4b:rho"  # set by set, by name
    fig4b = df[[("figure4b" in s.split(";")) for s in df["sets"]]]
    lam = summ.sweep_rows(fig4b, "lambda", "figure4b")
    assert sorted(lam["lambda"]) == [0.0, 3e-5] and set(lam["rho"]) == {0.8}
    assert sorted(summ.sweep_rows(fig4b, "rho", "figure4b")["rho"]) == [0.5, 0.8]
    assert summ.sweep_rows(df, "proj_dim", "figure4a")["proj_dim"].tolist() == [16.0, 8.0]
    assert summ.sweep_rows(df, "proj_dim", "figure4b").empty  # figure4b sweeps no D: its runs are one D
    # A run of no sweep (table1/table2 only) is in none.
    assert "synthetic/cl/seed~0" not in {*summ.sweep_rows(df, "rho", "figure4b")["run_id"],
                                         *summ.sweep_rows(df, "lambda", "figure4b")["run_id"]}


SHARED_SETS = {"table1": {"variants": ["NCL", "BayesNCL (STE)"]},
               "figure4a": {"variants": ["BayesNCL (STE)"], "sweep": {"model.proj_dim": [8, 16]}},
               "figure4b": {"variants": ["BayesNCL (STE)"], "sweep": {"method.lambda": [0.0, 3e-5]}}}
SHARED = "synthetic/bayesncl/rho~0.8/lambda~3e-05/seed~0"  # D 16, lambda 3e-5: a point of both sweeps


def test_a_run_two_sets_sweep_over_different_settings_is_each_set_s_own_point(tmp_path):
    """The main run is Figure 4a's D = 16 point and Figure 4b's lambda = 3e-5 point: runs.csv says which setting
    each set sweeps with it, and each set's sweep (its figure, its claims) has it as a point of its own setting
    only."""
    from bayesncl.report import claims, figures

    wf = tiny_config(tmp_path / "results")
    wf["sets"] = SHARED_SETS
    runs = write_eval(wf)
    assert runs[SHARED].sweeps == {"figure4a": ["proj_dim"], "figure4b": ["lambda"]}
    summ.write_summary(wf, tmp_path / "runs.csv")
    df = summ.read_summary(tmp_path / "runs.csv")
    rows = _by_id(df)
    assert (rows[SHARED]["sets"], rows[SHARED]["sweep"]) == ("figure4a;figure4b;table1",
                                                             "figure4a:proj_dim;figure4b:lambda")
    assert rows["synthetic/bayesncl/D~8/rho~0.8/lambda~3e-05/seed~0"]["sweep"] == "figure4a:proj_dim"
    assert rows["synthetic/bayesncl/rho~0.8/lambda~0/seed~0"]["sweep"] == "figure4b:lambda"
    assert rows["synthetic/ncl/seed~0"]["sweep"] == ""
    wf["variants"]["Same"] = wf["variants"]["BayesNCL (STE)"]  # two variants of the set, one run: its point once
    with pytest.warns(grid.GridWarning):
        again = grid.expand_grid({**wf, "sets": {**SHARED_SETS, "figure4b": {**SHARED_SETS["figure4b"],
                                                                             "variants": ["BayesNCL (STE)", "Same"]}}})
    assert again[SHARED].sweeps == runs[SHARED].sweeps
    fig4a, fig4b = (df[[s in v.split(";") for v in df["sets"]]] for s in ("figure4a", "figure4b"))
    assert sorted(summ.sweep_rows(fig4a, "proj_dim", "figure4a")["proj_dim"]) == [8, 16]
    assert sorted(summ.sweep_rows(fig4b, "lambda", "figure4b")["lambda"]) == [0.0, 3e-5]
    assert summ.sweep_rows(fig4b, "proj_dim", "figure4b").empty and summ.sweep_rows(fig4a, "lambda", "figure4a").empty
    assert summ.swept(fig4b, "figure4b") == ["lambda"] and summ.swept(fig4a, "figure4a") == ["proj_dim"]
    fig = figures._figure4b(df)  # rho and lambda only: D is not swept in this set
    titles = [ax.get_title() for ax in fig.axes]
    assert len(fig.axes) == 4 and not any("proj_dim" in t for t in titles), titles
    lam = next(ax for ax in fig.axes if ax.get_title() == "Synthetic: SC vs λ (ρ = 0.8)")
    assert any(line.get_label().startswith("BayesNCL (STE)") for line in lam.lines)  # drawn: two points
    records = claims.Runs(df.to_dict("records"))
    bayes = claims.ROLES["bayes"]
    sc = claims.METRICS["sc"].value
    assert sorted(claims._sweep_points(records, ("figure4b",), "lambda", bayes, sc)[1]) == [0.0, 3e-5]
    assert claims._sweep_points(records, ("figure4b",), "proj_dim", bayes, sc)[1] == {}


def test_runs_csv_is_the_same_whatever_the_order_of_the_sets_and_the_overlays(tmp_path):
    """The grid given as a file and two overlays, in either order, with its sets' keys in either order, and as the
    JSON the workflow hands over (keys sorted): the same runs.csv, byte for byte."""
    import itertools

    from bayesncl.cli.workflow import load_workflow, load_workflow_json

    wf = tiny_config(tmp_path / "results")
    wf["sets"] = SHARED_SETS
    write_eval(wf)
    base = {k: v for k, v in wf.items() if k != "sets"}
    parts = {"base": {**base, "sets": {"table1": SHARED_SETS["table1"]}},
             "a": {"sets": {"figure4a": SHARED_SETS["figure4a"]}}, "b": {"sets": {"figure4b": SHARED_SETS["figure4b"]}}}
    texts = set()
    for i, order in enumerate(itertools.permutations(["a", "b"])):
        for flip in (False, True):
            files = []
            for name in ("base", *order):
                part = parts[name] if not flip else {k: dict(reversed(v.items())) if k == "sets" else v
                                                     for k, v in reversed(parts[name].items())}
                files.append(tmp_path / f"{name}{i}{flip}.yaml")
                files[-1].write_text(yaml.safe_dump(part, sort_keys=False))
            out = tmp_path / f"runs{i}{flip}.csv"
            summ.write_summary(load_workflow(files, export=False).config, out)
            texts.add(out.read_text())
    summ.write_summary(load_workflow_json(json.dumps(wf, sort_keys=True)).config, tmp_path / "json.csv")
    texts.add((tmp_path / "json.csv").read_text())
    assert len(texts) == 1
    assert "figure4a:proj_dim;figure4b:lambda" in texts.pop()


def test_summarize_relative_results_against_base_dir(tmp_path):
    wf = tiny_config("res")
    write_eval(wf, base=tmp_path)
    df = summ.summarize(wf, base_dir=tmp_path)
    assert len(df) == len(grid.expand_grid(wf)) and df["sc"].notna().all()


def test_summarize_errors_name_the_file_and_the_fix(tmp_path):
    wf = tiny_config(tmp_path / "results")
    write_eval(wf)
    folder = tmp_path / "results/runs/synthetic/topk_ncl/k~2/seed~0/eval"

    def fails(path: Path, *needles: str) -> str:
        with pytest.raises(MetricsFileError) as err:
            summ.summarize(wf)
        for needle in (str(path), *needles):
            assert needle in str(err.value), (needle, str(err.value))
        return str(err.value)

    gone = folder / "retrieval.json"
    text = gone.read_text()
    # A message is the whole line: what is wrong with which file, then the command that writes it again.
    fix = (f"write it with `snakemake {folder}/retrieval.json` (or `bayesncl evaluate --checkpoint "
           f"{folder.parent}/model.pt --out {folder} --only retrieval`)")
    gone.unlink()
    fails(gone, "not found", f"snakemake {gone}", "--only retrieval",
          f"--checkpoint {folder.parent / 'model.pt'} --out {folder} --only retrieval")
    gone.mkdir()  # a folder where the file should be: not "not found", an OSError naming it
    msg = fails(gone, "Is a directory")
    assert msg == f"evaluation file {gone}: cannot be read (Is a directory); {fix}", msg
    gone.rmdir()
    gone.write_text("{not json")
    msg = fails(gone, "not valid JSON")
    assert msg.startswith(f"evaluation file {gone}: not valid JSON (") and msg.endswith(f"); {fix}"), msg
    gone.write_text(json.dumps({"run": {}, "retrieval_v0": {}}))
    fails(gone, "no 'retrieval' object")
    gone.write_text(json.dumps({**json.loads(text), "run": {"weights_sha": "other"}}))
    sha = json.loads((folder / "features.json").read_text())["run"]["weights_sha"]
    assert fails(gone, "weights_sha other", "stale") == (
        f"evaluation file {gone}: weights_sha other differs from {folder / 'features.json'}'s {sha}, so it is "
        f"stale; delete it and {fix}")
    for run in ({}, {"weights_sha": None}, {"weights_sha": ""}):  # no hash: the stale check cannot run
        gone.write_text(json.dumps({**json.loads(text), "run": run}))
        fails(gone, "records no weights_sha", f"snakemake {gone}", "--only retrieval")
    gone.write_text(text)
    features = folder / "features.json"
    good = features.read_text()
    features.write_text(json.dumps({**json.loads(good), "run": {"dataset": "synthetic"}}))
    fails(features, "records no weights_sha", "--only features")
    for config in ({}, {"config": None}):  # no config: its settings cannot be read
        features.write_text(json.dumps({**{k: v for k, v in json.loads(good).items() if k != "config"}, **config}))
        assert fails(features) == (
            f"evaluation file {features} records no config, so the run's settings cannot be read; delete it and "
            f"write it with `snakemake {features}` (or `bayesncl evaluate --checkpoint {folder.parent}/model.pt "
            f"--out {folder} --only features`)")
    features.write_text(good)
    summ.summarize(wf)  # every file back: it reads
    (folder / "features.json").unlink()
    fails(folder / "features.json", "not found", f"snakemake {folder / 'features.json'}")
    with pytest.raises(ConfigError, match="results"):
        summ.summarize({k: v for k, v in wf.items() if k != "results"})


def test_prepare_fills_what_a_frame_lacks(tmp_path):
    """A column the frame lacks: "" for text, NaN for numbers; a missing text cell (None, NaN) is "" too."""
    df = summ.prepare(pd.DataFrame({"run_id": ["a", None, float("nan")], "sc": ["1.5", None, "x"]}))
    assert df["run_id"].tolist() == ["a", "", ""] and df["gate"].tolist() == ["", "", ""]
    assert df["stale"].tolist() == ["", "", ""] and df["ret_curve"].tolist() == ["", "", ""]
    assert df["sc"].tolist()[0] == 1.5 and df["sc"].isna().tolist() == [False, True, True]
    assert df["seed"].isna().all() and df["seed"].dtype == float and len(df) == 3


def test_a_plugin_sections_columns_follow_the_grids_and_are_numbers(monkeypatch):
    """A registered section's columns (Section.columns): those runs.csv does not already have are added after
    COLUMNS, and prepare reads them as numbers; other extra columns stay as they are."""
    import dataclasses

    from bayesncl.evaluation.sections import SECTIONS

    plugin = dataclasses.replace(SECTIONS["cost"], name="zeros", columns=(("share", "zero_share"), ("sc", "sc")))
    monkeypatch.setitem(SECTIONS._specs, "zeros", plugin)
    assert summ.section_columns() == ["zero_share"]  # sc is one of COLUMNS already
    df = summ.prepare(pd.DataFrame({"run_id": ["a", "b"], "zero_share": ["12.5", "n/a"], "note": ["7", "x"]}))
    assert list(df.columns) == summ.COLUMNS + ["zero_share", "note"]
    assert df["zero_share"].tolist()[0] == 12.5 and math.isnan(df["zero_share"].tolist()[1])
    assert df["note"].tolist() == ["7", "x"]


def test_write_summary_roundtrip(tmp_path):
    wf = tiny_config(tmp_path / "results")
    write_eval(wf)
    out = tmp_path / "summary" / "runs.csv"
    df = summ.write_summary(wf, out)
    back = summ.read_summary(out)
    pd.testing.assert_frame_equal(df, back)
    assert sorted(p.name for p in out.parent.iterdir()) == ["metrics.json", "runs.csv"]  # no temp files left
    headline = json.loads((out.parent / "metrics.json").read_text())
    assert list(headline) == ["synthetic"] and list(headline["synthetic"]) == ["resnet18"]
    # Only the main comparison (Tables 1-2): not the ablation (Soft gate) nor ResNet-50's table5 runs.
    main = headline["synthetic"]["resnet18"]
    assert set(main) == {"SimCLR", "NCL", "Top-k NCL", "BayesNCL (STE)"}
    assert main["BayesNCL (STE)"]["sc"] == pytest.approx(_by_id(df)[MAIN_BAYES]["sc"])
    assert main["BayesNCL (STE)"]["seeds"] == 1 and "sc_seeds" not in main["BayesNCL (STE)"]


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


def test_block_of_runs_without_a_dataset_name():
    ctx = tables.build_table(_frame([_row("NCL", 0, dataset="", method="ncl", sc=1.0)]), "table1", "md")
    assert [b["title"] for b in ctx["blocks"]] == ["(unknown dataset)"]


def test_table6_names_the_background_probes_protocol():
    df = _frame([_row("NCL", 0, method="ncl", sets="table6", bg_acc=90.0, bg_protocol="fast")])
    for kind in ("tex", "md"):
        assert "Background probe: fast protocol." in tables.build_table(df, "table6", kind)["caption"]


def test_table2_from_summarize_retrieval_in_percent(tmp_path):
    wf = tiny_config(tmp_path / "results")
    at = list(write_eval(wf)).index("synthetic/ncl/dyn~1/seed~0")
    tex = tables.render_table(summ.summarize(wf), "table2")
    # NCL's top-1: 70 + its position in the grid; retrieval.json's fractions 0.60 .. 0.55 printed in percent.
    assert _cells(tex, "NCL") == [f"${70 + at:.2f}$", "$91.00$", "$60.00$", "$58.00$", "$57.00$", "$55.00$"]
    assert _cells(tex, "SimCLR")[2:] == ["--"] * 4 and "$K = 8$" in tex


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


def test_cells_say_when_they_average_fewer_seeds_than_their_row():
    # Seed 1 of A collapsed (SC NaN): the SC cell averages 2 of 3 runs and says so; the caption explains.
    df = _frame([_row("A", s, sc=v, se_sum=1.0 + s) for s, v in enumerate([10.0, float("nan"), 14.0])]
                + [_row("B", s, sc=5.0 + s, se_sum=2.0) for s in range(3)])
    tex, md = tables.render_table(df, "table1"), tables.render_table(df, "table1", "md")
    assert _cells(tex, "A")[:2] == [r"$\mathbf{12.00}_{\pm 2.83}^{2/3}$", r"$2.000_{\pm 1.000}$"]  # SE tie: no bold
    assert _md_cells(md, "A")[0] == "**12.00 ± 2.83** (2/3)" and _md_cells(md, "B")[0] == "6.00 ± 1.00"
    assert "Mean ± std over 3 seeds." in md and "A cell marked (k/n) averages the k of its row's n seeds" in md
    assert "$^{k/n}$" in tex
    # Table 3: per epoch, a correlation left undefined in one run.
    dyn = _frame([_row("NCL", s, method="ncl", sets="table3", dyn_epochs="[10, 20]", dyn_af_gv=json.dumps([0.5, v]),
                       dyn_gv_sc="[0.1, 0.2]", dyn_af_sc="[0.1, 0.2]") for s, v in enumerate([0.4, None])])
    tex = tables.render_table(dyn, "table3")
    assert r" & 20 & $0.400^{1/2}$ & $0.200_{\pm 0.000}$" in tex and "k/n" in tex
    assert "k/n" not in tables.render_table(_frame([_row("A", s, sc=1.0 + s) for s in range(2)]), "table1")


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


def test_table_behaviour_follows_its_spec_not_its_name(monkeypatch):
    import dataclasses
    df = _frame([_row("SimCLR", 0, method="cl", sets="table2;table6", probe_top1=80.0, probe_protocol="paper",
                      ret_K=64, ret_p1=99.0, bg_acc=90.0, bg_protocol="fast"),
                 _row("NCL", 0, method="ncl", sets="table2;table6", probe_top1=81.0, probe_protocol="fast",
                      ret_K=32, ret_p1=50.0, bg_acc=91.0, bg_protocol="paper")])
    for name in ("table2", "table6"):
        monkeypatch.setitem(tables._SPECS, "renamed", dataclasses.replace(tables._SPECS[name], name="renamed"))
        got, want = tables.build_table(df, "renamed"), tables.build_table(df, name)
        assert (got["caption"], got["blocks"]) == (want["caption"], want["blocks"]), name
    assert "$K = 32$" in tables.render_table(df, "table2")  # SimCLR's K is not reported


def test_probe_protocol_note():
    fast = _frame([_row("A", 0, sets="table2", probe_top1=1.0, probe_protocol="fast")])
    assert "Linear probe: fast protocol" in tables.render_table(fast, "table2")
    mixed = _frame([_row("A", 0, sets="table2", probe_top1=1.0, probe_protocol="fast"),
                    _row("B", 0, sets="table2", probe_top1=2.0, probe_protocol="paper")])
    tex = tables.render_table(mixed, "table2")
    assert "Linear probe: paper protocol (50 epochs, RandomResizedCrop + flip);" in tex and r"A$^\dagger$ &" in tex
    assert r"rows marked $^\dagger$ use the fast protocol" in tex


def test_latex_escaping():
    assert cells.latex_escape(r"a_b & 50% #1 $x$ {y} ~ ^ \z") == (
        r"a\_b \& 50\% \#1 \$x\$ \{y\} \textasciitilde{} \textasciicircum{} \textbackslash{}z")
    df = _frame([_row("Top-k_NCL & 50%", 0, sc=1.0, dataset="my_data")])
    tex = tables.render_table(df, "table1")
    assert r"Top-k\_NCL \& 50\% &" in tex and r"\textit{my\_data}" in tex
    assert cells.caption_text("share (%) of $z^+$, a|b", "tex") == r"share (\%) of $z^+$, a|b"
    assert cells.caption_text("share (%) of $z^+$, a|b", "md") == r"share (%) of z+, a\|b"


def test_table3_dynamics_per_epoch():
    df = _frame([_row("NCL", s, method="ncl", sets="table3", dyn_epochs="[10, 20]",
                      dyn_af_gv=json.dumps([0.5 + s / 10, 0.4]), dyn_gv_sc="[-0.3, -0.2]",
                      dyn_af_sc="[0.1, 0.2]") for s in range(2)]
                + [_row("BayesNCL", 0, sets="table3")])
    tex = tables.render_table(df, "table3")
    assert r"NCL & 10 & $0.550_{\pm 0.071}$ & $-0.300_{\pm 0.000}$ & $0.100_{\pm 0.000}$ \\" in tex
    assert r" & 20 & $0.400_{\pm 0.000}$" in tex
    assert "BayesNCL$^{n=1}$ & -- & -- & -- & --" in tex
    assert _md_rows(tables.render_table(df, "table3", "md"))[0][:2] == ["Method", "Epoch"]


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
    from bayesncl.report import claims_table
    df = summ.read_summary(GOLDEN / "runs.csv")
    update = os.environ.get("UPDATE_GOLDEN") == "1"
    rendered = {("table1", "tex"): tables.render_table(df, "table1"),
                ("table2", "tex"): tables.render_table(df, "table2"),
                ("table2", "md"): tables.render_table(df, "table2", "md"),
                ("claims", "md"): claims_table.render_claims(df, "md")}
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
    for rho in (0.6, 0.8, 0.9):  # (0.8, 3e-5): the default point, in both sweeps
        rows.append(_row("BayesNCL", 0, sets="figure4b", rho=rho, **{"lambda": 3e-5}, sc=rho * 10,
                         probe_top1=60.0, sweep="rho;lambda" if rho == 0.8 else "rho"))
    for lam in (0.0, 1e-5, 5e-5):
        rows.append(_row("BayesNCL", 0, sets="figure4b", rho=0.8, **{"lambda": lam}, sc=lam * 1e5,
                         probe_top1=60.0, sweep="lambda"))
    return _frame(rows)


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
                           + [f"figures/{f}.{e}" for f in FIGURE_NAMES for e in ("pdf", "png")])
    # The outcome in the terminal: the claims and the main comparison of Tables 1-2.
    text = out.getvalue()
    assert text.startswith("Claims (docs/METHOD.md section 9") and "Main comparison (Tables 1-2" in text
    assert "SC: BayesNCL > NCL" in text and "60.00" in text
    for stem in FIGURE_NAMES:
        pdf = (tmp_path / "out/figures" / f"{stem}.pdf").read_bytes()
        png = (tmp_path / "out/figures" / f"{stem}.png").read_bytes()
        assert pdf.startswith(b"%PDF") and len(pdf) > 1000 and b"CreationDate" not in pdf
        assert png.startswith(b"\x89PNG") and len(png) > 1000
    # Empty sets still produce every figure.
    figures_module().render_figures(_frame([_row("A", 0, sets="table1")]), tmp_path / "empty", ("pdf",))
    assert len(list((tmp_path / "empty").glob("*.pdf"))) == len(FIGURE_NAMES)


def test_every_set_the_grid_accepts_is_rendered():
    """grid.expand.SETS is the one list of set names; each is a table spec's set or a figure of the report."""
    from bayesncl.grid.expand import SETS
    from bayesncl.report.tables import TABLES

    rendered = {spec.set_name for spec in TABLES} | set(FIGURE_NAMES)
    assert set(SETS) <= rendered and {spec.set_name for spec in TABLES} <= set(SETS)
