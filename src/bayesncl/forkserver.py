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
command, and a workflow run ends its own servers when it ends (end_servers, common.smk). One server serves one
interpreter, package source, environment and process context: the socket's name hashes sys.executable,
sys.path, every source file's name and mtime, the variables libraries read when imported (TORCH*, CUDA*, OMP*,
LC_*, ...) and what a child inherits from its parent rather than from the request (umask, nice, CPU affinity,
limits, cgroup, ids, capabilities, namespaces), so a job always runs with its own. Signals its client ignored
(nohup, `&` in a script) stay ignored in the command, and the client does not pass them on.

Everything lives in a folder of this user's alone (BAYESNCL_FORKSERVER_DIR, else $XDG_RUNTIME_DIR/bayesncl,
else $TMPDIR or /tmp/bayesncl-<uid>; refused unless it is a real folder owned by the user that no one else may
write), and the client talks only to a server of its own uid (SO_PEERCRED). Whatever keeps the server from
answering (a long socket path, something else at it, a folder it may not write, a listener that answers garbage
or nothing for HELLO_TIMEOUT, a server that dies while starting) is one line on stderr, and the command then runs
in the client's own process: never a traceback, never a long wait. Streams the client was started without, and
signals before the server answered, are as for a plain process (run_command).

The `bayesncl` script is `entry()` here (and `python -m bayesncl`): a routed command goes to the server before
anything else is imported, so the client imports only the standard library (and bayesncl.errors, constants);
any other runs bayesncl.cli in this process. Each job's start-up time is bayesncl.startup's.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import sys
import time

from .errors import REQUEUE_EXIT, TERMINATED  # constants only: the client imports nothing heavy

ENV = "BAYESNCL_FORKSERVER"  # "1": run commands through the fork server
DIR_ENV = "BAYESNCL_FORKSERVER_DIR"  # the folder of the sockets (private to the user)
IDLE_SECONDS = float(os.environ.get("BAYESNCL_FORKSERVER_IDLE", "120"))
START_TIMEOUT = 120.0  # seconds a client waits for a server it started to listen (a cold import of torch: ~15 s)
# Seconds a client waits for the command's pid: the server reads requests without blocking and forks at once, so a
# listener silent this long is given up (then the command runs in the client's process). Lifted once it answers.
HELLO_TIMEOUT = float(os.environ.get("BAYESNCL_FORKSERVER_HELLO", "5"))
# Seconds the server keeps a connection whose request has not all come; other clients are served meanwhile.
REQUEST_TIMEOUT = float(os.environ.get("BAYESNCL_FORKSERVER_REQUEST", "10"))
MAX_MESSAGE = 1 << 24  # bytes: a longer frame is not a message of ours
SUN_PATH_MAX = 107  # bytes of a Unix socket's path (108 with its NUL)
TMP_SUFFIX_MAX = len(".4194304.tmp")  # the server binds <socket>.<pid>.tmp first
# What the commands of a workflow job import; the server imports them once. A module missing here is imported
# by the child itself (slower, never wrong).
PRELOAD = ("numpy", "torch", "torchvision", "bayesncl.cli", "bayesncl.train", "bayesncl.evaluation.runner",
           "bayesncl.evaluation.sections", "bayesncl.evaluation.cost", "bayesncl.evaluation.dynamics",
           "bayesncl.report.summary", "pandas", "scipy.stats")
# Environment variables that libraries read when imported: a server is only reused under the same values.
IMPORT_ENV_PREFIXES = ("TORCH", "PYTORCH", "CUDA", "OMP", "MKL", "OPENBLAS", "KMP", "GOMP", "NUMEXPR", "PYTHON",
                       "MPLBACKEND", "LD_", "LC_", "LANG", "TZ")
# /proc/self/status lines a forked child inherits from the server, not from its client: part of the server's key.
CONTEXT_STATUS = ("Umask", "Uid", "Gid", "Groups", "NoNewPrivs", "Seccomp", "CapInh", "CapPrm", "CapEff", "CapBnd",
                  "CapAmb", "Cpus_allowed_list", "Mems_allowed_list")
# Signals the client passes on to the command (those it does not ignore).
FORWARDED = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")


class Unavailable(Exception):
    """No server can run this command; the message is the one line that says why."""

_child = False  # True in this process once it runs a command itself: never route again


# --------------------------------------------------------------------------- the socket
def _sources() -> list[tuple[str, int]]:
    """The package's modules with their mtimes. Only names Python can import: an editor's lock file
    (`.#train.py`, often a dangling link) or a file that vanishes meanwhile is no module."""
    pkg = os.path.dirname(os.path.abspath(__file__))
    found = []
    for folder, _, files in os.walk(pkg):
        for name in files:
            if name.endswith(".py") and name[:-3].isidentifier():
                try:
                    found.append((os.path.join(folder, name), os.stat(os.path.join(folder, name)).st_mtime_ns))
                except OSError:
                    pass
    return sorted(found)


def _read(path: str) -> str:
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return ""


def context() -> tuple:
    """What a forked child inherits from the server instead of its client: umask, ids, capabilities, CPU and
    memory affinity (/proc/self/status), nice, limits, cgroup, OOM score, namespaces and root."""
    status = [line for line in _read("/proc/self/status").splitlines() if line.split(":")[0] in CONTEXT_STATUS]
    try:
        nice = os.getpriority(os.PRIO_PROCESS, 0)
    except OSError:
        nice = None
    links = []
    for name in ("ns/cgroup", "ns/ipc", "ns/mnt", "ns/net", "ns/pid", "ns/user", "ns/uts", "root"):
        try:
            links.append(os.readlink(f"/proc/self/{name}"))
        except OSError:
            links.append("")
    return (status, nice, _read("/proc/self/limits"), _read("/proc/self/cgroup"),
            _read("/proc/self/oom_score_adj"), links)


