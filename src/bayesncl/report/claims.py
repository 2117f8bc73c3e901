"""The claims of docs/METHOD.md section 9 as comparisons on the grid's own runs (claim objects, judged by
verdicts.compare; judge.py builds them into the table's rows, ``claims_rows``). claims_table.py writes them as the
claims table and the terminal's outcome; the reproduction report (document.py) reads the same objects.

Each row is one comparison between two sides (a claim with several parts gets one row per part: 1a-c,
2a-b, 6a-c, 7a-d, 10a and one 10b per width D, 11a-b, 12a-b). A side is the group of runs (seeds) of one
variant in the set the claim reads, found by its settings, not its display name (e.g. BayesNCL = method
``bayesncl``, STE gate, detach, 2-layer head), within one dataset and one architecture: a claim never
pools runs of two architectures (claim 9 reads Table 5's runs, the others Tables 1-4, 6, 7 and Figure 4's).

Claim 7 reads the gradient-dynamics correlations at each run's last recorded epoch; "weakens" compares
absolute values. Claim 11 compares the best inner sweep point (chosen after seeing the means) with each end;
it holds only when both parts hold and does not hold when either does not. Runs that repeat another result
(equal ``weights_sha``, a Top-k mask that never bound; see groups.flag_repeats) are marked with a double
dagger.

Controls (docs/METHOD.md section 9; made in judge.py): each comparison of trained networks on a metric that exists
before training is made again on the runs' untrained twins (bayesncl.grid.expand.plan_init_runs; runs.csv's ``twin``
names a run's twin, ``init_of`` the sets a twin initialises: twin_records), giving Delta at initialisation, and
the change training brought (each seed's Delta minus its Delta at initialisation) is judged by the same rule; a claim without such a metric
(``Claim.at_init``) says why, and where both sides' twins are the same network (Delta at init 0 by construction) the
Training column says so instead of repeating the verdict. Every comparison is also judged familywise, by the family's
graph (verdicts.family_verdicts): the primary claims (PRIMARY: 1a and 2a on each dataset) share the level and pass it
on to the others as they hold. A grid grown by `bayesncl plan` (runs.csv's ``pilot_of``: the sets a run was pilot
evidence for) is judged in two looks: the pilot's seeds at LOOK_ALPHAS[0], then all the seeds, the pilot's test
combined with the added seeds' own (docs/METHOD.md section 9, "Planning"). Each comparison's margin has its source
(MARGINS per metric; the Margin column).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

import numpy as np

from ..core.yamlio import shown
from .cells import METRICS, Metric, Stat, stat
from ..settings.registry import METHODS, Registry, method_traits
from .groups import Group, flag_repeats, group_rows, in_set
from .names import set_names
from .summary import METRIC_COLUMNS, section_columns, swept_in, sweep_column
from .verdicts import BETTER, NOT_WORSE, SPEC, UNSIGNED, Kind, Outcome, at_most, combine, compare, finite, within

# the judged table: report/judge.py
__all__ = ["CLAIMS", "PRIMARY", "SAME_INIT", "Claim", "Comparison", "Side", "declared_claims", "register_claim"]

# The paper's headline on each dataset (docs/METHOD.md section 9, "Controls"): interpretability up (1a) and accuracy
# kept (2a). They share the familywise level first; each that holds passes part of it on to the other comparisons.
PRIMARY = ("1a", "2a")
# The margin of a "not worse" claim, per metric, in its runs.csv unit (docs/METHOD.md section 9): the spec's 1 point
# each (SPEC: the paper reports no seed spread to set one from). A margin says what difference does not matter; the
# seeds a claim needs follow from its spread (bayesncl.planning.plan), not the other way round.
MARGINS = {"probe_top1": 1.0, "ret_p10": 1.0, "sc": 1.0}
PAPER = "paper"  # a margin from the paper's own words or numbers
DECLARED_MARGIN = "declared"  # a declared claim's own tolerance
SAME_INIT = "same network at init"  # the Training cell where Delta at init is 0 by construction


# ----------------------------------------------------------------------------- sides
def _flag(v, default: float) -> float:
    return default if v is None or not math.isfinite(v) else float(v)


def _bayes(gate: str = "ste", detach: bool = True, depth: int = 2) -> Callable[[dict], bool]:
    def pick(r: dict) -> bool:
        return (method_traits(r["method"]).gated and (r["gate"] or "ste") == gate
                and bool(_flag(r["detach"], 1.0)) == detach and _flag(r["head_depth"], 2.0) == depth)
    return pick


# The paper's methods as the registry's traits tell them (bayesncl.settings.registry.MethodSpec): BayesNCL is the gated
# method, NCL the reference, Top-k NCL the masked one, SimCLR the one whose feature is not built on z+.
TRAITS: dict[str, Callable] = {"bayes": lambda s: s.gated, "reference": lambda s: s.reference,
                               "topk": lambda s: s.masked, "simclr": lambda s: not s.nonnegative}
ROLES: dict[str, Callable[[dict], bool]] = {
    "any": lambda r: True,  # a declared claim's side: found by its variant label alone
    "bayes": _bayes(),  # the gated method with the paper's gate (STE, detach, a 2-layer head)
    **{role: (lambda t: lambda r: t(method_traits(r["method"])))(t) for role, t in TRAITS.items() if role != "bayes"},
    "gumbel": _bayes(gate="gumbel"),
    "soft": _bayes(gate="soft"),
    "nodetach": _bayes(detach=False),
    "head1": _bayes(depth=1),
    "head3": _bayes(depth=3),
}
# A side without runs is labelled by its role: the registry's label of the first method with the trait, or the
# ablation's name.
DEFAULT_LABELS = {"any": "(no runs)", "gumbel": "BayesNCL (Gumbel)", "soft": "Soft gate", "nodetach": "w/o detach",
                  "head1": "1-layer head", "head3": "3-layer head"}


def default_label(role: str) -> str:
    if role in TRAITS:
        names = METHODS.names(TRAITS[role])
        return METHODS[names[0]].label if names else role
    return DEFAULT_LABELS[role]


@dataclass
class Side:
    """One side of a comparison: its runs' (seed, value) pairs; ``stat`` is set from the values the test
    used (mean +- std over them)."""
    label: str
    values: list[tuple[float, float]] = field(default_factory=list)
    decimals: int = 2
    sig: int | None = None
    repeats: str = ""  # flag note (the group repeats another result)
    learning: int = 0  # runs still learning when they stopped (bayesncl.measures.learning)
    collapsed: int = 0  # runs that collapsed (bayesncl.measures.learning.collapse)
    stat: Stat = field(default_factory=lambda: Stat(math.nan, math.nan, 0, 2))
    set_name: str = ""  # the set its runs came from (what `bayesncl plan` grows)
    run_ids: tuple[str, ...] = ()
    metric: str = ""  # the runs.csv column its values come from ("" where they are not one column's)

    @property
    def runs(self) -> int:
        return len(self.values)

    @property
    def nan(self) -> int:
        return sum(1 for _, v in self.values if v is None or not math.isfinite(v))

    def use(self, used: Sequence[float]) -> None:
        self.stat = stat(used, self.decimals, sig=self.sig)


class Runs:
    """The records of one dataset and one architecture, grouped per set with the tables' flags (``column``: which
    column names a record's sets; the initialisation control reads ``twin_records``)."""

    def __init__(self, records: list[dict], arch: str = "", column: str = "sets"):
        self.records, self.arch, self.column = records, arch, column
        self._groups: dict[str, list[Group]] = {}

    def groups(self, set_name: str) -> list[Group]:
        if set_name not in self._groups:
            gs = group_rows(r for r in self.records if in_set(r[self.column], set_name))
            flag_repeats(gs)
            self._groups[set_name] = gs
        return self._groups[set_name]

    def has(self, *set_names: str) -> bool:
        return any(self.groups(s) for s in set_names)

    def side(self, set_names: tuple[str, ...], role: str, values: Callable[[dict], float], m: Metric,
             where: Callable[[dict], bool] = lambda r: True) -> Side:
        """The first group in the first set that has runs matching ``role`` (and ``where``); ``values``
        gives a run's value (in the units of ``m``, which formats it)."""
        for s in set_names:
            for g in self.groups(s):
                rows = [r for r in g.rows if ROLES[role](r) and where(r)]
                if rows:
                    return Side(g.variant, [(r["seed"], values(r)) for r in rows], m.decimals, m.sig, g.repeats,
                                sum(r.get("still_learning") == 1 for r in rows),
                                sum(r.get("collapsed") == 1 for r in rows), set_name=s,
                                run_ids=tuple(str(r.get("run_id", "")) for r in rows), metric=m.key)
        return Side(default_label(role), [], m.decimals, m.sig, metric=m.key)


