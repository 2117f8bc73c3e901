"""Command line: bad input gives one line and exit 2 before any work; bugs keep their traceback; help."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from contextlib import redirect_stderr
from pathlib import Path

import pytest
import torch

import bayesncl.settings.config
import bayesncl.evaluation.runner
import bayesncl.report
import bayesncl.training.train
from bayesncl.core.atomic import atomic_path, atomic_write_text, check_writable_dir
from bayesncl.cli.main import build_parser, main
from bayesncl.data import iter_batches, load_split
from bayesncl.core.errors import (BayesNCLError, CheckpointError, ConfigError, DataError, MetricsFileError,
                                  MissingInputError, OutputError)
from bayesncl.settings.registry import METHODS
from bayesncl.core.yamlio import parse_set

from helpers.datasets import WNIDS, in_cfg, write_imagenet


@pytest.fixture
def no_work(monkeypatch):
    """Training, evaluation and rendering fail the test if a command reaches them."""
    def started(*a, **k):
        raise AssertionError("the command started its work")

    monkeypatch.setattr(bayesncl.training.train, "pretrain", started)
    monkeypatch.setattr(bayesncl.evaluation.runner, "evaluate", started)
    monkeypatch.setattr(bayesncl.report, "write_report", started)


def _one_line_error(capsys, *needles) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1, err
    for n in needles:
        assert n in err, (n, err)
    return err


# ---------------------------------------------------------------------------------- --set values
@pytest.mark.parametrize("argv,key", [
    (["pretrain", "--set", "method.rho=[0.5", "--out", "x"], "method.rho"),
    (["pretrain", "--set", "method.rho=@x", "--out", "x"], "method.rho"),
    (["evaluate", "--checkpoint", "missing.pt", "--set", "eval.batch_size=[1", "--out", "x"], "eval.batch_size"),
])
def test_unparsable_set_value_is_one_line(argv, key, tmp_path, monkeypatch, capsys, no_work):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = _one_line_error(capsys, key, "not valid YAML", "quote")
    assert not (tmp_path / "x").exists()
    # The suggested fix is itself a valid --set item.
    suggested = err.rsplit("--set ", 1)[1].strip().strip("'")
    assert parse_set(suggested) == (key, argv[argv.index("--set") + 1].split("=", 1)[1])


# ---------------------------------------------------------------------------------- --out checks
def test_out_under_a_regular_file_fails_before_work(tmp_path, capsys, no_work):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    ckpt = tmp_path / "model.pt"
    ckpt.write_bytes(b"never read")
    for argv in (["pretrain", "--out", str(blocker / "run")],
                 ["pretrain", "--out", str(blocker)],
                 ["evaluate", "--checkpoint", str(ckpt), "--out", str(blocker / "a" / "eval")],
                 ["report", "--summary", str(ckpt), "--out", str(blocker / "r")],
                 ["summarize", "--grid-json", "{}", "--out", str(blocker / "s" / "runs.csv")]):
        assert main(argv) == 2, argv
        _one_line_error(capsys, str(blocker), "not a folder")


def _in_child_as(uid: int, fn) -> str:
    """Run ``fn`` in a forked child with another user id (root ignores permission bits); returns its text."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        os.close(r)
        try:
            os.setgid(uid)
            os.setuid(uid)
            text = fn()
        except BaseException as e:  # noqa: BLE001 - reported to the parent
            text = f"child raised {type(e).__name__}: {e}"
        os.write(w, text.encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as fh:
        text = fh.read()
    os.waitpid(pid, 0)
    return text


def test_out_in_read_only_folder_fails_before_work(no_work):
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        _read_only_case(Path(d))


def _read_only_case(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)  # the child below may be another user
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    ckpt = tmp_path / "model.pt"
    ckpt.write_bytes(b"never read")
    ckpt.chmod(0o644)

    def run() -> str:
        err = io.StringIO()
        with redirect_stderr(err):
            codes = [main(["pretrain", "--out", str(ro / "run")]),
                     main(["evaluate", "--checkpoint", str(ckpt), "--out", str(ro / "run" / "eval")])]
        return f"{codes}\n{err.getvalue()}"

    # As root chmod stops nothing, so the commands run in a child that is not root.
    text = _in_child_as(65534, run) if os.geteuid() == 0 else run()
    codes, err = text.split("\n", 1)
    assert codes == "[2, 2]", text
    lines = err.strip().splitlines()
    assert len(lines) == 2 and all("cannot write there" in line and str(ro) in line for line in lines), text
    assert not (ro / "run").exists()


def test_check_writable_dir_creates_nothing(tmp_path):
    target = tmp_path / "a" / "b"
    assert check_writable_dir(target) == target
    assert not (tmp_path / "a").exists() and list(tmp_path.iterdir()) == []
    (tmp_path / "link").symlink_to(tmp_path / "nowhere")
    with pytest.raises(OutputError, match="broken symbolic link"):
        check_writable_dir(tmp_path / "link" / "x")


# ---------------------------------------------------------------------------------- stale temp files
def test_killed_writer_leaves_a_temp_that_the_next_write_removes(tmp_path):
    target = tmp_path / "eval" / "vectors.npz"
    code = ("import os, sys\nfrom bayesncl.core.atomic import atomic_path\n"
            "with atomic_path(sys.argv[1]) as tmp:\n"
            "    tmp.write_bytes(b'half')\n"
            "    os.kill(os.getpid(), 9)\n")
    proc = subprocess.run([sys.executable, "-c", code, str(target)], capture_output=True)
    assert proc.returncode == -signal.SIGKILL
    left = [p.name for p in target.parent.iterdir()]
    assert len(left) == 1 and left[0].startswith(".vectors.") and left[0].endswith(".tmp.npz")
    old = time.time() - 60
    os.utime(target.parent / left[0], (old, old))
    # Temps of other targets, and a temp still being written (fresh mtime), are not touched.
    other = target.parent / ".vectors.x.abc123.tmp.npz"  # a temp of vectors.x.npz
    other_ext = target.parent / ".vectors.abc123.tmp.json"  # a temp of vectors.json
    for p in (other, other_ext):
        p.write_bytes(b"")
        os.utime(p, (old, old))
    fresh = target.parent / ".vectors.zz9_fresh.tmp.npz"
    fresh.write_bytes(b"")
    os.utime(fresh, (time.time() + 60, time.time() + 60))

    with atomic_path(target) as tmp:
        tmp.write_bytes(b"full")
    assert target.read_bytes() == b"full"
    assert sorted(p.name for p in target.parent.iterdir()) == sorted(
        [target.name, other.name, other_ext.name, fresh.name])


def test_failed_write_removes_only_its_own_temp(tmp_path):
    target = tmp_path / "metrics.json"
    stale = tmp_path / ".metrics.q1w2e3r4.tmp.json"
    stale.write_text("{")
    os.utime(stale, (time.time() - 60, time.time() - 60))
    with pytest.raises(RuntimeError):
        with atomic_path(target):
            raise RuntimeError("disk full")
    assert sorted(p.name for p in tmp_path.iterdir()) == [stale.name]  # nothing replaced: nothing cleaned
    atomic_write_text(target, "{}\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == [target.name]


# ---------------------------------------------------------------------------------- which errors are caught
def test_project_errors_share_a_base():
    for cls in (ConfigError, DataError, CheckpointError, OutputError, MetricsFileError, MissingInputError):
        assert issubclass(cls, BayesNCLError) and issubclass(cls, ValueError)  # old `except ValueError` still works


def test_a_bug_keeps_its_traceback(tmp_path, monkeypatch, capsys):
    summary = tmp_path / "runs.csv"
    summary.write_text("run_id\n")

    def buggy(*a, **k):
        raise ValueError("a bug, not bad input")

    monkeypatch.setattr(bayesncl.report, "write_report", buggy)
    with pytest.raises(ValueError, match="a bug"):
        main(["report", "--summary", str(summary), "--out", str(tmp_path / "r")])

    def bad_input(*a, **k):
        raise MetricsFileError("metrics file x.json is not valid JSON")

    monkeypatch.setattr(bayesncl.report, "write_report", bad_input)
    assert main(["report", "--summary", str(summary), "--out", str(tmp_path / "r")]) == 2
    _one_line_error(capsys, "x.json")


def test_corrupt_checkpoint_is_one_line(tmp_path, capsys):
    bad = tmp_path / "model.pt"
    bad.write_bytes(b"truncated")
    assert main(["evaluate", "--checkpoint", str(bad), "--out", str(tmp_path / "e")]) == 2
    _one_line_error(capsys, str(bad), "could not be read")


@pytest.mark.parametrize("content", [b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4, "pickle"], ids=["bytes", "pickle"])
def test_junk_checkpoint_is_one_line_without_torchs_advice(content, tmp_path, capsys):
    """Random bytes, or a pickle of a Python object (torch's weights-only load refuses it and advises
    weights_only=False, which is no advice for a file nobody vouches for)."""
    junk = tmp_path / "model.pt"
    if content == "pickle":
        torch.save({"model": {}, "config": {}, "note": Path("x")}, junk)
    else:
        junk.write_bytes(content)
    assert main(["evaluate", "--checkpoint", str(junk), "--out", str(tmp_path / "e")]) == 2
    err = _one_line_error(capsys, str(junk), "expected a file that `bayesncl pretrain` wrote")
    assert "weights_only" not in err and "unsafe" not in err.lower()


@pytest.mark.parametrize("argv", [["pretrain", "--out", "run"], ["evaluate", "--checkpoint", "model.pt", "--out", "e"],
                                  ["summarize", "--out", "runs.csv"]])
def test_binary_config_file_is_one_line(argv, tmp_path, monkeypatch, capsys, no_work):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "model.pt").write_bytes(b"")
    (tmp_path / "config.bin").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe")
    flag = "--grid" if argv[0] == "summarize" else "--config"
    if argv[0] == "evaluate":
        monkeypatch.setattr(bayesncl.evaluation.runner, "evaluate", lambda *a, **k: bayesncl.settings.config.resolve(
            file=k["expect_config"]))  # evaluate reads --config as the run's config
    assert main([*argv, flag, "config.bin"]) == 2
    _one_line_error(capsys, "config.bin", "not a text file", "expected")


# ---------------------------------------------------------------------------------- DataLoader workers
def test_corrupt_jpeg_in_a_worker_is_the_same_one_line_error(tmp_path):
    write_imagenet(tmp_path, n_train=3)
    bad = tmp_path / "train" / WNIDS[1] / f"{WNIDS[1]}_0.JPEG"
    bad.write_bytes(b"not a jpeg")
    ds = load_split(in_cfg(tmp_path), "train")
    messages = {}
    for workers in (0, 2):
        with pytest.raises(DataError) as exc:
            for _ in iter_batches(ds, 2, shuffle=False, seed=0, drop_last=False, device="cpu", num_workers=workers):
                pass
        messages[workers] = str(exc.value)
    assert messages[2] == messages[0]
    assert messages[0].startswith(f"{bad}: cannot decode image") and "\n" not in messages[0]
    # Intact trees still load through workers, batch for batch as without them.
    bad.unlink()
    ref = list(iter_batches(ds := load_split(in_cfg(tmp_path), "train"), 2, shuffle=True, seed=3, drop_last=False,
                            device="cpu"))
    got = list(iter_batches(ds, 2, shuffle=True, seed=3, drop_last=False, device="cpu", num_workers=2))
    assert len(got) == len(ref) == 4
    for (x0, y0, _), (x1, y1, _) in zip(ref, got):
        assert torch.equal(x0, x1) and torch.equal(y0, y1)


# ---------------------------------------------------------------------------------- help
def _help(*argv) -> str:
    out = io.StringIO()
    from contextlib import redirect_stdout

    with redirect_stdout(out), pytest.raises(SystemExit):
        build_parser().parse_args([*argv, "--help"])
    return out.getvalue()


def test_help_describes_every_option_and_hides_internal_ones():
    pretrain = _help("pretrain")
    for name in METHODS:
        assert name in pretrain
    assert "src/bayesncl/settings/config.py" in pretrain and "docs/METHOD.md" in pretrain
    assert "--config-json" not in pretrain and "--out DIR" in pretrain
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "command").choices
    for name, sp in subparsers.items():
        for action in sp._actions:
            if action.dest in ("help", "config_json"):
                continue
            assert action.help, f"bayesncl {name} {'/'.join(action.option_strings)} has no description"


