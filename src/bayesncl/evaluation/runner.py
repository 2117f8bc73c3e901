"""`bayesncl evaluate`: run evaluation sections (bayesncl.evaluation.sections) on one pretrained checkpoint.

Each section writes `<out>/<section>.json` = {"run": <who made it>, <its keys>: ...} atomically (format in
docs/DESIGN.md). The config is the one stored in the checkpoint; only eval.* and data.* keys may be changed
here (where the data lives, how to evaluate), never what was trained.
"""

from __future__ import annotations

import copy
import json
import math
from functools import cached_property
from pathlib import Path

import numpy as np

from .. import checkpoint as ckpt_io
from ..atomic import atomic_path, atomic_write_text
from ..config import RUNTIME_KEYS, merge, nest, parse_set, resolve, validate
from ..errors import ConfigError, DataError, MissingInputError
from .sections import SECTIONS, applicable, check_applies

__all__ = ["Context", "evaluate", "run_info"]

# Array files the features section writes, per split.
FEATURE_FILES = {"test": "features.npz", "train": "features_train.npz"}


def run_info(cfg: dict) -> dict:
    """The run identity every section file carries, so a file read alone says what it measured."""
    m, mc = cfg["model"], cfg["method"]
    return {"dataset": cfg["data"]["dataset"], "arch": m["arch"], "width": m["width"], "method": mc["name"],
            "gate": mc["gate"], "detach": mc["detach"], "head_depth": mc["head_depth"], "rho": mc["rho"],
            "lambda": mc["lambda"], "proj_dim": m["proj_dim"], "seed": cfg["seed"], "epochs": cfg["train"]["epochs"]}


def _clean(x):
    """JSON-safe: tensors/ndarrays to lists, NaN to None."""
    import torch

    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, (torch.Tensor, np.ndarray)):
        return _clean(np.asarray(x).tolist())
    if isinstance(x, (np.floating, np.integer)):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


class Context:
    """What a section reads, each loaded on first use: the run config, the model (on the CPU or the device),
    data splits, and the cached features."""

    def __init__(self, checkpoint: Path, out: Path, state: dict, cfg: dict, progress: bool):
        self.checkpoint, self.out, self.cfg, self.progress = checkpoint, out, cfg, progress
        self.run_dir = checkpoint.parent
        self._state = state
        self._splits: dict = {}
        self.weights_sha = ckpt_io.weights_digest(state["model"])

    @cached_property
    def cpu_model(self):
        return ckpt_io.model_from_state(self._state, self.checkpoint)

    @cached_property
    def device(self):
        from ..runtime import resolve_device

        return resolve_device(self.cfg)

    @cached_property
    def model(self):
        """The model on the evaluation device (a copy: `cpu_model` stays on the CPU)."""
        import torch

        from ..runtime import channels_last

        model = copy.deepcopy(self.cpu_model).to(self.device)
        if channels_last(self.cfg, self.device):
            model = model.to(memory_format=torch.channels_last)
        return model

    def nonempty(self, ds, what: str):
        if len(ds.labels) == 0:
            raise DataError(f"{what}: the split is empty; evaluation needs at least one image")
        return ds

    def split(self, name: str):
        from ..data import load_split

        if name not in self._splits:
            ds = self.cfg["data"]["dataset"]
            self._splits[name] = self.nonempty(load_split(self.cfg["data"], name), f"{ds} {name} split")
        return self._splits[name]

    def embed(self, ds, keys: tuple[str, ...]):
        from ..runtime import embed

        return embed(self.model, ds, self.cfg, self.device, key=keys)

    @staticmethod
    def labels(ds) -> dict[str, np.ndarray]:
        out = {"labels": np.asarray(ds.labels), "num_classes": np.int64(ds.num_classes)}
        if ds.backgrounds is not None:
            out |= {"backgrounds": np.asarray(ds.backgrounds), "num_backgrounds": np.int64(ds.num_backgrounds)}
        return out

    def features(self, split: str) -> dict[str, np.ndarray]:
        """The arrays the features section cached for `split` ("test" or "train")."""
        path = self.out / FEATURE_FILES[split]
        if not path.is_file():
            raise MissingInputError(f"{path} does not exist; run `bayesncl evaluate --checkpoint {self.checkpoint} "
                                    f"--out {self.out} --only features` first")
        with np.load(path) as f:
            return dict(f)

    def save_arrays(self, name: str, arrays: dict[str, np.ndarray]) -> None:
        with atomic_path(self.out / f"{name}.npz") as tmp:
            with open(tmp, "wb") as fh:
                np.savez(fh, **arrays)


def _config(state: dict, checkpoint: Path, sets, overrides: dict | None, expect_config) -> dict:
    cfg = ckpt_io.stored_config(state, checkpoint)
    if expect_config is not None:
        want = resolve(file=expect_config)
        diff = ckpt_io.config_diff(cfg, want, ignore=RUNTIME_KEYS)
        if diff:
            raise ConfigError(f"{checkpoint} does not match {expect_config}: " + "; ".join(diff))
        cfg["eval"] = want["eval"]
    for over in (overrides or {}, nest(dict(parse_set(s) for s in sets))):
        bad = [k for k in over if k not in ("eval", "data")]
        if bad:
            raise ConfigError(f"{bad[0]}.*: only eval.* and data.* keys can be changed at evaluation")
        cfg = merge(cfg, copy.deepcopy(over))
    return validate(cfg)


def evaluate(checkpoint: str | Path, out_dir: str | Path, *, only=None, sets=(), overrides: dict | None = None,
             expect_config=None, progress: bool = True) -> list[Path]:
    """Run the sections `only` (default: every section that applies to the run, features first) and return
    the JSON files written. `sets` are `key=value` overrides and `overrides` a nested dict of eval.* and
    data.* keys."""
    checkpoint, out = Path(checkpoint), Path(out_dir)
    state = ckpt_io.load(checkpoint)
    cfg = _config(state, checkpoint, sets, overrides, expect_config)
    names = list(only) if only else applicable(cfg)
    for name in names:
        if name not in SECTIONS:
            raise ConfigError(f"evaluate --only {name}: unknown section; known: {', '.join(SECTIONS)}")
        check_applies(name, cfg)
    names = [n for n in SECTIONS if n in names]  # features before the sections that read it
    ctx = Context(checkpoint, out, state, cfg, progress)
    run = {**run_info(cfg), "checkpoint": str(checkpoint), "weights_sha": ctx.weights_sha}
    written = []
    for name in names:
        result = SECTIONS[name].compute(ctx)
        path = out / f"{name}.json"
        atomic_write_text(path, json.dumps(_clean({"run": run, **result}), indent=2) + "\n")
        written.append(path)
    return written
