"""The data behind the open-gates figure and Figures 4a/4b as DVC plots (``dvc plots show``/``diff``).

One CSV per line of the figure, in a folder per plot, so that DVC draws each line with the same x and
y fields and ``dvc plots diff A B`` overlays two commits' lines:

- ``gates/<line>.csv``: epoch, open_gates (% of gates open, mean over seeds), sd, seeds;
- ``figure4a/<line>.csv``: proj_dim, sc, probe_top1 (means over seeds), seeds;
- ``figure4b_rho/<line>.csv`` and ``figure4b_lambda/<line>.csv``: rho or lambda, sc, probe_top1, seeds.

Lines are the figures' own (``lines.split_lines``: keyed by every setting but x and the seed); a file is
named by dataset and label, plus the settings that tell same-named lines apart.
"""

from __future__ import annotations

import math
import os
import re
import shutil
from pathlib import Path

import pandas as pd

from ..core.atomic import atomic_write_text
from ..settings.registry import method_traits
from .lines import gate_points, line_points, rows_in_set, split_lines
from .summary import prepare, sweep_rows

__all__ = ["PLOTS", "write_plots"]

PLOTS = ("gates", "figure4a", "figure4b_rho", "figure4b_lambda")
_KEYS = ("arch", "gate", "detach", "head_depth", "rho", "lambda", "proj_dim")


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.+-]+", "_", text).strip("_") or "line"


def _value(v) -> str:
    return "nan" if isinstance(v, float) and math.isnan(v) else f"{v:g}" if isinstance(v, float) else str(v)


def _named(lines: list[tuple[str, pd.DataFrame]], x: str) -> list[tuple[str, pd.DataFrame]]:
    """(file stem, rows) per line: dataset and label, and the settings that differ between lines that
    would otherwise share a name."""
    first = {id(part): part.iloc[0] for _, part in lines}
    base = {id(part): f"{first[id(part)]['dataset']} {label}" for label, part in lines}
    out = []
    for label, part in lines:
        twins = [p for lab, p in lines if base[id(p)] == base[id(part)]]
        name = base[id(part)]
        if len(twins) > 1:
            vary = [k for k in _KEYS if k != x and len({_value(first[id(p)][k]) for p in twins}) > 1]
            name += " " + " ".join(f"{k}={_value(first[id(part)][k])}" for k in vary)
        out.append((_slug(name), part))
    return out


def _csv(path: Path, records: list[dict]) -> Path:
    return atomic_write_text(path, pd.DataFrame.from_records(records).to_csv(index=False, float_format="%.6g"))


def _sweep(rows: pd.DataFrame, x: str) -> list[tuple[str, list[dict]]]:
    out = []
    for ds in dict.fromkeys(rows["dataset"]):
        part = rows[rows["dataset"] == ds]
        for name, line in _named(split_lines(part, x), x):
            by_x: dict[float, dict] = {}
            for y in ("sc", "probe_top1"):
                for xv, mean, _sd, n in line_points(line, x, y):
                    by_x.setdefault(xv, {x: xv, "sc": math.nan, "probe_top1": math.nan, "seeds": n})[y] = mean
            if len(by_x) > 1:  # one point is no sweep (the figures say so too)
                out.append((name, [by_x[k] for k in sorted(by_x)]))
    return out


def plot_data(df: pd.DataFrame) -> dict[str, list[tuple[str, list[dict]]]]:
    """{plot: [(file stem, records)]} for every plot of ``PLOTS``."""
    df = prepare(df)
    gates = df[pd.Series([method_traits(m).gated and bool(c) for m, c in zip(df["method"], df["gate_curve"])],
                         index=df.index, dtype=bool)]
    data: dict[str, list[tuple[str, list[dict]]]] = {p: [] for p in PLOTS}
    for ds in dict.fromkeys(gates["dataset"]):
        for name, line in _named(split_lines(gates[gates["dataset"] == ds], "epoch"), "epoch"):
            pts = gate_points(line)
            if pts:
                data["gates"].append((name, [{"epoch": e, "open_gates": m, "sd": s, "seeds": n}
                                             for e, m, s, n in pts]))
    data["figure4a"] = _sweep(rows_in_set(df, "figure4a"), "proj_dim")
    fig4b = rows_in_set(df, "figure4b")
    for param in ("rho", "lambda"):
        data[f"figure4b_{param}"] = _sweep(sweep_rows(fig4b, param, "figure4b"), param)
    return data


def write_plots(df: pd.DataFrame, out_dir: str | os.PathLike) -> list[Path]:
    """Write every plot's CSVs under ``out_dir`` (each plot's folder replaced: no stale lines)."""
    out = Path(out_dir)
    written = []
    for plot, files in plot_data(df).items():
        folder = out / plot
        if folder.is_dir():
            shutil.rmtree(folder)
        folder.mkdir(parents=True, exist_ok=True)
        for name, records in files:
            written.append(_csv(folder / f"{name}.csv", records))
    return written
