"""Run configuration: one typed definition, YAML files, `--set key=value` overrides and validation.

The dataclasses below (`Config` and its sections) are the definition: a field's annotation is its type
(`typing.Literal` for a choice), its default the default, and its metadata the range, what null means
and a one-line doc. The rest of the code uses plain nested dicts (`cfg["train"]["epochs"]`);
`DEFAULTS`, the per-key checks `RULES` and `KEYS_ADDED` are derived from the definition; the names a method or
a dataset may take are bayesncl.settings.registry's (a key's check: bayesncl.settings.keyrules; YAML files and `--set`
items: bayesncl.core.yamlio). Validation runs before any work and names the bad key, the value it got and what is
allowed.
"""

from __future__ import annotations

import copy
import numbers
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, Callable, Literal

import yaml

from . import registry
from ..core.errors import ConfigError
from .keyrules import _rule, _walk
from ..core.yamlio import load_yaml_file, nest, parse_set


# What the synthetic generator can draw: len(bayesncl.data.synthetic.SHAPES) and len(TEXTURES) (checked
# there at import), named here so validating a config needs no torch import.
SYNTHETIC_SHAPES = 13
SYNTHETIC_TEXTURES = 8

_PATH = "a path (string) or null"


def _field(default, doc: str, **meta) -> Any:
    """A config key: its default, a one-line doc and optional constraints: ge/gt/le/lt (range), null (what
    null means), note (why the range), expected (the allowed-values phrase where the type cannot say it),
    key (the config key where it is not a Python name)."""
    return field(default=default, metadata={"doc": doc, **meta})


def _names(of: Callable[[], tuple[str, ...]], plugin: str) -> dict:
    """Metadata of a key whose values are a registry's names (checked against it as it is when validating), which
    a plugin's `plugin` (a method, a dataset) adds to."""
    return {"choices": of, "plugin": plugin}


def _section(cls, doc: str) -> Any:
    return field(default_factory=cls, metadata={"doc": doc})


@dataclass
class SyntheticConfig:
    """`data.synthetic`: the generated compositional set (docs/METHOD.md section 3.1)."""

    # At least 2 classes: with one there is nothing to classify.
    num_classes: int = _field(10, "classes: the first num_classes of the generator's shapes",
                              ge=2, le=SYNTHETIC_SHAPES, note=f"the generator draws {SYNTHETIC_SHAPES} shapes")
    # 1 background: no nuisance at all (a control).
    num_backgrounds: int = _field(6, "background textures: the first num_backgrounds of the generator's",
                                  ge=1, le=SYNTHETIC_TEXTURES,
                                  note=f"the generator draws {SYNTHETIC_TEXTURES} textures")
    # 0: every texture equally often; equal to num_backgrounds: the same (prevalence then has no effect).
    num_common: int = _field(2, "the first num_common textures are drawn with probability prevalence; at "
                                "most num_backgrounds", ge=0)
    prevalence: float = _field(0.8, "probability that an image's background is one of the common textures",
                               ge=0, le=1)
    train_size: int = _field(2000, "training images", gt=0)
    test_size: int = _field(1000, "test images", gt=0)
    # 8 px: an object is then 6-7 px across; smaller images still draw, but the shapes are a few pixels.
    image_size: int = _field(32, "image side in pixels, also the training crop", ge=8)
    seed: int = _field(0, "the generator's seed (the set does not change with the run's seed)", ge=0)


@dataclass
class ImageFolderConfig:
    """`data.imagefolder`: the sizes of a folder dataset (bayesncl.data.imagefolder)."""

    stored_size: int = _field(256, "images are decoded once to this side (short side resized, central square)",
                              gt=0, added=256)
    crop_size: int = _field(224, "the network's input side (training crops, evaluation)", gt=0, added=224)


@dataclass
class DataConfig:
    """`data`: the dataset."""

    dataset: str = _field("synthetic", "the training dataset (bayesncl.settings.registry.DATASETS)",
                          **_names(registry.training_datasets, "dataset"))
    root: str | None = _field(None, "the dataset's folder; every dataset but synthetic needs one",
                              expected=_PATH)
    download: bool = _field(False, "let torchvision download CIFAR into root when it is missing")
    cache_dir: str | None = _field(None, "the cache folder of the synthetic set and of ImageNet-100's prepared "
                                         "copy; null: $BAYESNCL_CACHE or ~/.cache/bayesncl", expected=_PATH)
    imagenet_stored_size: int = _field(256, "ImageNet-100 images are decoded once to this side (short side "
                                            "resized, central square)", gt=0)
    classes: str | list[str] | None = _field(
        None, "the ImageNet-100 classes",
        expected="null (the shipped ImageNet-100 list), a file of WordNet ids, or a list of them")
    num_workers: int = _field(4, "DataLoader workers for file-backed datasets", ge=0)
    synthetic: SyntheticConfig = _section(SyntheticConfig, "the synthetic set's parameters")
    imagefolder: ImageFolderConfig = _section(ImageFolderConfig, "a folder dataset's sizes (data.dataset imagefolder)")


