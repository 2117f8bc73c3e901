"""TensorBoard event files (bayesncl.runs.events): read back by TensorBoard's own readers, a run's curves are its
log.jsonl and its sections' numbers, once per step and in order, after a resume too, and live."""

import gc
import json
import os
import threading
import time
import warnings

import numpy as np
import pytest
import torch

import bayesncl.runs.events as E
import bayesncl.training.train as T
from bayesncl.settings import config as C
from bayesncl.evaluation.runner import evaluate
from bayesncl.training.train import pretrain
from helpers import events as tb

EPOCHS = 3


def _sets(tiny_sets, *more):
    # BayesNCL (gates, KL), the fp16 loss scaler (skips, scale) and gradient dynamics every epoch: every curve
    return tiny_sets + ["method.name=bayesncl", "train.loss_scaler=fp16", "train.dynamics_every=1",
                        f"train.epochs={EPOCHS}", "data.synthetic.train_size=128", *more]


def _log(run):
    return [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]


def _expected(log) -> dict:
    """What TensorBoard should show of a log: each number of each line (not its epoch or step count) at its epoch,
    as the float32 an event holds."""
    out = {}
    for line in log:
        for key, v in line.items():
            if key not in ("epoch", "steps") and v is not None:
                out.setdefault(f"train/{key}", []).append((line["epoch"], float(np.float32(v))))
    return out


def _files(run):
    return sorted(p.name for p in run.iterdir() if "events" in p.name)


def test_records_are_framed_and_checksummed_as_tensorboards_writer_frames_them():
    """The TFRecord framing against TensorBoard's own writer, byte for byte; CRC-32C against its check value."""
    import io

    from tensorboard.summary.writer.record_writer import RecordWriter

    assert E.crc32c(b"123456789") == 0xE3069283 and E.crc32c(b"") == 0  # RFC 3720's check value
    rng = np.random.default_rng(0)
    for data in (b"", b"x", bytes(range(256)), rng.bytes(1000)):
        buf = io.BytesIO()
        RecordWriter(buf).write(data)
        assert E.record(data) == buf.getvalue()


def test_events_decode_as_tensorboards_protocol_buffers():
    """Each field encoded by hand decodes with TensorBoard's event.proto to what was written; the histogram's
    buckets are NumPy's over the values, its moments theirs."""
    from tensorboard.compat.proto.event_pb2 import Event, SessionLog

    ev = Event.FromString(E.event(1234.5, 300, values=[E.scalar("train/loss", 4.25), E.scalar("eval/x/p@1", -1e-3)]))
    assert (ev.wall_time, ev.step, ev.WhichOneof("what")) == (1234.5, 300, "summary")
    assert [(v.tag, v.simple_value) for v in ev.summary.value] == [("train/loss", 4.25),
                                                                   ("eval/x/p@1", np.float32(-1e-3))]
    (big,) = Event.FromString(E.event(0.0, 1, values=[E.scalar("eval/cost/x", -1e39)])).summary.value
    assert big.simple_value == -np.inf  # beyond float32's range: no error, an infinite point
    ev = Event.FromString(E.event(1.0, 2**40, file_version="brain.Event:2"))
    assert (ev.step, ev.file_version) == (2**40, "brain.Event:2")  # a varint over several bytes
    for step in (1, 127, 128, 300, 2**40):  # byte for byte what protobuf writes: each varint in its shortest form
        assert E.event(0.5, step) == Event(wall_time=0.5, step=step).SerializeToString()
    ev = Event.FromString(E.event(2.0, 1, start=True))
    assert ev.session_log.status == SessionLog.START and not ev.HasField("summary")
    v = np.random.default_rng(1).normal(size=500)
    (h,) = Event.FromString(E.event(0.0, 1, values=[E.histogram("dynamics/af", v)])).summary.value
    counts, edges = np.histogram(v, bins=30)
    assert h.tag == "dynamics/af" and list(h.histo.bucket) == counts.tolist()
    assert list(h.histo.bucket_limit) == edges[1:].tolist() and h.histo.bucket_limit[-1] == v.max()
    assert (h.histo.min, h.histo.max, h.histo.num) == (v.min(), v.max(), 500)
    assert h.histo.sum == pytest.approx(v.sum()) and h.histo.sum_squares == pytest.approx((v ** 2).sum())


