"""A run's curves as TensorBoard event files, beside its log.jsonl: `tensorboard --logdir results/runs`.

No TensorBoard package is needed to write them. An event file is a sequence of records (TFRecord framing: the
length, its masked CRC-32C, the bytes, their masked CRC-32C), each an `Event` protocol buffer, encoded here from
the field numbers of TensorBoard's event.proto and summary.proto; tests/test_events.py reads them back with
TensorBoard's own readers. No thread runs and no file stays open past the writer's calls (a fork server's child
forks cleanly); each write is flushed at once.

Pretraining's file follows log.jsonl: appended at each epoch's end after the checkpoint and the log are written,
so it never holds an epoch the log does not. Each start of `bayesncl pretrain` takes the file up where it ends
and appends the log's epochs it lacks (a job killed between its checkpoint and its event). So the file holds each
logged epoch once, in order, after any number of resumes, and a reader following it live only sees it grow. Where
the file goes beyond the log (a checkpoint put back) or ends in a record cut short (a disk full, a machine down),
the start writes a new file instead, which TensorBoard reads as a restart (`TrainingEvents`). Each evaluation
section writes its numbers at the run's last epoch, whole, in a file of its own; a section run again replaces it
(TensorBoard's default reader shows the new numbers; one started with `--load_fast=false` keeps the old point
beside them until it restarts).

Tags: `train/<key>` for each number of a log line (but `epoch`, the step, and `steps`), `dynamics/<key>` (a
histogram over the dimensions, and `dynamics/<key>_mean`) for each per-dimension record of a dynamics epoch
(`af`: activation frequency, `gv`, `sc`, `sc_feature`), `eval/<key>/...` for each number of an evaluation
section's file (its `run` block left out).
"""

from __future__ import annotations

import math
import os
import socket
import struct
import time
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

from .files import EVENTS, LOG

PRETRAIN = "pretrain"  # the writer's name that ends pretraining's file; an evaluation section's is `eval-<section>`
_NOT_CURVES = ("epoch", "steps")  # a log line's step, and a constant
_BINS = 30  # a dynamics histogram's buckets (TensorBoard's own default)


# --------------------------------------------------------------------------------------------- the records
def _crc32c_table() -> tuple[int, ...]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1  # Castagnoli's polynomial, reflected
        table.append(c)
    return tuple(table)


