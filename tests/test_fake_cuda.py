"""The GPU path proven without a GPU: one training step of every method under every precision and
loss-scaler setting the paper grid (config/paper.yaml) and the GPU check (benchmarks/gpu_check.py) use, and
the per-batch regions of the GPU evaluation sections, on fake `cuda` tensors under a guard that refuses any
host sync, host-device copy or device mismatch (tests/fake_cuda.py says how, and what stands in for what).

This is what stands for the CUDA-only tests of tests/test_step_compile.py where no GPU is lent: a step that
reads a device value on the host, copies a constant over, or mixes a CPU tensor in fails here, on the CPU. It
cannot see timing, numerics or what the CUDA kernels themselves do (docs/DESIGN.md, "The GPU path without a
GPU").
"""

import numpy as np
import pytest
import torch

import bayesncl.training.train as T
from bayesncl.settings import config as C
from bayesncl.data import SimCLRAugment
from bayesncl.measures.dynamics import GradientStats
from bayesncl.model.methods import build_method
from bayesncl.training.optim import build_optimizer
from fake_cuda import CudaGenerator, HostSync, NoHostSync, fake_cuda, python_grad

CUDA = torch.device("cuda", 0)
SETS = ["data.synthetic.image_size=16", "model.width=4", "model.proj_hidden=32", "model.proj_dim=16",
        "train.batch_size=8", "train.epochs=2", "train.warmup_epochs=1", "train.threads=1"]
METHODS = {"cl": ["method.name=cl"], "ncl": ["method.name=ncl"], "topk_ncl": ["method.name=topk_ncl"],
           "bayesncl_ste": ["method.name=bayesncl", "method.gate=ste"],
           "bayesncl_gumbel": ["method.name=bayesncl", "method.gate=gumbel"]}
