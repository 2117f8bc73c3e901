"""The one list of names: every method and dataset the package knows, with the traits the rest of the code reads.

Config validation, the workflow's schema check, the grid, run ids, rerun triggers, evaluation, table rows, labels,
figures and the atlas find a method or a dataset here by its name and ask its spec, never compare the name itself
(tests/test_registry.py checks the source for that). Nothing here imports torch: validating a grid of synthetic runs
stays light. A spec names its implementation as "module:attribute", imported when a model or a split is built.

A new method or dataset is one file (docs/EXTENDING.md): a plugin module that calls `register_method` or
`register_dataset` (or decorates its class with `method`), named in the workflow config's `plugins:` list
(bayesncl.settings.plugins imports it in every process of the run). Its own settings are declared with it (`setting`:
type, default, one-line doc, bounds), as bayesncl.settings.config declares the package's; `settings_of` says which a run
config takes, `plugin_code` what identifies the plugin code a run uses (a declared `version`, else its file's SHA-256).
"""

from __future__ import annotations

import importlib
import math
import operator
from dataclasses import dataclass
from typing import Any, Callable, Generic, Iterator, Literal, TypeVar

from ..core.errors import ConfigError
from .keyrules import _rule

__all__ = ["BACKGROUND_PROBE", "DATASETS", "METHODS", "SECTION_SETTINGS", "DatasetSpec", "MethodSpec", "Registry",
           "Setting", "declared", "method", "method_label", "method_traits", "plugin_code", "register_dataset",
           "register_method", "setting", "settings_of", "training_datasets"]

T = TypeVar("T")


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET = _Unset()  # Setting.added of a setting as old as its plugin


@dataclass(frozen=True)
class Setting:
    """A plugin's setting, declared as bayesncl.settings.config declares the package's keys: its default, a one-line
    doc, its type (`kind`: bool, int, float or str), bounds (ge/gt/le/lt), the values allowed (`choices`), what null
    means where null is allowed (`null`) and the value every run had before the setting existed (`added`: then
    adding it reruns nothing, as a package key's `added=`)."""

    default: Any
    doc: str
    kind: type = float
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    choices: tuple = ()
    null: str | None = None
    added: Any = UNSET

    def allows(self, v) -> bool:
        """Whether `v` is a value of this setting (settings/config.py says why not, in the package's words)."""
        if v is None:
            return self.null is not None
        if self.choices:
            return any(type(v) is type(c) and v == c for c in self.choices)
        if self.kind is float:
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        else:
            ok = isinstance(v, self.kind) and (self.kind is bool or not isinstance(v, bool))
        return ok and (self.kind in (str, bool) or all(
            b is None or op(v, b) for b, op in ((self.ge, operator.ge), (self.gt, operator.gt),
                                                (self.le, operator.le), (self.lt, operator.lt))))

    def rule(self) -> tuple[Callable[[Any], bool], str]:
        """(check, what it allows in words), as the package's own keys have them (bayesncl.settings.keyrules)."""
        tp = Literal[self.choices] if self.choices else self.kind  # type: ignore[valid-type]
        return _rule(tp | None if self.null is not None else tp,
                     {b: getattr(self, b) for b in ("ge", "gt", "le", "lt", "null") if getattr(self, b) is not None})


def setting(default, doc: str, *, kind: type | None = None, ge=None, gt=None, le=None, lt=None, choices=(),
            null: str | None = None, added: Any = UNSET) -> Setting:
    """A plugin's setting (docs/EXTENDING.md): `kind` is the default's type unless given (an int default of a float
    setting: give kind=float). A declaration that contradicts itself is one line naming the problem."""
    kind = kind or (type(default) if default is not None else None)
    if kind not in (bool, int, float, str):
        raise ConfigError(f"setting {doc!r}: kind {kind!r} is not bool, int, float or str; give kind=")
    if not isinstance(doc, str) or not doc.strip() or "\n" in doc:
        raise ConfigError(f"setting with default {default!r}: its doc must be one line of text, got {doc!r}")
    s = Setting(float(default) if kind is float and isinstance(default, int) and not isinstance(default, bool)
                else default, doc, kind, ge, gt, le, lt, tuple(choices), null, added)
    for what, v in (("default", s.default), ("added", added)):
        if not (what == "added" and added is UNSET) and not s.allows(v):
            raise ConfigError(f"setting {doc!r}: its {what} {v!r} is not one of its own values ({s.rule()[1]})")
    return s