def _digest() -> str:
    import hashlib

    env = sorted((k, v) for k, v in os.environ.items() if k.startswith(IMPORT_ENV_PREFIXES))
    key = repr((sys.executable, sys.path[1:], _sources(), env, os.getuid(), context()))
    return hashlib.blake2b(key.encode(), digest_size=8).hexdigest()


def folder() -> str:
    """The user's socket folder: BAYESNCL_FORKSERVER_DIR (made absolute), else $XDG_RUNTIME_DIR/bayesncl, else
    <$TMPDIR or /tmp>/bayesncl-<uid>."""
    given = os.environ.get(DIR_ENV)
    if given:
        return os.path.abspath(given)  # the server starts in /: a relative folder would be another folder there
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        return os.path.join(runtime, "bayesncl")
    return os.path.join(os.environ.get("TMPDIR") or "/tmp", f"bayesncl-{os.getuid()}")


def run_folder(workdir: str) -> str:
    """A workflow's own socket folder, named after its working folder (one per workflow: the run ends its
    servers without ending another workflow's); the first client makes it (mode 700)."""
    import hashlib

    base = os.environ.get("XDG_RUNTIME_DIR")
    if not (base and os.path.isdir(base)):
        base = os.environ.get("TMPDIR") or "/tmp"
    tag = hashlib.blake2b(os.path.realpath(workdir).encode(), digest_size=4).hexdigest()
    return os.path.join(base, f"bncl-{os.getuid()}-{tag}")


def socket_path() -> str:
    """The server socket for this interpreter, source, environment and context, in folder()."""
    return os.path.join(folder(), f"{_digest()}.sock")


def _private(path: str) -> None:
    """Make `path`'s folder (mode 700) or check it: a real folder, this user's, no one else may write to it."""
    import stat

    where = os.path.dirname(path)
    try:
        os.makedirs(where, mode=0o700, exist_ok=True)
        st = os.lstat(where)
    except OSError as exc:
        raise Unavailable(f"cannot make the socket folder {where}: {exc.strerror}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise Unavailable(f"the socket folder {where} is not a folder (a link?); set {DIR_ENV} to a folder of yours")
    if st.st_uid != os.getuid() or st.st_mode & 0o022:
        raise Unavailable(f"the socket folder {where} is not this user's alone (owner uid {st.st_uid}, mode "
                          f"{stat.S_IMODE(st.st_mode):o}); set {DIR_ENV} to a folder only you may write to")
    if len(os.fsencode(path)) + TMP_SUFFIX_MAX > SUN_PATH_MAX:
        raise Unavailable(f"the socket path {path} is too long for a Unix socket ({len(os.fsencode(path))} bytes, "
                          f"at most {SUN_PATH_MAX - TMP_SUFFIX_MAX}); set {DIR_ENV} to a shorter folder")
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise Unavailable(f"cannot read {path}: {exc.strerror}") from None
    if not stat.S_ISSOCK(st.st_mode):
        raise Unavailable(f"{path} is not a socket; remove it")


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
    size = struct.unpack("!I", head)[0]
    if size > MAX_MESSAGE:
        raise ValueError(f"a frame of {size} bytes")
    body = _recv_exact(conn, size)
    if body is None:
        return None
    message = json.loads(body)
    if not isinstance(message, dict):
        raise ValueError("a message that is not an object")
    return message


# --------------------------------------------------------------------------- client
def _peer_uid(conn: socket.socket) -> int | None:
    """The uid of the process at the other end (SO_PEERCRED); None where the platform cannot tell."""
    if not hasattr(socket, "SO_PEERCRED"):
        return None
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


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
                server = subprocess.Popen([sys.executable, "-m", "bayesncl.forkserver", path],
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
    from .startup import process_started

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


def run_command(argv: list[str]) -> int:
    """Run `bayesncl <argv>` in a child of the fork server; its exit code. Where no server can start it (a line
    says why), the command runs in this process instead. A signal before the request is sent does what it does
    to a plain process (SIGTERM: the rerun line, exit 75); one after it reaches the command once it runs."""
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
        return _run_here(argv)
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


def _child_main(conn: socket.socket, listener: socket.socket, request: dict, fds: list[int]) -> None:
    """In the forked child: become the client's process, run the command, report its exit code, exit."""
    import threading
    import traceback

    global _child
    from .startup import as_forked_child, record_usage

    _child = True
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


def serve(path: str) -> None:
    """Listen on `path` until IDLE_SECONDS pass without a command and no child runs, or the socket file is
    replaced or removed."""
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
                    _child_main(sock, listener, request, waiting.fds)
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
        if b"bayesncl.forkserver" in argv and os.fsencode(sock) in argv and pid != os.getpid():
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


if __name__ == "__main__":  # the server: `python -m bayesncl.forkserver SOCKET`, started by the first client;
    # `python -m bayesncl.forkserver --end FOLDER`: end the servers of FOLDER and remove it (.ci/run)
    from bayesncl import forkserver as _fs  # the package's module: its flags are the ones in use

    if sys.argv[1] == "--end":
        _fs.end_servers(sys.argv[2])
    else:
        _fs.serve(sys.argv[1])
