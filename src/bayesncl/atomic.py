"""Atomic file writes: a reader (or a resumed run) never sees a half-written result.

Write to a temp file in the target's own directory (so ``os.replace`` is a same-filesystem rename,
atomic on POSIX), then rename it onto the target; on any failure the temp file is removed and an
existing target is left untouched.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Iterator

__all__ = ["atomic_path", "atomic_write_bytes", "atomic_write_text"]


def _umask() -> int:
    # os.umask can only be read by setting it; done once at import, before worker threads exist.
    mask = os.umask(0)
    os.umask(mask)
    return mask


_FILE_MODE = 0o666 & ~_umask()  # what open() would have given; mkstemp alone gives 0600


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


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically; returns the path."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def atomic_write_text(path: str | os.PathLike, text: str, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` atomically (``\\n`` newlines kept as is); returns the path."""
    return atomic_write_bytes(path, text.encode(encoding))
