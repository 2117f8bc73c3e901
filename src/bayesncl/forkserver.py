"""Commands run in processes forked from one that has already imported torch.

Snakemake runs every job as a process of its own; each `bayesncl` process would import torch, torchvision and
NumPy again (about 3 s of the demo's 5-15 s jobs). With BAYESNCL_FORKSERVER=1 (set by the workflow for local
CPU jobs), `bayesncl <command>` becomes a thin client: it hands its arguments, working folder, environment
and its stdin/stdout/stderr to a server that has the heavy modules imported, and the server forks a child that
runs the command as `bayesncl.cli.main` would in a fresh process (same outputs, exit code, SIGTERM handling;
tests/test_forkserver.py checks a run's files are byte-identical). The client forwards SIGTERM/SIGINT/SIGHUP
to the child and the child stops (SIGTERM: checkpoint, exit 75) if its client disappears, so Snakemake's
cancel and kill behave as with a plain process.

The first client starts the server (a daemon in its own session); it exits after IDLE_SECONDS without a
command. One server serves one interpreter, package source and environment: the socket's name hashes
sys.executable, sys.path, every source file's name and mtime and the variables libraries read when imported
(TORCH*, CUDA*, OMP*, MKL*, ...), so an edited source or a changed environment gets a fresh server.

The `bayesncl` script is `entry()` here (and `python -m bayesncl`): a routed command goes to the server before
anything else is imported, so the client imports only the standard library; any other runs bayesncl.cli in
this process. Each job's start-up time is bayesncl.startup's.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import sys
import time

ENV = "BAYESNCL_FORKSERVER"  # "1": run commands through the fork server
IDLE_SECONDS = float(os.environ.get("BAYESNCL_FORKSERVER_IDLE", "120"))
START_TIMEOUT = 120.0  # seconds a client waits for a server it started to listen
# What the commands of a workflow job import; the server imports them once. A module missing here is imported
# by the child itself (slower, never wrong).
PRELOAD = ("numpy", "torch", "torchvision", "bayesncl.cli", "bayesncl.train", "bayesncl.evaluation.runner",
           "bayesncl.evaluation.sections", "bayesncl.evaluation.cost", "bayesncl.evaluation.dynamics",
           "bayesncl.report.summary", "pandas", "scipy.stats")
# Environment variables that libraries read when imported: a server is only reused under the same values.
IMPORT_ENV_PREFIXES = ("TORCH", "PYTORCH", "CUDA", "OMP", "MKL", "OPENBLAS", "KMP", "GOMP", "NUMEXPR", "PYTHON",
                       "MPLBACKEND", "LD_")

_child = False  # True in this process once it runs a command itself: never route again


# --------------------------------------------------------------------------- the socket
def _digest() -> str:
    import hashlib

    pkg = os.path.dirname(os.path.abspath(__file__))
    sources = sorted((os.path.join(folder, name), os.stat(os.path.join(folder, name)).st_mtime_ns)
                     for folder, _, files in os.walk(pkg) for name in files if name.endswith(".py"))
    env = sorted((k, v) for k, v in os.environ.items() if k.startswith(IMPORT_ENV_PREFIXES))
    key = repr((sys.executable, sys.path[1:], sources, env, os.getuid()))
    return hashlib.blake2b(key.encode(), digest_size=8).hexdigest()


def socket_path() -> str:
    """The server socket for this interpreter, source and environment (BAYESNCL_FORKSERVER_DIR: its folder)."""
    folder = os.environ.get("BAYESNCL_FORKSERVER_DIR") or os.environ.get("TMPDIR") or "/tmp"
    return os.path.join(folder, f"bayesncl-{os.getuid()}-{_digest()}.sock")


def _frame(obj: dict) -> bytes:
    """One message: its length (4 bytes), then its JSON."""
    data = json.dumps(obj).encode()
    return struct.pack("!I", len(data)) + data


def _send(conn: socket.socket, obj: dict) -> None:
    conn.sendall(_frame(obj))


def _recv_exact(conn: socket.socket, n: int, buf: bytes = b"") -> bytes | None:
    while len(buf) < n:
        part = conn.recv(n - len(buf))
        if not part:
            return None
        buf += part
    return buf


def _recv(conn: socket.socket, buf: bytes = b"") -> dict | None:
    """The next message (_frame), `buf` its first bytes already read; None when the peer closed first."""
    head = _recv_exact(conn, 4, buf)
    if head is None:
        return None
    body = _recv_exact(conn, struct.unpack("!I", head)[0])
    return None if body is None else json.loads(body)


# --------------------------------------------------------------------------- client
def _connect(path: str) -> socket.socket | None:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        return s
    except OSError:
        s.close()
        return None


def _start_server(path: str) -> socket.socket:
    """Connect, starting the server first if none listens (one starter at a time: a lock file)."""
    import fcntl
    import subprocess

    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        conn = _connect(path)
        if conn is not None:
            return conn
        log = open(path + ".log", "ab")
        subprocess.Popen([sys.executable, "-m", "bayesncl.forkserver", path], stdin=subprocess.DEVNULL,
                         stdout=log, stderr=log, start_new_session=True, close_fds=True,
                         cwd="/")  # nothing in the client's folder may shadow a module
        log.close()
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            conn = _connect(path)
            if conn is not None:
                return conn
            time.sleep(0.02)
    raise OSError(f"the bayesncl fork server did not start in {START_TIMEOUT:.0f} s; see {path}.log")


def run_command(argv: list[str]) -> int:
    """Run `bayesncl <argv>` in a child of the fork server; its exit code. Falls back to running it here when
    no server can be reached (a message says why)."""
    path = socket_path()
    try:
        conn = _connect(path) or _start_server(path)
    except OSError as exc:
        print(f"bayesncl: fork server unavailable ({exc}); running the command in this process", file=sys.stderr)
        return _run_here(argv)
    with conn:
        from .startup import process_started

        request = {"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ), "start": process_started()}
        socket.send_fds(conn, [_frame(request)], [0, 1, 2])
        hello = _recv(conn)
        if hello is None:
            print("bayesncl: the fork server closed the connection before starting the command", file=sys.stderr)
            return 1
        pid = hello["pid"]

        def forward(signum, _frame):
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass

        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, forward)
        done = _recv(conn)
    if done is None:
        print(f"bayesncl: the command's process {pid} ended without an exit status (killed?)", file=sys.stderr)
        return 1
    return int(done["exit"])


def _run_here(argv: list[str]) -> int:
    global _child
    _child = True  # never route again from here
    from .cli import main

    return main(argv)


# --------------------------------------------------------------------------- server
def _preload() -> None:
    import importlib

    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - the child imports it itself, and says why if it must
            print(f"preload {name}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)


def _child_main(conn: socket.socket, listener: socket.socket, request: dict, fds: list[int]) -> None:
    """In the forked child: become the client's process, run the command, report its exit code, exit."""
    import threading
    import traceback

    global _child
    from .startup import as_forked_child, record_usage

    _child = True
    as_forked_child(request.get("start"))
    listener.close()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
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
        from .cli import main

        code = main(request["argv"])
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
            except (OSError, ValueError):
                pass
        try:
            _send(conn, {"exit": int(code or 0)})
        except OSError:
            pass
        os._exit(int(code or 0))


