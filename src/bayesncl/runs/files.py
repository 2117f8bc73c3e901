"""What a run folder holds: its files' names, the reader of its training log, and its checkpoints.

    <run>/config.resolved.yaml   the validated run config
    <run>/plugin_code.json       what identifies the plugin code the run used (a plugin method or dataset only)
    <run>/checkpoint.pt          latest state (epoch end, or mid-epoch after SIGTERM); resumed on rerun
    <run>/model.pt               final weights + config: what evaluation reads
    <run>/log.jsonl              one JSON object per finished epoch (rewritten whole, atomically)
    <run>/dynamics.pt            per-dimension AF / GV / SC every train.dynamics_every epochs
    <run>/eval/                  one <section>.json per evaluation section (bayesncl.evaluation.sections), and
                                 the features section's arrays (FEATURE_FILES)
    <run>/events.out.tfevents.*  TensorBoard's files: pretraining's curves, each section's numbers
    (bayesncl.runs.events)

Checkpoints (checkpoint.pt, model.pt, dynamics.pt) are written atomically and read with `weights_only=True`: a
checkpoint is a dict of tensors and plain Python values only (no pickled objects). `load_model` rebuilds the model
a checkpoint describes, for evaluation. torch is imported only where a checkpoint is written, read or hashed, so
the readers of the other files (`bayesncl status`, the sections that read the features cache) never import it.
"""

from __future__ import annotations

import hashlib
import json
import math
import pickle
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.atomic import atomic_path, atomic_write_text
from ..core.errors import CheckpointError, ConfigError, MissingInputError, RunFileError
from ..core.yamlio import read_text, shown
from ..settings.config import as_recorded, dump_yaml, flatten, validate

if TYPE_CHECKING:
    import torch

    from ..model.methods import Method

CONFIG = "config.resolved.yaml"
CODE = "plugin_code.json"
CHECKPOINT = "checkpoint.pt"
FINAL = "model.pt"
LOG = "log.jsonl"
DYNAMICS = "dynamics.pt"
EVAL = "eval"
EVENTS = "events.out.tfevents"  # + .<unix time>.<host>.<writer>: "tfevents" in a name is what TensorBoard reads
# Array files the features section writes in the evaluation's folder, per split.
FEATURE_FILES = {"test": "features.npz", "train": "features_train.npz"}


def record_config(out: Path, cfg: dict) -> None:
    """The run's config.resolved.yaml and, where the run uses a plugin's method or dataset, what identifies their
    code (registry.plugin_code, in plugin_code.json): what `bayesncl stale` compares with today's."""
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


# ------------------------------------------------------------------------------------------------ checkpoints
def save(obj: dict, path: str | Path) -> None:
    """torch.save through a temp file and a rename: never a half-written checkpoint."""
    import torch

    with atomic_path(path) as tmp:
        torch.save(obj, tmp)


EXPECTED = "expected a file that `bayesncl pretrain` wrote (model.pt, checkpoint.pt, dynamics.pt)"


def load(path: str | Path, map_location="cpu") -> dict:
    import torch

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} does not exist (run `bayesncl pretrain` first)")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError:
        # torch's message advises weights_only=False: never for a file nobody vouches for
        raise CheckpointError(f"checkpoint {path} could not be read: it is not a file of tensors and plain values "
                              f"(it holds Python objects, or is no torch file at all); {EXPECTED}") from None
    except Exception as e:  # a truncated or foreign file
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError(f"checkpoint {path} could not be read ({reason}); {EXPECTED}") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"checkpoint {path} holds a {type(state).__name__}, not a dict; {EXPECTED}")
    return state


def weights_digest(weights: torch.nn.Module | dict) -> str:
    """A short hash of the weights (a model, or its state dict: parameters and buffers, in state-dict order):
    equal digests mean two runs trained bit-identical models."""
    import torch

    h = hashlib.sha256()
    for name, t in (weights if isinstance(weights, dict) else weights.state_dict()).items():
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


def config_diff(a: dict, b: dict, ignore: tuple[str, ...] = ()) -> list[str]:
    fa, fb = flatten(a), flatten(b)
    keys = sorted(set(fa) | set(fb))
    return [f"{k}: {fa.get(k)!r} != {fb.get(k)!r}" for k in keys
            if fa.get(k) != fb.get(k) and not k.startswith(ignore)]


def load_model(path: str | Path, map_location="cpu") -> tuple[Method, dict]:
    """Rebuild the method from the config stored in the checkpoint and load its weights (eval mode)."""
    state = load(path, map_location)
    return model_from_state(state, path), stored_config(state, path)


def stored_config(state: dict, path: str | Path) -> dict:
    """The validated config of a loaded checkpoint `state` (read from `path`)."""
    for key in ("config", "model"):
        if key not in state:
            raise CheckpointError(f"checkpoint {path}: missing entry {key!r}; is this a bayesncl checkpoint?")
    try:
        return validate(as_recorded(state["config"]))  # keys newer than the checkpoint: config.as_recorded
    except (ConfigError, KeyError, TypeError) as e:
        raise CheckpointError(f"checkpoint {path}: its stored config is invalid: {e}") from e


def model_from_state(state: dict, path: str | Path) -> Method:
    """The model a loaded checkpoint `state` (read from `path`) describes, with its weights, in eval mode."""
    import torch

    from ..model.methods import build_method  # torchvision: only where a model is built

    cfg = stored_config(state, path)
    with torch.device("meta"):  # no initialisation drawn only to be overwritten (a tenth of a second a job)
        model = build_method(cfg)
    try:
        model.load_state_dict(state["model"], assign=True)
    except RuntimeError as e:
        raise CheckpointError(f"checkpoint {path}: weights do not match the model its config describes: {e}") from e
    unset = [n for n, t in (*model.named_parameters(), *model.named_buffers()) if t.is_meta]
    if unset:  # a tensor the state does not hold (a buffer kept out of it): the model as built would not run
        raise CheckpointError(f"checkpoint {path}: holds no {unset[0]!r}, which the model its config describes needs")
    return model.eval()