def test_a_runs_curves_read_back_equal_its_log_and_its_sections(tmp_path, tiny_sets):
    """Pretrain, evaluate: TensorBoard's reader finds every number of log.jsonl at its epoch (the loss curve among
    them), each dynamics epoch's per-dimension records as histograms and means, and each section's numbers at the
    last epoch (of the run's own evaluation, not one written elsewhere); one file per writer, no thread left, every
    file closed."""
    run = tmp_path / "run"
    threads, t0 = set(threading.enumerate()), time.time()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        pretrain(C.resolve(sets=_sets(tiny_sets)), run, progress=False)
        gc.collect()
    assert not [w.message for w in caught if w.category is ResourceWarning]  # the writer closed its file
    # nothing of the writer's runs on (a fork server's child forks): tqdm's monitor is the only thread started
    assert {t.name for t in set(threading.enumerate()) - threads} <= {"tqdm_monitor"}
    log = _log(run)
    acc = tb.accumulator(run)
    acc.Reload()
    got = tb.curves(acc)
    assert got["train/loss"] == _expected(log)["train/loss"] and len(got["train/loss"]) == EPOCHS
    assert {"train/open_gates", "train/kl", "train/skipped", "train/loss_scale", "train/lr"} <= set(got)
    dynamics = torch.load(run / "dynamics.pt", weights_only=True)
    means = {f"dynamics/{k}_mean": [(int(e), float(np.float32(np.nanmean(rec[k].numpy())))) for e, rec in
                                    dynamics.items()] for k in ("af", "gv", "sc", "sc_feature")}
    assert {k: [(s, pytest.approx(v, rel=1e-6)) for s, v in pts] for k, pts in got.items() if "_mean" in k} == means
    assert {k: v for k, v in got.items() if "_mean" not in k} == _expected(log)  # nothing else, nothing missing
    histos = tb.series(acc, "histograms")
    assert set(histos) == {"dynamics/af", "dynamics/gv", "dynamics/sc", "dynamics/sc_feature"}
    for (step, _, h), (epoch, rec) in zip(histos["dynamics/af"], dynamics.items(), strict=True):
        af = rec["af"].numpy()
        assert step == int(epoch) and h[:, 2].sum() == np.isfinite(af).sum() == 16  # every dimension counted
        assert (h[0, 0], h[-1, 1]) == pytest.approx((af.min(), af.max()))
    times = [w for _, w, _ in tb.series(acc, "scalars")["train/loss"]]
    assert t0 < acc.FirstEventTimestamp() < times[0] < times[1] < times[2] < time.time()  # each epoch as it ended

    evaluate(run / "model.pt", run / "eval", only=["features", "linear_probe"], progress=False)
    got = tb.read(run)
    probe = json.loads((run / "eval" / "linear_probe.json").read_text())["linear_probe"]
    assert got["eval/linear_probe/top1"] == [(EPOCHS, float(np.float32(probe["top1"])))]
    assert got["train/loss"] == _expected(log)["train/loss"]  # the training curves as they were
    features = json.loads((run / "eval" / "features.json").read_text())
    assert got["eval/training/infonce_final"] == [(EPOCHS, float(np.float32(features["training"]["infonce_final"])))]
    assert not [t for t in got if t.startswith("eval/run")]  # who made it is not a curve
    names = _files(run)
    assert sorted(n.rsplit(".", 1)[1] for n in names) == ["eval-features", "eval-linear_probe", "pretrain"]
    evaluate(run / "model.pt", tmp_path / "elsewhere", only=["features", "linear_probe"], progress=False,
             sets=["eval.max_images=60"])  # not the run's own evaluation: not its curves
    assert _files(run) == names and tb.read(run) == got
    assert all(n.startswith("events.out.tfevents.") for n in names)
    assert not [p for p in os.listdir(f"/proc/{os.getpid()}/fd")
                if "tfevents" in os.path.realpath(f"/proc/{os.getpid()}/fd/{p}")]  # every file closed


