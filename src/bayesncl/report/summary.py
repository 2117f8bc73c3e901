"""Collect evaluated runs into one flat table (``results/summary/runs.csv``).

The workflow config says which runs exist: ``summarize`` expands it with ``bayesncl.grid.expand.expand_grid``
and gives one row per run and name, in the grid's order, with the columns of ``COLUMNS``. A run's rows
(``run_id``, ``variant``: the name it takes in the sets of ``sets``, joined with ";", as the grid decided set by
set, grid.expand.Run.labels; a run that two sets name differently, as the sweep point of one variant that is another
variant of a table, has a row per name, each with the same numbers) say where it belongs: ``sweep``, ``init_of``
(the sets an untrained twin serves, under that name, grid.expand.plan_init_runs), ``twin`` (the id of the run's
untrained twin, which may serve several variants), ``pilot_of`` (a grid grown by `bayesncl
plan`: those of the row's sets whose pilot seeds the run is, grid.expand.pilot_sets; empty otherwise). Its settings
(``dataset``, ``arch``, ``method``, ``width`` ... ``seed``: config.RUN_KEYS, and a column for each setting a plugin
method declares, under its name) are those it was trained with, from its own record (features.json's config); its
numbers come from its evaluation folder ``<results>/runs/<run_id>/eval/``:

- ``features.json``: ``{"run": {...}, "training": {...}, "config": {...}}``, every run has it; ``weights_sha``,
  the settings and the training curves come from here;
- ``<section>.json`` for each other section of ``grid.expand.evaluation_sections(run)``: ``{"run": {...},
  "<section>": {...}}`` (interpretability, linear_probe, retrieval, background_probe, dynamics, cost).

A missing or malformed file raises ``MetricsFileError`` naming it and the command that writes it, and so
does a file without ``weights_sha`` or with another one than features.json's (stale: evaluated on other
weights), and a features.json without its run config; a section the run does not have gives NaN (numbers) or ""
(text), as does a setting its method does not have. ``sweep`` says, for each of the row's sets that sweeps a
setting with the run as one of its points, "<set>:<setting>" (the swept key's last component: "rho", "lambda",
"proj_dim"), ";"-joined, as the grid decided set by set (grid.expand.Run.sweeps): the default point of several
sweeps is in each, and a run shared by two sets may be a point of one's sweep and another's default
("figure4a:proj_dim;figure4b:lambda"). ``ret_curve`` is a JSON object {K: P@10} sorted by K and ``dyn_*``
(``dyn_sc``: SC of the evaluation feature at each recorded epoch), ``gate_curve`` (open-gate fraction per epoch) and ``loss_curve`` are
JSON lists. ``weights_sha`` is the trained weights' hash: equal hashes mean bit-identical training.

``eval_bn`` is the BatchNorm mode of the evaluation features (features.json's run block, docs/METHOD.md
section 4); ``learning_slope``/``learning_hi`` are the InfoNCE slope per epoch over the last 20% of
training and its interval's upper end, ``still_learning`` 1 when that interval lies below 0
(``bayesncl.measures.learning``; NaN when too few epochs); ``collapsed`` 1 when the run's InfoNCE climbed back more
than half the way to chance after falling (``bayesncl.measures.learning.collapse``), ``collapse_epoch`` the first such
epoch; ``infonce_final`` is the last epoch's mean InfoNCE, ``infonce_chance`` its chance level ln(2N - 1) and
``epochs`` the run's training budget (0: the random-init reference; the saturation figure's x axis).
``stale`` is "" for a run trained with the settings the grid gives it today, else a JSON object {key: [the
recorded value, today's]} (bayesncl.grid.stale; features.json's config against the grid's).

Units: the retrieval section stores precision as a fraction; runs.csv holds it in percent (``ret_p*``
and ``ret_curve``), like every accuracy. The shares ``bg_dominated_*``, ``closed_*``, ``topk_*`` and
``open_gates_last`` stay fractions (0-1), as in the section files.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pandas as pd

from ..core.atomic import atomic_path, atomic_write_text
from ..settings.config import DEFAULTS, RUN_KEYS, as_recorded, flatten, run_settings
from ..core.errors import ConfigError, MetricsFileError
from ..grid.expand import Run, evaluation_sections, expand_grid
from ..settings.registry import METHODS
from ..core.yamlio import json_object, read_text
from .names import METRICS_JSON, is_main

__all__ = ["COLUMNS", "check_identity", "prepare", "read_summary", "setting_columns", "summarize", "swept",
           "swept_in", "sweep_column", "sweep_rows", "write_summary"]

ID_COLUMNS = ["run_id", "dataset", "arch", "method", "variant", "sets", "sweep", "init_of", "twin", "pilot_of"]
# A run's settings (config.RUN_KEYS), then where its weights came from (imported: the sha256 of the released
# checkpoint).
RUN_COLUMNS = [*(name for name in RUN_KEYS if name not in ID_COLUMNS), "weights_sha", "imported", "imported_from"]
_DEFAULTS = flatten(DEFAULTS)
METRIC_COLUMNS = [
    "sc", "se_sum", "se_mean", "se_freq", "act", "alive", "alive_frac",
    "bg_dominated_zplus", "bg_dominated_feature", "closed_bg", "closed_cls", "topk_bound", "topk_removed",
    "probe_top1", "probe_top5", "probe_protocol",
    "ret_K", "ret_p1", "ret_p3", "ret_p5", "ret_p10", "ret_curve",
    "bg_acc", "bg_protocol",
    "dyn_epochs", "dyn_af_gv", "dyn_gv_sc", "dyn_af_sc", "dyn_sc",
    "gflops", "params_m", "sec_per_epoch", "img_per_s", "peak_mem_mb", "train_minutes",
    "open_gates_last", "gate_curve", "loss_curve",
    "eval_bn", "learning_slope", "learning_hi", "still_learning", "collapsed", "collapse_epoch",
    "infonce_final", "infonce_chance", "stale",
]
COLUMNS = ID_COLUMNS + RUN_COLUMNS + METRIC_COLUMNS
TEXT_COLUMNS = {
    "run_id", "variant", "sets", "sweep", "init_of", "twin", "pilot_of", "weights_sha", "imported", "imported_from",
    *(name for name, key in RUN_KEYS.items() if isinstance(_DEFAULTS[key], str)),  # dataset, arch, gate, ...
    "probe_protocol", "ret_curve", "bg_protocol", "dyn_epochs", "dyn_af_gv", "dyn_gv_sc", "dyn_af_sc",
    "dyn_sc", "gate_curve", "loss_curve", "eval_bn", "stale",
}

# (section, key in the section, column); "training" is features.json's training block.
_SCALARS = [
    *[("interpretability", k, k) for k in (
        "sc", "se_sum", "se_mean", "se_freq", "act", "alive", "alive_frac",
        "bg_dominated_zplus", "bg_dominated_feature", "closed_bg", "closed_cls", "topk_bound",
        "topk_removed")],
    ("linear_probe", "top1", "probe_top1"), ("linear_probe", "top5", "probe_top5"),
    ("retrieval", "K", "ret_K"),
    ("background_probe", "acc", "bg_acc"),
    *[("cost", k, k) for k in (
        "gflops", "params_m", "sec_per_epoch", "img_per_s", "peak_mem_mb", "train_minutes")],
    ("training", "open_gates_last", "open_gates_last"),
]
_PERCENT = [("retrieval", f"p@{k}", f"ret_p{k}") for k in (1, 3, 5, 10)]  # fraction -> percent
_TEXTS = [("linear_probe", "protocol", "probe_protocol"), ("background_probe", "protocol", "bg_protocol")]
_LISTS = [("dynamics", "epochs", "dyn_epochs"), ("dynamics", "af_gv", "dyn_af_gv"),
          ("dynamics", "gv_sc", "dyn_gv_sc"), ("dynamics", "af_sc", "dyn_af_sc"), ("dynamics", "sc", "dyn_sc"),
          ("training", "open_gates", "gate_curve"), ("training", "loss", "loss_curve")]

def _num(value: Any) -> float:
    if value is None or isinstance(value, bool):
        return float(value) if isinstance(value, bool) else math.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _read_json(path: Path, section: str | None, fix: str) -> dict:
    """The file's object, checked: a "run" object, and the ``section`` object when one is named."""
    def fault(why: str) -> MetricsFileError:
        return MetricsFileError(f"evaluation file {path}: {why}; {fix}")

    try:
        data = json_object(read_text(path, fault), fault)
    except FileNotFoundError:
        raise MetricsFileError(f"evaluation file not found: {path}; {fix}") from None
    for key in ("run", section):
        if key is not None and not isinstance(data.get(key), dict):
            raise MetricsFileError(f"evaluation file {path}: no {key!r} object; {fix}")
    if data.get("training") is not None and not isinstance(data["training"], dict):
        raise MetricsFileError(f"evaluation file {path}: 'training' is not an object; {fix}")
    return data


