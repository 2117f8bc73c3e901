"""How many seeds each claim needs (`bayesncl plan`; docs/METHOD.md section 9, "Planning").

A pilot (a finished grid's runs.csv) gives each comparison of the claims table its per-seed spread: the sd of
the paired differences (Welch: both sides' variances added, planned as if paired). Judged as the first look at
LOOK_ALPHAS[0], the comparisons it decides need nothing more. For each other one the planner finds the smallest
number of added seeds at which the second look (the added seeds alone, a one-sided t-test at the comparison's
level) has POWER, from the noncentral t:

- the level is the second look's familywise level split over the comparison's family (Bonferroni's bound on
  Holm's first step, so Holm can only do better): LOOK_ALPHAS[1] / m, m the family's open comparisons, halved
  (the table's p-values are doubled: p < alpha is the 95% interval's side clearing the bound);
- the true difference it plans for: the pilot's mean difference for "better" claims (none when it leans
  against the claim: no number of seeds is planned), and 0 for "not worse", "within" and "at most" (the sides
  equal, judged against the margin), as section 9 says;
- "within" needs both one-sided tests: its power is bounded below by 2 x (one side's power) - 1.

The overlay it writes grows each set to its pilot seeds plus the most any of its comparisons needs, on every
dataset (a set's seed count is one number), and records the pilot's seeds per set (`plan: pilot:`), so that the
grown grid's claims table judges the two looks (report/claims.py). The GPU-hours are bayesncl.estimate's for
the runs the grown grid adds.
"""

from __future__ import annotations

import argparse
import copy
import math
from dataclasses import dataclass, field

from .errors import ConfigError
from .wfconfig import grid_argument

__all__ = ["MAX_SEEDS", "POWER", "Need", "Plan", "add_command", "make_plan", "overlay", "power", "render",
           "seeds_needed"]

POWER = 0.8
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


def seeds_needed(effect: float, sd: float, alpha: float, two_sided_bound: bool = False, target: float = POWER,
                 most: int = MAX_SEEDS) -> int | None:
    """The smallest n (at least 2) with power(n) >= ``target``; None when even ``most`` seeds fall short."""
    if not (effect > 0 and math.isfinite(sd)):
        return None
    lo, hi = 2, most
    if power(hi, effect, sd, alpha, two_sided_bound) < target:
        return None
    while lo < hi:  # power rises with n: bisect
        mid = (lo + hi) // 2
        if power(mid, effect, sd, alpha, two_sided_bound) >= target:
            hi = mid
        else:
            lo = mid + 1
    return lo


@dataclass
class Need:
    """One comparison's plan: its pilot (n, sd, mean difference), what the second look assumes (effect), at
    which one-sided level, and the added seeds (None with ``why``)."""
    dataset: str
    claim: str
    text: str
    family: str             # "primary" or "secondary"
    n: int = 0              # seeds the pilot's test used
    sd: float = math.nan    # of the paired differences (Welch: as if paired)
    diff: float = math.nan  # the pilot's mean difference, in the claim's direction
    effect: float = math.nan  # the true distance from the bound planned for
    alpha: float = math.nan  # the second look's one-sided level for this comparison
    add: int | None = None  # seeds to add
    why: str = ""           # why none are planned
    sets: tuple[str, ...] = ()
    gpu_h: float = 0.0      # what adding them costs (this comparison alone)


@dataclass
class Plan:
    needs: list[Need]
    pilot: dict[str, list[int]]        # each set's seeds in the pilot
    grow: dict[str, int] = field(default_factory=dict)  # set -> seeds to add
    gpu_h: float = 0.0                 # the overlay's added runs, pretraining + evaluation
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


def _effect(c) -> tuple[float, bool]:
    """(the true distance from the bound the second look is planned for, whether both bounds must be cleared)."""
    kind, r = c.kind, c.result
    if kind.name == "better":
        return r.diff, False  # the pilot's own difference
    return r.tol, kind.name == "within"  # the sides equal, against the margin