def twin_records(records: list[dict]) -> list[dict]:
    """The initialisation control's records: each run that names an untrained twin (runs.csv's ``twin``) with that
    twin's numbers, in the sets the twin initialises. A side is then found among them as among the trained runs, by
    the trained run's variant and settings, also where one twin serves several variants (settings that change only
    how a method trains leave its untrained network as it is: bayesncl.grid.expand.init_config)."""
    by_id = {r["run_id"]: r for r in records}
    measured = ("run_id", "weights_sha", "epochs", *METRIC_COLUMNS, *section_columns())
    out = []
    for r in records:
        t = by_id.get(r.get("twin") or None)
        if t is not None:
            sets = ";".join(s for s in set_names(r["sets"]) if in_set(t["init_of"], s))
            out.append({**r, **{c: t[c] for c in measured if c in t}, "sets": sets})
    return out


def _reader(m: Metric, absolute: bool = False) -> Callable[[dict], float]:
    """A run's value as a claim reads it (Metric.value: a per-epoch measure's last recorded epoch), or its absolute
    value. Every metric a claim reads is printed in its runs.csv unit (Metric.scale 1)."""
    return (lambda r: abs(m.value(r))) if absolute else m.value


# ----------------------------------------------------------------------------- comparisons
@dataclass
class Comparison:
    claim: str              # "1a"
    text: str               # statement; "$...$" is math, "@A" / "@B" stand for the sides' labels
    left: Side
    right: Side
    result: Outcome
    kind: Kind = BETTER
    paper: str = ""         # the paper's values (docs/METHOD.md section 8), "$...$" math
    right_text: str | None = None  # shown instead of the right side's value (a constant)
    delta: str = ""         # how the difference is taken when not left - right ("right $-$ left")
    sets: tuple[str, ...] = ()  # the sets its claim reads (claims_rows sets it): the tables that show it
    better: str = "up"      # the direction compare was given
    init: Outcome | None = None    # the same comparison on the untrained twins (claims_rows sets it)
    change: Outcome | None = None  # Delta - Delta at initialisation, per seed: the training verdict
    init_note: str = ""     # why there is no ``init`` ("" when there is)
    same_init: bool = False  # both sides' untrained twins are the same runs: Delta at init is 0 by construction
    family: str = ""        # the familywise verdict (the graph over the table; claims_rows sets it)
    primary: bool = False   # in the primary family (PRIMARY; claims_rows sets it)
    looks: tuple = ()       # a grown grid's (look 1, look 2) outcomes: the pilot's seeds, the added seeds alone

    @property
    def verdict(self) -> str:
        return self.result.verdict