# (train.precision, train.loss_scaler): the paper grid's (auto = bf16 on CUDA, the scaler emulated), the GPU
# check's bf16, the released fp16 with the real scaler, and fp32 / no scaler (the other branches of the step).
SETTINGS = [("auto", "fp16"), ("bf16", "fp16"), ("fp16", "fp16"), ("fp32", "none")]
AUTOCAST = {"auto": torch.bfloat16, "bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


# The step's structure at a tenth of ResNet-18's operators (fake tensors cost Python per operator: the fixture
# tiny_backbone); the real backbone runs once, in test_the_paper_grids_step_with_resnet18.


def fake_step(method: str, precision: str, scaler: str, extra=()):
    """A TrainStep on fake CUDA tensors, as `pretrain` builds it on a GPU (channels-last model, per-view BN)."""
    cfg = C.resolve(sets=SETS + METHODS[method] + [f"train.precision={precision}", f"train.loss_scaler={scaler}",
                                                   *extra])
    assert cfg["train"]["bn"] == "view" and cfg["train"]["channels_last"]
    model = build_method(cfg).to(CUDA).to(memory_format=torch.channels_last).train()  # as `pretrain`
    aug = SimCLRAugment(16, (0.5,) * 3, (0.25,) * 3)
    step = T.TrainStep(model, build_optimizer(model, cfg), aug, cfg, CUDA, steps=4)
    assert step.channels_last and (step.scaler is not None) == (scaler == "fp16")
    step.start(0)
    return step, cfg


def test_the_guard_refuses_every_kind_of_host_sync(monkeypatch):
    """The guard itself: each way of waiting for the device or copying over fails, what a step does passes."""
    with fake_cuda(monkeypatch):
        x = torch.empty(4, 4, device=CUDA)
        host = torch.ones(4)
        syncs = {"item": lambda: x.sum().item(), "float": lambda: float(x[0, 0]), "bool": lambda: bool(x[0, 0] > 0),
                 "cpu": lambda: x.cpu(), "tolist": lambda: x.tolist(), "nonzero": lambda: x.nonzero(),
                 "mask index": lambda: x[x > 0], "tensor on device": lambda: torch.tensor(0.9, device=CUDA),
                 "copy from host": lambda: x[0].copy_(host), "to device": lambda: host.to(CUDA),
                 "host operand": lambda: x * host, "host scalar tensor": lambda: x * torch.tensor(2.0),
                 "host work": lambda: host + 1, "default generator": lambda: torch.rand(3, device=CUDA),
                 "default generator in place": lambda: x.bernoulli_(0.5)}
        for name, fn in syncs.items():
            with pytest.raises(HostSync), NoHostSync():
                fn()
                pytest.fail(f"{name}: not refused")
        with NoHostSync() as g:
            y = torch.where(x > 0, 1.0, x) * 2 + torch.full((4,), 3.0, device=CUDA)
            y = y + torch.rand(4, device=CUDA, generator=CudaGenerator())
            torch._foreach_mul_([y], [0.9])
            x.new_zeros(3).index_select(0, torch.zeros(2, dtype=torch.long, device=CUDA))
        assert g.ops > 0 and y.device == CUDA
        conv = torch.nn.Conv2d(3, 4, 3).to(CUDA, memory_format=torch.channels_last)
        with pytest.raises(HostSync, match="layout"), NoHostSync():
            conv(torch.empty(2, 3, 8, 8, device=CUDA))  # NCHW input, channels-last weight


@pytest.mark.parametrize("method", ["ncl", "bayesncl_gumbel"])
def test_python_grad_is_the_autograd_engines_on_the_cpu(method):
    """The dry run's stand-in for the engine against the engine, on real CPU tensors: the same gradients of the
    whole loss (custom Functions, BatchNorm per view, bf16 autocast casts) for every parameter and for z+."""
    cfg = C.resolve(sets=SETS + METHODS[method] + ["train.precision=bf16", "train.device=cpu"])
    torch.manual_seed(0)
    model = build_method(cfg).train()
    x = torch.randn(16, 3, 16, 16)
    u = torch.rand(model.gate_draws(16)) if model.gate_draws(16) else None
    for grad in (torch.autograd.grad, python_grad):
        torch.manual_seed(1)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss, parts = model.views_loss(x, u)
        params = list(model.parameters())
        got = grad(loss, [*params, parts["out"]["zplus"]])
        if grad is torch.autograd.grad:
            ref = got
    assert len(got) == len(ref) == len(params) + 1
    for a, b in zip(ref, got):
        assert a.dtype == b.dtype and torch.equal(a, b)


def run_step(monkeypatch, method, precision, scaler, dynamics=False):
    with fake_cuda(monkeypatch):
        step, cfg = fake_step(method, precision, scaler)
        x = torch.empty(8, 3, 16, 16, dtype=torch.uint8, device=CUDA)
        gen = CudaGenerator()
        with NoHostSync() as guard:
            step(x, gen)
        assert step.t.device == CUDA and all(p.device == CUDA for p in step.model.parameters())
        # autocast really ran on "cuda" (else the dry run would prove nothing about the low-precision path);
        # the augmentation's blur convolution runs in fp32, outside autocast
        assert AUTOCAST[precision] in guard.dtypes["aten.convolution"]
        assert guard.dtypes["aten.addmm"] == {AUTOCAST[precision]}
        if dynamics:
            stats = GradientStats(cfg["model"]["proj_dim"])
            with NoHostSync():
                stats.update(*step(x, gen, want_zplus=True))
            assert stats.n_iters == 1


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: f"{s[0]}-{s[1]}")
@pytest.mark.parametrize("method", list(METHODS))
def test_one_training_step_on_cuda_never_waits_for_the_host(tiny_backbone, monkeypatch, method, setting):
    """The step as `pretrain` runs it on a GPU: draws from the step's generator, augmentation, per-view
    BatchNorm forward under autocast, the (scaled) backward, the loss scaler's check, the LARS update with the
    lr of the device table, the running sums, the scale update: nothing reads a device value on the host or
    copies one over."""
    run_step(monkeypatch, method, *setting)


@pytest.mark.parametrize("method", ["ncl", "bayesncl_gumbel"])
def test_the_dynamics_step_never_waits_for_the_host(tiny_backbone, monkeypatch, method):
    """A gradient-dynamics epoch's step (z+ and dL/dz+ returned) and the statistics it feeds, per step."""
    run_step(monkeypatch, method, "auto", "fp16", dynamics=True)


def test_the_paper_grids_step_with_resnet18(monkeypatch):
    """The paper grid's step with its real backbone (ResNet-18, CIFAR stem, channels-last), BayesNCL STE."""
    run_step(monkeypatch, "bayesncl_ste", "auto", "fp16")