# ---------------------------------------------------------------------------------- evaluate's default sections
def test_evaluate_by_default_computes_what_the_run_has(tmp_path, tiny_sets, capsys):
    from bayesncl.settings.config import resolve

    run = tmp_path / "run"
    bayesncl.training.train.pretrain(resolve(sets=tiny_sets + ["train.epochs=1", "train.max_steps_per_epoch=1"]), run,
                            progress=False)
    assert not (run / "dynamics.pt").exists()
    assert main(["evaluate", "--checkpoint", str(run / "model.pt"), "--out", str(run / "eval"), "--quiet"]) == 0
    written = {p.name for p in (run / "eval").glob("*.json")}
    assert written == {f"{s}.json" for s in ("features", "interpretability", "retrieval", "linear_probe",
                                             "background_probe", "cost")}
    # Asked for explicitly, missing dynamics are still an error.
    capsys.readouterr()
    assert main(["evaluate", "--checkpoint", str(run / "model.pt"), "--out", str(run / "eval"),
                 "--only", "dynamics"]) == 2
    _one_line_error(capsys, "train.dynamics_every")
    # the workflow hands each job its sections' rerun triggers, each recorded by its own section's file (bayesncl.grid.stale
    # reads them); one job may run several sections (a run's evaluation on one machine)
    t_cost = {"eval": {"probe": "fast"}, "plugin_code": {"section x": "version 1"}}
    t_ret = {"eval": {"probe": "fast"}}
    assert main(["evaluate", "--checkpoint", str(run / "model.pt"), "--out", str(run / "eval"), "--only", "cost",
                 "--trigger-json", json.dumps({"cost": t_cost}), "--quiet"]) == 0
    assert json.loads((run / "eval" / "cost.json").read_text())["run"]["trigger"] == t_cost
    assert "trigger" not in json.loads((run / "eval" / "retrieval.json").read_text())["run"]
    assert main(["evaluate", "--checkpoint", str(run / "model.pt"), "--out", str(run / "eval"), "--only", "cost",
                 "retrieval", "--trigger-json", json.dumps({"retrieval": t_ret, "cost": t_cost}), "--quiet"]) == 0
    assert json.loads((run / "eval" / "cost.json").read_text())["run"]["trigger"] == t_cost
    assert json.loads((run / "eval" / "retrieval.json").read_text())["run"]["trigger"] == t_ret
    for bad in ({"cost": t_cost}, {"cost": t_cost, "retrieval": t_ret, "features": t_ret}):
        capsys.readouterr()
        assert main(["evaluate", "--checkpoint", str(run / "model.pt"), "--out", str(run / "eval"), "--only", "cost",
                     "retrieval", "--trigger-json", json.dumps(bad)]) == 2
        _one_line_error(capsys, "--trigger-json: expected {section: trigger} for exactly the sections of --only "
                                "(cost, retrieval)")


