"""The training step as one graph (train.graph): torch.compile(fullgraph=True) of the whole step, with no
graph break, against the eager step over several steps, for NCL and BayesNCL; on CUDA, the captured step.

The model is the real method (heads, losses, LARS, augmentation) on a tiny two-conv backbone: compile time
grows with the graph, and the step's structure is what is tested. Tolerances: "aot_eager" (dynamo +
AOTAutograd tracing, eager kernels) must reproduce the eager step exactly; inductor (generated kernels, other
summation orders; BayesNCL, marked long) within 1e-5 on every parameter, buffer and running sum over 5 steps.
"""

import json
import os
import signal

import pytest
import torch

import bayesncl.model.methods as methods_mod
import bayesncl.training.step as S
import bayesncl.training.train as T
from bayesncl.settings import config as C
from bayesncl.data import SimCLRAugment
from bayesncl.training.optim import build_optimizer

STEPS = 5


SETS = ["data.synthetic.image_size=16", "model.proj_hidden=32", "model.proj_dim=16", "train.batch_size=16",
        "train.epochs=2", "train.warmup_epochs=1", "train.base_lr=4", "train.threads=1"]
METHODS = {"ncl": ["method.name=ncl"], "bayesncl": ["method.name=bayesncl", "method.gate=gumbel"]}


def make_step(method, graph, device="cpu", extra=()):
    cfg = C.resolve(sets=SETS + METHODS[method] + [f"train.graph={graph}", f"train.device={device}", *extra])
    torch.manual_seed(0)
    model = methods_mod.build_method(cfg).to(device).train()
    aug = SimCLRAugment(16, (0.5,) * 3, (0.25,) * 3)
    step = T.TrainStep(model, build_optimizer(model, cfg), aug, cfg, torch.device(device), STEPS)
    step.start(0)
    return step


def run(step, device="cpu"):
    """STEPS steps on a fixed batch; the parameters, BN buffers and running sums after each."""
    x = torch.randint(0, 256, (16, 3, 16, 16), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    x = x.to(device)
    gen = torch.Generator(device=device).manual_seed(3)
    out = []
    for _ in range(STEPS):
        step(x, gen)
        state = [t.detach().clone().cpu() for t in (*step.model.parameters(), *step.model.buffers(), step.sums)]
        out.append(state)
    return out


def assert_close_runs(a, b, tol):
    for i, (sa, sb) in enumerate(zip(a, b)):
        for ta, tb in zip(sa, sb):
            if tol == 0:
                assert torch.equal(ta, tb), f"step {i + 1}"
            else:
                torch.testing.assert_close(ta.double(), tb.double(), rtol=tol, atol=tol, msg=f"step {i + 1}")


@pytest.mark.parametrize("method", list(METHODS))
def test_whole_step_traces_as_one_graph_and_reproduces_eager(tiny_backbone, monkeypatch, method):
    """fullgraph=True raises on any graph break: augmentation, forward, loss, backward (autograd.grad), the
    LARS update and the sums are one graph. With eager kernels it must give the eager step's numbers exactly."""
    monkeypatch.setattr(S, "COMPILE_BACKEND", "aot_eager")
    torch._dynamo.reset()
    counters = torch._dynamo.utils.counters
    counters.clear()
    compiled = make_step(method, "compile")
    got = run(compiled)  # first in the process: a step with side effects outside its graph would recompile
    assert counters["stats"]["unique_graphs"] == 1  # one graph, traced once: no recompilation per step
    ref = run(make_step(method, "eager"))
    assert_close_runs(ref, got, 0)
    assert ref[-1][-1][0] != ref[0][-1][0]  # the sums grew: steps ran


def test_the_loss_scaler_is_in_the_one_graph_and_skips_as_eager(tiny_backbone, monkeypatch):
    """train.loss_scaler=fp16 (emulated on CPU) inside the compiled step: still one graph, the same skips and
    numbers as eager (from a scale of 2^18 this tiny model's first three steps overflow)."""
    monkeypatch.setattr(S, "COMPILE_BACKEND", "aot_eager")
    monkeypatch.setattr(S.LossScaler, "INIT", 2.0 ** 18)
    torch._dynamo.reset()
    counters = torch._dynamo.utils.counters
    counters.clear()
    extra = ["train.loss_scaler=fp16"]
    got = run(make_step("bayesncl", "compile", extra=extra))
    assert counters["stats"]["unique_graphs"] == 1
    ref = run(make_step("bayesncl", "eager", extra=extra))
    assert_close_runs(ref, got, 0)
    skipped = [float(r[-1][-1]) for r in ref]  # the running sum of "skipped"
    assert skipped == [1, 2, 3, 3, 3]  # three skipped, then taken


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_fp16_step_with_its_scaler_replays_in_a_graph(tiny_backbone, monkeypatch):
    """precision fp16 with the real loss scaler on CUDA: no host sync, and the captured step gives the eager
    step's skips and numbers (within 1e-3: fp16)."""
    monkeypatch.setattr(S.LossScaler, "INIT", 2.0 ** 18)
    extra = ["train.precision=fp16", "train.loss_scaler=fp16"]
    ref = run(make_step("bayesncl", "eager", "cuda", extra), "cuda")
    got = run(make_step("bayesncl", "cudagraph", "cuda", extra), "cuda")
    assert [float(r[-1][-1]) for r in ref] == [float(r[-1][-1]) for r in got]
    assert_close_runs(ref, got, 1e-3)


def test_compile_mode_asks_for_inductor_one_graph_and_static_shapes(tiny_backbone, monkeypatch):
    """What train.graph=compile asks torch.compile for on CPU (the tests above trace with aot_eager; the long test
    below runs inductor's code itself): inductor, the whole step as one graph, static shapes, no CUDA graphs."""
    asked = []
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: asked.append(kw) or fn)
    make_step("ncl", "compile")
    assert asked == [{"fullgraph": True, "dynamic": False, "backend": "inductor", "mode": None}]


