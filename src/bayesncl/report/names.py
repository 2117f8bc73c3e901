"""Names the report shares, each defined once: display labels, the main comparison and its headline metrics.

The method registry's keys (``config.METHOD_NAMES``: "cl", "ncl", ...) are the config's; ``METHOD_LABELS`` is
how the report prints them.
"""

from __future__ import annotations

from typing import Iterable

__all__ = ["ARCH_NAMES", "DATASET_NAMES", "FIGURE_NAMES", "HEADLINE", "MAIN_SETS", "METHOD_LABELS", "METRICS_JSON",
           "is_main", "set_names"]

DATASET_NAMES = {"cifar10": "CIFAR-10", "cifar100": "CIFAR-100", "imagenet100": "ImageNet-100",
                 "waterbirds": "Waterbirds", "synthetic": "Synthetic"}
ARCH_NAMES = {"resnet18": "ResNet-18", "resnet50": "ResNet-50"}
METHOD_LABELS = {"cl": "SimCLR", "ncl": "NCL", "topk_ncl": "Top-k NCL", "bayesncl": "BayesNCL"}

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
