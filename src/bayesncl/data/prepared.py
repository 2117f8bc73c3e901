"""The prepared copy of a file-backed image set (ImageNet-100, imagefolder): uint8 [N,3,S,S] in one raw file
per split, read through a memory map, and what it must prove before it is read: its split, its listing and its
content.

Each dataset module lists its files and names its own folder and manifest format; :func:`listing_key`,
:func:`prepare_copy` and :func:`open_copy` are the shared part.

The manifest (``<split>.json``, written last) binds the data file to its split and listing by name
(``<split>-<first 16 hex of the listing key>.u8``), to its image count and byte size, and to a checksum per
block of ``block_bytes`` bytes (blake2b-128). Every open checks the cheap part: split, name, count, size, and
the checksums of the first, the last and ``SAMPLE_BLOCKS`` random blocks. ``bayesncl prepare-imagenet
--verify`` checks every block and decodes again the images of the blocks that differ (:func:`repair_blocks`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import shutil
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from ..core.errors import DataError

__all__ = ["BLOCK_BYTES", "SAMPLE_BLOCKS", "BlockHasher", "bad_blocks", "check_copy", "data_name", "file_blocks",
           "listing_key", "make_dir", "open_copy", "prepare_copy", "read_manifest", "repair_blocks"]

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


def listing_key(header: dict, split_dir: Path, paths: Sequence[str], labels: Sequence[int]) -> str:
    """What a prepared split must match: ``header`` (format, decoder version, stored size, classes) and every
    file's path relative to ``split_dir``, byte size and label."""
    h = hashlib.sha256(json.dumps(header).encode())
    for p, y in zip(paths, labels):
        try:
            size = os.stat(p).st_size
        except OSError as exc:
            raise DataError(f"{p}: cannot read image file ({exc.strerror})") from exc
        h.update(f"{os.path.relpath(p, split_dir)}\0{size}\0{y}\n".encode(errors="surrogateescape"))  # any name
    return h.hexdigest()


def read_manifest(path: Path, fmt: str) -> dict | None:
    """The manifest at ``path`` if it is readable JSON of format ``fmt``, else None."""
    try:
        m = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return m if isinstance(m, dict) and m.get("format") == fmt else None


def make_dir(folder: Path) -> None:
    """Create the prepared copy's folder, or fail in one line naming it and the fix."""
    from ..core.atomic import check_writable_dir
    from ..core.errors import OutputError

    try:
        check_writable_dir(folder, what=f"data.cache_dir: the prepared copy's folder {folder}")
        folder.mkdir(parents=True, exist_ok=True)
    except OutputError as exc:
        raise DataError(f"{exc}; set data.cache_dir (or $BAYESNCL_CACHE) to a folder you can write") from None
    except OSError as exc:
        raise DataError(f"data.cache_dir: cannot create the prepared copy's folder {folder} ({exc.strerror}); set "
                        f"data.cache_dir (or $BAYESNCL_CACHE) to a folder you can write") from None


def open_copy(folder: Path, split: str, *, fmt: str, key: Callable[[], str], count: int,
              stored_size: int) -> tuple[Path | None, str]:
    """``(data file, "")`` when ``folder`` holds a valid copy of this split, else ``(None, why)``. ``key`` is
    called only when a manifest exists (it stats every file)."""
    manifest_path = folder / f"{split}.json"
    if not manifest_path.is_file():
        return None, f"no prepared copy ({manifest_path})"
    data, why, _ = check_copy(read_manifest(manifest_path, fmt), folder, split=split, key=key(), count=count,
                              image_bytes=3 * stored_size * stored_size)
    return data, why


