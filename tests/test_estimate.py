"""`bayesncl estimate`: a small grid priced by hand (FLOPs counted on real CPU models, epochs x whole batches,
the evaluation's forward passes, the submissions), the paper grid against the figures docs/CLUSTER.md prints, and
the rates from a gpu_check.json."""

import json
from pathlib import Path

import pytest
import torch
import yaml

from bayesncl.cli import main
from bayesncl.config import resolve
from bayesncl.errors import ConfigError
from bayesncl.estimate import MEASURED, estimate, measured_rates
from bayesncl.evaluation.cost import count_flops_per_image
from bayesncl.evaluation.sections import SECTIONS
from bayesncl.grid import expand_grid
from bayesncl.methods import build_method

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
    held = sum(SECTIONS[s].runtime for s in ("features", "interpretability", "retrieval", "linear_probe"))
    assert row.eval_held_h == pytest.approx(4 * held / 60)
    # four pretraining (two only save their initialisation), four evaluation submissions, the CIFAR-10 atlas
    assert (row.submissions, est.atlas, est.prepare, est.total().submissions) == (8, 1, 0, 9)
    # a 100-minute limit: NCL's 83.2 minutes fit one allocation, BayesNCL's 166.4 need two, each twin one
    limited = estimate(GRID, rates, time_limit_min=100)
    assert limited.total().allocations == 5 and limited.total().submissions == 10


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


@pytest.mark.grid  # the paper grid's 192 runs (108 trained, 84 untrained twins) expanded and their models counted
def test_the_paper_grid_as_docs_cluster_prints_it(capsys):
    assert main(["estimate", "--grid", "config/paper.yaml", "--gpu", "H200"]) == 0
    out = capsys.readouterr().out
    total = next(line for line in out.splitlines() if line.startswith("all "))
    assert total.split() == ["all", "192", "64.0", "8.3", "1242.0", "72.3", "388"]  # twins: no training hours
    assert "192 pretraining, 192 evaluation, 3 atlas, 1 prepare_data" in out
    doc = (ROOT / "docs" / "CLUSTER.md").read_text()
    assert total in doc  # the page shows the command's output as it is


def test_rates_from_a_gpu_check_json_prefer_the_captured_step(tmp_path):
    report = {"info": {"gpu": "NVIDIA L40S"}, "steps": {"throughput": {"status": "ok", "result": {
        "ncl": {"img_per_s": 1.0, "gflops_fwd_per_view": 1.0}, "bayesncl": {"img_per_s": 2.0, "gflops_fwd_per_view": 1.0},
        "ncl_cudagraph": {"img_per_s": 3.0, "gflops_fwd_per_view": 1.0},
        "bayesncl_cudagraph": {"img_per_s": 4.0, "gflops_fwd_per_view": 1.0}}}}}
    path = tmp_path / "gpu_check.json"
    path.write_text(json.dumps(report))
    r = measured_rates(None, path)
    assert r["gpu"] == "NVIDIA L40S" and [(m["method"], m["img_per_s"]) for m in r["methods"]] == [
        ("ncl", 3.0), ("bayesncl", 4.0)]
    del report["steps"]["throughput"]["result"]["bayesncl_cudagraph"]  # not every method captured: the eager rates
    path.write_text(json.dumps(report))
    assert [m["img_per_s"] for m in measured_rates(None, path)["methods"]] == [1.0, 2.0]
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
