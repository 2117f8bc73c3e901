"""Where a generated file came from, and what the grid cost.

- ``stamp(grid)``: the one line every generated table, figure and document carries: the commit of the
  checkout that holds the bayesncl code (with "+ uncommitted changes" when tracked files differ from it)
  and the grid config file(s) with their SHA-256 (a grid and its overlays: each, in order). Tables and
  Markdown get it as a comment under their "do not edit" line (``stamp_text``, when tables.write_table writes
  them); figures in their metadata (PDF Subject, PNG Comment).
- ``collect(...)``: the report's provenance page: the stamp's parts, seeds and runs, package versions,
  the machine, the date, and wall time / GPU-hours per rule from ``summary/jobs.csv`` when the workflow
  wrote one (columns rule, run, seconds, max_rss_mb and, when known, gpus: GPUs the job held).

No date goes into the stamp: the same code, grid and results give the same bytes.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import math
import os
import platform
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path

__all__ = ["GitState", "Provenance", "collect", "file_sha256", "git_state", "grid_files", "job_costs", "machine",
           "stamp", "stamp_text", "versions"]

PACKAGES = ("torch", "torchvision", "snakemake", "dvc", "numpy", "pandas", "matplotlib")
HASH_CHARS = 12  # of a grid file's SHA-256: enough to tell two configs apart in print


@dataclass(frozen=True)
class GitState:
    commit: str | None  # full hash; None outside a git checkout
    dirty: bool         # tracked files differ from the commit (untracked files do not count)
    root: str | None

    def text(self) -> str:
        if self.commit is None:
            return "commit unknown (not a git checkout)"
        return f"commit {self.commit}" + (" + uncommitted changes" if self.dirty else "")


def _git(args: list[str], cwd: Path) -> str | None:
    try:
        r = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout.strip() if r.returncode == 0 else None


def git_state(start: str | os.PathLike | None = None) -> GitState:
    """The checkout holding ``start`` (default: the bayesncl code, else the current folder)."""
    places = [Path(start)] if start is not None else [Path(__file__).resolve().parent, Path.cwd()]
    for place in places:
        root = _git(["rev-parse", "--show-toplevel"], place)
        if root:
            commit = _git(["rev-parse", "HEAD"], place)
            status = _git(["status", "--porcelain", "--untracked-files=no"], place)
            return GitState(commit, bool(status), root)
    return GitState(None, False, None)


def file_sha256(path: str | os.PathLike) -> str | None:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def grid_files(grid) -> list[str]:
    """The grid config's files: none (made by hand), one path, or a grid and its overlays in the order given."""
    if grid is None:
        return []
    if isinstance(grid, (str, os.PathLike)):
        return [str(grid)]
    return [str(g) for g in grid]


def grid_config(grid) -> dict:
    """The workflow config a report came from (its files merged as the workflow merges them); {} for none."""
    files = grid_files(grid)
    if not files:
        return {}
    from ..grid.expand import read_grid_files

    return read_grid_files(files)


def _grid_text(grid) -> str:
    files = grid_files(grid)
    if not files:
        return "no grid config (made by hand)"
    digests = [file_sha256(f) for f in files]
    return "grid " + " + ".join(f"{f} (sha256 {d[:HASH_CHARS]})" if d else f"{f} (not readable)"
                                for f, d in zip(files, digests))


def stamp(grid=None, git: GitState | None = None) -> str:
    """"made by bayesncl at commit <hash> from grid <file> (sha256 <hash>)", each file of a grid and its overlays
    named so ("... + <overlay> (sha256 <hash>)")."""
    git = git or git_state()
    return f"made by bayesncl at {git.text()} from {_grid_text(grid)}"


_COMMENT = {".tex": ("% ", ""), ".md": ("<!-- ", " -->"), ".html": ("<!-- ", " -->"), ".rst": (".. ", "")}


def stamp_text(text: str, suffix: str, line: str) -> str:
    """``text`` of a generated file with suffix ``suffix`` (".tex", ".md", ...), ``line`` added as a comment:
    under its first line when that is a comment (the "generated ...; do not edit" line), else at the top."""
    start, end = _COMMENT[suffix]
    lines = text.splitlines(keepends=True)
    comment = f"{start}{line}{end}\n"
    at = 1 if lines and lines[0].startswith(start.strip()) else 0
    return "".join(lines[:at] + [comment] + lines[at:])