def _judged(cid: str, text: str, left: Side, right: "Side | float", kind: Kind, better: str,
            paper: str = "") -> Comparison:
    """A comparison of two sides (or of a side with a constant), the sides' stats set from the values used."""
    const = not isinstance(right, Side)
    res = compare(left.values, right if const else right.values, kind, better)
    right_side = Side(f"{right:g}") if const else right
    left.use(res.left if res.test else [v for _, v in finite(left.values)])
    if not const:
        right_side.use(res.right if res.test else [v for _, v in finite(right_side.values)])
    delta = ("$-$left" if const else "right $-$ left") if better == "down" and kind.name not in UNSIGNED else ""
    return Comparison(cid, text, left, right_side, res, kind, paper, f"{right:g}" if const else None, delta,
                      better=better)


def _sweep_points(runs: Runs, sets: tuple[str, ...], param: str, pick: Callable[[dict], bool],
                  value: Callable[[dict], float]) -> tuple[list[dict], dict[float, list[tuple[float, float]]]]:
    """(the runs of the first of ``sets`` that has runs ``pick`` takes, {value of the ``param`` sweep: its points'
    (seed, ``value``)}): the points of a sweep as the sweep claims read them (_is_point)."""
    s, rows = next(((s, rs) for s in sets if (rs := [r for g in runs.groups(s) for r in g.rows if pick(r)])),
                   ("", []))
    points: dict[float, list[tuple[float, float]]] = {}
    point = _is_point(runs, s, param)
    for r in rows:
        if point(r):
            points.setdefault(_number(r.get(sweep_column(param))), []).append((r["seed"], value(r)))
    return rows, points


def _is_point(runs: Runs, s: str, param: str) -> Callable[[dict], bool]:
    """Whether a run of the set ``s`` is a point of its ``param`` sweep: its ``sweep`` names the setting there
    (summary.sweep_rows) and it has a value of it; in a set none of whose runs records a sweep (runs.csv rows made by
    hand), every run with a value of the setting."""
    col = sweep_column(param)
    tagged = any(r.get("sweep") for g in runs.groups(s) for r in g.rows) if s else True
    return lambda r: (math.isfinite(_number(r.get(col)))
                      and (not tagged or param in swept_in(r.get("sweep"), s)))


def _inverted_u(cid: str, d: dict, sets: tuple[str, ...], value: Callable[[dict], float], paper: str) -> Callable:
    """The best inner point of the sweep of ``d``'s left side (chosen after seeing the means) against each end."""
    m, param, (role, where) = METRICS[d["metric"]], _param(d), _pick(d["left"])
    name, at = _sweep_words(d)

    def build(runs: Runs) -> list[Comparison]:
        rows, points = _sweep_points(runs, sets, param, lambda r: ROLES[role](r) and where(r), value)
        side = d["left"] if isinstance(d["left"], str) else rows[0]["variant"] if rows else default_label(role)
        xs = sorted(points)
        mean = {x: np.mean(f) if (f := [v for _, v in finite(points[x])]) else -math.inf for x in xs}
        inner = [x for x in xs[1:-1] if math.isfinite(mean[x])]
        if len(xs) < 3 or not inner:
            none = Side(side, [], m.decimals)
            return [_judged(cid, f"{m.header} of @A: inverted U over {name}", none, Side(side, [], m.decimals),
                            BETTER, "up", paper)]
        best = max(inner, key=mean.__getitem__)  # chosen after seeing the means (post hoc)
        ends = (xs[0], xs[-1])
        parts = [compare(points[best], points[e]) for e in ends]
        _, part = combine(parts)
        end = ends[parts.index(part)]  # the weakest part: its verdict is the claim's
        text = f"{m.header} of @A: {at(best)} $>$ ends {xs[0]:g}, {xs[-1]:g} (right: {end:g})"
        return [_judged(cid, text, Side(side, points[best], m.decimals), Side(side, points[end], m.decimals),
                        BETTER, "up", paper)]
    return build


