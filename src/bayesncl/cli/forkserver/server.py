"""The fork server: a process that has imported torch once, listening on its socket (bayesncl.cli.forkserver.protocol)
and forking a child per request that runs the command as a plain process would (same outputs, exit code,
signal dispositions and streams) through the runner it is handed (bayesncl.cli.main's main, by `python -m
bayesncl.cli.forkserver SOCKET`); it exits after IDLE_SECONDS without a command. `end_servers` ends a folder's
servers (a workflow run's own, at its end). Standard library only (and bayesncl.core.startup)."""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import sys
import time
from typing import Callable

from . import client
from .protocol import MAX_MESSAGE, _peer_uid, _read, _send

IDLE_SECONDS = float(os.environ.get("BAYESNCL_FORKSERVER_IDLE", "120"))
# Seconds the server keeps a connection whose request has not all come; other clients are served meanwhile.
REQUEST_TIMEOUT = float(os.environ.get("BAYESNCL_FORKSERVER_REQUEST", "10"))
# What the commands of a workflow job import; the server imports them once. A module missing here is imported
# by the child itself (slower, never wrong).
PRELOAD = ("numpy", "torch", "torchvision", "bayesncl.cli.main", "bayesncl.training.train",
           "bayesncl.evaluation.runner", "bayesncl.evaluation.sections", "bayesncl.measures.cost",
           "bayesncl.measures.dynamics", "bayesncl.report.summary", "pandas", "scipy.stats")


