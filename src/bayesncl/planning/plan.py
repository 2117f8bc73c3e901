"""How many seeds each claim needs (`bayesncl plan`; docs/METHOD.md section 9, "Planning").

A pilot (a finished grid's runs.csv) gives each comparison of the claims table its per-seed spread and its
one-sided t-tests. Judged as look 1 (the family's graph at LOOK_ALPHAS[0]), the comparisons it decides need
nothing more. For each other one the planner finds the smallest number of added seeds at which look 2 (the
inverse normal combination of the pilot's t-test with the added seeds' own, verdicts.look_two_rejects) holds with
the target power, given the pilot's look-1 p (the conditional power, from the noncentral t):

- the level: the comparison's share of the family's (verdicts.passed_on): once the comparisons that held at look 1
  have passed theirs on, and, for a secondary comparison, the primary ones planned too (Bonferroni's first step:
  the procedure can only give it more);
- the true difference planned for: the claim's declared smallest effect of interest (the workflow config's
  `plan: effects:`), else the pilot's mean difference, for every kind; its distance from each of the claim's
  bounds. None is planned where it lies beyond a bound: the pilot leans against the claim, or the claim cannot hold
  at its margin;
- the sd: the pilot's at its one-sided SD_CONFIDENCE upper confidence bound (chi-square, the pilot test's degrees
  of freedom; Welch: both sides' variances added, planned as if paired), so that the plan keeps its power promise
  over the pilot's own noise;
- the power: POWER for a secondary comparison; the primary ones that can be decided are planned together, each at
  1 - (1 - POWER) / k, so that all k hold together with POWER at least (Bonferroni's inequality, whatever their
  dependence);
- "within" needs both of its one-sided tests: its power bounded below by theirs summed less 1.

The overlay grows each set to its pilot seeds plus the most any of its comparisons needs (on every dataset: a set's
seed count is one number), on seeds no pilot run used, so that no run is pilot evidence for one set and added for
another, and records the pilot's seeds per set (`plan: pilot:`) for the grown grid's claims table to judge the two
looks. The GPU-hours are bayesncl.planning.estimate's for the runs the grown grid adds, as their jobs hold the GPU:
pretraining with its start-up, and each evaluation section's start-up and work.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

from ..core.errors import ConfigError, DataError

__all__ = ["MAX_SEEDS", "POWER", "SD_CONFIDENCE", "Need", "Plan", "family_line", "look_two_power", "make_plan",
           "overlay", "power", "render", "seeds_needed", "seeds_to_add", "upper_sd"]


POWER = 0.8
SD_CONFIDENCE = 0.8  # the sd planned for: its one-sided upper bound at the confidence the power is asked with
MAX_SEEDS = 100  # added seeds beyond which a comparison is reported as undecidable here, not planned


def power(n: int, effect: float, sd: float, alpha: float, two_sided_bound: bool = False) -> float:
    """The power of a one-sided one-sample t-test at level ``alpha`` on ``n`` seeds whose true mean lies
    ``effect`` beyond the bound (sd ``sd``): the noncentral t's tail beyond the critical value. With
    ``two_sided_bound`` ("within": both bounds must be cleared) the lower bound 2 x power - 1."""
    from scipy import stats

    if n < 2 or effect <= 0:
        return 0.0
    if sd == 0:  # every difference equal: the degenerate interval decides
        return 1.0
    df = n - 1
    one = float(stats.nct.sf(stats.t.ppf(1 - alpha, df), df, effect * math.sqrt(n) / sd))
    return max(0.0, 2 * one - 1) if two_sided_bound else one


def _smallest(ok, most: int) -> int | None:
    """The smallest n in [2, most] where ``ok(n)`` (which only turns true as n grows); None where ``ok(most)`` fails."""
    if not ok(most):
        return None
    lo, hi = 2, most
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def seeds_needed(effect: float, sd: float, alpha: float, two_sided_bound: bool = False, target: float = POWER,
                 most: int = MAX_SEEDS) -> int | None:
    """The smallest n (at least 2) at which a single t-test on n seeds (``power``) reaches ``target``; None when even
    ``most`` seeds fall short."""
    if not (effect > 0 and math.isfinite(sd)):
        return None
    return _smallest(lambda n: power(n, effect, sd, alpha, two_sided_bound) >= target, most)


def upper_sd(sd: float, dof: float, confidence: float = SD_CONFIDENCE) -> float:
    """The one-sided upper ``confidence`` bound of a standard deviation estimated with ``dof`` degrees of freedom:
    sd x sqrt(dof / chi2_dof quantile(1 - confidence)); NaN without degrees of freedom."""
    from scipy import stats

    if not (dof > 0 and math.isfinite(sd)):
        return math.nan
    return sd * math.sqrt(dof / stats.chi2.ppf(1 - confidence, dof))


def look_two_power(n2: int, effects, sd: float, p1, level: float, both: bool = False) -> float:
    """The power of look 2 given the pilot, with ``n2`` added seeds: each of the claim's one-sided tests (``effects``:
    the true distance of the mean difference beyond its bound; ``p1``: the pilot's one-sided p) holds at the doubled
    ``level`` where the added seeds' t-test gives p2 < A = 1 - Phi((c2 - w1 z1) / w2) (verdicts.look_two_bound), with
    the noncentral t's probability P(T(n2 - 1, effect sqrt(n2) / sd) > t quantile 1 - A); a test look 1 decided
    counts 1. ``both`` ("within"): its two tests' powers summed less 1, at least 0."""
    from scipy import special  # its noncentral t directly: stats.nct's checks cost more than the planner's loop

    from ..report.verdicts import EARLY, STAGE_WEIGHTS, look_two_bound

    if n2 < 2 or not level > 0:
        return 0.0
    c2 = look_two_bound(level / 2)
    out = []
    for effect, p in list(zip(effects, p1))[:2 if both else 1]:
        if p < EARLY * level / 2:
            out.append(1.0)
        elif not effect > 0:
            out.append(0.0)
        elif sd == 0:  # every added seed's difference equal, beyond the bound: its p2 is 0
            out.append(1.0)
        else:
            z1 = -special.ndtri(min(max(p, 1e-300), 1 - 1e-16))
            a = float(special.ndtr(-(c2 - STAGE_WEIGHTS[0] * z1) / STAGE_WEIGHTS[1]))
            df = n2 - 1  # P(T > t quantile 1 - a), T noncentral t: 1 - nctdtr at -stdtrit(a), the quantile by symmetry
            out.append(1.0 - float(special.nctdtr(df, effect * math.sqrt(n2) / sd, -special.stdtrit(df, a)))
                       if a > 0 else 0.0)
    return max(0.0, sum(out) - 1.0) if both else out[0]


