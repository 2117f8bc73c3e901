"""The workflow configs of config/ as Snakemake reads them: ``grid("config.yaml", "sweeps.yaml")`` is
`--configfile config/config.yaml config/sweeps.yaml`, each file merged over the last key by key (Snakemake's own
update_config)."""

from __future__ import annotations

from pathlib import Path

import yaml
from snakemake.utils import update_config

CONFIG = Path(__file__).resolve().parents[2] / "config"


def grid(*names: str) -> dict:
    out: dict = {}
    for name in names:
        update_config(out, yaml.safe_load((CONFIG / name).read_text()))
    return out


def demo(sweeps: bool = False) -> dict:
    """The demo grid, and with ``sweeps`` its overlay config/sweeps.yaml (Figure 4, BayesNCL's saturation line)."""
    return grid("config.yaml", *(["sweeps.yaml"] if sweeps else []))


def demo_with_old_sweeps() -> dict:
    """The demo grid with its overlay config/sweeps.yaml as they were before the D and lambda sweeps moved into the
    demo: today's demo with BayesNCL (STE)'s line in the saturation figure (the overlay now adds seeds and rho)."""
    wf = demo()
    wf["sets"]["saturation"]["variants"] = ["NCL", "BayesNCL (STE)"]
    return wf