def _fix(eval_dir: Path, section: str) -> str:
    path = eval_dir / f"{section}.json"
    return (f"write it with `snakemake {path}` (or `bayesncl evaluate --checkpoint {eval_dir.parent / 'model.pt'} "
            f"--out {eval_dir} --only {section}`)")


def _sha(path: Path, data: dict, fix: str) -> str:
    """The file's ``weights_sha``: without it the file cannot be checked against the others (stale)."""
    sha = data["run"].get("weights_sha")
    if not sha or not isinstance(sha, str):
        raise MetricsFileError(f"evaluation file {path} records no weights_sha, so whether it is stale cannot be "
                               f"checked; delete it and {fix}")
    return sha


def _read_run(run: Run, eval_dir: Path) -> dict[str, dict]:
    """{section: its object} for the run, plus "run", "training" and "config" (what it was trained with) from
    features.json."""
    features = eval_dir / "features.json"
    data = _read_json(features, None, _fix(eval_dir, "features"))
    if not isinstance(data.get("config"), dict):
        raise MetricsFileError(f"evaluation file {features} records no config, so the run's settings cannot be read; "
                               f"delete it and {_fix(eval_dir, 'features')}")
    out = {"run": data["run"], "training": data.get("training") or {}, "config": data["config"]}
    sha = _sha(features, data, _fix(eval_dir, "features"))
    for section in evaluation_sections(run):
        if section == "features":  # read above
            continue
        path, fix = eval_dir / f"{section}.json", _fix(eval_dir, section)
        body = _read_json(path, section, fix)
        other = _sha(path, body, fix)
        if other != sha:  # evaluated on another checkpoint than features.json
            raise MetricsFileError(f"evaluation file {path}: weights_sha {other} differs from {features}'s "
                                   f"{sha}, so it is stale; delete it and {fix}")
        out[section] = body[section]
    return out