def as_settings(owner: str, given) -> tuple[tuple[str, Setting], ...]:
    """A registration's settings as (name, Setting) pairs; a name that is no key or a value that is no Setting is
    one line naming it."""
    out = []
    for name, s in dict(given or {}).items():
        if not isinstance(name, str) or not name.isidentifier():
            raise ConfigError(f"{owner}: setting name {name!r} is not a key (letters, digits, _)")
        if not isinstance(s, Setting):
            raise ConfigError(f"{owner}: setting {name!r} is {s!r}; declare it with bayesncl.api.setting("
                              "default, doc, ...)")
        out.append((name, s))
    return tuple(out)


class Registry(Generic[T]):
    """Specs by name (a spec's `name`), in registration order: the package's one way of registering methods,
    datasets, evaluation sections, measures and claims. `registry[name]` for an unknown name is one ConfigError
    line naming the config key and the names allowed; a second spec under a registered name is another."""

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

    def __getitem__(self, name: str) -> T:
        try:
            return self._specs[name]
        except (KeyError, TypeError):
            from .plugins import how_to_load

            raise ConfigError(f"{self.key}: unknown {self.kind} {name!r}; allowed: {', '.join(self._specs)} "
                              f"({how_to_load(self.kind)})") from None

    def __setitem__(self, name: str, spec: T) -> None:
        """`registry[name] = spec`, as plugins once filled a dict: registered, under the spec's own name."""
        own = spec.name  # type: ignore[attr-defined]
        if name != own:
            raise ConfigError(f"{self.key}: {self.kind} {own!r} given as {name!r}; register it under its own name")
        self.register(spec)

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._specs))

    def __len__(self) -> int:
        return len(self._specs)

    def items(self) -> list[tuple[str, T]]:
        return list(self._specs.items())

    def values(self) -> list[T]:
        return list(self._specs.values())

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
    impl: "str | type"               # the bayesncl.model.methods.Method subclass, or "module:Class"
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
    # its own method.* settings (name, Setting): read by it alone, in its runs' configs only
    settings: tuple[tuple[str, Setting], ...] = ()
    version: str = ""                # what identifies its code ("": its module file's SHA-256)
    # Its settings (of `reads` and `settings`) that change only how it trains (the loss, its gradients, the
    # optimiser), never the untrained network or the features evaluated from it: its untrained twin takes them at the
    # grid's defaults, so variants that differ only in them share one twin (bayesncl.grid.expand.init_config).
    loss_only: tuple[str, ...] = ()
    # (setting, values) pairs: under any of these values of the setting the untrained network and the features
    # evaluated from it are the same, so its twin takes one of them (the grid's default where that is one) and such
    # variants share one twin.
    init_same: tuple[tuple[str, tuple], ...] = ()
    # The method whose untrained network and evaluated features this one's are ("": its own), for a method that only
    # changes another's loss: its twin is a run of that method, without this one's settings or code.
    init_as: str = ""

    def load(self) -> type:
        return _resolve(self.impl)


METHODS: Registry[MethodSpec] = Registry("method", "method.name")