@dataclass
class ModelConfig:
    """`model`: backbone and projector."""

    arch: Literal["resnet18", "resnet50"] = _field("resnet18", "the backbone")
    width: int = _field(64, "the backbone's base width (64: the standard network)", gt=0)
    stem: Literal["cifar", "imagenet"] = _field("cifar", "cifar: 3x3 conv, no max-pool; imagenet: torchvision's")
    # The released code (solo-learn) pads the CIFAR stem's conv1 by 2; 1 is the demo's [choice] and what every run
    # before the key did (docs/METHOD.md section 2). config/paper.yaml sets 2 for its CIFAR datasets.
    cifar_padding: int = _field(1, "the CIFAR stem's 3x3 conv1 padding (released: 2)", ge=0, le=3,
                                note="3x3 kernel", added=1)
    proj_hidden: int = _field(2048, "the projector's hidden width H (also the gating head's)", gt=0)
    proj_dim: int = _field(256, "the feature dimension D", gt=0)


@dataclass
class MethodConfig:
    """`method`: the method and its settings (docs/METHOD.md section 1)."""

    name: str = _field("bayesncl", "the method (docs/METHOD.md section 1; bayesncl.settings.registry.METHODS)",
                       **_names(registry.METHODS.names, "method"))
    # rep_relu: the released CIFAR configs' non-negativity; the released ImageNet-100 config uses relu
    # (docs/METHOD.md section 1; config/paper.yaml follows each dataset's).
    nonneg: Literal["relu", "rep_relu"] = _field("rep_relu", "how z+ is made non-negative")
    rho: float = _field(0.8, "the gate prior Bern(rho)", gt=0, lt=1)
    lambda_: float = _field(3.0e-5, "the KL term's weight", ge=0, key="lambda")
    gate: Literal["ste", "gumbel", "soft"] = _field("ste", "the gate kind (Table 4)")
    detach: bool = _field(True, "the gating head reads the backbone feature with its gradient stopped")
    head_depth: Literal[1, 2, 3] = _field(2, "the gating head's layers (Table 4)")
    tau_g: float = _field(1.0, "the gate temperature", gt=0)
    # Absolute, as the released configs' optimizer.gating_head_lr (0.1 in each): not scaled by batch / 256.
    head_lr: float = _field(0.1, "the gating head's peak lr (absolute; same warm-up and cosine as the rest)", gt=0)
    temperature: float = _field(0.2, "the InfoNCE temperature T", gt=0)
    # Top-k NCL's k; null = round(D / 10) [choice] (docs/METHOD.md section 2).
    topk_k: int | None = _field(None, "Top-k NCL's k", gt=0, null="round(D / 10)")


