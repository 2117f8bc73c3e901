"""A config key's check and its allowed-values phrase, derived from the config definition's field type and
metadata (bayesncl.settings.config: its dataclasses, `RULES`, `DEFAULTS`): range (ge, gt, le, lt), choices read from a
registry when the check runs, a note, what null means."""

from __future__ import annotations

import math
from dataclasses import fields, is_dataclass
from types import NoneType, UnionType
from typing import Any, Callable, Literal, Union, get_args, get_origin, get_type_hints


def _isnum(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _isint(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _range_phrase(noun: str, m: dict) -> str:
    ge, gt, le, lt = (m.get(k) for k in ("ge", "gt", "le", "lt"))
    lo, hi = (ge if ge is not None else gt), (le if le is not None else lt)
    a = "an" if noun[0] in "aeiou" else "a"
    if lo is not None and hi is not None:
        if gt is not None and lt is not None:
            return f"{a} {noun} strictly between {lo} and {hi}"
        return f"{a} {noun} in {'[' if ge is not None else '('}{lo}, {hi}{']' if le is not None else ')'}"
    if gt == 0:
        return f"a positive {noun}"
    if lo is not None:
        return f"{a} {noun} {'>=' if ge is not None else '>'} {lo}"
    if hi is not None:
        return f"{a} {noun} {'<=' if le is not None else '<'} {hi}"
    return f"{a} {noun}"


def _in_range(v, m: dict) -> bool:
    return ((m.get("ge") is None or v >= m["ge"]) and (m.get("gt") is None or v > m["gt"])
            and (m.get("le") is None or v <= m["le"]) and (m.get("lt") is None or v < m["lt"]))


def _base_rule(tp, m: dict) -> tuple[Callable[[Any], bool], str]:
    """(check, allowed phrase) for one non-None type."""
    if "choices" in m:  # a registry's names, as they are when the check runs
        return (lambda v: isinstance(v, str) and v in m["choices"]()), _Choices(m["choices"], m.get("plugin"))
    if get_origin(tp) is Literal:
        allowed = get_args(tp)
        # type as well as value: True == 1, but true is no head depth
        return (lambda v: any(type(v) is type(a) and v == a for a in allowed),
                "one of " + ", ".join(map(str, allowed)))
    if tp is bool:
        return (lambda v: isinstance(v, bool)), "true or false"
    if tp is int:
        return (lambda v: _isint(v) and _in_range(v, m)), _range_phrase("integer", m)
    if tp is float:
        return (lambda v: _isnum(v) and _in_range(v, m)), _range_phrase("number", m)
    if tp is str:
        return (lambda v: isinstance(v, str)), "a string"
    if get_origin(tp) is list and get_args(tp) == (str,):
        return (lambda v: isinstance(v, list) and bool(v) and all(isinstance(x, str) for x in v),
                "a non-empty list of strings")
    raise TypeError(f"config definition: no check for type {tp!r}")


class _Choices:
    """The allowed-values phrase of a registry key, read when the message is made; `kind`: what a plugin adds to
    it (a method, a dataset), for the line that refuses another name."""

    def __init__(self, names: Callable[[], tuple[str, ...]], kind: str | None = None):
        self.names, self.kind = names, kind

    def __str__(self) -> str:
        return "one of " + ", ".join(self.names())

    def __add__(self, other: str) -> str:
        return str(self) + other


def _rule(tp, m: dict) -> tuple[Callable[[Any], bool], str]:
    alts = get_args(tp) if get_origin(tp) in (Union, UnionType) else (tp,)
    nullable = NoneType in alts
    rules = [_base_rule(a, m) for a in alts if a is not NoneType]
    allowed = " or ".join(str(p) for _, p in rules) if len(rules) > 1 or not isinstance(rules[0][1], _Choices) \
        else rules[0][1]
    if m.get("note"):
        allowed += f" ({m['note']})"
    if nullable:
        allowed += " or null" + (f" ({m['null']})" if m.get("null") else "")
    checks = [c for c, _ in rules]
    return (lambda v: (nullable and v is None) or any(c(v) for c in checks)), m.get("expected", allowed)


def _walk(cls, prefix: str = ""):
    """(dotted key, type, metadata) of every leaf key of a config dataclass, in definition order."""
    hints = get_type_hints(cls)
    for f in fields(cls):
        key, tp = prefix + f.metadata.get("key", f.name), hints[f.name]
        if is_dataclass(tp):
            yield from _walk(tp, key + ".")
        else:
            yield key, tp, f.metadata
