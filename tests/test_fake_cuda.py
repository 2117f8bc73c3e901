"""The GPU path proven without a GPU (issue 34): one training step of every method under every precision and
loss-scaler setting the paper grid (config/paper.yaml) and the GPU check (benchmarks/gpu_check.py) use, and
the per-batch regions of the GPU evaluation sections, on fake `cuda` tensors under a guard that refuses any
host sync, host-device copy or device mismatch (tests/fake_cuda.py says how, and what stands in for what).

This is what stands for the CUDA-only tests of tests/test_step_compile.py where no GPU is lent: a step that
reads a device value on the host, copies a constant over, or mixes a CPU tensor in fails here, on the CPU. It
cannot see timing, numerics or what the CUDA kernels themselves do (docs/DESIGN.md, "The GPU path without a
GPU").
"""

import pytest
import torch
from torch import nn

import bayesncl.train as T
from bayesncl import config as C
from bayesncl.data import SimCLRAugment
from bayesncl.evaluation.dynamics import GradientStats
from bayesncl.methods import build_method
from bayesncl.optim import build_optimizer
from fake_cuda import CudaGenerator, HostSync, NoHostSync, fake_cuda, python_grad, to_channels_last

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


class TinyBackbone(nn.Module):
    """Two conv-BN-ReLU blocks: the step's structure at a tenth of ResNet-18's operators (fake tensors cost
    Python per operator); the real backbone runs once, in test_the_paper_grids_step_with_resnet18."""

    def __init__(self, *args, **kwargs):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4), nn.ReLU(inplace=True),
            nn.Conv2d(4, 8, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.out_dim = 8

    def forward(self, x):
        return self.net(x)


@pytest.fixture
def tiny_backbone(monkeypatch):
    import bayesncl.methods as methods_mod

    monkeypatch.setattr(methods_mod, "build_backbone", TinyBackbone)


def fake_step(method: str, precision: str, scaler: str, extra=()):
    """A TrainStep on fake CUDA tensors, as `pretrain` builds it on a GPU (channels-last model, per-view BN)."""
    cfg = C.resolve(sets=SETS + METHODS[method] + [f"train.precision={precision}", f"train.loss_scaler={scaler}",
                                                   *extra])
    assert cfg["train"]["bn"] == "view" and cfg["train"]["channels_last"]
    with torch.device(CUDA):
        model = build_method(cfg).train()
        aug = SimCLRAugment(16, (0.5,) * 3, (0.25,) * 3)
    to_channels_last(model)
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
                 "host operand": lambda: x * host, "host scalar tensor": lambda: x * torch.tensor(2.0)}
        for name, fn in syncs.items():
            with pytest.raises(HostSync), NoHostSync():
                fn()
                pytest.fail(f"{name}: not refused")
        with NoHostSync() as g:
            y = torch.where(x > 0, 1.0, x) * 2 + torch.full((4,), 3.0, device=CUDA)
            torch._foreach_mul_([y], [0.9])
            x.new_zeros(3).index_select(0, torch.zeros(2, dtype=torch.long, device=CUDA))
        assert g.ops > 0 and y.device == CUDA
        conv = torch.nn.Conv2d(3, 4, 3, device=CUDA)
        to_channels_last(conv)
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
