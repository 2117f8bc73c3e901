"""The released fp16 loss scaler (`train.loss_scaler: fp16`): its scale and skips against torch's GradScaler, the
emulation's overflow rule against a naive loop, an exact skip in LARS, and a run that skips, logs and resumes."""

import json
import math

import pytest
import torch

from bayesncl.settings import config as C
from bayesncl.training import train as T
from bayesncl.training.optim import Lars
from bayesncl.training.loss_scaler import FP16_MAX, LossScaler
from bayesncl.core.errors import ConfigError


def _grad_sequence(n=4200, overflow_at=(0, 1, 7, 2300)):
    """Gradients of one 3-vector parameter, non-finite at the listed steps."""
    g = torch.Generator().manual_seed(0)
    for i in range(n):
        v = torch.randn(3, generator=g)
        if i in overflow_at:
            v[i % 3] = float("inf") if i % 2 else float("nan")
        yield v


def test_real_scaler_follows_gradscaler_over_two_growth_intervals():
    # GradScaler with its defaults, stepping a plain SGD: scale, skips and weights after every step.
    p_ref = torch.zeros(3, requires_grad=True)
    opt = torch.optim.SGD([p_ref], lr=0.1)
    ref = torch.amp.GradScaler("cpu")
    ours = LossScaler(torch.device("cpu"), real=True)
    p = torch.zeros(3)
    for i, g in enumerate(_grad_sequence()):
        opt.zero_grad()
        ref.scale((p_ref * g).sum()).backward()
        ref.step(opt)
        ref.update()

        q = torch.zeros(3, requires_grad=True)
        (grad,), _ = ours.check(torch.autograd.grad(ours.scaled((q * g).sum()), [q]))
        if not ours.found[0]:
            p.add_(grad, alpha=-0.1)  # as SGD
        ours.update()
        assert float(ours.scale[0]) == ref.get_scale(), f"step {i}"
        assert torch.equal(p, p_ref.detach()), f"step {i}"
    assert ref.get_scale() == 2.0 ** 16 * 0.5 ** 4 * 2  # four overflows, one clean run of 2,000 steps


def test_real_scaler_finds_an_fp16_overflow_as_gradscaler_does():
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 8)
    x = torch.randn(16, 8)
    for scale_up in (1.0, 30.0):  # finite, then past fp16's range at the initial scale 2^16
        with torch.autocast("cpu", dtype=torch.float16):
            loss = (lin(x * scale_up).float() ** 2).mean()
        ref = torch.amp.GradScaler("cpu")
        ref_opt = torch.optim.SGD(lin.parameters(), lr=0.0)
        ref_opt.zero_grad()
        ref.scale(loss).backward(retain_graph=True)
        ref.unscale_(ref_opt)
        ref_found = sum(v.item() for v in ref._found_inf_per_device(ref_opt).values())
        ours = LossScaler(torch.device("cpu"), real=True)
        grads, _ = ours.check(torch.autograd.grad(ours.scaled(loss), list(lin.parameters())))
        assert bool(ours.found[0]) == bool(ref_found) == (scale_up > 1)
        if not ref_found:
            for g, p in zip(grads, lin.parameters()):
                assert torch.equal(g, p.grad)
        else:
            assert all(torch.equal(g, torch.zeros_like(g)) for g in grads)


@pytest.mark.parametrize("scale", [2.0 ** 10, 2.0 ** 16, 2.0 ** 22])
def test_emulated_overflow_is_scale_times_the_largest_entry_past_fp16_max(scale):
    g = torch.Generator().manual_seed(1)
    for trial in range(200):
        grads = [torch.randn(4, 3, generator=g) * 10 ** (trial % 7 - 3), torch.randn(5, generator=g)]
        if trial % 23 == 0:
            grads[1][2] = float("nan")
        ours = LossScaler(torch.device("cpu"), real=False)
        ours.scale.fill_(scale)
        out, _ = ours.check(grads)
        naive = any(not math.isfinite(v) or abs(v) * scale > FP16_MAX for t in grads for v in t.flatten().tolist())
        assert bool(ours.found[0]) == naive
        assert all(torch.equal(o, torch.zeros_like(t) if naive else t) for o, t in zip(out, grads))


def _lars_pair():
    torch.manual_seed(0)
    ps = [torch.randn(6, 4), torch.randn(6)]
    opt = Lars([{"params": [ps[0]], "weight_decay": 1e-4}, {"params": [ps[1]], "weight_decay": 0.0}],
               lr=0.3, momentum=0.9, trust_coeff=0.05, trust_clip=True)
    return ps, opt


def test_lars_skip_leaves_weights_and_momentum_exactly_and_no_skip_is_the_plain_step():
    ps, opt = _lars_pair()
    ps2, opt2 = _lars_pair()
    for step in range(6):
        grads = [torch.randn_like(p) for p in ps]
        skip = step in (2, 3)
        before = [t.clone() for t in (*ps, *opt._bufs)]
        opt.update(grads, torch.tensor(0.3), skip=torch.tensor(skip))
        if skip:
            assert all(torch.equal(a, b) for a, b in zip(before, (*ps, *opt._bufs)))
        else:
            opt2.update(grads, torch.tensor(0.3))
            assert all(torch.equal(a, b) for a, b in zip((*ps, *opt._bufs), (*ps2, *opt2._bufs)))


