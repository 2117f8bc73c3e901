"""The grid's progress at a glance (`bayesncl status RESULTS`): every run done, running, failed or waiting.

Read from what the runs write (bayesncl.runs.files) and, with the workflow config, from the plan (bayesncl.grid.expand):
nothing is locked or written, so it works while the grid runs, on the submitting machine, from the shared
results folder. A run's state:

- done: model.pt and every evaluation section its sets need (eval/<section>.json);
- evaluating: model.pt, some sections still missing (none failed);
- running: pretraining started (config.resolved.yaml, checkpoint.pt or log.jsonl) and has not ended;
  epoch k of E, the last epoch's loss, an ETA from the median epoch time; "stalled" when nothing was written
  for three epoch times (and at least STALL_MIN_S): its job may have been killed without a word;
- requeued: pretraining stopped by SIGTERM (exit 75, a time limit or preemption) and resumes when resubmitted;
- failed: pretrain.log, or for a missing section its <section>.log or the run's eval/evaluate.log, ends in an error
  line (shown);
- waiting: nothing written yet;
- unreadable: the folder, or a file in it, is not as the trainer and the evaluation write it (a log that is not
  text or whose lines are not JSON objects of numbers, a config that is not a mapping, a folder or file this user
  may not read): the row says which and what, and the rest of the table is read as before.

Flags (bayesncl.measures.learning, the rules the report's § and ¶ marks use): "collapse@e" from the InfoNCE epochs so
far; "still learning" once pretraining ended with the loss still falling.
"""

from __future__ import annotations

import math
import os
import re
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import MissingInputError
from .expand import evaluation_sections, expand_grid, smoke_results
from ..runs.files import CHECKPOINT, CONFIG, EVAL, FINAL, LOG, LogError, read_log
from ..core.yamlio import read_text, shown

__all__ = ["STATES", "RunStatus", "Unreadable", "grid_status", "render", "run_status", "totals"]

# In the order the table lists them: what needs a look first.
STATES = ("unreadable", "failed", "running", "requeued", "evaluating", "waiting", "done")
STALL_EPOCHS = 3
STALL_MIN_S = 900.0
PRETRAIN_LOG = "pretrain.log"  # Snakemake's log of the pretrain rule (workflow/rules/pretrain.smk)
EVALUATE_LOG = "evaluate.log"  # in eval/: the log of a run's one evaluation job (per_run, workflow/rules/evaluate.smk)
# The last line of a command that stopped: SIGTERM's exit 75 (bayesncl.cli.main), else an error or a traceback's end.
_REQUEUED = re.compile(r"\bexit 75\b")
_FAILED = re.compile(r"\berror\b|diverged|^Traceback|^\w+(Error|Exception)\b|^Killed|out of memory|CANCELLED",
                     re.IGNORECASE)


@dataclass
class RunStatus:
    run_id: str
    state: str
    epoch: int = 0
    epochs: int | None = None
    loss: float | None = None
    eta_s: float | None = None
    train_s: float = 0.0  # training seconds so far (the log's epoch_seconds)
    sections: tuple[int, int] | None = None  # evaluation sections (done, needed)
    flags: list[str] = field(default_factory=list)
    note: str = ""


class Unreadable(Exception):
    """A run's file or folder that cannot be read as the trainer writes it; the message says which and what."""


def _read_text(path: Path) -> str | None:
    """The file's text, None where it does not exist."""
    try:
        return read_text(path, lambda why: Unreadable(f"{path.name}: {why}"))
    except FileNotFoundError:
        return None


def _last_line(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - 4096))
            lines = [ln.strip() for ln in f.read().decode(errors="replace").splitlines() if ln.strip()]
    except FileNotFoundError:
        return ""
    except OSError as e:
        raise Unreadable(f"{path.parent.name}/{path.name} cannot be read ({e.strerror})") from None
    return lines[-1] if lines else ""


def _read_log(run_dir: Path) -> list[dict]:
    """The epochs logged so far ([] when none), read as every reader reads them (runs.files.read_log); a log that is not
    the trainer's is Unreadable."""
    try:
        return read_log(run_dir)
    except MissingInputError:
        return []
    except LogError as e:
        raise Unreadable(f"{LOG}{e.fault}") from None


def _recorded_config(path: Path) -> dict:
    """The run's recorded config ({} where there is none), checked where the table reads it (train.epochs and
    train.batch_size)."""
    import yaml

    text = _read_text(path)
    if text is None:
        return {}
    try:
        cfg = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise Unreadable(f"{path.name}: not valid YAML" + (f" at line {mark.line + 1}" if mark else "")) from None
    cfg = {} if cfg is None else cfg
    if not isinstance(cfg, dict):
        raise Unreadable(f"{path.name}: {shown(cfg)} is not a mapping of config keys")
    return cfg


