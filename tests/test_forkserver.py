"""The fork server (bayesncl/cli/forkserver/): a command run through it is the command run as a plain process (same
files, exit codes, messages, SIGTERM), a killed client stops its command, and each job records its start-up."""

import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from bayesncl.cli import forkserver
from bayesncl.core import startup
from bayesncl.cli.forkserver import protocol, server
from helpers.events import read as read_events
from helpers.processes import PATIENCE, current, wait_until

ROOT = Path(__file__).resolve().parents[1]
START = time.monotonic()  # this module's import: after this process started
pytestmark = pytest.mark.skipif(not hasattr(os, "fork") or not Path("/proc/self/stat").exists(),
                                reason="fork and /proc")


@pytest.fixture(scope="module")
def server_dir():
    """A folder of its own for this module's server (a short path: a socket name has at most 107 bytes); its server
    ended and the folder removed at the end."""
    folder = tempfile.mkdtemp(prefix="bfs-", dir="/tmp")
    yield folder
    forkserver.end_servers(folder)
    shutil.rmtree(folder, ignore_errors=True)  # the lock and log files the client left


def _env(server_dir, routed=True, **extra):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), BAYESNCL_FORKSERVER_DIR=server_dir, OMP_NUM_THREADS="1",
               **extra)
    env.pop(forkserver.ENV, None)
    if routed:
        env[forkserver.ENV] = "1"
    return env


def _bayesncl(args, env, **kw):
    return current().run([sys.executable, "-m", "bayesncl", *args], env=env, capture_output=True, text=True, **kw)


def _sets(items):
    return sum((["--set", s] for s in items), [])


def _without_timing(obj):
    """A record without what differs between two runs of the same work: wall seconds and timestamps."""
    if isinstance(obj, dict):
        return {k: _without_timing(v) for k, v in obj.items() if "seconds" not in k and k not in ("date", "when", "img_per_s")}
    if isinstance(obj, list):
        return [_without_timing(v) for v in obj]
    return obj


@pytest.mark.long
def test_a_run_through_the_server_is_the_plain_run(tmp_path, server_dir, tiny_sets):
    """Pretrain and evaluate twice, through the server and as plain processes: the same weights, log, features,
    section results and TensorBoard curves (a forked child's event files whole); each job's record says how it
    ran."""
    outs = {}
    for mode, routed in (("served", True), ("plain", False)):
        run = tmp_path / mode
        timing = tmp_path / f"{mode}.pretrain.start.json"
        t0 = time.monotonic()
        r = _bayesncl(["pretrain", "--out", str(run), "--quiet", *_sets(tiny_sets)],
                      _env(server_dir, routed, BAYESNCL_TIMING=str(timing)))
        wall = time.monotonic() - t0
        assert r.returncode == 0, r.stderr
        assert json.loads(timing.read_text())["startup_seconds"] < wall  # measured inside the job's own time
        assert f"pretrained model: {run / 'model.pt'}" in r.stdout
        eval_timing = tmp_path / f"{mode}.eval.start.json"
        r = _bayesncl(["evaluate", "--checkpoint", str(run / "model.pt"), "--out", str(run / "eval"), "--quiet",
                       "--only", "features", "interpretability", "linear_probe"],
                      _env(server_dir, routed, BAYESNCL_TIMING=str(eval_timing)))
        assert r.returncode == 0, r.stderr
        for path in (timing, eval_timing):
            record = json.loads(path.read_text())
            assert record["forkserver"] is routed and 0 < record["startup_seconds"] < 300
            assert ("max_rss_mb" in record) is routed  # a forked child adds its own usage at its end
        outs[mode] = run

    import torch

    from bayesncl.runs.files import weights_digest

    a, b = (torch.load(outs[m] / "model.pt", map_location="cpu", weights_only=False) for m in ("served", "plain"))
    assert weights_digest(a["model"]) == weights_digest(b["model"])
    assert _without_timing(a["log"]) == _without_timing(b["log"]) and len(a["log"]) == 2
    with np.load(outs["served"] / "eval" / "features.npz") as fa, np.load(outs["plain"] / "eval" / "features.npz") as fb:
        assert sorted(fa.files) == sorted(fb.files)
        for key in fa.files:
            np.testing.assert_array_equal(fa[key], fb[key], err_msg=key)
    for section in ("interpretability", "linear_probe"):
        ja, jb = (json.loads((outs[m] / "eval" / f"{section}.json").read_text()) for m in ("served", "plain"))
        ja["run"].pop("checkpoint"), jb["run"].pop("checkpoint")
        assert _without_timing(ja) == _without_timing(jb), section
    ea, eb = ({tag: points for tag, points in read_events(outs[m]).items() if _without_timing({tag.rsplit("/", 1)[1]: 0})}
              for m in ("served", "plain"))
    assert ea == eb and len(ea["train/loss"]) == 2 and "eval/linear_probe/top1" in ea


