"""The grouping of runs: a table's rows and a claim's sides are the runs (seeds) of one (dataset, arch,
variant), in order of first appearance; flags mark a group that repeats another result (see tables.py).
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import dataclass, field

import pandas as pd

from ..settings.registry import method_traits
from .names import set_names

__all__ = ["Group", "blocks", "flag_repeats", "group_rows", "in_set", "parse_list"]


@dataclass
class Group:
    dataset: str
    arch: str
    variant: str
    rows: list[dict]
    marks: list[str] = field(default_factory=list)  # "†", "‡" or a seed count
    repeats: str = ""  # why this group repeats another result (a flag), "" when it does not

    @property
    def n(self) -> int:
        return len(self.rows)

    def values(self, key: str) -> list[float]:
        return [r[key] for r in self.rows]


def in_set(sets: str, name: str) -> bool:
    return name in set_names(sets)


def group_rows(records, key=lambda r: (r["dataset"], r["arch"], r["variant"])) -> list[Group]:
    """Records grouped by (dataset, arch, variant), in order of first appearance."""
    groups: dict[tuple, Group] = {}
    for rec in records:
        k = key(rec)
        groups.setdefault(k, Group(rec["dataset"], rec["arch"], rec["variant"], rows=[])).rows.append(rec)
    return list(groups.values())


def blocks(df: pd.DataFrame, set_name: str) -> list[tuple[str, list[Group]]]:
    """[(dataset, [Group, ...]), ...] in order of first appearance, flags set."""
    groups = group_rows(r for r in df.to_dict("records") if in_set(r["sets"], set_name))
    blocks: dict[str, list[Group]] = {}
    for g in groups:
        blocks.setdefault(g.dataset, []).append(g)
        seeds = [r["seed"] for r in g.rows if math.isfinite(r["seed"])]
        if len(seeds) != len(set(seeds)):
            warnings.warn(f"{set_name}: {g.variant!r} on {g.dataset} has repeated seeds {sorted(seeds)}; "
                          "its runs are averaged as if they were seeds", stacklevel=3)
    for gs in blocks.values():
        flag_repeats(gs)
    return list(blocks.items())


def flag_repeats(groups: list[Group]) -> None:
    """Set ``Group.repeats`` for groups that repeat another result (see the module docstring)."""
    seen: list[tuple[Group, set[str]]] = []
    for g in groups:
        shas = {r["weights_sha"] for r in g.rows if r["weights_sha"]}
        twin = next((o for o, o_shas in seen if shas and shas <= o_shas), None)
        if twin is not None:
            g.repeats = f"identical to {twin.variant} (same trained weights)"
        elif any(method_traits(r["method"]).masked for r in g.rows):
            never = [r for r in g.rows if r["topk_bound"] == 0]
            if never:
                ncl = next((o.variant for o in groups if o is not g and o.arch == g.arch
                            and all(method_traits(r["method"]).reference for r in o.rows)), "NCL")
                runs = "" if len(never) == len(g.rows) else f" in {len(never)} of {len(g.rows)} runs"
                g.repeats = f"identical to {ncl}: the top-k mask never bound{runs}"
        seen.append((g, shas))


def parse_list(text: str) -> list[float]:
    if not text:
        return []
    try:
        vals = json.loads(text)
    except ValueError:
        return []
    return [math.nan if v is None else float(v) for v in vals] if isinstance(vals, list) else []