def _train(cfg: dict, where: str) -> dict:
    train = cfg.get("train") or {}
    if not isinstance(train, dict):
        raise Unreadable(f"{where}: train is {shown(train)}, not a mapping")
    for key in ("epochs", "batch_size"):
        v = train.get(key)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < (key == "batch_size")):
            raise Unreadable(f"{where}: train.{key} {shown(v)} is not a whole number"
                             + (" above 0" if key == "batch_size" else ""))
    return train


def _sections_written(ev: Path) -> list[str]:
    try:
        return sorted(n[:-5] for n in os.listdir(ev) if n.endswith(".json"))
    except FileNotFoundError:
        return []
    except OSError as e:
        raise Unreadable(f"{EVAL}/ cannot be read ({e.strerror})") from None


def _mtime(*paths: Path) -> float | None:
    times = [p.stat().st_mtime for p in paths if p.exists()]
    return max(times) if times else None


def run_status(run_dir: str | Path, run_id: str, cfg: dict | None = None, sections: list[str] | None = None,
               now: float | None = None) -> RunStatus:
    """One run's state from its folder. `cfg`: its run config from the plan (else the one it recorded);
    `sections`: the evaluation sections it needs (else the ones it has written count as all). A folder or file
    that cannot be read is a row in state unreadable saying which and what."""
    d = Path(run_dir)
    now = time.time() if now is None else now
    try:
        return _run_status(d, run_id, cfg, sections, now)
    except (Unreadable, OSError) as e:  # OSError: the folder itself, or a file's metadata, may not be read
        what = str(e) if isinstance(e, Unreadable) else f"cannot be read ({e.strerror})"
        try:
            epochs = _train(cfg, "the plan").get("epochs") if isinstance(cfg, dict) else None
        except Unreadable:
            epochs = None
        return RunStatus(run_id, "unreadable", epochs=epochs, note=f"{what}; fix or remove it, then look again")


def _infonce(log: list[dict]) -> list[float]:
    """Each epoch's InfoNCE (a log older than that column: its loss; NaN where neither is there)."""
    return [next((v for v in (r.get("infonce"), r.get("loss")) if v is not None), math.nan) for r in log]


def _run_status(d: Path, run_id: str, cfg: dict | None, sections: list[str] | None, now: float) -> RunStatus:
    from ..measures.learning import collapse, learning_slope

    where = "the plan" if cfg is not None else CONFIG
    train = _train(_recorded_config(d / CONFIG) if cfg is None else cfg, where)
    log = _read_log(d)
    st = RunStatus(run_id, "waiting", epoch=len(log), epochs=train.get("epochs"))
    if log:
        st.loss = log[-1].get("loss")
        st.train_s = sum(r.get("epoch_seconds", 0.0) for r in log)
        infonce = _infonce(log)
        fall = collapse(infonce, train.get("batch_size") or 256)
        if fall["collapsed"]:
            st.flags.append(f"collapse@{fall['epoch']}")
    trained = (d / FINAL).is_file()
    if trained:
        if log and learning_slope(_infonce(log))["still_learning"]:
            st.flags.append("still learning")
        ev = d / EVAL
        written = _sections_written(ev)
        names = sections if sections is not None else written
        done = [s for s in names if s in written]
        st.sections = (len(done), len(names))
        # a section's own job (a cluster's), or the run's evaluation job (per_run) that ran it
        missing = [s for s in names if s not in done]
        whole = _last_line(ev / EVALUATE_LOG) if missing else ""
        failed = [(s, line) for s in missing for line in [_last_line(ev / f"{s}.log"), whole] if _FAILED.search(line)]
        if failed:
            st.state, st.note = "failed", f"{failed[0][0]}: {failed[0][1]}"
        else:
            st.state = "done" if len(done) == len(names) else "evaluating"
        return st
    started = _mtime(d / CONFIG, d / CHECKPOINT, d / LOG)
    ended = _mtime(d / PRETRAIN_LOG)
    # A job's last words come after its last checkpoint; a line older than the run's files (a warning at
    # start-up, then epochs) says nothing about its end.
    last = _last_line(d / PRETRAIN_LOG) if ended is not None and (started is None or ended >= started) else ""
    if _REQUEUED.search(last):
        st.state, st.note = "requeued", last
    elif _FAILED.search(last):
        st.state, st.note = "failed", last
    elif started is not None:
        st.state = "running"
        times = [r["epoch_seconds"] for r in log if "epoch_seconds" in r]
        if times and st.epochs:
            per = statistics.median(times)
            since = max(0.0, now - started)
            left = max(st.epochs - st.epoch, 0)
            # the epoch under way has run `since` seconds (the log and checkpoint are written at each epoch's end)
            st.eta_s = max(left - 1, 0) * per + max(per - since, 0.0) if left else 0.0
            if since > max(STALL_EPOCHS * per, STALL_MIN_S):
                st.flags.append(f"stalled {_duration(since)}")
    return st