_CRC_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    c = 0xFFFFFFFF
    for b in data:
        c = _CRC_TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def _masked(data: bytes) -> bytes:
    c = crc32c(data)
    return struct.pack("<I", (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF)


def record(data: bytes) -> bytes:
    """One TFRecord: what TensorBoard reads an event file as."""
    head = struct.pack("<Q", len(data))
    return head + _masked(head) + data + _masked(data)


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _message(number: int, data: bytes) -> bytes:  # a length-delimited field: a string, bytes, a message, a packed list
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _double(number: int, x: float) -> bytes:
    return _varint(number << 3 | 1) + struct.pack("<d", x)


def event(wall_time: float, step: int, *, values: Iterable[bytes] = (), file_version: str | None = None,
          start: bool = False) -> bytes:
    """An Event (wall_time 1, step 2, file_version 3, summary 5 of Summary.Value `values`, session_log 7), encoded."""
    body = _double(1, wall_time) + _varint(2 << 3) + _varint(step)
    if file_version is not None:
        body += _message(3, file_version.encode())
    summary = b"".join(_message(1, v) for v in values)
    if summary:
        body += _message(5, summary)
    if start:
        body += _message(7, _varint(1 << 3) + _varint(1))  # SessionLog{status: START}
    return body


def scalar(tag: str, value: float) -> bytes:
    """A Summary.Value (tag 1, simple_value 2: a float32; infinite beyond its range)."""
    with np.errstate(over="ignore"):
        return _message(1, tag.encode()) + _varint(2 << 3 | 5) + np.float32(value).astype("<f4").tobytes()


def histogram(tag: str, values: np.ndarray) -> bytes:
    """A Summary.Value (tag 1, histo 5) of the values' distribution: HistogramProto's min 1, max 2, num 3, sum 4,
    sum_squares 5, then the buckets' right edges 6 and counts 7, packed (the last edge is max, as TensorBoard
    reads it)."""
    v = np.asarray(values, dtype=np.float64)
    counts, edges = np.histogram(v, bins=_BINS)
    histo = b"".join(_double(i, x) for i, x in enumerate(
        (v.min(), v.max(), float(v.size), v.sum(), float(v @ v)), start=1))
    histo += _message(6, edges[1:].astype("<f8").tobytes()) + _message(7, counts.astype("<f8").tobytes())
    return _message(1, tag.encode()) + _message(5, histo)


# ------------------------------------------------------------------------------------------ what a run writes
def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def epoch_values(line: dict, dynamics: dict | None) -> list[bytes]:
    """An epoch's Summary.Values: its log line's numbers, and its dynamics record's where it has one."""
    out = [scalar(f"train/{k}", v) for k, v in line.items() if k not in _NOT_CURVES and _number(v)]
    for key, per_dim in (dynamics or {}).items():
        v = np.asarray(per_dim, dtype=np.float64).ravel()
        v = v[np.isfinite(v)]  # NaN: a dimension never active (its GV, SC undefined)
        if v.size:
            out += [histogram(f"dynamics/{key}", v), scalar(f"dynamics/{key}_mean", float(v.mean()))]
    return out


def section_values(numbers: dict, prefix: str = "eval") -> list[bytes]:
    """Every finite number of an evaluation section's file, at its key path."""
    out = []
    for k, v in numbers.items():
        if isinstance(v, dict):
            out += section_values(v, f"{prefix}/{k}")
        elif _number(v):
            out.append(scalar(f"{prefix}/{k}", v))
    return out


def _records(data: bytes) -> Iterator[tuple[bytes, bytes]]:
    """(the record, its Event) of each whole record from the start of `data`, up to one cut short or damaged."""
    pos = 0
    while pos + 12 <= len(data):
        head = data[pos:pos + 8]
        end = pos + 12 + struct.unpack("<Q", head)[0] + 4
        if data[pos + 8:pos + 12] != _masked(head) or end > len(data) \
                or data[end - 4:end] != _masked(data[pos + 12:end - 4]):
            return
        yield data[pos:end], data[pos + 12:end - 4]
        pos = end


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        b = data[pos]
        n |= (b & 0x7F) << shift
        pos, shift = pos + 1, shift + 7
        if b < 0x80:
            return n, pos


def summary_step(ev: bytes) -> int | None:
    """The step of an encoded Event that holds values (None for one that does not: a file version, a restart)."""
    pos, step, values = 0, 0, False
    while pos < len(ev):
        key, pos = _read_varint(ev, pos)
        wire = key & 7
        if wire == 0:
            n, pos = _read_varint(ev, pos)
            step = n if key >> 3 == 2 else step
        elif wire == 2:
            n, pos = _read_varint(ev, pos)
            pos += n
            values |= key >> 3 == 5
        else:  # 1: a double (wall_time); 5: a float
            pos += 8 if wire == 1 else 4
    return step if values else None


def _new_file(folder: Path, writer: str) -> Path:
    # microseconds: a later file sorts after (TensorBoard's older reader follows a folder's files in name order)
    return folder / f"{EVENTS}.{time.time():.6f}.{socket.gethostname()}.{writer}"


def _header() -> bytes:
    """What every event file opens with; its time is the run's start for TensorBoard's relative time axis."""
    return record(event(time.time(), 0, file_version="brain.Event:2"))


class TrainingEvents:
    """Pretraining's event file: taken up by each start of `bayesncl pretrain` with the epochs its checkpoint logged
    (`log`; `dynamics`, the per-dimension records by epoch), then one `epoch` per epoch's end; `close` when the
    process stops. Nothing runs between those calls (no thread: a fork server's child forks cleanly)."""

    def __init__(self, run_dir: str | Path, log: list[dict], dynamics: dict):
        self.dynamics = dynamics
        folder = Path(run_dir)
        found = sorted(folder.glob(f"{EVENTS}.*.{PRETRAIN}"))
        data = found[-1].read_bytes() if found else b""
        epochs, size, logged = [], 0, 0  # the file's records of the log's epochs, up to where it stops being the log
        for rec, ev in _records(data):
            step = summary_step(ev)
            if step is not None and step > len(log):
                break
            if step is not None:
                epochs.append(rec)
                logged = step
            size += len(rec)
        if found and size == len(data):  # the log's epochs and nothing else: the lacking ones are appended
            self._file = open(found[-1], "ab")  # noqa: SIM115 - closed by close()
        else:
            # A new file (the first, or after one cut short or beyond the log), opening with a session start at step
            # 1: TensorBoard takes a later file's as a restart and drops what it read of the older one from there on.
            # Truncating the older file instead would break a reader part-way into it.
            self._file = open(_new_file(folder, PRETRAIN), "wb")  # noqa: SIM115
            self._file.write(_header() + record(event(time.time(), 1, start=True)) + b"".join(epochs))
        for line in log[logged:]:
            self.epoch(line)

    def epoch(self, line: dict) -> None:
        """Append the epoch of log line `line` (its dynamics record, if any, already in `dynamics`), now."""
        values = epoch_values(line, self.dynamics.get(str(line["epoch"])))
        self._file.write(record(event(time.time(), line["epoch"], values=values)))
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def write_section(run_dir: str | Path, section: str, written: dict) -> None:
    """An evaluation section's numbers (`written`: its eval/<section>.json) at the run's last epoch (its run block's
    `epochs`), in the run folder `run_dir`, in a file of the section's own that replaces the one an earlier run of it
    wrote; nothing where `run_dir` holds no log.jsonl (a checkpoint outside a run folder). Written under a name
    TensorBoard does not read, then renamed: no reader sees it half-written."""
    folder = Path(run_dir)
    if not (folder / LOG).is_file():
        return
    writer = f"eval-{section}"
    values = section_values({k: v for k, v in written.items() if k != "run"})
    partial = folder / f".{writer}.events.partial"
    partial.write_bytes(_header() + record(event(time.time(), written["run"]["epochs"], values=values)))
    for old in folder.glob(f"{EVENTS}.*.{writer}"):
        old.unlink()
    os.replace(partial, _new_file(folder, writer))