def test_exit_codes_and_messages_pass_through(tmp_path, server_dir):
    for args in (["jobs", "--benchmarks", str(tmp_path / "none"), "--out", str(tmp_path / "j.csv")],  # bad input
                 ["no-such-command"],  # argparse's usage error
                 ["--help"]):
        served, plain = _bayesncl(args, _env(server_dir)), _bayesncl(args, _env(server_dir, routed=False))
        assert (served.returncode, served.stdout, served.stderr) == (plain.returncode, plain.stdout, plain.stderr)
    assert served.returncode == 0 and "pretrain" in served.stdout
    assert not (tmp_path / "j.csv").exists()


@pytest.mark.long
def test_a_routed_command_s_client_imports_neither_the_cli_nor_torch(server_dir):
    """Each local job's client is a process of its own: it hands the command over having imported only the client
    (the CLI's parser and what it imports, a tenth of a second a job, run only where no server can run it)."""
    probe = ("import sys\nfrom bayesncl.cli import entry\nsys.argv = ['bayesncl', '--help']\n"
             "try:\n    rc = entry()\nexcept SystemExit as e:\n    rc = e.code\n"
             "print(rc, *(m in sys.modules for m in ('bayesncl.cli.main', 'yaml', 'torch')), file=sys.stderr)")
    for routed, loaded in ((True, "False False False"), (False, "True True False")):
        r = current().run([sys.executable, "-c", probe], env=_env(server_dir, routed), capture_output=True, text=True)
        assert "pretrain" in r.stdout and r.stderr.strip().splitlines()[-1] == f"0 {loaded}", r.stderr


def _start_long_run(tmp_path, server_dir, tiny_sets):
    run = tmp_path / "run"
    argv = [sys.executable, "-m", "bayesncl", "pretrain", "--out", str(run), "--quiet",
            *_sets(tiny_sets + ["train.epochs=400"])]
    proc = current().popen(argv, env=_env(server_dir), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           signals=True)
    wait_until(lambda: (run / "checkpoint.pt").exists(), "epoch 1 checkpointed", proc)  # training has started
    return proc, run


def _forked_children(server_dir) -> set[int]:
    """The pids of processes forked by this module's server (their parent runs `bayesncl.cli.forkserver <socket>`)."""
    out = set()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().split(b"\0")
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            parent = (Path("/proc") / str(ppid) / "cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        if cmd == parent and any(server_dir.encode() in part for part in cmd):
            out.add(int(d.name))
    return out


def test_sigterm_to_the_client_checkpoints_and_exits_75(tmp_path, server_dir, tiny_sets):
    proc, run = _start_long_run(tmp_path, server_dir, tiny_sets)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=PATIENCE)
    assert proc.returncode == 75, err
    assert "SIGTERM: checkpoint saved in" in err and "Traceback" not in err
    assert not (run / "model.pt").exists() and (run / "checkpoint.pt").exists()


def test_a_killed_client_stops_its_command(tmp_path, server_dir, tiny_sets):
    """SIGKILL cannot be forwarded: the child sees its client's connection close and stops as on SIGTERM."""
    before = _forked_children(server_dir)
    proc, run = _start_long_run(tmp_path, server_dir, tiny_sets)
    child = _forked_children(server_dir) - before
    assert len(child) == 1, child
    proc.kill()
    proc.wait(timeout=PATIENCE)
    wait_until(lambda: not Path(f"/proc/{next(iter(child))}").exists(), "the command ended with its client")
    assert not (run / "model.pt").exists() and (run / "checkpoint.pt").exists()