# Why a claim has no initialisation control: its metric has no meaning before training.
NO_INIT = {"dyn": "n/a: gradient dynamics over training", "cost": "n/a: the cost of training",
           "sweep": "n/a: a sweep of training settings"}
NO_TWINS = "no untrained runs"  # the grid planned none (runs.csv from before the control)
_TRAINING_METRICS = {"dyn_af_gv": "dyn", "dyn_gv_sc": "dyn", "dyn_af_sc": "dyn", "gflops": "cost",
                     "params_m": "cost", "sec_per_epoch": "cost", "img_per_s": "cost", "peak_mem_mb": "cost",
                     "train_minutes": "cost"}


@dataclass(frozen=True)
class Claim:
    number: "int | str"  # the paper's claims: 1-12; a declared claim: its id
    sets: tuple[str, ...]
    title: str  # what the paper states (docs/METHOD.md section 9), in short
    build: Callable[[Runs], list[Comparison]]
    applies: Callable[[Runs], bool] | None = None  # judged only where this holds (declared: a side has runs)
    at_init: str = ""  # why it has no initialisation control ("": it has one; grid.expand.INIT_SETS plans its runs)
    # who declared it: "" the paper (this module; only its comparisons can be primary), else the plugin module that
    # registered it (register_claim) or the workflow config (declared_claims)
    module: str = ""

    @property
    def name(self) -> str:  # its name in the registry, CLAIMS
        return str(self.number)




# ----------------------------------------------------------------------------- declared claims
# A workflow config's own claims (`claims:`, docs/EXTENDING.md), judged by the same rule as the paper's and shown
# after them: {id, metric, left, right, relation, tolerance, relative, absolute, set}. A side is a variant's label, or
# a role ({role: bayes}: ROLES, the runs found by their settings, as the paper's sides are); a right side may be a
# number (a constant the left side's runs are tested against); `absolute: true` compares the values' absolute
# values; `set` one set or a list (the first with runs of a side). A tolerance is the margin of >=, <= (else the
# metric's, MARGINS), within and at most.
RELATIONS = {">": (BETTER, "up", "$>$"), "<": (BETTER, "down", "$<$"), ">=": (NOT_WORSE, "up", "$\\geq$"),
             "≥": (NOT_WORSE, "up", "$\\geq$"), "<=": (NOT_WORSE, "down", "$\\leq$"),
             "≤": (NOT_WORSE, "down", "$\\leq$"), "within": (None, "up", "within"),
             "at most": (None, "up", "at most")}
_TOLERANT = {"within": within, "at most": at_most}  # relations that take a tolerance
# A claim over a sweep (`sweep: <the swept setting>`, its set figure4b unless it names one), of the kinds the paper
# makes over D, rho and lambda (claims 10-11): the left side's metric rises with the setting (its largest value
# against its smallest, as 10a), an inverted U over it (as 11), or, with any relation above, at each value left
# against right (as 10b, a row per value either side ran). Neither needs a right side. The text names the setting
# `name` (default: its key) and a value of it `point` (default: "<name> = @", @ standing for the value).
SWEEP_RELATIONS = ("rises with", "inverted U")
_DECLARED_KEYS = {"id", "metric", "left", "right", "relation", "tolerance", "relative", "absolute", "set", "sweep",
                  "name", "point"}
WORKFLOW = "the workflow config"  # the module of a workflow config's own claims
# The paper's own entries (module ""), besides: its values (the Paper cell; in a claim at each value of a sweep,
# {value: its paper values} for the values it has) and a statement other than "metric: @A relation @B"; their
# tolerances are the paper's (PAPER), not declared.
_PAPER_KEYS = {"paper", "text"}


def register_claim(claim: "Claim | dict") -> "Claim":
    """A plugin's claim into CLAIMS: a Claim (its own build function), or a declaration as in the workflow config's
    claims: list (an `id` is needed). Judged and shown like the workflow config's, never primary."""
    import sys

    if isinstance(claim, dict):
        (claim,) = parse_claims([claim], where=f"claim {claim.get('id', '?')}")
    module = sys._getframe(1).f_globals.get("__name__") or "a plugin"  # the registering module, for its messages
    return CLAIMS.register(replace(claim, module=module))


def declared_claims(config: dict) -> list[Claim]:
    """A workflow config's own claims (its `claims:` list), parsed for one report: the judge is given them."""
    return parse_claims(config.get("claims") or [])


