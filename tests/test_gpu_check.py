"""benchmarks/gpu_check.py: its helpers against naive references, and --tiny end to end on CPU (so the
script the GPU machine runs cannot rot)."""

import ast
import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from bayesncl.settings.config import resolve
from bayesncl.measures.cost import count_flops_per_image
from bayesncl.model.methods import build_method

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"


@pytest.fixture(scope="module")
def gc():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def _cuda_skipped_by_ast(tests: Path) -> set[str]:
    """Reference: test functions whose decorators include a skipif mentioning cuda, read with ast."""
    found = set()
    for path in tests.glob("test_*.py"):
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                for d in node.decorator_list:
                    src = ast.unparse(d)
                    if "skipif" in src and "cuda" in src:
                        found.add(f"{path.relative_to(tests.parent).as_posix()}::{node.name}")
    return found


def test_cuda_test_ids_match_an_ast_reading_of_the_real_tests(gc):
    ids = gc.cuda_test_ids(ROOT / "tests")
    assert ids and set(ids) == _cuda_skipped_by_ast(ROOT / "tests")


def test_cuda_test_ids_stacked_decorators_and_module_marks(gc, tmp_path):
    t = tmp_path / "tests"
    t.mkdir()
    (t / "test_a.py").write_text(
        "import pytest, torch\n"
        "@pytest.mark.skipif(not torch.cuda.is_available(), reason='needs CUDA')\n"
        "@pytest.mark.parametrize('n', [1, 2])\n"
        "def test_on_gpu(n):\n    pass\n"
        "def test_cpu_mentions_cuda():\n    torch.cuda.is_available()\n"
        "@pytest.mark.skipif(True, reason='other')\n"
        "def test_other():\n    pass\n")
    (t / "test_b.py").write_text(
        "import pytest, torch\n"
        "pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason='needs CUDA')\n"
        "def test_x():\n    pass\n")
    assert gc.cuda_test_ids(t) == ["tests/test_a.py::test_on_gpu", "tests/test_b.py"]


def test_junit_counts(gc, tmp_path):
    xml = tmp_path / "r.xml"
    xml.write_text('<testsuites><testsuite name="pytest" tests="5" failures="1" errors="0" skipped="2">'
                   "</testsuite></testsuites>")
    assert gc.junit_counts(xml) == {"tests": 5, "failures": 1, "errors": 0, "skipped": 2, "passed": 2}


def test_compare_weights(gc, tmp_path):
    a = {"w": torch.arange(6.0).reshape(2, 3), "b": torch.zeros(3)}
    b = {k: v.clone() for k, v in a.items()}
    c = {k: v.clone() for k, v in a.items()}
    c["w"][1, 2] += 0.25
    for name, sd in (("a", a), ("b", b), ("c", c)):
        torch.save({"model": sd}, tmp_path / f"{name}.pt")
    assert gc.compare_weights(tmp_path / "a.pt", tmp_path / "b.pt")["identical"]
    r = gc.compare_weights(tmp_path / "a.pt", tmp_path / "c.pt")
    assert not r["identical"] and r["differing_tensors"] == 1 and r["max_abs_diff"] == 0.25


