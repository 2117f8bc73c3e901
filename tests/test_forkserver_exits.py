"""A fork-server job as a plain process: the child's exit code as a plain process would give it
(bayesncl.cli.forkserver.server._child_main, run in a real fork with the command replaced), and the client
(bayesncl.cli.forkserver.client.run_command, in a fork, against a fake server) passing on SIGINT, SIGHUP and SIGTERM
and reading a command that ended without a status as a failure. Forks and processes are the test's own (conftest's `procs`);
the client gets default signal dispositions in its fork, as a job on a terminal, whatever the test run ignores."""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from bayesncl.cli.main import main
from bayesncl.cli.forkserver import client, protocol, server
from helpers.processes import PATIENCE, current, default_signals

pytestmark = pytest.mark.skipif(not hasattr(os, "fork") or not Path("/proc/self/stat").exists(),
                                reason="fork and /proc")


def _child(monkeypatch, run) -> tuple[dict, dict | None, int, str]:
    """Fork, run `run` as the server's child runs a command; (its hello, its exit message, its exit status,
    what it wrote to stdout/stderr)."""
    monkeypatch.delenv("BAYESNCL_TIMING", raising=False)
    ours, theirs = socket.socketpair()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    read, write = os.pipe()
    stdin = os.open(os.devnull, os.O_RDONLY)
    sys.stdout.flush(), sys.stderr.flush()
    pid = current().fork()
    if pid == 0:  # never returns: _child_main exits, and so does anything that escapes it
        try:
            ours.close()
            os.close(read)
            # the server's streams are its fds 1 and 2 (pytest's capture is not): the client's once dup2'ed
            sys.stdout, sys.stderr = open(1, "w", closefd=False), open(2, "w", closefd=False)
            request = {"argv": ["x"], "cwd": os.getcwd(), "env": dict(os.environ), "start": None}
            server._child_main(theirs, listener, request, [stdin, write, os.dup(write)], run)
        finally:
            os._exit(99)
    theirs.close(), listener.close(), os.close(write), os.close(stdin)
    hello, done = protocol._recv(ours), protocol._recv(ours)
    _, status = os.waitpid(pid, 0)
    ours.close()
    with os.fdopen(read) as fh:
        output = fh.read()
    return hello, done, os.waitstatus_to_exitcode(status), output


def _exits(value):
    def main(argv):
        raise SystemExit(value)
    return main


@pytest.mark.parametrize("value,code", [("a message", 1), (None, 0), (0, 0), (2, 2), (75, 75)])
def test_system_exit_gives_the_plain_process_exit_code(monkeypatch, value, code):
    """sys.exit("message") is exit 1 in a plain process, never 0; sys.exit(None) 0; an int itself."""
    hello, done, status, output = _child(monkeypatch, _exits(value))
    assert hello == {"pid": hello["pid"]} and done == {"exit": code} and status == code
    # and its message on stderr, as the interpreter prints it; nothing for a code
    plain = subprocess.run([sys.executable, "-c", f"raise SystemExit({value!r})"], capture_output=True, text=True)
    assert output == plain.stdout + plain.stderr and plain.returncode == code


def test_a_returned_code_and_a_bug(monkeypatch):
    assert _child(monkeypatch, lambda argv: 2)[1:3] == ({"exit": 2}, 2)

    def bug(argv):
        raise RuntimeError("a bug")
    _, done, status, output = _child(monkeypatch, bug)
    assert done == {"exit": 1} and status == 1 and "Traceback" in output and "RuntimeError: a bug" in output


# ------------------------------------------------------------------------------------------------ the client
SLEEPER = """
import signal, sys, time
for s in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
    signal.signal(s, lambda n, f: print(n, flush=True))
print("ready", flush=True)
while True:
    time.sleep(0.05)
"""


def _line(proc: subprocess.Popen, timeout: float = PATIENCE) -> str:
    """The process's next line; "" when none comes in time (lines come one per signal: nothing is buffered)."""
    import select

    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    return proc.stdout.readline() if ready else ""


def _catches(pid: int, sig: int) -> bool:
    with open(f"/proc/{pid}/status") as fh:
        caught = next(line for line in fh if line.startswith("SigCgt:")).split()[1]
    return bool(int(caught, 16) & (1 << (sig - 1)))


class FakeServer:
    """A socket where the client's socket_path() points; `client()` forks a process running run_command."""

    def __init__(self, monkeypatch):
        self.folder = tempfile.mkdtemp(prefix="bfx-", dir="/tmp")  # short: a socket path has at most 107 bytes
        self.path = os.path.join(self.folder, "s.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(1)
        self.listener.settimeout(PATIENCE)
        self.err = os.path.join(self.folder, "err")
        monkeypatch.setattr(client, "socket_path", lambda: self.path)

    def client(self) -> tuple[int, socket.socket]:
        """Fork the client; accept and read its request. (its pid, the connection)."""
        sys.stdout.flush(), sys.stderr.flush()
        pid = current().fork()
        if pid == 0:
            code = 99
            try:
                self.listener.close()
                default_signals()  # a job on a terminal, also when the test run was started under nohup
                sys.stderr = open(self.err, "w")
                code = client.run_command(["jobs"], main)
                sys.stderr.flush()
            finally:
                os._exit(code)
        conn, _ = self.listener.accept()
        head, fds, _, _ = socket.recv_fds(conn, 4, 3)
        for fd in fds:
            os.close(fd)
        assert protocol._recv(conn, head)["argv"] == ["jobs"]
        return pid, conn

    def close(self):
        self.listener.close()
        shutil.rmtree(self.folder, ignore_errors=True)


@pytest.fixture
def fake_server(monkeypatch):
    server = FakeServer(monkeypatch)
    yield server
    server.close()


def test_the_client_passes_on_sigint_sighup_and_sigterm(fake_server, procs):
    """A job's Ctrl-C (SIGINT) and hang-up (SIGHUP) reach the command as SIGTERM does, each as itself."""
    sleeper = procs.popen([sys.executable, "-c", SLEEPER], stdout=subprocess.PIPE, text=True)
    client = None
    try:
        assert _line(sleeper) == "ready\n"
        client, conn = fake_server.client()
        # its request came: it set its handlers before it connected
        assert all(_catches(client, s) for s in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM))
        protocol._send(conn, {"pid": sleeper.pid})  # the command's process
        got = []
        for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
            os.kill(client, sig)
            got.append(_line(sleeper).strip())
        assert got == [str(int(s)) for s in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM)]
        protocol._send(conn, {"exit": 3})
        _, status = os.waitpid(client, 0)
        client = None
        assert os.waitstatus_to_exitcode(status) == 3  # the command's code, the client unharmed by the signals
        conn.close()
    finally:
        if client is not None:
            os.kill(client, signal.SIGKILL)
            os.waitpid(client, 0)
        sleeper.kill()
        sleeper.wait()


def test_a_command_that_ended_without_a_status_is_a_failure(fake_server):
    """The server's child killed (SIGKILL, the OOM killer): the connection closes with no exit message; the job
    fails (exit 1, one line), never exit 0."""
    client, conn = fake_server.client()
    protocol._send(conn, {"pid": 12345})
    conn.close()
    _, status = os.waitpid(client, 0)
    assert os.waitstatus_to_exitcode(status) == 1
    err = Path(fake_server.err).read_text()
    assert err == "bayesncl: the command's process 12345 ended without an exit status (killed?)\n"
