"""The workflow configs of config/ as Snakemake reads them: ``grid("config.yaml", "sweeps.yaml")`` is
`--configfile config/config.yaml config/sweeps.yaml`, each file merged over the last key by key (Snakemake's own
update_config); and what `snakemake -n` plans, job by job (``dry_jobs``), as `bayesncl stale` lists it."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

import yaml

from bayesncl.settings import registry

from .plugins import registered

CONFIG = Path(__file__).resolve().parents[2] / "config"


def grid(*names: str) -> dict:
    from snakemake.utils import update_config  # the workflow extra: only where a grid is merged

    out: dict = {}
    for name in names:
        update_config(out, yaml.safe_load((CONFIG / name).read_text()))
    return out


def demo(sweeps: bool = False) -> dict:
    """The demo grid, and with ``sweeps`` its overlay config/sweeps.yaml (Figure 4, BayesNCL's saturation line)."""
    return grid("config.yaml", *(["sweeps.yaml"] if sweeps else []))


def demo_with_old_sweeps() -> dict:
    """The demo grid with its overlay config/sweeps.yaml as they were before the D and lambda sweeps moved into the
    demo: today's demo with BayesNCL (STE)'s line in the saturation figure, the sweeps on 3 seeds and no rho sweep
    (the demo's sweeps now take 2 seeds and rho, the overlay 5 seeds)."""
    wf = demo()
    wf["sets"]["saturation"]["variants"] = ["NCL", "BayesNCL (STE)"]
    for name in ("figure4a", "figure4b"):
        wf["sets"][name]["n_seeds"] = 3
    del wf["sets"]["figure4b"]["sweep"]["method.rho"]
    return wf


# A plugin method's setting: NCL + an L1 penalty on z+, its weight declared (docs/EXTENDING.md's example).
WEIGHT = {"l1_weight": registry.setting(1e-3, "the L1 penalty's weight", ge=0)}


@contextlib.contextmanager
def plugin_method(name="l1m", settings=None, module="my_l1", **traits):
    """NCL registered as a plugin method `name` (its settings WEIGHT unless given), unregistered after."""
    with registered():
        yield registry.register_method(name, "NCL + L1", "bayesncl.model.methods:NCL", reads=("temperature", "nonneg"),
                                       settings=WEIGHT if settings is None else settings, module=module, **traits)


def tiny_with(variants: dict, sets: dict, **defaults) -> dict:
    """config/tiny.yaml with NCL and ``variants``, these ``sets``, and its defaults updated section by section."""
    wf = yaml.safe_load((CONFIG / "tiny.yaml").read_text())
    wf["variants"] = {"NCL": {"method": {"name": "ncl"}}, **variants}
    wf["sets"] = sets
    for section, values in defaults.items():
        wf["defaults"].setdefault(section, {}).update(values)
    return wf


def dry_jobs(stdout: str) -> list[str]:
    """Every job a `snakemake -n` listing plans, as "rule target" (the value of its wildcard; the rule alone where it
    has none), sorted: what `bayesncl stale` lists. The target rules (default, all) make nothing: left out."""
    jobs: list[list[str]] = []
    for line in stdout.splitlines():
        rule = re.match(r"\s*(?:local)?rule (\w+):$", line)
        if rule:
            jobs.append([rule.group(1), ""])
        elif jobs and (wildcard := re.match(r"\s*wildcards: \w+=(.*)$", line)):
            jobs[-1][1] = wildcard.group(1)
    return sorted(f"{rule} {target}".strip() for rule, target in jobs if rule not in ("default", "all"))


def pretrained(jobs: list[str]) -> list[str]:
    """The run ids of the pretraining jobs among `jobs` ("rule target")."""
    return sorted(j.split(" ", 1)[1] for j in jobs if j.startswith("pretrain "))