@dataclass
class TrainConfig:
    """`train`: pretraining (docs/METHOD.md section 2)."""

    epochs: int = _field(200, "training epochs; 0: no training, the random-init network (a reference)", ge=0)
    batch_size: int = _field(256, "images per step (each view needs another image's views as negatives)", ge=2)
    base_lr: float = _field(0.4, "the peak lr at batch 256 (scaled by batch / 256)", gt=0)
    weight_decay: float = _field(1.0e-4, "LARS weight decay", ge=0)
    momentum: float = _field(0.9, "LARS momentum", ge=0, lt=1)
    trust_coeff: float = _field(0.02, "the LARS trust coefficient", gt=0)
    warmup_epochs: int = _field(10, "linear warm-up epochs before the cosine decay", ge=0)
    warmup_start_lr: float = _field(3.0e-5, "the lr the warm-up starts from", ge=0)
    precision: Literal["auto", "bf16", "fp16", "fp32"] = _field(
        "auto", "auto: bf16 autocast on CUDA, fp32 on CPU; fp16: the released precision (needs loss_scaler fp16)")
    # The released code's fp16 GradScaler skips each step whose scaled gradients overflow, gradient spikes
    # that start a collapse among them (docs/METHOD.md sections 2 and 10); under fp32 or bf16 it is emulated.
    loss_scaler: Literal["fp16", "none"] = _field(
        "fp16", "fp16: skip the steps the released fp16 loss scaler skips (real under precision fp16, emulated "
                "under fp32 and bf16); none: take every step", added="none")
    device: Literal["auto", "cpu", "cuda"] = _field("auto", "auto: CUDA when available, else CPU")
    crop_min_scale: float = _field(0.08, "RandomResizedCrop's smallest area scale", gt=0, le=1)
    channels_last: bool = _field(True, "channels-last memory format (CUDA only)")
    # How the training step runs (docs/BENCHMARKS.md, "The training step"): eager; compile = torch.compile of the
    # whole step (augmentation, forward, loss, backward, LARS) as one graph, with CUDA graphs on CUDA; cudagraph =
    # the eager step captured once in a CUDA graph and replayed (CUDA only). Bit-identical resume is tested in eager
    # mode; the graph modes compute the same step up to rounding (tests/test_step_compile.py).
    graph: Literal["eager", "compile", "cudagraph"] = _field("eager", "how the training step runs: eager, compiled, "
                                                                  "or captured in a CUDA graph (CUDA only)")
    # view: the backbone once per view, as the released training step (docs/METHOD.md section 2); joint: one
    # pass over both views (BatchNorm over 2N images), kept to measure what the protocol changes.
    bn: Literal["view", "joint"] = _field("view", "BatchNorm batch in training: each view's N images, or both views")
    # Resume on a GPU is bit-identical with deterministic kernels only (docs/REPRODUCIBILITY.md); off by default:
    # their cost on a GPU is not measured yet. A runtime key: it changes no run's id or rerun trigger.
    deterministic: bool = _field(False, "deterministic algorithms and cuDNN kernels (what the GPU resume check "
                                        "runs with)", added=False)
    threads: int = _field(0, "torch CPU threads; 0: torch's default", ge=0)
    dynamics_every: int = _field(0, "record gradient dynamics every this many epochs; 0: never", ge=0)
    max_steps_per_epoch: int = _field(0, "cap on steps per epoch; 0: no cap", ge=0)


@dataclass
class EvalConfig:
    """`eval`: evaluation."""

    probe: Literal["fast", "paper"] = _field("fast", "the linear probe protocol (docs/METHOD.md section 5)")
    probe_epochs: int = _field(50, "epochs of the paper-protocol probe", gt=0)
    retrieval_k: int | None = _field(None, "retrieval's K (docs/METHOD.md section 5)", gt=0,
                                     null="the dataset's RETRIEVAL_K")
    waterbirds_root: str | None = _field(None, "Waterbirds folder: the background probe for datasets without "
                                               "background labels", expected=_PATH)
    # batch: BatchNorm normalises with the statistics of each batch of train.batch_size test images in dataset
    # order, as the released evaluation script (it never calls model.eval(); its batch is the pretraining
    # batch); the saved running statistics are left unchanged. running: eval mode. The linear and background
    # probes' h always uses running statistics, as the released linear probe.
    bn: Literal["batch", "running"] = _field("batch", "BatchNorm statistics of the evaluation features "
                                                      "(docs/METHOD.md section 4)")
    batch_size: int = _field(512, "images per evaluation forward pass (eval.bn=running)", gt=0)
    # The smoke run's small evaluation subsets (workflow config `smoke: true`).
    max_images: int = _field(0, "cap on the images of each evaluated split (a seeded subset); 0: all", ge=0)


@dataclass
class Config:
    """The run config; `as_dict(Config())` is DEFAULTS."""

    seed: int = _field(0, "the run's seed (initialisation, data order, augmentation)", ge=0)
    data: DataConfig = _section(DataConfig, "the dataset")
    model: ModelConfig = _section(ModelConfig, "backbone and projector")
    method: MethodConfig = _section(MethodConfig, "the method and its settings")
    train: TrainConfig = _section(TrainConfig, "pretraining")
    eval: EvalConfig = _section(EvalConfig, "evaluation")


# Keys that change neither the trained weights nor what a run records (where things run, how it is evaluated):
# a checkpoint may be resumed or evaluated with other values, and the workflow leaves them out of a run's id.
# train.dynamics_every is not one: it decides whether the run writes dynamics.pt.
RUNTIME_KEYS = ("train.device", "train.threads", "train.deterministic", "data.num_workers", "data.cache_dir",
                "data.root", "eval.")