def _json_num(value: Any) -> float | None:
    x = _num(value)
    return None if math.isnan(x) else x  # null, not the non-standard NaN token


def _percent(value: Any) -> float:
    return _num(value) * 100.0


def _sorted_curve(curve: dict) -> str:
    items = sorted(((int(float(k)), _json_num(_percent(v))) for k, v in curve.items()), key=lambda kv: kv[0])
    return json.dumps({str(k): v for k, v in items})


def setting_columns() -> dict[str, tuple[str, bool]]:
    """{a plugin method's setting: (its runs.csv column, whether it holds text)} for every registered method's own
    settings (registry.MethodSpec.settings): its name, or method.<name> where another column has that name."""
    out: dict[str, tuple[str, bool]] = {}
    for spec in (METHODS[name] for name in METHODS):
        for name, setting in spec.settings:
            column, text = out.get(name, (name if name not in COLUMNS else f"method.{name}", False))
            out[name] = (column, text or setting.kind is str)
    return out


def _settings(recorded: dict) -> dict[str, Any]:
    """The columns of a run's settings, from the config it recorded (an older record completed as config.as_recorded
    completes it): text as str, numbers as float; "" or NaN where it has none."""
    plugin = setting_columns()
    row: dict[str, Any] = {}
    for name, value in run_settings(as_recorded(recorded)).items():
        column, text = (name, name in TEXT_COLUMNS) if name in RUN_KEYS else plugin[name]
        row[column] = ("" if value is None else str(value)) if text else _num(value)
    return row