def test_estimate_grid_matches_hand_computation(gc):
    """Two jobs priced by hand: FLOPs counted on real (CPU) models, rate scaled by FLOPs, epochs x whole batches."""
    small = ["model.width=4", "model.proj_hidden=32", "model.proj_dim=16"]
    ref_ncl = resolve(sets=small + ["method.name=ncl"])
    ref_bay = resolve(sets=small + ["method.name=bayesncl"])
    jobs = [resolve(sets=["model.width=8", "model.proj_hidden=32", "model.proj_dim=16", "method.name=topk_ncl",
                          "data.dataset=cifar100", "data.root=/x", "train.epochs=3", "train.batch_size=256"]),
            resolve(sets=["model.width=4", "model.stem=imagenet", "model.proj_hidden=64", "model.proj_dim=32",
                          "method.name=bayesncl", "data.dataset=imagenet100", "data.root=/x", "train.epochs=2",
                          "train.batch_size=128", "eval.probe=paper", "eval.probe_epochs=5"])]

    def flops(cfg, size):
        torch.manual_seed(0)
        return count_flops_per_image(build_method(cfg).train(), torch.randn(2, 3, size, size))

    tput = {"ncl": {"img_per_s": 1000.0, "gflops_fwd_per_view": flops(ref_ncl, 32) / 1e9},
            "bayesncl": {"img_per_s": 900.0, "gflops_fwd_per_view": flops(ref_bay, 32) / 1e9}}
    r = gc.estimate_grid(jobs, tput)
    rate0 = 1000.0 * flops(ref_ncl, 32) / flops(jobs[0], 32)
    rate1 = 900.0 * flops(ref_bay, 32) / flops(jobs[1], 224)
    h0 = 3 * (50_000 // 256) * 256 / rate0 / 3600
    h1 = 2 * (126_689 // 128) * 128 / rate1 / 3600
    assert r["jobs"] == 2
    assert r["per_dataset"]["cifar100"]["gpu_hours"] == pytest.approx(h0, rel=1e-9)
    assert r["per_dataset"]["imagenet100"]["gpu_hours"] == pytest.approx(h1, rel=1e-9)
    assert r["pretrain_gpu_hours"] == pytest.approx(h0 + h1, rel=1e-9)
    assert r["probe_gpu_hours"] == pytest.approx(5 * 126_689 / (6 * rate1) / 3600, rel=1e-9)


def test_estimate_grid_reads_gating_and_the_family_from_the_registry(gc):
    """A plugin method declared gated is priced as BayesNCL is (its gating head's FLOPs, the gated family's rate),
    one that is not at the reference's rate: the registry's traits, not the name "bayesncl"."""
    from bayesncl.settings import registry

    small = ["model.width=4", "model.proj_hidden=32", "model.proj_dim=16", "train.epochs=1", "data.dataset=cifar10",
             "data.root=/x"]
    tput = {"ncl": {"img_per_s": 1000.0, "gflops_fwd_per_view": 1.0},
            "bayesncl": {"img_per_s": 500.0, "gflops_fwd_per_view": 1.0}}
    from helpers.plugins import registered

    with registered():
        registry.register_method("gated_plug", "G", impl="bayesncl.model.methods:BayesNCL", gated=True, module="plug_g",
                                 reads=registry.METHODS["bayesncl"].reads)
        registry.register_method("plain_plug", "P", impl="bayesncl.model.methods:NCL", module="plug_g")
        hours = {m: gc.estimate_grid([resolve(sets=small + [f"method.name={m}"])], tput)["pretrain_gpu_hours"]
                 for m in ("bayesncl", "gated_plug", "ncl", "plain_plug")}
    assert hours["gated_plug"] == hours["bayesncl"] and hours["plain_plug"] == hours["ncl"]
    assert hours["bayesncl"] > hours["ncl"]
    with pytest.raises(Exception, match=r"^no measured rate of a gated method among \['ncl'\]"):
        gc.estimate_grid([resolve(sets=small + ["method.name=bayesncl"])], {"ncl": tput["ncl"]})


def test_the_minutes_per_run_are_the_resnet18_runs(gc):
    """The figures table's minutes per run come from the grid's ResNet-18 runs (the paper's Table 7 network), not
    from a ResNet-50 run of the same method and dataset priced after them."""
    base = ["model.width=4", "model.proj_hidden=32", "model.proj_dim=256", "train.epochs=1", "data.dataset=cifar10",
            "data.root=/x", "method.name=ncl"]
    tput = {"ncl": {"img_per_s": 1000.0, "gflops_fwd_per_view": 1.0}}
    r18, r50 = (resolve(sets=base + [f"model.arch={a}"]) for a in ("resnet18", "resnet50"))
    alone = gc.estimate_grid([r18], tput)["per_dataset"]["cifar10"]["minutes_per_run"]
    both = gc.estimate_grid([r18, r50], tput)["per_dataset"]["cifar10"]
    assert both["minutes_per_run"] == alone and both["gpu_hours"] * 60 > alone["ncl"] * 1.5


def test_the_grid_is_priced_in_the_mode_it_trains(gc, tmp_path, monkeypatch):
    """A grid that captures its step is priced at the captured step's rates where the reference method's was
    measured, else at the eager ones (a gated method's captured rate alone does not decide)."""
    import yaml

    estimate = sys.modules[gc.estimate_grid.__module__]
    grid = {"seeds": [0], "datasets": {"cifar10": {"data": {"dataset": "cifar10", "root": "/x"}}},
            "defaults": {"model": {"width": 4, "proj_hidden": 32, "proj_dim": 16},
                         "train": {"epochs": 1, "graph": "cudagraph"}},
            "variants": {"NCL": {"method": {"name": "ncl"}}}, "sets": {"table1": {"variants": ["NCL"]}}}
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "paper.yaml").write_text(yaml.safe_dump(grid))
    monkeypatch.setattr(estimate, "ROOT", tmp_path)
    eager = {"ncl": {"img_per_s": 1000.0, "gflops_fwd_per_view": 1.0},
             "bayesncl": {"img_per_s": 900.0, "gflops_fwd_per_view": 1.0}}
    fast = {"img_per_s": 4000.0, "gflops_fwd_per_view": 1.0}

    class Steps:
        device = torch.device("cuda")

        def __init__(self, captured):
            self.results = {"throughput": eager, "captured_step": captured}

        def step_result(self, name):
            return self.results.get(name)

    hours = {}
    for name, captured in (("reference", {"ncl": fast}), ("gated only", {"bayesncl": fast}), ("none", None)):
        r = estimate.grid_estimate(Steps(captured))
        hours[name] = (r["rates_from"], r["pretrain_gpu_hours"])
    assert hours["reference"][0] == "train.graph=cudagraph"
    assert hours["gated only"][0] == hours["none"][0] == "train.graph=eager"
    assert hours["reference"][1] == pytest.approx(hours["none"][1] / 4) and hours["gated only"] == hours["none"]
    on_cpu = Steps(None)
    on_cpu.device = torch.device("cpu")  # the jobs priced, no GPU-hours from a CPU's rates
    assert estimate.grid_estimate(on_cpu) == {"jobs": 2, "rates_from": "train.graph=eager",
                                              "note": "no GPU-hours or CPUs per GPU from a CPU's rates"}


def test_cuda_without_a_gpu_is_a_one_line_error(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible")
    r = subprocess.run([sys.executable, str(SCRIPT), "--device", "cuda", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "--device cuda" in r.stderr and "--device cpu --tiny" in r.stderr


def test_a_budget_of_no_time_is_a_one_line_error(gc, tmp_path, capsys):
    for budget in ("0", "-5", "nan"):
        assert gc.main(["--device", "cpu", "--tiny", "--budget", budget, "--out", str(tmp_path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"gpu_check: --budget {budget}: ") and "default 300" in err
    assert not (tmp_path / "gpu_check.json").exists()


@pytest.mark.long
def test_tiny_mode_runs_every_step_on_cpu(gc, tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--tiny", "--out", str(out)],
                       capture_output=True, text=True, timeout=900, env=env)
    report = json.loads((out / "gpu_check.json").read_text())
    bad = {k: v.get("error") for k, v in report["steps"].items() if v["status"] != "ok"}
    assert r.returncode == 0 and not bad, (bad, r.stdout[-3000:], r.stderr[-3000:])
    steps = report["steps"]
    assert list(steps) == list(gc.STEPS)
    sig = steps["sigterm_resume"]["result"]
    assert sig["identical"] and sig["interrupted_at"]["step"] > 0 and sig["sets"] == ["train.deterministic=true"]
    assert steps["cuda_tests"]["result"]["skipped"] == steps["cuda_tests"]["result"]["tests"] > 0
    t = steps["throughput"]["result"]
    assert t["ncl"]["img_per_s"] > 0 and t["bayesncl"]["gflops_fwd_per_view"] > t["ncl"]["gflops_fwd_per_view"]
    assert t["methods"] == ["cl", "ncl", "topk_ncl", "bayesncl"] and t["graph"] == "eager"
    prof = steps["step_profile"]["result"]
    for m in ("ncl", "bayesncl"):  # the phases are parts of the step
        parts = sum(prof[m][k] for k in ("augment", "forward", "backward", "optimizer"))
        assert all(prof[m][k] > 0 for k in ("forward", "backward", "optimizer")) and parts == pytest.approx(
            prof[m]["total"], rel=0.5), prof
    assert {"interpretability", "linear_probe", "cost"} <= set(steps["cli_end_to_end"]["result"]["sections"])
    assert t["model"]["cifar_padding"] == 1 and t["ncl"]["model"] == t["model"]  # the tiny model's, recorded
    est = steps["grid_estimate"]["result"]  # priced, but no GPU-hours from a CPU's rates
    assert est["jobs"] > 0 and report["targets"] and not [k for k in est if "hours" in k or "cpus" in k]
    md = (out / "gpu_check.md").read_text()
    assert all(f"| {name} | ok |" in md for name in gc.STEPS) and not re.search(r"\d GPU-h", md)
    assert md.count("| pending: no GPU |") == 8 and "## Figures" in r.stdout  # printed too, with planned minutes
    assert "every figure within 4.7 minutes on one H100, 4.2 minutes on one H200" in r.stdout
    info = report["info"]
    assert info["plan"] == "tiny" and info["budget_s"] == 600 and 0 < info["startup_s"] < info["total_seconds"] <= 600


def test_each_figure_gives_its_goal_and_its_value_or_pending_without_a_gpu():
    """The figures a lent GPU is for, the grid's eager step first: on a CPU every one is "pending: no GPU" (a CPU's
    numbers are not them), on CUDA the measured value, and a step that failed says so; each with its planned
    minute."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from gpu.summary import PENDING, figures, markdown

    t = {"methods": ["cl", "ncl", "topk_ncl", "bayesncl"], "overhead_pct": 2.5,
         **{m: {"img_per_s": 1000.0, "achieved_tflops": 150.0} for m in ("cl", "ncl", "topk_ncl", "bayesncl")}}
    steps = {"cuda_tests": {"status": "ok", "result": {"passed": 9, "tests": 9}},
             "throughput": {"status": "ok", "result": t},
             "matmul_peak": {"status": "ok", "result": {"tflops": 600.0}},
             "captured_step": {"status": "ok", "result": {m: {"img_per_s": 1500.0} for m in ("ncl", "bayesncl")}},
             "grid_estimate": {"status": "ok", "result": {"imagenet_cpus_per_gpu": 7, "pretrain_gpu_hours": 70.46,
                                                          "rates_from": "train.graph=eager"}},
             "sigterm_resume": {"status": "failed", "error": "boom"}}
    cpu = figures({"info": {"device": "cpu"}, "steps": steps})
    assert len(cpu) == 8 and all(f["value"] == PENDING and f["goal"] for f in cpu)
    assert [f["planned"]["h200"] for f in cpu] == ["0.9", "2.2", "2.2", "2.9", "3.6", "3.6", "3.7", "4.2"]
    assert [f["planned"]["h100"] for f in cpu] == ["1.0", "2.3", "2.3", "3.2", "3.9", "3.9", "4.0", "4.7"]
    short = figures({"info": {"device": "cpu"}, "steps": steps}, budget_s=240)  # the captured step left out
    assert short[-1]["planned"] == {"h100": "not planned", "h200": "not planned"}
    assert short[0]["planned"]["h200"] == "0.9"
    cuda = {f["name"].split(",")[0]: f["value"] for f in figures({"info": {"device": "cuda:0"}, "steps": steps})}
    assert cuda["CUDA-only tests"] == "9 of 9 passed"
    assert cuda["training images/s"] == "cl 1,000 img/s; ncl 1,000 img/s; topk_ncl 1,000 img/s; bayesncl 1,000 img/s"
    assert cuda["BayesNCL time overhead over NCL"] == "+2.50%"
    assert cuda["share of the measured bf16 matmul peak"] == "ncl 25.0%, bayesncl 25.0%"
    assert cuda["CPUs per GPU for the ImageNet-100 feed (prepared copy)"] == "7"
    assert cuda["config/paper.yaml's pretraining GPU-hours at the measured rate"] == "70.5 (train.graph=eager)"
    assert cuda["resume bit-identical to an uninterrupted run"] == "not measured: step sigterm_resume failed"
    assert cuda["an option: the step captured (train.graph=cudagraph) against eager"] == (
        "ncl 1,500 captured / 1,000 eager img/s (1.50x); bayesncl 1,500 captured / 1,000 eager img/s (1.50x)")
    md = markdown({"info": {"device": "cpu", "tiny": True, "date": "d", "commit": "c", "torch": "t", "cpus": 2},
                   "steps": {}, "targets": []})
    assert md.count(f"| {PENDING} |") == 8 and "| <= 3% |" in md and "| >= 20% |" in md and "| <= 8 |" in md
    assert "every figure within 4.7 minutes on one H100, 4.2 minutes on one H200" in md
    assert "| CUDA-only tests | all pass | pending: no GPU | 1.0 | 0.9 |" in md
    # a CPU's rates judge no target and price no grid: they would read as FAILs and as GPU-hours
    cpu_run = {"info": {"device": "cpu", "tiny": True, "date": "d", "commit": "c", "torch": "t", "cpus": 2},
               "steps": {"grid_estimate": {"status": "ok", "seconds": 1.0, "result": {}}},
               "targets": [{"name": "ours / official-style feed (NCL)", "value": "1.87x", "pass": False,
                            "target": ">= 3x"}]}
    md = markdown(cpu_run)
    assert "- FAIL" not in md and "## Targets\n" not in md and "## Paper grid" not in md
    assert md.rstrip().endswith(f"{PENDING}: a run on cpu checks that each step of the script works; its rates are "
                                "not a GPU's, so no target is judged and no GPU-hours are estimated from them.")


def test_the_plan_puts_the_grid_first_and_fits_five_minutes_on_an_h100_and_an_h200(gc, capsys):
    """The check's plan on each GPU kind (PLANNED_S): the grid's needs first (the CUDA tests, the eager rate of each
    method, resume, the feed, the grid's cost), extras after, each only where its end fits the budget counted
    from the process's start (START_S of start-up planned, RESERVE_S kept); at most 5 minutes, which leaves a rerun
    within a 15-minute lease. `--plan` says which steps run on each and prints every figure pending with its
    minutes."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from gpu import common

    assert gc.STEPS[:5] == ("cuda_tests", "throughput", "sigterm_resume", "imagenet_input", "grid_estimate")
    assert common.GRID_METHODS == ("cl", "ncl", "topk_ncl", "bayesncl") and "model.cifar_padding=2" in \
        common.PAPER_MODEL
    assert common.GPU_KINDS == ("h100", "h200") and all(list(gc.PLANNED_S[k]) == list(gc.STEPS) for k in gc.PLANNED_S)
    for kind in common.GPU_KINDS:
        when = gc.plan(kind)
        assert all(when[n] is not None for n in common.NEEDED) and max(v for v in when.values() if v) <= 5.0
        assert when["compiled_step"] is None  # the budget leaves it out
        # naive reference: the planned ends in order, each step where it fits
        t, ref = common.START_S, {}
        for n in gc.STEPS:
            ok = t + gc.PLANNED_S[kind][n] <= 300 - common.RESERVE_S
            t += gc.PLANNED_S[kind][n] if ok else 0
            ref[n] = t / 60 if ok else None
        assert when == ref
        assert gc.plan(kind, 1e9)["compiled_step"] == (common.START_S + sum(gc.PLANNED_S[kind].values())) / 60
    assert gc.plan("h100")["step_profile"] is None and gc.plan("h200")["step_profile"] is not None
    assert common.fits(280.0, 10.0, 300.0) and not common.fits(280.5, 10.0, 300.0)  # ends by the budget less 10 s
    # nothing fits a budget shorter than the start-up: the grid's steps too
    assert set(gc.plan("h200", common.START_S + common.RESERVE_S).values()) == {None}
    # a step whose input did not run is not planned (the grid's cost needs the rates)
    tight = common.START_S + common.RESERVE_S + gc.PLANNED_S["h200"]["cuda_tests"] + 20
    assert gc.plan("h200", tight)["throughput"] is None and gc.plan("h200", tight)["grid_estimate"] is None
    assert gc.plan("h200", tight)["matmul_peak"] is not None
    assert common.gpu_kind("NVIDIA H200") == "h200" and common.gpu_kind("NVIDIA H100 80GB HBM3") == "h100"
    assert common.gpu_kind("NVIDIA A100-SXM4-80GB") == common.gpu_kind(None) == "h100"  # the slower plan
    # docs/BENCHMARKS.md's step table shows the plan as it is
    doc = (ROOT / "docs" / "BENCHMARKS.md").read_text().split("| step | H100 planned s | H200 planned s |", 1)[1]
    shown = {m[1]: (int(m[2]), int(m[3])) for m in re.finditer(r"^\| `(\w+)`(?: \(extra\))? \| (\d+) \| (\d+) \|", doc,
                                                                re.M)}
    assert shown == {n: (gc.PLANNED_S["h100"][n], gc.PLANNED_S["h200"][n]) for n in gc.STEPS}
    assert list(shown) == list(gc.STEPS)
    assert gc.main(["--plan"]) == 0
    out = capsys.readouterr().out
    figures = [line for line in out.splitlines() if "| pending: no GPU |" in line]
    assert len(figures) == 8 and all(float(c) <= 5.0 for line in figures for c in line.strip("|").split("|")[-2:])
    assert "| step_profile | extra | 20 | not started | 15 | 4.5 |" in out
    assert ("H100: 7 of 12 steps, planned to end by minute 4.7; not started: step_profile, official_feed, "
            "cli_end_to_end, captured_resume, compiled_step") in out
    assert "H200: 8 of 12 steps, planned to end by minute 4.5; not started: official_feed," in out


def _fake_steps(monkeypatch, check_mod, gc, seconds: dict[str, float]) -> tuple[list, list]:
    """STEP_FUNCS as fakes that move a fake clock on by `seconds` (default 1): (steps run, the clock)."""
    ran, now = [], [1000.0]

    def step(check, n):
        ran.append(n)
        now[0] += seconds.get(n, 1.0)
        return {"n": n}

    monkeypatch.setattr(check_mod, "clock", lambda: now[0])
    monkeypatch.setattr(check_mod, "STEP_FUNCS", {n: (lambda c, n=n: step(c, n)) for n in gc.STEPS})
    return ran, now


def test_a_slow_step_leaves_the_rest_unstarted_within_the_budget(gc, tmp_path, monkeypatch, capsys):
    """`gpu_check.py --device cpu --tiny --budget 300` with a step that takes 200 s (a fake clock): every step
    starts only where its planned end (the tiny plan) fits 300 s less RESERVE_S from the start; after the slow
    step those that no longer fit are not started, each named with why, in the output and the report; one that
    still fits starts."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from gpu import check as check_mod
    from gpu import common

    plan = gc.PLANNED_S["tiny"]
    ran, now = _fake_steps(monkeypatch, check_mod, gc, {**plan, "throughput": 200.0})
    assert gc.main(["--device", "cpu", "--tiny", "--budget", "300", "--out", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    # naive reference: in order, a step starts where the seconds spent and its planned ones fit 290
    t, expect = 0.0, []
    for n in gc.STEPS:
        if t + plan[n] <= 300 - common.RESERVE_S:
            expect.append(n)
            t += 200.0 if n == "throughput" else plan[n]
    assert ran == expect and now[0] - 1000.0 == t <= 300 - common.RESERVE_S
    assert "sigterm_resume" not in ran and "grid_estimate" in ran and "matmul_peak" in ran  # 10 s and 4 s still fit
    skipped = [n for n in gc.STEPS if n not in ran]
    assert [n for n, e in report["steps"].items() if e["status"] == "skipped"] == skipped
    e = report["steps"]["sigterm_resume"]
    left = 300 - common.RESERVE_S - plan["cuda_tests"] - 200
    assert e["error"] == f"planned {plan['sigterm_resume']} s, {left:.0f} s left of the 300 s budget less 10 s kept " \
        "for the summary"
    assert f"-- sigterm_resume: skipped ({e['error']})" in out
    assert f"not started: {', '.join(skipped)}." in out and report["info"]["budget_s"] == 300.0
    ran.clear()  # --tiny's own default budget: 600 s, every step of the tiny plan (the slow one too)
    assert gc.main(["--device", "cpu", "--tiny", "--out", str(tmp_path)]) == 0 and ran == list(gc.STEPS)
    assert json.loads((tmp_path / "gpu_check.json").read_text())["info"]["budget_s"] == 600.0
    ran.clear()  # the process started 250 s ago (its imports): 40 s are left, throughput's planned 40 fit
    assert gc.main(["--device", "cpu", "--tiny", "--budget", "300", "--out", str(tmp_path)], started=now[0] - 250) == 1
    assert ran == ["throughput"] and json.loads((tmp_path / "gpu_check.json").read_text())["info"]["startup_s"] == 250


def test_measured_seconds_plan_a_rerun_and_a_step_waits_for_its_input(gc, tmp_path, monkeypatch):
    """A step's time from --previous where that ran it ok on the same device at the same sizes, else the plan's;
    the grid's cost is not started without the throughput step's rates."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from gpu import check as check_mod

    _fake_steps(monkeypatch, check_mod, gc, {})
    c = check_mod.Check(torch.device("cpu"), True, tmp_path, 300.0)
    prev = {"info": dict(c.report["info"]), "steps": {"throughput": {"status": "ok", "seconds": 3.5},
                                                      "matmul_peak": {"status": "failed", "seconds": 1.0}}}
    assert c.expected_s("throughput", prev) == (3.5, "measured")
    tiny = gc.PLANNED_S["tiny"]
    assert c.expected_s("matmul_peak", prev) == (tiny["matmul_peak"], "planned")  # failed: no measurement
    other = {**prev, "info": {**prev["info"], "tiny": False}}
    assert c.expected_s("throughput", other) == (tiny["throughput"], "planned")  # other sizes
    copied = {**prev, "steps": {"throughput": {"status": "ok", "seconds": 3.5, "from_previous": True}}}
    assert c.expected_s("throughput", copied) == (tiny["throughput"], "planned")  # an older run's, carried along
    assert c.not_started("grid_estimate", 0.0) == "needs throughput's result, which this run does not have"
    assert c.run(["grid_estimate", "matmul_peak"]) == 1
    assert c.report["steps"]["grid_estimate"]["status"] == "skipped"
    assert c.report["steps"]["matmul_peak"]["status"] == "ok"


def test_a_step_past_the_budget_is_stopped_and_its_processes_killed(gc, tmp_path, monkeypatch):
    """The watchdog: a step still running at the budget's end (less RESERVE_S) is stopped, whatever its plan said,
    and a process it started is killed; the steps after are not started and the report is written."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from gpu import check as check_mod
    from gpu import common

    monkeypatch.setitem(common.PLANNED_S, "test", {n: 0.2 for n in gc.STEPS})
    child = []

    def hangs(check):
        child.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]))
        check._children.append(child[0])
        time.sleep(30)

    monkeypatch.setattr(check_mod, "STEP_FUNCS", {**check_mod.STEP_FUNCS, "cuda_tests": hangs})
    c = check_mod.Check(torch.device("cpu"), True, tmp_path, common.RESERVE_S + 1.0, kind="test")
    t0 = time.monotonic()
    assert c.run(list(gc.STEPS)) == 1
    assert time.monotonic() - t0 < 5 and child[0].poll() == -9
    steps = json.loads((tmp_path / "gpu_check.json").read_text())["steps"]
    assert steps["cuda_tests"]["status"] == "stopped" and 0.5 < steps["cuda_tests"]["seconds"] < 3
    assert {e["status"] for n, e in steps.items() if n != "cuda_tests"} == {"skipped"}
    assert "stopped at its end: cuda_tests" in (tmp_path / "gpu_check.md").read_text()
    with check_mod.watchdog(float("inf")):  # no budget: nothing armed
        pass
    with pytest.raises(check_mod.OutOfTime):
        with check_mod.watchdog(0.0):
            pass


def test_the_budget_counts_from_the_process_start(tmp_path):
    """process_start: when this process started (against `ps`'s elapsed seconds), imports included; the script's
    first line where /proc is not there."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from gpu.check import clock, process_start

    now = clock()
    age = now - process_start(now)
    etimes = int(subprocess.run(["ps", "-o", "etimes=", "-p", str(os.getpid())], capture_output=True,
                                text=True).stdout)
    assert abs(age - etimes) < 2 and age > 0.5
    assert process_start(now, stat="/nonexistent") == now
    future = tmp_path / "stat"  # a start after now or days ago (a clock not the boot's): not believed
    for start in (10**15, -10**9):
        future.write_text("1 (python (x)) S " + " ".join(["0"] * 18 + [str(start)] + ["0"] * 30))
        assert process_start(now, stat=str(future)) == now
    future.write_text("1 (python (x)) S " + " ".join(["0"] * 18 + ["0"] + ["0"] * 30))  # at boot: its age is uptime
    assert process_start(now, stat=str(future)) == pytest.approx(now - time.clock_gettime(time.CLOCK_BOOTTIME), abs=1)
    assert process_start(now - 1e6) == now - 1e6  # never later than the script's first line


def test_the_resume_check_runs_with_deterministic_kernels(gc):
    """sigterm_resume (and its captured option) train with train.deterministic=true: two uninterrupted GPU runs
    may otherwise differ, which is no resume bug (docs/REPRODUCIBILITY.md)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from gpu import steps_cli

    assert steps_cli.RESUME_SETS == ["train.deterministic=true"]
    assert resolve(sets=steps_cli.RESUME_SETS)["train"]["deterministic"] is True


def test_the_summary_reads_every_step_it_prints():
    """A CUDA report's targets and step lines, worked out by hand: the eager, captured and compiled overheads and
    shares of the matmul peak, the feed ratio; each step's key figures (the resume lines too)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from gpu.summary import key_figures, markdown, targets

    def rate(v, tflops=90.0):
        return {"img_per_s": v, "ms_per_step": 256e3 / v, "achieved_tflops": tflops, "peak_mem_mb": 1500.0}

    tput = {"methods": ["ncl", "bayesncl"], "graph": "eager", "overhead_pct": 2.0, "ncl": rate(1020.0),
            "bayesncl": rate(1000.0, 60.0)}
    captured = {"graph": "cudagraph", "overhead_pct": 8.0, "ncl": rate(2160.0), "bayesncl": rate(2000.0)}
    resume = {"interrupted_at": {"exit": 75, "epoch": 2, "step": 27}, "identical": True}
    steps = {"throughput": {"status": "ok", "result": tput}, "matmul_peak": {"status": "ok", "result": {
        "tflops": 600.0, "n": 8192, "dtype": "bfloat16"}}, "captured_step": {"status": "ok", "result": captured},
             "official_feed": {"status": "ok", "result": {"ratio": 3.5, "img_per_s": 7000.0, "workers": 16}},
             "sigterm_resume": {"status": "ok", "result": resume},
             "captured_resume": {"status": "ok", "result": {"identical": False, "error": "boom"}}}
    got = {t["name"]: (t["value"], t["pass"], t.get("goal")) for t in targets(steps)}
    assert got == {
        "BayesNCL time overhead over NCL, train.graph=eager": ("+2.00%", True, True),
        "ncl achieved / bf16 matmul peak, train.graph=eager": ("15.0%", True, False),
        "bayesncl achieved / bf16 matmul peak, train.graph=eager": ("10.0%", False, False),
        "BayesNCL time overhead over NCL, train.graph=cudagraph": ("+8.00%", False, False),
        "ncl achieved / bf16 matmul peak, train.graph=cudagraph": ("15.0%", True, False),
        "bayesncl achieved / bf16 matmul peak, train.graph=cudagraph": ("15.0%", True, False),
        "ours / official-style feed (NCL)": ("3.50x", True, None)}
    assert key_figures("throughput", tput) == (
        "eager: ncl 1,020 img/s (250.98 ms), 90.0 TFLOP/s, peak 1,500 MiB; bayesncl 1,000 img/s (256.00 ms), "
        "60.0 TFLOP/s, peak 1,500 MiB; overhead +2.00%")
    assert key_figures("captured_step", {"note": "train.graph=cudagraph needs CUDA"}) == \
        "train.graph=cudagraph needs CUDA"
    assert key_figures("sigterm_resume", resume) == "exit 75 at epoch 3 step 27; resumed weights identical: True"
    assert key_figures("captured_resume", {"identical": False, "error": "boom"}) == \
        "resumed weights identical: False (boom)"
    md = markdown({"info": {"device": "cuda:0", "tiny": False, "date": "d", "commit": "c", "torch": "t", "cpus": 16,
                            "gpu": "NVIDIA H200", "budget_s": 300.0},
                   "steps": {k: {**v, "seconds": 1.0} for k, v in steps.items()}, "targets": targets(steps)})
    assert "| sigterm_resume | ok | 1.0 | exit 75 at epoch 3 step 27; resumed weights identical: True |" in md
    assert "- PASS (goal met): BayesNCL time overhead over NCL, train.graph=eager +2.00%" in md