def test_a_section_run_again_replaces_its_numbers_and_a_checkpoint_outside_a_run_writes_none(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "log.jsonl").write_text("")
    for top1 in (10.0, 20.0):
        E.write_section(run, "linear_probe", {"run": {"epochs": 7, "seed": 0},
                                              "linear_probe": {"top1": top1, "protocol": "fast", "top5": None,
                                                               "flag": True, "curve": {"32": 0.5}}})
    assert len(_files(run)) == 1
    assert tb.read(run) == {"eval/linear_probe/top1": [(7, 20.0)], "eval/linear_probe/curve/32": [(7, 0.5)]}
    loose = tmp_path / "loose"
    loose.mkdir()
    E.write_section(loose, "linear_probe", {"run": {"epochs": 7}, "linear_probe": {"top1": 1.0}})
    assert list(loose.iterdir()) == []


def test_a_run_killed_after_its_checkpoint_resumes_with_each_epoch_once(tmp_path, tiny_sets, monkeypatch):
    """Killed between an epoch's checkpoint and its event (the widest gap), then rerun: the file is taken up, the
    epoch it lacks appended, so it holds the log, each epoch once; a Python loader that had read it reads on and
    finds the same, the epoch it had kept at the time it was written."""
    cfg = C.resolve(sets=_sets(tiny_sets))
    run = tmp_path / "run"
    real, calls, on_disk = E.TrainingEvents.epoch, [], []

    def dies_at_epoch_2(self, line):
        # each epoch's event comes after its checkpoint and its log line: the file never holds more than the log
        calls.append((line["epoch"], torch.load(run / "checkpoint.pt", weights_only=True)["epoch"], len(_log(run))))
        if line["epoch"] == 2:
            raise KeyboardInterrupt  # stands in for a SIGKILL: nothing after it runs
        real(self, line)
        on_disk.append(tb.read(run)["train/loss"])  # on disk as the epoch ends, for a reader following the run

    monkeypatch.setattr(E.TrainingEvents, "epoch", dies_at_epoch_2)
    with pytest.raises(KeyboardInterrupt):
        pretrain(cfg, run, progress=False)
    first = _files(run)
    live = tb.accumulator(run)
    live.Reload()
    assert tb.curves(live)["train/loss"] == _expected(_log(run))["train/loss"][:1]  # epoch 2 logged, not an event
    (epoch1,) = [w for _, w, _ in tb.series(live, "scalars")["train/loss"]]
    monkeypatch.setattr(E.TrainingEvents, "epoch", real)
    pretrain(cfg, run, progress=False)
    assert calls == [(1, 1, 1), (2, 2, 2)] and _files(run) == first
    want = _expected(_log(run))
    assert on_disk == [want["train/loss"][:1]]
    assert [e for e, _ in want["train/loss"]] == [1, 2, 3]
    assert {k: v for k, v in tb.read(run).items() if k.startswith("train/")} == want  # a fresh reader: the log
    live.Reload()
    assert {k: v for k, v in tb.curves(live).items() if k.startswith("train/")} == want  # the reader that read on
    assert tb.series(live, "scalars")["train/loss"][0][1] == epoch1


def _line(epoch, loss):
    return {"epoch": epoch, "loss": loss}