# A declared claim's values by type (parse_claims checks what they name), each with an example of its fix.
_CLAIM_TEXT = {"metric": "sc", "relation": ">", "left": "NCL", "right": "NCL", "set": "table1", "sweep": "lambda",
               "name": '"$\\lambda$"', "point": '"$D = @$"'}


def check_claim(entry, at: str) -> None:
    """Raise ConfigError for a claim entry (`claims[i]` of the workflow config) whose value has the wrong type:
    a name that is not text (a list or a mapping), a tolerance that is not a finite positive number, a
    `relative` or `absolute` that is not true or false, a right side that is no name, role or finite number, a Paper
    cell that is no text (or, at each value of a sweep, {value: text}). Entries that are not mappings are left to
    parse_claims."""
    from ..core.errors import ConfigError

    if not isinstance(entry, dict):
        return
    for key, example in _CLAIM_TEXT.items():
        if key in entry and not isinstance(entry[key], str) and not _role_or_sets(key, entry[key]):
            role = f", or a role, e.g. {key}: {{role: reference}}" if key in ("left", "right") else ""
            number = ", or a number, e.g. right: 0" if key == "right" else ""
            raise ConfigError(f"{at}.{key}: {_shown(entry[key])} is not a name; give it as text, e.g. "
                              f"{key}: {example}{role}{number}")
    if "id" in entry and (isinstance(entry["id"], bool) or not isinstance(entry["id"], (str, int))):
        raise ConfigError(f"{at}.id: {_shown(entry['id'])} is not a name; give it as text, e.g. id: D1")
    if "tolerance" in entry:
        tol = entry["tolerance"]
        if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not math.isfinite(tol) or tol <= 0:
            raise ConfigError(f"{at}.tolerance: {_shown(tol)} is not a finite positive number; give the margin in "
                              "the metric's unit (or a fraction of the right side with relative: true), e.g. 1.0")
    for key in ("relative", "absolute"):
        if key in entry and not isinstance(entry[key], bool):
            raise ConfigError(f"{at}.{key}: {_shown(entry[key])} is not true or false")
    paper = entry.get("paper", "")
    if not isinstance(paper, str) and not (isinstance(paper, dict) and all(
            _is_number(k) and isinstance(v, str) for k, v in paper.items())):
        raise ConfigError(f"{at}.paper: {_shown(paper)} is not text, nor {{value of the sweep: text}}; give it as "
                          "text, e.g. paper: 36.14 vs 14.93")


def _is_number(value) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


def _constant(d: dict, value) -> float:
    """A declared claim's constant right side as its runs' values are compared (`absolute`: its absolute value)."""
    return abs(float(value)) if d.get("absolute") else float(value)


def _role_or_sets(key: str, value) -> bool:
    """A side given as a role ({role: NAME}, NAME one of ROLES), a right side as a number, or the sets given as a
    list of names."""
    if key in ("left", "right"):
        return (isinstance(value, dict) and set(value) == {"role"} and value["role"] in ROLES
                and value["role"] != "any") or (key == "right" and _is_number(value))
    return key == "set" and isinstance(value, list) and bool(value) and all(isinstance(v, str) for v in value)


def side_name(side) -> str:
    """A side as the table names it where it has no runs: its label, or its role's (default_label)."""
    return side if isinstance(side, str) else default_label(side["role"])


def _pick(side) -> tuple[str, Callable[[dict], bool]]:
    """(role, filter) that find a side's runs (Runs.side): a label's variant, or a role's settings."""
    if isinstance(side, str):
        return "any", lambda r: r["variant"] == side
    return side["role"], lambda r: True


def _side(runs: Runs, sets: tuple[str, ...], m: Metric, spec, value: Callable[[dict], float],
          where: Callable[[dict], bool] = lambda r: True) -> Side:
    """A declared side's runs (``where`` of them) in the first of ``sets`` that has some; a label's side is named
    by it, runs or not."""
    role, pick = _pick(spec)
    side = runs.side(sets, role, value, m, lambda r: pick(r) and where(r))
    if isinstance(spec, str):
        side.label = spec
    return side


def _shown(value) -> str:  # a claim entry's values are shown longer than a file's (core.yamlio.shown)
    return shown(value, 60)


