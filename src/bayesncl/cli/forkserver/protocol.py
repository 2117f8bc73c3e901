"""The fork server's socket: where it lies (a folder of the user's alone, named after the interpreter, source,
environment and process context it serves), who may use it (SO_PEERCRED) and the frames both ends send.
Standard library only: the client imports it before anything heavy."""

from __future__ import annotations

import json
import os
import socket
import struct
import sys

ENV = "BAYESNCL_FORKSERVER"  # "1": run commands through the fork server
DIR_ENV = "BAYESNCL_FORKSERVER_DIR"  # the folder of the sockets (private to the user)
MAX_MESSAGE = 1 << 24  # bytes: a longer frame is not a message of ours
SUN_PATH_MAX = 107  # bytes of a Unix socket's path (108 with its NUL)
TMP_SUFFIX_MAX = len(".4194304.tmp")  # the server binds <socket>.<pid>.tmp first
# Environment variables that libraries read when imported: a server is only reused under the same values.
IMPORT_ENV_PREFIXES = ("TORCH", "PYTORCH", "CUDA", "OMP", "MKL", "OPENBLAS", "KMP", "GOMP", "NUMEXPR", "PYTHON",
                       "MPLBACKEND", "LD_", "LC_", "LANG", "TZ")
# /proc/self/status lines a forked child inherits from the server, not from its client: part of the server's key.
CONTEXT_STATUS = ("Umask", "Uid", "Gid", "Groups", "NoNewPrivs", "Seccomp", "CapInh", "CapPrm", "CapEff", "CapBnd",
                  "CapAmb", "Cpus_allowed_list", "Mems_allowed_list")


class Unavailable(Exception):
    """No server can run this command; the message is the one line that says why."""


def _sources() -> list[tuple[str, int]]:
    """The package's modules with their mtimes. Only names Python can import: an editor's lock file
    (`.#train.py`, often a dangling link) or a file that vanishes meanwhile is no module."""
    pkg = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))  # bayesncl/: this is cli/forkserver/
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


def _peer_uid(conn: socket.socket) -> int | None:
    """The uid of the process at the other end (SO_PEERCRED); None where the platform cannot tell."""
    if not hasattr(socket, "SO_PEERCRED"):
        return None
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]