@pytest.mark.parametrize("damage", ["a checkpoint put back", "a record cut short"])
def test_a_file_ahead_of_its_log_or_cut_short_is_followed_by_a_restart(tmp_path, damage, procs):
    """A file that goes beyond the checkpoint's log (put back to epoch 2), or whose last record was cut short: the
    next start writes a new file (the log's epochs, a restart at step 1) and appends the epochs it trains: each of
    TensorBoard's readers finds each epoch once, with the new values, read fresh or read on from the older file."""
    run = tmp_path / "runs" / "run"
    run.mkdir(parents=True)
    w = E.TrainingEvents(run, [], {})
    for e in (1, 2, 3):
        w.epoch(_line(e, 10.0 - e))
    w.close()
    (old,) = run.glob("events.*")
    live = tb.accumulator(run)
    live.Reload()
    assert tb.curves(live) == {"train/loss": [(1, 9.0), (2, 8.0), (3, 7.0)]}
    assert live.file_version == 2  # only in a file of version 2 does the loader take a session start as a restart
    server = tb.DataServer(tmp_path / "runs", procs)
    server.wait_for("run", lambda c: len(c.get("train/loss", ())) == 3, "epochs 1-3")
    if damage == "a record cut short":
        old.write_bytes(old.read_bytes()[:-7])
    w = E.TrainingEvents(run, [_line(1, 9.0), _line(2, 8.0)], {})  # the log of a checkpoint at epoch 2
    w.epoch(_line(3, 6.5))
    w.close()
    assert _files(run)[0] == old.name and len(_files(run)) == 2  # the older file as it was: no reader breaks
    assert tb.read(run) == {"train/loss": [(1, 9.0), (2, 8.0), (3, 6.5)]}
    live.Reload()
    assert tb.curves(live) == {"train/loss": [(1, 9.0), (2, 8.0), (3, 6.5)]}
    shown = server.wait_for("run", lambda c: (3, 6.5) in c.get("train/loss", ()), "epoch 3 trained again")
    server.close()
    assert shown == {"train/loss": [(1, 9.0), (2, 8.0), (3, 6.5)]}
    E.TrainingEvents(run, [_line(1, 9.0), _line(2, 8.0), _line(3, 6.5)], {}).close()  # whole: taken up as it is
    assert len(_files(run)) == 2 and tb.read(run) == {"train/loss": [(1, 9.0), (2, 8.0), (3, 6.5)]}


def test_the_data_server_shows_a_resumed_run_once_per_epoch_live(tmp_path, tiny_sets, monkeypatch, procs):
    """TensorBoard's data server (what `tensorboard --logdir` reads with) watching the results folder while a run
    trains, is stopped (a preemption mid-epoch) and resumes: it shows the log, each epoch once, in order."""
    from bayesncl.training.train import Preempted

    logdir = tmp_path / "runs"
    run = logdir / "synthetic" / "seed~0"
    cfg = C.resolve(sets=_sets(tiny_sets, "train.dynamics_every=0"))
    server = tb.DataServer(logdir, procs)
    try:
        real, steps = T.TrainStep.__call__, []

        def stopped_in_epoch_3(self, x, gen, want_zplus=False):
            steps.append(1)
            if len(steps) == 9:  # 4 steps an epoch: epoch 3's first step
                os.kill(os.getpid(), __import__("signal").SIGTERM)
            return real(self, x, gen, want_zplus)

        monkeypatch.setattr(T.TrainStep, "__call__", stopped_in_epoch_3)
        with pytest.raises(Preempted):
            pretrain(cfg, run, progress=False)
        shown = server.wait_for("synthetic/seed~0", lambda c: len(c.get("train/loss", ())) == 2, "epochs 1-2")
        assert shown["train/loss"] == _expected(_log(run))["train/loss"]
        monkeypatch.setattr(T.TrainStep, "__call__", real)
        pretrain(cfg, run, progress=False)
        want = _expected(_log(run))
        shown = server.wait_for("synthetic/seed~0", lambda c: len(c.get("train/loss", ())) >= 3, "epoch 3")
        assert shown == want
    finally:
        server.close()