# temperature: InfoNCE's; rho and lambda: the KL prior's; detach: where the gate head's gradient stops (the forward is
# the same); head_lr: the gate head's optimiser. The gate kind and tau_g stay: the soft gate evaluates alpha itself.
_LOSS_ONLY = ("temperature",)
for _spec in (
    MethodSpec("cl", "SimCLR", "bayesncl.model.methods:CL", nonnegative=False, loss_only=_LOSS_ONLY),
    MethodSpec("ncl", "NCL", "bayesncl.model.methods:NCL", reads=("temperature", "nonneg"), reference=True,
               loss_only=_LOSS_ONLY),
    MethodSpec("topk_ncl", "Top-k NCL", "bayesncl.model.methods:TopKNCL", reads=("temperature", "nonneg", "topk_k"),
               always_named=("method.topk_k",), arrays=("mask",), masked=True, loss_only=_LOSS_ONLY),
    MethodSpec("bayesncl", "BayesNCL", "bayesncl.model.methods:BayesNCL",
               reads=("temperature", "nonneg", "rho", "lambda", "gate", "detach", "head_depth", "tau_g", "head_lr"),
               always_named=("method.rho", "method.lambda"), arrays=("gate",), gated=True,
               loss_only=(*_LOSS_ONLY, "rho", "lambda", "detach", "head_lr"),
               init_same=(("gate", ("ste", "gumbel")),)),  # the Gumbel gate evaluates noise-free: STE's mask
):
    METHODS.register(_spec)


def register_method(name: str, label: str | None = None, impl: "str | type | None" = None, **traits) -> MethodSpec:
    """Register a method (a plugin's): its name, label, implementation and traits (MethodSpec's fields)."""
    if impl is None:
        raise ConfigError(f"method.name: method {name!r} has no implementation; pass impl=YourMethodClass")
    module = traits.pop("module", "") or (impl.__module__ if isinstance(impl, type) else impl.partition(":")[0])
    traits["settings"] = as_settings(f"method {name!r}", traits.get("settings"))
    same = traits.get("init_same") or ()
    traits["init_same"] = tuple((k, tuple(v)) for k, v in (same.items() if isinstance(same, dict) else same))
    spec = MethodSpec(name, label or name, impl, module=module, **traits)
    _check_init(spec)
    return METHODS.register(spec)


# The traits that say what a method's evaluation reads: a method initialised as another must have that one's.
_EVALUATED = ("nonnegative", "arrays", "gated", "masked")


def _check_init(spec: MethodSpec) -> None:
    """A registration's `loss_only` and `init_as` (what its untrained twin is), checked: one line naming the problem."""
    own = (*spec.reads, *dict(spec.settings))
    for trait, keys in (("loss_only", spec.loss_only), ("init_same", [k for k, _ in spec.init_same])):
        bad = [k for k in keys if k not in own]
        if bad:
            raise ConfigError(f"method {spec.name!r}: {trait} names {bad[0]!r}, which it neither reads nor declares; "
                              f"name some of {', '.join(own)}")
    if not spec.init_as:
        return
    base = METHODS.get(spec.init_as)
    if base is None or base.init_as:  # its own name too: not registered yet, or (a reload) initialised as itself
        raise ConfigError(f"method {spec.name!r}: init_as {spec.init_as!r} is not a registered method whose untrained "
                          f"network is its own; name one of {', '.join(METHODS.names(lambda s: not s.init_as))}")
    differ = [t for t in _EVALUATED if getattr(spec, t) != getattr(base, t)]
    if differ:
        raise ConfigError(f"method {spec.name!r}: init_as {base.name!r}, but its {differ[0]} differs from "
                          f"{base.name}'s, so its evaluated features are not {base.name}'s; drop init_as")


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
    # (the cost estimate, bayesncl.planning.estimate, then asks for it)
    images: "dict | Callable | None" = None
    # its own settings (name, Setting), in its block data.<name>.* of its runs' configs
    settings: tuple[tuple[str, Setting], ...] = ()
    version: str = ""                # what identifies its code ("": its module file's SHA-256)
    # data_cfg -> raises DataError naming the first image that cannot be decoded: the pre-flight runs it where the
    # prepared copy is still to be made (bayesncl.grid.preflight)
    verify: "str | Callable | None" = None

    def loader(self) -> Callable:
        return _resolve(self.load)

    def checker(self) -> Callable:
        return _resolve(self.check)

    def manifests(self, data_cfg: dict) -> list[str]:
        return list(_resolve(self.prepared)(data_cfg)) if self.prepared is not None else []

    def verifier(self) -> Callable | None:
        return _resolve(self.verify) if self.verify is not None else None

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
                verify="bayesncl.data.imagefolder:verify_images",
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
    traits["settings"] = as_settings(f"dataset {name!r}", traits.get("settings"))
    return DATASETS.register(DatasetSpec(name, label or name, module=module, **traits))


