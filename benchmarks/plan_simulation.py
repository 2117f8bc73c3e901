"""The planning rules checked by simulation (docs/METHOD.md section 9, "Planning"; figures in docs/METHOD.md).

    python benchmarks/plan_simulation.py            # full size (about 15 minutes on one core)
    python benchmarks/plan_simulation.py --sims 20000 --pilots 1000

Each check draws whole grids of per-seed differences (normal, the t-test's own model; sd 1, so that a mean is an
effect in sds) and judges them with the package's own decision code (verdicts.one_sided, verdicts.two_looks,
verdicts.family_codes) and planner (planning.plan.seeds_to_add, planning.plan.upper_sd, planning.plan.look_two_power),
never a reimplementation of either:

1. the two looks under the null (the claim's bound true): the share of false "holds" over both looks stays at
   the design's one-sided ALPHA / 2, with the added seeds chosen after the pilot by the planner, or by a rule that
   adds few seeds where the pilot looks promising (the rule that inflates a test pooling both stages);
2. power: the realised power of the planned seeds, given the pilot and at the true difference, averaged over
   pilots drawn at it, for 3- and 5-seed pilots, today's rule (the added seeds alone, the pilot's sd taken as
   known) against this one; and the demo's claim 1a (its pilot: Delta +6.45, sd 4.19, 5 seeds): the seeds each
   rule plans and their realised power;
3. the family: two primary and four secondary claims, each truth drawn as the scenario says, one look and two
   (a peeking rule for the added seeds): the familywise error (any false "holds" or "does not hold") at most
   ALPHA, false "holds" at most ALPHA / 2; with a primary claim stuck, the power the secondary claims keep;
4. the joint power of the primary claims, planned together: both hold, averaged over pilots.

`tests/test_plan.py` runs each at a small seeded size in the default suite.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from bayesncl.planning import plan  # noqa: E402
from bayesncl.report import verdicts as V  # noqa: E402

KINDS = [("better", V.BETTER), ("not worse (1 sd)", V.Kind("not worse", 1.0)), ("at most (1 sd)", V.at_most(1.0)),
         ("within (1.5 sd)", V.within(1.5))]
PRIMARY_LEVEL = V.ALPHA / 2  # a primary claim's doubled level in a family of 2 primary claims (its share, 1/2)
DEMO = {"diff": 6.45, "sd": 4.19, "n": 5}  # the demo's claim 1a (runs.csv at cd3ffeb): paired, seeds 0-4


def _bound(kind: V.Kind) -> float:
    """Where the claim's bound lies in d (the null): 0 for >, -margin for >=, +margin for "at most" and "within"."""
    return -kind.margin if kind.name == "not worse" else kind.margin if kind.name != "better" else 0.0


def tests(d: np.ndarray, kind: V.Kind) -> np.ndarray:
    """verdicts.one_sided of each row's per-seed differences (last axis): (2, 2, ...)."""
    n = d.shape[-1]
    return V.one_sided(d.mean(axis=-1), d.std(axis=-1, ddof=1) / math.sqrt(n), n - 1, kind.margin, kind)