# The settings that tell runs apart first: a run id names these, in this order, where they differ from the dataset's
# base, then any other setting that does, by key (bayesncl.grid.expand.run_id). A method reads those of its spec
# (registry.MethodSpec.reads); the others never tell its runs apart.
ID_ORDER = ("model.arch", "model.width", "model.proj_dim", "method.gate", "method.detach", "method.head_depth",
            "method.nonneg", "method.rho", "method.lambda", "method.topk_k")


# ---------------------------------------------------------------------------------------------------
# Derived from the definition


def as_dict(obj) -> dict:
    """A config dataclass instance as the nested dict the code uses (config keys, not Python names)."""
    out = {}
    for f in fields(obj):
        v = getattr(obj, f.name)
        out[f.metadata.get("key", f.name)] = as_dict(v) if is_dataclass(v) else copy.deepcopy(v)
    return out


DEFAULTS: dict[str, Any] = as_dict(Config())
# A run's settings as its records name them, {name: dotted key}: its dataset and method, ID_ORDER's settings, every
# other method setting of the package, its training budget and seed. Every evaluation file's run block and runs.csv
# carry them (run_settings), with a plugin method's own settings (registry.MethodSpec.settings) under their names.
RUN_KEYS: dict[str, str] = {
    "dataset": "data.dataset", "method": "method.name", **{k.split(".")[-1]: k for k in ID_ORDER},
    **{k: f"method.{k}" for k in DEFAULTS["method"] if k != "name" and f"method.{k}" not in ID_ORDER},
    "epochs": "train.epochs", "seed": "seed"}
# Dotted key -> (check, allowed): what `validate` applies to every key.
RULES: dict[str, tuple[Callable[[Any], bool], str]] = {key: _rule(tp, m) for key, tp, m in _walk(Config)}
# Number keys, by kind: where a YAML string like "3e-5" is read as a number, and what synthetic params coerce to.
_KIND: dict[str, type] = {key: tp for key, tp, _ in _walk(Config) if tp in (int, float)}


# ---------------------------------------------------------------------------------------------------
# Dicts, overrides, validation


def flatten(d: dict, prefix: str = "") -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def run_settings(cfg: dict) -> dict[str, Any]:
    """A run config's settings by name (RUN_KEYS, then its method's own settings, registry.MethodSpec.settings): what
    says which run a record is. A key the config lacks (a record older than the key) is left out."""
    flat = flatten(cfg)
    spec = registry.METHODS.get(flat.get("method.name"))
    own = {name: f"method.{name}" for name, _ in (spec.settings if spec is not None else ())}
    return {name: flat[key] for name, key in {**RUN_KEYS, **own}.items() if key in flat}


def merge(base: dict, over: dict, prefix: str = "") -> dict:
    """Write `over` into `base` (in place, and returned); a key `base` lacks is an error naming it."""
    for k, v in over.items():
        key = f"{prefix}{k}"
        plugin = registry.declared(key) if key not in RULES else None  # a plugin's setting or block
        if k not in base:
            if plugin is None:
                known = ", ".join(sorted({*base, *registry.declared_names(prefix)}))
                raise ConfigError(f"{key}: unknown key; known keys here: {known}")
            base[k] = {n: copy.deepcopy(s.default) for n, s in plugin.items()} if isinstance(plugin, dict) else None
        if isinstance(base[k], dict):
            if not isinstance(v, dict):
                raise ConfigError(f"{key}: expected a mapping of {', '.join(base[k])}, got {v!r}")
            merge(base[k], v, key + ".")
        else:
            if (_KIND.get(key) or getattr(plugin, "kind", None)) is float and isinstance(v, str):
                v = _number(v)
            base[k] = v
    return base


def _number(v: str):
    """YAML 1.1 reads `3e-5` (no dot) as a string; accept it where a number is expected."""
    try:
        return float(v)
    except ValueError:
        return v  # validation reports it with the key


def _check(flat: dict, prefix: str = "") -> None:
    from .plugins import how_to_load

    for key, (check, allowed) in RULES.items():
        if key.startswith(prefix) and not check(value := flat.get(key[len(prefix):])):
            plugin = getattr(allowed, "kind", None)  # a registry's names: a plugin may add the one meant
            raise ConfigError(f"{key}: got {value!r}, expected {allowed}" + (f"; {how_to_load(plugin)}" if plugin
                                                                              else ""))


