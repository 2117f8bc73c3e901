"""What the package and the loaded plugins offer (`bayesncl list`): methods, datasets, evaluation sections, measures
(the runs.csv columns tables and claims read) and claims, each with its settings: key, type, what it allows,
default and doc. Read from the registries as they are when asked, by `entries` alone: bayesncl.settings.registry's
METHODS and DATASETS and the settings declared with registry.setting (SECTION_SETTINGS for sections), the package's keys
(bayesncl.settings.config's definition), evaluation.sections.SECTIONS, report.cells.METRICS, report.claims.CLAIMS (the
paper's and a plugin's) and a workflow config's own claims.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import NoneType, UnionType
from typing import Any, Literal, Union, get_args, get_origin

__all__ = ["KINDS", "Entry", "SettingRow", "entries", "render"]

KINDS = ("methods", "datasets", "sections", "measures", "claims", "settings")
DEFAULT_KINDS = KINDS[:-1]  # `settings`, every key of the package's config, on request


@dataclass(frozen=True)
class SettingRow:
    """A config key as a run takes it: dotted key, type, what it allows (its bounds), default and doc; `declared`:
    a plugin's own (registry.setting), not one of the package's keys."""

    key: str
    kind: str
    allowed: str
    default: Any
    doc: str
    declared: bool = False


@dataclass(frozen=True)
class Entry:
    """One method, dataset, section, measure or claim: its name, how the report prints it, where it comes from
    ("": the package; else the plugin module, or whose claim it is), what else to know about it and its settings."""

    name: str
    label: str
    source: str = ""
    about: str = ""
    settings: tuple[SettingRow, ...] = ()


def _type_name(tp) -> str:
    """A config field's type in a word: bool, int, float, str, choice, list; "| null" where null is allowed."""
    alts = get_args(tp) if get_origin(tp) in (Union, UnionType) else (tp,)
    return " | ".join("null" if a is NoneType else "choice" if get_origin(a) is Literal
                      else "list" if get_origin(a) is list else a.__name__ for a in alts)


def _package_rows() -> dict[str, SettingRow]:
    """{dotted key: row} of every key of the package's config, from its definition."""
    from ..settings.config import DEFAULTS, RULES, Config, flatten
    from ..settings.keyrules import _walk

    defaults = flatten(DEFAULTS)
    return {key: SettingRow(key, "choice" if "choices" in m else _type_name(tp), str(RULES[key][1]), defaults[key],
                            m.get("doc", "")) for key, tp, m in _walk(Config)}


def _declared_rows(prefix: str, pairs) -> tuple[SettingRow, ...]:
    """Rows of settings a plugin declared (registry.setting) under the dotted `prefix`."""
    return tuple(SettingRow(f"{prefix}{name}", ("choice" if s.choices else s.kind.__name__)
                            + (" | null" if s.null is not None else ""), s.rule()[1], s.default, s.doc, True)
                 for name, s in pairs)