@pytest.mark.long
def test_inductor_compiled_step_matches_eager(tiny_backbone):
    """What train.graph=compile runs on CPU: inductor's generated kernels, within 1e-5 of eager. BayesNCL only
    (its step holds NCL's): inductor's code generation is most of this test's time (minutes on 2 busy cores)."""
    torch._dynamo.reset()
    ref, got = run(make_step("bayesncl", "eager")), run(make_step("bayesncl", "compile"))
    assert_close_runs(ref, got, 1e-5)


def test_pretrain_in_compile_mode_resumes_to_the_eager_runs_weights(tiny_backbone, monkeypatch, tmp_path):
    """The trainer around the compiled step, preempted mid-epoch and resumed: the weights and log of an
    uninterrupted eager run (exactly: eager kernels under aot_eager)."""
    monkeypatch.setattr(S, "COMPILE_BACKEND", "aot_eager")
    torch._dynamo.reset()
    base = SETS + METHODS["bayesncl"] + ["data.synthetic.train_size=64", "data.synthetic.test_size=32",
                                         "train.max_steps_per_epoch=3"]
    T.pretrain(C.resolve(sets=base + ["train.graph=eager"]), tmp_path / "eager", progress=False)
    cfg = C.resolve(sets=base + ["train.graph=compile"])
    real, calls = T.TrainStep.__call__, {"n": 0}

    def step(self, x, gen, want_zplus=False):
        calls["n"] += 1
        if calls["n"] == 5:  # epoch 2, step 2
            os.kill(os.getpid(), signal.SIGTERM)
        return real(self, x, gen, want_zplus)

    monkeypatch.setattr(T.TrainStep, "__call__", step)
    run = tmp_path / "compile"
    with pytest.raises(T.Preempted):
        T.pretrain(cfg, run, progress=False)
    assert torch.load(run / "checkpoint.pt", weights_only=True)["step"] == 2
    T.pretrain(cfg, run, progress=False)
    a, b = (torch.load(tmp_path / n / "model.pt", weights_only=True)["model"] for n in ("eager", "compile"))
    assert all(torch.equal(a[k], b[k]) for k in a)
    logs = [[json.loads(l) for l in (tmp_path / n / "log.jsonl").read_text().splitlines()] for n in ("eager", "compile")]
    assert [(r["loss"], r["kl"]) for r in logs[0]] == [(r["loss"], r["kl"]) for r in logs[1]]


