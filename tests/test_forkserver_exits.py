"""What a fork-server job reports when its command ends: the child's exit code as a plain process would give it
(bayesncl.forkserver._child_main), run in a real fork with the command replaced."""

import os
import socket
import sys
from pathlib import Path

import pytest

import bayesncl.cli
from bayesncl import forkserver

pytestmark = pytest.mark.skipif(not hasattr(os, "fork") or not Path("/proc/self/stat").exists(),
                                reason="fork and /proc")


def _child(monkeypatch, main) -> tuple[dict, dict | None, int, str]:
    """Fork, run `main` as the server's child runs a command; (its hello, its exit message, its exit status,
    what it wrote to stdout/stderr)."""
    monkeypatch.setattr(bayesncl.cli, "main", main)
    monkeypatch.delenv("BAYESNCL_TIMING", raising=False)
    ours, theirs = socket.socketpair()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    read, write = os.pipe()
    stdin = os.open(os.devnull, os.O_RDONLY)
    sys.stdout.flush(), sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # never returns: _child_main exits, and so does anything that escapes it
        try:
            ours.close()
            os.close(read)
            # the server's streams are its fds 1 and 2 (pytest's capture is not): the client's once dup2'ed
            sys.stdout, sys.stderr = open(1, "w", closefd=False), open(2, "w", closefd=False)
            request = {"argv": ["x"], "cwd": os.getcwd(), "env": dict(os.environ), "start": None}
            forkserver._child_main(theirs, listener, request, [stdin, write, os.dup(write)])
        finally:
            os._exit(99)
    theirs.close(), listener.close(), os.close(write), os.close(stdin)
    hello, done = forkserver._recv(ours), forkserver._recv(ours)
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
    hello, done, status, _ = _child(monkeypatch, _exits(value))
    assert hello == {"pid": hello["pid"]} and done == {"exit": code} and status == code


def test_a_returned_code_and_a_bug(monkeypatch):
    assert _child(monkeypatch, lambda argv: 2)[1:3] == ({"exit": 2}, 2)

    def bug(argv):
        raise RuntimeError("a bug")
    _, done, status, output = _child(monkeypatch, bug)
    assert done == {"exit": 1} and status == 1 and "Traceback" in output and "RuntimeError: a bug" in output
