"""The workflow config, read once and the same way everywhere: ``load_workflow``.

Snakemake (workflow/rules/common.smk) and every command that takes ``--grid`` (summarize, report, stale,
status, estimate, plan, ...) read a grid through ``load_workflow``: its files merged as Snakemake merges
``--configfile A B``, the switches' spellings read, its plugins imported, its schema checked and its defaults
set (as Snakemake's ``validate`` sets them), a smoke run's results folder set aside, the grid expanded into runs
(bayesncl.grid.expand) and its declared claims parsed (bayesncl.report.claims). A grid one of them refuses, all refuse,
with the same line.

``check_workflow_config`` validates the config against ``workflow/schemas/config.schema.yaml`` and raises
:class:`~bayesncl.core.errors.ConfigError` for the first problem, naming the key, what is wrong and the fix
(jsonschema's own report is a dump of the schema, 8 to 13 lines). ``bayesncl.grid.expand`` then checks the run
keys, key by key.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ..core.errors import ConfigError
from ..grid.expand import read_grid_files

__all__ = ["EXAMPLES", "SCHEMA", "Workflow", "check_grid", "check_workflow_config", "coerce_switches", "grid_argument",
           "load_workflow", "load_workflow_json"]


# The workflow's schema, beside the package in a checkout (src/ layout); absent from an installed wheel.
SCHEMA = Path(__file__).resolve().parents[3] / "workflow" / "schemas" / "config.schema.yaml"  # from src/bayesncl/cli

# How to give each top-level key on the command line (`snakemake --config KEY=VALUE`).
EXAMPLES = {
    "seeds": "--config 'seeds=[0,1,2]'",
    "smoke": "--config smoke=true (or smoke=false)",
    "forkserver": "--config forkserver=false (or forkserver=true)",
    "results": "--config results=results",
}
_TRUTH = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}
_ARTICLE = {"array": "a list", "object": "a mapping", "string": "a string", "integer": "an integer",
            "boolean": "true or false", "number": "a number"}


BOOLEANS = ("smoke", "forkserver")  # top-level switches


def coerce_switches(config: dict) -> None:
    """`--config smoke=true` (or forkserver=false) arrives as a string, `smoke=0` as the integer 0: read the
    usual spellings of true and false."""
    for key in BOOLEANS:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)  # Snakemake parses 0 and 1 as numbers
        if isinstance(value, str):
            config[key] = _TRUTH.get(value.strip().lower(), config[key])


def _key(path) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "the config"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _what(err) -> str:
    """What is wrong, in words, for the schema's kinds of check."""
    v, kind, arg = err.instance, err.validator, err.validator_value
    if kind == "type":
        want = " or ".join(_ARTICLE.get(t, t) for t in ([arg] if isinstance(arg, str) else arg))
        return f"{_short(v)} is not {want}"
    if kind == "minItems":
        return f"{_short(v)} is empty; give at least {arg} item{'s' if arg > 1 else ''}"
    if kind == "uniqueItems":
        seen, repeated = set(), []
        for x in v:
            k = str(x)
            if k in seen and k not in repeated:
                repeated.append(k)
            seen.add(k)
        return f"{_short(v)} repeats {', '.join(repeated)}; give each item once"
    if kind in ("anyOf", "oneOf"):  # the seed lists: an integer, or its digits as `--config` passes them
        return f"{_short(v)} is not a non-negative integer"
    if kind == "minimum":
        return f"{_short(v)} is below the minimum {arg}"
    if kind == "pattern":
        return f"{_short(v)} does not match {arg}"
    if kind == "required":
        missing = [k for k in arg if k not in v]
        return f"the key{'s' if len(missing) > 1 else ''} {', '.join(missing)} {'are' if len(missing) > 1 else 'is'} missing"
    if kind == "additionalProperties":
        extra = sorted(k for k in v if k not in err.schema.get("properties", {}))
        allowed = ", ".join(err.schema.get("properties", {}))
        return f"unknown key{'s' if len(extra) > 1 else ''} {', '.join(extra)}" + (f" (it takes {allowed})" if allowed else "")
    if kind == "minProperties":
        return f"{_short(v)} is empty; give at least one entry"
    return err.message.splitlines()[0]


def _filling_defaults():
    """A validator that also sets each absent property's schema default, as Snakemake's ``validate`` does
    (jsonschema's documented recipe), so a grid read outside Snakemake has the same keys as inside."""
    import jsonschema

    base = jsonschema.Draft202012Validator
    check_properties = base.VALIDATORS["properties"]

    def properties(validator, props, instance, schema):
        if isinstance(instance, dict):
            for name, sub in props.items():
                if isinstance(sub, dict) and "default" in sub and name not in instance:
                    instance[name] = copy.deepcopy(sub["default"])
        yield from check_properties(validator, props, instance, schema)

    return jsonschema.validators.extend(base, {"properties": properties})


