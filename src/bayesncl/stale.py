"""Runs trained under other settings than the workflow config gives them today (`bayesncl stale`).

A run records the full config it was trained with (``<run>/config.resolved.yaml``, and in model.pt) and what
identifies the plugin code it used (``<run>/plugin_code.json``, bayesncl.registry.plugin_code). Today's config of
the same run is the workflow config expanded with today's code (its defaults included). Where the two differ on
what decides training (bayesncl.grid.trigger_config: the record as written, so a key it lacks reads as what runs
did before the key, config.keys_added, or else "absent") or on the plugin code, the run is stale: its pretraining
job's trigger (bayesncl.grid.job_trigger) changed, so `snakemake` plans it again, and until then the tables whose
runs it is in say so in their captions (report/tables.py, stale_note; runs.csv's ``stale`` column).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .config import as_recorded, resolve
from .yamlio import load_yaml_file
from .grid import Run, expand_grid, trigger_diff
from .registry import plugin_code
from .rundir import CONFIG, FINAL, read_code

__all__ = ["describe", "print_stale", "stale_runs", "run_staleness"]


def run_staleness(recorded: dict, run: Run, code: dict[str, str] | None = None) -> dict[str, list]:
    """{key: [recorded value, today's]} where the run's recorded config (as written, not completed with today's
    defaults) and today's differ (training), and {"code of <entry>": [recorded, today's]} where the plugin code it
    recorded (`code`) is not today's."""
    diff = {k: [a, b] for k, a, b in trigger_diff(as_recorded(recorded), run.config, "pretrain")}
    today, was = plugin_code(run.config), code or {}
    for entry in sorted(set(today) | set(was)):
        if today.get(entry) != was.get(entry):
            diff[f"code of {entry}"] = [_short(was.get(entry, "absent")), _short(today.get(entry, "absent"))]
    return diff


def _short(identity: str) -> str:
    """A code identity as the stale line and the tables' captions show it: a digest by its first 12 digits."""
    return identity[:19] if identity.startswith("sha256 ") else identity


def stale_runs(wf: dict, results: str | Path, unreadable: dict[str, str] | None = None) -> dict[str, dict[str, list]]:
    """{run id: its differences} for every run of the grid that has a recorded config under ``results``. A
    recorded config that cannot be read or is not a valid config goes into ``unreadable`` ({run id: why}), and
    the other runs are compared as before."""
    from .errors import BayesNCLError

    out = {}
    for rid, run in expand_grid(wf).items():
        path = Path(results) / "runs" / rid / CONFIG
        try:
            if not path.is_file():
                continue
            resolve(file=path, recorded=True)  # a valid record; compared as written (what Snakemake compares)
            recorded, code = load_yaml_file(path, "recorded config"), read_code(path.parent)
        except BayesNCLError as e:
            if unreadable is not None:
                unreadable[rid] = str(e)
            continue
        except OSError as e:  # the run's folder, or results/runs, may not be read
            if unreadable is not None:
                unreadable[rid] = f"{path}: cannot be read ({e.strerror})"
            continue
        diff = run_staleness(recorded, run, code)
        if diff:
            out[rid] = diff
    return out


def describe(diff: dict[str, list]) -> str:
    """"train.loss_scaler none (today fp16); ..." """
    return "; ".join(f"{k} {_fmt(a)} (today {_fmt(b)})" for k, (a, b) in diff.items())


def _fmt(v) -> str:
    return v if isinstance(v, str) else json.dumps(v)


def targets(results: str | Path, rids) -> list[str]:
    """The model.pt of each run: what `snakemake --forcerun` takes to retrain exactly these."""
    return [str(Path(results) / "runs" / rid / FINAL) for rid in rids]


def print_stale(wf: dict, results: str | Path, grid_file: str, targets_only: bool = False) -> None:
    """What `bayesncl stale` prints: each stale run and its differences (or, `targets_only`, each one's model.pt),
    each run not compared and why (stderr: --targets stays a list of files), and the count (stderr)."""
    unreadable: dict[str, str] = {}
    found = stale_runs(wf, results, unreadable)
    for rid, why in unreadable.items():  # never left out in silence
        print(f"{rid}: not compared: {why}", file=sys.stderr)
    if targets_only:
        print("\n".join(targets(results, found)))
        return
    for rid, diff in found.items():
        print(f"{rid}: {describe(diff)}")
    print(f"{len(found)} stale run(s) under {results}" + (
        f"; retrain them: snakemake --cores N --configfile {grid_file} --forcerun $(bayesncl stale --grid {grid_file} "
        "--targets)"
        if found else "") + (f"; {len(unreadable)} run(s) not compared: their recorded config cannot be read (above)"
                             if unreadable else ""), file=sys.stderr)