def make_plan(df, wf: dict, rates: dict | None = None, sizes: dict[str, int] | None = None) -> Plan:
    """The plan for the grid ``wf`` from its pilot runs.csv ``df`` (rates: bayesncl.estimate.measured_rates;
    None: no GPU-hours)."""
    from .grid import pilot_seeds, set_seeds
    from .report.claims import LOOK_ALPHAS
    from .report.judge import judge
    from .report.verdicts import FAMILY_FAILS, FAMILY_HOLDS, NOT_RUN, family_verdicts

    if pilot_seeds(wf):
        raise ConfigError("this grid is already a second look (its `plan:` names the pilot's seeds): the rule spends "
                          "its error over two looks, and a third is not planned; read its claims table")
    judged = judge(df)
    every = [(d, c) for d, comps in judged.blocks for c in comps]
    first = family_verdicts([(c.result, c.kind) for _, c in every], [c.primary for _, c in every], LOOK_ALPHAS[0])
    open_ = {i for i, v in enumerate(first.verdicts) if v not in (FAMILY_HOLDS, FAMILY_FAILS)
             and every[i][1].verdict != NOT_RUN}
    m = {fam: sum(1 for i in open_ if every[i][1].primary == (fam == "primary")) for fam in ("primary", "secondary")}
    needs = []
    for i, (d, c) in enumerate(every):
        fam = "primary" if c.primary else "secondary"
        r = c.result
        need = Need(d, c.claim, c.text.replace("@A", c.left.label).replace("@B", c.right.label), fam,
                    n=r.n[0] if r.n else 0, diff=r.diff, sets=tuple(dict.fromkeys(
                        s for s in (c.left.set_name, c.right.set_name) if s)))
        needs.append(need)
        if r.verdict == NOT_RUN:
            need.why = "not run: run its sets first"
            continue
        if i not in open_:
            need.why = f"decided at look 1: {first.verdicts[i]}"
            continue
        need.sd = _sd(r)
        if not math.isfinite(need.sd):
            need.why = "no pilot sd (fewer than 2 seeds on a side): run at least 2 seeds first"
            continue
        need.effect, both = _effect(c)
        need.alpha = LOOK_ALPHAS[1] / m[fam] / 2
        if not need.effect > 0:
            need.why = "the pilot's difference is not in the claim's direction: no number of seeds is planned"
            continue
        need.add = seeds_needed(need.effect, need.sd, need.alpha, both)
        if need.add is None:
            need.why = f"more than {MAX_SEEDS} seeds"
    pilot = {s: set_seeds(wf, s) for s in wf["sets"]}
    grow: dict[str, int] = {}
    for need in needs:
        for s in need.sets if need.add else ():
            grow[s] = max(grow.get(s, 0), need.add)
    plan = Plan(needs, pilot, grow)
    if rates is not None:
        try:
            _price(plan, wf, rates, sizes)
        except ConfigError as e:  # the plan stands without its price (an image folder's size, say)
            plan.unpriced = f"GPU-hours not priced: {e}"
    return plan


def overlay(plan: Plan, wf: dict) -> dict:
    """The config overlay that grows the grid (`--configfile` after the grid's): the global seed list extended,
    each set's seeds (its own key: seeds or n_seeds), and the pilot's seeds per set for the two looks."""
    from .grid import seed_list

    glob = seed_list(wf["seeds"], "seeds")
    want = {s: len(seeds) + plan.grow.get(s, 0) for s, seeds in plan.pilot.items()}
    longest = max([len(glob), *(n for s, n in want.items() if "seeds" not in wf["sets"][s])])
    extended, nxt = list(glob), max(glob) + 1
    while len(extended) < longest:
        if nxt not in extended:
            extended.append(nxt)
        nxt += 1
    sets = {}
    for s, seeds in plan.pilot.items():
        if "seeds" in wf["sets"][s]:  # a set's own list: extended past its own seeds
            own, k = list(seeds), max(seeds) + 1
            while len(own) < want[s]:
                if k not in own:
                    own.append(k)
                k += 1
            sets[s] = {"seeds": own}
        else:
            sets[s] = {"n_seeds": want[s]}
    return {"seeds": extended, "sets": sets, "plan": {"pilot": {s: list(v) for s, v in plan.pilot.items()}}}