def _rows(run: Run, metrics: dict[str, dict], code: dict[str, str] | None = None) -> list[dict]:
    """The run's rows: one per name it takes (grid.expand.Run.labels), each listing the sets (and the sets it
    initialises) where it takes that name, with the same settings and numbers."""
    row = _flatten(run, metrics, code)
    out = []
    for label in dict.fromkeys(run.labels.values()):
        named = [s for s, v in run.labels.items() if v == label]
        sets = [s for s in run.sets if s in named]
        out.append({**row, "variant": label, "sets": ";".join(sets),
                    "sweep": ";".join(f"{s}:{param}" for s in sets for param in run.sweeps.get(s, ())),
                    "init_of": ";".join(s for s in run.init_of if s in named),
                    "pilot_of": ";".join(s for s in run.pilot_of if s in named)})
    return out


def _flatten(run: Run, metrics: dict[str, dict], code: dict[str, str] | None = None) -> dict:
    row: dict[str, Any] = {c: ("" if c in TEXT_COLUMNS else math.nan) for c in COLUMNS}
    row.update(run_id=run.run_id, twin=run.twin, **_settings(metrics["config"]),
               weights_sha=str(metrics["run"].get("weights_sha") or ""),
               imported=str(run.imported.get("sha256") or ""), imported_from=str(run.imported.get("checkpoint") or ""))
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
    row["eval_bn"] = str(metrics["run"].get("eval_bn") or "")  # the features' BatchNorm mode
    learning = (metrics.get("training") or {}).get("learning")  # bayesncl.measures.learning, from the run's log
    if isinstance(learning, dict):
        row["learning_slope"], row["learning_hi"] = _num(learning.get("slope")), _num(learning.get("hi"))
        row["still_learning"] = _num(learning.get("still_learning"))
    fall = (metrics.get("training") or {}).get("collapse")  # bayesncl.measures.learning.collapse, from the run's log
    if isinstance(fall, dict):
        row["collapsed"], row["collapse_epoch"] = _num(fall.get("collapsed")), _num(fall.get("epoch"))
        row["infonce_chance"] = _num(fall.get("chance"))
    row["infonce_final"] = _num((metrics.get("training") or {}).get("infonce_final"))  # the last epoch's mean
    from ..evaluation.sections import SECTIONS

    for name, body in metrics.items():  # a plugin section's numbers, in the columns it named
        for key, col in getattr(SECTIONS.get(name), "columns", ()):
            row[col] = _num((body or {}).get(key))
    from ..grid.stale import run_staleness

    diff = run_staleness(metrics["config"], run, code)  # against today's grid; the plugin code it recorded too
    row["stale"] = json.dumps(diff, sort_keys=True) if diff else ""
    return row


def summarize(grid_config: dict, base_dir: str | os.PathLike | None = None) -> pd.DataFrame:
    """One row per run of the workflow config's grid, columns ``COLUMNS``, in the grid's order.

    A relative ``results`` folder is resolved against ``base_dir`` (default: the current directory,
    which is the Snakemake working directory).
    """
    if not grid_config.get("results") or not isinstance(grid_config["results"], str):
        raise ConfigError(f"results: {grid_config.get('results')!r} is not a folder name; set `results: results`")
    results = Path(grid_config["results"])
    if not results.is_absolute():
        results = (Path(base_dir) if base_dir is not None else Path.cwd()) / results
    from ..runs.files import read_code

    rows = [row for run_id, run in expand_grid(grid_config).items()
            for row in _rows(run, _read_run(run, results / "runs" / run_id / "eval"), read_code(results / "runs" / run_id))]
    return prepare(pd.DataFrame(rows, columns=COLUMNS + [c for c, _ in setting_columns().values()] + section_columns()))


