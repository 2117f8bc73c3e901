"""The rows behind each figure line: runs selected by set, split into lines (every config field but the swept
one and the seed), and per point the mean, sample std and n over the seeds whose value is finite (the tables'
cell statistic, so a NaN seed is missing, not counted). No matplotlib: dvc_plots.py writes the same points as
DVC plot data.
"""

from __future__ import annotations

import json
import math
from collections import Counter

import pandas as pd

from ..settings.registry import method_label, method_traits
from .cells import stat
from .names import ARCH_NAMES, is_main
from .verdicts import mean_interval

__all__ = ["default_point", "gate_points", "group_key", "line_points", "mode", "paired", "parse_json",
           "row_mask", "rows_in_set", "saturation_curve", "saturation_verdict", "sc_curve", "seed_stats",
           "seeds_text", "split_lines"]


def rows_in_set(df: pd.DataFrame, name: str) -> pd.DataFrame:
    return df[row_mask(df, [name in s.split(";") for s in df["sets"]])]


def row_mask(df: pd.DataFrame, keep: list[bool]) -> pd.Series:
    # A boolean Series, not a list: an empty list would select columns instead of rows.
    return pd.Series(keep, index=df.index, dtype=bool)


def group_key(value):
    # Grouping key for a value that may be NaN (NaN != NaN would split every group).
    return None if isinstance(value, float) and math.isnan(value) else value


def seed_stats(values) -> tuple[float, float, int]:
    """Mean, sample std (NaN below two values) and the number of finite values: the tables' cell statistic."""
    s = stat(values, 0)
    return s.mean, s.std, s.n


def split_lines(rows: pd.DataFrame, x: str) -> list[tuple[str, pd.DataFrame]]:
    """Split rows into lines keyed by every config field except ``x`` and the seed (a plugin's settings too)."""
    from .summary import setting_columns

    fields = [f for f in ("dataset", "arch", "method", "gate", "detach", "head_depth", "rho", "lambda", "proj_dim",
                          *(c for c, _ in setting_columns().values() if c in rows.columns)) if f != x]
    out: dict[tuple, list[int]] = {}
    for i, rec in zip(rows.index, rows.to_dict("records")):
        out.setdefault(tuple(group_key(rec[f]) for f in fields), []).append(i)
    archs = rows["arch"].nunique() > 1
    lines = []
    for idx in out.values():
        part = rows.loc[idx]
        variants = list(dict.fromkeys(part["variant"]))
        rec = part.iloc[0]
        label = variants[0] if len(variants) == 1 else method_label(rec["method"])
        if archs:
            label += f", {ARCH_NAMES.get(rec['arch'], rec['arch'])}"
        lines.append((label, part))
    return lines


def line_points(part: pd.DataFrame, x: str, y: str) -> list[tuple[float, float, float, int]]:
    """(x, mean, std, n) per distinct x, for the finite means."""
    xs = sorted({v for v in part[x] if math.isfinite(v)})
    pts = [(v, *seed_stats(part.loc[part[x] == v, y])) for v in xs]
    return [p for p in pts if math.isfinite(p[1])]


def seeds_text(ns) -> str:
    ns = sorted({int(n) for n in ns if n})
    if not ns:
        return "no seeds"
    n = str(ns[0]) if len(ns) == 1 else f"{ns[0]}-{ns[-1]}"
    return f"n={n} seed" + ("" if ns == [1] else "s")


def mode(values) -> float:
    """The most common finite value (ties: the smaller); NaN when there is none."""
    vals = [float(v) for v in values if math.isfinite(v)]
    if not vals:
        return math.nan
    counts = Counter(vals)
    return max(counts, key=lambda v: (counts[v], -v))


def default_point(df: pd.DataFrame, dataset: str, also: tuple[str, ...] = ()) -> dict[str, float]:
    """The dataset's default operating point: the D of its main comparison (Tables 1-2) and the rho and
    lambda of its BayesNCL runs there (each sweep moves one value away from it), and the value there of each
    column of ``also`` (another swept setting's, over the runs that have it). A value the main runs
    do not give is the one most of the dataset's runs use."""
    rows = df[df["dataset"] == dataset]
    main = rows[row_mask(rows, [is_main(s) for s in rows["sets"]])]
    out = {}
    for key, bayes_only in (("proj_dim", False), ("rho", True), ("lambda", True), *((k, False) for k in also)):
        for part in (main, rows):
            if bayes_only:
                part = part[row_mask(part, [method_traits(m).gated for m in part["method"]])]
            out[key] = mode(part[key])
            if math.isfinite(out[key]):
                break
    return out


