"""The workflow config's first check (workflow/rules/common.smk): its schema, reported as one line.

``check_workflow_config`` validates the config against ``workflow/schemas/config.schema.yaml`` and raises
:class:`~bayesncl.errors.ConfigError` for the first problem, naming the key, what is wrong and the fix
(jsonschema's own report is a dump of the schema, 8 to 13 lines). ``bayesncl.grid`` then checks the run
keys, key by key.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

from .errors import ConfigError

__all__ = ["EXAMPLES", "SCHEMA", "check_claim", "check_grid", "check_workflow_config", "coerce_switches",
           "grid_argument", "read_grid_files"]

# The workflow's schema, beside the package in a checkout (src/ layout); absent from an installed wheel.
SCHEMA = Path(__file__).resolve().parents[2] / "workflow" / "schemas" / "config.schema.yaml"

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


def check_workflow_config(config: dict, schema_path: str | os.PathLike, where: str = "the workflow config") -> None:
    """Raise ConfigError naming the first key of ``config`` that breaks the schema, what is wrong and the fix
    (in ``where``, the config file, or on the command line)."""
    import jsonschema
    import yaml

    schema = yaml.safe_load(Path(schema_path).read_text())
    err = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(config))
    if err is None:
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


def grid_argument(parser, what: str, required: bool = False) -> None:
    """`--grid FILE [OVERLAY ...]` on a command's parser (read by read_grid_files): ``what`` says which config."""
    parser.add_argument("--grid", nargs="+", required=required, metavar="YAML",
                        help=f"{what}; with overlays, each after the file it changes, merged in order as in "
                             "snakemake --configfile A B (e.g. config/config.yaml config/sweeps.yaml)")


def read_grid_files(paths: Sequence[str | os.PathLike], flag: str = "--grid") -> dict:
    """The workflow config given as one file or as a grid and its overlays (`--grid config/config.yaml
    config/sweeps.yaml`): each a YAML mapping, merged in order as Snakemake merges `--configfile A B`
    (bayesncl.grid.merged). Not yet checked: see check_grid."""
    from .yamlio import load_yaml_file
    from .grid import merged

    parts = []
    for path in paths:
        part = load_yaml_file(path, flag, "expected the workflow config, a YAML text file (results, seeds, "
                                          "defaults, datasets, variants, sets), e.g. config/config.yaml")
        if not isinstance(part, dict):
            raise ConfigError(f"{flag} {path}: expected a mapping (results, seeds, defaults, datasets, ...)")
        parts.append(part)
    return merged(*parts)


def check_grid(config: dict, where: str) -> None:
    """The schema check of a workflow config read outside Snakemake (`bayesncl summarize --grid`), when the
    schema is at hand (a checkout); ``bayesncl.grid`` checks the run keys either way."""
    try:
        import jsonschema  # noqa: F401 - the workflow extra's
    except ImportError:
        return
    if SCHEMA.is_file():
        coerce_switches(config)
        check_workflow_config(config, SCHEMA, where)


# A declared claim's values by type (bayesncl.report.claims.parse_claims checks what they name).
_CLAIM_TEXT = ("metric", "relation", "left", "right", "set")


def check_claim(entry, at: str) -> None:
    """Raise ConfigError for a claim entry (`claims[i]` of the workflow config) whose value has the wrong type:
    a name that is not text (a list or a mapping), a tolerance that is not a finite positive number, a
    `relative` that is not true or false. Entries that are not mappings are left to parse_claims."""
    import math

    if not isinstance(entry, dict):
        return
    for key in _CLAIM_TEXT:
        if key in entry and not isinstance(entry[key], str):
            raise ConfigError(f"{at}.{key}: {_short(entry[key])} is not a name; give it as text, e.g. "
                              f"{key}: {'sc' if key == 'metric' else '>' if key == 'relation' else 'NCL'}")
    if "id" in entry and (isinstance(entry["id"], bool) or not isinstance(entry["id"], (str, int))):
        raise ConfigError(f"{at}.id: {_short(entry['id'])} is not a name; give it as text, e.g. id: D1")
    if "tolerance" in entry:
        tol = entry["tolerance"]
        if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not math.isfinite(tol) or tol <= 0:
            raise ConfigError(f"{at}.tolerance: {_short(tol)} is not a finite positive number; give the margin in "
                              "the metric's unit (or a fraction of the right side with relative: true), e.g. 1.0")
    if "relative" in entry and not isinstance(entry["relative"], bool):
        raise ConfigError(f"{at}.relative: {_short(entry['relative'])} is not true or false")
