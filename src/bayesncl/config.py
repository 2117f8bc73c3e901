"""Run configuration: defaults, YAML files, `--set key=value` overrides and validation.

A config is a nested dict. Every key has a default here; validation runs before any work and names the
bad key, the value it got and what is allowed.
"""

from __future__ import annotations

import copy
import json
import math
import shlex
from pathlib import Path
from typing import Any

import yaml

from .errors import ConfigError  # re-exported: its old home

DATASETS = ("synthetic", "cifar10", "cifar100", "imagenet100")
# The keys of bayesncl.methods.METHODS, named here so validating a config (e.g. when Snakemake builds the
# DAG) needs no torch import; methods.py checks at import that the two agree.
METHOD_NAMES = ("cl", "ncl", "topk_ncl", "bayesncl")
# Table 2 retrieval K per dataset (docs/METHOD.md section 5); the synthetic set uses a CIFAR-10-like K.
RETRIEVAL_K = {"synthetic": 32, "cifar10": 64, "cifar100": 128, "imagenet100": 256}

DEFAULTS: dict[str, Any] = {
    "seed": 0,
    "data": {
        "dataset": "synthetic",
        "root": None,
        "download": False,
        "cache_dir": None,
        "imagenet_stored_size": 256,
        "classes": None,
        "num_workers": 4,
        "synthetic": {
            "num_classes": 10,
            "num_backgrounds": 6,
            "num_common": 2,
            "prevalence": 0.8,
            "train_size": 2000,
            "test_size": 1000,
            "image_size": 32,
            "seed": 0,
        },
    },
    "model": {"arch": "resnet18", "width": 64, "stem": "cifar", "proj_hidden": 2048, "proj_dim": 256},
    "method": {
        "name": "bayesncl",
        # rep_relu: the released BayesNCL configs' non-negativity (docs/METHOD.md section 1).
        "nonneg": "rep_relu",
        "rho": 0.8,
        "lambda": 3.0e-5,
        "gate": "ste",
        "detach": True,
        "head_depth": 2,
        "tau_g": 1.0,
        "head_lr_mult": 0.25,
        "temperature": 0.2,
        # Top-k NCL's k; null = round(D / 10) [choice] (docs/METHOD.md section 2).
        "topk_k": None,
    },
    "train": {
        "epochs": 200,
        "batch_size": 256,
        "base_lr": 0.4,
        "weight_decay": 1.0e-4,
        "momentum": 0.9,
        "trust_coeff": 0.02,
        "warmup_epochs": 10,
        "warmup_start_lr": 3.0e-5,
        "precision": "auto",
        "device": "auto",
        "crop_min_scale": 0.08,
        "channels_last": True,
        # torch.compile the training step (opt-in; measured no faster on an H200, docs/BENCHMARKS.md). Bit-identical
        # resume is tested without it only.
        "compile": False,
        "threads": 0,
        "dynamics_every": 0,
        "max_steps_per_epoch": 0,
    },
    "eval": {
        "probe": "fast",
        "probe_epochs": 50,
        "retrieval_k": None,
        "waterbirds_root": None,
        "batch_size": 512,
    },
}


# Keys that never change the trained weights (where things run, what is recorded, how it is evaluated):
# a checkpoint may be resumed or evaluated with other values, and the workflow leaves them out of a run's id.
RUNTIME_KEYS = ("train.dynamics_every", "train.device", "train.threads", "data.num_workers", "data.cache_dir",
                "data.root", "eval.")