def _log(run):
    return [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]


def test_a_run_skips_overflowing_steps_logs_them_and_changes_nothing_else(tmp_path, tiny_sets, monkeypatch):
    sets = tiny_sets + ["train.max_steps_per_epoch=3", "train.epochs=2", "train.loss_scaler=fp16"]
    init = C.resolve(sets=sets + ["train.epochs=0"])
    T.pretrain(init, tmp_path / "init", progress=False)
    monkeypatch.setattr(LossScaler, "INIT", 2.0 ** 120)  # every step of these two epochs overflows
    T.pretrain(C.resolve(sets=sets), tmp_path / "all", progress=False)
    a = torch.load(tmp_path / "init" / "model.pt", weights_only=True)["model"]
    b = torch.load(tmp_path / "all" / "model.pt", weights_only=True)["model"]
    moved = [k for k in a if not torch.equal(a[k], b[k])]
    assert moved and all("running" in k or "num_batches" in k for k in moved)  # BatchNorm statistics only
    log = _log(tmp_path / "all")
    assert [r["skipped"] for r in log] == [1.0, 1.0]
    assert log[-1]["loss_scale"] == 2.0 ** 114


def test_fp16_is_the_default_and_none_takes_every_step(tmp_path, tiny_sets, monkeypatch):
    monkeypatch.setattr(LossScaler, "INIT", 2.0 ** 120)
    assert C.resolve(sets=[])["train"]["loss_scaler"] == "fp16"  # as released (docs/METHOD.md section 2)
    T.pretrain(C.resolve(sets=tiny_sets + ["train.max_steps_per_epoch=3", "train.epochs=1",
                                           "train.loss_scaler=none"]), tmp_path / "r", progress=False)
    log = _log(tmp_path / "r")
    assert "skipped" not in log[0] and "loss_scale" not in log[0]


def test_a_resumed_run_keeps_its_scale(tmp_path, tiny_sets, monkeypatch):
    # The scale must come back from the checkpoint: restarting from 2^40 would skip other steps.
    monkeypatch.setattr(LossScaler, "INIT", 2.0 ** 40)
    cfg = C.resolve(sets=tiny_sets + ["train.epochs=5", "train.loss_scaler=fp16"])
    T.pretrain(cfg, tmp_path / "ref", progress=False)
    assert [r["skipped"] > 0 for r in _log(tmp_path / "ref")] == [True, True, True, True, False]

    real_write, calls = T.atomic_write_text, []

    def stop_after_epoch_one(path, text):
        real_write(path, text)
        if path.name == T.LOG:
            calls.append(path)
            raise KeyboardInterrupt
    monkeypatch.setattr(T, "atomic_write_text", stop_after_epoch_one)
    with pytest.raises(KeyboardInterrupt):
        T.pretrain(cfg, tmp_path / "run", progress=False)
    monkeypatch.setattr(T, "atomic_write_text", real_write)
    T.pretrain(cfg, tmp_path / "run", progress=False)
    a = torch.load(tmp_path / "ref" / "model.pt", weights_only=True)["model"]
    b = torch.load(tmp_path / "run" / "model.pt", weights_only=True)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert _log(tmp_path / "run") == [{**r, "epoch_seconds": r2["epoch_seconds"], "img_per_s": r2["img_per_s"]}
                                      for r, r2 in zip(_log(tmp_path / "ref"), _log(tmp_path / "run"))]


def test_fp16_training_runs_with_the_real_scaler(tmp_path, tiny_sets):
    T.pretrain(C.resolve(sets=tiny_sets + ["train.max_steps_per_epoch=2", "train.epochs=1",
                                           "train.precision=fp16", "train.loss_scaler=fp16"]),
               tmp_path / "r", progress=False)
    (line,) = _log(tmp_path / "r")
    assert math.isfinite(line["loss"]) and 0 <= line["skipped"] <= 1 and line["loss_scale"] > 0


def test_fp16_without_the_scaler_is_refused_by_name():
    with pytest.raises(ConfigError, match="train.loss_scaler"):
        C.resolve(sets=["train.precision=fp16", "train.loss_scaler=none"])


def test_a_checkpoint_from_before_the_scaler_reads_as_none():
    from bayesncl.runs.files import stored_config

    cfg = C.resolve(sets=[])
    del cfg["train"]["loss_scaler"]
    assert stored_config({"config": cfg, "model": {}}, "old.pt")["train"]["loss_scaler"] == "none"


def test_the_benchmark_prints_the_checks_cost_for_each_method():
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    r = subprocess.run([sys.executable, str(root / "benchmarks" / "bench_train.py"), "--scaler", "--steps", "2",
                        "--warmup", "0"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert [line.split()[0] for line in lines] == ["ncl", "bayesncl"] and all(line.endswith("%") for line in lines)