def _check_synthetic_mix(syn: dict) -> None:
    # The one rule across synthetic keys (the generator draws any num_common from 0 to num_backgrounds).
    if syn["num_common"] > syn["num_backgrounds"]:
        raise ConfigError(f"data.synthetic.num_common: got {syn['num_common']!r}, expected an integer in "
                          f"[0, data.synthetic.num_backgrounds = {syn['num_backgrounds']}]")


def synthetic_params(params: dict | None) -> dict[str, Any]:
    """The `data.synthetic` section filled with its defaults and validated: the generator's parameters.

    Integers (numpy's too) become int and numbers float, so equal parameters hash to one cache key."""
    out = merge(copy.deepcopy(DEFAULTS["data"]["synthetic"]), dict(params or {}), "data.synthetic.")
    for k, v in out.items():
        if _KIND[f"data.synthetic.{k}"] is int and isinstance(v, numbers.Integral) and not isinstance(v, bool):
            out[k] = int(v)
    _check(out, "data.synthetic.")
    _check_synthetic_mix(out)
    return {k: _KIND[f"data.synthetic.{k}"](v) for k, v in out.items()}


def _plugin_settings(cfg: dict) -> None:
    """The run's plugin settings (registry.settings_of: its method's, its dataset's, every section's) laid in at
    their defaults where missing and checked as the package's keys are; another method's or dataset's settings,
    which merge took from a layer every run shares (a grid's defaults), are left out: unread, like a method.* key
    of the package that a method does not read."""
    own = registry.settings_of(cfg)
    for block in ("method", "data"):  # every section's settings are every run's
        node = cfg.get(block) if isinstance(cfg.get(block), dict) else {}
        for k in [k for k in node if k not in DEFAULTS[block] and registry.declared(f"{block}.{k}") is not None]:
            if not any(o == f"{block}.{k}" or o.startswith(f"{block}.{k}.") for o in own):
                del node[k]
    for key, s in own.items():
        parts = key.split(".")
        if key in RULES or ".".join(parts[:2]) in RULES:
            raise ConfigError(f"{key}: a plugin declares a setting where the package has the key "
                              f"{'.'.join(parts[:2])}; give the plugin's setting another name")
        if parts[0] == "method" and parts[1] in RUN_KEYS:  # a run's records name its settings by their names
            raise ConfigError(f"{key}: a plugin declares a setting named as the run's {RUN_KEYS[parts[1]]} in its "
                              "records and runs.csv; give the plugin's setting another name")
        node = cfg
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        v = node.setdefault(parts[-1], copy.deepcopy(s.default))  # merge read "3e-5" as a number already
        check, allowed = s.rule()
        if not check(v):
            raise ConfigError(f"{key}: got {v!r}, expected {allowed}")


def validate(cfg: dict) -> dict:
    _plugin_settings(cfg)
    _check(flatten(cfg))
    # Real datasets are read from a path the user gives.
    if registry.DATASETS[cfg["data"]["dataset"]].needs_root and not cfg["data"]["root"]:
        raise ConfigError(
            f"data.root: dataset {cfg['data']['dataset']!r} needs a root path (set data.root=/path/to/data)"
        )
    _check_synthetic_mix(cfg["data"]["synthetic"])
    if cfg["train"]["precision"] == "fp16" and cfg["train"]["loss_scaler"] != "fp16":
        raise ConfigError("train.loss_scaler: fp16 training needs the loss scaler (its small gradients underflow "
                          "without it); set train.loss_scaler=fp16 or train.precision=bf16")
    if cfg["train"]["graph"] == "cudagraph" and cfg["train"]["device"] == "cpu":
        raise ConfigError("train.graph: 'cudagraph' captures the step in a CUDA graph and needs train.device cuda "
                          "(or auto on a CUDA machine); use 'compile' or 'eager' on CPU")
    pad, default_pad = cfg["model"]["cifar_padding"], DEFAULTS["model"]["cifar_padding"]
    if cfg["model"]["stem"] != "cifar" and pad != default_pad:  # read by no network: it must not tell runs apart
        raise ConfigError(f"model.cifar_padding: {pad} pads the CIFAR stem, and model.stem is {cfg['model']['stem']!r} "
                          f"(torchvision's 7x7 conv1); leave it at {default_pad} or set model.stem=cifar")
    name = cfg["method"]["name"]
    if "topk_k" in registry.METHODS[name].reads and not 1 <= topk_k(cfg) <= cfg["model"]["proj_dim"]:
        raise ConfigError(f"method.topk_k: k = {topk_k(cfg)} must lie in [1, model.proj_dim = "
                          f"{cfg['model']['proj_dim']}] for {name}")
    return cfg