# ---------------------------------------------------------------------------------------- evaluation sections
# Each section's per-batch (per-step) device work is guarded; what it does once per pass is not: moving the
# in-memory split to the device (the data feed, once) and reading each batch's results to the host
# (training.embed.embed's .cpu(), what the section exists for; the probe's logits at the end).

def eval_setup(sets=()):
    """The config, and its splits loaded on the host (real tensors; their device copies will be fake)."""
    from bayesncl.data import load_split

    cfg = C.resolve(sets=SETS + METHODS["bayesncl_ste"] + [
        "data.synthetic.train_size=40", "data.synthetic.test_size=24", "eval.batch_size=16", *sets])
    return cfg, load_split(cfg["data"], "train"), load_split(cfg["data"], "test")


def eval_model(cfg):
    return build_method(cfg).to(CUDA).to(memory_format=torch.channels_last)  # as EvalContext.model on CUDA


def guarded(monkeypatch, module, name: str) -> list:
    """Wrap module.name so that each call runs under NoHostSync; returns the list of the calls' guards."""
    real, calls = getattr(module, name), []

    def wrapper(*args, **kwargs):
        with NoHostSync() as g:
            out = real(*args, **kwargs)
        calls.append(g)
        return out
    monkeypatch.setattr(module, name, wrapper)
    return calls


@pytest.mark.parametrize("bn", ["batch", "running"])
def test_feature_batches_never_wait_for_the_host(tiny_backbone, monkeypatch, bn):
    """The features section's pass (training.embed.embed) in both eval.bn modes: each batch's transform and forward
    under autocast, channels-last like the weights."""
    import bayesncl.training.embed as R

    cfg, _, test = eval_setup([f"eval.bn={bn}"])
    with fake_cuda(monkeypatch):
        model = eval_model(cfg)
        calls = guarded(monkeypatch, R, "embed_batch")
        f, h = R.embed(model, test, cfg, CUDA, key=("feature", "h"), bn=bn)
        assert len(calls) == -(-24 // (8 if bn == "batch" else 16)) and f.shape == (24, 16)
        assert f.dtype == h.dtype == torch.float32  # read back as fp32 (NumPy has no bf16)
        assert all(torch.bfloat16 in g.dtypes["aten.convolution"] for g in calls)


def test_probe_steps_never_wait_for_the_host(tiny_backbone, monkeypatch):
    """The paper probe's step (augmented crops, the frozen backbone with running statistics, the linear layer's
    LARS step), with everything `linear_probe_paper` sets up on the device."""
    import bayesncl.evaluation.probe as P
    import bayesncl.training.embed as R

    class Stop(Exception):
        pass

    def stop(*args, **kwargs):  # the test features: embed's batches are the test above's
        raise Stop

    cfg, train, test = eval_setup(["eval.probe=paper", "eval.probe_epochs=2"])
    with fake_cuda(monkeypatch):
        model = eval_model(cfg)
        calls = guarded(monkeypatch, P, "probe_step")
        monkeypatch.setattr(R, "embed", stop)
        with pytest.raises(Stop):
            P.linear_probe_paper(model, train, test, cfg, CUDA, progress=False)
        assert len(calls) == 2 and not model.training  # one step per epoch (40 images, batch 256)
        assert torch.bfloat16 in calls[0].dtypes["aten.convolution"]


def test_cost_counts_the_same_flops_on_cuda(tiny_backbone, monkeypatch):
    """The cost section counts the training forward's FLOPs (on the CPU model; the GPU check on the meta
    device): on fake CUDA tensors, under autocast and channels-last, the same count and no host sync."""
    from bayesncl.measures.cost import count_flops_per_image

    cfg, _, _ = eval_setup()
    torch.manual_seed(0)
    ref = count_flops_per_image(build_method(cfg).train(), torch.randn(2, 3, 16, 16))
    with fake_cuda(monkeypatch):
        model = eval_model(cfg).train()
        with NoHostSync(), torch.autocast("cuda", dtype=torch.bfloat16):
            x = torch.empty(2, 3, 16, 16, device=CUDA).contiguous(memory_format=torch.channels_last)
            got = count_flops_per_image(model, x)
    assert got == ref > 0


# ------------------------------------------------------------------------------------------------ the whole loop
# `pretrain` itself on fake CUDA tensors: 2 epochs of 3 steps (an epoch boundary), the lagged check every step,
# the in-memory feed (indexed on the device), logging and checkpoints. The guard is entered where the work begins
# (startup.mark_ready) and refuses any host sync outside the regions the loop marks as host contacts
# (train.host_contact: an epoch's start and end, the lagged check's read, the run's end), each counted.
LOOP = SETS + METHODS["bayesncl_ste"] + ["data.synthetic.train_size=24", "data.synthetic.test_size=8",
                                         "train.device=cuda"]
LOOP_CONTACTS = {"epoch start": 2, "lagged check": 4, "epoch end": 2, "run end": 1}


def dry_run(monkeypatch, out, module=T, sets=()):
    """(the guard with its permitted regions counted, the files `pretrain` saved) of one run on fake CUDA."""
    import contextlib
    from pathlib import Path

    from bayesncl.data import load_split
    from fake_cuda import fake_cuda_runtime

    cfg = C.resolve(sets=LOOP + list(sets))
    splits = {s: load_split(cfg["data"], s) for s in ("train", "test")}  # real data, read before the fake mode
    guard, saved = NoHostSync(), []
    with fake_cuda(monkeypatch), fake_cuda_runtime(monkeypatch, guard), contextlib.ExitStack() as stack:
        monkeypatch.setattr(module, "load_split", lambda data, split: splits[split])
        # "cuda" is the current device, cuda:0, which fake tensors cannot ask a driver for
        monkeypatch.setattr(module, "resolve_device", lambda cfg: CUDA)
        monkeypatch.setattr(module, "CHECK_EVERY", 1)
        monkeypatch.setattr(module, "host_contact", guard.permitted)
        monkeypatch.setattr(module, "mark_ready", lambda: stack.enter_context(guard))
        # fake tensors have no bytes to write: a checkpoint is recorded, not written
        monkeypatch.setattr(module.files, "save", lambda obj, path: saved.append(Path(path).name))
        module.pretrain(cfg, out, progress=False)
    return guard, saved


def test_the_training_loop_never_waits_for_the_host_between_its_contacts(tiny_backbone, monkeypatch, tmp_path):
    """The whole of `pretrain` on a GPU, 6 steps over 2 epochs: the feed, the steps, the lagged finiteness check
    (its asynchronous copy into page-locked memory, read a check later), logging and checkpoints. Outside the
    marked host contacts nothing waits for the device, copies over synchronously or runs on the host."""
    guard, saved = dry_run(monkeypatch, tmp_path / "run")
    assert guard.permits == LOOP_CONTACTS
    assert saved == ["checkpoint.pt", "checkpoint.pt", "model.pt"]
    import json

    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in log] == [1, 2] and all(r["steps"] == 3 and "loss_scale" in r for r in log)
    assert guard.ops > 6 * 100  # the steps ran under it