def test_the_server_follows_the_source_and_the_environment(monkeypatch, tmp_path):
    """A changed source file, import-time variable or interpreter path gets another server; others do not."""
    monkeypatch.setenv("BAYESNCL_FORKSERVER_DIR", str(tmp_path))
    base = forkserver.socket_path()
    assert Path(base).parent == tmp_path and len(base.encode()) < 108
    monkeypatch.setenv("SOME_UNRELATED_VARIABLE", "1")
    assert forkserver.socket_path() == base
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    assert forkserver.socket_path() != base
    monkeypatch.undo()
    monkeypatch.setenv("BAYESNCL_FORKSERVER_DIR", str(tmp_path))
    assert forkserver.socket_path() == base
    source = Path(forkserver.__file__)
    st = source.stat()
    try:
        os.utime(source, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
        assert forkserver.socket_path() != base
    finally:
        os.utime(source, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert forkserver.socket_path() == base


# Variables that torch, its math libraries, matplotlib and Python read when imported or started: a server imported
# under other values would run a command differently from a plain process.
IMPORT_TIME_VARIABLES = ("TORCH_HOME", "PYTORCH_CUDA_ALLOC_CONF", "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS",
                         "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "KMP_AFFINITY", "GOMP_CPU_AFFINITY",
                         "NUMEXPR_MAX_THREADS", "PYTHONHASHSEED", "MPLBACKEND", "LD_PRELOAD", "LC_ALL", "LANG", "TZ")


@pytest.mark.parametrize("name", IMPORT_TIME_VARIABLES)
def test_each_import_time_variable_gets_another_server(monkeypatch, tmp_path, name):
    monkeypatch.setenv("BAYESNCL_FORKSERVER_DIR", str(tmp_path))
    monkeypatch.delenv(name, raising=False)
    base = forkserver.socket_path()
    monkeypatch.setenv(name, "a value no test uses")
    assert forkserver.socket_path() != base


def test_every_module_the_server_preloads_exists():
    """A renamed module would only be imported by each child (slower, and said nowhere but the server's log)."""
    import importlib.util

    missing = [name for name in server.PRELOAD if importlib.util.find_spec(name) is None]
    assert not missing, f"server.PRELOAD names modules that do not exist: {missing}"


def test_a_frame_longer_than_a_message_of_ours_is_refused_by_its_size():
    ours, theirs = socket.socketpair()
    with ours, theirs:
        theirs.sendall(struct.pack("!I", protocol.MAX_MESSAGE + 1))
        with pytest.raises(ValueError) as e:
            protocol._recv(ours)
    assert str(e.value) == f"a frame of {protocol.MAX_MESSAGE + 1} bytes"


def test_an_idle_server_exits_and_removes_its_socket(tmp_path):
    folder = tempfile.mkdtemp(prefix="bfs-", dir="/tmp")
    env = _env(folder, BAYESNCL_FORKSERVER_IDLE="1")
    r = _bayesncl(["jobs", "--benchmarks", str(tmp_path / "none"), "--out", str(tmp_path / "j.csv")], env)
    assert r.returncode == 2
    wait_until(lambda: not list(Path(folder).glob("*.sock")), "the idle server removed its socket")
    shutil.rmtree(folder, ignore_errors=True)


def test_mark_ready_writes_the_start_up_once(monkeypatch, tmp_path):
    path = tmp_path / "sub" / "job.start.json"
    monkeypatch.setenv(startup.TIMING_ENV, str(path))
    monkeypatch.setattr(startup, "_ready_marked", False)
    monkeypatch.setattr(startup, "_process_start", startup.boot_clock() - 2.5)
    seconds = startup.mark_ready()
    assert 2.5 <= seconds < 60
    assert json.loads(path.read_text()) == {"startup_seconds": round(seconds, 3), "forkserver": False}
    assert startup.mark_ready() is None  # once per process
    assert not list(path.parent.glob("*.tmp"))
    assert 0 < startup.process_started() <= startup.boot_clock()
    # this process started before the test session: its own start-up is at least the time since
    monkeypatch.setattr(startup, "_ready_marked", False)
    monkeypatch.setattr(startup, "_process_start", None)
    assert startup.mark_ready() >= time.monotonic() - START
    startup.record_usage()  # a forked child's own usage is merged into the record
    record = json.loads(path.read_text())
    assert record["max_rss_mb"] > 10 and record["cpu_seconds"] > 0 and "startup_seconds" in record


def test_only_this_user_may_use_the_socket(server_dir, tmp_path):
    """The socket is the user's alone (mode 0600) and the server checks each peer's uid."""
    _bayesncl(["jobs", "--benchmarks", str(tmp_path / "none"), "--out", str(tmp_path / "j.csv")], _env(server_dir))
    sockets = list(Path(server_dir).glob("*.sock"))
    assert sockets and all(p.stat().st_mode & 0o777 == 0o600 for p in sockets)
    import socket as socketlib

    a, b = socketlib.socketpair(socketlib.AF_UNIX)
    with a, b:
        assert server._same_user(a)


def test_an_unwritable_record_is_one_line_and_never_the_jobs_failure(monkeypatch, tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(startup.TIMING_ENV, str(blocker / "job.start.json"))  # under a file: cannot be made
    monkeypatch.setattr(startup, "_ready_marked", False)
    monkeypatch.setattr(startup, "_process_start", startup.boot_clock() - 1.0)
    assert startup.mark_ready() >= 1.0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"bayesncl: could not write {startup.TIMING_ENV} {blocker}")
