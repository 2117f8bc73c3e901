"""The one list of names: every method and dataset the package knows, with the traits the rest of the code reads.

Config validation, the workflow's schema check, the grid, run ids, rerun triggers, evaluation, table rows, labels,
figures and the atlas find a method or a dataset here by its name and ask its spec, never compare the name itself
(tests/test_registry.py checks the source for that). Nothing here imports torch: validating a grid of synthetic runs
stays light. A spec names its implementation as "module:attribute", imported when a model or a split is built.

A new method or dataset is one file (docs/EXTENDING.md): a plugin module that calls `register_method` or
`register_dataset` (or decorates its class with `method`), named in the workflow config's `plugins:` list
(bayesncl.plugins imports it in every process of the run).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable, Generic, Iterator, TypeVar

from .errors import ConfigError

__all__ = ["BACKGROUND_PROBE", "DATASETS", "METHODS", "DatasetSpec", "MethodSpec", "Registry", "dataset",
           "dataset_label", "method", "method_label", "method_traits", "register_dataset", "register_method",
           "training_datasets"]

T = TypeVar("T")


class Registry(Generic[T]):
    """Specs by name, in registration order. `registry[name]` for an unknown name is one ConfigError line naming
    the config key and the names allowed."""

    def __init__(self, kind: str, key: str):
        self.kind, self.key = kind, key
        self._specs: dict[str, T] = {}

    def register(self, spec: T) -> T:
        name = spec.name  # type: ignore[attr-defined]
        old = self._specs.get(name)
        if old is not None and old != spec:
            where = getattr(old, "module", "") or "bayesncl"
            raise ConfigError(f"{self.key}: {self.kind} {name!r} is registered twice (first by {where}); give the "
                              "new one another name")
        self._specs[name] = spec
        return spec

    def unregister(self, name: str) -> None:
        """For tests that register a plugin and leave the registry as it was."""
        self._specs.pop(name, None)

    def __getitem__(self, name: str) -> T:
        try:
            return self._specs[name]
        except (KeyError, TypeError):
            raise ConfigError(f"{self.key}: unknown {self.kind} {name!r}; allowed: {', '.join(self._specs)} (a "
                              f"{self.kind} of a plugin needs its module in the workflow config's plugins: list)"
                              ) from None

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._specs))

    def __len__(self) -> int:
        return len(self._specs)

    def names(self, where: Callable[[T], bool] = lambda s: True) -> tuple[str, ...]:
        return tuple(n for n, s in self._specs.items() if where(s))

    def get(self, name: str, default: Any = None) -> T | Any:
        return self._specs.get(name, default)


def _resolve(target: "str | Any") -> Any:
    """A "module:attribute" string imported, or the object itself."""
    if not isinstance(target, str):
        return target
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


# ----------------------------------------------------------------------------------------------------- methods
@dataclass(frozen=True)
class MethodSpec:
    """A method (docs/METHOD.md section 1) as the rest of the code sees it."""

    name: str                        # method.name in a run config
    label: str                       # how tables and figures print it
    impl: "str | type"               # the bayesncl.methods.Method subclass, or "module:Class"
    # method.* keys the method reads (besides name); the others never tell its runs apart: run ids and rerun
    # triggers leave them out.
    reads: tuple[str, ...] = ("temperature",)
    always_named: tuple[str, ...] = ()  # keys named in its run ids even at their defaults (the operating point)
    nonnegative: bool = True         # its feature is built on z+: z+ is evaluated; retrieval with feature
    #                                  selection and gradient dynamics are defined (docs/METHOD.md sections 5-6)
    arrays: tuple[str, ...] = ()     # per-image outputs of its head the evaluation keeps ("gate", "mask")
    gated: bool = False              # a gate per dimension (gate curves, open gates, the gate kind in labels)
    masked: bool = False             # a Top-k mask (the "mask never bound" repeat flag)
    reference: bool = False          # the NCL baseline that figures and the saturation criterion read
    module: str = ""                 # the plugin that registered it ("" built in)

    def load(self) -> type:
        return _resolve(self.impl)


METHODS: Registry[MethodSpec] = Registry("method", "method.name")

_GATE_KEYS = ("rho", "lambda", "gate", "detach", "head_depth", "tau_g", "head_lr")
for _spec in (
    MethodSpec("cl", "SimCLR", "bayesncl.methods:CL", nonnegative=False),
    MethodSpec("ncl", "NCL", "bayesncl.methods:NCL", reads=("temperature", "nonneg"), reference=True),
    MethodSpec("topk_ncl", "Top-k NCL", "bayesncl.methods:TopKNCL", reads=("temperature", "nonneg", "topk_k"),
               always_named=("method.topk_k",), arrays=("mask",), masked=True),
    MethodSpec("bayesncl", "BayesNCL", "bayesncl.methods:BayesNCL", reads=("temperature", "nonneg", *_GATE_KEYS),
               always_named=("method.rho", "method.lambda"), arrays=("gate",), gated=True),
):
    METHODS.register(_spec)


def register_method(name: str, label: str | None = None, impl: "str | type | None" = None, **traits) -> MethodSpec:
    """Register a method (a plugin's): its name, label, implementation and traits (MethodSpec's fields)."""
    if impl is None:
        raise ConfigError(f"method.name: method {name!r} has no implementation; pass impl=YourMethodClass")
    module = traits.pop("module", "") or (impl.__module__ if isinstance(impl, type) else impl.partition(":")[0])
    return METHODS.register(MethodSpec(name, label or name, impl, module=module, **traits))


def method(name: str, label: str | None = None, **traits) -> Callable[[type], type]:
    """Class decorator: register the class as method `name` (the plugin's one class)."""
    def deco(cls: type) -> type:
        cls.name = name
        register_method(name, label, cls, **traits)
        return cls
    return deco


def method_traits(name: str) -> MethodSpec:
    """The spec of a method found in a results file; a name no module registered (a plugin not loaded) reads as
    a method with no special trait, labelled by its name."""
    spec = METHODS.get(name)
    return spec if spec is not None else MethodSpec(str(name), str(name), "")


def method_label(name: str) -> str:
    return method_traits(name).label


# ---------------------------------------------------------------------------------------------------- datasets
@dataclass(frozen=True)
class DatasetSpec:
    """A dataset as the rest of the code sees it. `load(data_cfg, split)` returns a bayesncl.data.ImageSet;
    `check(data_cfg)` raises DataError naming what is missing; both are "module:function" or functions."""

    name: str                        # data.dataset in a run config (or the background probe's Waterbirds)
    label: str
    load: "str | Callable"
    check: "str | Callable"
    crop: "int | Callable[[dict], int]"  # the network's input side for a run config
    retrieval_k: int = 64            # Table 2's K (docs/METHOD.md section 5)
    needs_root: bool = True          # read from data.root (else generated locally)
    # every image has a background label (background measures and probe): True, False, or data_cfg -> bool
    backgrounds: "bool | str | Callable" = False
    probe: str = "cifar"             # the paper-protocol probe's recipe: "cifar" (LARS) or "imagenet" (SGD)
    prepared: "str | Callable | None" = None  # data_cfg -> manifest paths of its prepared copy ([] if none)
    # (data_cfg, workers, verify) -> a line per split: makes the prepared copy (`bayesncl prepare`)
    prepare: "str | Callable | None" = None
    trainable: bool = True           # a choice of data.dataset (Waterbirds is read by the background probe only)
    # data_cfg -> data settings laid over the smoke run's configs (a subset of the classes, so that its
    # preparation decodes a part of the dataset); None: the smoke run reads the dataset as it is
    smoke: "str | Callable | None" = None
    module: str = ""
    # images per split, {"train": n, "test": n}, or data_cfg -> that; None: not known before the data is read
    # (the cost estimate, bayesncl.estimate, then asks for it)
    images: "dict | Callable | None" = None

    def loader(self) -> Callable:
        return _resolve(self.load)

    def checker(self) -> Callable:
        return _resolve(self.check)

    def manifests(self, data_cfg: dict) -> list[str]:
        return list(_resolve(self.prepared)(data_cfg)) if self.prepared is not None else []

    def smoke_data(self, data_cfg: dict) -> dict:
        return dict(_resolve(self.smoke)(data_cfg)) if self.smoke is not None else {}

    def has_backgrounds(self, data_cfg: dict) -> bool:
        return bool(_resolve(self.backgrounds)(data_cfg)) if callable(self.backgrounds) or isinstance(
            self.backgrounds, str) else bool(self.backgrounds)

    def sizes(self, data_cfg: dict) -> dict | None:
        return dict(self.images(data_cfg)) if callable(self.images) else self.images

    def crop_size(self, cfg: dict) -> int:
        return int(self.crop(cfg) if callable(self.crop) else self.crop)


DATASETS: Registry[DatasetSpec] = Registry("dataset", "data.dataset")

for _spec in (
    DatasetSpec("synthetic", "Synthetic", "bayesncl.data.loaders:_load_synthetic",
                "bayesncl.data.loaders:_check_synthetic",
                crop=lambda cfg: cfg["data"]["synthetic"]["image_size"], retrieval_k=32, needs_root=False,
                backgrounds=True, images=lambda d: {"train": d["synthetic"]["train_size"],
                                                    "test": d["synthetic"]["test_size"]}),
    DatasetSpec("cifar10", "CIFAR-10", "bayesncl.data.loaders:_load_cifar", "bayesncl.data.loaders:_check_cifar",
                crop=32, retrieval_k=64, images={"train": 50_000, "test": 10_000}),
    DatasetSpec("cifar100", "CIFAR-100", "bayesncl.data.loaders:_load_cifar", "bayesncl.data.loaders:_check_cifar",
                crop=32, retrieval_k=128, images={"train": 50_000, "test": 10_000}),
    DatasetSpec("imagenet100", "ImageNet-100", "bayesncl.data.loaders:_load_imagenet100",
                "bayesncl.data.loaders:_check_imagenet100",
                crop=224, retrieval_k=256, probe="imagenet", prepared="bayesncl.data.imagenet:prepared_manifests",
                prepare="bayesncl.data.loaders:_prepare_imagenet100", images={"train": 126_689, "test": 5_000},
                smoke="bayesncl.data.imagenet:smoke_subset"),
    # Any folder of class subfolders (bayesncl.data.imagefolder); its sizes: data.imagefolder.*
    DatasetSpec("imagefolder", "Image folder", "bayesncl.data.loaders:_load_imagefolder",
                "bayesncl.data.loaders:_check_imagefolder",
                crop=lambda cfg: cfg["data"]["imagefolder"]["crop_size"], retrieval_k=64,
                backgrounds="bayesncl.data.loaders:_imagefolder_backgrounds",
                prepared="bayesncl.data.loaders:_imagefolder_manifests",
                prepare="bayesncl.data.loaders:_prepare_imagefolder"),
    DatasetSpec("waterbirds", "Waterbirds", "bayesncl.data.loaders:_load_waterbirds",
                "bayesncl.data.loaders:_check_waterbirds",
                crop=224, trainable=False, images={"train": 4_795, "test": 5_794}),
):
    DATASETS.register(_spec)


def register_dataset(name: str, label: str | None = None, **traits) -> DatasetSpec:
    """Register a dataset (a plugin's): its name, label, load and check functions and traits."""
    missing = [k for k in ("load", "check", "crop") if k not in traits]
    if missing:
        raise ConfigError(f"data.dataset: dataset {name!r} needs {', '.join(missing)} (see DatasetSpec)")
    module = traits.pop("module", "") or getattr(traits["load"], "__module__", "")
    return DATASETS.register(DatasetSpec(name, label or name, module=module, **traits))


def dataset(name: str) -> DatasetSpec:
    return DATASETS[name]


def dataset_label(name: str) -> str:
    spec = DATASETS.get(name)
    return spec.label if spec is not None else str(name)


# The background probe's dataset for datasets without background labels (eval.waterbirds_root).
BACKGROUND_PROBE = "waterbirds"


def training_datasets() -> tuple[str, ...]:
    return DATASETS.names(lambda s: s.trainable)
