"""What each job of the workflow cost: Snakemake's `benchmark:` files collected into one CSV, and the totals.

Every rule writes `<results>/benchmarks/<rule>/<run>.tsv` (`<rule>.tsv` for the one-off rules; the atlas's
`<run>` is its dataset) in Snakemake's extended format, which also records the rule, its wildcards and the
resources the job was given. `summary/jobs.csv` has one row per job:

    rule, run, seconds (wall), max_rss_mb (peak resident memory; NA when the job ended before Snakemake's
    first sample), gpus (the GPUs the job held: its `gpu` resource; NA where the file does not say),
    cpu_seconds (NA like max_rss_mb), startup_seconds (process start to the start of the job's work:
    interpreter, imports, loading; from <run>.start.json beside the record, which bayesncl.core.startup.mark_ready
    writes; NA where the job wrote none; a job run by the fork server also records its own peak memory and CPU
    seconds there, which replace the benchmark's, measured on the client), benchmark (the file)

and `summary/jobs.md` the totals per rule and the GPU-hours of the grid as run (seconds x GPUs held):
`totals`, the one aggregation of jobs (the report's provenance page reads it too); NA where nothing was measured.
"""

from __future__ import annotations

import ast
import io
import json
import math
from pathlib import Path

import pandas as pd

from ..core.atomic import atomic_write_text
from ..core.errors import DataError
from ..core.startup import DECIMALS, clock_tick

__all__ = ["COLUMNS", "WALL_STEP", "collect", "read_jobs", "read_row", "startup_bound", "startup_share", "totals",
           "write_jobs"]

COLUMNS = ["rule", "run", "seconds", "max_rss_mb", "gpus", "cpu_seconds", "startup_seconds", "benchmark"]
# Snakemake writes a job's wall seconds `s` as f"{round(s, 4):.2f}" (snakemake.benchmark.BenchmarkRecord.to_tsv):
# to the nearest step of this; a job under 5 ms records 0.00.
WALL_STEP = 0.01


def startup_bound(seconds):
    """The longest start-up a job can record beside a benchmark that recorded `seconds` (a number or a Series).
    The start-up is part of the wall time (the job's process starts after Snakemake's clock: the shell forks it
    after reading its command), but each is written at its own resolution: `s` up to half a WALL_STEP short, the
    process's start read in whole clock ticks (up to a tick early: the start-up up to a tick long), and one
    millisecond for the start-up's rounding to 10**-DECIMALS s, `s`'s first rounding to 0.1 ms and float error
    (bayesncl.core.startup)."""
    return seconds + WALL_STEP / 2 + clock_tick() + 10.0 ** -DECIMALS


def _literal(text) -> dict:
    try:
        value = ast.literal_eval(text) if isinstance(text, str) else None
    except (ValueError, SyntaxError):
        return {}
    return value if isinstance(value, dict) else {}


def _number(value) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return math.nan
    return out if math.isfinite(out) else math.nan


_FIX = "remove it, or rerun the job that writes it (snakemake --forcerun <rule>)"