def test_summarize_checks_its_inputs_and_output(tmp_path, capsys):
    import yaml

    from bayesncl.settings.config import resolve

    grid = {"results": str(tmp_path / "results"), "seeds": [0], "defaults": {"model": {"proj_dim": 16}},
            "datasets": {"synthetic": {"data": {"dataset": "synthetic"}}},
            "variants": {"NCL": {"method": {"name": "ncl"}}}, "sets": {"table1": {"variants": ["NCL"]}}}
    (tmp_path / "grid.yaml").write_text(yaml.safe_dump(grid))
    run = {"dataset": "synthetic", "method": "ncl", "seed": 0, "weights_sha": "ab"}
    evald = tmp_path / "results" / "runs" / "synthetic" / "ncl" / "seed~0" / "eval"
    evald.mkdir(parents=True)
    bodies = {"features": {"training": {"epochs": [1], "loss": [5.0]}},
              "interpretability": {"interpretability": {"sc": 20.0}}, "retrieval": {"retrieval": {"K": 8}},
              "linear_probe": {"linear_probe": {"top1": 50.0, "protocol": "fast"}}}
    trained = resolve(sets=["method.name=ncl", "model.proj_dim=16"])  # what features.json records
    bodies["features"]["config"] = trained
    for name, body in bodies.items():
        (evald / f"{name}.json").write_text(json.dumps({"run": run, **body}))
    twin = tmp_path / "results" / "runs" / "synthetic" / "ncl" / "epochs~0" / "seed~0" / "eval"  # the untrained twin
    twin.mkdir(parents=True)  # (bayesncl.grid.expand.plan_init_runs) table1's runs have
    bodies["features"]["config"] = {**trained, "train": {**trained["train"], "epochs": 0}}
    for name, body in bodies.items():
        (twin / f"{name}.json").write_text(json.dumps({"run": {**run, "weights_sha": "cd"}, **body}))
    out = tmp_path / "summary" / "runs.csv"
    assert main(["summarize", "--grid", str(tmp_path / "grid.yaml"), "--out", str(out)]) == 0
    assert "50.0" in out.read_text()
    (evald / "retrieval.json").unlink()
    for argv, needle in ((["--grid-json", json.dumps(grid), "--out", str(out.parent)], "is a folder"),
                         (["--grid", str(tmp_path / "none.yaml"), "--out", str(out)], "none.yaml"),
                         (["--grid-json", "{", "--out", str(out)], "--grid-json"),
                         (["--grid-json", json.dumps({"results": "r", "seeds": [0]}), "--out", str(out)], "defaults"),
                         (["--grid-json", json.dumps(grid), "--out", str(out)], "retrieval.json")):
        capsys.readouterr()
        assert main(["summarize", *argv]) == 2, argv
        _one_line_error(capsys, needle)


def test_make_synthetic_generates_the_synthetic_set_only(tmp_path, capsys):
    sets = ["--set", "data.synthetic.train_size=40", "--set", "data.synthetic.test_size=20",
            "--set", "data.synthetic.image_size=8", "--set", f"data.cache_dir={tmp_path}"]
    assert main(["make-synthetic", *sets]) == 0
    out = capsys.readouterr().out
    assert "train: 40 images" in out and "test: 20 images" in out
    assert len(list(tmp_path.glob("synthetic-*.pt"))) == 1
    assert main(["make-synthetic", *sets, "--set", "train.epochs=3"]) == 2
    _one_line_error(capsys, "train.epochs", "data.synthetic.*")
    (tmp_path / "c.yaml").write_text("data: {dataset: cifar10, root: /x}\n")
    assert main(["make-synthetic", "--config", str(tmp_path / "c.yaml")]) == 2
    _one_line_error(capsys, "data.dataset", "cifar10")
