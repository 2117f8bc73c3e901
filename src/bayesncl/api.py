"""The public API: every name a plugin uses (docs/EXTENDING.md), from this one module.

    from bayesncl.api import NCL, method, setting

Methods (section 1 of docs/EXTENDING.md):
    method(name, label, **traits)       register a method class (traits: MethodSpec's)
    setting(default, doc, ...)          declare a method's, dataset's or section's own setting
    Method, CL, NCL, TopKNCL, BayesNCL  the method classes to subclass
    normalize, nonneg                   L2 normalisation that passes no gradient through a zero row; z+ from z
    MethodSpec                          a registered method's traits
Datasets (section 2):
    register_dataset(name, label, load=..., check=..., crop=..., ...)
    register_method(name, label, impl, **traits)  a method by its class's path ("module:Class"), not a decorator
    ImageSet                            what `load` returns
    DataError                           what `check` raises, naming what is missing
    LayoutError, ConfigError            a dataset's folders laid out otherwise than expected; a bad setting
    DatasetSpec                         a registered dataset's traits
Measures (section 3):
    section(name, ...)                  register an evaluation section (a function of a Context)
    Context                             what a section reads: ctx.features(split), ctx.model, ctx.cfg
    register_measure(key, header, decimals, better)  register a measure (a section's runs.csv column) that
                                        tables and claims read
    METRICS, Metric                     the registry of measures, by runs.csv column; a measure's traits
Claims (section 5):
    register_claim(claim)               a plugin's claim: a Claim, or an entry as in the config's `claims:`
    Claim

Each name is looked up where it lives when first used: importing this module imports nothing of the package, so a
dataset plugin does not load the networks, nor a method plugin the report.

Old names. Plugins written against the earlier docs import these names from their modules
(`from bayesncl import registry`, `from bayesncl.methods import NCL`, `bayesncl.losses.normalize`,
`from bayesncl.errors import DataError`, `from bayesncl.evaluation.context import Context`). OLD_PATHS maps
each such module path to the module that holds it now; bayesncl/__init__.py installs OldPaths, the import hook that
makes each old path import that module (the same module object), so those plugins still load. The paths the
earlier docs named that did not move (`bayesncl.data`, `bayesncl.evaluation.sections`, `bayesncl.report.cells`)
need no hook. The package's own code never uses the old paths (tests/test_layers.py).
"""

from __future__ import annotations

import importlib

# name -> the module it lives in
NAMES = {
    "method": "bayesncl.settings.registry", "setting": "bayesncl.settings.registry",
    "register_dataset": "bayesncl.settings.registry", "register_method": "bayesncl.settings.registry",
    "MethodSpec": "bayesncl.settings.registry",
    "DatasetSpec": "bayesncl.settings.registry",
    "Method": "bayesncl.model.methods", "CL": "bayesncl.model.methods", "NCL": "bayesncl.model.methods",
    "TopKNCL": "bayesncl.model.methods", "BayesNCL": "bayesncl.model.methods",
    "normalize": "bayesncl.model.losses", "nonneg": "bayesncl.model.losses",
    "ImageSet": "bayesncl.data", "DataError": "bayesncl.core.errors", "LayoutError": "bayesncl.core.errors",
    "ConfigError": "bayesncl.core.errors",
    "section": "bayesncl.evaluation.sections", "Context": "bayesncl.evaluation.runner",
    "METRICS": "bayesncl.report.cells", "Metric": "bayesncl.report.cells",
    "register_measure": "bayesncl.report.cells",
    "register_claim": "bayesncl.report.claims", "Claim": "bayesncl.report.claims",
}
# the public API's module paths in the docs before the layers -> the module that holds them now
OLD_PATHS = {
    "bayesncl.registry": "bayesncl.settings.registry",
    "bayesncl.methods": "bayesncl.model.methods",
    "bayesncl.losses": "bayesncl.model.losses",
    "bayesncl.errors": "bayesncl.core.errors",
    "bayesncl.evaluation.context": "bayesncl.evaluation.runner",
}

__all__ = sorted(NAMES)


def __getattr__(name: str):
    if name not in NAMES:
        raise AttributeError(f"module 'bayesncl.api' has no attribute {name!r}; the public API: {', '.join(__all__)}")
    value = getattr(importlib.import_module(NAMES[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(NAMES))


class OldPaths:
    """A finder (sys.meta_path) and loader for OLD_PATHS: `import bayesncl.methods` imports bayesncl.model.methods
    and binds that module to the old name too. It answers for those names only, after every other finder."""

    @staticmethod
    def find_spec(name: str, path=None, target=None):
        if name not in OLD_PATHS:
            return None
        from importlib.machinery import ModuleSpec

        return ModuleSpec(name, OldPaths)

    @staticmethod
    def create_module(spec):
        return importlib.import_module(OLD_PATHS[spec.name])

    @staticmethod
    def exec_module(module) -> None:  # the module it stands for ran when it was imported
        return None


def install_old_paths() -> None:
    import sys

    if OldPaths not in sys.meta_path:
        sys.meta_path.append(OldPaths)