def _planted(*plants: tuple[str, str]):
    """bayesncl.training.train with each (anchor, line) of `plants` planted: the line after the line holding `anchor`
    (same indentation). A copy of the module, the package's own untouched."""
    import importlib.util
    import inspect
    import sys
    import textwrap

    lines = inspect.getsource(T).splitlines(True)
    for anchor, line in plants:
        (i,) = [k for k, text in enumerate(lines) if anchor in text]
        indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
        lines.insert(i + 1, textwrap.indent(line, indent) + "\n")
    spec = importlib.util.spec_from_loader("bayesncl.training._planted_train", loader=None)
    mod = importlib.util.module_from_spec(spec)
    mod.__package__ = "bayesncl.training"
    sys.modules[spec.name] = mod
    try:
        exec(compile("".join(lines), T.__file__, "exec"), mod.__dict__)
    finally:
        del sys.modules[spec.name]
    return mod


def test_a_float_per_step_in_the_loop_fails_the_dry_run(tiny_backbone, monkeypatch, tmp_path):
    """Planted: `float(tensor)` in pretrain's loop after each step (a one-step dry run let it pass)."""
    mod = _planted(("r = train_step(x, gen, want_zplus=stats is not None)", "float(train_step.sums[0])"))
    with pytest.raises(HostSync, match="_local_scalar_dense"):
        dry_run(monkeypatch, tmp_path / "run", module=mod)


