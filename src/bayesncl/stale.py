"""What `snakemake` would run on a grid's results, job by job, and why (`bayesncl stale`).

Snakemake reruns a job whose output is missing, whose rerun trigger changed (a param of its own, compared with
Snakemake's record of the params it last ran with: bayesncl.grid.job_trigger, workflow/rules/common.smk) or
whose input is made again; the jobs after it follow. Here the same decision is read from what the jobs wrote:

- a pretraining job: its run's recorded config (``<run>/config.resolved.yaml``, compared on what decides training:
  bayesncl.grid.trigger_config, the record as written, so a key it lacks reads as what runs did before the key,
  config.keys_added, or else "absent") and the plugin code it recorded (``<run>/plugin_code.json``,
  bayesncl.registry.plugin_code) against today's; until it is trained again, the tables whose runs it is in say so
  in their captions (report/tables.py, stale_note; runs.csv's ``stale`` column);
- an evaluation job: the trigger its file records (``eval/<section>.json``'s run block; the workflow hands each job
  its trigger) against today's, and the pretraining or ``features`` job it reads after;
- the atlas after the features of its runs, and the report's jobs (summarize and what follows it) after any
  evaluation job.

A record that is missing is compared as Snakemake compares a missing record of its own, not at all: the job is
named as not compared (on stderr), never as stale. What Snakemake also compares and no job records (NOT_COMPARED)
is named in one line.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from .config import as_recorded, flatten, load_yaml_file, resolve
from .errors import BayesNCLError, RunFileError
from .grid import Run, evaluation_sections, expand_grid, job_trigger, prepared_copies, trigger_diff
from .registry import plugin_code
from .rundir import CODE, CONFIG, EVAL, FINAL, read_code

__all__ = ["NOT_COMPARED", "REPORT_JOBS", "Job", "describe", "planned_jobs", "print_stale", "run_staleness"]

# The report's jobs (workflow/rules/report.smk, document.smk) in the order they run: each reads what an evaluation
# job writes, or what one of them writes; after the atlas (rules/atlas.smk) only those from `jobs` on. `pdf` only
# where the workflow builds the PDF (report.document.builds_pdf).
REPORT_JOBS = ("summarize", "report", "plan", "jobs", "document", "pdf")
AFTER_ATLAS = ("jobs", "document", "pdf")
# What Snakemake compares that no job records here.
NOT_COMPARED = ("not compared here (`snakemake -n` does): the report's jobs' own outputs and params (the grid's text "
                "and file names, --config), an imported checkpoint's hash, files' modification times, the workflow's "
                "rule code, input lists and software environment")


@dataclass(frozen=True)
class Job:
    """A job `snakemake` would run: its rule, what it runs on (a run id, a dataset, a prepared copy's tag; "" for
    the report's jobs), why, whether it was made before (False: its output and record do not exist yet) and the
    file `snakemake --forcerun` takes to make it again ("" where it follows from another job)."""

    rule: str
    target: str = ""
    why: str = ""
    made: bool = True
    output: str = ""

    def line(self) -> str:
        return f"{self.rule}{' ' + self.target if self.target else ''}: {self.why}"


def run_staleness(recorded: dict, run: Run, code: dict[str, str] | None = None) -> dict[str, list]:
    """{key: [recorded value, today's]} where the run's recorded config (as written, not completed with today's
    defaults) and today's differ (training), and {"code of <entry>": [recorded, today's]} where the plugin code it
    recorded (`code`; None: not recorded, not compared) is not today's: every entry either side names."""
    diff = {k: [a, b] for k, a, b in trigger_diff(as_recorded(recorded), run.config, "pretrain")}
    if code is not None:
        diff.update(_code_diff(code, plugin_code(run.config)))
    return diff


def _code_diff(was: dict[str, str], today: dict[str, str]) -> dict[str, list]:
    """{"code of <entry>": [recorded, today's]} for every entry either side names whose code differs."""
    return {f"code of {entry}": [_short(was.get(entry, "absent")), _short(today.get(entry, "absent"))]
            for entry in sorted(set(today) | set(was)) if today.get(entry) != was.get(entry)}


def _short(identity: str) -> str:
    """A code identity as the stale line and the tables' captions show it: a digest by its first 12 digits."""
    return identity[:19] if identity.startswith("sha256 ") else identity


def trigger_change(recorded: dict, today: dict) -> dict[str, list]:
    """{key: [recorded, today's]} between two evaluation triggers (grid.job_trigger, parsed), a key one lacks read
    as "absent"; their plugin code as "code of <entry>"."""
    code = _code_diff(recorded.get("plugin_code") or {}, today.get("plugin_code") or {})
    a = flatten({k: v for k, v in recorded.items() if k != "plugin_code"})
    b = flatten({k: v for k, v in today.items() if k != "plugin_code"})
    return {**{k: [a.get(k, "absent"), b.get(k, "absent")] for k in sorted(set(a) | set(b)) if a.get(k, "absent")
               != b.get(k, "absent")}, **code}


def _recorded_trigger(path: Path) -> dict | None:
    """The trigger an evaluation file records (None: made before files recorded it); a file that is not an
    evaluation's is one RunFileError naming it."""
    fix = "it is the evaluation's: restore it, or evaluate the run again"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise RunFileError(f"{path}: cannot be read as JSON ({getattr(e, 'strerror', None) or e}); {fix}") from None
    run = data.get("run") if isinstance(data, dict) else None
    if not isinstance(run, dict) or not isinstance(run.get("trigger", {}), dict):
        raise RunFileError(f"{path}: no evaluation file (no run block with its trigger); {fix}")
    return run.get("trigger")


def _pretrain(run: Run, folder: Path, compare: bool, unread: dict[str, str]) -> Job | None:
    """The run's pretraining job (import_weights for imported weights), or None where nothing is to be done. A
    folder or file that may not be read raises OSError."""
    rule = "import_weights" if run.imported else "pretrain"
    model = folder / FINAL
    diff: dict = {}
    if compare and not run.imported and (folder / CONFIG).is_file():
        try:
            resolve(file=folder / CONFIG, recorded=True)  # a valid record; compared as written (as Snakemake)
            recorded = load_yaml_file(folder / CONFIG, "recorded config")
            code = read_code(folder) if (folder / CODE).exists() or not plugin_code(run.config) else None
            diff = run_staleness(recorded, run, code)
            if code is None:
                unread[run.run_id] = (f"its plugin code: {folder / CODE} is missing (snakemake compares its own "
                                      "record of it)")
        except BayesNCLError as e:
            unread[run.run_id] = str(e)
    elif compare and not run.imported and model.is_file():
        unread[run.run_id] = f"{folder / CONFIG} is missing (snakemake compares its own record)"
    if diff:  # trained, or begun, under other settings: made again from the start
        return Job(rule, run.run_id, describe(diff), True, str(model))
    return None if model.is_file() else Job(rule, run.run_id, "not made yet", False, str(model))


def _sections(run: Run, folder: Path, trained: Job | None, compare: bool, unread: dict[str, str]) -> list[Job]:
    """The run's evaluation jobs to be done: after its pretraining or its features, missing, or of another trigger."""
    from .evaluation.sections import SECTIONS

    out: list[Job] = []
    features: Job | None = None
    for name in evaluation_sections(run):
        path = folder / EVAL / f"{name}.json"
        made = path.is_file()
        reads = SECTIONS[name].reads
        after = trained if trained is not None and "model" in reads else features if "features" in reads else None
        if after is not None:
            job = Job(name, run.run_id, f"after {after.rule}", made, str(path))
        elif not made:
            job = Job(name, run.run_id, "not made yet", False, str(path))
        else:
            job = None
            if compare:
                try:
                    was = _recorded_trigger(path)
                except BayesNCLError as e:
                    unread[f"{run.run_id} {name}"] = str(e)
                    was = None
                if was is None:
                    unread.setdefault(f"{run.run_id} {name}", "")  # an older file: no trigger recorded
                else:
                    diff = trigger_change(was, json.loads(job_trigger(run.config, "evaluate", name)))
                    job = Job(name, run.run_id, describe(diff), True, str(path)) if diff else None
        if job is not None:
            out.append(job)
            if name == "features":
                features = job
    return out


def planned_jobs(wf: dict, results: str | Path, *, atlas: dict[str, list[str]] | None = None, pdf: bool = False,
                 compare: bool = True, runs: dict[str, Run] | None = None,
                 unread: dict[str, str] | None = None) -> list[Job]:
    """Every job `snakemake` would run on the grid's results under ``results``, in the workflow's order, each with
    why. `atlas`: the atlas's runs per dataset (report.atlas.atlas_runs; None: no atlas); `pdf`: the workflow builds
    the PDF. `compare` False: by which outputs exist alone (no record read). What cannot be compared goes into
    ``unread`` ({run id or "run id section": why; "" for an evaluation file older than its recorded trigger})."""
    runs = expand_grid(wf) if runs is None else runs
    results = Path(results)
    unread = {} if unread is None else unread
    copies, _ = prepared_copies(runs)
    jobs = [Job("prepare_data", tag, "not made yet", False, str(results / "prepared" / f"{tag}.txt"))
            for tag in copies if not (results / "prepared" / f"{tag}.txt").is_file()]
    trained: dict[str, Job | None] = {}
    evaluated: list[Job] = []
    for rid, run in runs.items():
        try:
            trained[rid] = _pretrain(run, results / "runs" / rid, compare, unread)
            evaluated += _sections(run, results / "runs" / rid, trained[rid], compare, unread)
        except OSError as e:  # the run's folder, or results/runs, may not be read: its jobs are not known
            trained[rid] = None
            unread[rid] = f"{e.filename}: cannot be read ({e.strerror})"
    jobs += [j for j in trained.values() if j is not None] + evaluated
    drawn = []
    for ds, rids in (atlas or {}).items():
        files = [results / "figures" / f"atlas_{ds}.{ext}" for ext in ("pdf", "png")]
        made = all(f.is_file() for f in files)
        after = [j.target for j in evaluated if j.rule == "features" and j.target in rids]
        if after or not made:
            drawn.append(Job("atlas", ds, f"after features {', '.join(after)}" if after else "not made yet", made,
                             str(files[0])))
    jobs += drawn
    follow = REPORT_JOBS if evaluated else AFTER_ATLAS if drawn else ()
    made = (results / "summary" / "runs.csv").is_file()
    why = f"after {len(evaluated)} evaluation job(s)" if evaluated else f"after the atlas of {len(drawn)} dataset(s)"
    jobs += [Job(rule, "", why, made) for rule in follow if pdf or rule != "pdf"]
    return jobs


def describe(diff: dict[str, list]) -> str:
    """"train.loss_scaler none (today fp16); ..." """
    return "; ".join(f"{k} {_fmt(a)} (today {_fmt(b)})" for k, (a, b) in diff.items())


def _fmt(v) -> str:
    return v if isinstance(v, str) else json.dumps(v)


def print_stale(wf: dict, results: str | Path, grid_file: str, targets_only: bool = False, all_jobs: bool = False,
                atlas: dict[str, list[str]] | None = None, pdf: bool = False, runs: dict[str, Run] | None = None) -> None:
    """What `bayesncl stale` prints: each job made before that `snakemake` would run again, and why (`all_jobs`:
    the jobs not made yet too; `targets_only`: the outputs `snakemake --forcerun` takes); on stderr each job not
    compared and why, the count and what is not compared here (--targets stays a list of files)."""
    unread: dict[str, str] = {}
    jobs = planned_jobs(wf, results, atlas=atlas, pdf=pdf, runs=runs, unread=unread)
    older = [k for k, why in unread.items() if not why]
    for what, why in unread.items():  # never left out in silence
        if why:
            print(f"{what}: not compared: {why}", file=sys.stderr)
    if older:
        print(f"{len(older)} evaluation job(s) not compared: their files record no trigger (made before bayesncl "
              f"recorded it; evaluate them again to compare them), e.g. {older[0]}", file=sys.stderr)
    stale = [j for j in jobs if j.made]
    new = [j for j in jobs if not j.made]
    if targets_only:
        print("\n".join(j.output for j in stale if j.output))
        return
    for job in jobs if all_jobs else stale:
        print(job.line())
    hint = (f"; make them again: snakemake --cores N --configfile {grid_file} --forcerun $(bayesncl stale --grid "
            f"{grid_file} --targets)") if stale else ""
    print(f"{len(stale)} stale job(s) under {results}{hint}" + (
        f"; {len(new)} job(s) not made yet{'' if all_jobs else ' (--all lists them)'}" if new else ""), file=sys.stderr)
    print(NOT_COMPARED[0].upper() + NOT_COMPARED[1:], file=sys.stderr)