def seeds_to_add(effects, sd: float, p1, level: float, both: bool = False, target: float = POWER,
                 most: int = MAX_SEEDS) -> int | None:
    """The smallest number of added seeds (at least 2) at which ``look_two_power`` reaches ``target``; None when even
    ``most`` fall short."""
    if not math.isfinite(sd):
        return None
    return _smallest(lambda n: look_two_power(n, effects, sd, p1, level, both) >= target, most)


@dataclass
class Need:
    """One comparison's plan: its pilot (n, sd, mean difference), what look 2 is planned for (the true difference,
    the sd's upper bound, the power) at which one-sided level, and the added seeds (None with ``why``)."""
    dataset: str
    claim: str
    text: str
    family: str               # "primary" or "secondary"
    n: int = 0                # seeds the pilot's test used
    sd: float = math.nan      # of the paired differences (Welch: as if paired)
    diff: float = math.nan    # the pilot's mean difference, in the claim's direction
    sd_plan: float = math.nan  # the sd planned for: its upper confidence bound
    planned: float = math.nan  # the true difference planned for (the pilot's, or the declared smallest effect)
    alpha: float = math.nan   # the comparison's one-sided level: its share of the family's
    power: float = math.nan   # the power it is planned for
    add: int | None = None    # seeds to add
    why: str = ""             # why none are planned
    sets: tuple[str, ...] = ()
    gpu_h: float = 0.0        # what adding them costs (this comparison alone)


