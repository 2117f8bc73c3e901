"""What an evaluation section reads (bayesncl.evaluation.sections), each part loaded on first use.

A section that needs the model gets the checkpoint's state; one that reads only the features cache gets
the run config and identity that the features section recorded from that checkpoint (features.json), and
never loads the checkpoint or imports torch.
"""

from __future__ import annotations

import copy
import math
import sys
from functools import cached_property
from pathlib import Path

import numpy as np

from ..core.atomic import atomic_path
from ..settings.config import run_settings
from ..core.errors import DataError, MissingInputError

__all__ = ["FEATURE_FILES", "Context", "clean", "run_info", "subset"]

# Array files the features section writes, per split.
FEATURE_FILES = {"test": "features.npz", "train": "features_train.npz"}


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
        from ..runs import checkpoint as ckpt_io

        if self._state is None:
            self._state = ckpt_io.load(self.checkpoint)
        return ckpt_io.model_from_state(self._state, self.checkpoint)

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