def test_a_histc_in_the_step_fails_the_dry_run(tiny_backbone, monkeypatch, tmp_path):
    """Planted: `torch.histc` in the step (no tag says it syncs; its CUDA kernel reads min and max back)."""
    log = T.TrainStep.log

    def with_histc(self, loss, parts, out):
        torch.histc(out["zplus"].float(), bins=10)
        return log(self, loss, parts, out)

    monkeypatch.setattr(T.TrainStep, "log", with_histc)
    with pytest.raises(HostSync, match="histc"):
        dry_run(monkeypatch, tmp_path / "run")


# Every way a person is likely to read a device value on the host, each planted on a device tensor `t`: in the
# step, the loop and evaluation each must fail the dry run. Python's str/repr/format of a fake tensor and its numpy()
# run no operator: the guard's function mode sees them (fake_cuda.READS).
def _if(t):
    if t.sum() > 1:  # Python's bool() of a device comparison
        return 1


PLANTS = {"print": print, "str": str, "repr": repr, "format": lambda t: format(t.sum(), ".4f"),
          "f-string": lambda t: f"loss {t}", "logging %s": lambda t: "loss %s" % (t,),
          "progress bar postfix": lambda t: __import__("tqdm").tqdm(disable=True).set_postfix(loss=t),
          "tolist": lambda t: t.tolist(), "numpy": lambda t: t.numpy(), "np.asarray": lambda t: np.asarray(t),
          "if tensor > x": _if, "float": lambda t: float(t.sum()), "item": lambda t: t.sum().item(),
          "cpu": lambda t: t.cpu(), "histc": lambda t: torch.histc(t.float(), bins=10)}


def planted_everywhere(t) -> list[str]:
    """Each plant of PLANTS on `t` where the dry run reaches it: the names of those the guard refused (each
    refusal caught here, so one run reaches them all)."""
    caught = []
    for name, plant in PLANTS.items():
        try:
            plant(t)
        except HostSync:
            caught.append(name)
    return caught


@pytest.mark.filterwarnings("ignore:Converting a tensor with requires_grad=True to a scalar")
def test_every_planted_host_read_fails_in_the_step(tiny_backbone, monkeypatch):
    """Planted in the training step (TrainStep.log, on the loss), each read of PLANTS is refused; the step still
    runs to its end under the guard."""
    caught = []
    log = T.TrainStep.log

    def planted(self, loss, parts, out):
        caught.append(planted_everywhere(loss))
        return log(self, loss, parts, out)

    monkeypatch.setattr(T.TrainStep, "log", planted)
    with fake_cuda(monkeypatch):
        step, _ = fake_step("bayesncl_ste", "auto", "fp16")
        with NoHostSync():
            step(torch.empty(8, 3, 16, 16, dtype=torch.uint8, device=CUDA), CudaGenerator())
    assert caught == [list(PLANTS)]


def test_every_planted_host_read_fails_in_the_loop(tiny_backbone, monkeypatch, tmp_path):
    """Planted in pretrain's loop after each step (on the running sums: `print(train_step.sums)`), each read of
    PLANTS is refused at every step; the same reads at an epoch's end, a permitted host contact, pass."""
    caught = []
    mod = _planted(("r = train_step(x, gen, want_zplus=stats is not None)", "_PLANT('step', train_step.sums)"),
                   ("sums, scale = train_step.read_epoch()", "_PLANT('epoch end', train_step.sums)"))
    mod._PLANT = lambda where, t: caught.append((where, planted_everywhere(t)))
    guard, _ = dry_run(monkeypatch, tmp_path / "run", module=mod)
    assert caught == ([("step", list(PLANTS))] * 3 + [("epoch end", [])]) * 2 and guard.permits == LOOP_CONTACTS


def test_every_planted_host_read_fails_in_evaluation(tiny_backbone, monkeypatch):
    """Planted in the evaluation's per-batch work (training.embed.embed_batch, on its features), each read of PLANTS
    is refused in every batch."""
    import bayesncl.training.embed as R

    cfg, _, test = eval_setup()
    caught, real = [], R.embed_batch

    def planted(*args, **kwargs):
        out = real(*args, **kwargs)
        caught.append(planted_everywhere(out["feature"]))
        return out

    monkeypatch.setattr(R, "embed_batch", planted)
    with fake_cuda(monkeypatch):
        model = eval_model(cfg)
        calls = guarded(monkeypatch, R, "embed_batch")
        R.embed(model, test, cfg, CUDA, key="feature", bn="running")
    assert len(calls) == 2 and caught == [list(PLANTS)] * 2