def prepare_copy(folder: Path, split: str, *, fmt: str, decode_version: int, key: str, paths: Sequence[str],
                 stored_size: int, dataset: Any, decode: Callable[[int], bytes], what: str,
                 manifest_fields: dict, workers: int = 0, batch_size: int = 64,
                 verify: bool = False) -> tuple[Path, bool | list[int]]:
    """Decode every image of a split once into ``folder``; returns ``(manifest path, decoded)``.

    ``dataset``: items ``(uint8 [3,S,S], label, background)`` in ``paths``' order (read in ``workers``
    processes); ``decode(i)``: image i's bytes (to mend bad blocks); ``what`` names the dataset in messages;
    ``manifest_fields``: recorded in the manifest besides what the checks read. Nothing is decoded when a valid
    copy exists (``decoded`` False): its split, listing, size and sampled block checksums match (``verify``:
    every block; blocks that differ are decoded again in place, and ``decoded`` is then the list of repaired
    blocks). The images go to a temp file renamed into place once complete and synced
    (``<split>-<key>.u8``); the manifest, written last and atomically, is what the loader checks, so a
    half-written or stale copy is never read.
    """
    import torch

    from ..core.atomic import atomic_path, atomic_write_text
    from .feed import iter_batches
    from .imageset import ImageSet

    if workers < 0:
        raise DataError(f"--workers: {workers} decoding processes; give 0 (decode in this process) or more")
    count, per_image = len(paths), 3 * stored_size * stored_size
    manifest_path = folder / f"{split}.json"
    manifest = read_manifest(manifest_path, fmt)
    data, _, bad = check_copy(manifest, folder, split=split, key=key, count=count, image_bytes=per_image,
                              full=verify)
    if data is not None:
        return manifest_path, False
    if bad:  # only some blocks differ: decode their images again, in place
        data = folder / data_name(split, key)
        left = repair_blocks(data, manifest, bad, per_image, decode)
        if not left:
            return manifest_path, bad
        manifest_path.unlink(missing_ok=True)  # still wrong: the whole copy is made again below
        data.unlink(missing_ok=True)
    data = folder / data_name(split, key)
    whole = data.is_file() and data.stat().st_size == count * per_image  # renamed in only when whole
    make_dir(folder)
    if whole:  # killed between the rename and the manifest: the file was complete and synced
        blocks = file_blocks(data, BLOCK_BYTES)
    else:
        need = count * per_image
        free = shutil.disk_usage(folder).free
        if free < need:
            raise DataError(f"{folder}: {need / 2**30:.1f} GiB needed for the prepared {what} {split} split, "
                            f"{free / 2**30:.1f} GiB free; set data.cache_dir (or $BAYESNCL_CACHE) to a larger disk")
        # Only iter_batches reads this ImageSet: the normalisation constants are never used.
        files = ImageSet(images=None, dataset=dataset, labels=torch.zeros(count, dtype=torch.int64),
                         backgrounds=None, num_classes=1, num_backgrounds=0, mean=(0.0, 0.0, 0.0),
                         std=(1.0, 1.0, 1.0), crop_size=stored_size, name=what)
        hasher = BlockHasher(BLOCK_BYTES)
        with atomic_path(data) as tmp, open(tmp, "wb") as fh:
            for x, _, _ in iter_batches(files, batch_size, shuffle=False, seed=0, drop_last=False, device="cpu",
                                        num_workers=workers):
                chunk = x.numpy().tobytes()
                fh.write(chunk)
                hasher.update(chunk)
            if fh.tell() != count * per_image:  # never expected: the loader checks the size as well
                raise DataError(f"{tmp}: wrote {fh.tell()} bytes, expected {count * per_image}")
        blocks = hasher.finish()
    from PIL import Image, features

    manifest = {"format": fmt, "decode": decode_version, "key": key, "split": split, **manifest_fields,
                "stored_size": stored_size, "count": count, "data_file": data.name, "dtype": "uint8",
                "shape": [count, 3, stored_size, stored_size], "block_bytes": BLOCK_BYTES, "blocks": blocks,
                "pillow": Image.__version__, "libjpeg_turbo": features.version("libjpeg_turbo")}
    atomic_write_text(manifest_path, json.dumps(manifest, indent=1) + "\n")
    for old in folder.glob(f"{split}-*.u8"):  # copies of an older listing; a reader's open map survives this
        if old != data:
            old.unlink(missing_ok=True)
    return manifest_path, not whole