@dataclass
class Plan:
    needs: list[Need]
    pilot: dict[str, list[int]]        # each set's seeds in the pilot
    grow: dict[str, int] = field(default_factory=dict)  # set -> seeds to add
    gpu_h: float = 0.0                 # the overlay's added runs, as their jobs hold the GPU
    runs_added: int = 0
    gpu: str = ""
    unpriced: str = ""                 # why there are no GPU-hours


def _sd(r) -> float:
    """The sd of the paired differences (one-sample: of the values); Welch: both sides' variances added."""
    import numpy as np

    if r.test in ("paired", "one-sample"):
        return r.se * math.sqrt(r.n[0]) if r.n and r.n[0] >= 2 else math.nan
    a, b = np.asarray(r.left, float), np.asarray(r.right, float)
    if a.size < 2 or b.size < 2:
        return math.nan
    return float(math.sqrt(a.var(ddof=1) + b.var(ddof=1)))


def _distances(kind, planned: float, tol: float) -> tuple[float, float]:
    """How far the planned true difference lies beyond each of the claim's bounds (verdicts.one_sided's "for" tests):
    > and >=: above -tol; "at most": below tol; "within": above -tol and below tol."""
    if kind.name == "within":
        return planned + tol, tol - planned
    d = tol - planned if kind.name == "at most" else planned + tol
    return d, d


def _effects(wf: dict) -> dict[str, float]:
    """The workflow config's declared smallest effects of interest (`plan: effects: {comparison id: difference}`)."""
    effects = (wf.get("plan") or {}).get("effects") or {}
    if not isinstance(effects, dict):
        raise ConfigError(f"plan.effects: expected {{comparison id: difference}}, e.g. {{1a: 3.0}}, got {effects!r}")
    for cid, v in effects.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ConfigError(f"plan.effects.{cid}: {v!r} is not a finite number; give the smallest true difference "
                              "worth finding, in the claim's direction and the metric's unit, e.g. 3.0")
    return {str(k): float(v) for k, v in effects.items()}


def _unreadable(every, df, pilot: str) -> None:
    """A comparison not run although both its sides have runs, one side's metric column holding no number in any run
    of the pilot: the column cannot be read (text, or empty), and planning on it would say "not run"."""
    import pandas as pd

    from ..report.cells import METRICS
    from ..report.summary import prepare
    from ..report.verdicts import NOT_RUN

    records = prepare(df).to_dict("records")
    for _, c in every:
        if c.verdict != NOT_RUN or not (c.left.runs and c.right.runs):
            continue
        for side in (c.left, c.right):
            col = side.metric
            if side.nan == side.runs and col in df.columns and pd.to_numeric(  # read as the claim reads it
                    pd.Series([METRICS[col].value(r) for r in records], dtype=object), errors="coerce").isna().all():
                raise DataError(f"{pilot}: column {col!r} holds no number in any of its {len(df)} runs (text or "
                                f"empty), though claim {c.claim} reads it from {side.set_name}'s runs; give the "
                                "runs.csv that `bayesncl summarize` wrote from the pilot's finished runs")


