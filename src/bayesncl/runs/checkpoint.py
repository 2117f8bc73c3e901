"""Checkpoints: atomic writes, `weights_only=True` loads, and rebuilding a model for evaluation.

A checkpoint is a dict of tensors and plain Python values only (no pickled objects), so
`torch.load(path, weights_only=True)` reads it.
"""

from __future__ import annotations

import hashlib
import pickle
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ..core.atomic import atomic_path
from ..settings.config import as_recorded, flatten, validate
from ..core.errors import CheckpointError, ConfigError

if TYPE_CHECKING:
    from ..model.methods import Method


def save(obj: dict, path: str | Path) -> None:
    """torch.save through a temp file and a rename: never a half-written checkpoint."""
    with atomic_path(path) as tmp:
        torch.save(obj, tmp)


EXPECTED = "expected a file that `bayesncl pretrain` wrote (model.pt, checkpoint.pt, dynamics.pt)"


def load(path: str | Path, map_location="cpu") -> dict:
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
    from ..model.methods import build_method  # torchvision: only where a model is built

    model = build_method(stored_config(state, path))
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as e:
        raise CheckpointError(f"checkpoint {path}: weights do not match the model its config describes: {e}") from e
    return model.eval()