# --------------------------------------------------------------------------- the provenance page
def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in ("bayesncl", *PACKAGES):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _gpus() -> list[str]:
    """GPU names from nvidia-smi (no torch import: this runs in the report step)."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                           text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in r.stdout.splitlines() if line.strip()] if r.returncode == 0 else []


def machine() -> dict[str, str]:
    gpus = _gpus()
    names = {g: gpus.count(g) for g in dict.fromkeys(gpus)}
    return {"cpu": f"{_cpu_model()} ({os.cpu_count()} logical cores)",
            "gpu": ", ".join(f"{n} x {g}" for g, n in names.items()) or "none visible",
            "host": platform.node() or "unknown", "os": f"{platform.system()} {platform.release()}"}


def job_costs(jobs_csv: str | os.PathLike) -> list[dict] | None:
    """Per rule: jobs, unmeasured, wall seconds (sum), max RSS (MB, max) and GPU-hours, from the workflow's
    jobs.csv (bayesncl.report.jobs.COLUMNS), aggregated by ``jobs.totals``; a last row "all" sums them. None
    when there is no such file. Jobs without a measurement (NA) are counted apart, never as 0; a value no job
    measured is NaN ("not recorded")."""
    from .jobs import read_jobs, totals  # pandas: the report step has it; the DAG build does not need it

    path = Path(jobs_csv)
    if not path.is_file():
        return None
    df = read_jobs(path)
    if "rule" not in df or "seconds" not in df:
        return None
    return totals(df, all_row=True).to_dict("records")


def run_devices(results: Path, run_ids: list[str]) -> dict[str, int]:
    """{train.device: runs} from each run's config.resolved.yaml ("auto": CUDA when the job saw a GPU)."""
    import yaml

    out: dict[str, int] = {}
    for rid in run_ids:
        try:
            cfg = yaml.safe_load((results / "runs" / rid / "config.resolved.yaml").read_text(encoding="utf-8"))
            device = str(cfg["train"]["device"])
        except (OSError, yaml.YAMLError, KeyError, TypeError):
            device = "not recorded"
        out[device] = out.get(device, 0) + 1
    return out


@dataclass
class Provenance:
    git: GitState
    grid: list[str]                 # the grid config's files in order (grid_files); none: made by hand
    grid_sha256: list[str | None]   # each file's SHA-256 (None: not readable)
    overrides: dict
    seeds: list[int]
    runs: int
    runs_per_dataset: dict[str, int]
    devices: dict[str, int]     # train.device of the runs' resolved configs: runs per setting
    versions: dict[str, str]
    machine: dict[str, str]
    costs: list[dict] | None    # job_costs(); None: not recorded
    jobs_csv: str
    date: str
    command: str = field(default="")
    plugins: list = field(default_factory=list)  # bayesncl.settings.plugins.loaded(): {module, file, sha256} each
    imported: list = field(default_factory=list)  # runs of imported weights: {run_id, variant, checkpoint, sha256}

    def stamp(self) -> str:
        return stamp(self.grid, self.git)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, default=str) + "\n"


def collect(df, results: str | os.PathLike, grid=None, overrides: dict | None = None) -> Provenance:
    """The provenance of a report made from the runs summary ``df`` (runs.csv) under ``results``."""
    seeds = sorted({int(s) for s in df["seed"] if isinstance(s, (int, float)) and math.isfinite(s)})
    per_ds = {str(k): int(v) for k, v in df["dataset"].value_counts(sort=False).items()} if len(df) else {}
    devices = run_devices(Path(results), [str(r) for r in df["run_id"]]) if "run_id" in df else {}
    jobs = Path(results) / "summary" / "jobs.csv"
    now = datetime.datetime.now(datetime.timezone.utc)
    return Provenance(
        git=git_state(), grid=grid_files(grid), grid_sha256=[file_sha256(f) for f in grid_files(grid)],
        overrides=dict(overrides or {}),
        seeds=seeds, runs=int(len(df)), runs_per_dataset=per_ds, devices=devices, versions=versions(),
        machine=machine(), costs=job_costs(jobs), jobs_csv=str(jobs), date=now.strftime("%Y-%m-%d %H:%M UTC"),
        command=" ".join(Path(a).name if i == 0 else a for i, a in enumerate(sys.argv)), plugins=_plugins(),
        imported=imported_runs(df))


def imported_runs(df) -> list[dict]:
    """The runs of runs.csv whose weights were imported (the released code's checkpoints), with the file's hash."""
    if "imported" not in df:
        return []
    return [{"run_id": str(r["run_id"]), "variant": str(r["variant"]), "checkpoint": str(r.get("imported_from", "")),
             "sha256": str(r["imported"])} for r in df.to_dict("records")
            if isinstance(r["imported"], str) and r["imported"]]


def _plugins() -> list[dict]:
    """Each plugin this process loaded ({module, file, sha256}) with what it registered: each method, dataset and
    evaluation section, its code's identity (plugins.code_identity) and its settings' defaults."""
    from ..settings import registry
    from ..evaluation.sections import SECTIONS
    from ..settings.plugins import code_identity, loaded

    found = [("method", s.name, s.module, s.version, {f"method.{k}": v.default for k, v in s.settings})
             for s in map(registry.METHODS.__getitem__, registry.METHODS)]
    found += [("dataset", s.name, s.module, s.version, {f"data.{s.name}.{k}": v.default for k, v in s.settings})
              for s in map(registry.DATASETS.__getitem__, registry.DATASETS)]
    found += [("section", n, s.module, s.version, {f"eval.{n}.{k}": v.default
                                                  for k, v in registry.SECTION_SETTINGS.get(n, ())})
              for n, s in SECTIONS.items()]
    return [{**p, "entries": [{"kind": kind, "name": name, "code": code_identity(module, version), "settings": settings}
                              for kind, name, module, version, settings in found if module == p["module"]]}
            for p in loaded()]
