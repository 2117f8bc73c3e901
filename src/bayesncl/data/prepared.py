"""What a prepared ImageNet-100 copy must prove before it is read: its split, its listing and its content.

The manifest (``<split>.json``, written last) binds the data file to its split and listing by name
(``<split>-<first 16 hex of the listing key>.u8``), to its image count and byte size, and to a checksum per
block of ``block_bytes`` bytes (blake2b-128). Every open checks the cheap part: split, name, count, size, and
the checksums of the first, the last and ``SAMPLE_BLOCKS`` random blocks. ``bayesncl prepare-imagenet
--verify`` checks every block and decodes again the images of the blocks that differ (:func:`repair_blocks`).
"""

from __future__ import annotations

import hashlib
import math
import os
import random
from pathlib import Path
from typing import Callable, Iterable

__all__ = ["BLOCK_BYTES", "SAMPLE_BLOCKS", "BlockHasher", "bad_blocks", "check_copy", "data_name", "file_blocks",
           "repair_blocks"]

BLOCK_BYTES = 16 * 2**20  # 16 MiB: ~1500 checksums for the 25 GB train split; a sampled open reads 4 blocks
SAMPLE_BLOCKS = 2  # random blocks checked on every open, besides the first and the last


def data_name(split: str, key: str) -> str:
    """The data file's name: its split and its listing, so a manifest cannot point at another split's file."""
    return f"{split}-{key[:16]}.u8"


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


class BlockHasher:
    """Checksums of consecutive ``block_bytes`` blocks of a stream written in pieces of any size."""

    def __init__(self, block_bytes: int = BLOCK_BYTES):
        self.block_bytes = int(block_bytes)
        self.blocks: list[str] = []
        self._buf = bytearray()

    def update(self, data: bytes) -> None:
        self._buf += data
        while len(self._buf) >= self.block_bytes:
            self.blocks.append(_digest(bytes(self._buf[: self.block_bytes])))
            del self._buf[: self.block_bytes]

    def finish(self) -> list[str]:
        if self._buf:
            self.blocks.append(_digest(bytes(self._buf)))
            self._buf.clear()
        return self.blocks


def file_blocks(path: Path, block_bytes: int = BLOCK_BYTES) -> list[str]:
    """Checksums of every block of a file."""
    h = BlockHasher(block_bytes)
    with open(path, "rb") as fh:
        while chunk := fh.read(block_bytes):
            h.update(chunk)
    return h.finish()


def bad_blocks(path: Path, blocks: list[str], block_bytes: int, which: Iterable[int]) -> list[int]:
    """The blocks among ``which`` whose content does not match ``blocks``."""
    bad = []
    with open(path, "rb") as fh:
        for i in sorted(set(which)):
            fh.seek(i * block_bytes)
            if _digest(fh.read(block_bytes)) != blocks[i]:
                bad.append(i)
    return bad


def check_copy(manifest: dict | None, folder: Path, *, split: str, key: str, count: int, image_bytes: int,
               full: bool = False) -> tuple[Path | None, str, list[int]]:
    """``(data file, "", [])`` when the manifest describes a whole copy of this split and listing whose checked
    blocks match; else ``(None, why, bad blocks)``, the bad blocks listed only when everything else matched
    (what :func:`repair_blocks` can mend). ``full``: every block, else the first, the last and a sample."""
    if manifest is None:
        return None, "its manifest is missing or unreadable", []
    if manifest.get("key") != key:
        return None, "it was prepared from other files (the listing, a file size or the decoder changed)", []
    if manifest.get("split") != split:
        return None, f"its manifest is the {manifest.get('split')!r} split's, not the {split!r} split's", []
    want_name = data_name(split, key)
    if manifest.get("data_file") != want_name:
        return None, f"its manifest names the data file {manifest.get('data_file')!r}, not this split's {want_name}", []
    data = folder / want_name
    want = count * image_bytes
    try:
        size = data.stat().st_size if data.is_file() else -1
    except OSError:
        size = -1
    if manifest.get("count") != count or size != want:
        return None, f"{data} is missing or not {want} bytes", []
    blocks, block_bytes = manifest.get("blocks"), manifest.get("block_bytes")
    if (not isinstance(blocks, list) or not isinstance(block_bytes, int) or block_bytes <= 0
            or len(blocks) != math.ceil(want / block_bytes)):
        return None, "its manifest has no block checksums for this file (prepared by an older version)", []
    n = len(blocks)
    which = range(n) if full else {0, n - 1, *random.sample(range(n), min(SAMPLE_BLOCKS, n))}
    try:
        bad = bad_blocks(data, blocks, block_bytes, which)
    except OSError as exc:
        return None, f"{data} cannot be read ({exc.strerror})", []
    if bad:
        shown = ", ".join(map(str, bad[:5])) + (" ..." if len(bad) > 5 else "")
        return None, f"{data}: {len(bad)} block(s) ({shown}) of {block_bytes} bytes differ from their checksums", bad
    return data, "", []


def repair_blocks(data: Path, manifest: dict, bad: list[int], image_bytes: int,
                  decode: Callable[[int], bytes]) -> list[int]:
    """Decode again (``decode(i)``: image i's bytes) every image that overlaps a bad block and write it in place;
    returns the blocks that still differ afterwards (none when the repair worked)."""
    block_bytes, size = manifest["block_bytes"], data.stat().st_size
    images = sorted({i for b in bad
                     for i in range(b * block_bytes // image_bytes,
                                    math.ceil(min((b + 1) * block_bytes, size) / image_bytes))})
    with open(data, "r+b") as fh:
        for i in images:
            fh.seek(i * image_bytes)
            fh.write(decode(i))
        fh.flush()
        os.fsync(fh.fileno())
    touched = {j for i in images for j in range(i * image_bytes // block_bytes,
                                                 ((i + 1) * image_bytes - 1) // block_bytes + 1)}
    return bad_blocks(data, manifest["blocks"], block_bytes, touched)
