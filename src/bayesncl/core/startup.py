"""Each job's start-up time: from its process's start to the start of its work (imports done, inputs loaded).

`mark_ready()` is called where a command's work begins (bayesncl.training.train.pretrain before the first epoch,
bayesncl.evaluation.runner before the first section, each report command after its imports). Once per
process it writes the seconds since the job's process started to the file BAYESNCL_TIMING names, if set:
the workflow sets it beside each job's benchmark record, and `bayesncl jobs` reads it into jobs.csv's
startup_seconds. A job run by the fork server (bayesncl.cli.forkserver) counts from its client's start, and adds
its own peak memory and CPU seconds at its end (Snakemake's benchmark measures only the client). Times are on
the boot clock, the one /proc counts a process's start on. Standard library only.
"""

from __future__ import annotations

import json
import os
import sys
import time

__all__ = ["DECIMALS", "TIMING_ENV", "as_forked_child", "boot_clock", "clock_tick", "mark_ready", "process_started",
           "record_usage"]

TIMING_ENV = "BAYESNCL_TIMING"  # a path: where mark_ready writes this job's start-up seconds
DECIMALS = 3  # the start-up is written in whole milliseconds

_process_start: float | None = None  # the job's process start, boot clock (the client's, in a forked child)
_ready_marked = False
_forked = False  # a child of the fork server


def as_forked_child(client_start: float | None) -> None:
    """In a child of the fork server: the job's process is its client, started at `client_start`."""
    global _forked, _process_start
    _forked, _process_start = True, client_start


def boot_clock() -> float:
    """Seconds since boot (CLOCK_BOOTTIME): the clock /proc counts a process's start on."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def clock_tick() -> float:
    """The seconds of one clock tick, the unit /proc counts a process's start in (process_started; 1/100 s on Linux)."""
    return 1 / os.sysconf("SC_CLK_TCK")


def process_started() -> float | None:
    """When this process started, in boot_clock() seconds (/proc/self/stat, in whole clock ticks: the start read
    is up to one tick early); None where /proc or the clock is missing (then no start-up is recorded)."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def _write_record(update: dict) -> None:
    """Merge `update` into the job's record (the file BAYESNCL_TIMING names; a record left by an earlier run is
    replaced at the first write), atomically; a failed write is one line on stderr, never the job's failure."""
    path = os.environ.get(TIMING_ENV)
    if not path:
        return
    from .atomic import atomic_write_text  # here, not at import: the fork server's client imports this module

    record = {}
    if _ready_marked:
        try:
            with open(path) as f:
                record = json.load(f)
        except (OSError, ValueError):
            pass
    try:
        atomic_write_text(path, json.dumps({**record, **update}) + "\n")
    except OSError as exc:
        print(f"bayesncl: could not write {TIMING_ENV} {path}: {exc.strerror}", file=sys.stderr)


def mark_ready() -> float | None:
    """Record, once per process, the seconds from the job's process creation to now (the work begins) in the
    file BAYESNCL_TIMING names. Returns them, or None when already marked."""
    global _ready_marked
    if _ready_marked:
        return None
    start = _process_start if _process_start is not None else process_started()
    if start is None or not hasattr(time, "CLOCK_BOOTTIME"):
        return None
    seconds = max(0.0, boot_clock() - start)
    _write_record({"startup_seconds": round(seconds, DECIMALS), "forkserver": _forked})
    _ready_marked = True
    return seconds


def record_usage() -> None:
    """In a forked child, at its end: its own peak memory and CPU seconds (Snakemake's benchmark sees only the
    client's process, so `bayesncl jobs` takes these instead)."""
    import resource

    use = resource.getrusage(resource.RUSAGE_SELF)
    _write_record({"max_rss_mb": round(use.ru_maxrss / 1024, 2), "cpu_seconds": round(use.ru_utime + use.ru_stime, 3)})
