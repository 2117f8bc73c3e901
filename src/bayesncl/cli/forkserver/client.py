"""The fork server's client: `bayesncl <command>` handed to a server's child (arguments, working folder,
environment, stdin/stdout/stderr), the first client starting the server; signals passed on to the command.
Whatever keeps a server from answering is one line on stderr and the command runs in this process instead
(`run_here`, the CLI's main, handed in by bayesncl.cli.main: the client imports nothing above it). Standard library
only (and bayesncl.core.errors' constants, bayesncl.core.startup)."""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from typing import Callable

from ...core.errors import REQUEUE_EXIT, TERMINATED  # constants only: the client imports nothing heavy
from .protocol import DIR_ENV, ENV, Unavailable, _frame, _peer_uid, _private, _read, _recv, socket_path

START_TIMEOUT = 120.0  # seconds a client waits for a server it started to listen (a cold import of torch: ~15 s)
# Seconds a client waits for the command's pid: the server reads requests without blocking and forks at once, so a
# listener silent this long is given up (then the command runs in the client's process). Lifted once it answers.
HELLO_TIMEOUT = float(os.environ.get("BAYESNCL_FORKSERVER_HELLO", "5"))
# Signals the client passes on to the command (those it does not ignore).
FORWARDED = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")

_child = False  # True in this process once it runs a command itself: never route again


