"""The processes a test starts, and how it waits on them.

A test waits on another process for an event (a line, a file, an exit) with a generous limit, PATIENCE, never
for a time it must beat: on a busy machine a wait only takes longer. `Processes` (conftest's `procs` fixture)
starts each process in a session of its own and kills every process still in those sessions when the test
ends, passed or failed: a script's `set -m` jobs have a process group of their own but stay in its session,
and an orphan keeps its session when its parent dies. conftest.py gives every test one (`procs`, autouse;
`current()` for helpers). `default_signals` gives a child the dispositions a signal test needs, whatever the test
run was started with (`nohup` ignores SIGHUP, a script's `&` SIGINT and SIGQUIT).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import Callable

# Seconds any wait on another process may take before the test fails; the wait ends at the event itself.
PATIENCE = float(os.environ.get("BAYESNCL_TEST_PATIENCE", "600"))
# The signals a test sends or expects its child to handle.
SIGNALS = (signal.SIGINT, signal.SIGHUP, signal.SIGTERM, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


def default_signals() -> None:
    """In a child (preexec_fn, or after fork): SIGINT, SIGHUP, SIGTERM, SIGQUIT, SIGUSR1 and SIGUSR2 at their
    default disposition, none blocked; a signal test's child then acts as on a terminal, under nohup too."""
    for sig in SIGNALS:
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)


def wait_until(event: Callable[[], object], what: str, proc: subprocess.Popen | None = None,
               limit: float = PATIENCE):
    """Wait until `event()` is true (its value is returned), checking every 20 ms; fail when `proc` ended first
    (with what it wrote, if piped) or after `limit` seconds."""
    end = time.monotonic() + limit
    while True:
        got = event()
        if got:
            return got
        if proc is not None and proc.poll() is not None:
            out = proc.communicate()[0 if proc.stdout else 1] if (proc.stdout or proc.stderr) else ""
            raise AssertionError(f"{what}: the process ended first (exit {proc.returncode}): {str(out)[-3000:]}")
        if time.monotonic() > end:
            raise AssertionError(f"{what}: not within {limit:.0f} s")
        time.sleep(0.02)


def session_members(sid: int) -> list[int]:
    """The pids whose session is `sid` (/proc/<pid>/stat's sixth field)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[3]) == sid and fields[0] != "Z":
                found.append(int(entry))
    return found


def kill_sessions(sids: list[int]) -> list[int]:
    """SIGKILL every process of the sessions `sids` until none is left; the pids killed."""
    killed: list[int] = []
    for _ in range(50):  # a process may fork while its session is being killed
        alive = [pid for sid in sids for pid in session_members(sid) if pid != os.getpid()]
        if not alive:
            break
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
        time.sleep(0.01)
    return killed


_current: "Processes | None" = None  # the running test's
_session: "Processes | None" = None  # the session's, for session- and module-scoped fixtures


def current() -> "Processes":
    """The running test's Processes (conftest.py's `procs`), else the session's (a wider fixture's setup)."""
    owner = _current or _session
    assert owner is not None, "no test session is running (conftest.py sets the owners)"
    return owner


class Processes:
    """Processes a test starts, each the leader of a new session; `end()` kills all of their sessions."""

    def __init__(self) -> None:
        self.popens: list[subprocess.Popen] = []
        self.forked: list[int] = []

    def popen(self, args, *, signals: bool = False, **kw) -> subprocess.Popen:
        """subprocess.Popen in a new session; `signals`: with default_signals() in the child."""
        if signals:
            kw["preexec_fn"] = default_signals
        proc = subprocess.Popen(args, start_new_session=True, **kw)
        self.popens.append(proc)
        return proc

    def run(self, args, *, timeout: float = PATIENCE, input=None, **kw) -> subprocess.CompletedProcess:
        """subprocess.run through popen: on a timeout its whole session is killed, not only the process."""
        if kw.pop("capture_output", False):
            kw["stdout"] = kw["stderr"] = subprocess.PIPE
        if input is not None:
            kw["stdin"] = subprocess.PIPE
        proc = self.popen(args, **kw)
        try:
            out, err = proc.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_sessions([proc.pid])
            proc.communicate()
            raise
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def fork(self) -> int:
        """os.fork(), the child in a new session (it must end with os._exit); 0 in the child."""
        pid = os.fork()
        if pid == 0:
            os.setsid()
            return 0
        self.forked.append(pid)
        return pid

    def end(self) -> list[int]:
        """Kill every process of the sessions started here and collect the children; the pids that were left."""
        left = kill_sessions([p.pid for p in self.popens] + self.forked)
        for proc in self.popens:
            try:
                proc.communicate(timeout=PATIENCE)
            except (ValueError, OSError, subprocess.TimeoutExpired):  # streams closed or read by the test
                proc.wait()
        for pid in self.forked:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:  # collected by the test
                pass
        return left