def parse_claims(decls, variants=None, where: str = "claims", module: str = WORKFLOW) -> list[Claim]:
    """The workflow config's `claims` list as Claim objects; a bad entry is one ConfigError naming it."""
    from ..core.errors import ConfigError
    from ..grid.expand import SETS

    if not isinstance(decls, list):
        raise ConfigError(f"{where}: expected a list of claims (metric, left, right, relation), got {decls!r}")
    out, ids = [], set()
    for i, d in enumerate(decls):
        check_claim(d, f"{where}[{i}]")  # each value's type first: one line, never a TypeError
        at = f"{where}[{i}]"
        if not isinstance(d, dict):
            raise ConfigError(f"{at}: expected a mapping with metric, left, right and relation, got {d!r}")
        unknown = sorted(set(d) - _DECLARED_KEYS - (_PAPER_KEYS if not module else set()))
        missing = [k for k in ("metric", "left", "right", "relation") if k not in d
                   and not (k == "right" and d.get("relation") in SWEEP_RELATIONS)]
        if unknown or missing:
            what = f"unknown key {', '.join(unknown)}" if unknown else f"missing {', '.join(missing)}"
            raise ConfigError(f"{at}: {what}; a claim takes {', '.join(sorted(_DECLARED_KEYS))}")
        if d["metric"] not in METRICS:
            raise ConfigError(f"{at}.metric: unknown metric {d['metric']!r}; runs.csv's metrics: {', '.join(METRICS)} "
                              "(a plugin section's: register it with bayesncl.api.register_measure)")
        if d["relation"] not in (*RELATIONS, *SWEEP_RELATIONS):
            raise ConfigError(f"{at}.relation: {d['relation']!r} is not one of "
                              f"{', '.join((*RELATIONS, *SWEEP_RELATIONS))}")
        if d["relation"] in SWEEP_RELATIONS and "sweep" not in d:
            raise ConfigError(f"{at}.sweep: {d['relation']!r} is said over a sweep; name the swept setting, e.g. "
                              "sweep: lambda")
        for key in ("name", "point"):
            if key in d and "sweep" not in d:
                raise ConfigError(f"{at}.{key}: names the swept setting in the text; give sweep too, or remove {key}")
        if "point" in d and "@" not in d["point"]:
            raise ConfigError(f"{at}.point: {d['point']!r} has no @ for the value; e.g. point: \"$D = @$\"")
        if isinstance(d.get("paper"), dict) and ("sweep" not in d or d["relation"] in SWEEP_RELATIONS):
            raise ConfigError(f"{at}.paper: paper values by value are for a claim at each value of a sweep; give "
                              "one text")
        for side in ("left", "right"):
            if side in d and variants is not None and isinstance(d[side], str) and d[side] not in variants:
                raise ConfigError(f"{at}.{side}: no variant {d[side]!r}; the variants: {', '.join(variants)}")
        tol = d.get("tolerance")
        if d["relation"] in _TOLERANT and (not isinstance(tol, (int, float)) or isinstance(tol, bool) or tol <= 0):
            raise ConfigError(f"{at}.tolerance: {d['relation']!r} needs a positive tolerance (in the metric's unit, "
                              f"or a fraction of the right side with relative: true), got {tol!r}")
        for name in ([d["set"]] if isinstance(d.get("set"), str) else d.get("set", [])):
            if name not in SETS:
                raise ConfigError(f"{at}.set: unknown set {name!r}; the sets: {', '.join(SETS)}")
        cid = str(d.get("id") or f"D{i + 1}")
        if cid in ids:
            raise ConfigError(f"{at}.id: {cid!r} is used twice; give each claim its own id")
        ids.add(cid)
        out.append(replace(_declared(cid, d, module), module=module))
    return out


def _declared(cid: str, d: dict, module: str = WORKFLOW) -> Claim:
    m = METRICS[d["metric"]]
    value = _reader(m, bool(d.get("absolute", False)))
    right = d.get("right")
    given = d.get("set")
    sets = ((given,) if isinstance(given, str) else tuple(given)) if given else ("figure4b",) if "sweep" in d else (
        "table1", "table2", "table4", "table5", "table6", "table7", "figure3")
    paper = "declared" if module else d.get("paper", "")
    if d["relation"] in SWEEP_RELATIONS:
        return _declared_sweep(cid, d, sets, value, paper)
    kind, better, rel = RELATIONS[d["relation"]]
    if kind is None:
        kind = _TOLERANT[d["relation"]](float(d["tolerance"]), relative=bool(d.get("relative", False)),
                                        source=DECLARED_MARGIN if module else PAPER)
        unit = f"{d['tolerance'] * 100:g}%" if d.get("relative") else f"{d['tolerance']:g}"
        rel = f"within {unit} of" if d["relation"] == "within" else f"at most {unit} more than"
    elif kind.name == "not worse":  # its own tolerance where given, else the metric's margin
        kind = (Kind(kind.name, float(d["tolerance"]), bool(d.get("relative", False)), DECLARED_MARGIN)
                if "tolerance" in d else Kind(kind.name, MARGINS.get(m.key, NOT_WORSE.margin), source=SPEC))
    if "sweep" in d:
        return _declared_sweep(cid, d, sets, value, paper, kind, better, rel)
    text = d.get("text") or f"{m.header}: @A {rel} @B"

    def build(runs: Runs) -> list[Comparison]:
        a = _side(runs, sets, m, d["left"], value)
        b = _constant(d, right) if _is_number(right) else _side(runs, sets, m, right, value)
        return [_judged(cid, text, a, b, kind, better, paper)]

    reason = NO_INIT[_TRAINING_METRICS[m.key]] if m.key in _TRAINING_METRICS else ""
    return Claim(cid, sets, text, build, _applies(d, sets), reason)