def make_plan(df, wf: dict, rates: dict | None = None, sizes: dict[str, int] | None = None,
              pilot: str = "the pilot") -> Plan:
    """The plan for the grid ``wf`` from its pilot runs.csv ``df`` (rates: bayesncl.planning.estimate.measured_rates;
    None: no GPU-hours), judging the registered claims and the grid's own (its `claims:`)."""
    import numpy as np

    from ..grid.expand import pilot_seeds, set_seeds
    from ..report.claims import declared_claims
    from ..report.judge import judge
    from ..report.verdicts import ALPHA, HOLDS, LOOK_ALPHAS, NOT_RUN, decision, family_verdicts, passed_on, stage_p

    if pilot_seeds(wf):
        raise ConfigError("this grid is already a second look (its `plan:` names the pilot's seeds): the rule spends "
                          "its error over two looks, and a third is not planned; read its claims table")
    effects = _effects(wf)
    judged = judge(df, declared_claims(wf))
    every = [(d, c) for d, comps in judged.blocks for c in comps]
    _unreadable(every, df, pilot)
    unknown = sorted(set(effects) - {c.claim for _, c in every})
    if unknown:
        raise ConfigError(f"plan.effects.{unknown[0]}: no comparison {unknown[0]!r} in the claims table; its ids: "
                          f"{', '.join(dict.fromkeys(c.claim for _, c in every))}")
    primary = np.array([c.primary for _, c in every], dtype=bool)
    node = np.array([c.result.has_interval for _, c in every], dtype=bool)
    first = family_verdicts([(c.result, c.kind) for _, c in every], primary, LOOK_ALPHAS[0])
    held = np.array([decision(v) == HOLDS and "(family" in v for v in first.verdicts], dtype=bool)
    needs, open_ = [], {}
    for i, (d, c) in enumerate(every):
        r = c.result
        need = Need(d, c.claim, c.text.replace("@A", c.left.label).replace("@B", c.right.label),
                    "primary" if c.primary else "secondary", n=r.n[0] if r.n else 0, diff=r.diff,
                    sets=tuple(dict.fromkeys(s for s in (c.left.set_name, c.right.set_name) if s)))
        needs.append(need)
        if r.verdict == NOT_RUN:
            need.why = "not run: run its sets first"
            continue
        if decision(first.verdicts[i]) and "(family" in first.verdicts[i]:
            need.why = f"decided at look 1: {first.verdicts[i]}"
            continue
        need.sd = _sd(r)
        if not math.isfinite(need.sd):
            need.why = "no pilot sd (fewer than 2 seeds on a side): run at least 2 seeds first"
            continue
        need.planned = effects.get(c.claim, r.diff)
        distances = _distances(c.kind, need.planned, r.tol)
        if min(distances) <= 0:
            if c.kind.name == "better" and c.claim not in effects:
                need.why = "the pilot's difference is not in the claim's direction: no number of seeds is planned"
            else:
                what = "the declared effect" if c.claim in effects else "the pilot's difference"
                scale, unit = (100 / r.ref, "%") if c.kind.relative and r.ref else (1.0, "")
                bound = -r.tol if c.kind.name == "not worse" or distances[0] <= 0 and c.kind.name == "within" \
                    else r.tol
                need.why = (f"cannot hold at its margin: {what} {need.planned * scale:+.3g}{unit} lies beyond its "
                            f"bound {bound * scale:+.3g}{unit}" + (" (every seed alike: sd 0)" if need.sd == 0 else ""))
            continue
        need.sd_plan = need.sd if need.sd == 0 else upper_sd(need.sd, r.dof)
        open_[i] = (distances, stage_p(r, c.kind)[0], c.kind.name == "within")

    def plan_one(i, w, target):
        need = needs[i]
        need.alpha, need.power = w * ALPHA / 2, target
        distances, p1, both = open_[i]
        need.add = seeds_to_add(distances, need.sd_plan, p1, w * ALPHA, both, target) if w > 0 else None

    # the primary comparisons at their level once look 1's holds passed theirs on; those that can be decided,
    # together, for their joint power
    w = passed_on(primary, node, held)
    prim = [i for i in open_ if primary[i]]
    decidable = [i for i in prim if seeds_to_add(open_[i][0], needs[i].sd_plan, open_[i][1], w[i] * ALPHA,
                                                 open_[i][2], POWER) is not None]
    joint = 1 - (1 - POWER) / max(1, len(decidable))
    for i in prim:
        plan_one(i, w[i], joint if i in decidable else POWER)
        if needs[i].add is None:
            needs[i].why = (f"more than {MAX_SEEDS} seeds" if i not in decidable else
                            f"more than {MAX_SEEDS} seeds for the primary claims' joint power ({joint:.0%} each)")
    # the secondary ones at what the primary ones pass on when those planned hold too
    w = passed_on(primary, node, held | np.array([needs[i].add is not None for i in range(len(needs))]) & primary)
    for i in (i for i in open_ if not primary[i]):
        plan_one(i, w[i], POWER)
        if not w[i] > 0:
            needs[i].why = "no level: no primary claim holds or is planned to pass level on"
        elif needs[i].add is None:
            needs[i].why = f"more than {MAX_SEEDS} seeds"
    plan = Plan(needs, {s: set_seeds(wf, s) for s in wf["sets"]})
    for need in needs:
        for s in need.sets if need.add else ():
            plan.grow[s] = max(plan.grow.get(s, 0), need.add)
    if rates is not None:
        try:
            _price(plan, wf, rates, sizes)
        except ConfigError as e:  # the plan stands without its price (an image folder's size, say)
            plan.unpriced = f"GPU-hours not priced: {e}"
    return plan


