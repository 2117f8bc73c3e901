"""YAML in: a config or workflow file read (one line naming the file on any problem) and `--set key=value`
items parsed into nested config keys. bayesncl.config re-exports them (their old home)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import yaml

from .errors import ConfigError


def parse_set(item: str) -> tuple[str, Any]:
    """`a.b=value` -> ("a.b", YAML-parsed value)."""
    if "=" not in item:
        raise ConfigError(f"--set {item!r}: expected key=value, e.g. method.rho=0.7")
    key, raw = item.split("=", 1)
    key = key.strip()
    if not raw.strip():
        return key, None
    try:
        return key, yaml.safe_load(raw)
    except yaml.YAMLError as e:
        problem = getattr(e, "problem", None) or type(e).__name__
        raise ConfigError(
            f"--set {key}: value {raw!r} is not valid YAML ({problem}); give a number, true/false, a closed "
            f"[list], or quote a string: --set {shlex.quote(f'{key}={json.dumps(raw)}')}"
        ) from None


def nest(pairs: dict[str, Any]) -> dict:
    out: dict = {}
    for key, value in pairs.items():
        node = out
        parts = key.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = value
    return out


def load_yaml_file(file: str | Path, what: str,
                   expected: str = "expected a YAML text file of config keys (data:, model:, method:, train:, eval:)"):
    """The YAML document in `file`; a missing, unreadable, binary or malformed file is one ConfigError line
    naming it and what was expected."""
    path = Path(file)
    if not path.is_file():
        raise ConfigError(f"{what} {path} " + ("is a folder" if path.is_dir() else "does not exist") + f"; {expected}")
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"{what} {path}: cannot be read ({e.strerror}); {expected}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{what} {path}: not a text file (it is not UTF-8); {expected}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{what} {path}: not valid YAML{where} ({problem}); {expected}") from None
