"""What a run folder holds, by name: what `bayesncl pretrain` writes and `bayesncl evaluate` reads.

    <run>/config.resolved.yaml   the validated run config
    <run>/plugin_code.json       what identifies the plugin code the run used (a plugin method or dataset only)
    <run>/checkpoint.pt          latest state (epoch end, or mid-epoch after SIGTERM); resumed on rerun
    <run>/model.pt               final weights + config: what evaluation reads
    <run>/log.jsonl              one JSON object per finished epoch (rewritten whole, atomically)
    <run>/dynamics.pt            per-dimension AF / GV / SC every train.dynamics_every epochs
    <run>/eval/                  one <section>.json per evaluation section (bayesncl.evaluation.sections)
    <run>/events.out.tfevents.*  TensorBoard's files: pretraining's curves, each section's numbers (bayesncl.events)
"""

from __future__ import annotations

import json
from pathlib import Path

from .errors import MissingInputError, RunFileError

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
    from .atomic import atomic_write_text
    from .config import dump_yaml
    from .registry import plugin_code

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


# An epoch's values the readers take as numbers (None: not measured, as peak memory on a CPU).
_NUMBERS = ("loss", "infonce", "kl", "open_gates", "lr", "epoch_seconds", "img_per_s", "peak_mem_mb", "compile_seconds",
            "skipped", "loss_scale")


def read_log(run_dir: str | Path, needed: tuple[str, ...] = ()) -> list[dict]:
    """The training log's epochs, in order, each with the keys `needed`. The trainer rewrites the whole file
    atomically from its checkpointed state, so it holds each finished epoch once and never a partial line;
    anything else in it is one RunFileError naming the file, the line and what is wrong."""
    path = Path(run_dir) / LOG
    if not path.is_file():
        raise MissingInputError(f"{path} does not exist; it is written by `bayesncl pretrain --out {Path(run_dir)}`")
    fix = "it is the trainer's: restore it, or train the run again"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise RunFileError(f"{path}: cannot be read ({e.strerror}); {fix}") from None
    except UnicodeDecodeError:
        raise RunFileError(f"{path}: not a text file (not UTF-8); {fix}") from None
    out = []
    for i, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            epoch = json.loads(line)
        except ValueError:
            raise RunFileError(f"{path} line {i}: not JSON; {fix}") from None
        if not isinstance(epoch, dict):
            raise RunFileError(f"{path} line {i}: not a JSON object of an epoch's values; {fix}")
        missing = [k for k in needed if k not in epoch]
        if missing:
            raise RunFileError(f"{path} line {i}: no {', '.join(missing)}; {fix}")
        if "epoch" in epoch and (not isinstance(epoch["epoch"], int) or isinstance(epoch["epoch"], bool)):
            raise RunFileError(f"{path} line {i}: epoch {str(epoch['epoch'])[:20]!r} is not a whole number; {fix}")
        for key in _NUMBERS:
            v = epoch.get(key)
            if v is None and (key not in epoch or key == "peak_mem_mb"):
                continue
            try:
                epoch[key] = float(v) if not isinstance(v, (bool, str)) else float("x")
            except (TypeError, ValueError, OverflowError):
                raise RunFileError(f"{path} line {i}: {key} {str(v)[:20]!r} is not a number; {fix}") from None
        out.append(epoch)
    return out
