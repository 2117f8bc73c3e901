"""Atomic file writes: a reader (or a resumed run) never sees a half-written result.

Write to a temp file in the target's own directory (so ``os.replace`` is a same-filesystem rename,
atomic on POSIX), then rename it onto the target; on any failure the temp file is removed and an
existing target is left untouched.  A process killed mid-write (SIGKILL, OOM, node failure) cannot
remove its temp file; the next successful write of the same target removes such leftovers.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from pathlib import Path
from typing import Iterator

__all__ = ["atomic_path", "atomic_write_bytes", "atomic_write_text", "check_writable_dir"]


def _umask() -> int:
    # os.umask can only be read by setting it; done once at import, before worker threads exist.
    mask = os.umask(0)
    os.umask(mask)
    return mask


_FILE_MODE = 0o666 & ~_umask()  # what open() would have given; mkstemp alone gives 0600


def _temp_pattern(path: Path) -> re.Pattern:
    # mkstemp's random part has no dot, so temps of `x.npz` never match those of `x.y.npz`.
    return re.compile(re.escape(f".{path.stem}.") + r"[A-Za-z0-9_]+" + re.escape(f".tmp{path.suffix}"))


def _remove_stale_temps(path: Path, current: Path, before_ns: int) -> None:
    """Remove temp files of ``path`` left by killed writers: modified before ``current`` was created.

    A concurrent writer of the same target keeps its temp's mtime fresh while it writes, so it is spared.
    """
    pattern = _temp_pattern(path)
    with os.scandir(path.parent) as it:
        for entry in it:
            if entry.name == current.name or not pattern.fullmatch(entry.name):
                continue
            with contextlib.suppress(OSError):  # gone already, or not ours to remove
                if entry.is_file(follow_symlinks=False) and entry.stat().st_mtime_ns < before_ns:
                    os.unlink(entry.path)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temp path next to ``path``; on success it is fsynced and ``os.replace``d onto ``path``.

    The temp name keeps the target's suffix (``.x.1a2b.tmp.npz``) so writers that choose a format or
    append an extension from the name (``np.savez``, ``savefig``) behave as for the real path.
    Parent directories are created.  On an exception the temp file is removed and the error re-raised.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=f".tmp{path.suffix}", dir=path.parent)
    created_ns = os.fstat(fd).st_mtime_ns  # the filesystem's clock, as the leftovers' mtimes are
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        with open(tmp, "rb") as fh:  # durability: data on disk before the rename makes it visible
            os.fsync(fh.fileno())
        os.chmod(tmp, _FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    _remove_stale_temps(path, tmp, created_ns)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically; returns the path."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def atomic_write_text(path: str | os.PathLike, text: str, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` atomically (``\\n`` newlines kept as is); returns the path."""
    return atomic_write_bytes(path, text.encode(encoding))


def check_writable_dir(path: str | os.PathLike, what: str | None = None) -> Path:
    """Raise :class:`~bayesncl.core.errors.OutputError` unless ``path`` is, or can be created as, a folder this
    process can write.  Creates nothing: it probes the folder, or its nearest existing ancestor, with a
    temp file.  Commands call it before any work, so a bad ``--out`` fails in a second, not after hours.
    ``what`` starts the message (default ``--out <path>``).
    """
    from .errors import OutputError

    path = Path(path)
    what = what or f"--out {path}"
    probe = path
    try:
        while not probe.exists() and probe != probe.parent:
            if probe.is_symlink():  # a dangling link: mkdir would fail on it
                raise OutputError(f"{what}: {probe} is a broken symbolic link; remove it or choose another location")
            probe = probe.parent
        if not probe.is_dir():
            raise OutputError(f"{what}: {probe} is a file, not a folder; choose another location")
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as e:  # no permission to look, or to write
        where = "" if probe == path else f" (the folder would be created in {probe})"
        raise OutputError(f"{what}: cannot write there{where}: {e.strerror}; choose a location you can write")
    return path