def _applies(d: dict, sets: tuple[str, ...]) -> Callable[[Runs], bool]:
    """Whether a declared claim is judged on ``runs``: a side of it (a label's or a role's, not a constant) has runs
    in its sets."""
    picks = [_pick(d[k]) for k in ("left", "right") if k in d and not _is_number(d[k])]

    def applies(runs: Runs) -> bool:
        return any(ROLES[role](r) and where(r) for role, where in picks for s in sets for g in runs.groups(s)
                   for r in g.rows)
    return applies


def _param(d: dict) -> str:
    return d["sweep"].split(".")[-1]  # `method.lp_weight` or `lp_weight`


def _sweep_words(d: dict) -> tuple[str, Callable[[float], str]]:
    """How a sweep claim's text names its setting and a value of it (`name`, `point`)."""
    name = d.get("name", _param(d))
    return name, lambda x: d["point"].replace("@", f"{x:g}") if "point" in d else f"{name} = {x:g}"


def _declared_sweep(cid: str, d: dict, sets: tuple[str, ...], value: Callable[[dict], float], paper: "str | dict",
                    kind: Kind = BETTER, better: str = "up", rel: str = "") -> Claim:
    """A declared claim over the sweep of d["sweep"], judged as claims 10-11 are: SWEEP_RELATIONS, or left against
    right at each value by ``kind`` (``better``, ``rel``: its direction and words, as RELATIONS give them)."""
    from ..grid.expand import INIT_SETS

    m, param = METRICS[d["metric"]], _param(d)
    col = sweep_column(param)
    name, at = _sweep_words(d)
    sides = [d[k] for k in ("left", "right") if k in d and not _is_number(d[k])]

    def values(runs: Runs, *specs) -> list[float]:  # the sweep's values where a side ran
        picks = [_pick(spec) for spec in specs]
        pts = [_sweep_points(runs, sets, param, lambda r, rw=rw: ROLES[rw[0]](r) and rw[1](r), value)[1]
               for rw in picks]
        return sorted({x for p in pts for x in p})

    def side(runs: Runs, spec, x: float) -> "Side | float":
        if _is_number(spec):
            return _constant(d, spec)
        role, pick = _pick(spec)
        s = next((s for s in sets if any(pick(r) and ROLES[role](r) for g in runs.groups(s) for r in g.rows)), sets[0])
        point = _is_point(runs, s, param)
        return _side(runs, sets, m, spec, value, lambda r: point(r) and _number(r.get(col)) == x)

    def build(runs: Runs) -> list[Comparison]:
        if d["relation"] == "inverted U":
            return _inverted_u(cid, d, sets, value, paper)(runs)
        if d["relation"] == "rises with":  # its largest value against its smallest (as 10a)
            xs = values(runs, d["left"])
            ends = (xs[-1], xs[0]) if len(xs) >= 2 else (math.nan, math.nan)
            a, b = (side(runs, d["left"], x) for x in ends)
            text = (f"{m.header}: @A at {at(xs[-1])} $>$ at {at(xs[0])}" if len(xs) >= 2
                    else f"{m.header}: @A rises with {name}")
            return [_judged(cid, text, a, b, BETTER, "up", paper)]
        out = []
        for x in values(runs, *sides) or [math.nan]:  # one row per value, each its own id (as 10b)
            a, b = side(runs, d["left"], x), side(runs, d["right"], x)
            where = f"at {at(x)}" if math.isfinite(x) else f"at each {name}"
            cell = paper.get(x, "") if isinstance(paper, dict) else paper
            out.append(_judged(f"{cid}-{x:g}" if math.isfinite(x) else cid, f"{m.header} {where}: @A {rel} @B", a, b,
                               kind, better, cell))
        return out

    reason = NO_INIT["sweep"] if not set(sets) & set(INIT_SETS) else NO_INIT.get(_TRAINING_METRICS.get(m.key), "")
    return Claim(cid, sets, f"{m.header} of {side_name(d['left'])}: {d['relation']} {param}", build,
                 _applies(d, sets), reason)


