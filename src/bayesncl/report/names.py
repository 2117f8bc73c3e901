"""Names the report shares, each defined once: display labels, the main comparison and its headline metrics.

Methods and datasets are named by bayesncl.settings.registry (the config's names and their labels); ``DATASET_NAMES``
reads it, plugins' entries included (a method's label: registry.method_label).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Iterable

from ..settings import registry

__all__ = ["ARCH_NAMES", "DATASET_NAMES", "FIGURE_NAMES", "HEADLINE", "MAIN_SETS", "METRICS_JSON", "is_main",
           "set_names"]



class _Labels(Mapping):
    """{name: label} of a registry, as it is when read."""

    def __init__(self, reg):
        self._reg = reg

    def __getitem__(self, name):
        if name not in self._reg:
            raise KeyError(name)
        return self._reg[name].label

    def __iter__(self):
        return iter(self._reg)

    def __len__(self):
        return len(self._reg)


DATASET_NAMES = _Labels(registry.DATASETS)
ARCH_NAMES = {"resnet18": "ResNet-18", "resnet50": "ResNet-50"}

# The main comparison: the runs of Tables 1 and 2 (not the sweeps or ablations). The terminal's "Main
# comparison", metrics.json, the figures' default operating point and the atlas's runs read these sets.
MAIN_SETS = ("table1", "table2")
# Its headline metrics (the terminal's columns); metrics.json adds the background probe where a main run has it.
HEADLINE = ("sc", "se_sum", "act", "probe_top1", "ret_p10")
METRICS_JSON = HEADLINE + ("bg_acc",)
# The report's figures (report/figures.py draws each; the workflow's targets, common.smk).
FIGURE_NAMES = ("figure3", "figure4a", "figure4b", "gates", "sc_training", "saturation")


def set_names(sets: "str | Iterable[str] | None") -> list[str]:
    """A run's sets as a list, from runs.csv's ";"-joined text or a list."""
    if sets is None:
        return []
    return str(sets).split(";") if isinstance(sets, str) else [str(s) for s in sets]


def is_main(sets: "str | Iterable[str] | None") -> bool:
    """Whether a run with these sets is in the main comparison."""
    return any(s in MAIN_SETS for s in set_names(sets))
