"""benchmarks/gpu_check.py: its helpers against naive references, and --tiny end to end on CPU (so the
script the GPU machine runs cannot rot)."""

import ast
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bayesncl.config import resolve
from bayesncl.evaluation.cost import count_flops_per_image
from bayesncl.methods import build_method

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
    one that is not at the reference's rate: the registry's traits, not the name "bayesncl" (issue 48)."""
    from bayesncl import registry

    small = ["model.width=4", "model.proj_hidden=32", "model.proj_dim=16", "train.epochs=1", "data.dataset=cifar10",
             "data.root=/x"]
    tput = {"ncl": {"img_per_s": 1000.0, "gflops_fwd_per_view": 1.0},
            "bayesncl": {"img_per_s": 500.0, "gflops_fwd_per_view": 1.0}}
    from helpers.plugins import registered

    with registered():
        registry.register_method("gated_plug", "G", impl="bayesncl.methods:BayesNCL", gated=True, module="plug_g",
                                 reads=registry.METHODS["bayesncl"].reads)
        registry.register_method("plain_plug", "P", impl="bayesncl.methods:NCL", module="plug_g")
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


def test_cuda_without_a_gpu_is_a_one_line_error(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible")
    r = subprocess.run([sys.executable, str(SCRIPT), "--device", "cuda", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "--device cuda" in r.stderr and "--device cpu --tiny" in r.stderr


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
    assert steps["grid_estimate"]["result"]["jobs"] > 0 and report["targets"]
    md = (out / "gpu_check.md").read_text()
    assert all(f"| {name} | ok |" in md for name in gc.STEPS)
    assert md.count("| pending: no GPU |") == 8 and "## Figures" in r.stdout  # printed too, with planned minutes
    assert "every figure within 4.1 minutes" in r.stdout


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
    assert [f["planned"] for f in cpu] == ["0.8", "2.0", "2.0", "2.8", "3.4", "3.4", "3.5", "4.1"]
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
    assert "every figure within 4.1 minutes" in md
    # a CPU's rates judge no target and price no grid: they would read as FAILs and as GPU-hours
    cpu_run = {"info": {"device": "cpu", "tiny": True, "date": "d", "commit": "c", "torch": "t", "cpus": 2},
               "steps": {"grid_estimate": {"status": "ok", "seconds": 1.0, "result": {}}},
               "targets": [{"name": "ours / official-style feed (NCL)", "value": "1.87x", "pass": False,
                            "target": ">= 3x"}]}
    md = markdown(cpu_run)
    assert "- FAIL" not in md and "## Targets\n" not in md and "## Paper grid" not in md
    assert md.rstrip().endswith(f"{PENDING}: a run on cpu checks that each step of the script works; its rates are "
                                "not a GPU's, so no target is judged and no GPU-hours are estimated from them.")


def test_the_plan_puts_the_grid_first_and_fits_five_minutes(gc, capsys):
    """The check's plan on one H200 (PLANNED_S): the grid's needs first (the CUDA tests, the eager rate of each
    method, resume, the feed, the grid's cost), extras after, while the budget lasts; at most 5 minutes planned,
    which leaves a rerun within a 15-minute lease. `--plan` prints every figure pending with its minute."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from gpu import common

    assert gc.STEPS[:5] == ("cuda_tests", "throughput", "sigterm_resume", "imagenet_input", "grid_estimate")
    assert common.GRID_METHODS == ("cl", "ncl", "topk_ncl", "bayesncl") and "model.cifar_padding=2" in \
        common.PAPER_MODEL
    when = gc.plan()
    assert all(when[n] is not None for n in common.NEEDED) and max(v for v in when.values() if v) <= 5.0
    assert when["compiled_step"] is None  # the budget leaves it out
    assert gc.plan(1e9)["compiled_step"] == sum(gc.PLANNED_S.values()) / 60
    assert gc.plan(0)["matmul_peak"] is None and gc.plan(0)["grid_estimate"] is not None  # needs always run
    # docs/BENCHMARKS.md's step table shows the plan as it is
    doc = (ROOT / "docs" / "BENCHMARKS.md").read_text().split("| step | planned s | what it does |", 1)[1]
    shown = {m[1]: int(m[2]) for m in re.finditer(r"^\| `(\w+)`(?: \(extra\))? \| (\d+) \|", doc, re.M)}
    assert shown == gc.PLANNED_S and list(shown) == list(gc.STEPS)
    assert gc.main(["--plan"]) == 0
    out = capsys.readouterr().out
    figures = [line for line in out.splitlines() if "| pending: no GPU |" in line]
    assert len(figures) == 8 and all(float(line.strip("|").split("|")[-1]) <= 5.0 for line in figures)
    assert "planned: 4.8 minutes" in out


def test_extras_start_only_while_the_budget_lasts(gc, tmp_path, monkeypatch):
    """Check.run: the grid's steps always run, an extra only while its planned seconds fit the budget (not with
    --tiny, whose sizes are not the plan's)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from gpu import check as check_mod

    ran = []
    monkeypatch.setattr(check_mod, "STEP_FUNCS", {n: (lambda c, n=n: ran.append(n) or {}) for n in gc.STEPS})
    monkeypatch.setattr(check_mod, "markdown", lambda report: "")
    monkeypatch.setattr(check_mod, "targets", lambda steps: [])
    c = check_mod.Check(torch.device("cpu"), False, tmp_path, 20.0)
    assert c.run(list(gc.STEPS)) == 1  # skipped extras
    # the fake steps take no time: an extra runs where its planned seconds fit 20 s (5, 15), not 35 or 25
    assert ran == list(gc.STEPS[:5]) + ["matmul_peak", "step_profile"]
    assert c.report["steps"]["captured_step"]["status"] == "skipped"
    ran.clear()  # --tiny: the plan's seconds are not its own; only the time spent counts
    assert check_mod.Check(torch.device("cpu"), True, tmp_path, 0.5).run(list(gc.STEPS)) == 0
    assert ran == list(gc.STEPS)


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
