"""Files in: a config or workflow file read (one line naming the file on any problem), `--set key=value` items
parsed into nested config keys, a text file's text and a JSON object, each fault one line."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any, Callable

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
    text = read_text(path, lambda why: ConfigError(f"{what} {path}: {why}; {expected}"))
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{what} {path}: not valid YAML{where} ({problem}); {expected}") from None


def read_text(path: Path, fault: Callable[[str], Exception]) -> str:
    """The file's text; where it cannot be read, or is not UTF-8, `fault(what is wrong)` is raised (a missing file
    raises FileNotFoundError: the caller says what that means)."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise
    except OSError as e:
        raise fault(f"cannot be read ({e.strerror})") from None
    except UnicodeDecodeError:
        raise fault("not a text file (not UTF-8)") from None


def json_object(text: str, fault: Callable[[str], Exception], what: str = "a JSON object") -> dict:
    """The JSON object `text` holds; anything else raises `fault(what is wrong)`, naming `what` was expected."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise fault(f"not valid JSON ({e})") from None
    if not isinstance(value, dict):
        raise fault(f"expected {what}, got {shown(value)}")
    return value


def json_flag(text: str, flag: str, what: str = "a JSON object of config keys") -> dict:
    """The JSON object a --*-json flag gives; anything else is one ConfigError line naming the flag."""
    return json_object(text, lambda why: ConfigError(f"{flag}: {why}"), what)


def shown(value, width: int = 40) -> str:
    """A value as a one-line message shows it: its repr, cut at `width` characters."""
    text = repr(value)
    return text if len(text) <= width else text[:width - 3] + "..."
