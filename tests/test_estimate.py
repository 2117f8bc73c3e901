"""`bayesncl estimate`: a small grid priced by hand (FLOPs counted on real CPU models, epochs x whole batches,
the evaluation's forward passes, the submissions), the paper grid against the figures docs/CLUSTER.md prints, and
the rates from a gpu_check.json."""

import dataclasses
import json
import re
from pathlib import Path

import pytest
import torch
import yaml

from bayesncl.cli.main import main
from bayesncl.settings.config import resolve
from bayesncl.core.errors import ConfigError
from bayesncl.planning import estimate as E
from bayesncl.planning.estimate import MEASURED, estimate, images, measured_rates, render
from bayesncl.measures.cost import count_flops_per_image
from bayesncl.evaluation.sections import SECTIONS
from bayesncl.grid.expand import expand_grid
from bayesncl.model.methods import build_method

ROOT = Path(__file__).resolve().parents[1]
MODEL = {"arch": "resnet18", "width": 4, "proj_hidden": 32, "proj_dim": 16}
GRID = {
    "results": "results", "seeds": [0],
    "defaults": {"model": MODEL, "train": {"epochs": 100, "batch_size": 256},
                 "eval": {"probe": "paper", "probe_epochs": 10}},
    "datasets": {"cifar10": {"data": {"dataset": "cifar10", "root": "/nowhere"}}},
    "variants": {"NCL": {"method": {"name": "ncl"}}, "BayesNCL (STE)": {"method": {"name": "bayesncl"}}},
    "sets": {"table1": {"variants": ["NCL", "BayesNCL (STE)"]}},
}


def flops(method: str) -> float:
    cfg = resolve(sets=[f"model.{k}={v}" for k, v in MODEL.items()] + [f"method.name={method}"])
    return count_flops_per_image(build_method(cfg).train(), torch.randn(2, 3, 32, 32))


@pytest.fixture(scope="module")
def rates():
    """Measured on exactly the grid's models: NCL runs at 1000 images/s, BayesNCL at 500."""
    return {"gpu": "test GPU", "source": "by hand",
            "methods": [{"method": "ncl", "img_per_s": 1000.0, "gflops_fwd_per_view": flops("ncl") / 1e9},
                        {"method": "bayesncl", "img_per_s": 500.0, "gflops_fwd_per_view": flops("bayesncl") / 1e9}]}


