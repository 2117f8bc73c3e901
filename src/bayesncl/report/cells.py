"""How a table cell is computed and written: the measures (``Metric``, the registry ``METRICS``), the cell statistic
(``stat``: mean and sample std over the finite values, n of them), the bold rule and the three output formats
(``Fmt``: LaTeX, Markdown, the terminal). The conventions: see tables.py.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from ..core.errors import ConfigError
from ..settings.registry import Registry
from .groups import parse_list

__all__ = ["METRICS", "Fmt", "Metric", "Stat", "bold_best", "caption_text", "latex_escape", "register_measure",
           "stat", "strip_marks"]


@dataclass(frozen=True)
class Metric:
    key: str            # summary column
    header: str         # header text; "$...$" is math (LaTeX as is, Markdown via caption_text)
    decimals: int
    better: str | None  # "up", "down" or None (no arrow, never bold)
    scale: float = 1.0  # printed value = scale x column value (100: a 0-1 fraction shown in percent)
    sig: int | None = None  # significant digits instead of fixed decimals (costs span many magnitudes)
    per_epoch: bool = False  # the column is a JSON list, a value per recorded epoch (the gradient dynamics)

    @property
    def name(self) -> str:  # its name in the registry, METRICS
        return self.key

    def value(self, record: dict) -> float:
        """A run's one value of the measure (what claims compare): its column, or for a per-epoch measure the last
        recorded epoch's (NaN when none; never an earlier epoch's)."""
        if not self.per_epoch:
            return record[self.key]
        values = parse_list(record[self.key])
        return values[-1] if values else math.nan

    def stat(self, values) -> "Stat":
        return stat(values, self.decimals, self.scale, self.sig)


# The measures the tables and claims read, by runs.csv column; a plugin's: register_measure.
METRICS: Registry[Metric] = Registry("measure", "metric")


def register_measure(key: str, header: str, decimals: int = 2, better: str | None = None, scale: float = 1.0,
                     sig: int | None = None) -> Metric:
    """Register a measure (a plugin section's runs.csv column, docs/EXTENDING.md): its column, header, decimals
    and which way is better ("up", "down" or None); then tables and declared claims read it."""
    if better not in ("up", "down", None):
        raise ConfigError(f"metric: measure {key!r} has better={better!r}; give 'up', 'down' or None")
    return METRICS.register(Metric(key, header, decimals, better, scale, sig))


for _m in [
    Metric("sc", "SC", 2, "up"),
    Metric("se_sum", "SE-Sum", 3, "down"),
    Metric("se_mean", "SE-Mean", 3, "down"),
    Metric("se_freq", "SE-Freq", 3, "down"),
    Metric("act", "Act.", 2, None),  # the paper argues no direction for the activation ratio
    Metric("alive", "Alive", 1, None),
    Metric("probe_top1", "Top-1", 2, "up"),
    Metric("probe_top5", "Top-5", 2, "up"),
    *[Metric(f"ret_p{k}", f"P@{k}", 2, "up") for k in (1, 3, 5, 10)],  # percent in runs.csv
    Metric("dyn_af_gv", r"$\rho$(AF, GV)", 3, None, per_epoch=True),
    Metric("dyn_gv_sc", r"$\rho$(GV, SC)", 3, None, per_epoch=True),
    Metric("dyn_af_sc", r"$\rho$(AF, SC)", 3, None, per_epoch=True),
    Metric("bg_acc", "BG acc.", 2, None),  # the claim is that it stays comparable, not that it rises
    Metric("bg_dominated_zplus", "BG-dom. $z^+$", 1, None, 100.0),
    Metric("bg_dominated_feature", "BG-dom. feat.", 1, None, 100.0),
    Metric("closed_bg", "Closed BG", 1, None, 100.0),
    Metric("closed_cls", "Closed cls.", 1, None, 100.0),
    Metric("gflops", "GFLOPs", 3, "down", sig=4),  # 1.416 vs 1.419 on the paper's model, ~0.001 on the demo's
    Metric("params_m", "Params (M)", 2, "down", sig=3),
    Metric("sec_per_epoch", "s/epoch", 1, "down", sig=3),
    Metric("img_per_s", "img/s", 0, "up"),  # a rate: higher is better
    Metric("peak_mem_mb", "Mem. (MB)", 0, "down"),
    Metric("train_minutes", "Total (min)", 1, "down", sig=4),
]:
    METRICS.register(_m)


# ----------------------------------------------------------------------------- formatting
# The footnote marks of tables and the claims table, with their LaTeX: † another protocol, ‡ a repeated
# result, § runs still learning, ¶ runs that collapsed (bayesncl.measures.learning). Fmt.mark writes only these, so a
# new mark is added here and strip_marks knows it.
MARKS = {"†": r"\dagger", "‡": r"\ddagger", "§": r"\S", "¶": r"\P"}


def strip_marks(label: str) -> str:
    """``label`` without the marks a table appended to it ("1a§¶" -> "1a"). The marks say something about the
    runs, which changes with the seeds, so they are no part of a row's identity (benchmarks/claims_stability.py
    pairs claims by the id this leaves)."""
    return label.rstrip("".join(MARKS))


_TEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
                "±": r"$\pm$", "≈": r"$\approx$", "×": r"$\times$", "Δ": r"$\Delta$", "−": r"$-$",
                **{m: f"$^{tex}$" for m, tex in MARKS.items()}}
_TEX_RE = re.compile("|".join(re.escape(c) for c in _TEX_SPECIAL))
_MATH_RE = re.compile(r"\$([^$]*)\$")
# Plain-text rendering of the little math the captions, headers and claims use.
_PLAIN_MATH = [(r"\mathrm", ""), (r"\text", ""), (r"\ddagger", "‡"), (r"\dagger", "†"), (r"\S", "§"),
               (r"\P", "¶"), (r"\rho", "ρ"),
               (r"\lambda", "λ"), (r"\pm", "±"), (r"\approx", "≈"), (r"\times", "×"), (r"\geq", "≥"),
               (r"\leq", "≤"), (r"\Delta", "Δ"), (r"\uparrow", "↑"), (r"\downarrow", "↓"), (r"\,", " "), ("^+", "+"),
               ("^", ""), ("_", ""), ("{", ""), ("}", "")]


def latex_escape(text: str) -> str:
    """Escape LaTeX special characters (one pass, so the inserted backslashes are not re-escaped)."""
    return _TEX_RE.sub(lambda m: _TEX_SPECIAL[m.group()], str(text))


def _plain_math(tex: str) -> str:
    tex = re.sub(r"\^\{([^}]*)\}", r"(\1)", tex)  # a superscript mark, e.g. ^{n=k} -> (n=k)
    for a, b in _PLAIN_MATH:
        tex = tex.replace(a, b)
    return tex


def caption_text(text: str, kind: str) -> str:
    """``text`` with ``$...$`` math for LaTeX (``kind`` "tex": escaped outside the math) or as plain
    text ("md", "txt")."""
    parts = _MATH_RE.split(str(text))  # even: prose, odd: math
    if kind == "tex":
        return "".join(latex_escape(p) if i % 2 == 0 else f"${p}$" for i, p in enumerate(parts))
    out = "".join(p if i % 2 == 0 else _plain_math(p) for i, p in enumerate(parts))
    return out.replace("|", r"\|") if kind == "md" else out


def _num(x: float, decimals: int) -> str:
    s = f"{x:.{decimals}f}"
    return s[1:] if s.startswith("-") and float(s) == 0 else s  # no "-0.00"


@dataclass
class Stat:
    mean: float
    std: float  # NaN when fewer than two values
    n: int
    decimals: int
    bold: bool = False
    mark: str = ""  # a flag symbol after the value ("‡")
    of: int = 0     # the runs the values came from; n < of: some were NaN (shown as k/n)

    def printed(self) -> float:
        """The mean as printed (rounded to ``decimals``): what bold ties are judged on."""
        return float(_num(self.mean, self.decimals))


def stat(values, decimals: int, scale: float = 1.0, sig: int | None = None) -> Stat:
    """Mean and sample std of the finite ``values`` x ``scale``; with ``sig``, the decimals that print
    the mean with ``sig`` significant digits (at least ``decimals``)."""
    vals = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float) * scale
    if vals.size == 0:
        return Stat(math.nan, math.nan, 0, decimals)
    mean = float(np.mean(vals))
    if sig is not None and mean != 0:
        decimals = min(max(decimals, sig - 1 - math.floor(math.log10(abs(mean)))), 8)
    std = float(np.std(vals, ddof=1)) if vals.size > 1 else math.nan
    return Stat(mean, std, int(vals.size), decimals)


class Fmt:
    """How one output format writes cells, text and marks: "tex", "md" or "txt" (the terminal)."""

    def __init__(self, kind: str):
        if kind not in ("tex", "md", "txt"):
            raise ValueError(f"unknown table format {kind!r}: expected tex, md or txt")
        self.kind = kind
        self.tex = kind == "tex"

    def esc(self, text: str) -> str:
        if self.tex:
            return latex_escape(text)
        return str(text).replace("|", r"\|") if self.kind == "md" else str(text)

    def text(self, marked: str) -> str:
        """Text written with ``$...$`` math (captions, headers, claims)."""
        return caption_text(marked, self.kind)

    def dash(self) -> str:
        return "--" if self.tex else "-"

    def cell(self, c: "Stat | str") -> str:
        if isinstance(c, str):
            return c
        if not math.isfinite(c.mean):
            return self.dash()
        mean, std = _num(c.mean, c.decimals), (_num(c.std, c.decimals) if math.isfinite(c.std) else "")
        part = f"{c.n}/{c.of}" if c.n < c.of else ""  # some runs NaN
        if self.tex:
            body = rf"\mathbf{{{mean}}}" if c.bold else mean
            if std:
                body += rf"_{{\pm {std}}}"
            if part:
                body += "^{" + (r"\ddagger," if c.mark else "") + part + "}"
            elif c.mark:
                body += r"^\ddagger"
            return f"${body}$"
        body = f"{mean} ± {std}" if std else mean
        if c.bold and self.kind == "md":
            body = f"**{body}**"
        return body + c.mark + (f" ({part})" if part else "")

    def header(self, m: Metric) -> str:
        arrow = {"up": r" $\uparrow$", "down": r" $\downarrow$"}.get(m.better or "", "")
        return self.text(m.header + arrow)

    def seeds_mark(self, n: int) -> str:
        return f"$^{{n={n}}}$" if self.tex else f" (n={n})"

    def mark(self, symbol: str) -> str:
        tex = MARKS[symbol]  # KeyError for a mark not in MARKS, in every format: strip_marks must know it
        return f"$^{tex}$" if self.tex else symbol


def bold_best(cells: list[Stat], better: str | None) -> None:
    """Bold the best cell when it beats the runner-up at the printed precision."""
    cells = [c for c in cells if math.isfinite(c.mean) and not c.mark]
    if better is None or len(cells) < 2:
        return
    printed = [c.printed() for c in cells]
    best = max(printed) if better == "up" else min(printed)
    if printed.count(best) == 1:
        cells[printed.index(best)].bold = True