# The background probe's dataset for datasets without background labels (eval.waterbirds_root).
BACKGROUND_PROBE = "waterbirds"


def training_datasets() -> tuple[str, ...]:
    return DATASETS.names(lambda s: s.trainable)


# ----------------------------------------------------------------------------------------- plugins' settings
# {section name: its settings}, eval.<section>.* of every run config (bayesncl.evaluation.sections.section writes it)
SECTION_SETTINGS: dict[str, tuple[tuple[str, Setting], ...]] = {}


def _named(reg: "Registry", name) -> Any:
    return reg.get(name) if isinstance(name, str) else None


def settings_of(cfg: dict) -> dict[str, Setting]:
    """{dotted key: Setting} of the plugin settings a run config takes: its method's (method.<key>), its dataset's
    (data.<dataset>.<key>) and every evaluation section's (eval.<section>.<key>)."""
    section = lambda c, k: c.get(k) if isinstance(c, dict) and isinstance(c.get(k), dict) else {}  # noqa: E731
    out: dict[str, Setting] = {}
    m = _named(METHODS, section(cfg, "method").get("name"))
    out.update({f"method.{k}": s for k, s in (m.settings if m else ())})
    d = _named(DATASETS, section(cfg, "data").get("dataset"))
    out.update({f"data.{d.name}.{k}": s for k, s in (d.settings if d else ())})
    out.update({f"eval.{n}.{k}": s for n, pairs in SECTION_SETTINGS.items() for k, s in pairs})
    return out


def declared(key: str) -> "Setting | dict[str, Setting] | None":
    """What some registered method, dataset or section declares at the dotted `key`: a Setting (method.<key>, or a
    key inside a block), a block ({name: Setting}: data.<dataset>, eval.<section>), or None. Config merging accepts
    these keys in any layer; validation keeps those of the run's own method and dataset (settings_of)."""
    part = key.split(".")
    blocks = {"data": lambda n: dict(d.settings) or None if (d := _named(DATASETS, n)) else None,
              "eval": lambda n: dict(SECTION_SETTINGS.get(n, ())) or None}
    if len(part) == 2 and part[0] == "method":
        return next((s for m in METHODS.values() for k, s in m.settings if k == part[1]), None)
    if part[0] in blocks and len(part) in (2, 3):
        block = blocks[part[0]](part[1])
        return block if len(part) == 2 or not block else block.get(part[2])
    return None


def declared_names(prefix: str) -> set[str]:
    """The names registered entries declare right under the dotted `prefix` ("method.": every method's settings;
    "data.": the datasets with settings of their own), for an unknown key's message."""
    keys = [f"method.{k}" for m in METHODS.values() for k, _ in m.settings]
    keys += [f"data.{d.name}.{k}" for d in DATASETS.values() for k, _ in d.settings]
    keys += [f"eval.{n}.{k}" for n, pairs in SECTION_SETTINGS.items() for k, _ in pairs]
    return {k[len(prefix):].split(".")[0] for k in keys if k.startswith(prefix)}


def is_plugin(module: str) -> bool:
    """Whether an entry's module is a plugin's (the package's own code is judged by its config alone)."""
    return bool(module) and module != "bayesncl" and not module.startswith("bayesncl.")


def plugin_code(cfg: dict) -> dict[str, str]:
    """{"method NAME" / "dataset NAME": what identifies its code} for the plugin method and dataset a run config
    uses: its declared version, else the SHA-256 of its module's file (bayesncl.settings.plugins.code_identity). A
    change reruns the runs that use it (bayesncl.grid.expand); the package's own entries are not listed."""
    from .plugins import code_identity

    out = {}
    for kind, spec in (("method", _named(METHODS, cfg["method"]["name"])),
                       ("dataset", _named(DATASETS, cfg["data"]["dataset"]))):
        if spec is not None and is_plugin(spec.module):
            out[f"{kind} {spec.name}"] = code_identity(spec.module, spec.version)
    return out