def _preload() -> None:
    import importlib

    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - the child imports it itself, and says why if it must
            print(f"preload {name}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)


def _signals_as(ignored: list[int], blocked: list[int]) -> None:
    """The dispositions a plain Python process started by the client would have: what the client ignored stays
    ignored, SIGINT raises KeyboardInterrupt, every other signal its default; the client's blocked mask."""
    ignored = set(ignored)
    for sig in signal.valid_signals():
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            continue
        if sig in ignored:
            handler = signal.SIG_IGN
        elif sig == signal.SIGINT:
            handler = signal.default_int_handler
        elif sig in (signal.SIGPIPE, signal.SIGXFSZ):  # Python's own start-up ignores these
            handler = signal.SIG_IGN
        else:
            handler = signal.SIG_DFL
        try:
            signal.signal(sig, handler)
        except (OSError, ValueError, RuntimeError):
            pass
    signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def _child_main(conn: socket.socket, listener: socket.socket, request: dict, fds: list[int],
                run: Callable[[list[str]], int]) -> None:
    """In the forked child: become the client's process, run the command (`run`), report its exit code, exit."""
    import threading
    import traceback

    from ...core.startup import as_forked_child, record_usage

    client.running_here()
    as_forked_child(request.get("start"))
    listener.close()
    _signals_as(request.get("ignored", []), request.get("blocked", []))
    closed = request.get("closed", [])
    for target, fd in zip([t for t in (0, 1, 2) if t not in closed], fds):
        os.dup2(fd, target)
        os.close(fd)
    for target in closed:  # started without it: as a plain process, no stream (Python's sys.std* is None)
        os.close(target)
        setattr(sys, ("stdin", "stdout", "stderr")[target], None)
        setattr(sys, ("__stdin__", "__stdout__", "__stderr__")[target], None)
    for stream in (sys.stdout, sys.stderr):  # a terminal's output line by line, as in a plain process
        try:
            stream.reconfigure(line_buffering=os.isatty(stream.fileno()))
        except (AttributeError, OSError, ValueError):  # AttributeError: a stream it was started without
            pass
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    time.tzset()  # TZ is the client's
    sys.argv = ["bayesncl", *request["argv"]]
    done = threading.Event()

    def watch() -> None:  # the client gone (killed): stop as a SIGTERM would (checkpoint, exit 75)
        try:
            conn.recv(1)
        except OSError:
            pass
        if not done.is_set():
            os.kill(os.getpid(), signal.SIGTERM)

    code = 1
    try:
        _send(conn, {"pid": os.getpid()})
        threading.Thread(target=watch, daemon=True).start()
        code = run(request["argv"])
    except SystemExit as exc:  # argparse: --help (0) and usage errors (2)
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if exc.code is not None and not isinstance(exc.code, int):  # as the interpreter does: the message on stderr
            print(exc.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - a bug: its traceback, as a plain process would print it
        traceback.print_exc()
        code = 1
    finally:
        done.set()
        record_usage()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (AttributeError, OSError, ValueError):
                pass
        try:
            _send(conn, {"exit": int(code or 0)})
        except OSError:
            pass
        os._exit(int(code or 0))


def _same_user(conn: socket.socket) -> bool:
    """Whether the peer runs as this server's user (SO_PEERCRED; True where the platform cannot tell)."""
    uid = _peer_uid(conn)
    return uid is None or uid == os.getuid()


class _Pending:
    """A connection whose request has not all come: read as it arrives, never waited on, so a client that sends
    nothing (or half a request) holds no one else up; dropped after REQUEST_TIMEOUT."""

    def __init__(self, conn: socket.socket):
        conn.setblocking(False)
        self.conn, self.buf, self.fds = conn, b"", []
        self.deadline = time.monotonic() + REQUEST_TIMEOUT

    def read(self) -> dict | None:
        """The request once whole, else None; ValueError or OSError where what came is no request of ours."""
        data, fds, _, _ = socket.recv_fds(self.conn, 1 << 16, 3)
        self.fds += fds
        if not data:
            raise ValueError("closed before its request was whole")
        self.buf += data
        if len(self.buf) < 4:
            return None
        size = struct.unpack("!I", self.buf[:4])[0]
        if size > MAX_MESSAGE or len(self.buf) > 4 + size:
            raise ValueError("not a frame of ours")
        if len(self.buf) < 4 + size:
            return None
        request = json.loads(self.buf[4:])
        closed = request.get("closed", []) if isinstance(request, dict) else None
        if not isinstance(closed, list) or not set(closed) <= {0, 1, 2} or len(set(closed)) != len(closed) \
                or len(self.fds) != 3 - len(closed):
            raise ValueError("not a client's request")
        self.conn.setblocking(True)
        return request

    def drop(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.conn.close()


def serve(path: str, run: Callable[[list[str]], int]) -> None:
    """Listen on `path`, running each request's command through `run` in a forked child, until IDLE_SECONDS pass
    without a command and no child runs, or the socket file is replaced or removed."""
    import select

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # end_servers: remove the socket on the way out
    _preload()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    tmp = f"{path}.{os.getpid()}.tmp"
    listener.bind(tmp)
    os.chmod(tmp, 0o600)  # this user's commands only (also checked per connection below)
    listener.listen(64)
    os.replace(tmp, path)  # published only once it listens
    inode = os.stat(path).st_ino
    _write_pid(path)
    children: set[int] = set()
    pending: dict[socket.socket, _Pending] = {}
    last = time.monotonic()
    try:
        while True:
            for pid in list(children):
                if os.waitpid(pid, os.WNOHANG)[0]:
                    children.discard(pid)
            ready, _, _ = select.select([listener, *pending], [], [], 0.2 if pending else 1.0)
            for sock in ready:
                if sock is listener:
                    conn, _ = listener.accept()
                    last = time.monotonic()
                    if _same_user(conn):
                        pending[conn] = _Pending(conn)
                    else:
                        conn.close()
                    continue
                waiting = pending[sock]
                try:
                    request = waiting.read()
                except (OSError, ValueError):  # not a client's request: drop it
                    pending.pop(sock).drop()
                    continue
                if request is None:
                    continue
                del pending[sock]
                for stream in (sys.stdout, sys.stderr):  # nothing buffered may be written twice
                    stream.flush()
                pid = os.fork()
                if pid == 0:
                    for other in pending.values():  # the other clients' connections are not the child's
                        other.drop()
                    _child_main(sock, listener, request, waiting.fds, run)
                children.add(pid)
                for fd in waiting.fds:
                    os.close(fd)
                sock.close()
            now = time.monotonic()
            for sock in [c for c, w in pending.items() if w.deadline < now]:  # never sent its request
                pending.pop(sock).drop()
            if ready:
                continue
            try:
                if os.stat(path).st_ino != inode:
                    break
            except FileNotFoundError:
                break
            if not children and not pending and time.monotonic() - last > IDLE_SECONDS:
                break
    finally:
        listener.close()
        try:
            if os.stat(path).st_ino == inode:
                os.unlink(path)
                os.unlink(path + ".pid")
        except FileNotFoundError:
            pass


def _write_pid(path: str) -> None:
    """<socket>.pid: this server's pid, for end_servers."""
    tmp = f"{path}.pid.{os.getpid()}.tmp"
    with open(tmp, "w") as fh:
        fh.write(f"{os.getpid()}\n")
    os.replace(tmp, path + ".pid")


def end_servers(where: str, remove: bool = True, wait: float = 10.0) -> list[int]:
    """End the servers whose socket lies in the folder `where` (a workflow run's own, at its end) and, with
    `remove`, the folder; the pids ended. A pid is only signalled while it is still that socket's server."""
    import glob
    import shutil

    ended = []
    for pidfile in glob.glob(os.path.join(glob.escape(where), "*.sock.pid")):
        sock = pidfile[: -len(".pid")]
        try:
            pid = int(_read(pidfile).strip())
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
        except (ValueError, OSError):
            continue
        if b"bayesncl.cli.forkserver" in argv and os.fsencode(sock) in argv and pid != os.getpid():
            try:
                os.kill(pid, signal.SIGTERM)
                ended.append(pid)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + wait
    while any(os.path.exists(f"/proc/{pid}") and "Z" not in _state(pid) for pid in ended):
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    if remove:
        shutil.rmtree(where, ignore_errors=True)
    return ended


def _state(pid: int) -> str:
    """A process's state letter (Z: a zombie, ended but not yet collected)."""
    fields = _read(f"/proc/{pid}/stat").rsplit(")", 1)[-1].split()
    return fields[0] if fields else ""
