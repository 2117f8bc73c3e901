"""A job routed through the fork server behaves as the same command run as a plain process, in each case where
it once did not (docs/DESIGN.md, "Local jobs"): a listener of another user or one that answers garbage or
nothing, a socket folder that is not the user's alone, too long, or taken by something else, a server that dies
while starting, signals the job ignores, the job's umask and the rest of its process context, an editor's lock
file among the sources, and the servers a workflow run started ended with it. Where no server can run a
command, it runs in the client's own process after one line that says why: never a traceback, never a wait.
Forks and processes are the test's own (conftest's `procs`); a forked client's own wait for a server to start is
made longer than the test's patience, so a client that waited for one instead of falling back fails the test."""

import json
import os
import re
import resource
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from bayesncl.cli import forkserver
from bayesncl.cli.main import main
from bayesncl.cli.forkserver import client, protocol, server
from bayesncl.core.errors import TERMINATED
from helpers.processes import PATIENCE, current, wait_until

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not hasattr(os, "fork") or not Path("/proc/self/stat").exists(),
                                reason="fork and /proc")
FALLBACK = "bayesncl: fork server unavailable: "
NOBODY = 65534


_MADE: list[str] = []  # the short folders this module's tests made, removed after each test


def _short_dir(prefix="bfc-") -> str:
    _MADE.append(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))  # a socket path has at most 107 bytes
    return _MADE[-1]


@pytest.fixture(autouse=True)
def _remove_short_dirs(procs):
    yield
    procs.end()  # the servers first: nothing writes in a folder while it goes
    while _MADE:
        made = _MADE.pop()
        if os.path.islink(made):
            os.unlink(made)
        else:
            shutil.rmtree(made, ignore_errors=True)


def _env(folder, routed=True, **extra):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1", **extra)
    env.pop(forkserver.ENV, None)
    env[forkserver.DIR_ENV] = folder
    if routed:
        env[forkserver.ENV] = "1"
    return env


def _bayesncl(args, env, **kw):
    return current().run([sys.executable, "-m", "bayesncl", *args], env=env, capture_output=True, text=True, **kw)


BAD = ["jobs", "--benchmarks", "/nonexistent/bfc-benchmarks", "--out", "/nonexistent/bfc/j.csv"]


@pytest.fixture(scope="module")
def plain_bad():
    """The plain process's stderr for BAD."""
    r = _bayesncl(BAD, _env(_short_dir(), False))
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1
    return r.stderr


def _expected_socket(env) -> str:
    """Where a client started with `env` looks for its server."""
    code = "from bayesncl.cli import forkserver; print(forkserver.socket_path())"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True).stdout.strip()


def _as_plain_with_one_line(served, plain_stderr: str, why: str):
    """`served` fell back: one line naming why, then exactly the plain process's result (BAD: exit 2)."""
    first, _, rest = served.stderr.partition("\n")
    assert first.startswith(FALLBACK) and why in first and first.endswith("; running the command in this process")
    assert (served.returncode, served.stdout, rest) == (2, "", plain_stderr)
    assert "Traceback" not in served.stderr


# ------------------------------------------------------------------------------ whom the client talks to
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a listener as another user")
def test_a_listener_of_another_user_is_given_nothing(plain_bad):
    """Another user's listener at the socket path receives no argv, folder, environment or descriptors, and its
    fake `exit 0` is never taken: the job runs as a plain process."""
    folder = _short_dir()
    env = _env(folder)
    path = _expected_socket(env)
    shared = _short_dir("bfo-")
    os.chmod(shared, 0o777)
    theirs, got = os.path.join(shared, "l.sock"), os.path.join(shared, "got")
    ready_r, ready_w = os.pipe()
    pid = current().fork()
    if pid == 0:
        try:
            os.setgid(NOBODY), os.setuid(NOBODY)
            lst = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            lst.bind(theirs)
            lst.listen(1)
            os.write(ready_w, b"x")
            conn, _ = lst.accept()
            conn.settimeout(PATIENCE)
            data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
            with open(got, "w") as fh:
                json.dump({"bytes": len(data), "fds": len(fds)}, fh)
            protocol._send(conn, {"pid": 1})
            protocol._send(conn, {"exit": 0})
        finally:
            os._exit(0)
    try:
        assert os.read(ready_r, 1) == b"x"
        os.rename(theirs, path)  # as if they had bound it there
        served = _bayesncl(BAD, env)
        _as_plain_with_one_line(served, plain_bad, f"{path} is served by uid {NOBODY}, not by this user (uid "
                                                   f"{os.getuid()}); set {forkserver.DIR_ENV} to a folder of yours")
        assert served.returncode == 2
        os.waitpid(pid, 0)
        assert json.loads(Path(got).read_text()) == {"bytes": 0, "fds": 0}  # connected, then left at once
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