def crop_size(cfg: dict) -> int:
    """Training crop side, the dataset's (bayesncl.settings.registry): 32 for CIFAR, 224 for ImageNet-100, the generated
    size for the synthetic set."""
    return registry.DATASETS[cfg["data"]["dataset"]].crop_size(cfg)


def topk_k(cfg: dict) -> int:
    """Top-k NCL's k: `method.topk_k`, else round(D / 10), at least 1."""
    k = cfg["method"].get("topk_k")
    return int(k) if k is not None else max(1, int(round(cfg["model"]["proj_dim"] / 10)))


# Keys added after runs were recorded, with what every run before them did (a key's `added`; not always today's
# default: train.loss_scaler's default is fp16, runs before it took every step). A key declared so leaves the
# rerun trigger of a run that has that value (bayesncl.grid.expand.trigger_config): adding a key whose `added` is its
# default reruns nothing.
KEYS_ADDED: dict[str, Any] = {key: m["added"] for key, _, m in _walk(Config) if "added" in m}


def as_recorded(cfg: dict) -> dict:
    """A config recorded by an earlier version (a checkpoint's, a run's config.resolved.yaml), completed:
    evaluation keys it lacks take their defaults (they never change what was trained), keys added since take
    what runs did before them (KEYS_ADDED). Anything else is left for validation to judge."""
    if not isinstance(cfg, dict):
        return cfg
    out = copy.deepcopy(cfg)
    if isinstance(out.get("eval", {}), dict):
        out["eval"] = {**copy.deepcopy(DEFAULTS["eval"]), **out.get("eval", {})}
    for key, value in keys_added(out).items():
        node, parts = out, key.split(".")
        for i, p in enumerate(parts[:-1]):  # a plugin's block may be missing whole: made (a package one never is)
            node = (node.setdefault(p, {}) if i and key not in KEYS_ADDED else node.get(p)) \
                if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.setdefault(parts[-1], copy.deepcopy(value))
    return out


def keys_added(cfg: dict) -> dict[str, Any]:
    """KEYS_ADDED, and the run's plugin settings declared with the value runs had before them (registry.setting's
    `added`): what leaves a rerun trigger unchanged (bayesncl.grid.expand.trigger_config) and completes an old
    record."""
    plugin = {k: s.added for k, s in registry.settings_of(cfg).items() if s.added is not registry.UNSET}
    return {**KEYS_ADDED, **plugin}


def resolve(base: dict | None = None, sets: list[str] | tuple = (), file: str | Path | None = None,
            recorded: bool = False) -> dict:
    """Defaults <- YAML file <- base dict <- `--set` overrides, then validate. recorded=True: the file is a
    run's recorded config (`as_recorded`), so a key it lacks means what that run did, not today's default."""
    cfg = copy.deepcopy(DEFAULTS)
    if file is not None:
        loaded = load_yaml_file(file, "config file") or {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"config file {file}: expected a mapping at the top level")
        merge(cfg, as_recorded(loaded) if recorded else loaded)
    if base:
        merge(cfg, copy.deepcopy(base))
    given = {parse_set(s)[0]: s for s in sets}
    if given:
        merge(cfg, nest({k: parse_set(s)[1] for k, s in given.items()}))
    validate(cfg)  # a bad value or method is named first
    refuse_undeclared(nest({k: None for k in given}), cfg["method"]["name"], lambda key: f"--set {given[key]}")
    return cfg


def refuse_undeclared(written: dict, method: str, place: Callable[[str], str]) -> None:
    """A method setting a plugin declares (registry.MethodSpec.settings), written for some runs in particular (a
    variant, a sweep, a `--set`) whose method does not declare it: one line naming where it was written (``place(
    dotted key)``) and the methods that declare it. The same key in a layer every run shares (a grid's defaults) is
    dropped instead (_plugin_settings), as is a package key a method does not read."""
    node = written.get("method") if isinstance(written, dict) else None
    own = dict(registry.METHODS[method].settings)
    for k in node if isinstance(node, dict) else ():
        if k not in own and registry.declared(f"method.{k}") is not None:
            who = registry.METHODS.names(lambda m: k in dict(m.settings))
            raise ConfigError(f"{place(f'method.{k}')}: method {method} does not declare {k} ({', '.join(who)} "
                              "does); remove it there or write it for one of those")


def dump_yaml(cfg: dict) -> str:
    return yaml.safe_dump(cfg, sort_keys=False)