def first_n(d: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and sd of the first n[i] entries of each row of d (n >= 2)."""
    k = np.arange(d.shape[-1])
    use = k < n[..., None]
    mean = np.sum(d * use, axis=-1) / n
    sd = np.sqrt(np.sum(((d - mean[..., None]) * use) ** 2, axis=-1) / (n - 1))
    return mean, sd


def planned(d1: np.ndarray, kind: V.Kind, level: float, effect: float | None = None,
            target: float = plan.POWER) -> np.ndarray:
    """The planner's added seeds for each pilot (rows of d1): 0 where look 1 decided, -1 where it plans none."""
    n1 = d1.shape[-1]
    one = tests(d1, kind)
    early = V.doubled(one)[0] / V.EARLY < level
    out = np.full(d1.shape[0], -1)
    for i in range(d1.shape[0]):
        if early[i]:
            out[i] = 0
            continue
        dist = plan._distances(kind, d1[i].mean() if effect is None else effect, kind.margin)
        if min(dist) <= 0:
            continue
        n2 = plan.seeds_to_add(dist, plan.upper_sd(d1[i].std(ddof=1), n1 - 1), one[0, :, i], level,
                               kind.name == "within", target)
        out[i] = -1 if n2 is None else n2
    return out


def two_looks_null(kind: V.Kind, n1: int, sims: int, rng, rule: str = "planner") -> dict:
    """False "holds" over both looks, the true mean on the claim's bound, one comparison at the full level. The
    added seeds: the planner's (its rule at the pilot's Delta; 2 to 30, a pilot it plans nothing for gets n1), or
    "peek": 2 where the pilot's look-1 p is below 0.25, else 30."""
    bound = _bound(kind)
    d1 = rng.normal(bound, 1.0, (sims, n1))
    one1 = tests(d1, kind)
    if rule == "peek":
        n2 = np.where(V.doubled(one1)[0] < 0.5, 2, 30)
    else:
        raw = _planned_cached(d1, kind, V.ALPHA)
        n2 = np.where(raw >= 2, np.minimum(raw, 30), n1)
    d2 = rng.normal(bound, 1.0, (sims, 30))
    mean, sd = first_n(d2, n2)
    one2 = V.one_sided(mean, sd / np.sqrt(n2), n2 - 1, kind.margin, kind)
    codes, _, look = V.two_looks(one1[..., None], one2[..., None], np.array([False]))
    false = codes[:, 0] == V.HOLD
    return {"rate": float(false.mean()), "at_look_1": float((false & (look[:, 0] == 1)).mean()),
            "bound": V.ALPHA / 2}


def _planned_cached(d1: np.ndarray, kind: V.Kind, level: float) -> np.ndarray:
    """planned() for many pilots, asked once per pilot (mean, sd) rounded to 1 digit in sds (time, not validity:
    any rule for the added seeds keeps the level)."""
    key = np.round(np.c_[d1.mean(axis=1), d1.std(axis=1, ddof=1)], 1)
    keys, where = np.unique(key, axis=0, return_inverse=True)
    n1 = d1.shape[1]
    reps = np.array([k[0] + k[1] * (np.arange(n1) - (n1 - 1) / 2) / np.std(np.arange(n1), ddof=1) for k in keys])
    return planned(reps, kind, level)[where.ravel()]


def power_check(n1: int, effect: float, pilots: int, rng, level: float = PRIMARY_LEVEL,
                declared: float | None = None, today: bool = True) -> dict:
    """The realised power (given the pilot, at the true difference ``effect`` in sds) of the seeds each rule plans
    for a "better" claim, averaged over the pilots it plans for, and the share of those plans that reach 80%:
    today's (the added seeds alone at LOOK_ALPHAS[1]'s share, the pilot's sd as known, the pilot's Delta) and this
    one (``declared``: planned at that smallest effect instead of the pilot's Delta)."""
    d1 = rng.normal(effect, 1.0, (pilots, n1))
    one = tests(d1, V.BETTER)
    pf = V.doubled(one)[0]
    out = {}
    if today:  # the previous planner's rule: look 1 at LOOK_ALPHAS[0]'s share, look 2 the added seeds alone
        alpha2 = V.LOOK_ALPHAS[1] * level / V.ALPHA / 2
        early = pf < V.LOOK_ALPHAS[0] * level / V.ALPHA
        old = [plan.seeds_needed(d1[i].mean(), d1[i].std(ddof=1), alpha2) if not early[i] else 0
               for i in range(pilots)]
        out["today"] = _summary([plan.power(n, effect, 1.0, alpha2) for n in old if n], old, n1, pilots)
    new = planned(d1, V.BETTER, level, declared)
    realised = [plan.look_two_power(int(n), (effect, effect), 1.0, one[0, :, i], level)
                for i, n in enumerate(new) if n > 0]
    out["new"] = _summary(realised, [None if n < 0 else int(n) for n in new], n1, pilots)
    return out


def _summary(realised: list[float], n2: list[int | None], n1: int, pilots: int) -> dict:
    realised = np.asarray(realised, dtype=float)
    plans = [n for n in n2 if n]
    return {"power": float(realised.mean()) if realised.size else math.nan,
            "reach": float((realised >= plan.POWER).mean()) if realised.size else math.nan,
            "look_1": sum(n == 0 for n in n2) / pilots, "none": sum(n is None for n in n2) / pilots,
            "total": float(np.median(plans)) + n1 if plans else math.nan}


def demo(pilots: int, rng) -> dict:
    """Claim 1a of the demo: the seeds today's rule and this one plan for its own pilot, the single t-test on all
    seeds at the same level for reference, and each rule's realised power averaged over pilots drawn at it."""
    diff, sd, n1 = DEMO["diff"], DEMO["sd"], DEMO["n"]
    x = np.arange(n1) - (n1 - 1) / 2
    d1 = diff + sd * x / x.std(ddof=1)  # a pilot with exactly its mean and sd
    alpha2 = V.LOOK_ALPHAS[1] * PRIMARY_LEVEL / V.ALPHA / 2
    today = plan.seeds_needed(diff, sd, alpha2)
    new = int(planned(d1[None, :], V.BETTER, PRIMARY_LEVEL)[0])
    single = plan.seeds_needed(diff, sd, PRIMARY_LEVEL / 2)
    sims = power_check(n1, diff / sd, pilots, rng)
    return {"today": n1 + today, "new": n1 + new, "single": single, "sims": sims}


SCENARIOS = {  # the true mean of each comparison's differences, in sds: 1a, 2a (primary), then four secondary
    "every claim on its bound": [0.0] * 6,
    "1a true, 2a on its bound, secondary on theirs": [3.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    "1a true, 2a stuck, two secondary true": [3.0, 0.0, 2.5, 2.5, 0.0, 0.0],
    "1a true, 2a false, secondary mixed": [3.0, -1.0, 2.5, -1.0, 0.0, 0.0],
}


def family_error(truth: list[float], sims: int, rng, looks: int = 1, n1: int = 5) -> dict:
    """The familywise error over six "better" comparisons (two primary) whose true means are ``truth``: any false
    "holds" (true mean at or below the bound) or false "does not hold" (at or above it); with two looks, the added
    seeds chosen by peeking (2 where the pilot's look-1 p is below 0.25, else 20). The power of the true secondary
    claims: the share of them that hold."""
    mu = np.asarray(truth)
    primary = np.array([True, True, False, False, False, False])
    d1 = rng.normal(mu[:, None], 1.0, (sims, mu.size, n1))
    one1 = tests(d1, V.BETTER)
    if looks == 1:
        pf, pa = V.doubled(one1)
        codes, _ = V.family_codes(pf, pa, primary, np.ones(mu.size, dtype=bool), V.ALPHA)
    else:
        n2 = np.where(V.doubled(one1)[0] < 0.5, 2, 20)
        mean, sd = first_n(rng.normal(mu[:, None], 1.0, (sims, mu.size, 20)), n2)
        one2 = V.one_sided(mean, sd / np.sqrt(n2), n2 - 1, 0.0, V.BETTER)
        codes, _, _ = V.two_looks(one1, one2, primary)
    false_hold = (codes == V.HOLD) & (mu <= 0)
    false = false_hold | ((codes == V.FAIL) & (mu >= 0))
    true_secondary = ~primary & (mu > 0)
    return {"fwer": float(false.any(axis=1).mean()), "false_holds": float(false_hold.any(axis=1).mean()),
            "secondary_power": float((codes == V.HOLD)[:, true_secondary].mean()) if true_secondary.any() else math.nan}


def joint_power(pilots: int, rng, effects: tuple[float, float] = (1.54, 1.0), n1: int = 5) -> dict:
    """Two true primary claims (``effects`` in sds; the demo's 1a and a 2a of 1 sd) planned together (each at the
    joint target) and alone (each at 80%): the share of pilots in which both hold at look 1 or 2 (the family's
    graph on both looks), among those the planner plans or decided."""
    out = {}
    for name, target in (("together", 1 - (1 - plan.POWER) / 2), ("alone", plan.POWER)):
        d1 = rng.normal(np.array(effects)[:, None], 1.0, (pilots, 2, n1))
        n2 = np.stack([planned(d1[:, j], V.BETTER, PRIMARY_LEVEL, target=target) for j in range(2)], axis=1)
        keep = (n2 >= 0).all(axis=1)
        d1, n2 = d1[keep], n2[keep]
        one1 = tests(d1, V.BETTER)
        use = np.maximum(n2, 2)
        mean, sd = first_n(rng.normal(np.array(effects)[:, None], 1.0, (d1.shape[0], 2, int(use.max()))), use)
        one2 = V.one_sided(mean, sd / np.sqrt(use), use - 1, 0.0, V.BETTER)
        one2 = np.where(n2 > 0, one2, np.nan)  # decided at look 1: no seeds added
        codes, _, _ = V.two_looks(one1, one2, np.array([True, True]))
        out[name] = {"both": float((codes == V.HOLD).all(axis=1).mean()), "planned": float(keep.mean()),
                     "total": float(np.median(n2.max(axis=1))) + n1}
    return out


def sigma(p: float, sims: int) -> float:
    return math.sqrt(p * (1 - p) / sims)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=100_000, help="grids per error check")
    ap.add_argument("--pilots", type=int, default=4_000, help="pilots per power check (each planned)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    print(f"# {args.sims:,} simulated grids per error check, {args.pilots:,} pilots per power check, "
          f"seed {args.seed}\n")
    print("1. False holds over two looks, the claim's bound true, one comparison at the full level "
          f"(rule: at most {V.ALPHA / 2:g})\n")
    print("| claim | pilot n | added seeds | false holds | at look 1 |\n|---|---:|---|---:|---:|")
    for name, kind in KINDS:
        for n1 in (3, 5):
            for rule in ("planner", "peek"):
                r = two_looks_null(kind, n1, args.sims, rng, rule)
                print(f"| {name} | {n1} | {rule} | {r['rate']:.4f} ± {sigma(r['rate'], args.sims):.4f} | "
                      f"{r['at_look_1']:.4f} |")
    print(f"\n2. Realised power (given the pilot, at the true Δ) of the planned seeds, averaged over the pilots "
          f"planned for; a primary claim's level ({PRIMARY_LEVEL:g} doubled), target {plan.POWER:.0%}\n")
    print("| pilot n | true Δ / sd | rule | power | plans ≥ 80% | decided at look 1 | none planned | median total "
          "|\n|---:|---:|---|---:|---:|---:|---:|---:|")
    for n1 in (3, 5):
        for effect in (0.5, 1.0, 1.54):
            r = power_check(n1, effect, args.pilots, rng)
            rows = [("today", r["today"]), ("this", r["new"])]
            if effect == 0.5:
                rows.append(("this, declared effect 0.5", power_check(n1, effect, args.pilots, rng,
                                                                      declared=0.5)["new"]))
            for rule, s in rows:
                print(f"| {n1} | {effect:g} | {rule} | {s['power']:.3f} | {s['reach']:.0%} | {s['look_1']:.0%} | "
                      f"{s['none']:.0%} | {s['total']:.0f} |")
    r = demo(args.pilots, rng)
    print(f"\nThe demo's 1a (Δ {DEMO['diff']:+g}, sd {DEMO['sd']:g}, {DEMO['n']} seeds a side): today's rule plans "
          f"{r['today']} seeds in all, this one {r['new']} (a single t-test on all seeds at the same level: "
          f"{r['single']}); realised power averaged over pilots at its Δ and sd: today's "
          f"{r['sims']['today']['power']:.3f}, this one's {r['sims']['new']['power']:.3f} "
          f"({r['sims']['new']['reach']:.0%} of plans reach 80%)")
    print(f"\n3. The family (two primary, four secondary claims; one look of 5 seeds, or two with peeking): familywise "
          f"error (rule: at most {V.ALPHA:g}), false holds (at most {V.ALPHA / 2:g}), and the true secondary claims' "
          "power\n")
    print("| truth | looks | familywise error | false holds | secondary power |\n|---|---:|---:|---:|---:|")
    for name, truth in SCENARIOS.items():
        for looks in (1, 2):
            r = family_error(truth, args.sims, rng, looks)
            power = "-" if math.isnan(r["secondary_power"]) else f"{r['secondary_power']:.3f}"
            print(f"| {name} | {looks} | {r['fwer']:.4f} ± {sigma(r['fwer'], args.sims):.4f} | "
                  f"{r['false_holds']:.4f} | {power} |")
    r = joint_power(args.pilots, rng)
    print(f"\n4. Joint power of two true primary claims (1.54 and 1 sd, 5-seed pilots): both hold in "
          f"{r['together']['both']:.3f} of pilots planned together (each at {1 - (1 - plan.POWER) / 2:.0%}; median "
          f"total {r['together']['total']:.0f} seeds), {r['alone']['both']:.3f} planned alone (each at "
          f"{plan.POWER:.0%}; {r['alone']['total']:.0f})")
    print(f"\n({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
