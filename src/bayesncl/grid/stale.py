"""What `snakemake` would run on a grid's results, job by job, and why (`bayesncl stale`).

Snakemake runs a job whose rerun trigger changed (a param of its own, compared with its record of the params the
job last ran with: bayesncl.grid.expand.job_trigger, workflow/rules/common.smk), every job after it, and every job whose
missing output one of those reads (a missing output nothing to run reads is made only where a target of the
workflow needs it). Here the same decision is read from what the jobs wrote:

- a pretraining job: its run's recorded config (``<run>/config.resolved.yaml``, compared on what decides training:
  bayesncl.grid.expand.trigger_config, the record as written, so a key it lacks reads as what runs did before the key,
  config.keys_added, or else "absent") and the plugin code it recorded (``<run>/plugin_code.json``,
  bayesncl.settings.registry.plugin_code) against today's; until it is trained again, the tables whose runs it is in say
  so in their captions (report/tables.py, stale_note; runs.csv's ``stale`` column);
- an evaluation job: the trigger its file records (``eval/<section>.json``'s run block; the workflow hands each job
  its trigger) against today's;
- then what they read and what reads them: the evaluation after pretraining, the sections after ``features``, the
  atlas after the features of its runs, the report's jobs (summarize and what follows it) after any of them.

A record that is missing is compared as Snakemake compares a missing record of its own, not at all: the job is
named as not compared (on stderr), never as stale. What Snakemake also compares and no job records (NOT_COMPARED)
is named in one line.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ..settings.config import as_recorded, flatten, resolve
from ..core.errors import BayesNCLError, RunFileError
from ..core.yamlio import load_yaml_file
from .expand import (Run, evaluation_job, evaluation_sections, expand_grid, job_trigger, prepared_copies,
                     trigger_diff)
from ..settings.registry import plugin_code
from ..runs.files import CODE, CONFIG, EVAL, FINAL, read_code

__all__ = ["NOT_COMPARED", "REPORT_JOBS", "Job", "describe", "planned_jobs", "print_stale", "run_staleness",
           "run_todo", "trigger_change"]

# The report's jobs (workflow/rules/report.smk, document.smk) in the order they run; `pdf` only where the workflow
# builds the PDF (report.document.builds_pdf).
REPORT_JOBS = ("summarize", "report", "plan", "jobs", "document", "pdf")
# What Snakemake compares that no job records here.
NOT_COMPARED = ("not compared here (`snakemake -n` does): the report's jobs' own outputs and params (the grid's text "
                "and file names, --config), an imported checkpoint's hash, files' modification times, the workflow's "
                "rule code, input lists and software environment")


@dataclass(frozen=True)
class Job:
    """A job of the workflow: its rule, what it runs on (a run id, a dataset, a prepared copy's tag; "" for the
    report's jobs), why it runs, whether `snakemake` runs it now (`planned`; False: its output is missing and no job
    to run needs it, so `snakemake` makes it only where a target of the workflow needs it) and the file `snakemake
    --forcerun` takes to make it again ("" for the report's jobs, which follow from the others)."""

    rule: str
    target: str = ""
    why: str = ""
    planned: bool = True
    output: str = ""
    sections: tuple[str, ...] = ()  # a run's evaluation as one job (evaluation_jobs: per_run): the sections it runs

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
    """{key: [recorded, today's]} between two evaluation triggers (grid.expand.job_trigger, parsed), a key one lacks
    read as "absent"; their plugin code as "code of <entry>"."""
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


@dataclass
class _Node:
    """A job while the plan is worked out: its outputs, whether they exist, why it runs (None: not yet known to) and
    what it reads: [(the job that makes it, the files, whether they are ancient inputs)]."""

    job: tuple[str, str]
    outputs: list[Path]
    made: bool
    why: str | None = None
    reads: list = field(default_factory=list)
    note: str = ""  # a run not made whose folder holds one of other settings: what differs
    sections: tuple[str, ...] = ()  # a run's evaluation as one job (evaluation_jobs: per_run): the sections it runs

    def missing(self) -> str:
        return "not made yet" + (f"; its folder holds a run of other settings, replaced: {self.note}" if self.note
                                 else "")


def _pretrain_why(run: Run, folder: Path, unread: dict[str, str]) -> str | None:
    """What differs between the run's record (its config and plugin code) and today's, or None. A folder or file
    that may not be read raises OSError."""
    if run.imported:
        return None
    if not (folder / CONFIG).is_file():
        if (folder / FINAL).is_file():
            unread[run.run_id] = f"{folder / CONFIG} is missing (snakemake compares its own record)"
        return None
    try:
        resolve(file=folder / CONFIG, recorded=True)  # a valid record; compared as written (as Snakemake)
        recorded = load_yaml_file(folder / CONFIG, "recorded config")
        code = read_code(folder) if (folder / CODE).exists() or not plugin_code(run.config) else None
        diff = run_staleness(recorded, run, code)
    except BayesNCLError as e:
        unread[run.run_id] = str(e)
        return None
    if code is None:
        unread[run.run_id] = f"its plugin code: {folder / CODE} is missing (snakemake compares its own record of it)"
    return describe(diff) if diff else None


def _section_why(run: Run, name: str, path: Path, unread: dict[str, str]) -> str | None:
    """Why an evaluation job runs again by its file's recorded trigger against today's, or None."""
    try:
        was = _recorded_trigger(path)
    except BayesNCLError as e:
        unread[f"{run.run_id} {name}"] = str(e)
        return None
    if was is None:
        unread.setdefault(f"{run.run_id} {name}", "")  # an older file: no trigger recorded
        return None
    diff = trigger_change(was, json.loads(job_trigger(run.config, "evaluate", name)))
    return describe(diff) if diff else None


def run_todo(run_dir: str | Path, sections: list[str]) -> set[str]:
    """The jobs of one run folder whose output is missing, judged by its files alone: "pretrain" (or the import)
    where it has no model.pt, and each evaluation section of `sections` without its JSON. Every reader of what a
    run's files leave to do asks here: the plan below, the pre-flight's dry run (through it) and the evaluation
    submission's time request (planning.time_requests)."""
    d = Path(run_dir)
    todo = set() if (d / FINAL).is_file() else {"pretrain"}
    return todo | {s for s in sections if not (d / EVAL / f"{s}.json").is_file()}


def _run_nodes(run: Run, folder: Path, marks: list[Path], compare: bool, unread: dict[str, str],
               per_run: bool = False) -> list[_Node]:
    """The run's pretraining (or import) and evaluation jobs, each with what it reads (the workflow's rules: the
    prepared copy's marker `marks`, ancient; model.pt; features.json) and why it runs by its record; `per_run`: its
    sections as one job (the grid's evaluation_jobs: per_run), which runs where any of them would, and says why each."""
    from ..evaluation.sections import SECTIONS

    model = folder / FINAL
    rule = "import_weights" if run.imported else "pretrain"
    differs = _pretrain_why(run, folder, unread) if compare else None  # its record first: named where unreadable
    sections = evaluation_sections(run)
    todo = run_todo(folder, sections)
    made = "pretrain" not in todo
    trained = _Node((rule, run.run_id), [model], made, differs if made else None,
                    [(("prepare_data", m.stem), [m], True) for m in marks], "" if made else differs or "")
    out = [trained]
    for name in sections:
        path = folder / EVAL / f"{name}.json"
        made = name not in todo
        s = SECTIONS[name]
        reads = {"model": [(trained.job, [model], False)],
                 "features": [(("features", run.run_id), [folder / EVAL / "features.json"], False)],
                 "prepared": [(("prepare_data", m.stem), [m], True) for m in marks]}
        out.append(_Node((name, run.run_id), [path, *(folder / EVAL / f for _, f in s.outputs)], made,
                         _section_why(run, name, path, unread) if compare and made else None,
                         [r for kind in s.reads for r in reads[kind]]))
    if not per_run:
        return out
    parts, own = out[1:], {n.job for n in out[1:]}
    why = "; ".join(f"{n.job[0]}: {n.why}" for n in parts if n.why is not None)
    reads = [r for n in parts for r in n.reads if r[0] not in own]
    return [trained, _Node((evaluation_job(sections), run.run_id), [f for n in parts for f in n.outputs],
                           all(n.made for n in parts), why or None, list({repr(r): r for r in reads}.values()),
                           sections=tuple(sections))]


def planned_jobs(wf: dict, results: str | Path, *, atlas: dict[str, list[str]] | None = None, pdf: bool = False,
                 compare: bool = True, runs: dict[str, Run] | None = None,
                 unread: dict[str, str] | None = None) -> list[Job]:
    """The jobs of the grid's workflow on the results under ``results``: those `snakemake` would run (planned), each
    with why, then those whose output is missing and that no planned job needs, in the workflow's order. As
    Snakemake decides (its DAG's update_needrun): a job whose record differs from today's runs, and every job after
    it; a job it reads whose output is missing runs too, and what follows that (an ancient input that exists passes
    nothing on); a missing output no job to run reads is made only where a target of the workflow needs it (not
    known here: the report's outputs). `atlas`: the atlas's runs per dataset (report.atlas.atlas_runs; None: no
    atlas); `pdf`: the workflow builds the PDF. `compare` False: no record read, and every missing output is to be
    made (the pre-flight's dry run: a superset of what is to run). What cannot be compared goes into ``unread`` ({run
    id or "run id section": why; "" for an evaluation file older than its recorded trigger})."""
    runs = expand_grid(wf) if runs is None else runs
    results = Path(results)
    unread = {} if unread is None else unread
    copies, of = prepared_copies(runs)
    marks = {tag: results / "prepared" / f"{tag}.txt" for tag in copies}
    nodes = {("prepare_data", tag): _Node(("prepare_data", tag), [m], m.is_file()) for tag, m in marks.items()}
    per_run = wf.get("evaluation_jobs") == "per_run"
    for rid, run in runs.items():
        try:
            built = _run_nodes(run, results / "runs" / rid, [marks[t] for t in of[rid]], compare, unread, per_run)
        except OSError as e:  # the run's folder, or results/runs, may not be read: its jobs are not known
            unread[rid] = f"{e.filename}: cannot be read ({e.strerror})"
            continue
        nodes.update((n.job, n) for n in built)
    evaluation = [n.job for n in nodes.values() if n.job[0] not in ("prepare_data", "pretrain", "import_weights")]
    features = {rid: n.job for n in nodes.values() for rid in [n.job[1]] if n.job in evaluation
                and any(f.name == "features.npz" for f in n.outputs)}  # the job that embeds a run (per_run: its one)
    for ds, rids in (atlas or {}).items():
        files = [results / "figures" / f"atlas_{ds}.{ext}" for ext in ("pdf", "png")]
        nodes[("atlas", ds)] = _Node(("atlas", ds), files, all(f.is_file() for f in files), None, [
            (features.get(rid, ("features", rid)), [results / "runs" / rid / EVAL / "features.npz"], False)
            for rid in rids])
    # the report's jobs (workflow/rules/report.smk, document.smk), their outputs not known here: summarize reads every
    # evaluation file; the others, each after the jobs whose outputs it reads
    after = {"summarize": [(job, [f for f in nodes[job].outputs if f.suffix == ".json"], False) for job in evaluation],
             "report": [(("summarize", ""), [], False)],
             "plan": [(("summarize", ""), [], False)],
             "jobs": [(("report", ""), [], False), (("plan", ""), [], False)], "document": [(("jobs", ""), [], False)],
             "pdf": [(("document", ""), [], False)]}
    atlases = [(("atlas", ds), [], False) for ds in atlas or {}]
    for rule in REPORT_JOBS:
        if pdf or rule != "pdf":
            nodes[(rule, "")] = _Node((rule, ""), [], True, None, after[rule] + (atlases if rule == "jobs" else []))
    _plan(nodes, compare)
    planned = [n for n in nodes.values() if n.why is not None]
    n_eval = sum(n.job in evaluation for n in planned)
    out = [Job(n.job[0], n.job[1], (f"after {n_eval} evaluation job(s)" if n_eval else "after the atlas")
               if n.job[0] in REPORT_JOBS else n.why, True, str(n.outputs[0]) if n.outputs else "", n.sections)
           for n in planned]
    return out + [Job(n.job[0], n.job[1], n.missing(), False, str(n.outputs[0]), n.sections)
                  for n in nodes.values() if n.why is None and not n.made]



def _plan(nodes: dict[tuple, _Node], compare: bool) -> None:
    """Set `why` on every job that runs, as Snakemake's DAG does from the jobs that run by their own reason: both
    ways through what they read (Snakemake's bi-directional search)."""
    dependents: dict[tuple, list] = {}
    for n in nodes.values():
        for job, files, ancient in n.reads:
            dependents.setdefault(job, []).append((n.job, files, ancient))
    queue = [n.job for n in nodes.values() if n.why is not None]
    if not compare:
        for n in nodes.values():
            if not n.made and n.outputs:
                n.why = n.missing()
                queue.append(n.job)
    while queue:
        job = queue.pop(0)
        for dep, files, _ in nodes[job].reads:  # what it reads that is missing is made first (a run whose folder
            # may not be read has no jobs here)
            if dep in nodes and nodes[dep].why is None and not all(f.is_file() for f in files):
                nodes[dep].why = nodes[dep].missing()
                queue.append(dep)
        for dependent, files, ancient in dependents.get(job, []):  # what reads it is made again
            if nodes[dependent].why is None and not (ancient and all(f.is_file() for f in files)):
                nodes[dependent].why = f"after {' '.join(x for x in job if x)}"
                queue.append(dependent)


def describe(diff: dict[str, list]) -> str:
    """"train.loss_scaler none (today fp16); ..." """
    return "; ".join(f"{k} {_fmt(a)} (today {_fmt(b)})" for k, (a, b) in diff.items())


def _fmt(v) -> str:
    return v if isinstance(v, str) else json.dumps(v)


def print_stale(wf: dict, results: str | Path, grid_file: str, targets_only: bool = False, all_jobs: bool = False,
                atlas: dict[str, list[str]] | None = None, pdf: bool = False,
                runs: dict[str, Run] | None = None) -> None:
    """What `bayesncl stale` prints: each job `snakemake` would run, and why (`all_jobs`: the jobs whose output is
    missing and that none of them reads too; `targets_only`: the outputs, made before, that `snakemake --forcerun`
    takes); on stderr each job not compared and why, the counts and what is not compared here (--targets stays a
    list of files)."""
    unread: dict[str, str] = {}
    jobs = planned_jobs(wf, results, atlas=atlas, pdf=pdf, runs=runs, unread=unread)
    older = [k for k, why in unread.items() if not why]
    for what, why in unread.items():  # never left out in silence
        if why:
            print(f"{what}: not compared: {why}", file=sys.stderr)
    if older:
        print(f"{len(older)} evaluation job(s) not compared: their files record no trigger (made before bayesncl "
              f"recorded it; evaluate them again to compare them), e.g. {older[0]}", file=sys.stderr)
    planned = [j for j in jobs if j.planned]
    missing = [j for j in jobs if not j.planned]
    if targets_only:
        print("\n".join(j.output for j in planned if j.output and Path(j.output).exists()))
        return
    for job in jobs if all_jobs else planned:
        print(job.line())
    hint = (f"; make them: snakemake --cores N --configfile {grid_file} (exactly these, made before: --forcerun "
            f"$(bayesncl stale --grid {grid_file} --targets))") if planned else ""
    print(f"{len(planned)} job(s) to run under {results}{hint}" + (
        f"; {len(missing)} job(s) whose output is missing and that none of them reads (snakemake makes them where a "
        f"target of the workflow needs them{'' if all_jobs else '; --all lists them'})" if missing else ""),
        file=sys.stderr)
    print(NOT_COMPARED[0].upper() + NOT_COMPARED[1:], file=sys.stderr)