def overlay(plan: Plan, wf: dict) -> dict:
    """The config overlay that grows the grid (`--configfile` after the grid's): each grown set's pilot seeds
    followed by seeds no pilot run used (the global list extended for the sets that take it whole, a set's own list
    otherwise, its prefix's n_seeds unset), and the pilot's seeds per set for the two looks."""
    from ..grid.expand import seed_list

    glob = seed_list(wf["seeds"], "seeds")
    used = set(glob).union(*plan.pilot.values())
    fresh = [max(used) + 1 + k for k in range(max([0, *plan.grow.values()]))]

    def whole(s):  # the set takes the global list from its start, as far as the pilot ran
        spec = wf["sets"][s]
        return "seeds" not in spec and plan.pilot[s] == glob
    longest = max([0, *(plan.grow.get(s, 0) for s in plan.pilot if whole(s))])
    sets = {}
    for s, seeds in plan.pilot.items():
        add = plan.grow.get(s, 0)
        if whole(s):
            if longest:  # pinned: the global list grows by the most any such set adds
                sets[s] = {"n_seeds": len(seeds) + add}
        elif add:
            sets[s] = {"seeds": list(seeds) + fresh[:add], **({"n_seeds": None} if "n_seeds" in wf["sets"][s] else {})}
    return {"seeds": glob + fresh[:longest], "sets": sets,
            "plan": {"pilot": {s: list(v) for s, v in plan.pilot.items()}}}


def grown(wf: dict, layer: dict) -> dict:
    """The grid as Snakemake reads it with the overlay after it (mappings merged, the rest replaced)."""
    from ..grid.expand import _deep_update

    return _deep_update(copy.deepcopy(wf), copy.deepcopy(layer))


def _price(plan: Plan, wf: dict, rates: dict, sizes: dict[str, int] | None) -> None:
    """GPU-hours of the runs the overlay adds, each as its jobs hold the GPU (pretraining and its start-up, the
    evaluation's sections), and of those each comparison's added seeds bring on its own dataset: the added runs
    (or untrained twins) of its sets on their first added seeds, what growing its sets alone would add."""
    from .estimate import PRETRAIN_START_S, run_cost
    from ..grid.expand import expand_grid, set_seeds

    base = set(expand_grid(wf))
    big = grown(wf, overlay(plan, wf))
    new = {rid: r for rid, r in expand_grid(big).items() if rid not in base}
    flops: dict[str, float] = {}
    costs = {}
    for rid, r in new.items():
        c = run_cost(r, rates, sizes, flops)
        costs[rid] = c["pretrain_h"] + PRETRAIN_START_S / 3600 + c["eval_held_h"]
    plan.gpu_h, plan.runs_added, plan.gpu = sum(costs.values()), len(new), rates["gpu"]
    added = {s: set_seeds(big, s)[len(seeds):] for s, seeds in plan.pilot.items()}
    for need in plan.needs:
        if need.add:
            need.gpu_h = sum(costs[rid] for rid, r in new.items() if r.config["data"]["dataset"] == need.dataset
                             and any(s in need.sets and r.config["seed"] in added[s][:need.add]
                                     for s in [*r.sets, *r.init_of]))


def _hours(h: float) -> str:
    return f"{h:.1f}" if h >= 0.95 else f"{h:.2g}"  # the demo's runs cost minutes: keep two digits