def _connect(path: str) -> socket.socket | None:
    """A connection to the server at `path`, or None where nothing listens; refused unless it runs as this user."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
    except OSError:
        s.close()
        return None
    uid = _peer_uid(s)
    if uid is not None and uid != os.getuid():
        s.close()
        raise Unavailable(f"{path} is served by uid {uid}, not by this user (uid {os.getuid()}); "
                          f"set {DIR_ENV} to a folder of yours")
    return s


def _start_server(path: str) -> socket.socket:
    """Connect, starting the server first if none listens (one starter at a time: a lock file)."""
    import fcntl
    import subprocess

    try:
        lock = open(path + ".lock", "w")
    except OSError as exc:  # a folder of the user's they may not write (mode 500, a read-only file system)
        raise Unavailable(f"cannot write in the socket folder {os.path.dirname(path)} ({exc.strerror}); set "
                          f"{DIR_ENV} to a folder you can write") from None
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        conn = _connect(path)
        if conn is not None:
            return conn
        _private(path)  # something may have taken the socket's place meanwhile
        try:
            with open(path + ".log", "ab") as log:
                server = subprocess.Popen([sys.executable, "-m", "bayesncl.cli.forkserver", path],
                                          stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                                          close_fds=True, cwd="/")  # nothing in the client's folder may shadow a module
        except OSError as exc:
            raise Unavailable(f"cannot start the fork server ({exc.strerror}: {exc.filename})") from None
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            conn = _connect(path)
            if conn is not None:
                return conn
            if server.poll() is not None:
                last = (_read(path + ".log").strip().splitlines() or ["no output"])[-1]
                raise Unavailable(f"the fork server exited with code {server.returncode} before it listened "
                                  f"({last}; {path}.log)")
            time.sleep(0.02)
        server.kill()
    raise Unavailable(f"the fork server did not listen within {START_TIMEOUT:.0f} s (see {path}.log)")


def _ignored() -> list[int]:
    """The signals this process ignores (inherited: nohup, `&` in a script)."""
    found = []
    for sig in signal.valid_signals():
        try:
            if signal.getsignal(sig) == signal.SIG_IGN:
                found.append(int(sig))
        except (ValueError, OSError):
            pass
    return found


def _closed_streams() -> list[int]:
    """Which of stdin, stdout and stderr this process was started without (`>&-`), each then held by /dev/null
    here, so no socket of the client's takes its number (it would be passed on as the command's stream)."""
    closed = []
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            closed.append(fd)
    for fd in closed:
        held = os.open(os.devnull, os.O_RDWR)  # the lowest free number: `fd` itself
        if held != fd:
            os.dup2(held, fd)
            os.close(held)
    return closed


def _greeting(conn: socket.socket, path: str, argv: list[str], closed: list[int], sent) -> int:
    """Send the request; the pid of the command's process from the server's answer. `sent()` is called once the
    request is on its way (the command may start from then on)."""
    from ...core.startup import process_started

    request = {"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ), "start": process_started(),
               "ignored": _ignored(), "closed": closed,
               "blocked": sorted(int(sig) for sig in signal.pthread_sigmask(signal.SIG_BLOCK, []))}
    conn.settimeout(HELLO_TIMEOUT)
    try:
        sent()
        socket.send_fds(conn, [_frame(request)], [fd for fd in (0, 1, 2) if fd not in closed])
        hello = _recv(conn)
    except TimeoutError:
        raise Unavailable(f"the server at {path} did not answer within {HELLO_TIMEOUT:.0f} s") from None
    except (OSError, ValueError) as exc:
        raise Unavailable(f"the server at {path} answered no request of ours ({type(exc).__name__})") from None
    if hello is None:
        raise Unavailable(f"the server at {path} closed the connection before starting the command")
    pid = hello.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        raise Unavailable(f"the server at {path} answered no process id")
    conn.settimeout(None)  # the command runs as long as it needs
    return pid


def run_command(argv: list[str], run_here: Callable[[list[str]], int]) -> int:
    """Run `bayesncl <argv>` in a child of the fork server; its exit code. Where no server can start it (a line says
    why), the command runs in this process instead, through `run_here` (the CLI's main). A signal before the request
    is sent does what it does to a plain process (SIGTERM: the rerun line, exit 75); one after it reaches the
    command once it runs."""
    state: dict = {"pid": None, "sent": False, "pending": []}

    def on_signal(signum, _frame):
        if state["pid"] is not None:
            try:
                os.kill(state["pid"], signum)
            except ProcessLookupError:
                pass
        elif state["sent"]:  # the command may be starting: passed on as soon as its pid is known
            state["pending"].append(signum)
        else:
            _as_plain(signum)

    previous = {}
    for name in FORWARDED:
        sig = getattr(signal, name)
        if signal.getsignal(sig) != signal.SIG_IGN:  # ignored here: ignored by the command too
            previous[sig] = signal.signal(sig, on_signal)
    closed = _closed_streams()
    try:
        path = socket_path()
        _private(path)
        conn = _connect(path) or _start_server(path)
        try:
            state["pid"] = _greeting(conn, path, argv, closed, lambda: state.update(sent=True))
        except Unavailable:
            conn.close()
            raise
    except Unavailable as exc:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for signum in state["pending"]:  # stopped before it could start: as a plain process stops
            _as_plain(signum)
        print(f"bayesncl: fork server unavailable: {exc}; running the command in this process", file=sys.stderr)
        running_here()
        return run_here(argv)
    with conn:
        for signum in state["pending"]:
            on_signal(signum, None)
        try:
            done = _recv(conn)
        except (OSError, ValueError):
            done = None
    code = done.get("exit") if done is not None else None
    if not isinstance(code, int) or isinstance(code, bool):
        print(f"bayesncl: the command's process {state['pid']} ended without an exit status (killed?)",
              file=sys.stderr)
        return 1
    return code


def _as_plain(signum: int) -> None:
    """What a signal does to a plain `bayesncl` process: SIGTERM the CLI's rerun line and exit 75, SIGINT a
    KeyboardInterrupt, any other its default action."""
    if signum == signal.SIGTERM:
        print(TERMINATED, file=sys.stderr)
        raise SystemExit(REQUEUE_EXIT)
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def running_here() -> None:
    """This process runs a command itself (the fallback, or a server's child): it never routes again."""
    global _child
    _child = True


def routed() -> bool:
    """Whether this `bayesncl` invocation goes through the fork server."""
    return os.environ.get(ENV) == "1" and not _child