def test_the_client_checks_the_peers_uid(monkeypatch):
    a, b = socket.socketpair(socket.AF_UNIX)
    with a, b:
        assert protocol._peer_uid(a) == os.getuid() and server._same_user(a)
        monkeypatch.setattr(server, "_peer_uid", lambda conn: os.getuid() + 1)
        assert not server._same_user(a)


@pytest.mark.parametrize("case", ["group-writable", "a link", "another owner"])
def test_the_socket_folder_must_be_the_users_alone(monkeypatch, tmp_path, plain_bad, case):
    if case == "another owner" and os.geteuid() != 0:
        pytest.skip("needs root to give a folder away")
    real = _short_dir()
    folder = real
    if case == "group-writable":
        os.chmod(real, 0o775)
    elif case == "a link":
        folder = real + "-link"
        os.symlink(real, folder)
        _MADE.append(folder)
    else:
        os.chown(real, NOBODY, NOBODY)
    monkeypatch.setenv(forkserver.DIR_ENV, folder)
    code = _wait(_fork_client(str(tmp_path / "err"), BAD))
    first, _, rest = (tmp_path / "err").read_text().partition("\n")
    why = "is not a folder (a link?)" if case == "a link" else "is not this user's alone"
    assert first.startswith(f"{FALLBACK}the socket folder {folder} {why}") and (code, rest) == (2, plain_bad)
    assert not list(Path(real).iterdir())  # nothing was made in it


