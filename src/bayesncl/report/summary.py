"""Collect evaluated runs into one flat table (``results/summary/runs.csv``).

The manifest (written by the Snakemake workflow) lists one entry per run and display variant::

    {"metrics": "results/runs/.../seed~0/eval/metrics.json",
     "sets": ["table1", "figure3"], "variant": "BayesNCL (STE)", "sweep": "rho"}   # sweep optional

``summarize`` returns one row per entry (entries naming the same metrics file with the same variant
are merged, their sets united, so a run is never counted twice in a table) with the columns of
``COLUMNS``. Sections absent from metrics.json give NaN (numbers) or "" (text). ``run_id`` is the
run dir relative to ``results/runs``; ``sweep`` (after ``sets``) is the entry's sweep hint, used by
Figure 4b; ``ret_curve`` is a JSON object {K: P@10} sorted by K and ``dyn_*``, ``gate_curve``
(open-gate fraction per epoch) and ``loss_curve`` are JSON lists. ``weights_sha`` is the trained
weights' hash: equal hashes mean bit-identical training.

Units: metrics.json stores retrieval precision as a fraction; runs.csv holds it in percent (``ret_p*``
and ``ret_curve``), like every accuracy. The shares ``bg_dominated_*``, ``closed_*``, ``topk_*`` and
``open_gates_last`` stay fractions (0-1), as in metrics.json.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from ..atomic import atomic_path, atomic_write_text
from ..errors import ManifestError, MetricsFileError  # re-exported: their old home

__all__ = ["COLUMNS", "ManifestError", "MetricsFileError", "load_manifest", "prepare",
           "read_summary", "summarize", "sweep_rows", "write_summary"]

ID_COLUMNS = ["run_id", "dataset", "arch", "method", "variant", "sets", "sweep"]
RUN_COLUMNS = ["gate", "detach", "head_depth", "rho", "lambda", "proj_dim", "seed", "weights_sha"]
METRIC_COLUMNS = [
    "sc", "se_sum", "se_mean", "se_freq", "act", "alive", "alive_frac",
    "bg_dominated_zplus", "bg_dominated_feature", "closed_bg", "closed_cls", "topk_bound", "topk_removed",
    "probe_top1", "probe_top5", "probe_protocol",
    "ret_K", "ret_p1", "ret_p3", "ret_p5", "ret_p10", "ret_curve",
    "bg_acc", "bg_protocol",
    "dyn_epochs", "dyn_af_gv", "dyn_gv_sc", "dyn_af_sc",
    "gflops", "params_m", "sec_per_epoch", "img_per_s", "peak_mem_mb", "train_minutes",
    "open_gates_last", "gate_curve", "loss_curve",
]
COLUMNS = ID_COLUMNS + RUN_COLUMNS + METRIC_COLUMNS
TEXT_COLUMNS = {
    "run_id", "dataset", "arch", "method", "variant", "sets", "sweep", "gate", "weights_sha",
    "probe_protocol", "ret_curve", "bg_protocol", "dyn_epochs", "dyn_af_gv", "dyn_gv_sc", "dyn_af_sc",
    "gate_curve", "loss_curve",
}

# (section, key in metrics.json, column)
_SCALARS = [
    *[("interpretability", k, k) for k in (
        "sc", "se_sum", "se_mean", "se_freq", "act", "alive", "alive_frac",
        "bg_dominated_zplus", "bg_dominated_feature", "closed_bg", "closed_cls", "topk_bound",
        "topk_removed")],
    ("linear_probe", "top1", "probe_top1"), ("linear_probe", "top5", "probe_top5"),
    ("retrieval", "K", "ret_K"),
    ("background", "acc", "bg_acc"),
    *[("cost", k, k) for k in (
        "gflops", "params_m", "sec_per_epoch", "img_per_s", "peak_mem_mb", "train_minutes")],
    ("training", "open_gates_last", "open_gates_last"),
]
_PERCENT = [("retrieval", f"p@{k}", f"ret_p{k}") for k in (1, 3, 5, 10)]  # fraction -> percent
_TEXTS = [("linear_probe", "protocol", "probe_protocol"), ("background", "protocol", "bg_protocol")]
_LISTS = [("dynamics", "epochs", "dyn_epochs"), ("dynamics", "af_gv", "dyn_af_gv"),
          ("dynamics", "gv_sc", "dyn_gv_sc"), ("dynamics", "af_sc", "dyn_af_sc"),
          ("training", "open_gates", "gate_curve"), ("training", "loss", "loss_curve")]

METHOD_NAMES = {"cl": "SimCLR", "ncl": "NCL", "topk_ncl": "Top-k NCL", "bayesncl": "BayesNCL"}


def load_manifest(manifest_path: str | os.PathLike) -> list[dict]:
    """Read a manifest: a JSON list, a JSON object with a ``runs`` list, or JSON lines."""
    path = Path(manifest_path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ManifestError(f"cannot read manifest {path}: {exc}") from exc
    try:
        data = json.loads(text) if text.strip() else []
    except json.JSONDecodeError:
        try:
            data = [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError as exc:
            raise ManifestError(f"manifest {path} is neither JSON nor JSON lines: {exc}") from exc
    if isinstance(data, dict) and isinstance(data.get("runs"), list):
        data = data["runs"]
    elif isinstance(data, dict) and "metrics" in data:  # a one-line JSON-lines manifest
        data = [data]
    if not isinstance(data, list):
        raise ManifestError(f"manifest {path}: expected a list of entries, got {type(data).__name__}")
    return data


def _num(value: Any) -> float:
    if value is None or isinstance(value, bool):
        return float(value) if isinstance(value, bool) else math.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _find(run: dict, key: str) -> Any:
    """``run[key]``, else the first nested dict holding ``key`` (run configs may be nested)."""
    if key in run:
        return run[key]
    for value in run.values():
        if isinstance(value, dict):
            found = _find(value, key)
            if found is not None:
                return found
    return None


def _run_dir(metrics: Path) -> Path:
    return metrics.parent.parent if metrics.parent.name == "eval" else metrics.parent


def _run_id(metrics_entry: str) -> str:
    """Run dir as a posix path relative to ``results/runs`` (the part after the last ``runs``)."""
    parts = _run_dir(Path(metrics_entry)).parts
    if "runs" in parts:
        idx = len(parts) - 1 - parts[::-1].index("runs")
        parts = parts[idx + 1:]
    return "/".join(p for p in parts if p not in ("/", ""))


def _path_params(run_id: str) -> dict[str, str]:
    # Fallback for missing "run" fields: the run dir encodes them as param~value components.
    out = {}
    for comp in run_id.split("/"):
        if "~" in comp:
            k, _, v = comp.partition("~")
            out[k] = v
    return out


def _read_metrics(path: Path) -> dict:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise MetricsFileError(f"metrics file not found: {path}") from exc
    except OSError as exc:
        raise MetricsFileError(f"cannot read metrics file {path}: {exc}") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MetricsFileError(f"metrics file {path} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise MetricsFileError(f"metrics file {path}: expected a JSON object, got {type(data).__name__}")
    for section, body in data.items():
        if body is not None and not isinstance(body, dict):
            raise MetricsFileError(f"metrics file {path}: section {section!r} is not an object")
    return data


def _json_num(value: Any) -> float | None:
    x = _num(value)
    return None if math.isnan(x) else x  # null, not the non-standard NaN token


def _percent(value: Any) -> float:
    return _num(value) * 100.0


def _sorted_curve(curve: dict) -> str:
    items = sorted(((int(float(k)), _json_num(_percent(v))) for k, v in curve.items()), key=lambda kv: kv[0])
    return json.dumps({str(k): v for k, v in items})


def _flatten(entry: dict, metrics: dict) -> dict:
    row: dict[str, Any] = {c: ("" if c in TEXT_COLUMNS else math.nan) for c in COLUMNS}
    run_id = _run_id(entry["metrics"])
    row["run_id"] = run_id
    run = metrics.get("run") or {}
    from_path = _path_params(run_id)
    for key in ("dataset", "arch", "method", *RUN_COLUMNS):
        # Top level first, then the run dir's param~value components, then nested config sections.
        value = run.get(key)
        if value is None:
            value = from_path.get(key)
        if value is None:
            value = _find(run, key)
        if isinstance(value, dict):  # a nested config section, e.g. method: {name: ...}
            value = value.get("name")
        if value is None:
            continue
        if key in TEXT_COLUMNS:
            row[key] = str(value)
        else:
            row[key] = _num(value)
    row["variant"] = str(entry.get("variant") or METHOD_NAMES.get(row["method"], row["method"]))
    row["sets"] = ";".join(str(s) for s in entry.get("sets") or [])
    row["sweep"] = _sweep_name(entry.get("sweep"))
    for section, key, col in _SCALARS:
        row[col] = _num((metrics.get(section) or {}).get(key))
    for section, key, col in _PERCENT:
        row[col] = _percent((metrics.get(section) or {}).get(key))
    for section, key, col in _TEXTS:
        value = (metrics.get(section) or {}).get(key)
        row[col] = "" if value is None else str(value)
    curve = (metrics.get("retrieval") or {}).get("curve")
    if isinstance(curve, dict) and curve:
        row["ret_curve"] = _sorted_curve(curve)
    for section, key, col in _LISTS:
        values = (metrics.get(section) or {}).get(key)
        if isinstance(values, list):
            row[col] = json.dumps([_json_num(v) for v in values])
    return row


def _sweep_name(hint: Any) -> str:
    """"rho" | "lambda" | "width" | other, ";"-joined when a run is a point of several sweeps (the
    default operating point is in each). The workflow may give dotted config keys ("method.rho",
    "model.proj_dim") or a list of them: keep the last component and call proj_dim "width"."""
    if not hint:
        return ""
    hints = hint if isinstance(hint, (list, tuple)) else str(hint).split(";")
    names = [str(h).rsplit(".", 1)[-1] for h in hints if str(h)]
    return ";".join("width" if n == "proj_dim" else n for n in names)


def _merge_duplicates(manifest: Iterable[dict]) -> list[dict]:
    merged: dict[tuple, dict] = {}
    for i, entry in enumerate(manifest):
        if not isinstance(entry, dict) or not entry.get("metrics"):
            raise ManifestError(f"manifest entry {i} has no 'metrics' path: {entry!r}")
        sets = entry.get("sets") or []
        if isinstance(sets, str):
            sets = [s for s in sets.split(";") if s]
        key = (str(entry["metrics"]), entry.get("variant"))
        if key in merged:
            have = merged[key]
            have["sets"] += [s for s in sets if s not in have["sets"]]
            have["sweep"] = have.get("sweep") or entry.get("sweep")
        else:
            merged[key] = {**entry, "sets": list(sets)}
    return list(merged.values())


def summarize(manifest: list[dict], base_dir: str | os.PathLike | None = None) -> pd.DataFrame:
    """One row per manifest entry, columns ``COLUMNS``, in manifest order.

    Relative metrics paths are resolved against ``base_dir`` (default: the current directory, which
    is the Snakemake working directory).
    """
    base = Path(base_dir) if base_dir is not None else Path.cwd()
    rows = []
    for entry in _merge_duplicates(manifest):
        path = Path(entry["metrics"])
        rows.append(_flatten(entry, _read_metrics(path if path.is_absolute() else base / path)))
    return prepare(pd.DataFrame(rows, columns=COLUMNS))


def write_summary(manifest_path: str | os.PathLike, out_csv: str | os.PathLike,
                  base_dir: str | os.PathLike | None = None) -> pd.DataFrame:
    """Read the manifest, summarize it and write ``out_csv`` atomically; returns the table."""
    df = summarize(load_manifest(manifest_path), base_dir=base_dir)
    with atomic_path(out_csv) as tmp:
        df.to_csv(tmp, index=False, lineterminator="\n")
    atomic_write_text(Path(out_csv).with_name("metrics.json"), json.dumps(headline(df), indent=1) + "\n")
    return df


HEADLINE = ("sc", "se_sum", "act", "probe_top1", "ret_p10", "bg_acc")


def headline(df: pd.DataFrame) -> dict:
    """{dataset: {variant: {metric: mean over seeds}}} for the main comparison (the runs of Tables 1-2,
    not the sweeps or ablations): what `dvc metrics show` prints."""
    out: dict = {}
    main = df[df["sets"].fillna("").str.split(";").apply(lambda s: bool({"table1", "table2"} & set(s)))]
    for (dataset, variant), g in main.groupby(["dataset", "variant"], sort=False):
        means = g[list(HEADLINE)].apply(pd.to_numeric, errors="coerce").mean()
        out.setdefault(str(dataset), {})[str(variant)] = {k: round(float(v), 4) for k, v in means.items()
                                                          if pd.notna(v)}
    return out


def prepare(df: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``df`` with every column of ``COLUMNS`` present: text as str ("" when missing),
    numbers as float (NaN when missing). Renderers call this so a frame read from CSV and one from
    ``summarize`` behave identically. Extra columns are kept after ``COLUMNS``."""
    n = len(df)
    cols: dict[str, Any] = {}
    for col in COLUMNS:
        if col not in df.columns:
            values = [""] * n if col in TEXT_COLUMNS else [math.nan] * n
        elif col in TEXT_COLUMNS:
            values = ["" if _missing(v) else str(v) for v in df[col]]
        else:
            values = pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=float)
        cols[col] = pd.Series(values, dtype=object if col in TEXT_COLUMNS else float)
    for col in df.columns:
        if col not in cols:
            cols[col] = df[col].reset_index(drop=True)
    return pd.DataFrame(cols)  # built once: per-column assignment is slow in pandas


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def read_summary(csv_path: str | os.PathLike) -> pd.DataFrame:
    """Read runs.csv back with the dtypes ``summarize`` produces (text stays text, "" not NaN)."""
    try:
        df = pd.read_csv(csv_path, dtype=str, keep_default_na=False)
    except pd.errors.EmptyDataError:
        df = pd.DataFrame(columns=COLUMNS)
    return prepare(df)


def _mode(values) -> float:
    vals = [float(v) for v in values if math.isfinite(v)]
    if not vals:
        return math.nan
    counts = Counter(vals)
    return max(counts, key=lambda v: (counts[v], -v))  # ties: the smaller value, deterministically


def sweep_rows(rows: pd.DataFrame, param: str) -> pd.DataFrame:
    """The rows (of a figure4b set) that belong to the ``param`` ("rho" or "lambda") sweep.

    The manifest's sweep hint decides; a row without hints belongs when only ``param`` differs from the
    set's most common value of the other parameter; the other sweep's base point is in both sweeps.
    """
    other = "lambda" if param == "rho" else "rho"
    base_p, base_o = _mode(rows[param]), _mode(rows[other])
    keep = []
    for rec in rows.to_dict("records"):
        hints = {h for h in str(rec["sweep"] or "").split(";") if h}
        if param in hints:
            keep.append(True)
        elif other in hints:
            keep.append(rec[param] == base_p and rec[other] == base_o)
        else:
            keep.append(not hints and rec[other] == base_o)  # other hints ("width"): not this sweep
    return rows[pd.Series(keep, index=rows.index, dtype=bool)]