def _name(n: Need, titles: dict[str, str]) -> str:
    return f"{n.claim} ({titles.get(n.dataset, n.dataset)})" if n.dataset else n.claim


def render(plan: Plan, titles: dict[str, str] | None = None) -> str:
    """The plan as the terminal shows it: one line per comparison, then the overlay's cost."""
    from tabulate import tabulate

    from ..report.verdicts import ALPHA, LOOK_ALPHAS

    titles = titles or {}
    rows = []
    for n in plan.needs:
        def num(x: float) -> str:
            return f"{x:.3g}" if math.isfinite(x) else "-"
        rows.append([titles.get(n.dataset, n.dataset) or "-", n.claim, n.family, n.n or "-", num(n.sd),
                     num(n.sd_plan), num(n.diff), num(n.planned), f"{n.alpha:.2g}" if math.isfinite(n.alpha) else "-",
                     f"{n.power:.0%}" if n.add else "-", n.add or "-", n.n + n.add if n.add else "-",
                     _hours(n.gpu_h) if n.add and plan.gpu else "-", n.why])
    table = tabulate(rows, headers=["dataset", "claim", "family", "n", "sd", "sd planned", "Δ", "planned Δ", "level",
                                    "power", "add", "total", "GPU-h", "why none"], tablefmt="simple",
                     disable_numparse=True)
    grow = ", ".join(f"{s} +{k}" for s, k in plan.grow.items()) or "nothing"
    head = (f"Seeds each claim needs (docs/METHOD.md section 9, \"Planning\"): look 1 judges the pilot's seeds at "
            f"{LOOK_ALPHAS[0]:g}, look 2 all the seeds at the rest of {ALPHA:g}, the pilot's t-test combined with the "
            f"added seeds' own (inverse normal, equal weights); {POWER:.0%} power for look 2 given the pilot (the "
            "primary claims together), planned for the pilot's Δ (or a declared effect) at the sd's "
            f"{SD_CONFIDENCE:.0%} upper confidence bound; level: the comparison's one-sided share of the family's.")
    cost = (f"\nThe overlay adds {plan.runs_added} runs: {_hours(plan.gpu_h)} GPU-hours on one {plan.gpu} "
            "(bayesncl estimate's rates, pretraining and evaluation with their start-up; per row: that comparison's "
            "sets grown alone)." if plan.gpu else f"\n{plan.unpriced}." if plan.unpriced else "")
    return f"{head}\n{table}\n\nGrow: {grow}.{cost}\n"


def family_line(plan: Plan, titles: dict[str, str] | None = None) -> str:
    """What the plan does for the family: the primary claims planned together (or held, or stuck), and the secondary
    claims planned at the level the primary claims pass on."""
    titles = titles or {}
    prim = [n for n in plan.needs if n.family == "primary" and not n.why.startswith("not run")]
    planned = [n for n in prim if n.add]
    stuck = [n for n in prim if not n.add and not n.why.startswith("decided at look 1: holds")]
    secondary = [n for n in plan.needs if n.family == "secondary" and n.add]
    if not prim:
        out = "No primary claim ran: the comparisons are one family."
    else:
        parts = []
        if planned:
            parts.append(f"planned for a joint power of {POWER:.0%} at least, each at {planned[0].power:.0%}: "
                         + ", ".join(_name(n, titles) for n in planned))
        held = [n for n in prim if n.why.startswith("decided at look 1: holds")]
        if held:
            parts.append("held at look 1: " + ", ".join(_name(n, titles) for n in held))
        if stuck:
            parts.append("cannot be decided: " + "; ".join(f"{_name(n, titles)} ({n.why})" for n in stuck))
        out = "The primary claims: " + "; ".join(parts) + "."
    if secondary:
        lead = (f"With {', '.join(_name(n, titles) for n in stuck)} stuck, the secondary claims are still tested, at "
                "the level the others pass on" if stuck and (planned or len(stuck) < len(prim))
                else "The secondary claims are tested at the level the primary claims pass on")
        out += f" {lead}; planned at it: {', '.join(_name(n, titles) for n in secondary)}."
    else:
        out += " No secondary claim is planned."
    return out