def test_the_default_folder_is_made_private(monkeypatch):
    tmp_path = Path(_short_dir())
    monkeypatch.delenv(forkserver.DIR_ENV, raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert forkserver.folder() == str(tmp_path / "bayesncl")
    protocol._private(forkserver.socket_path())
    assert (tmp_path / "bayesncl").stat().st_mode & 0o777 == 0o700
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    assert forkserver.folder() == str(tmp_path / f"bayesncl-{os.getuid()}")


# ------------------------------------------------------------------------------ servers that cannot serve
class Listener:
    """A listener where the client's socket_path() points, which answers a request as the test says."""

    def __init__(self, monkeypatch, folder=None):
        self.folder = folder or _short_dir("bfl-")
        self.path = os.path.join(self.folder, "s.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(1)
        self.listener.settimeout(PATIENCE)
        self.err = os.path.join(self.folder, "err")
        monkeypatch.setattr(client, "socket_path", lambda: self.path)

    def client(self, argv, before=None) -> int:
        return _fork_client(self.err, argv, before)

    def accept(self) -> tuple[socket.socket, dict]:
        conn, _ = self.listener.accept()
        head, fds, _, _ = socket.recv_fds(conn, 4, 3)
        for fd in fds:
            os.close(fd)
        return conn, protocol._recv(conn, head)


def _fork_client(err: str, argv: list[str], before=None) -> int:
    """Fork a client running `argv` (after `before()`); its pid. Its stderr goes to the file `err`. It would wait
    for a server it started longer than the test waits for it (so waiting at all fails the test)."""
    sys.stdout.flush(), sys.stderr.flush()
    pid = current().fork()
    if pid == 0:
        code = 99
        try:
            client.START_TIMEOUT = 10 * PATIENCE
            sys.stderr = open(err, "w")
            if before:
                before()
            code = client.run_command(argv, main)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        finally:
            sys.stderr.flush()
            os._exit(code)
    return pid


# Seconds a test waits for a client to give up a server that does not answer, beyond the hello timeout it gives it:
# the fallback's start on a busy machine, and still a test that fails in a minute, not in PATIENCE, where the client
# waits for an answer that never comes.
GIVEN_UP = min(60.0, PATIENCE)


def _wait(pid, limit=PATIENCE) -> int:
    """The forked client's exit code, once it ends (killed at the test's end if it never does)."""
    got = {}

    def ended():
        done, got["status"] = os.waitpid(pid, os.WNOHANG)
        return done

    wait_until(ended, "the client ended", limit=limit)
    return os.waitstatus_to_exitcode(got["status"])


@pytest.mark.parametrize("answer,why", [
    (b"\xff\xff\xff\xffjunk", "answered no request of ours (ValueError)"),  # a frame longer than any message
    (b"\x00\x00\x00\x08not json", "answered no request of ours (JSONDecodeError)"),
    (protocol._frame({"hello": 1}), "answered no process id"),
    (b"\x00\x00\x00\x02[]", "answered no request of ours (ValueError)"),
    (protocol._frame({"pid": "12"}), "answered no process id"),
    (protocol._frame({"pid": 0}), "answered no process id"),  # a signal passed on to 0: the client's own group
    (protocol._frame({"pid": -1}), "answered no process id"),  # to -1: every process it may signal
    (b"", "closed the connection before starting the command"),
    (None, "did not answer within 1 s"),
])
def test_a_listener_that_answers_garbage_or_nothing(monkeypatch, plain_bad, answer, why):
    monkeypatch.setattr(client, "HELLO_TIMEOUT", 1.0)
    server = Listener(monkeypatch)
    pid = server.client(BAD)
    conn, request = server.accept()
    assert request["argv"] == BAD
    if answer is not None:
        conn.sendall(answer)
        conn.close()
    code = _wait(pid, limit=GIVEN_UP)
    conn.close()
    err = Path(server.err).read_text()
    first, _, rest = err.partition("\n")
    assert first == f"{FALLBACK}the server at {server.path} {why}; running the command in this process"
    assert code == 2 and rest == plain_bad


def test_a_long_socket_folder_falls_back_at_once(monkeypatch, tmp_path):
    folder = os.path.join(_short_dir(), "f" * 80)
    monkeypatch.setenv(forkserver.DIR_ENV, folder)
    pid = _fork_client(str(tmp_path / "err"), BAD)
    code = _wait(pid)
    err = (tmp_path / "err").read_text()
    assert code == 2 and err.startswith(f"{FALLBACK}the socket path {folder}/")
    assert "is too long for a Unix socket" in err.splitlines()[0]


def test_something_else_at_the_socket_path_falls_back_at_once(monkeypatch, tmp_path):
    monkeypatch.setenv(forkserver.DIR_ENV, _short_dir())
    path = forkserver.socket_path()
    os.mkdir(path)
    pid = _fork_client(str(tmp_path / "err"), BAD)
    assert _wait(pid) == 2
    assert (tmp_path / "err").read_text().startswith(f"{FALLBACK}{path} is not a socket; remove it;")


def test_a_server_that_dies_while_starting_falls_back_at_once(monkeypatch, tmp_path):
    monkeypatch.setenv(forkserver.DIR_ENV, _short_dir())
    pid = _fork_client(str(tmp_path / "err"), BAD, before=lambda: setattr(sys, "executable", "/bin/false"))
    assert _wait(pid) == 2
    first = (tmp_path / "err").read_text().splitlines()[0]  # its log's last line, or that it wrote none
    assert re.fullmatch(rf"{re.escape(FALLBACK)}the fork server exited with code 1 before it listened \(no output; "
                        rf"/tmp/bfc-\S+\.sock\.log\); running the command in this process", first), first


# ------------------------------------------------------------------------------ signals
def test_signals_the_client_ignores_stay_ignored(monkeypatch, tmp_path):
    """Started under nohup and with `&` from a script (SIGHUP, SIGINT ignored): the client passes those on to
    nobody and asks for them ignored in the command; what it does not ignore it passes on."""
    server = Listener(monkeypatch)

    def ignore():
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    pid = server.client(BAD, before=ignore)
    conn, request = server.accept()
    assert {int(signal.SIGHUP), int(signal.SIGINT)} <= set(request["ignored"])
    assert int(signal.SIGTERM) not in request["ignored"]
    protocol._send(conn, {"pid": 2 ** 22 + 1})  # no such process: forwarding finds nobody
    assert _mask(pid, "SigCgt") & _bit(signal.SIGTERM)  # set before it connected
    both = _bit(signal.SIGHUP) | _bit(signal.SIGINT)
    assert _mask(pid, "SigIgn") & both == both
    assert not _mask(pid, "SigCgt") & (_bit(signal.SIGHUP) | _bit(signal.SIGINT))
    # nothing happens, as in a plain process: an ignored signal is dropped when sent (else the exit below is not 4)
    os.kill(pid, signal.SIGHUP), os.kill(pid, signal.SIGINT)
    protocol._send(conn, {"exit": 4})
    assert _wait(pid) == 4
    conn.close()


def _bit(sig) -> int:
    return 1 << (int(sig) - 1)


def _mask(pid, field) -> int:
    with open(f"/proc/{pid}/status") as fh:
        return int(next(line for line in fh if line.startswith(field + ":")).split()[1], 16)


def test_the_command_gets_the_clients_dispositions_and_mask():
    """In the server's child: ignored as the client ignored, SIGINT Python's KeyboardInterrupt, the rest default
    (the server's own SIGTERM handler gone), the client's blocked mask."""
    r, w = os.pipe()
    pid = current().fork()
    if pid == 0:
        try:
            signal.signal(signal.SIGTERM, lambda *_: None)  # as the server has
            signal.signal(signal.SIGHUP, signal.SIG_IGN)
            server._signals_as([int(signal.SIGQUIT)], [int(signal.SIGUSR2)])
            out = {name: str(signal.getsignal(getattr(signal, name)))
                   for name in ("SIGTERM", "SIGHUP", "SIGQUIT", "SIGINT", "SIGPIPE")}
            out["blocked"] = sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, []))
            os.write(w, json.dumps(out).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as fh:
        got = json.loads(fh.read())
    os.waitpid(pid, 0)
    assert got == {"SIGTERM": str(signal.SIG_DFL), "SIGHUP": str(signal.SIG_DFL), "SIGQUIT": str(signal.SIG_IGN),
                   "SIGINT": str(signal.default_int_handler), "SIGPIPE": str(signal.SIG_IGN),
                   "blocked": [int(signal.SIGUSR2)]}


def test_a_run_under_nohup_survives_a_hang_up_and_ctrl_c(tmp_path, tiny_sets, procs):
    """End to end: a routed training run started with SIGHUP and SIGINT ignored keeps training through both (two
    more epochs logged after them), as a plain process does, and still stops on SIGTERM (checkpoint, exit 75)."""
    folder, run = _short_dir(), tmp_path / "run"
    argv = [sys.executable, "-m", "bayesncl", "pretrain", "--out", str(run), "--quiet",
            *sum((["--set", s] for s in tiny_sets + ["train.epochs=400"]), [])]

    def nohup():
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    proc = procs.popen(argv, env=_env(folder), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       preexec_fn=nohup)

    def epochs() -> int:
        return len((run / "log.jsonl").read_text().splitlines()) if (run / "log.jsonl").exists() else 0

    try:
        wait_until(lambda: (run / "checkpoint.pt").exists(), "a checkpoint", proc)
        proc.send_signal(signal.SIGHUP)
        proc.send_signal(signal.SIGINT)
        logged = epochs()
        wait_until(lambda: epochs() >= logged + 2, "two more epochs after SIGHUP and SIGINT", proc)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=PATIENCE)
        assert proc.returncode == 75 and "SIGTERM: checkpoint saved in" in err and "Traceback" not in err
    finally:
        if proc.poll() is None:
            proc.kill()
        forkserver.end_servers(folder)