def _record(path: Path) -> dict:
    """The last record of a benchmark file; DataError naming the file when it has none with wall seconds."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise DataError(f"{path}: not a text file; expected Snakemake's benchmark record (tab-separated, a header "
                        f"and a row); {_FIX}") from None
    except OSError as exc:
        raise DataError(f"{path}: cannot be read ({exc.strerror}); {_FIX}") from None
    lines = [line for line in text.splitlines() if line.strip()]
    for number, line in enumerate(lines[1:], start=2):  # pandas would take surplus fields for an index
        if line.count("\t") != lines[0].count("\t"):
            raise DataError(f"{path}: not a benchmark table (line {number} has {line.count(chr(9)) + 1} fields, the "
                            f"header {lines[0].count(chr(9)) + 1}); {_FIX}")
    try:
        table = pd.read_csv(io.StringIO(text), sep="\t", dtype=str, keep_default_na=False)
    except pd.errors.EmptyDataError:
        raise DataError(f"{path}: empty; expected Snakemake's benchmark record (a header and a row); {_FIX}") from None
    except (pd.errors.ParserError, ValueError) as exc:
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DataError(f"{path}: not a benchmark table ({why}); {_FIX}") from None
    if "s" not in table.columns:
        raise DataError(f"{path}: no column 's' (the wall seconds) in its header; expected Snakemake's benchmark "
                        f"record; {_FIX}")
    if not len(table):
        raise DataError(f"{path}: a header but no record; {_FIX}")
    rec = table.iloc[-1].to_dict()
    seconds = _number(rec["s"])
    if math.isnan(seconds) or seconds < 0:
        raise DataError(f"{path}: column 's' is {str(rec['s'])[:40]!r}, not a number of seconds; {_FIX}")
    return rec


def _own_record(path: Path) -> dict:
    """The job's own record, <run>.start.json beside its benchmark file (bayesncl.cli.forkserver): start-up seconds,
    and for a job run by the fork server its process's peak memory and CPU seconds; {} when absent or
    unreadable (a measurement, never a reason to fail the table)."""
    try:
        record = json.loads(path.with_suffix(".start.json").read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def read_row(path: Path, root: Path) -> dict:
    """One benchmark file under `root` as its jobs.csv row (COLUMNS); DataError naming the file when it has no
    record of wall seconds."""
    parts = path.relative_to(root).with_suffix("").parts
    rule, run = parts[0], "/".join(parts[1:])
    rec = _record(path)
    resources = _literal(rec.get("resources"))
    if "rule_name" in rec and rec["rule_name"] not in ("", "-"):
        rule = rec["rule_name"]
    gpus = _number(resources.get("gpu", 0)) if "resources" in rec else math.nan
    own = _own_record(path)
    # A forked job's benchmark measured only its client: its memory and CPU time come from its own record.
    forked = own.get("forkserver") is True and "max_rss_mb" in own
    return {"rule": rule, "run": run, "seconds": _number(rec.get("s")),
            "max_rss_mb": _number(own["max_rss_mb"] if forked else rec.get("max_rss")), "gpus": gpus,
            "cpu_seconds": _number(own.get("cpu_seconds") if forked else rec.get("cpu_time")),
            "startup_seconds": _number(own.get("startup_seconds")), "benchmark": str(path)}


def collect(benchmarks: str | Path) -> pd.DataFrame:
    """One row per benchmark file under `benchmarks` (columns COLUMNS), sorted by rule and run. A missing folder,
    one without benchmark files, or a file without a record of wall seconds is a DataError naming it."""
    root = Path(benchmarks)
    if not root.is_dir():
        state = "is a file, not a folder" if root.exists() else "does not exist"
        raise DataError(f"--benchmarks {root} {state}; give the workflow's <results>/benchmarks folder")
    rows = [read_row(p, root) for p in sorted(root.rglob("*.tsv"))]
    if not rows:
        raise DataError(f"--benchmarks {root}: no benchmark files (<rule>/<run>.tsv) in it; give the workflow's "
                        f"<results>/benchmarks folder after a run")
    return pd.DataFrame(rows, columns=COLUMNS).sort_values(["rule", "run"], kind="stable", ignore_index=True)


def read_jobs(path: str | Path) -> pd.DataFrame:
    """jobs.csv back, its numeric columns as floats (NA: NaN); columns it lacks are left out."""
    df = pd.read_csv(path)
    for col in ("seconds", "max_rss_mb", "gpus", "cpu_seconds", "startup_seconds"):
        if col in df:
            df[col] = pd.to_numeric(df[col], errors="coerce")
    return df


def _aggregate(rule: str, jobs: pd.DataFrame) -> dict:
    """One rule's (or all jobs') costs. A value no job measured is NaN (missing), never 0."""
    seconds = jobs["seconds"]
    rss = jobs["max_rss_mb"] if "max_rss_mb" in jobs else pd.Series(math.nan, index=jobs.index)
    gpus = jobs["gpus"] if "gpus" in jobs else pd.Series(math.nan, index=jobs.index)
    startup = jobs["startup_seconds"] if "startup_seconds" in jobs else pd.Series(math.nan, index=jobs.index)
    return {"rule": rule, "jobs": int(len(jobs)), "unmeasured": int(seconds.isna().sum()),
            "seconds": float(seconds.sum(min_count=1)), "median_seconds": float(seconds.median()),
            "max_rss_mb": float(rss.max()), "gpu_hours": float((seconds * gpus).sum(min_count=1) / 3600.0),
            "startup_seconds": float(startup.sum(min_count=1))}


def totals(jobs: pd.DataFrame, all_row: bool = False) -> pd.DataFrame:
    """Per rule, in order of first appearance: jobs, unmeasured (wall time NA), total and median wall seconds,
    the largest peak memory (MB), GPU-hours (seconds x GPUs held, over the jobs that record both) and the
    start-up seconds (summed over the jobs that record them); with
    ``all_row``, a last row "all" over every job. Sums skip missing values and are NaN when every value is
    missing. jobs.md and the report's provenance page (provenance.job_costs) both read this."""
    rows = [_aggregate(str(rule), part) for rule, part in jobs.groupby("rule", sort=False)]
    if all_row:
        rows.append(_aggregate("all", jobs))
    return pd.DataFrame(rows, columns=["rule", "jobs", "unmeasured", "seconds", "median_seconds", "max_rss_mb",
                                       "gpu_hours", "startup_seconds"])


