"""`bayesncl evaluate`: run evaluation sections (bayesncl.evaluation.sections) on one pretrained checkpoint, and
the Context the runner hands each section: what it reads, each part loaded on first use.

Each section writes `<out>/<section>.json` = {"run": <who made it>, <its keys>: ...} atomically (format in
docs/DESIGN.md). The config is the one stored in the checkpoint; only eval.* and data.* keys may be changed
here (where the data lives, how to evaluate), never what was trained. A section that needs the model gets the
checkpoint's state; sections that read only the features cache take that config and the weights' identity from
features.json, which the features section wrote from the checkpoint: they never load it (nor torch).
"""

from __future__ import annotations

import copy
import json
import math
import os
import sys
from functools import cached_property
from pathlib import Path

import numpy as np

from ..core.atomic import atomic_path, atomic_write_text
from ..settings.config import RUNTIME_KEYS, merge, resolve, run_settings, validate
from ..core.errors import ConfigError, DataError, MissingInputError
from ..runs import files
from ..runs.events import write_section
from ..runs.files import EVAL, FEATURE_FILES
from ..core.startup import mark_ready
from ..core.yamlio import nest, parse_set
from .sections import SECTIONS, applicable, check_applies

__all__ = ["Context", "clean", "evaluate", "run_info", "subset"]


def _config(stored: dict, checkpoint: Path, sets, overrides: dict | None, expect_config) -> dict:
    """The stored training config with this call's eval.* and data.* settings."""
    cfg = copy.deepcopy(stored)
    if expect_config is not None:
        want = resolve(file=expect_config)
        diff = files.config_diff(cfg, want, ignore=RUNTIME_KEYS)
        if diff:
            raise ConfigError(f"{checkpoint} does not match {expect_config}: " + "; ".join(diff))
        cfg["eval"] = want["eval"]
    for over in (overrides or {}, nest(dict(parse_set(s) for s in sets))):
        bad = [k for k in over if k not in ("eval", "data")]
        if bad:
            raise ConfigError(f"{bad[0]}.*: only eval.* and data.* keys can be changed at evaluation")
        cfg = merge(cfg, copy.deepcopy(over))
    return validate(cfg)