def grown(wf: dict, layer: dict) -> dict:
    """The grid as Snakemake reads it with the overlay after it (mappings merged, the rest replaced)."""
    from .grid import _deep_update

    return _deep_update(copy.deepcopy(wf), copy.deepcopy(layer))


def _price(plan: Plan, wf: dict, rates: dict, sizes: dict[str, int] | None) -> None:
    """GPU-hours of the runs each comparison's added seeds bring (its sets grown alone), and of the overlay."""
    from .estimate import run_cost
    from .grid import expand_grid

    base = set(expand_grid(wf))
    flops: dict[str, float] = {}
    costs: dict[str, float] = {}

    def added(layer: dict):
        runs = expand_grid(grown(wf, layer))
        new = {rid: r for rid, r in runs.items() if rid not in base}
        for rid, r in new.items():
            if rid not in costs:
                c = run_cost(r, rates, sizes, flops)
                costs[rid] = c["pretrain_h"] + c["eval_h"]
        return new

    whole = added(overlay(plan, wf))
    plan.gpu_h, plan.runs_added, plan.gpu = sum(costs[r] for r in whole), len(whole), rates["gpu"]
    cache: dict[tuple, dict] = {}
    for need in plan.needs:
        if not need.add:
            continue
        key = (need.sets, need.add)
        if key not in cache:
            cache[key] = added(overlay(Plan([need], plan.pilot, {s: need.add for s in need.sets}), wf))
        need.gpu_h = sum(costs[rid] for rid, r in cache[key].items() if r.config["data"]["dataset"] == need.dataset)


def _hours(h: float) -> str:
    return f"{h:.1f}" if h >= 0.95 else f"{h:.2g}"  # the demo's runs cost minutes: keep two digits


def render(plan: Plan, titles: dict[str, str] | None = None) -> str:
    """The plan as the terminal shows it: one line per comparison, then the overlay's cost."""
    from tabulate import tabulate

    from .report.claims import LOOK_ALPHAS

    titles = titles or {}
    rows = []
    for n in plan.needs:
        def num(x: float) -> str:
            return f"{x:.3g}" if math.isfinite(x) else "-"
        rows.append([titles.get(n.dataset, n.dataset) or "-", n.claim, n.family, n.n or "-", num(n.sd), num(n.diff),
                     num(n.effect), f"{n.alpha:.2g}" if math.isfinite(n.alpha) else "-",
                     n.add if n.add else "-", _hours(n.gpu_h) if n.add and plan.gpu else "-", n.why])
    table = tabulate(rows, headers=["dataset", "claim", "family", "n", "sd", "Δ", "planned Δ", "level", "add",
                                    "GPU-h", "why none"], tablefmt="simple", disable_numparse=True)
    grow = ", ".join(f"{s} +{k}" for s, k in plan.grow.items()) or "nothing"
    head = (f"Seeds each claim needs (docs/METHOD.md section 9, \"Planning\"): {POWER:.0%} power for the second "
            f"look, the added seeds alone, at the family's level (look 1 at {LOOK_ALPHAS[0]:g}, look 2 at "
            f"{LOOK_ALPHAS[1]:g}; level: one-sided, per comparison); planned Δ: the pilot's for > claims, 0 "
            "against the margin otherwise.")
    cost = (f"\nThe overlay adds {plan.runs_added} runs: {_hours(plan.gpu_h)} GPU-hours on one {plan.gpu} "
            "(bayesncl estimate's rates; per row: that comparison's sets grown alone)." if plan.gpu
            else f"\n{plan.unpriced}." if plan.unpriced else "")
    return f"{head}\n{table}\n\nGrow: {grow}.{cost}\n"


def gate_line(plan: Plan, titles: dict[str, str] | None = None) -> str:
    """What the plan does to the gate: the secondary family is controlled only when every primary claim holds."""
    titles = titles or {}
    stuck = [n for n in plan.needs if n.family == "primary" and not n.add and not n.why.startswith(
        ("decided at look 1: holds", "not run"))]
    if not stuck:
        return "The primary claims are decided or planned: the secondary family is planned as if the gate opens."
    what = "; ".join(f"{n.claim} ({titles.get(n.dataset, n.dataset)}): {n.why}" for n in stuck)
    return (f"The gate stays closed whatever is added ({what}): the secondary verdicts will not be controlled; "
            "their seeds are planned as if it opened.")