def _runs_on_disk(results: Path) -> tuple[list[str], list[tuple[str, str]]]:
    """Run ids under results/runs (the folders holding a run's files), and the folders that could not be read
    with why: (relative path, reason)."""
    root = results / "runs"
    found, unreadable = [], []

    def failed(e: OSError) -> None:
        if not isinstance(e, FileNotFoundError) or Path(e.filename) != root:  # no runs/ yet: no runs
            unreadable.append((Path(e.filename).relative_to(root).as_posix(), e.strerror))

    for dirpath, dirnames, filenames in os.walk(root, onerror=failed):
        if CONFIG in filenames or FINAL in filenames or LOG in filenames:
            found.append(Path(dirpath).relative_to(root).as_posix())
            dirnames.clear()
        dirnames[:] = [n for n in dirnames if n != EVAL and not n.startswith(".")]
    return sorted(found), unreadable


def grid_status(results: str | Path, grid: dict | None = None, now: float | None = None) -> list[RunStatus]:
    """Every run of the plan (`grid`, a workflow config: waiting ones included) or, without one, every run
    found under results/runs, and a row for each folder there that could not be read. A results folder named
    like a smoke run's reads the smoke plan."""
    results = Path(results)
    now = time.time() if now is None else now
    if grid is None:
        found, unreadable = _runs_on_disk(results)
        return [run_status(results / "runs" / rid, rid, now=now) for rid in found] + [
            RunStatus(rel, "unreadable", note=f"cannot read the folder {results / 'runs' / rel} ({why}); the runs in "
                                              "it are not counted: give this user read access")
            for rel, why in unreadable]
    wf = dict(grid)
    if str(results).rstrip("/") == smoke_results(str(results)):  # results-smoke: the smoke run's shrunk plan
        wf["smoke"] = True
    runs = expand_grid(wf)
    return [run_status(results / "runs" / rid, rid, run.config, evaluation_sections(run), now=now)
            for rid, run in runs.items()]


def totals(rows: list[RunStatus]) -> dict:
    """Runs per state, epochs trained of those planned, training GPU-hours so far, the longest ETA."""
    out: dict = {s: sum(r.state == s for r in rows) for s in STATES}
    out["runs"] = len(rows)
    out["epochs_done"] = sum(r.epoch for r in rows)
    out["epochs_planned"] = sum(r.epochs or 0 for r in rows)
    out["train_hours"] = sum(r.train_s for r in rows) / 3600
    out["flagged"] = sum(bool(r.flags) for r in rows)
    etas = [r.eta_s for r in rows if r.eta_s is not None]
    out["longest_eta_s"] = max(etas) if etas else None
    return out


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    m = int(round(seconds / 60))
    return f"{m // 60}h{m % 60:02d}" if m >= 60 else f"{m}m"


def render(rows: list[RunStatus], states: list[str] | None = None) -> str:
    """The table (failed runs first) and the totals, as `bayesncl status` prints them."""
    order = {s: i for i, s in enumerate(STATES)}
    listed = sorted((r for r in rows if not states or r.state in states), key=lambda r: (order[r.state], r.run_id))
    lines = [f"{'state':<10} {'epoch':>9} {'loss':>7} {'ETA':>6} {'eval':>5}  {'run':<s}"]
    for r in listed:
        epoch = f"{r.epoch}/{r.epochs}" if r.epochs is not None else str(r.epoch)
        loss = f"{r.loss:.3f}" if isinstance(r.loss, (int, float)) and math.isfinite(r.loss) else "-"
        ev = f"{r.sections[0]}/{r.sections[1]}" if r.sections else "-"
        extra = "  ".join(x for x in (", ".join(r.flags) and f"[{', '.join(r.flags)}]", r.note) if x)
        lines.append(f"{r.state:<10} {epoch:>9} {loss:>7} {_duration(r.eta_s) if r.state == 'running' else '-':>6} "
                     f"{ev:>5}  {r.run_id}" + (f"  {extra}" if extra else ""))
    t = totals(rows)
    counts = ", ".join(f"{t[s]} {s}" for s in STATES if t[s])
    lines.append(f"{t['runs']} runs: {counts or 'none'}; {t['epochs_done']} of {t['epochs_planned']} epochs trained "
                 f"({t['train_hours']:.1f} GPU-hours of training so far); {t['flagged']} flagged"
                 + (f"; the longest ETA {_duration(t['longest_eta_s'])}" if t["longest_eta_s"] is not None else ""))
    return "\n".join(lines) + "\n"