# ------------------------------------------------------------------------------ the job's process context
@pytest.mark.long
def test_the_job_writes_with_its_own_umask(tmp_path):
    """Files a routed job writes have the modes its own umask gives, whichever umask started a server before."""
    from helpers.report import write_benchmark

    bench = tmp_path / "benchmarks"
    write_benchmark(bench, "cost/synthetic/ncl/seed~0.tsv", 0.3, "NA", 0, "cost")
    folder = _short_dir()
    try:
        for mask in (0o022, 0o077, 0o002):
            out = tmp_path / f"u{mask:o}" / "jobs.csv"
            timing = tmp_path / f"u{mask:o}.start.json"
            r = _bayesncl(["jobs", "--benchmarks", str(bench), "--out", str(out)],
                          _env(folder, BAYESNCL_FORKSERVER_IDLE="600", BAYESNCL_TIMING=str(timing)),
                          preexec_fn=lambda m=mask: os.umask(m))
            assert r.returncode == 0 and json.loads(timing.read_text())["forkserver"] is True, r.stderr
            assert out.stat().st_mode & 0o777 == 0o666 & ~mask, f"umask {mask:o}"
        assert len(list(Path(folder).glob("*.sock"))) == 3  # a server per process context, all still up
    finally:
        forkserver.end_servers(folder)