NO_PILOT = ("no pilot: run the grid once (`snakemake --cores 2` for the demo, `snakemake --profile slurm all` "
            "for config/paper.yaml) and pass its <results>/summary/runs.csv as --pilot")


def add_command(sub) -> None:
    """`bayesncl plan`, registered by the CLI."""
    sp = sub.add_parser("plan", help="the seeds each claim needs, from a pilot grid's runs.csv, and the overlay that "
                                     "adds them",
                        description="From a finished grid (the pilot), the seeds each claim of the claims table needs "
                                    "for 80%% power at its familywise level in the second look, what they cost in "
                                    "GPU-hours, and a config overlay that runs them: snakemake --profile slurm all "
                                    "--configfile config/paper.yaml --configfile plan.yaml (docs/METHOD.md section 9, "
                                    "\"Planning\"; docs/CLUSTER.md).")
    sp.add_argument("--pilot", metavar="CSV", help="the pilot's runs.csv (`bayesncl summarize`)")
    grid = sp.add_mutually_exclusive_group(required=True)
    grid_argument(grid, "the workflow config the pilot ran, e.g. config/paper.yaml")
    grid.add_argument("--grid-json", help=argparse.SUPPRESS)  # the workflow's merged config
    sp.add_argument("--out", metavar="YAML", help="write the overlay here (default: print only)")
    sp.add_argument("--text", metavar="FILE", help="write the printed plan here too")
    sp.add_argument("--gpu", default="h200", help="the GPU whose measured rate prices the added runs (default h200)")
    sp.add_argument("--measured", metavar="JSON", help="your GPU's gpu_check.json instead (benchmarks/gpu_check.py)")
    sp.set_defaults(func=command)


def command(args) -> int:
    import json
    from pathlib import Path

    import yaml

    from .atomic import atomic_write_text
    from .errors import DataError
    from .estimate import measured_rates
    from .grid import pilot_seeds
    from .report.names import DATASET_NAMES
    from .report.summary import read_summary
    from .startup import mark_ready
    from .wfconfig import load_workflow
    mark_ready()

    if args.grid is not None:  # read as Snakemake reads it: what the workflow refuses, plan refuses
        for path in args.grid:
            if not Path(path).is_file():
                raise ConfigError(f"--grid {path} does not exist; give the workflow config the pilot ran, e.g. "
                                  "config/paper.yaml")
        wf = load_workflow(args.grid).config
    else:
        try:
            wf = json.loads(args.grid_json)
        except json.JSONDecodeError as e:
            raise ConfigError(f"--grid-json: not valid JSON ({e})") from None
        if not isinstance(wf, dict):
            raise ConfigError(f"--grid-json: expected the workflow config as a JSON object, got {args.grid_json[:40]!r}")
        wf = load_workflow(config=wf, where="--grid-json", export=False).config
    if not args.pilot:
        raise ConfigError(NO_PILOT)
    if not Path(args.pilot).is_file():
        raise DataError(f"--pilot {args.pilot}: no such file; {NO_PILOT}")
    if pilot_seeds(wf):  # a grown grid: its table is the second look
        text = ("This grid is already a second look (its `plan:` names the pilot's seeds): the verdict rule spends "
                "its error over two looks and plans no third; its claims table gives the verdicts.\n")
        layer = {}
    else:
        plan = make_plan(read_summary(args.pilot), wf, measured_rates(args.gpu, args.measured))
        text = render(plan, DATASET_NAMES) + gate_line(plan, DATASET_NAMES) + "\n"
        layer = overlay(plan, wf)
    print(text, end="")
    if args.text:
        atomic_write_text(args.text, text)
    if args.out:
        how = ("# bayesncl plan: the seeds each claim needs (docs/METHOD.md section 9, \"Planning\"). Run it after the "
               "grid's own config:\n#   snakemake --profile slurm all --configfile <grid.yaml> --configfile "
               f"{args.out}\n")
        atomic_write_text(args.out, how + (yaml.safe_dump(layer, sort_keys=False, default_flow_style=None)
                                           if layer else "{}\n"))
        print(f"overlay: {args.out}")
    return 0