def _isnum(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _isint(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _choice(*allowed):
    return (lambda v: v in allowed, "one of " + ", ".join(map(str, allowed)))


_POS_INT = (lambda v: _isint(v) and v > 0, "a positive integer")
_NONNEG_INT = (lambda v: _isint(v) and v >= 0, "an integer >= 0")
_POS_NUM = (lambda v: _isnum(v) and v > 0, "a positive number")
_NONNEG_NUM = (lambda v: _isnum(v) and v >= 0, "a number >= 0")
_BOOL = (lambda v: isinstance(v, bool), "true or false")
_OPT_STR = (lambda v: v is None or isinstance(v, str), "a path (string) or null")
_UNIT_OPEN = (lambda v: _isnum(v) and 0 < v < 1, "a number strictly between 0 and 1")

RULES: dict[str, tuple] = {
    "seed": _NONNEG_INT,
    "data.dataset": _choice(*DATASETS),
    "data.root": _OPT_STR,
    "data.download": _BOOL,
    "data.cache_dir": _OPT_STR,
    "data.imagenet_stored_size": _POS_INT,
    "data.num_workers": _NONNEG_INT,
    "data.classes": (lambda v: v is None or isinstance(v, str) or (isinstance(v, list) and v),
                     "null (the shipped ImageNet-100 list), a file of WordNet ids, or a list of them"),
    "data.synthetic.num_classes": (lambda v: _isint(v) and 10 <= v <= 13, "an integer in [10, 13] (shapes drawn)"),
    "data.synthetic.num_backgrounds": (lambda v: _isint(v) and 2 <= v <= 8, "an integer in [2, 8] (textures)"),
    "data.synthetic.num_common": _POS_INT,
    "data.synthetic.prevalence": (lambda v: _isnum(v) and 0 <= v <= 1, "a number in [0, 1]"),
    "data.synthetic.train_size": _POS_INT,
    "data.synthetic.test_size": _POS_INT,
    "data.synthetic.image_size": (lambda v: _isint(v) and v >= 16, "an integer >= 16"),
    "data.synthetic.seed": _NONNEG_INT,
    "model.arch": _choice("resnet18", "resnet50"),
    "model.width": _POS_INT,
    "model.stem": _choice("cifar", "imagenet"),
    "model.proj_hidden": _POS_INT,
    "model.proj_dim": _POS_INT,
    "method.name": _choice(*METHOD_NAMES),
    "method.nonneg": _choice("relu", "rep_relu"),
    "method.rho": _UNIT_OPEN,
    "method.lambda": _NONNEG_NUM,
    "method.gate": _choice("ste", "gumbel", "soft"),
    "method.detach": _BOOL,
    "method.head_depth": _choice(1, 2, 3),
    "method.tau_g": _POS_NUM,
    "method.head_lr_mult": _POS_NUM,
    "method.temperature": _POS_NUM,
    "method.topk_k": (lambda v: v is None or (_isint(v) and v > 0), "a positive integer or null (round(D / 10))"),
    "train.epochs": _POS_INT,
    "train.batch_size": (lambda v: _isint(v) and v >= 2, "an integer >= 2"),
    "train.base_lr": _POS_NUM,
    "train.weight_decay": _NONNEG_NUM,
    "train.momentum": (lambda v: _isnum(v) and 0 <= v < 1, "a number in [0, 1)"),
    "train.trust_coeff": _POS_NUM,
    "train.warmup_epochs": _NONNEG_INT,
    "train.warmup_start_lr": _NONNEG_NUM,
    "train.precision": _choice("auto", "bf16", "fp32"),
    "train.device": _choice("auto", "cpu", "cuda"),
    "train.crop_min_scale": (lambda v: _isnum(v) and 0 < v <= 1, "a number in (0, 1]"),
    "train.channels_last": _BOOL,
    "train.compile": _BOOL,
    "train.threads": _NONNEG_INT,
    "train.dynamics_every": _NONNEG_INT,
    "train.max_steps_per_epoch": _NONNEG_INT,
    "eval.probe": _choice("fast", "paper"),
    "eval.probe_epochs": _POS_INT,
    "eval.retrieval_k": (lambda v: v is None or (_isint(v) and v > 0), "a positive integer or null"),
    "eval.waterbirds_root": _OPT_STR,
    "eval.batch_size": _POS_INT,
}


def flatten(d: dict, prefix: str = "") -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _merge(base: dict, over: dict, prefix: str = "") -> dict:
    for k, v in over.items():
        key = f"{prefix}{k}"
        if k not in base:
            known = ", ".join(sorted(base))
            raise ConfigError(f"{key}: unknown key; known keys here: {known}")
        if isinstance(base[k], dict):
            if not isinstance(v, dict):
                raise ConfigError(f"{key}: expected a mapping of {', '.join(base[k])}, got {v!r}")
            _merge(base[k], v, key + ".")
        else:
            if _isnum(base[k]) and isinstance(v, str):
                v = _number(v, key)
            base[k] = v
    return base


def _number(v: str, key: str):
    """YAML 1.1 reads `3e-5` (no dot) as a string; accept it where a number is expected."""
    try:
        return float(v)
    except ValueError:
        return v  # validation reports it with the key


def parse_set(item: str) -> tuple[str, Any]:
    """`a.b=value` -> ("a.b", YAML-parsed value)."""
    if "=" not in item:
        raise ConfigError(f"--set {item!r}: expected key=value, e.g. method.rho=0.7")
    key, raw = item.split("=", 1)
    key = key.strip()
    if not raw.strip():
        return key, None
    try:
        return key, yaml.safe_load(raw)
    except yaml.YAMLError as e:
        problem = getattr(e, "problem", None) or type(e).__name__
        raise ConfigError(
            f"--set {key}: value {raw!r} is not valid YAML ({problem}); give a number, true/false, a closed "
            f"[list], or quote a string: --set {shlex.quote(f'{key}={json.dumps(raw)}')}"
        ) from None


def nest(pairs: dict[str, Any]) -> dict:
    out: dict = {}
    for key, value in pairs.items():
        node = out
        parts = key.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = value
    return out


def validate(cfg: dict) -> dict:
    flat = flatten(cfg)
    for key, (check, allowed) in RULES.items():
        value = flat.get(key)
        if not check(value):
            raise ConfigError(f"{key}: got {value!r}, expected {allowed}")
    # Real datasets are read from a path the user gives.
    if cfg["data"]["dataset"] != "synthetic" and not cfg["data"]["root"]:
        raise ConfigError(
            f"data.root: dataset {cfg['data']['dataset']!r} needs a root path (set data.root=/path/to/data)"
        )
    syn = cfg["data"]["synthetic"]
    if syn["num_common"] >= syn["num_backgrounds"]:
        raise ConfigError("data.synthetic.num_common: must be smaller than data.synthetic.num_backgrounds")
    if cfg["method"]["name"] == "topk_ncl" and not 1 <= topk_k(cfg) <= cfg["model"]["proj_dim"]:
        raise ConfigError(f"method.topk_k: k = {topk_k(cfg)} must lie in [1, model.proj_dim = "
                          f"{cfg['model']['proj_dim']}] for topk_ncl")
    return cfg


def crop_size(cfg: dict) -> int:
    """Training crop side: 32 for CIFAR, 224 for ImageNet-100, the generated size for the synthetic set."""
    d = cfg["data"]["dataset"]
    return {"cifar10": 32, "cifar100": 32, "imagenet100": 224}.get(d, cfg["data"]["synthetic"]["image_size"])


def topk_k(cfg: dict) -> int:
    """Top-k NCL's k: `method.topk_k`, else round(D / 10), at least 1."""
    k = cfg["method"].get("topk_k")
    return int(k) if k is not None else max(1, int(round(cfg["model"]["proj_dim"] / 10)))


def resolve(base: dict | None = None, sets: list[str] | tuple = (), file: str | Path | None = None) -> dict:
    """Defaults <- YAML file <- base dict <- `--set` overrides, then validate."""
    cfg = copy.deepcopy(DEFAULTS)
    if file is not None:
        path = Path(file)
        if not path.is_file():
            raise ConfigError(f"config file {path} does not exist")
        try:
            loaded = yaml.safe_load(path.read_text()) or {}
        except OSError as e:
            raise ConfigError(f"config file {path}: cannot be read ({e.strerror})") from e
        except yaml.YAMLError as e:
            raise ConfigError(f"config file {path}: not valid YAML ({e})") from e
        if not isinstance(loaded, dict):
            raise ConfigError(f"config file {path}: expected a mapping at the top level")
        _merge(cfg, loaded)
    if base:
        _merge(cfg, copy.deepcopy(base))
    if sets:
        _merge(cfg, nest(dict(parse_set(s) for s in sets)))
    return validate(cfg)


def load_yaml(path: str | Path) -> dict:
    return yaml.safe_load(Path(path).read_text()) or {}


def dump_yaml(cfg: dict) -> str:
    return yaml.safe_dump(cfg, sort_keys=False)