def _fmt(v, digits: int) -> str:
    return "NA" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:,.{digits}f}"


def startup_share(jobs: pd.DataFrame) -> tuple[float, float, int]:
    """(start-up seconds, job seconds, jobs) over the jobs that record both: the share of job time spent before
    the work began (process start, imports, loading)."""
    if "startup_seconds" not in jobs:
        return math.nan, math.nan, 0
    both = jobs[jobs["startup_seconds"].notna() & jobs["seconds"].notna()]
    return float(both["startup_seconds"].sum()), float(both["seconds"].sum()), int(len(both))


def startup_line(jobs: pd.DataFrame) -> str:
    start, total, n = startup_share(jobs)
    if not n:
        return "No job recorded its start-up time."
    return (f"Start-up (process start, imports, loading; {n} of {len(jobs)} jobs record it): {_fmt(start, 1)} s of "
            f"their {_fmt(total, 1)} s, {_fmt(100 * start / total if total else math.nan, 1)}%.")


def render(jobs: pd.DataFrame, smoke: bool = False) -> str:
    per = totals(jobs)
    lines = []
    if smoke:
        lines += ["> **SMOKE RUN**: every job shrunk to test that it runs; these costs are not the grid's.", ""]
    lines += ["| rule | jobs | wall hours | median seconds | start-up seconds | max RSS (MB) | GPU-hours |",
              "|---|---|---|---|---|---|---|"]
    for r in per.itertuples():
        lines.append(f"| {r.rule} | {r.jobs} | {_fmt(r.seconds / 3600, 2)} | {_fmt(r.median_seconds, 1)} | "
                     f"{_fmt(r.startup_seconds, 1)} | {_fmt(r.max_rss_mb, 0)} | {_fmt(r.gpu_hours, 2)} |")
    unknown = int(jobs["gpus"].isna().sum())
    everything = totals(jobs, all_row=True).iloc[-1]
    lines += ["", f"{len(jobs)} jobs, {_fmt(everything.seconds / 3600, 2)} wall hours in all; GPU-hours of the "
                  f"grid as run: {_fmt(everything.gpu_hours, 2)}"
              + (f" ({unknown} jobs do not record their GPUs)" if unknown else "") + ".",
              startup_line(jobs),
              "Peak memory is NA for jobs that ended before Snakemake's first sample."]
    return "\n".join(lines) + "\n"


def write_jobs(benchmarks: str | Path, out_csv: str | Path, smoke: bool = False) -> tuple[Path, Path, str]:
    """Write jobs.csv and jobs.md (beside it); return their paths and the totals text."""
    jobs = collect(benchmarks)
    out_csv = Path(out_csv)
    out_md = out_csv.with_suffix(".md")
    atomic_write_text(out_csv, jobs.to_csv(index=False, na_rep="NA"))
    text = render(jobs, smoke)
    atomic_write_text(out_md, text)
    return out_csv, out_md, text