def parse_json(text: str):
    try:
        return json.loads(text) if text else None
    except ValueError:
        return None


def gate_points(part: pd.DataFrame) -> list[tuple[float, float, float, int]]:
    """(epoch, mean %, std %, n) from the ``gate_curve`` lists (epoch e = list index + 1)."""
    curves = [c for c in (parse_json(t) for t in part["gate_curve"]) if isinstance(c, list) and c]
    per_epoch: dict[int, list[float]] = {}
    for c in curves:
        for e, v in enumerate(c, start=1):
            per_epoch.setdefault(e, []).append(math.nan if v is None else 100.0 * float(v))
    pts = [(e, *seed_stats(per_epoch[e])) for e in sorted(per_epoch)]
    return [p for p in pts if math.isfinite(p[1])]


def sc_curve(rec: dict) -> dict[int, float]:
    """{epoch: SC} of one run: the recorded epochs, then the final SC (Table 1's) at the last epoch."""
    epochs, values = parse_json(rec["dyn_epochs"]), parse_json(rec["dyn_sc"])
    out = {}
    if isinstance(epochs, list) and isinstance(values, list):
        out = {int(e): float(v) for e, v in zip(epochs, values) if v is not None and math.isfinite(float(v))}
    losses = parse_json(rec["loss_curve"])
    last = len(losses) if isinstance(losses, list) else 0
    if out and last > max(out) and math.isfinite(rec["sc"]):
        out[last] = float(rec["sc"])
    return out


def paired(left: dict[int, dict[int, float]], right: dict[int, dict[int, float]]):
    """Per epoch: (epoch, mean of left - right over the seeds both have there, 95% t half-width, n): the
    claims' paired interval (verdicts.mean_interval)."""
    out = []
    for e in sorted(set().union(*left.values(), *right.values()) if left and right else ()):
        d = [left[s][e] - right[s][e] for s in sorted(set(left) & set(right)) if e in left[s] and e in right[s]]
        if not d:
            continue
        mean, low, high = mean_interval(d)
        out.append((e, mean, (high - low) / 2, len(d)))
    return out


def saturation_curve(rows: pd.DataFrame) -> tuple[dict | None, dict | None, str]:
    """What the saturation criterion reads from ``rows`` (runs.csv rows): NCL's means per trained budget
    {epochs: {"infonce", "sc", "top1"}}, their start (the random-init network's SC and top-1, InfoNCE's chance
    level) and ""; or None, None and what is missing."""
    ncl = rows[row_mask(rows, [method_traits(m).reference for m in rows["method"]])]
    budgets = sorted(e for e in set(ncl["epochs"]) if math.isfinite(e) and e > 0)
    if len(budgets) < 2:
        return None, None, "needs NCL at two budgets or more"
    init = ncl[ncl["epochs"] == 0]
    if init.empty:
        return None, None, "needs NCL's random-init network (0 epochs) as the start"
    cols = (("infonce", "infonce_final"), ("sc", "sc"), ("top1", "probe_top1"))
    means = {int(e): {k: float(ncl.loc[ncl["epochs"] == e, col].mean()) for k, col in cols} for e in budgets}
    start = {"infonce": float(ncl["infonce_chance"].mean()), "sc": float(init["sc"].mean()),
             "top1": float(init["probe_top1"].mean())}
    if not math.isfinite(start["infonce"]):  # a runs.csv written before the column
        return None, None, "needs InfoNCE's chance level (runs.csv's infonce_chance: rerun `bayesncl summarize`)"
    return means, start, ""


def saturation_verdict(rows: pd.DataFrame) -> tuple[bool | None, str]:
    """The saturation criterion (``bayesncl.measures.learning.saturated_budget``) on ``saturation_curve(rows)``:
    (saturated, in words); saturated is None when the curve lacks what the criterion reads."""
    from ..measures.learning import saturated_budget, saturation_rule

    means, start, missing = saturation_curve(rows)
    if means is None:
        return None, missing
    found, rule = saturated_budget(means, start), saturation_rule()
    if found is None:
        return False, f"NCL has not saturated below {max(means)} epochs ({rule})"
    return True, f"NCL saturates at {found} epochs ({rule})"