def _recorded(out: Path) -> dict | None:
    """What the features section recorded of the checkpoint in out/features.json (its stored config and the
    run block with weights_sha), or None where that file is missing or older than this record."""
    try:
        data = json.loads((out / "features.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("config"), dict) \
            or not isinstance(data.get("run"), dict) or "weights_sha" not in data["run"]:
        return None
    return data


def _torch_threads(cfg: dict) -> None:
    """train.threads bounds evaluation's torch threads too (0: torch's default): jobs run side by side, and two
    of them each spinning two threads on two cores cost three times the CPU time (measured on the probes)."""
    n = cfg["train"]["threads"]
    if not n:
        return
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(n)
    else:
        os.environ["OMP_NUM_THREADS"] = str(n)  # read when a section first imports torch


def evaluate(checkpoint: str | Path, out_dir: str | Path, *, only=None, sets=(), overrides: dict | None = None,
             expect_config=None, progress: bool = True, replace: bool = False,
             triggers: dict | None = None) -> list[Path]:
    """Run the sections `only` (default: every section that applies to the run, features first) and return
    the JSON files written. `sets` are `key=value` overrides and `overrides` a nested dict of eval.* and
    data.* keys. A folder holding a run or another run's evaluation is refused, or with `replace` replaced
    whole (bayesncl.runs.ownership); the run's own eval/ folder is always its own. `triggers`: {section: the rerun
    trigger the workflow gave it (bayesncl.grid.expand.job_trigger)} for each section in `only`, recorded in its
    file's run block, where `bayesncl stale` compares it with today's."""
    if triggers is not None and (not isinstance(triggers, dict) or sorted(triggers) != sorted(only or ())):
        raise ConfigError("--trigger-json: expected {section: trigger} for exactly the sections of --only "
                          f"({', '.join(only or ()) or 'none given'})")
    from ..runs.ownership import into, other_evaluation

    out = Path(out_dir)
    # the run's own evaluation: its numbers go to the run's TensorBoard curves too (bayesncl.runs.events)
    own = out.resolve() == (Path(checkpoint).parent / EVAL).resolve()
    with into(out, other_evaluation(out, checkpoint, lambda: _digest(checkpoint)), replace) as where:
        written = _evaluate(Path(checkpoint), where, only, sets, overrides, expect_config, progress, own, triggers)
    return [out / p.name for p in written]


def _digest(checkpoint) -> str:
    return files.weights_digest(files.load(checkpoint)["model"])


def _evaluate(checkpoint: Path, out: Path, only, sets, overrides, expect_config, progress, own: bool,
              triggers) -> list[Path]:
    for name in only or ():
        SECTIONS[name]  # an unknown name: the registry's one line, naming the sections allowed
    state, cfg = None, None
    recorded = _recorded(out) if only and "features" not in only else None
    if recorded is not None:
        stored = recorded["config"]
        cfg = _config(stored, checkpoint, sets, overrides, expect_config)
        if any(SECTIONS[n].model(cfg) for n in only):
            cfg = None  # a section that runs the model reads the checkpoint itself
    if cfg is None:
        state = files.load(checkpoint)
        stored = files.stored_config(state, checkpoint)
        cfg = _config(stored, checkpoint, sets, overrides, expect_config)
        weights_sha = files.weights_digest(state["model"])
        imported = state.get("imported")  # weights of the released code (bayesncl.runs.released)
    else:
        weights_sha = recorded["run"]["weights_sha"]
        imported = recorded["run"].get("imported")
    _torch_threads(cfg)
    names = list(only) if only else applicable(cfg)
    for name in names:
        check_applies(name, cfg)
    names = [n for n in SECTIONS if n in names]  # features before the sections that read it
    ctx = Context(checkpoint, out, cfg, progress, state=state, weights_sha=weights_sha, stored_config=stored)
    run = {**run_info(cfg), "checkpoint": str(checkpoint), "weights_sha": weights_sha,
           **({"imported": imported} if imported else {})}
    written = []
    mark_ready()  # imports, config and checkpoint loaded: the work begins (bayesncl.core.startup)
    for name in names:
        result = SECTIONS[name].compute(ctx)
        path = out / f"{name}.json"
        trigger = {"trigger": triggers[name]} if triggers is not None else {}
        record = clean({"run": {**run, **trigger}, **result})
        atomic_write_text(path, json.dumps(record, indent=2) + "\n")
        if own:
            write_section(ctx.run_dir, name, record)
        written.append(path)
    return written


# ------------------------------------------------------------------------------------------ what a section reads
def run_info(cfg: dict) -> dict:
    """The run identity every section file carries, so a file read alone says what it measured: its settings
    (config.run_settings) and the BatchNorm mode of its features."""
    return {**run_settings(cfg), "eval_bn": cfg["eval"]["bn"]}


def clean(x):
    """JSON-safe: tensors/ndarrays to lists, NaN to None."""
    torch = sys.modules.get("torch")  # a tensor exists only where torch was imported
    if isinstance(x, dict):
        return {str(k): clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [clean(v) for v in x]
    if torch is not None and isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    if isinstance(x, np.ndarray):
        return clean(x.tolist())
    if isinstance(x, (np.floating, np.integer, np.bool_)):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def subset(ds, n: int, seed: int):
    """At most n images of an ImageSet: a seeded random subset in the original order (eval.max_images)."""
    if not n or len(ds) <= n:
        return ds
    import dataclasses

    import torch

    idx = np.sort(np.random.default_rng(seed).choice(len(ds), n, replace=False))
    t = torch.from_numpy(idx)
    pick = (lambda v: v[t] if v is not None else None)
    return dataclasses.replace(ds, images=pick(ds.images), labels=pick(ds.labels), backgrounds=pick(ds.backgrounds),
                               dataset=_Subset(ds.dataset, idx.tolist()) if ds.dataset is not None else None)


class _Subset:
    """Items idx of a file-backed dataset; keeps its stored_size."""

    def __init__(self, dataset, idx: list[int]):
        self.dataset, self.idx, self.stored_size = dataset, idx, getattr(dataset, "stored_size", None)

    def __len__(self) -> int:
        return len(self.idx)

    def __getitem__(self, i):
        return self.dataset[self.idx[i]]


class Context:
    """The run config, the model (on the CPU or the device), data splits and the cached features.

    `state` is the loaded checkpoint, or None where the sections read only the cache (then `weights_sha`
    comes from features.json)."""

    def __init__(self, checkpoint: Path, out: Path, cfg: dict, progress: bool, *, state: dict | None,
                 weights_sha: str, stored_config: dict):
        self.checkpoint, self.out, self.cfg, self.progress = checkpoint, out, cfg, progress
        self.stored_config = stored_config  # as the checkpoint holds it, before this call's eval/data settings
        self.run_dir = checkpoint.parent
        self._state = state
        self._splits: dict = {}
        self.weights_sha = weights_sha

    @cached_property
    def cpu_model(self):
        if self._state is None:
            self._state = files.load(self.checkpoint)
        return files.model_from_state(self._state, self.checkpoint)

    @cached_property
    def device(self):
        from ..training.device import resolve_device

        return resolve_device(self.cfg)

    @cached_property
    def model(self):
        """The model on the evaluation device (a copy: `cpu_model` stays on the CPU)."""
        import torch

        from ..training.device import channels_last

        model = copy.deepcopy(self.cpu_model).to(self.device)
        if channels_last(self.cfg, self.device):
            model = model.to(memory_format=torch.channels_last)
        return model

    def nonempty(self, ds, what: str):
        if len(ds.labels) == 0:
            raise DataError(f"{what}: the split is empty; evaluation needs at least one image")
        return subset(ds, self.cfg["eval"]["max_images"], self.cfg["seed"])

    def split(self, name: str):
        from ..data import load_split

        if name not in self._splits:
            ds = self.cfg["data"]["dataset"]
            self._splits[name] = self.nonempty(load_split(self.cfg["data"], name), f"{ds} {name} split")
        return self._splits[name]

    def embed(self, ds, keys: tuple[str, ...], bn: str):
        """The model's outputs `keys` over `ds` with BatchNorm mode `bn` (training.embed.bn_mode)."""
        from ..training.embed import embed

        return embed(self.model, ds, self.cfg, self.device, key=keys, bn=bn)

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