def write_summary(grid_config: dict, out_csv: str | os.PathLike,
                  base_dir: str | os.PathLike | None = None) -> pd.DataFrame:
    """Summarize the grid's runs and write ``out_csv`` (and the headline ``metrics.json`` beside it)
    atomically; returns the table."""
    df = summarize(grid_config, base_dir=base_dir)
    with atomic_path(out_csv) as tmp:
        df.to_csv(tmp, index=False, lineterminator="\n")
    atomic_write_text(Path(out_csv).with_name("metrics.json"), json.dumps(headline(df), indent=1) + "\n")
    return df


def headline(df: pd.DataFrame) -> dict:
    """{dataset: {arch: {variant: {metric: mean over seeds, "seeds": runs}}}} for the main comparison
    (names.MAIN_SETS), metrics names.METRICS_JSON: what `dvc metrics show` prints. A metric some runs left
    undefined (NaN, e.g. a collapsed run) is the mean of the others, and "<metric>_seeds" counts them."""
    out: dict = {}
    main = df[pd.Series([is_main(s) for s in df["sets"].fillna("")], index=df.index, dtype=bool)]
    for (dataset, arch, variant), g in main.groupby(["dataset", "arch", "variant"], sort=False):
        values = g[list(METRICS_JSON)].apply(pd.to_numeric, errors="coerce")
        entry: dict = {"seeds": len(g)}
        for k in METRICS_JSON:
            finite = values[k].dropna()
            if len(finite):
                entry[k] = round(float(finite.mean()), 4)
                if len(finite) < len(g):
                    entry[f"{k}_seeds"] = len(finite)
        out.setdefault(str(dataset), {}).setdefault(str(arch), {})[str(variant)] = entry
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
    numbers = set(section_columns()) | {c for c, text in setting_columns().values() if not text}
    for col in df.columns:
        if col not in cols:  # a plugin's numbers are numbers; other extra columns stay as they are
            cols[col] = (pd.Series(pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=float)) if col in numbers
                         else df[col].reset_index(drop=True))
    return pd.DataFrame(cols)  # built once: per-column assignment is slow in pandas


def section_columns() -> list[str]:
    """The runs.csv columns of the registered sections that name some (a plugin's: Section.columns)."""
    from ..evaluation.sections import SECTIONS

    return [col for s in SECTIONS.values() for _, col in s.columns if col not in COLUMNS]


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _same_width(csv_path, text: str, fix: str) -> None:
    """Every row as wide as the header: pandas would take surplus fields for an index, shifting every column."""
    import csv
    import io

    from ..core.errors import DataError

    try:
        widths = [len(row) for row in csv.reader(io.StringIO(text)) if row]
    except csv.Error as exc:
        raise DataError(f"{csv_path}: not a CSV table ({exc}); {fix}") from None
    for number, width in enumerate(widths[1:], start=2):
        if width != widths[0]:
            raise DataError(f"{csv_path}: not a CSV table (row {number} has {width} fields, the header "
                            f"{widths[0]}); {fix}")


REQUIRED_COLUMNS = ("run_id", "dataset", "method", "variant", "sets", "seed")  # a run's identity in every table


def read_summary(csv_path: str | os.PathLike) -> pd.DataFrame:
    """Read runs.csv back with the dtypes ``summarize`` produces (text stays text, "" not NaN).

    A file that is not a CSV table, lacks a column of ``REQUIRED_COLUMNS`` or has no run is a DataError
    naming it: read before anything is written, so a bad runs.csv leaves earlier tables as they were."""
    import io

    from ..core.errors import DataError

    fix = "run `bayesncl summarize` to write it again"
    try:
        text = Path(csv_path).read_bytes().decode("utf-8")
        _same_width(csv_path, text, fix)
        df = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
    except UnicodeDecodeError:
        raise DataError(f"{csv_path}: not a text file; expected the runs.csv that `bayesncl summarize` writes; "
                        f"{fix}") from None
    except OSError as exc:
        raise DataError(f"{csv_path}: cannot be read ({exc.strerror}); {fix}") from None
    except pd.errors.EmptyDataError:
        raise DataError(f"{csv_path}: empty, no header and no runs; {fix}") from None
    except (pd.errors.ParserError, ValueError) as exc:
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DataError(f"{csv_path}: not a CSV table ({why}); {fix}") from None
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise DataError(f"{csv_path}: no column {', '.join(missing)} (a runs.csv names each run's "
                        f"{', '.join(REQUIRED_COLUMNS)}); {fix}")
    if not len(df):
        raise DataError(f"{csv_path}: a header but no runs; {fix}")
    check_identity(df, csv_path)
    return prepare(df)