def check_workflow_config(config: dict, schema_path: str | os.PathLike, where: str = "the workflow config") -> None:
    """Raise ConfigError naming the first key of ``config`` that breaks the schema, what is wrong and the fix
    (in ``where``, the config file, or on the command line). A valid config gets the schema's defaults for the
    keys it leaves out (set in place)."""
    import yaml

    schema = yaml.safe_load(Path(schema_path).read_text())
    err = _first_error(schema, config)
    if err is None:
        _filling_defaults()(schema).validate(config)
        return
    while err.parent is not None and err.parent.validator in ("anyOf", "oneOf"):  # the alternatives, not one
        err = err.parent
    path = list(err.absolute_path)
    if err.validator == "required" or err.validator == "additionalProperties":
        key = _key(path)
    else:
        key = _key(path[:1] if path[:1] == ["seeds"] else path)  # a seed item: name the list, as it is given
    top = path[0] if path else None
    how = f" or give {EXAMPLES[top]}" if top in EXAMPLES else ""
    raise ConfigError(f"{key}: {_what(err)}; fix it in {where}{how}")


def _first_error(schema: dict, config: dict):
    """The schema error jsonschema ranks first (best_match), or None; judged on a copy, so nothing is filled in
    before the whole config passes."""
    import jsonschema

    return jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(config))


def grid_argument(parser, what: str, required: bool = False) -> None:
    """`--grid FILE [OVERLAY ...]` on a command's parser (read by read_grid_files): ``what`` says which config."""
    parser.add_argument("--grid", nargs="+", required=required, metavar="YAML",
                        help=f"{what}; with overlays, each after the file it changes, merged in order as in "
                             "snakemake --configfile A B (e.g. config/config.yaml config/sweeps.yaml)")


def check_grid(config: dict, where: str, schema: str | os.PathLike = SCHEMA) -> None:
    """The schema check (and its defaults), when the schema is at hand (a checkout; Snakemake passes its own) and
    jsonschema installed (the workflow extra); ``bayesncl.grid.expand`` checks the run keys either way."""
    try:
        import jsonschema  # noqa: F401 - the workflow extra's
    except ImportError:
        return
    if Path(schema).is_file():
        coerce_switches(config)
        check_workflow_config(config, schema, where)


@dataclass
class Workflow:
    """A workflow config as ``load_workflow`` read it: the config (merged, checked, its defaults set), the files
    it came from (a grid and its overlays, in order; none when handed over as JSON), its runs (bayesncl.grid.expand
    Run by run id) and its declared claims (bayesncl.report.claims Claim objects)."""

    config: dict
    files: list[str] = field(default_factory=list)
    runs: dict = field(default_factory=dict)
    claims: list = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what the grid should hear (GridWarning), once each


def load_workflow(files: Sequence[str | os.PathLike] = (), config: dict | None = None, *,
                  plugin_dirs: Sequence[str | os.PathLike] | None = None, where: str | None = None,
                  overrides: dict | None = None, schema: str | os.PathLike = SCHEMA,
                  export: bool = True) -> Workflow:
    """Read a workflow config as Snakemake reads it, the one way every reader of a grid takes.

    ``files``: the grid and its overlays (`--grid A B`), merged in order; or ``config``, a config already merged
    (Snakemake's own, changed in place as Snakemake's `validate` changes it; or the JSON a workflow job is
    handed). ``overrides`` are laid over it last, as `snakemake --config KEY=VALUE`. Plugins are looked for in
    ``plugin_dirs`` (default: the files' folders) and, with ``export``, named in the environment so every job
    this process starts imports them. Any problem is one ConfigError naming ``where`` (default: the files) and
    the key."""
    import warnings

    from ..grid.expand import GridWarning, expand_grid, merged, smoke_results, variant_names
    from ..settings.plugins import export_env, load_grid
    from ..report.claims import parse_claims

    files = [str(f) for f in files]
    where = where or (f"--grid {' '.join(files)}" if files else "the workflow config")
    if config is None:
        config = read_grid_files(files)
    if overrides:
        config.update(merged(config, overrides))
    dirs = [str(d) for d in (plugin_dirs if plugin_dirs is not None else
                             dict.fromkeys(os.path.dirname(os.path.abspath(f)) for f in files))]
    coerce_switches(config)  # `--config smoke=true` arrives as a string
    load_grid(config, dirs)  # a plugin that fails is named as the grid's (plugins:)
    if export:
        export_env(config.get("plugins") or [], dirs)
    check_grid(config, where, schema)
    if config.get("smoke"):  # every job shrunk, written beside the real results (bayesncl.grid.expand.SMOKE)
        config["results"] = smoke_results(config["results"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", GridWarning)  # said once, as the Workflow's notes
        runs = expand_grid(config)
    claims = parse_claims(config.get("claims") or [], variant_names(config))
    notes = list(dict.fromkeys(n for run in runs.values() for n in run.notes))
    return Workflow(config, files, runs, claims, notes)


def load_workflow_json(text: str) -> Workflow:
    """The workflow config a workflow job hands over (`--grid-json`: Snakemake's merged config, its plugins named in
    the environment), read as load_workflow reads it; text that is not a JSON object is one line naming the flag."""
    from ..core.yamlio import json_flag

    return load_workflow(config=json_flag(text, "--grid-json", "the workflow config as a JSON object"),
                         where="--grid-json", export=False)