def _same_user(conn: socket.socket) -> bool:
    """Whether the peer runs as this server's user (SO_PEERCRED; True where the platform cannot tell)."""
    if not hasattr(socket, "SO_PEERCRED"):
        return True
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1] == os.getuid()


def serve(path: str) -> None:
    """Listen on `path` until IDLE_SECONDS pass without a command and no child runs, or the socket file is
    replaced or removed."""
    import select

    _preload()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    tmp = f"{path}.{os.getpid()}.tmp"
    listener.bind(tmp)
    os.chmod(tmp, 0o600)  # this user's commands only (also checked per connection below)
    listener.listen(64)
    os.replace(tmp, path)  # published only once it listens
    inode = os.stat(path).st_ino
    children: set[int] = set()
    last = time.monotonic()
    try:
        while True:
            for pid in list(children):
                if os.waitpid(pid, os.WNOHANG)[0]:
                    children.discard(pid)
            ready, _, _ = select.select([listener], [], [], 1.0)
            if ready:
                conn, _ = listener.accept()
                last = time.monotonic()
                if not _same_user(conn):
                    conn.close()
                    continue
                fds = []
                try:
                    head, fds, _, _ = socket.recv_fds(conn, 4, 3)
                    request = _recv(conn, head)
                except (OSError, ValueError):
                    request = None
                if not isinstance(request, dict) or len(fds) != 3:  # not a client's request: drop it
                    for fd in fds:
                        os.close(fd)
                    conn.close()
                    continue
                for stream in (sys.stdout, sys.stderr):  # nothing buffered may be written twice
                    stream.flush()
                pid = os.fork()
                if pid == 0:
                    _child_main(conn, listener, request, fds)
                children.add(pid)
                for fd in fds:
                    os.close(fd)
                conn.close()
                continue
            try:
                if os.stat(path).st_ino != inode:
                    break
            except FileNotFoundError:
                break
            if not children and time.monotonic() - last > IDLE_SECONDS:
                break
    finally:
        listener.close()
        try:
            if os.stat(path).st_ino == inode:
                os.unlink(path)
        except FileNotFoundError:
            pass


def routed() -> bool:
    """Whether this `bayesncl` invocation goes through the fork server."""
    return os.environ.get(ENV) == "1" and not _child


def entry() -> int:
    """The `bayesncl` script: a routed command goes to the server before anything else is imported (the client
    imports only the standard library); any other runs bayesncl.cli here."""
    if routed():
        return run_command(sys.argv[1:])
    from .cli import main

    return main()


if __name__ == "__main__":  # the server: `python -m bayesncl.forkserver SOCKET`, started by the first client
    from bayesncl.forkserver import serve as _serve  # the package's module: its flags are the ones in use

    _serve(sys.argv[1])