def _socket_after(change) -> str:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            change()
            os.write(w, forkserver.socket_path().encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as fh:
        path = fh.read()
    os.waitpid(pid, 0)
    return path


def test_the_server_is_shared_only_within_one_process_context(monkeypatch):
    """umask, nice, CPU affinity and limits each give a server of their own; an unrelated variable does not."""
    monkeypatch.setenv(forkserver.DIR_ENV, "/tmp/x")
    base = _socket_after(lambda: None)
    assert base == _socket_after(lambda: os.environ.update(SOME_UNRELATED_VARIABLE="1"))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    nice = os.getpriority(os.PRIO_PROCESS, 0)  # at 19, only root may go lower
    changes = {"umask": lambda: os.umask(0o077 if os.umask(0o022) != 0o077 else 0o022),
               "nice": lambda: os.setpriority(os.PRIO_PROCESS, 0, nice + 1 if nice < 19 else nice - 1),
               "limits": lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft // 2, 64), hard)),
               "locale": lambda: os.environ.update(LC_ALL="C.UTF-8" if os.environ.get("LC_ALL") != "C.UTF-8" else "C")}
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) > 1:
        changes["affinity"] = lambda: os.sched_setaffinity(0, {cpus[0]})
    if nice == 19 and os.geteuid() != 0:
        del changes["nice"]
    for name, change in changes.items():
        assert _socket_after(change) != base, name


# ------------------------------------------------------------------------------ the sources
def test_an_editors_lock_file_among_the_sources_is_no_module(monkeypatch):
    """An editor's `.#train.py` in the package, dangling (emacs) or not: the same server, no traceback. The sources
    are every module of the package, whichever layer it is in."""
    import bayesncl

    assert {name for name, _ in protocol._sources()} == {str(p) for p in Path(bayesncl.__file__).parent.rglob("*.py")}
    monkeypatch.setenv(forkserver.DIR_ENV, "/tmp/x")
    base = forkserver.socket_path()
    lock = Path(forkserver.__file__).parent / ".#train.py"
    for target in ("root@host.1234:1700000000", "train.py"):
        os.symlink(target, lock)
        try:
            assert forkserver.socket_path() == base, target
            assert all(".#" not in name for name, _ in protocol._sources())
        finally:
            lock.unlink()


