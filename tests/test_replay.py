"""benchmarks/replay_steps.py: the step-by-step replay of a run (how a collapse starts, docs/METHOD.md section
10) is the run itself, and a skipped step is left out."""

import importlib.util
import json
from pathlib import Path

from bayesncl.settings import config as C
from bayesncl.settings.config import dump_yaml
from bayesncl.training.train import pretrain

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("replay_steps", ROOT / "benchmarks" / "replay_steps.py")
rs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rs)


def _run(tmp_path, tiny_sets):
    cfg = C.resolve(sets=tiny_sets + ["train.epochs=3", "train.max_steps_per_epoch=2", "method.name=bayesncl",
                                      "train.loss_scaler=fp16"])  # these tiny runs' first steps overflow
    pretrain(cfg, tmp_path / "run", progress=False)
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    path = tmp_path / "config.yaml"
    path.write_text(dump_yaml(cfg))
    return path, log


def test_the_replay_is_the_run_and_a_skipped_step_changes_what_follows(tmp_path, tiny_sets):
    path, log = _run(tmp_path, tiny_sets)
    lines = []
    steps = rs.replay(str(path), from_epoch=1, epochs=2, out=lines.append)
    assert [(r["epoch"], r["step"]) for r in steps] == [(2, 0), (2, 1), (3, 0), (3, 1)]
    for epoch in (2, 3):  # the same seeds, draws and order as pretrain: the same losses
        mean = sum(r["infonce"] for r in steps if r["epoch"] == epoch) / 2
        assert abs(mean - log[epoch - 1]["infonce"]) < 1e-9, epoch
    assert all(r["min_norm"] >= 0 and r["grad_norm"] >= r["grad_max"] > 0 for r in steps)
    assert [r["moved_by"] > 0 for r in steps] == [not r["overflow"] for r in steps]  # the loss scaler's skips
    for epoch in (2, 3):  # the replay's overflows are the run's skips
        assert sum(r["overflow"] for r in steps if r["epoch"] == epoch) / 2 == log[epoch - 1]["skipped"]
    assert sum(line.startswith("epoch 3 step") for line in lines) == 2

    quiet = []
    skipped = rs.replay(str(path), from_epoch=1, epochs=2, skip={(3, 0)}, spikes=1e9, out=quiet.append)
    assert not steps[2]["overflow"]  # a step that was taken
    assert skipped[:3] == [steps[0], steps[1], {**steps[2], "skipped": True}]  # the step itself is as before
    assert skipped[3]["infonce"] != steps[3]["infonce"]  # what follows starts from the weights before it
    lines = [q for q in quiet if "step" in q]  # with --spikes: the skipped step and the loss scaler's skips
    want = ([f"epoch 2 step {s} (loss scaler overflow, skipped)" for s in (0, 1) if steps[s]["overflow"]]
            + ["epoch 3 step 0 (skipped)"])
    assert [q.split(":")[0] for q in lines[: len(want)]] == want


def test_a_bad_config_is_one_line(tmp_path):
    import subprocess
    import sys

    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"\xff\xfe\x00binary")
    for path in (tmp_path / "missing.yaml", bad):
        r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "replay_steps.py"), str(path)],
                           capture_output=True, text=True, env={"PYTHONPATH": str(ROOT / "src")})
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and str(path) in r.stderr, r.stderr


def test_fp16_headroom_is_the_largest_finite_power_of_two_and_the_steps_own_overflow_point(tmp_path, tiny_sets):
    import math

    import torch

    from bayesncl.data import SimCLRAugment
    from bayesncl.model.methods import build_method
    from bayesncl.training.optim import build_optimizer
    from bayesncl.training.step import TrainStep

    cfg = C.resolve(sets=tiny_sets + ["method.name=bayesncl", "train.batch_size=16"])
    torch.manual_seed(0)
    model = build_method(cfg).train()
    aug = SimCLRAugment(16, (0.5,) * 3, (0.25,) * 3)
    step = TrainStep(model, build_optimizer(model, cfg), aug, cfg, torch.device("cpu"), 4)
    x = torch.randint(0, 256, (16, 3, 16, 16), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    views, gate_u = step.draws(16, torch.Generator().manual_seed(1))
    fp16, emulated = rs.fp16_headroom(model, step, x, views, gate_u)
    v = step.augment.views(x, views)
    grads = torch.autograd.grad(model.views_loss(v, gate_u)[0], list(model.parameters()))
    assert emulated == math.log2(65504.0 / max(float(g.abs().max()) for g in grads))

    def finite(k):
        with torch.autocast("cpu", dtype=torch.float16):
            loss = model.views_loss(v, gate_u)[0]
        return all(bool(torch.isfinite(g).all())
                   for g in torch.autograd.grad(loss.float() * 2.0 ** k, list(model.parameters())))
    assert finite(fp16) and not finite(fp16 + 1)


def test_a_run_recorded_before_the_loss_scaler_replays_as_it_ran(tmp_path, tiny_sets):
    # Its config.resolved.yaml has no train.loss_scaler: the run took every step, and so must the replay, though
    # today's default (fp16) would skip these tiny runs' first steps.
    cfg = C.resolve(sets=tiny_sets + ["train.epochs=2", "train.max_steps_per_epoch=2", "method.name=bayesncl",
                                      "train.loss_scaler=none"])
    pretrain(cfg, tmp_path / "run", progress=False)
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    del cfg["train"]["loss_scaler"]
    path = tmp_path / "config.yaml"
    path.write_text(dump_yaml(cfg))
    steps = rs.replay(str(path), from_epoch=0, epochs=2, out=lambda line: None)
    assert not any(r["overflow"] for r in steps)
    for epoch in (1, 2):
        mean = sum(r["infonce"] for r in steps if r["epoch"] == epoch) / 2
        assert abs(mean - log[epoch - 1]["infonce"]) < 1e-9, epoch
    fp16 = C.resolve(file=path)  # read as a user's config, the default applies
    assert fp16["train"]["loss_scaler"] == "fp16"