def entries(kinds=DEFAULT_KINDS, claims: list | None = None) -> dict[str, list[Entry]]:
    """{kind: its entries} for the `kinds` asked (KINDS), the plugins loaded so far included; `claims`: a
    workflow config's own claims (its `claims:` list), listed after the paper's and the plugins'."""
    from ..settings.registry import DATASETS, METHODS, SECTION_SETTINGS, is_plugin

    package = _package_rows()
    out: dict[str, list[Entry]] = {}
    for kind in kinds:
        if kind == "methods":
            out[kind] = [Entry(m.name, m.label, m.module if is_plugin(m.module) else "",
                               _traits(m), tuple(package[f"method.{k}"] for k in m.reads if f"method.{k}" in package)
                               + _declared_rows("method.", m.settings))
                         for m in (METHODS[n] for n in METHODS)]
        elif kind == "datasets":
            out[kind] = [Entry(d.name, d.label, d.module if is_plugin(d.module) else "",
                               "" if d.trainable else "read by the background probe, never trained on",
                               tuple(r for k, r in package.items() if k.startswith(f"data.{d.name}."))
                               + _declared_rows(f"data.{d.name}.", d.settings))
                         for d in (DATASETS[n] for n in DATASETS)]
        elif kind == "sections":
            from ..evaluation.sections import SECTIONS

            out[kind] = [Entry(s.name, s.doc, s.module if is_plugin(s.module) else "", _section_about(s),
                               _declared_rows(f"eval.{s.name}.", SECTION_SETTINGS.get(s.name, ())))
                         for s in SECTIONS.values()]
        elif kind == "measures":
            from ..report.cells import METRICS, caption_text

            better = {"up": "higher is better", "down": "lower is better"}
            out[kind] = [Entry(m.key, caption_text(m.header, "txt"), about=better.get(m.better, "no better direction"))
                         for m in METRICS.values()]
        elif kind == "claims":
            from ..report.cells import caption_text
            from ..report.claims import CLAIMS, parse_claims, side_name

            def text(c, d=None):  # a declared claim's sides are the variants (or roles) it names
                sides = (side_name(d["left"]), side_name(d.get("right", ""))) if d else ("A", "B")
                return caption_text(c.title.replace("@A", sides[0]).replace("@B", sides[1]), "txt")

            declared = list(zip(parse_claims(claims), claims)) if claims else []
            out[kind] = ([Entry(c.name, text(c), "a plugin" if c.module else "the paper", _sets(c))
                          for c in CLAIMS.values()]
                         + [Entry(str(c.number), text(c, d), "the workflow config", _sets(c)) for c, d in declared])
        elif kind == "settings":
            out[kind] = [Entry(key, row.doc, settings=(row,)) for key, row in package.items()]
        else:
            raise ValueError(f"unknown kind {kind!r}; one of {', '.join(KINDS)}")
    return out


def _traits(m) -> str:
    """A method's traits the report reads, in words."""
    said = [("nonnegative", "feature on z+"), ("gated", "gated"), ("masked", "top-k mask"),
            ("reference", "the NCL reference")]
    out = [words for trait, words in said if getattr(m, trait)]
    return ", ".join(out + ([f"version {m.version}"] if m.version else []))


def _section_about(s) -> str:
    cols = ", ".join(c for _, c in s.columns)
    return ", ".join(x for x in ("every run" if s.every_run else "", f"runs.csv: {cols}" if cols else "",
                                 f"reads {', '.join(s.reads)}") if x)


def _sets(claim) -> str:
    return f"sets {', '.join(claim.sets)}" + (f"; no initialisation control ({claim.at_init})" if claim.at_init else "")


TITLES = {"methods": "methods (method.name)", "datasets": "datasets (data.dataset)",
          "sections": "evaluation sections (eval/<section>.json; their settings eval.<section>.*)",
          "measures": "measures (runs.csv columns the tables and claims read)", "claims": "claims",
          "settings": "the package's config keys (`--set KEY=VALUE`; a grid's defaults, datasets, variants)"}


def render(found: dict[str, list[Entry]]) -> str:
    """`bayesncl list`'s text: a heading per kind, an entry per line, each setting on a line of its own below it:
    `  KEY (TYPE; ALLOWED; default D): DOC`."""
    import json

    lines = []
    for kind, items in found.items():
        lines.append(f"{TITLES[kind]}:")
        for e in items:
            if kind != "settings":
                where = f" [{e.source}]" if e.source else ""
                lines.append(f"  {e.name}: {e.label}{where}" + (f" ({e.about})" if e.about else ""))
            for r in e.settings:
                lines.append(f"{'  ' if kind == 'settings' else '    '}{r.key} ({r.kind}; {r.allowed}; default "
                             f"{json.dumps(r.default)}): {r.doc}")
        lines.append("")
    return "\n".join(lines)
