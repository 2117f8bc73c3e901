"""The workflow configs of config/ as Snakemake reads them: ``grid("config.yaml", "sweeps.yaml")`` is
`--configfile config/config.yaml config/sweeps.yaml`, each file merged over the last key by key (Snakemake's own
update_config); and what `snakemake -n` plans, job by job (``dry_jobs``), as `bayesncl stale` lists it."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

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