# ------------------------------------------------------------------------------ ending servers
def _serve(folder) -> subprocess.Popen:
    path = os.path.join(folder, "a.sock")
    proc = current().popen([sys.executable, "-m", "bayesncl.cli.forkserver", path],
                           env=_env(folder, False, BAYESNCL_FORKSERVER_IDLE="600"),
                           cwd="/", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_until(lambda: os.path.exists(path + ".pid"), "the server listens", proc)
    return proc


def test_end_servers_ends_its_folders_servers_only():
    """A workflow run ends the servers of its own folder (onsuccess/onerror), never another folder's."""
    mine, other = _short_dir(), _short_dir()
    a, b = _serve(mine), _serve(other)
    try:
        assert forkserver.end_servers(mine) == [a.pid]
        assert a.wait(timeout=PATIENCE) == 0 and not os.path.exists(mine)  # a clean exit: its socket removed first
        assert b.poll() is None and os.path.exists(os.path.join(other, "a.sock"))
    finally:
        forkserver.end_servers(other)
        for p in (a, b):
            if p.poll() is None:
                p.kill()
    assert b.wait(timeout=PATIENCE) == 0 and not os.path.exists(other)


def test_a_workflow_run_has_its_own_folder(tmp_path):
    """Each working folder gets its own socket folder, short enough for a socket in it."""
    a, b = forkserver.run_folder(str(tmp_path / "a")), forkserver.run_folder(str(tmp_path / "b"))
    assert a != b and a == forkserver.run_folder(str(tmp_path / "a"))
    assert len(os.fsencode(os.path.join(a, "0" * 16 + ".sock"))) + protocol.TMP_SUFFIX_MAX <= protocol.SUN_PATH_MAX


# ------------------------------------------------------------------------------ as a plain process in every case
def _good_jobs(root: Path) -> list[str]:
    """A `jobs` command that succeeds and writes its table to stdout."""
    from helpers.report import write_benchmark

    write_benchmark(root / "b", "cost/synthetic/ncl/seed~0.tsv", 0.3, "NA", 0, "cost")
    return ["jobs", "--benchmarks", str(root / "b"), "--out", str(root / "j.csv")]


def test_the_server_a_client_starts_leads_a_session_of_its_own(tmp_path):
    """The server a client starts is not in the client's session (a hang-up or a killed job of the user's must not
    end it with them) and works in /, where nothing of the user's can shadow a module."""
    folder = _short_dir()
    env = _env(folder)
    path = _expected_socket(env)
    try:
        r = _bayesncl(_good_jobs(tmp_path), env)
        assert r.returncode == 0, r.stderr
        pid = int(Path(path + ".pid").read_text())
        assert os.getsid(pid) == pid != os.getsid(0) and os.readlink(f"/proc/{pid}/cwd") == "/"
    finally:
        forkserver.end_servers(folder)


@pytest.fixture
def own_server(tmp_path):
    """A fork server forked from this process (nothing preloaded: it starts at once) where a client with the
    returned environment looks; ended after the test. Its request timeout: BAYESNCL_FORKSERVER_REQUEST of the
    environment returned (600 s unless a test changes it before the first client)."""
    folder = _short_dir()
    env = _env(folder, BAYESNCL_TIMING=str(tmp_path / "timing.json"))
    started = []

    def start(request_timeout: float = 600.0) -> str:
        path = _expected_socket(env)
        sys.stdout.flush(), sys.stderr.flush()
        pid = current().fork()  # in a session of its own
        if pid == 0:
            try:
                server.PRELOAD, server.REQUEST_TIMEOUT, server.IDLE_SECONDS = (), request_timeout, 600
                from bayesncl.core import startup

                startup._ready_marked = False  # as in a server process (an earlier test here may have marked it)
                # the streams a server process has (pytest's capture objects write to no descriptor)
                sys.stdin, sys.stdout, sys.stderr = (open(fd, mode, closefd=False) for fd, mode in
                                                     ((0, "r"), (1, "w"), (2, "w")))
                server.serve(path, main)
            finally:
                os._exit(0)
        started.append(pid)
        wait_until(lambda: os.path.exists(path + ".pid") or os.waitpid(pid, os.WNOHANG)[0], "the server listens")
        assert os.path.exists(path + ".pid"), "the server ended before it listened"
        return path

    yield env, start
    for pid in started:
        try:
            os.kill(pid, signal.SIGTERM)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


def _routed(tmp_path) -> bool:
    """Whether the last command ran in a server's child (its start-up record says so)."""
    return json.loads((tmp_path / "timing.json").read_text()).get("forkserver") is True


def _close(fd):
    return lambda: os.close(fd)


def _long_status(root: Path) -> list[str]:
    """A `status` command that succeeds and writes more to stdout than a pipe's buffer holds at once (300 rows)."""
    for i in range(300):
        (root / "results" / "runs" / f"synthetic/ncl/seed~{i}").mkdir(parents=True)
        (root / "results" / "runs" / f"synthetic/ncl/seed~{i}" / "config.resolved.yaml").write_text("seed: 0\n")
    return ["status", str(root / "results")]


@pytest.mark.parametrize("closed", [0, 1, 2])
def test_a_command_started_without_a_stream_gives_the_plain_result(own_server, tmp_path, closed):
    """Started with stdin, stdout or stderr closed (`>&-`): the client's socket once took that number and was
    handed to the command as the stream, whose output its watch then read as "client gone" (exit 75, in 8 of 10
    tries). Now: the plain process's exit code and output, every time."""
    env, start = own_server
    start()
    for argv in (_long_status(tmp_path), BAD):
        plain = _bayesncl(argv, _env(_short_dir(), False), preexec_fn=_close(closed))
        for _ in range(3 if closed == 1 else 1):
            (tmp_path / "timing.json").unlink(missing_ok=True)
            served = _bayesncl(argv, env, preexec_fn=_close(closed))
            assert (served.returncode, served.stdout, served.stderr) == (plain.returncode, plain.stdout,
                                                                          plain.stderr), served.stderr
            assert _routed(tmp_path)
    assert plain.returncode == 2 and (closed == 2 or plain.stderr.startswith("bayesncl jobs: error: "))


def test_output_redirected_to_a_file_is_the_plain_output(own_server, tmp_path):
    env, start = own_server
    start()
    argv = _good_jobs(tmp_path)
    for name, e in (("plain", _env(_short_dir(), False)), ("served", env)):
        with open(tmp_path / f"{name}.out", "w") as out, open(tmp_path / f"{name}.err", "w") as err:
            assert current().run([sys.executable, "-m", "bayesncl", *argv], env=e, stdout=out,
                                 stderr=err).returncode == 0
    assert (tmp_path / "served.out").read_text() == (tmp_path / "plain.out").read_text() != ""
    assert (tmp_path / "served.err").read_text() == (tmp_path / "plain.err").read_text() == "" and _routed(tmp_path)


def test_a_client_that_never_sends_cannot_hold_the_server(own_server, tmp_path):
    """A connection that sends nothing, or half a request, is read without waiting: the next client is served
    while it is still connected (and not dropped: its time is not up), then it is dropped after its time."""
    env, start = own_server
    path = start(request_timeout=600.0)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as silent, \
            socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as half:
        silent.connect(path)
        half.connect(path)
        half.sendall(b"\x00\x00\x01")  # three bytes of a frame's length
        served = _bayesncl(_good_jobs(tmp_path), env)
        assert served.returncode == 0 and FALLBACK not in served.stderr and _routed(tmp_path), served.stderr
        for conn in (silent, half):
            conn.setblocking(False)
            with pytest.raises(BlockingIOError):  # still connected, nothing said to it
                conn.recv(1)


def test_a_client_that_never_sends_is_dropped_after_its_time(own_server):
    env, start = own_server
    path = start(request_timeout=0.5)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as silent:
        silent.connect(path)
        silent.settimeout(GIVEN_UP)
        assert silent.recv(1) == b""  # closed by the server


def test_a_silent_listener_is_given_up_within_seconds(monkeypatch, plain_bad):
    """Given up after HELLO_TIMEOUT, 5 s unless BAYESNCL_FORKSERVER_HELLO says otherwise (once 30 s)."""
    assert client.HELLO_TIMEOUT == 5 and "BAYESNCL_FORKSERVER_HELLO" not in os.environ
    server = Listener(monkeypatch)
    pid = server.client(BAD)
    conn, request = server.accept()
    code = _wait(pid, limit=5 + GIVEN_UP)
    conn.close()
    first, _, rest = Path(server.err).read_text().partition("\n")
    assert first == f"{FALLBACK}the server at {server.path} did not answer within 5 s; running the command in this process"
    assert (code, rest) == (2, plain_bad)


def test_the_hello_timeout_is_lifted_once_the_command_runs(monkeypatch):
    """A command that runs longer than the hello timeout is not read as killed: the client waits for its end."""
    monkeypatch.setattr(client, "HELLO_TIMEOUT", 0.3)
    server = Listener(monkeypatch)
    pid = server.client(BAD)
    conn, _ = server.accept()
    protocol._send(conn, {"pid": 2 ** 22 + 1})
    time.sleep(1.5)  # five hello timeouts
    protocol._send(conn, {"exit": 3})
    code = _wait(pid)
    conn.close()
    assert code == 3 and Path(server.err).read_text() == ""


def _fake_server_exe(folder: str, sleep: bool) -> str:
    """An executable the client starts as its server: it records its arguments, then sleeps (a server still
    importing) or exits 1."""
    exe = os.path.join(folder, "fake-python")
    with open(exe, "w") as fh:
        fh.write(f"#!/bin/sh\necho \"$$ $*\" > {folder}/argv\n" + ("exec sleep 120\n" if sleep else "exit 1\n"))
    os.chmod(exe, 0o755)
    return exe


def test_sigterm_while_the_server_is_starting_is_the_plain_75(monkeypatch, tmp_path):
    """SIGTERM before any server answered: the plain process's rerun line and exit 75 (it died of the signal,
    143, without a word); SIGTERM after the request went out reaches the command once its pid is known."""
    folder = _short_dir()
    monkeypatch.setenv(forkserver.DIR_ENV, folder)
    exe = _fake_server_exe(folder, sleep=True)
    pid = _fork_client(str(tmp_path / "err"), BAD, before=lambda: setattr(sys, "executable", exe))
    # the server was started and has not listened
    wait_until(lambda: os.path.exists(os.path.join(folder, "argv")), "the server started")
    sleeper = int(Path(folder, "argv").read_text().split()[0])
    try:
        os.kill(pid, signal.SIGTERM)
        code = _wait(pid)
    finally:
        os.kill(sleeper, signal.SIGKILL)
    assert code == 75
    assert (tmp_path / "err").read_text() == TERMINATED + "\n"


def test_the_rerun_line_is_the_clis(capsys):
    import bayesncl.cli.main as cli

    with pytest.raises(SystemExit) as e:
        cli._terminated(signal.SIGTERM, None)
    assert e.value.code == 75 and capsys.readouterr().err == TERMINATED + "\n"


def test_sigterm_before_the_server_answered_reaches_the_command(monkeypatch, procs):
    server = Listener(monkeypatch)
    sleeper = procs.popen([sys.executable, "-c", "import signal, sys, time\n"
                                "signal.signal(signal.SIGTERM, lambda n, f: (print(n, flush=True), sys.exit(0)))\n"
                                "print('ready', flush=True)\nwhile True: time.sleep(0.05)\n"],
                               stdout=subprocess.PIPE, text=True)
    try:
        assert sleeper.stdout.readline() == "ready\n"
        pid = server.client(BAD)
        conn, _ = server.accept()  # the request went out; no answer yet
        os.kill(pid, signal.SIGTERM)
        time.sleep(0.2)
        protocol._send(conn, {"pid": sleeper.pid})
        assert sleeper.stdout.readline().strip() == str(int(signal.SIGTERM))  # passed on once the pid came
        protocol._send(conn, {"exit": 75})
        assert _wait(pid) == 75
        conn.close()
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_relative_socket_folder_is_made_absolute(monkeypatch, tmp_path):
    """The server starts in /: a relative BAYESNCL_FORKSERVER_DIR once named another folder there (the client
    then waited for a socket that never came). It is made absolute at once."""
    base = Path(_short_dir())
    monkeypatch.chdir(base)
    monkeypatch.setenv(forkserver.DIR_ENV, "rel")
    assert forkserver.folder() == str(base / "rel")
    exe = _fake_server_exe(str(base), sleep=False)
    pid = _fork_client(str(tmp_path / "err"), BAD, before=lambda: setattr(sys, "executable", exe))
    code = _wait(pid)
    argv = (base / "argv").read_text().split()
    assert argv[1:3] == ["-m", "bayesncl.cli.forkserver"] and argv[3].startswith(f"{base}/rel/")  # absolute
    assert code == 2


def test_an_unwritable_socket_folder_is_one_line_and_a_plain_run(tmp_path):
    """A folder of the user's they may not write (mode 500): one line, then the command in the client's process
    (once a PermissionError traceback, the command never run). Run as nobody where the tests run as root."""
    import bayesncl.cli.main  # noqa: F401 - imported before the client drops root (root's site-packages)
    import bayesncl.report.jobs  # noqa: F401

    folder = _short_dir()
    err = str(tmp_path / "err")
    if os.geteuid() == 0:
        os.chown(folder, NOBODY, NOBODY)
        os.chmod(tmp_path, 0o777)

        def before():
            os.setgroups([]), os.setgid(NOBODY), os.setuid(NOBODY)
    else:
        before = None
    os.chmod(folder, 0o500)
    pid = _fork_client(err, BAD, before=lambda: (os.environ.__setitem__(forkserver.DIR_ENV, folder),
                                                 before and before()))
    code = _wait(pid)
    first, _, rest = Path(err).read_text().partition("\n")
    assert first == (f"{FALLBACK}cannot write in the socket folder {folder} (Permission denied); set "
                     f"{forkserver.DIR_ENV} to a folder you can write; running the command in this process")
    # the command itself, run here (as this user: its own one line, exit 2)
    assert code == 2 and rest.startswith("bayesncl jobs: error: ") and rest.count("\n") == 1


def test_the_client_checks_the_servers_uid_not_its_gid(monkeypatch):
    """SO_PEERCRED gives (pid, uid, gid): the uid decides. The tests run where uid = gid; here they differ."""
    me = os.getuid()

    class Peer:
        def __init__(self, uid, gid):
            self.creds = struct.pack("3i", 1, uid, gid)

        def getsockopt(self, *_):
            return self.creds

    assert protocol._peer_uid(Peer(me, me + 7)) == me
    assert protocol._peer_uid(Peer(me + 7, me)) == me + 7
    assert server._same_user(Peer(me, me + 7)) and not server._same_user(Peer(me + 7, me))


def test_the_timeouts_are_read_from_the_environment():
    code = "from bayesncl.cli.forkserver import client, server; print(client.HELLO_TIMEOUT, server.REQUEST_TIMEOUT)"
    env = dict(_env(_short_dir(), False), BAYESNCL_FORKSERVER_HELLO="2.5", BAYESNCL_FORKSERVER_REQUEST="0.5")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.stdout.split() == ["2.5", "0.5"], out.stderr
