"""What a run folder holds, by name: what `bayesncl pretrain` writes and `bayesncl evaluate` reads.

    <run>/config.resolved.yaml   the validated run config
    <run>/plugin_code.json       what identifies the plugin code the run used (a plugin method or dataset only)
    <run>/checkpoint.pt          latest state (epoch end, or mid-epoch after SIGTERM); resumed on rerun
    <run>/model.pt               final weights + config: what evaluation reads
    <run>/log.jsonl              one JSON object per finished epoch (rewritten whole, atomically)
    <run>/dynamics.pt            per-dimension AF / GV / SC every train.dynamics_every epochs
    <run>/eval/                  one <section>.json per evaluation section (bayesncl.evaluation.sections)
    <run>/events.out.tfevents.*  TensorBoard's files: pretraining's curves, each section's numbers
    (bayesncl.runs.events)
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from ..core.errors import MissingInputError, RunFileError
from ..core.yamlio import read_text, shown

CONFIG = "config.resolved.yaml"
CODE = "plugin_code.json"
CHECKPOINT = "checkpoint.pt"
FINAL = "model.pt"
LOG = "log.jsonl"
DYNAMICS = "dynamics.pt"
EVAL = "eval"
EVENTS = "events.out.tfevents"  # + .<unix time>.<host>.<writer>: "tfevents" in a name is what TensorBoard reads


def record_config(out: Path, cfg: dict) -> None:
    """The run's config.resolved.yaml and, where the run uses a plugin's method or dataset, what identifies their
    code (registry.plugin_code, in plugin_code.json): what `bayesncl stale` compares with today's."""
    from ..core.atomic import atomic_write_text
    from ..settings.config import dump_yaml
    from ..settings.registry import plugin_code

    atomic_write_text(out / CONFIG, dump_yaml(cfg))
    code = plugin_code(cfg)
    if code:
        atomic_write_text(out / CODE, json.dumps(code, indent=1, sort_keys=True) + "\n")
    else:
        (out / CODE).unlink(missing_ok=True)


def read_code(run_dir: str | Path) -> dict[str, str]:
    """The plugin code a run recorded ({} where it recorded none: the package's own code, or a run older than the
    record); a file that is not the trainer's is one RunFileError line naming it."""
    path = Path(run_dir) / CODE
    if not path.exists():
        return {}
    try:
        code = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise RunFileError(f"{path}: cannot be read as JSON ({getattr(e, 'strerror', None) or e}); it is the "
                           "trainer's: restore it, or train the run again") from None
    if not isinstance(code, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in code.items()):
        raise RunFileError(f"{path}: not an object of plugin entries and their code; it is the trainer's: restore "
                           "it, or train the run again")
    return code


# An epoch's values that are numbers; None only where not measured (peak memory on a CPU).
_NUMBERS = ("loss", "infonce", "kl", "open_gates", "lr", "epoch_seconds", "img_per_s", "peak_mem_mb", "compile_seconds",
            "skipped", "loss_scale")


class LogError(RunFileError):
    """The training log is not what the trainer writes; `fault` says where in it and what, after its name."""

    def __init__(self, path: Path, fault: str):
        super().__init__(f"{path}{fault}; it is the trainer's: restore it, or train the run again")
        self.fault = fault


def read_log(run_dir: str | Path, needed: tuple[str, ...] = ()) -> list[dict]:
    """The training log's epochs, in order, each with the keys `needed` and its numbers (_NUMBERS) as floats. The
    trainer rewrites the whole file atomically from its checkpointed state, so it holds each finished epoch once and
    never a partial line; anything else in it is one LogError naming the file, the line and what is wrong. Every
    reader of the log reads it here (evaluation, `bayesncl status`)."""
    path = Path(run_dir) / LOG
    try:
        text = read_text(path, lambda why: LogError(path, f": {why}"))
    except FileNotFoundError:
        raise MissingInputError(f"{path} does not exist; it is written by `bayesncl pretrain --out {Path(run_dir)}`"
                                ) from None
    return [_epoch(path, i, line, needed) for i, line in enumerate(text.splitlines(), start=1) if line.strip()]


def _epoch(path: Path, i: int, line: str, needed: tuple[str, ...]) -> dict:
    try:
        epoch = json.loads(line)
    except ValueError:
        raise LogError(path, f" line {i}: not JSON") from None
    if not isinstance(epoch, dict):
        raise LogError(path, f" line {i}: {shown(epoch)} is not a JSON object of an epoch's values")
    missing = [k for k in needed if k not in epoch]
    if missing:
        raise LogError(path, f" line {i}: no {', '.join(missing)}")
    if "epoch" in epoch and (not isinstance(epoch["epoch"], int) or isinstance(epoch["epoch"], bool)):
        raise LogError(path, f" line {i}: epoch {shown(epoch['epoch'])} is not a whole number")
    for key in _NUMBERS:
        v = epoch.get(key)
        if key not in epoch or (v is None and key == "peak_mem_mb"):
            continue
        try:
            epoch[key] = float(v) if not isinstance(v, (bool, str)) else float("x")
            if key == "epoch_seconds" and not (math.isfinite(epoch[key]) and epoch[key] >= 0):
                raise ValueError
        except (TypeError, ValueError, OverflowError):
            what = "a number of seconds" if key == "epoch_seconds" else "a number"
            raise LogError(path, f" line {i}: {key} {shown(v)} is not {what}") from None
    return epoch