def _seed_ok(value: str) -> bool:
    try:
        x = float(value)
    except ValueError:
        return False
    return math.isfinite(x) and x >= 0 and x == int(x)  # summarize writes 0.0: a float that is an integer


def check_identity(df: pd.DataFrame, csv_path) -> None:
    """Refuse a runs.csv (read as text, ``dtype=str``) whose identity columns hold a missing or malformed
    value: a run without its seed, method, ... would be dropped from, or pooled wrongly into, a comparison
    and change a verdict in silence. One DataError naming the file, the rows (the header is row 1) and the
    first bad column; every reader of runs.csv calls it (read_summary) before anything is written."""
    from ..core.errors import DataError
    from ..settings.registry import training_datasets

    DATASETS, METHOD_NAMES = training_datasets(), METHODS.names()

    def text(v: str) -> bool:
        return v != "" and v == v.strip()

    checks = (
        ("run_id", text, "a run's id, as `bayesncl summarize` writes it"),
        ("dataset", lambda v: v in DATASETS, f"one of {', '.join(DATASETS)} (a plugin's dataset: give the report "
                                              "--grid, the workflow config that names its plugin)"),
        ("method", lambda v: v in METHOD_NAMES, f"one of {', '.join(METHOD_NAMES)} (a plugin's method: give the "
                                                "report --grid, the workflow config that names its plugin)"),
        ("variant", text, "the variant's name, e.g. NCL"),
        ("seed", _seed_ok, "a non-negative integer"),
    )
    for col, ok, want in checks:
        bad = [(i + 2, v) for i, v in enumerate(df[col]) if not ok(v)]
        if bad:
            shown = ", ".join(f"{n} ({v[:40]!r})" for n, v in bad[:5]) + (
                f" and {len(bad) - 5} more" if len(bad) > 5 else "")
            raise DataError(f"{csv_path}: column {col}, {'row' if len(bad) == 1 else 'rows'} {shown}: expected "
                            f"{want}; run `bayesncl summarize` to write it again")


def swept_in(sweep: str, set_name: str) -> list[str]:
    """The settings a row's ``sweep`` says its run is a sweep point of in the set ``set_name``: its entries
    "<set>:<setting>" of that set; a bare "<setting>" (a runs.csv written before the sweep was recorded set by set)
    in every set."""
    out = []
    for entry in str(sweep or "").split(";"):
        where, _, param = entry.rpartition(":")
        if param and where in ("", set_name):
            out.append(param)
    return out


def swept(rows: pd.DataFrame, set_name: str) -> list[str]:
    """The settings the set ``set_name`` sweeps with ``rows`` as its points (swept_in), sorted."""
    return sorted({p for s in rows["sweep"] for p in swept_in(s, set_name)})


def sweep_column(param: str) -> str:
    """The runs.csv column holding the values of the ``param`` sweep (a swept key's last part, as ``sweep`` names
    it): a plugin method setting's column (setting_columns: method.<name> where a package column has its name, as a
    metric's), else the package's column of that name."""
    return setting_columns().get(param, (param, False))[0]


def sweep_rows(rows: pd.DataFrame, param: str, set_name: str) -> pd.DataFrame:
    """The rows that are points of the set ``set_name``'s ``param`` sweep ("rho", "lambda", "proj_dim"): those whose
    ``sweep`` names it for that set (swept_in). The grid fills ``sweep`` exactly, set by set, so a run at the default
    point is in every sweep of the set whose values include that point, and in no other set's."""
    keep = [param in swept_in(s, set_name) for s in rows["sweep"]]
    return rows[pd.Series(keep, index=rows.index, dtype=bool)]