def test_a_small_grid_priced_by_hand(rates):
    est = estimate(GRID, rates)
    (row,) = est.rows.values()
    ncl, bay = 100 * (50_000 // 256) * 256 / 1000, 100 * (50_000 // 256) * 256 / 500  # 4992 s, 9984 s
    # the two runs and their untrained twins (docs/METHOD.md section 9: evaluated, never trained)
    assert row.runs == 4 and row.pretrain_h == pytest.approx((ncl + bay) / 3600, rel=1e-9)
    # features: the 10,000 test images; the paper probe: 10 passes over 50,000; one forward view = 1/6 image;
    # each twin's evaluation is its run's
    fwd = 10_000 + 10 * 50_000
    assert row.eval_h == pytest.approx(2 * (fwd / 6 / 1000 + fwd / 6 / 500) / 3600, rel=1e-9)
    # held: each of the 4 sections' start-up, the GPU work, the two CPU sections' allowance, and each twin's
    # initialisation (its pretraining job, inside its evaluation submission)
    held = 4 * (4 * E.SECTION_START_S + 2 * E.CPU_SECTION_S) + 3600 * row.eval_h + 2 * E.PRETRAIN_START_S
    assert row.eval_held_h == pytest.approx(held / 3600, rel=1e-9)
    # two pretraining submissions (the twins only save their initialisation, in their evaluation submission), four
    # evaluation submissions, the CIFAR-10 atlas
    assert (row.submissions, est.atlas, est.prepare, est.total().submissions) == (6, 1, 0, 7)
    # a 100-minute limit, each allocation training until its 10-minute stop margin: NCL's 84.2 minutes with its
    # start-up fit one allocation's 90, BayesNCL's 167.4 need two
    limited = estimate(GRID, rates, time_limit_min=100)
    assert limited.total().allocations == 3 and limited.total().submissions == 8


def test_the_smoke_grid_and_a_dataset_of_unknown_size(rates):
    smoke = estimate({**GRID, "smoke": True}, rates)
    (row,) = smoke.rows.values()
    assert row.pretrain_h == pytest.approx((2 * 256 / 1000 + 2 * 256 / 500) / 3600, rel=1e-9)  # 1 epoch of 2 steps
    folder = json.loads(json.dumps(GRID))
    folder["datasets"] = {"mine": {"data": {"dataset": "imagefolder", "root": "/x"}}}
    with pytest.raises(ConfigError, match="--images imagefolder=N"):
        estimate(folder, rates)
    sized = estimate(folder, rates, sizes={"imagefolder": 1000})
    assert sized.rows["imagefolder"].runs == 4  # two runs, two untrained twins


@pytest.mark.grid  # the paper grid's 180 runs (108 trained, 72 untrained twins) expanded and their models counted
def test_the_paper_grid_as_docs_cluster_and_the_profile_print_it(capsys, tmp_path):
    """docs/CLUSTER.md shows the command's output as it is, and every figure it and slurm/config.yaml quote of the
    paper grid's cost and requests is the estimate's (before any job has finished)."""
    assert main(["estimate", "--grid", "config/paper.yaml", "--gpu", "H200", "--results", str(tmp_path)]) == 0
    out = capsys.readouterr().out.replace(str(tmp_path), "results")
    total = next(line for line in out.splitlines() if line.startswith("all "))
    assert total.split() == ["all", "180", "70.5", "8.3", "14.6", "85.1", "153.4", "292"]  # twins: no training
    assert "108 pretraining, 180 evaluation, 3 atlas, 1 prepare_data" in out
    doc = (ROOT / "docs" / "CLUSTER.md").read_text()
    assert f"```text\n{out}```" in doc  # the page shows the command's output as it is
    grid = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())
    est = estimate(grid, measured_rates("h200"))
    t = est.total()
    plan = E.planner(expand_grid(grid), measured_rates("h200"))
    asked = {rid: plan.asked(rid) for rid in plan.runs}
    pre = sorted(a.pretrain() for a in asked.values() if a.work is not None)
    ev = {rid: sum(a.evaluation.values()) for rid, a in asked.items()}
    cifar = sorted(v for rid, v in ev.items() if plan.runs[rid].config["data"]["dataset"] != "imagenet100")
    evals = t.submissions - t.allocations - est.atlas - est.prepare
    text = " ".join(doc.split())  # the page's lines joined
    quoted = {  # what the page says: the estimate's figure
        r"asks for (\d+) GPU-hours in all": round(t.pretrain_request_h + t.eval_request_h),
        r"in all: ([\d.]+) for": f"{t.pretrain_request_h:.1f}", r"for ([\d.]+) of pretraining": f"{t.pretrain_h:.1f}",
        r"of pretraining \(([\d.]+)x": f"{t.pretrain_request_h / t.pretrain_h:.2f}",
        r"pretraining jobs (\d+-\d+) minutes": f"{pre[0]}-{pre[-1]}",
        r"\), ([\d.]+) for the [\d.]+ its evaluation": f"{t.eval_request_h:.1f}",
        r"for the ([\d.]+) its evaluation submissions": f"{t.eval_held_h:.1f}",
        r"expected to hold \(([\d.]+)x": f"{t.eval_request_h / t.eval_held_h:.2f}",
        r"x; (\d+-\d+) minutes each": f"{min(ev.values())}-{max(ev.values())}",
        r"at most (\d+) minutes on the paper grid": max(ev.values()),
        r"that is (\d+) submissions for the paper grid": t.submissions,
        r"\((\d+) pretraining, \d+ evaluation\)": t.allocations,
        r"pretraining, (\d+) evaluation\)": evals,
        r"About (\d+) GPU-hours of pretraining": round(t.pretrain_h),
        r"plus ([\d.]+) for the evaluation's GPU work": f"{t.eval_h:.1f}",
        r"GPU work \(the features, the paper-protocol and Waterbirds probes\) and ([\d.]+)": f"{t.eval_held_h:.1f}",
        r"before the ~(\d+) GPU-hours": round(t.pretrain_h + t.eval_held_h),
    }
    for pattern, figure in quoted.items():
        found = re.findall(pattern, text)
        assert found == [str(figure)], (pattern, found, figure)
    profile = " ".join(line.lstrip("# ") for line in (ROOT / "slurm" / "config.yaml").read_text().splitlines())
    for pattern, figure in {
        r"is (\d+ \+ \d+ \+ \d+ = \d+) submissions": f"{t.allocations} + {evals} + {est.atlas} = "
                                                          f"{t.submissions - est.prepare}",
        r"the (\d+) that `bayesncl estimate` counts": t.submissions,
        r"up to (\d+) minutes before any job": max(ev.values()),
        r"CIFAR run: (\d+ to \d+)": f"{cifar[0]} to {cifar[-1]}",
        r"margin: (\d+ to \d+) minutes on the paper grid": f"{pre[0]} to {pre[-1]}",
        r"each asks ([\d.]+) x its expected time": f"{E.PRIOR:g}",
    }.items():
        found = re.findall(pattern, profile)
        assert found == [str(figure)], (pattern, found, figure)


