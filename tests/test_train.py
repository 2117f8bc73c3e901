"""Pretraining: each method learns, runs resume bit-exactly, bad configs fail before any work."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

import bayesncl.training.train as T
from bayesncl.settings import config as C
from bayesncl.model import losses
from bayesncl.cli.main import main
from bayesncl.data import SimCLRAugment, load_split
from bayesncl.core.errors import REQUEUE_EXIT, ConfigError, OutputError
from bayesncl.model.methods import build_method
from bayesncl.training.train import TrainingDiverged, pretrain
from helpers.processes import PATIENCE, wait_until


def fixed_views(cfg, n=32, seed=123):
    ds = load_split(cfg["data"], "train")
    aug = SimCLRAugment(ds.crop_size, ds.mean, ds.std)
    g = torch.Generator().manual_seed(seed)
    x = ds.images[:n]
    return aug(x, g), aug(x, g)


@pytest.mark.parametrize("sets", [["method.name=cl"], ["method.name=ncl"], ["method.name=ncl", "method.nonneg=rep_relu"],
                                  ["method.name=topk_ncl"], ["method.name=bayesncl"],
                                  ["method.name=bayesncl", "method.gate=gumbel"],
                                  ["method.name=bayesncl", "method.gate=soft", "method.detach=false",
                                   "method.head_depth=3"]])
def test_each_method_loss_goes_down(tmp_path, tiny_sets, sets):
    # 6 epochs: with BatchNorm per view (as released) SimCLR's loss on these views moves only after ~5
    cfg = C.resolve(sets=tiny_sets + sets + ["train.epochs=6", "method.lambda=1e-3"])
    views = [fixed_views(cfg, seed=s) for s in (123, 124, 125, 126)]  # one batch's loss is too noisy a reading

    def loss_of(model):
        torch.manual_seed(0)  # same Gumbel noise before and after
        model.train()
        with torch.no_grad():
            return sum(model.training_loss(v1, v2)[0].item() for v1, v2 in views) / len(views)

    torch.manual_seed(cfg["seed"])
    before = loss_of(build_method(cfg))
    path = pretrain(cfg, tmp_path, progress=False)
    model = build_method(cfg)
    model.load_state_dict(torch.load(path, weights_only=True)["model"])
    after = loss_of(model)
    assert after < before - 0.05, (before, after)
    log = [json.loads(l) for l in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in log] == [1, 2, 3, 4, 5, 6]
    assert all(r["img_per_s"] > 0 and r["lr"] >= 0 for r in log)
    if cfg["method"]["name"] == "bayesncl":
        assert all(0 <= r["open_gates"] <= 1 and "kl" in r for r in log)


def test_checkpoints_load_weights_only_and_hold_config(tmp_path, tiny_sets):
    cfg = C.resolve(sets=tiny_sets + ["train.max_steps_per_epoch=2"])
    pretrain(cfg, tmp_path, progress=False)
    for name in ("checkpoint.pt", "model.pt"):
        state = torch.load(tmp_path / name, weights_only=True)
        assert state["config"] == cfg and state["epoch"] == 2
    assert not [p for p in tmp_path.iterdir() if ".tmp" in p.name]
    # A finished run is not trained again.
    mtime = (tmp_path / "model.pt").stat().st_mtime_ns
    pretrain(cfg, tmp_path, progress=False)
    assert (tmp_path / "model.pt").stat().st_mtime_ns == mtime


def test_same_seed_same_weights_and_different_seed_differs(tmp_path, tiny_sets):
    cfgs = [C.resolve(sets=tiny_sets + ["train.max_steps_per_epoch=2", f"seed={s}"]) for s in (0, 0, 1)]
    states = [torch.load(pretrain(c, tmp_path / str(i), progress=False), weights_only=True)["model"]
              for i, c in enumerate(cfgs)]
    assert all(torch.equal(states[0][k], states[1][k]) for k in states[0])
    assert not all(torch.equal(states[0][k], states[2][k]) for k in states[0])


def _cli(out, sets):
    cmd = [sys.executable, "-m", "bayesncl.cli.main", "pretrain", "--out", str(out), "--quiet"]
    for s in sets:
        cmd += ["--set", s]
    return cmd


def _wait_for_epoch(path, epoch, proc):
    def reached():
        try:
            return path.exists() and torch.load(path, weights_only=True)["epoch"] >= epoch
        except Exception:  # being replaced right now
            return False

    wait_until(reached, f"a checkpoint of epoch {epoch} before training ended", proc)


def _same_weights(a, b):
    sa, sb = torch.load(a, weights_only=True)["model"], torch.load(b, weights_only=True)["model"]
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


@pytest.mark.parametrize("sig", [signal.SIGKILL, pytest.param(signal.SIGTERM, marks=pytest.mark.long)])
def test_killed_run_resumes_to_identical_weights(tmp_path, tiny_sets, sig, procs):
    sets = tiny_sets + ["train.epochs=3", "data.synthetic.train_size=512", "method.gate=gumbel"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    ref = subprocess.run(_cli(tmp_path / "ref", sets), env=env, capture_output=True, text=True)
    assert ref.returncode == 0, ref.stderr

    run = tmp_path / "run"
    proc = procs.popen(_cli(run, sets), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       signals=True)
    _wait_for_epoch(run / "checkpoint.pt", 1, proc)
    time.sleep(0.15)  # into epoch 2, mostly; either way the rerun must end with the reference's weights
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=PATIENCE)
    if sig == signal.SIGTERM:
        assert proc.returncode == REQUEUE_EXIT, err
        state = torch.load(run / "checkpoint.pt", weights_only=True)
        assert state["step"] > 0 or state["epoch"] >= 2  # a mid-epoch save unless the epoch had just ended
    else:
        assert proc.returncode == -signal.SIGKILL
    assert not (run / "model.pt").exists()
    again = subprocess.run(_cli(run, sets), env=env, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert _same_weights(run / "model.pt", tmp_path / "ref" / "model.pt")
    log = [json.loads(l) for l in (run / "log.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in log] == [1, 2, 3]


def test_nan_loss_stops_and_keeps_last_good_checkpoint(tmp_path, tiny_sets, monkeypatch):
    cfg = C.resolve(sets=tiny_sets + ["train.max_steps_per_epoch=3", "train.epochs=3"])
    pretrain(C.resolve(sets=tiny_sets + ["train.max_steps_per_epoch=3", "train.epochs=3"]), tmp_path / "ok",
             progress=False)
    calls = {"n": 0}
    real = losses.info_nce

    def flaky(*a, **k):
        calls["n"] += 1
        out = real(*a, **k)
        return out * float("nan") if calls["n"] > 4 else out

    monkeypatch.setattr(losses, "info_nce", flaky)
    with pytest.raises(TrainingDiverged, match="last good checkpoint"):
        pretrain(cfg, tmp_path / "run", progress=False)
    state = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)
    assert state["epoch"] == 1 and not (tmp_path / "run" / "model.pt").exists()
    assert all(torch.isfinite(v).all() for v in state["model"].values() if v.is_floating_point())


@pytest.mark.parametrize("bad,key", [("method.name=simsiam", "method.name"), ("method.rho=1.5", "method.rho"),
                                     ("method.rho=0", "method.rho"), ("method.lambda=-1", "method.lambda"),
                                     ("train.epochs=-1", "train.epochs"), ("method.gate=hard", "method.gate"),
                                     ("model.arch=vit", "model.arch"), ("model.depth=3", "model.depth"),
                                     ("train.loss_scaler=maybe", "train.loss_scaler"),
                                     ("train.precision=fp8", "train.precision")])
def test_bad_config_fails_before_work(tmp_path, tiny_sets, capsys, bad, key):
    out = tmp_path / "run"
    assert main(["pretrain", "--out", str(out), "--quiet"] + sum((["--set", s] for s in tiny_sets + [bad]), [])) == 2
    err = capsys.readouterr().err
    assert key in err
    assert not out.exists()


def test_missing_dataset_root_fails_before_work(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["pretrain", "--out", str(out), "--set", "data.dataset=cifar10"]) == 2
    assert "data.root" in capsys.readouterr().err
    missing = tmp_path / "nowhere"
    assert main(["pretrain", "--out", str(out), "--set", "data.dataset=cifar100", "--set", f"data.root={missing}"]) == 2
    assert str(missing) in capsys.readouterr().err
    assert not out.exists()


def test_checkpoint_from_another_config_is_refused(tmp_path, tiny_sets):
    pretrain(C.resolve(sets=tiny_sets + ["train.max_steps_per_epoch=1", "train.epochs=1"]), tmp_path, progress=False)
    other = C.resolve(sets=tiny_sets + ["train.max_steps_per_epoch=1", "train.epochs=1", "method.rho=0.5"])
    with pytest.raises(OutputError, match=r"holds a run of another config \(config.resolved.yaml: method.rho: 0.8 "
                                          r"!= 0.5\); give another folder, or add --replace"):  # another run: refused
        pretrain(other, tmp_path, progress=False)


def _timed_run(monkeypatch, sigterm_at_call=None):
    """pretrain with an injected clock that advances exactly 1 s per training step (and nowhere else), and
    optionally a SIGTERM to itself during step call number `sigterm_at_call` (counted over the run)."""
    import bayesncl.training.train as T

    now = {"t": 1000.0, "calls": 0}
    monkeypatch.setattr(T, "_clock", lambda: now["t"])
    real = T.TrainStep.__call__

    def step(self, x, gen, want_zplus=False):
        now["t"] += 1.0
        now["calls"] += 1
        if now["calls"] == sigterm_at_call:
            os.kill(os.getpid(), signal.SIGTERM)
        return real(self, x, gen, want_zplus)

    monkeypatch.setattr(T.TrainStep, "__call__", step)
    return now


def test_preempted_epoch_keeps_the_seconds_spent_before_the_preemption(tmp_path, tiny_sets, monkeypatch):
    from bayesncl.training.train import Preempted

    cfg = C.resolve(sets=tiny_sets + ["train.max_steps_per_epoch=6", "train.epochs=2"])
    _timed_run(monkeypatch)
    pretrain(cfg, tmp_path / "ref", progress=False)
    ref = [json.loads(l) for l in (tmp_path / "ref" / "log.jsonl").read_text().splitlines()]
    assert [r["epoch_seconds"] for r in ref] == [6.0, 6.0]

    run = tmp_path / "run"
    now = _timed_run(monkeypatch, sigterm_at_call=9)  # epoch 2, step 3
    with pytest.raises(Preempted, match=r"^SIGTERM: checkpoint saved in .*/run/checkpoint\.pt; rerun the same "
                                        r"command to resume$"):  # the CLI prints it as the job's last line
        pretrain(cfg, run, progress=False)
    state = torch.load(run / "checkpoint.pt", weights_only=True)
    assert (state["epoch"], state["step"]) == (1, 3) and state["partial"]["seconds"] == 3.0
    assert state["partial"]["compile_seconds"] == 0.0  # eager: nothing compiled (carried over in graph modes)
    now["t"] += 500.0  # the time between the two jobs is not training time
    monkeypatch.setattr("bayesncl.training.train._clock", lambda: now["t"])
    pretrain(cfg, run, progress=False)
    log = [json.loads(l) for l in (run / "log.jsonl").read_text().splitlines()]
    # 3 s before the preemption + 3 s after: the epoch's time as in the uninterrupted run, and so its rate;
    # the running sums carried over too, so the logged means are the uninterrupted run's.
    assert [r["epoch_seconds"] for r in log] == [6.0, 6.0]
    assert log[1]["img_per_s"] == ref[1]["img_per_s"] == 6 * cfg["train"]["batch_size"] / 6.0
    for key in ("loss", "infonce", "kl", "open_gates"):
        assert log[1][key] == ref[1][key], key
    assert _same_weights(run / "model.pt", tmp_path / "ref" / "model.pt")


@pytest.mark.parametrize("bad", ["train.graph=fast", "train.graph=off"])
def test_graph_switch_is_validated(tiny_sets, bad):
    with pytest.raises(ConfigError, match="train.graph"):
        C.resolve(sets=tiny_sets + [bad])
    with pytest.raises(ConfigError, match="train.graph.*CUDA"):
        C.resolve(sets=tiny_sets + ["train.graph=cudagraph", "train.device=cpu"])


def test_steps_per_epoch_drops_the_last_partial_batch_and_refuses_an_empty_epoch():
    """n // batch_size steps, capped by train.max_steps_per_epoch; a batch larger than the set is a config error."""
    from bayesncl.training.train import steps_per_epoch

    cfg = {"train": {"batch_size": 64, "max_steps_per_epoch": 0}}
    assert [steps_per_epoch(n, cfg) for n in (64, 127, 128, 1024)] == [1, 1, 2, 16]
    assert steps_per_epoch(1024, {"train": {"batch_size": 64, "max_steps_per_epoch": 8}}) == 8
    assert steps_per_epoch(64, {"train": {"batch_size": 64, "max_steps_per_epoch": 8}}) == 1
    with pytest.raises(ConfigError, match=r"train.batch_size: 64 is larger than the training set \(63 images\)"):
        steps_per_epoch(63, cfg)