def test_python_level_reads_pass_where_the_host_contact_is_permitted(monkeypatch):
    """The guard's function mode: a CUDA tensor's print/str/format/NumPy is refused outside a permitted region;
    inside one it stands in as the guard's operators do (the value 1), and a host tensor's is never refused."""
    with fake_cuda(monkeypatch):
        x = torch.empty(3, device=CUDA)
        host = torch.empty(2)
        g = NoHostSync()
        with g, g.permitted("epoch end"):
            assert repr(x).startswith("FakeTensor(") and f"{x.sum():.2f}" == "1.00" and f"{x}" == repr(x)
            assert np.asarray(x).tolist() == x.numpy().tolist() == [1.0, 1.0, 1.0]
        with g:
            with pytest.raises(HostSync, match="__format__"):
                f"{x.sum():.2f}"
            assert f"{host}" == repr(host) == "FakeTensor(..., size=(2,))"  # on the host already: no sync
        assert g.permits == {"epoch end": 1}


def test_the_guard_refuses_every_operator_whose_cuda_kernel_syncs(monkeypatch):
    """The written list (fake_cuda.SYNCING): each of its operators is refused, tagged or not (histc, bincount's
    `out`); what looks alike but reads nothing back passes: repeat_interleave given output_size, integer
    indexing, an asynchronous copy into page-locked memory. A synchronous copy into that memory and an event
    waited on are refused; inside a permitted region all pass, a value read there standing in as 1."""
    from fake_cuda import SYNCING, FakeEvent

    with fake_cuda(monkeypatch):
        x = torch.empty(8, device=CUDA)
        i = torch.zeros(8, dtype=torch.long, device=CUDA)
        m = x > 0
        calls = {"aten.histc": lambda: torch.histc(x), "aten.histogram": lambda: torch.histogram(x, 4),
                 "aten._histogramdd_bin_edges": lambda: torch.histogramdd(x.reshape(4, 2), [2, 2]),
                 "aten.bincount": lambda: torch.bincount(i),
                 "aten.nonzero": lambda: x.nonzero(), "aten.argwhere": lambda: torch.argwhere(x),
                 "aten.masked_select": lambda: x.masked_select(m),
                 "aten._unique": lambda: torch.ops.aten._unique(x), "aten._unique2": lambda: torch.unique(x),
                 "aten.unique_dim": lambda: torch.unique(x, dim=0),
                 "aten.unique_consecutive": lambda: torch.unique_consecutive(x),
                 "aten.unique_dim_consecutive": lambda: torch.unique_consecutive(x, dim=0),
                 "aten.repeat_interleave": lambda: torch.repeat_interleave(i),
                 "aten.equal": lambda: torch.equal(x, x), "aten.is_nonzero": lambda: x[:1].is_nonzero(),
                 "aten.allclose": lambda: torch.allclose(x, x), "aten._local_scalar_dense": lambda: x[0].item()}
        assert set(calls) == set(SYNCING)
        for name, fn in calls.items():
            with pytest.raises(HostSync), NoHostSync():
                fn()
                pytest.fail(f"{name}: not refused")
        out = torch.empty(0, dtype=torch.long, device=CUDA)
        with pytest.raises(HostSync, match="bincount"), NoHostSync():
            torch.ops.aten.bincount.out(i, out=out)  # the `out` overload has no tag
        with NoHostSync() as g:
            torch.repeat_interleave(i, output_size=8)
            x[i] * 2
            host = torch.empty((), pin_memory=True)
            host.copy_(x[0], non_blocking=True)
        with pytest.raises(HostSync), NoHostSync():
            host = torch.empty((), pin_memory=True)
            host.copy_(x[0])  # not asynchronous: the host waits
        monkeypatch.setattr(FakeEvent, "guard", g)
        with pytest.raises(HostSync, match="Event.synchronize"):
            FakeEvent().synchronize()
        with g, g.permitted("reading"):
            FakeEvent().synchronize()
            assert float(x[0]) == 1.0 and x[:2].tolist() == [1, 1] and torch.histc(x).shape == (100,)
        assert g.permits == {"reading": 1}