@pytest.mark.parametrize("preempt_at,compiled", [(5, [100.0, 100.0]), (2, [200.0, 0.0])],
                         ids=["epoch 2", "epoch 1"])
def test_compile_time_is_logged_apart_from_epoch_seconds(tiny_backbone, monkeypatch, tmp_path, preempt_at,
                                                         compiled):
    """An injected clock: 1 s per training step, 100 s for compiling (TrainStep.warm_up). epoch_seconds counts
    the steps only, compile_seconds the compile; the cost section reports both apart. A resumed process
    compiles again, and that time is logged apart too: in the epoch it resumes, beside the compile before the
    preemption when that epoch compiled already (its checkpoint carries it)."""
    from bayesncl.measures.cost import training_time

    monkeypatch.setattr(S, "COMPILE_BACKEND", "aot_eager")
    torch._dynamo.reset()
    now = {"t": 0.0, "calls": 0}
    monkeypatch.setattr(T, "_clock", lambda: now["t"])
    real_step, real_warm = T.TrainStep.__call__, T.TrainStep.warm_up

    def step(self, x, gen, want_zplus=False):
        now["t"] += 1.0
        now["calls"] += 1
        if now["calls"] == preempt_at:  # 5: epoch 2, step 2; 2: epoch 1, step 2
            os.kill(os.getpid(), signal.SIGTERM)
        return real_step(self, x, gen, want_zplus)

    def warm_up(self, x, gen):
        if not self.warm:
            now["t"] += 100.0
        return real_warm(self, x, gen)

    monkeypatch.setattr(T.TrainStep, "__call__", step)
    monkeypatch.setattr(T.TrainStep, "warm_up", warm_up)
    cfg = C.resolve(sets=SETS + METHODS["ncl"] + ["data.synthetic.train_size=64", "data.synthetic.test_size=32",
                                                  "train.max_steps_per_epoch=3", "train.graph=compile"])
    with pytest.raises(T.Preempted):
        T.pretrain(cfg, tmp_path, progress=False)
    T.pretrain(cfg, tmp_path, progress=False)
    log = [json.loads(l) for l in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert [r["epoch_seconds"] for r in log] == [3.0, 3.0]
    assert [r["compile_seconds"] for r in log] == compiled  # compiled again after the resume
    cost = training_time(log)
    assert cost["train_minutes"] == 6.0 / 60 and cost["compile_seconds"] == 200.0
    assert training_time([{**r, "compile_seconds": 0.0} for r in log])["compile_seconds"] == 0.0
    from bayesncl.report.tables import TABLES  # Table 7 says which time it shows

    assert "training steps only" in next(t for t in TABLES if t.name == "table7").caption


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("method", list(METHODS))
def test_cuda_step_has_no_host_sync_and_its_graph_replays_the_eager_step(tiny_backbone, monkeypatch, method):
    """On CUDA: the eager step never synchronises with the host (sync debug mode "error"), and train.graph=
    cudagraph (draws + step captured once, replayed) gives the eager step's numbers within 1e-5: in fp32 with
    deterministic cuDNN kernels (under bf16, or with atomics in the convolutions' backward, two eager runs
    already differ by more; precision auto would be bf16 here)."""
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", True)
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)
    fp32 = ["train.precision=fp32"]
    eager = make_step(method, "eager", "cuda", fp32)
    x = torch.randint(0, 256, (16, 3, 16, 16), dtype=torch.uint8, device="cuda")
    gen = torch.Generator(device="cuda").manual_seed(0)
    eager(x, gen)  # lazy initialisation outside the check
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        eager(x, gen)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    ref, got = (run(make_step(method, mode, "cuda", fp32), "cuda") for mode in ("eager", "cudagraph"))
    assert_close_runs(ref, got, 1e-5)