def test_rates_from_a_gpu_check_json_are_read_in_the_mode_each_run_trains_in(tmp_path, rates):
    """A gpu_check.json's eager rates (throughput) and captured rates (captured_step, or throughput's *_cudagraph
    in older files): a run is priced in its own train.graph, the paper grid's eager whatever else was measured;
    a mode not measured is priced at the eager rate and the table says so."""
    one = {"gflops_fwd_per_view": 1.0}
    report = {"info": {"gpu": "NVIDIA L40S"}, "steps": {
        "throughput": {"status": "ok", "result": {"ncl": {"img_per_s": 1.0, **one}, "bayesncl": {"img_per_s": 2.0,
                                                                                                **one}}},
        "captured_step": {"status": "ok", "result": {"ncl": {"img_per_s": 3.0, **one},
                                                     "bayesncl": {"img_per_s": 4.0, **one}}}}}
    path = tmp_path / "gpu_check.json"
    path.write_text(json.dumps(report))
    r = measured_rates(None, path)
    assert r["gpu"] == "NVIDIA L40S" and [(m["method"], m["graph"], m["img_per_s"]) for m in r["methods"]] == [
        ("ncl", "eager", 1.0), ("bayesncl", "eager", 2.0), ("ncl", "cudagraph", 3.0), ("bayesncl", "cudagraph", 4.0)]
    assert E.reference(r, "ncl")["img_per_s"] == 1.0 and E.reference(r, "bayesncl", "cudagraph")["img_per_s"] == 4.0
    assert E.reference(r, "ncl", "compile")["img_per_s"] == 1.0  # not measured: eager
    assert E.reference({**r, "methods": r["methods"][::-1]}, "ncl", "compile")["img_per_s"] == 1.0  # whatever order
    legacy = {"steps": {"throughput": {"status": "ok", "result": {**report["steps"]["throughput"]["result"],
                                                                  "ncl_cudagraph": {"img_per_s": 5.0, **one}}}}}
    path.write_text(json.dumps(legacy))
    assert [(m["graph"], m["img_per_s"]) for m in measured_rates(None, path)["methods"]] == [
        ("eager", 1.0), ("eager", 2.0), ("cudagraph", 5.0)]
    # the run's own mode: the same grid in eager and captured mode, priced at each mode's rate
    seconds = 100 * (50_000 // 256) * 256
    captured = {**rates, "methods": rates["methods"] + [{**m, "graph": "cudagraph", "img_per_s": 2 * m["img_per_s"]}
                                                        for m in rates["methods"]]}
    grid = json.loads(json.dumps(GRID))
    grid["sets"] = {"figure3": {"variants": ["NCL"]}}
    assert estimate(grid, captured).rows["cifar10"].pretrain_h == pytest.approx(seconds / 1000 / 3600, rel=1e-9)
    grid["defaults"]["train"]["graph"] = "cudagraph"
    grid["defaults"]["train"]["device"] = "cuda"
    est = estimate(grid, captured)
    assert est.rows["cifar10"].pretrain_h == pytest.approx(seconds / 2000 / 3600, rel=1e-9)
    assert est.graphs == {"cudagraph": "cudagraph"}
    est = estimate(grid, rates)  # nothing captured measured: eager, said so
    assert est.graphs == {"cudagraph": "eager"} and "train.graph=cudagraph at the measured eager rate " \
        "(cudagraph not measured)" in render(est)
    report["steps"]["throughput"]["status"] = "failed"
    path.write_text(json.dumps(report))
    with pytest.raises(ConfigError, match="did not end ok"):
        measured_rates(None, path)
    assert measured_rates("NVIDIA H200") is MEASURED["h200"]


def test_bad_input_is_one_line(tmp_path, capsys):
    grid = tmp_path / "g.yaml"
    grid.write_text(yaml.safe_dump(GRID))
    for argv, words in ((["--gpu", "a100"], "no gpu_check measurement"), ([], "--gpu: name the GPU"),
                        (["--gpu", "h200", "--time-limit", "0"], "--time-limit"),
                        (["--gpu", "h200", "--stop-margin", "-1"], "--stop-margin: -1.0 is not a number of seconds"),
                        (["--gpu", "h200", "--stop-margin", "nan"], "--stop-margin: nan"),
                        (["--gpu", "h200", "--images", "x=-1"], "--images x=-1")):
        assert main(["estimate", "--grid", str(grid), *argv]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and words in err


def test_methods_not_measured_take_the_rate_of_their_gating(rates):
    """SimCLR and Top-k NCL (no gating head, NCL's FLOPs) are priced at NCL's 1000 images/s; the BayesNCL variants
    at BayesNCL's 500; with BayesNCL unmeasured, at NCL's scaled by the counted FLOPs."""
    grid = json.loads(json.dumps(GRID))
    grid["variants"] = {"SimCLR": {"method": {"name": "cl"}}, "Top-k NCL": {"method": {"name": "topk_ncl"}},
                        "Soft gate": {"method": {"name": "bayesncl", "gate": "soft"}}}
    grid["sets"] = {"table1": {"variants": list(grid["variants"])}}
    est = estimate(grid, rates)
    runs = expand_grid(grid)
    assert est.rows["cifar10"].runs == len(runs) == 6 and sum(not r.init_of for r in runs.values()) == 3
    seconds = 100 * (50_000 // 256) * 256
    assert est.rows["cifar10"].pretrain_h == pytest.approx((2 * seconds / 1000 + seconds / 500) / 3600, rel=1e-9)
    with_cl = {**rates, "methods": [*rates["methods"], {**rates["methods"][0], "method": "cl", "img_per_s": 2000.0}]}
    est = estimate(grid, with_cl)  # SimCLR measured itself: its own rate
    assert est.rows["cifar10"].pretrain_h == pytest.approx((seconds / 2000 + seconds / 1000 + seconds / 500) / 3600,
                                                           rel=1e-9)
    only_ncl = {**rates, "methods": rates["methods"][:1]}
    est = estimate(grid, only_ncl)
    soft = seconds / (1000 * flops("ncl") / flops("bayesncl"))
    assert est.rows["cifar10"].pretrain_h == pytest.approx((2 * seconds / 1000 + soft) / 3600, rel=1e-9)


def read_estimate(text: str):
    """`render`'s text read back: the first line; the table as {dataset: {column: value}}, each right-aligned value
    ending where its label ends; the lines after the table (the submissions line, the notes)."""
    first, blank, head, *rest = text.split("\n")
    assert blank == "" and text.endswith("\n") and not text.endswith("\n\n")
    labels = {m.group(): m.end() for m in re.finditer(r"\S+(?: \S+)*", head)}
    assert list(labels) == ["dataset", "runs", "pretrain", "eval", "eval held", "total", "requested", "submissions"]
    table = {}
    while rest[0]:
        line = rest.pop(0)
        row = table[line.split()[0]] = {}
        for name, end in list(labels.items())[1:]:
            assert end == len(line) or line[end] == " ", (name, line)
            row[name] = float(line[:end].split()[-1])
    return first, table, rest[1:-1]


def test_the_table_and_the_submissions_line_read_back(rates):
    """Two datasets (CIFAR-10 and a prepared image folder), each with NCL, BayesNCL and their untrained twins,
    under a 100-minute limit: the rows add up to `all`, and the submissions line splits its total as the
    workflow submits them."""
    grid = json.loads(json.dumps(GRID))
    grid["datasets"]["mine"] = {"data": {"dataset": "imagefolder", "root": "/x", "imagefolder": {"crop_size": 32}}}
    est = estimate(grid, rates, time_limit_min=100, sizes={"imagefolder": 1000})
    first, table, after = read_estimate(render(est))
    assert first == "GPU-hours on one test GPU, from by hand"
    assert list(table) == ["cifar10", "imagefolder", "all"]
    assert table["all"]["runs"] == table["cifar10"]["runs"] + table["imagefolder"]["runs"] == 8
    for col in ("pretrain", "eval", "eval held", "total", "requested"):  # each shown to 0.1
        assert abs(table["all"][col] - table["cifar10"][col] - table["imagefolder"][col]) <= 0.1 + 1e-9
    for row in table.values():
        assert abs(row["total"] - row["pretrain"] - row["eval held"]) <= 0.1 + 1e-9
    for name, row in est.rows.items():  # each column is its row's figure, to 0.1
        assert table[name]["requested"] == round(row.pretrain_request_h + row.eval_request_h, 1)
        assert table[name]["eval held"] == round(row.eval_held_h, 1)
    # pretraining: CIFAR-10's NCL 84.2 min (with start-up) fits one 100-minute allocation's 90 before its stop
    # margin, BayesNCL's 167.4 need two, a twin none (its initialisation is in its evaluation submission); the
    # folder's 1,000 images (3 batches an epoch) one each. One evaluation submission per run; an atlas per dataset
    # (both have NCL and BayesNCL (STE) in table1); one prepare_data for the folder's prepared copy.
    pattern = (r"submissions: (\d+) pretraining(?: \(at most (\S+) minutes each\))?, (\d+) evaluation, (\d+) atlas, "
               r"(\d+) prepare_data")
    m = re.fullmatch(pattern, after[0])
    assert m and (int(m[1]), m[2], int(m[3]), int(m[4]), int(m[5])) == (5, "100", 8, 2, 1), after[0]
    # the datasets' submissions are their runs'; `all` adds the atlases and prepare_data jobs
    assert int(m[1]) + int(m[3]) == table["cifar10"]["submissions"] + table["imagefolder"]["submissions"]
    assert sum(map(int, m.group(1, 3, 4, 5))) == table["all"]["submissions"]
    # the notes name the table's columns, then compare the requests with the work and say what they learned from
    assert [line.split(": ")[0] for line in after[1:]] == ["rates", "measured on", "eval", "total", "requested",
                                                           "requested against expected", "learned from"]
    assert {part.split(": ")[0] for line in after[1:] for part in line.split("; ")} >= {"eval", "eval held", "total",
                                                                                        "requested"}
    m = re.fullmatch(pattern, read_estimate(render(dataclasses.replace(est, time_limit_min=None)))[2][0])
    assert m and m[2] is None
    m = re.fullmatch(pattern, read_estimate(render(dataclasses.replace(est, time_limit_min=90.5)))[2][0])
    assert m and m[2] == "90.5"
    # the requests against the work they are for: pretraining's, and the evaluation's held hours and GPU work
    t = est.total()
    assert after[-2] == (f"requested against expected: pretraining {t.pretrain_request_h:.1f} for {t.pretrain_h:.1f} "
                         f"({t.pretrain_request_h / t.pretrain_h:.2f}x), evaluation {t.eval_request_h:.1f} for "
                         f"{t.eval_held_h:.1f} held ({t.eval_request_h / t.eval_held_h:.2f}x; "
                         f"{t.eval_request_h / t.eval_h:.2f}x its GPU work)")
    assert after[-1] == "learned from: no finished job of the grid"  # no results folder given
    nothing = read_estimate(render(dataclasses.replace(est, rows={})))[2][-2]  # nothing to divide by
    assert nothing == "requested against expected: pretraining 0.0 for 0.0 (-), evaluation 0.0 for 0.0 held (-; - " \
                      "its GPU work)"


def test_the_background_probe_and_a_given_dataset_size(rates):
    """eval.max_images caps every split; Waterbirds' train and test (4,795 and 5,794 images) are embedded for
    table6's background probe only; a dataset sized by --images N tests on N // 5."""
    grid = json.loads(json.dumps(GRID))
    grid["datasets"]["mine"] = {"data": {"dataset": "imagefolder", "root": "/x", "imagefolder": {"crop_size": 32}}}
    grid["defaults"]["eval"].update(max_images=5000, waterbirds_root="/wb")
    grid["sets"] = {"table6": {"variants": ["NCL"]}, "figure3": {"variants": ["BayesNCL (STE)"]}}
    est = estimate(grid, rates, sizes={"imagefolder": 1003})
    runs = expand_grid(grid)
    assert sorted((r.config["data"]["dataset"], r.config["method"]["name"], bool(r.init_of)) for r in runs.values()) \
        == sorted((ds, m, twin) for ds in ("cifar10", "imagefolder") for m, twin in
                  (("ncl", False), ("ncl", True), ("bayesncl", False)))  # table6's NCL has an untrained twin

    def views(test, train, background):  # forward views: features (test split), 10 probe passes, Waterbirds
        return test + 10 * train + background

    wb = min(4795, 5000) + min(5794, 5000)
    cifar = 2 * views(5000, 5000, wb) / 1000 + views(5000, 5000, 0) / 500  # NCL and its twin at 1000/s
    mine = 2 * views(1003 // 5, 1003, wb) / 1000 + views(1003 // 5, 1003, 0) / 500
    assert est.rows["cifar10"].eval_h == pytest.approx(cifar / 6 / 3600, rel=1e-9)
    assert est.rows["imagefolder"].eval_h == pytest.approx(mine / 6 / 3600, rel=1e-9)


def test_the_h200_figures_are_the_measured_ones():
    """A run of exactly the measured model (ResNet-18 CIFAR, width 64, projector 2048/256, batch 256, 32 px) is
    priced at the rate docs/BENCHMARKS.md's "Measured figures" give for run 2 (its counted GFLOPs are the
    measurement's to 4 digits), whatever the GPU's name is spelled."""
    doc = (ROOT / "docs" / "BENCHMARKS.md").read_text().split("### Measured figures", 1)[1]

    def cells(label):
        line = next(ln for ln in doc.splitlines() if ln.startswith(f"| {label}"))
        return [c.strip() for c in line.strip("|").split("|")[1:3]]

    rate = [float(c.split("→")[-1].replace(",", "")) for c in cells("training images/s")]
    gflops = [float(c.split()[0]) for c in cells("counted forward GFLOPs per 32 px view")]
    assert {m["method"]: (m["img_per_s"], m["gflops_fwd_per_view"]) for m in MEASURED["h200"]["methods"]} == {
        "ncl": (rate[0], gflops[0]), "bayesncl": (rate[1], gflops[1])}
    for name in ("h200", "H200", "NVIDIA H200", "nvidia-h200", "H-200"):
        assert measured_rates(name) is MEASURED["h200"], name
    grid = {"results": "results", "seeds": [0], "defaults": {"train": {"epochs": 10, "batch_size": 256}},
            "datasets": {"cifar10": {"data": {"dataset": "cifar10", "root": "/nowhere"}},
                         "cifar100": {"data": {"dataset": "cifar100", "root": "/nowhere"}}},
            "variants": {"NCL": {"method": {"name": "ncl"}}, "BayesNCL (STE)": {"method": {"name": "bayesncl"}}},
            "sets": {"figure3": {"variants": ["NCL"], "datasets": ["cifar10"]},
                     "table3": {"variants": ["BayesNCL (STE)"], "datasets": ["cifar100"]}}}
    est = estimate(grid, measured_rates("NVIDIA H200"))
    seconds = 10 * (50_000 // 256) * 256
    assert est.rows["cifar10"].pretrain_h == pytest.approx(seconds / rate[0] / 3600, rel=1e-4)
    assert est.rows["cifar100"].pretrain_h == pytest.approx(seconds / rate[1] / 3600, rel=1e-4)
    first = render(est).splitlines()[0]
    assert first.startswith("GPU-hours on one NVIDIA H200, from ") and 'docs/BENCHMARKS.md, "Measured figures"' in first


def test_a_gpu_check_json_is_named_as_the_source(tmp_path, capsys):
    """The table's first line names the gpu_check.json it priced from; the rates line the mode (the grid's)."""
    result = {"ncl": {"img_per_s": 1.0, "gflops_fwd_per_view": 1.0}, "bayesncl": {"img_per_s": 2.0,
                                                                                 "gflops_fwd_per_view": 1.0}}
    grid = tmp_path / "g.yaml"
    grid.write_text(yaml.safe_dump({**GRID, "sets": {"figure3": {"variants": ["NCL"]}}}))
    path = tmp_path / "gpu_check.json"
    for extra in ({}, {"ncl_cudagraph": result["ncl"], "bayesncl_cudagraph": result["ncl"]}):
        path.write_text(json.dumps({"info": {"gpu": "NVIDIA L40S"}, "steps": {"throughput": {
            "status": "ok", "result": {**result, **extra}}}}))
        assert main(["estimate", "--grid", str(grid), "--measured", str(path)]) == 0
        out = capsys.readouterr().out.splitlines()
        assert out[0] == f"GPU-hours on one NVIDIA L40S, from {path}"
        assert "rates: train.graph=eager at the measured eager rate, the mode each run trains in" in out


def test_the_rates_say_the_gpu_and_stem_they_were_measured_on(tmp_path, capsys):
    """The stored H200 rates were measured on the CIFAR stem with padding 1 (1.114 GFLOPs per view), the grid's is
    padding 2: the table says which, and a gpu_check.json's records carry the model they were measured on."""
    assert {m["model"]["cifar_padding"] for m in MEASURED["h200"]["methods"]} == {1}
    for m in MEASURED["h200"]["methods"]:  # the count of the model recorded
        sets = [f"method.name={m['method']}", *(f"model.{k}={v}" for k, v in m["model"].items())]
        assert m["gflops_fwd_per_view"] == pytest.approx(E.forward_flops(resolve(sets=sets)) / 1e9, abs=1e-4)
    assert E.measured_on(MEASURED["h200"]) == ("one NVIDIA H200, resnet18 cifar stem padding 1, eager step (GFLOPs "
                                               "per view: ncl 1.114, bayesncl 1.117)")
    model = {"arch": "resnet18", "width": 64, "stem": "cifar", "cifar_padding": 2, "proj_hidden": 2048,
             "proj_dim": 256}
    result = {"model": model, "ncl": {"img_per_s": 1.0, "gflops_fwd_per_view": 1.4103, "model": model},
              "bayesncl": {"img_per_s": 2.0, "gflops_fwd_per_view": 1.4134}}  # one from before the model was kept
    path = tmp_path / "gpu_check.json"
    path.write_text(json.dumps({"info": {"gpu": "NVIDIA H100 80GB HBM3"},
                                "steps": {"throughput": {"status": "ok", "result": result}}}))
    grid = tmp_path / "g.yaml"
    grid.write_text(yaml.safe_dump({**GRID, "sets": {"figure3": {"variants": ["NCL"]}}}))
    assert main(["estimate", "--grid", str(grid), "--measured", str(path)]) == 0
    assert ("measured on: one NVIDIA H100 80GB HBM3, resnet18 cifar stem padding 2, eager step (GFLOPs per view: "
            "ncl 1.410); model not recorded, eager step (GFLOPs per view: bayesncl 1.413); each run's rate scaled by "
            "its own counted FLOPs") in capsys.readouterr().out.splitlines()
    imagenet = {**model, "stem": "imagenet"}
    records = [{"method": "ncl", "gflops_fwd_per_view": 1.0, "model": imagenet},
               {"method": "ncl", "graph": "cudagraph", "gflops_fwd_per_view": 1.0, "model": imagenet}]
    assert E.measured_on({"gpu": "G", "methods": records}) == ("one G, resnet18 imagenet stem, eager step (GFLOPs per "
                                                               "view: ncl 1.000); resnet18 imagenet stem, cudagraph "
                                                               "step (GFLOPs per view: ncl 1.000)")


def test_errors_name_the_input_then_what_to_run(tmp_path):
    """Each error starts with the option or setting and its value, and ends with what to give or run instead."""
    path, failed = tmp_path / "gpu_check.json", tmp_path / "failed.json"
    path.write_text("{not json")
    failed.write_text(json.dumps({"steps": {"throughput": {"status": "failed", "result": None}}}))
    cases = [(lambda: measured_rates(None, path), f"--measured {path}: ",
              "; give the gpu_check.json that `benchmarks/gpu_check.py --out DIR` wrote"),
             (lambda: measured_rates(None, failed), f"--measured {failed}: ",
              "; rerun `benchmarks/gpu_check.py --only throughput` on the GPU"),
             (lambda: images({"dataset": "imagefolder", "root": "/x"}), "data.dataset 'imagefolder': ",
              "; give --images imagefolder=N (its training images)")]
    for call, start, end in cases:
        with pytest.raises(ConfigError) as e:
            call()
        msg = str(e.value)
        assert msg.startswith(start) and msg.endswith(end) and "\n" not in msg, msg


def test_run_cost_is_one_runs_share_of_the_table(rates):
    """run_cost and the planner's requests, summed over the grid's runs, are the table's row (estimate is their
    sum)."""
    from bayesncl.planning.estimate import planner, run_cost

    runs = expand_grid(GRID)
    cache: dict = {}
    costs = [run_cost(r, rates, None, cache) for r in runs.values()]
    (row,) = estimate(GRID, rates, time_limit_min=100).rows.values()
    for k in ("pretrain_h", "eval_h", "eval_held_h"):
        assert sum(c[k] for c in costs) == pytest.approx(getattr(row, k), rel=1e-12), k
    assert len(cache) == 2 and all(c["prepared"] is None for c in costs)  # NCL's and BayesNCL's model, counted once
    plan = planner(runs, rates, time_limit_min=100)
    asked = [plan.asked(rid) for rid in runs]
    assert row.allocations == sum(a.allocations for a in asked) == 3
    assert row.submissions == sum(a.allocations + 1 for a in asked) == 3 + 4
    assert row.eval_request_h == pytest.approx(sum(sum(a.evaluation.values()) for a in asked) / 60, rel=1e-12)


def test_a_run_s_flops_follow_its_gating_head_s_depth(rates):
    """Two BayesNCL runs that differ only in method.head_depth are priced at their own counted FLOPs (the FLOPs
    cache is keyed by the head's depth): each run's hours against its own model's count."""
    grid = json.loads(json.dumps(GRID))
    grid["variants"] = {"1-layer head": {"method": {"name": "bayesncl", "head_depth": 1}},
                        "3-layer head": {"method": {"name": "bayesncl", "head_depth": 3}}}
    grid["sets"] = {"table4": {"variants": list(grid["variants"])}}
    runs = [r for r in expand_grid(grid).values() if r.config["train"]["epochs"]]
    seconds = 100 * (50_000 // 256) * 256
    from bayesncl.planning.estimate import run_cost

    cache: dict = {}
    for run in runs:
        depth = run.config["method"]["head_depth"]
        cfg = resolve(sets=[f"model.{k}={v}" for k, v in MODEL.items()] + ["method.name=bayesncl",
                                                                           f"method.head_depth={depth}"])
        own = count_flops_per_image(build_method(cfg).train(), torch.randn(2, 3, 32, 32))
        rate = 500.0 * flops("bayesncl") / own
        assert run_cost(run, rates, None, cache)["pretrain_h"] == pytest.approx(seconds / rate / 3600, rel=1e-9)
    assert len(cache) == 2


def test_pretraining_submissions_over_the_limit_are_counted_by_ceiling(rates):
    """Each allocation trains until its stop margin (10 minutes) before the limit: NCL's 84.2 minutes (with its
    start-up) under a 60-minute limit need 2 allocations (1.68, never rounded down to 1), BayesNCL's 167.4 need 4
    (3.35); a run that fits takes 1. Each allocation asks the limit: the run's request is that many times it."""
    limited = estimate({**GRID, "sets": {"figure3": {"variants": ["NCL", "BayesNCL (STE)"]}}}, rates,
                       time_limit_min=60)
    assert limited.total().allocations == 2 + 4
    assert limited.total().pretrain_request_h == pytest.approx((2 + 4) * 60 / 60, rel=1e-12)
    ncl = {**GRID, "sets": {"figure3": {"variants": ["NCL"]}}}
    assert estimate(ncl, rates, time_limit_min=94.2 * 1.0001).total().allocations == 1
    assert estimate(ncl, rates, time_limit_min=94.2 * 0.9999).total().allocations == 2  # just over: another
    assert estimate(ncl, rates, time_limit_min=94.2 * 0.9999).total().pretrain_request_h == pytest.approx(
        2 * 94 / 60, rel=1e-12)  # the limit in whole minutes, twice
    # no stop margin: the whole limit trains
    assert estimate(ncl, rates, time_limit_min=84.2 * 1.0001, margin_s=0).total().allocations == 1


def test_time_requests_are_the_expected_time_times_the_prior_before_any_job_finished(rates):
    """Before any job has finished, a job needs PRIOR x its expected seconds: NCL's run of GRID trains 4,992 s
    (+ start-up); features embeds 10,000 test views, the paper probe 10 x 50,000 views at 1/6 of 1000 images/s; the
    CPU sections their allowance. Pretraining asks SUBMISSION_START_S + that, then its stop margin, at most the
    limit; the evaluation submission SUBMISSION_START_S + the sections' needs, at least FLOOR_MIN, shared among
    them; a retry twice."""
    import math

    from bayesncl.planning import time_requests as T

    (run,) = [r for r in expand_grid({**GRID, "sets": {"figure3": {"variants": ["NCL"]}}}).values()]
    cost = E.run_cost(run, rates)
    start, cpu = E.SECTION_START_S, E.CPU_SECTION_S
    want = {"features": start + 10_000 / 6 / 1000, "interpretability": start + cpu, "retrieval": start + cpu,
            "linear_probe": start + 500_000 / 6 / 1000}
    assert {k: v[0] for k, v in cost["sections"].items()} == pytest.approx(want, rel=1e-12)
    pre = 100 * (50_000 // 256) * 256 / 1000 + E.PRETRAIN_START_S
    assert cost["expected"] == pytest.approx({"pretrain": pre, **want}, rel=1e-12)
    plan = E.planner({run.run_id: run}, rates)
    asked = plan.asked(run.run_id)
    work = math.ceil((T.SUBMISSION_START_S + T.PRIOR * pre) / 60)
    assert (asked.work, asked.pretrain(), asked.pretrain(2)) == (work, work + 10, 2 * work + 10) == (127, 137, 264)
    total = math.ceil((T.SUBMISSION_START_S + T.PRIOR * sum(want.values())) / 60)
    assert sum(asked.evaluation.values()) == total == 6 and list(asked.evaluation) == list(want)
    assert {k: 2 * v for k, v in asked.evaluation.items()} == {k: plan.minutes(run.run_id, k, 2) for k in want}
    limited = E.planner({run.run_id: run}, rates, time_limit_min=120, margin_s=610).asked(run.run_id)
    assert limited.pretrain() == 120 and limited.margin == 11  # the margin's minutes, rounded up
    assert E.planner({run.run_id: run}, rates, margin_s=610).asked(run.run_id).pretrain() == work + 11
    (row,) = estimate({**GRID, "sets": {"figure3": {"variants": ["NCL"]}}}, rates).rows.values()
    assert row.eval_request_h == pytest.approx(total / 60) and row.pretrain_request_h == pytest.approx(
        (work + 10) / 60)


@pytest.fixture(scope="module")
def paper():
    return estimate(yaml.safe_load((ROOT / "config" / "paper.yaml").read_text()), measured_rates("h200"))


def test_the_paper_grid_asks_for_at_most_twice_its_work(paper):
    """Before any job has finished: what the evaluation submissions are expected to hold is within 2x of their GPU
    work, and what the pretraining and the evaluation submissions ask for each within 2x of what they are expected
    to take (the 72 untrained twins ask for no pretraining submission of their own)."""
    t = paper.total()
    assert t.eval_h < t.eval_held_h <= 2 * t.eval_h
    assert t.pretrain_h < t.pretrain_request_h <= 2 * t.pretrain_h
    assert t.eval_held_h < t.eval_request_h <= 2 * t.eval_held_h
    assert t.allocations == 108 and paper.graphs == {"eager": "eager"}


def test_the_estimate_learns_from_the_grid_s_finished_jobs(tmp_path, capsys):
    """With one of two NCL runs trained in a minute (its benchmark record under the grid's results folder), both
    ask for minutes of pretraining (plus the stop margin), not the prior's 137 each; the table says from what."""
    from bayesncl.runs.files import record_config
    from helpers.report import write_benchmark

    grid = {**GRID, "seeds": [0, 1], "results": str(tmp_path), "sets": {"figure3": {"variants": ["NCL"]}}}
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(grid))
    one = {"info": {"gpu": "test GPU"}, "steps": {"throughput": {"status": "ok", "result": {
        "ncl": {"img_per_s": 1000.0, "gflops_fwd_per_view": flops("ncl") / 1e9}}}}}
    (tmp_path / "gpu_check.json").write_text(json.dumps(one))
    argv = ["estimate", "--grid", str(path), "--measured", str(tmp_path / "gpu_check.json")]

    def requested():
        assert main(argv) == 0
        out = capsys.readouterr().out
        return read_estimate(out)[1]["all"]["requested"], out.splitlines()[-1]

    assert requested() == (round(2 * 137 / 60 + 2 * 6 / 60, 1), f"learned from: no finished job of the grid "
                                                                f"({tmp_path / 'benchmarks'})")
    run_id = next(rid for rid in expand_grid(grid) if rid.endswith("seed~0"))
    record_config(tmp_path / "runs" / run_id, expand_grid(grid)[run_id].config)
    write_benchmark(tmp_path / "benchmarks", f"pretrain/{run_id}.tsv", 60.0, 800.0, 1, "pretrain")
    (tmp_path / "runs" / run_id / "model.pt").write_text("x")  # its outputs there: the estimate prices them still
    (tmp_path / "runs" / run_id / "eval").mkdir()
    for name in ("features", "interpretability", "retrieval", "linear_probe"):
        (tmp_path / "runs" / run_id / "eval" / f"{name}.json").write_text("{}")
    asked, said = requested()
    assert asked == round(2 * (3 + 10) / 60 + 2 * 6 / 60, 1) and said == (
        f"learned from: 1 finished job of the grid, 1 kind (rule, dataset, architecture) ({tmp_path / 'benchmarks'})")
    argv += ["--stop-margin", "0"]  # no stop margin; the finished jobs looked for elsewhere
    assert requested()[0] == round(2 * 3 / 60 + 2 * 6 / 60, 1)
    argv += ["--results", str(tmp_path / "elsewhere")]
    assert requested() == (round(2 * 127 / 60 + 2 * 6 / 60, 1), f"learned from: no finished job of the grid "
                                                                f"({tmp_path / 'elsewhere' / 'benchmarks'})")


def test_the_built_in_sections_are_priced_not_taken_at_their_declared_runtime(rates):
    """Every section of the package is priced (its start-up and GPU work, or the CPU allowance), not taken at the
    runtime it declares for a job run alone (cost declares 15 minutes): Table 7's cost and Table 3's dynamics as
    CPU sections."""
    grid = {**GRID, "sets": {"table7": {"variants": ["NCL"]}, "table3": {"variants": ["NCL"], "dynamics_every": 10}}}
    (run,) = expand_grid(grid).values()
    cost = E.run_cost(run, rates)
    assert {"cost", "dynamics"} <= set(cost["sections"]) and cost["declared"] == ()
    for name in ("cost", "dynamics", "interpretability", "retrieval"):
        assert cost["sections"][name] == (E.SECTION_START_S + E.CPU_SECTION_S, 0.0) and SECTIONS[name].runtime * 60 \
            != cost["expected"][name], name


def test_imported_weights_are_never_trained(rates):
    """A run of imported weights (the workflow config's `imported:`) costs no pretraining and asks for none."""
    import dataclasses

    (run,) = [r for r in expand_grid({**GRID, "sets": {"figure3": {"variants": ["NCL"]}}}).values()]
    own = E.run_cost(run, rates)
    imported = dataclasses.replace(run, imported={"checkpoint": "released.pth", "args": None, "sha256": "0" * 64})
    cost = E.run_cost(imported, rates)
    assert cost["pretrain_h"] == 0 < own["pretrain_h"] and "pretrain" not in cost["expected"]
    assert cost["eval_held_h"] == own["eval_held_h"] and cost["expected"] == {
        k: v for k, v in own["expected"].items() if k != "pretrain"}
    asked = E.planner({run.run_id: imported}, rates).asked(run.run_id)
    assert (asked.allocations, asked.pretrain()) == (0, None) and "pretrain" not in asked.evaluation


def test_a_plugin_s_section_is_priced_at_the_runtime_it_declares(rates):
    """A section the estimate does not know (a plugin's) is expected to take its declared runtime, on the GPU
    where it runs the network, and needs exactly that (no PRIOR) in its run's evaluation submission."""
    import math

    from bayesncl.planning import time_requests as T

    from bayesncl.evaluation.sections import section

    section("zz_probe", gpu=lambda cfg: True, every_run=True, runtime=50)(lambda ctx: {})
    try:
        (run,) = [r for r in expand_grid({**GRID, "sets": {"figure3": {"variants": ["NCL"]}}}).values()]
        cost = E.run_cost(run, rates)
        assert cost["sections"]["zz_probe"] == (3000.0, 3000.0)
        assert cost["declared"] == ("zz_probe",)
        asked = E.planner({run.run_id: run}, rates).asked(run.run_id)
        others = sum(t for k, t in cost["expected"].items() if k not in ("pretrain", "zz_probe"))
        total = math.ceil((T.SUBMISSION_START_S + T.PRIOR * others + 3000.0) / 60)
        assert sum(asked.evaluation.values()) == total and asked.evaluation["zz_probe"] >= 50
        assert cost["eval_h"] == pytest.approx(sum(w for _, w in cost["sections"].values()) / 3600)
    finally:
        SECTIONS._specs.pop("zz_probe")