def _number(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


# ----------------------------------------------------------------------------- the paper's claims
# Each comparison is a `claims:` entry, parsed by parse_claims as a workflow config's are; its sides are roles (ROLES:
# found by their settings, e.g. BayesNCL = the gated method with an STE gate, detach and a 2-layer head), its
# tolerances the paper's.
BAYES, NCL = {"role": "bayes"}, {"role": "reference"}


def _entries(*entries: dict) -> Callable[[Runs], list[Comparison]]:
    """A paper claim's comparisons: its entries parsed (the paper's: module ""), built in order."""
    parts = parse_claims(list(entries), where="the paper's claims", module="")
    return lambda runs: [c for part in parts for c in part.build(runs)]


def _versus(cid: str, metric: str, right: str, relation: str, sets, **more) -> dict:
    """An entry: BayesNCL (left) against the side of role ``right``."""
    return {"id": cid, "metric": metric, "left": BAYES, "right": {"role": right}, "relation": relation,
            "set": sets, **more}


CLAIMS: Registry[Claim] = Registry("claim", "claims")
for _claim in [
    Claim(1, ("table1",), "BayesNCL SC above NCL and Top-k NCL; SE lower", _entries(
        _versus("1a", "sc", "reference", ">", "table1", paper="36.14 vs 14.93"),
        _versus("1b", "sc", "topk", ">", "table1"),
        _versus("1c", "se_sum", "reference", "<", "table1"))),
    Claim(2, ("table2",), "BayesNCL linear probe at least NCL's and SimCLR's", _entries(
        _versus("2a", "probe_top1", "reference", ">=", "table2", paper="70.44 vs 69.63"),
        _versus("2b", "probe_top1", "simclr", ">=", "table2", paper="70.44 vs 68.31"))),
    Claim(3, ("table2",), "BayesNCL retrieval with the top-K dims at least NCL's", _entries(
        _versus("3", "ret_p10", "reference", ">=", "table2", text="P@10 (top-$K$ dims): @A $\\geq$ @B"))),
    Claim(4, ("table1", "table4"), "STE gate SC at least Gumbel's", _entries(
        _versus("4", "sc", "gumbel", ">=", ["table1", "table4"]))),
    Claim(5, ("table4",), "Hard gate SC above soft gate, by a wide margin", _entries(
        _versus("5", "sc", "soft", ">", "table4", paper="22.0 vs 8.5 (CIFAR-100)"))),
    Claim(6, ("table4",), "Gradient isolation helps; the 2-layer head is best", _entries(
        _versus("6a", "sc", "nodetach", ">=", "table4"),
        _versus("6b", "sc", "head1", ">", "table4"),
        _versus("6c", "sc", "head3", ">", "table4"))),
    Claim(7, ("table3",), "NCL couples AF with GV and GV against SC; BayesNCL weakens both", at_init=NO_INIT["dyn"],
          build=_entries(  # the correlations at each run's last recorded epoch (Metric.value)
        {"id": "7a", "metric": "dyn_af_gv", "left": NCL, "right": 0, "relation": ">", "set": "table3",
         "text": "$\\rho$(AF, GV) of @A $>$ 0"},
        {"id": "7b", "metric": "dyn_gv_sc", "left": NCL, "right": 0, "relation": "<", "set": "table3",
         "text": "$\\rho$(GV, SC) of @A $<$ 0"},
        _versus("7c", "dyn_af_gv", "reference", "<", "table3", absolute=True,
                text="$|\\rho(\\mathrm{AF}, \\mathrm{GV})|$: @A $<$ @B"),
        _versus("7d", "dyn_gv_sc", "reference", "<", "table3", absolute=True,
                text="$|\\rho(\\mathrm{GV}, \\mathrm{SC})|$: @A $<$ @B"))),
    Claim(8, ("table6",), "Background probe within about 1 point of NCL", _entries(
        _versus("8", "bg_acc", "reference", "within", "table6", tolerance=1.0,
                text="BG acc.: @A within 1 point of @B", paper="93.38 vs 93.33"))),
    Claim(9, ("table5",), "BayesNCL SC above NCL on ResNet-50", _entries(
        _versus("9", "sc", "reference", ">", "table5", text="SC (@arch): @A $>$ @B"))),
    Claim(10, ("figure4a",), "SC rises with D; BayesNCL beats NCL at each D", _entries(
        {"id": "10a", "metric": "sc", "left": BAYES, "relation": "rises with", "sweep": "proj_dim", "set": "figure4a",
         "name": "$D$", "point": "$D = @$", "paper": "36.14 at $D = 2048$"},
        _versus("10b", "sc", "reference", ">", "figure4a", sweep="proj_dim", name="$D$", point="$D = @$",
                paper={2048: "$2\\times$ NCL at $D = 2048$"}))),
    Claim(11, ("figure4b",), "Inverted U over lambda and rho", at_init=NO_INIT["sweep"], build=_entries(
        {"id": "11a", "metric": "sc", "left": BAYES, "relation": "inverted U", "sweep": "lambda", "set": "figure4b",
         "name": "$\\lambda$", "paper": "worse for $\\lambda >$ 4e-5"},
        {"id": "11b", "metric": "sc", "left": BAYES, "relation": "inverted U", "sweep": "rho", "set": "figure4b",
         "name": "$\\rho$", "paper": "inverted U"})),
    Claim(12, ("table7",), "Cost: at most 1% more GFLOPs, at most 6% more training time than NCL",
          at_init=NO_INIT["cost"], build=_entries(
        _versus("12a", "gflops", "reference", "at most", "table7", tolerance=0.01, relative=True,
                paper="1.419 vs 1.416"),
        _versus("12b", "train_minutes", "reference", "at most", "table7", tolerance=0.06, relative=True,
                text="Train time: @A at most 6% more than @B", paper="75.12 vs 70.95 min"))),
]:
    CLAIMS.register(_claim)