def test_the_compiled_step_uses_cuda_graphs_on_a_gpu_only(monkeypatch):
    """inductor's "reduce-overhead" (CUDA graphs) on cuda; no mode on the CPU or with another backend."""
    from bayesncl.training import step

    assert step.compile_mode(torch.device("cuda")) == "reduce-overhead"
    assert step.compile_mode(torch.device("cpu")) is None
    monkeypatch.setattr(step, "COMPILE_BACKEND", "aot_eager")
    assert step.compile_mode(torch.device("cuda")) is None


def test_deterministic_kernels_are_on_for_the_steps_only_and_change_no_run(tmp_path, tiny_sets, monkeypatch):
    """train.deterministic: deterministic algorithms, cuDNN's deterministic kernels without autotuning and cuBLAS's
    fixed workspace while the run trains, the process's settings back afterwards (also when training fails); off,
    nothing is touched. On the CPU the weights are the same either way, and the key is a runtime key: no run id or
    rerun trigger changes, and a checkpoint resumes under the other value."""
    from bayesncl.grid.expand import trigger_config

    seen = []
    real = T.TrainStep.__call__

    import torch.utils.deterministic as det

    def flags():
        return (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
                torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark,
                os.environ.get("CUBLAS_WORKSPACE_CONFIG"), det.fill_uninitialized_memory)

    def spy(self, *a, **k):
        seen.append(flags())
        return real(self, *a, **k)

    monkeypatch.setattr(T.TrainStep, "__call__", spy)
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", True)
    mode = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled())
    torch.use_deterministic_algorithms(False, warn_only=True)  # the process's own setting, to be put back
    try:
        before = flags()
        assert before[:2] == (False, True) and before[3:5] == (True, None)
        sets = tiny_sets + ["train.max_steps_per_epoch=2"]
        on = C.resolve(sets=sets + ["train.deterministic=true"])
        pretrain(on, tmp_path / "on", progress=False)
        # no filling of new tensors (deterministic mode's debugging aid, +4% a CPU step): nothing reads what it
        # did not write; an operator without a deterministic kernel warns (warn_only), a long run goes on
        assert seen and set(seen) == {(True, True, True, False, ":4096:8", False)}
        assert flags() == before
        # a workspace the user set is kept, and left set
        monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")
        seen.clear()
        pretrain(on, tmp_path / "on16", progress=False)
        assert {f[4] for f in seen} == {":16:8"} and os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"
        monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG")
        seen.clear()
        off = C.resolve(sets=sets)
        pretrain(off, tmp_path / "off", progress=False)
        assert set(seen) == {before}
        assert _same_weights(tmp_path / "on" / "model.pt", tmp_path / "off" / "model.pt")
        assert trigger_config(on) == trigger_config(off)
        # a run recorded before the key trained without it
        assert C.KEYS_ADDED["train.deterministic"] is False
        assert C.as_recorded({"train": {"epochs": 1}})["train"]["deterministic"] is False
        # the finished run taken up again under the other value: its checkpoint differs in a runtime key only
        assert pretrain(on, tmp_path / "off", progress=False) == tmp_path / "off" / "model.pt"
        with pytest.raises(RuntimeError, match="planted"):
            monkeypatch.setattr(T.TrainStep, "__call__",
                                lambda *a, **k: (_ for _ in ()).throw(RuntimeError("planted")))
            pretrain(C.resolve(sets=sets + ["train.deterministic=true", "train.epochs=1"]), tmp_path / "bad",
                     progress=False)
        assert flags() == before
    finally:
        torch.use_deterministic_algorithms(mode[0], warn_only=mode[1])
