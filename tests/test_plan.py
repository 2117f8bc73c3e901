"""Planning (docs/METHOD.md section 9, "Planning"; bayesncl.planning.plan, `bayesncl plan`): the two looks' combination
test against its written-out form (helpers/family.py: scipy's bivariate normal, not Owen's T) and by simulation under
the null; the power of look 2 given the pilot against the noncentral t written out and against simulated grids; the
power the plans keep over their pilots, the family's error and the primary claims' joint power
(benchmarks/plan_simulation.py at a small seeded size); the planner's levels, margins and sds, its overlay (seeds no
pilot run used) and price, the grown grid's two looks, and the command."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import special, stats

from bayesncl.grid import expand as grid
from bayesncl.planning import plan
from bayesncl.cli.main import main
from bayesncl.core.errors import ConfigError
from bayesncl.planning.plan import Need, Plan
from bayesncl.report import claims, claims_table, judge, verdicts as V
from helpers import family as naive
from helpers.claims import HOLDS, MAIN, frame, row

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("plan_simulation", ROOT / "benchmarks" / "plan_simulation.py")
sim = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sim)
B, N = "BayesNCL (STE)", "NCL"


def sigma(p: float, n: int) -> float:
    return math.sqrt(p * (1 - p) / n)


def exact(mean: float, sd: float, n: int = 5) -> np.ndarray:
    """n values with exactly this mean and sd (ddof 1)."""
    x = np.arange(n) - (n - 1) / 2
    return mean + sd * x / x.std(ddof=1)


# --------------------------------------------------------------------------- the power formulas
def test_power_is_the_noncentral_t_and_seeds_needed_the_smallest_n():
    """power(): P(T > t_{1-a, n-1}) for T ~ noncentral t(n - 1, effect sqrt(n) / sd), written out; seeds_needed:
    the first n from 2 up with power >= 0.8, found by a loop."""
    for effect, sd, a in ((6.8, 6.5, 0.005), (0.75, 0.14, 0.0005), (1.0, 1.2, 0.01)):
        for n in (2, 3, 7, 20):
            want = 1 - stats.nct.cdf(stats.t.ppf(1 - a, n - 1), n - 1, effect * math.sqrt(n) / sd)
            assert plan.power(n, effect, sd, a) == pytest.approx(want, rel=1e-9)
        loop = next(n for n in range(2, 101) if plan.power(n, effect, sd, a) >= 0.8)
        assert plan.seeds_needed(effect, sd, a) == loop
    for n in (5, 30):  # "within": both one-sided tests, bounded below by 2 x one side's power - 1
        assert plan.power(n, 1.0, 1.0, 0.01, two_sided_bound=True) == pytest.approx(
            max(0.0, 2 * plan.power(n, 1.0, 1.0, 0.01) - 1))
    assert plan.seeds_needed(-1.0, 1.0, 0.01) is None and plan.seeds_needed(0.01, 1.0, 0.0001) is None
    assert plan.seeds_needed(1.0, 0.0, 0.01) == 2  # equal differences: any interval decides
    assert plan.seeds_needed(1.0, math.nan, 0.01) is None


def test_the_sds_upper_bound_is_the_chi_square_one():
    """sd x sqrt(dof / chi2 quantile 0.2): the true sd lies below it in 80% of pilots (simulated)."""
    assert plan.upper_sd(4.19, 4) == pytest.approx(4.19 * math.sqrt(4 / stats.chi2.ppf(0.2, 4)))
    rng = np.random.default_rng(0)
    sds = rng.normal(0.0, 1.0, (20000, 5)).std(axis=1, ddof=1)
    assert np.mean(sds * plan.upper_sd(1.0, 4) >= 1.0) == pytest.approx(0.8, abs=4 * sigma(0.8, 20000))
    assert math.isnan(plan.upper_sd(1.0, 0)) and math.isnan(plan.upper_sd(math.nan, 3))


def test_the_look_two_bound_is_the_written_out_one():
    """look_two_bound (Owen's T) against scipy's bivariate normal (helpers/family.py); under the null the two looks
    together spend exactly the level, look 1 EARLY of it (simulated); a missing stage (z = 0) stays below it."""
    for level in (0.025, 0.0125, 0.003, 0.0004):
        assert V.look_two_bound(level) == pytest.approx(naive.look_two_bound(level), abs=2e-6)
    assert V.EARLY == pytest.approx(naive.EARLY) and V.STAGE_WEIGHTS == (naive.W, naive.W)
    rng = np.random.default_rng(1)
    p1, p2 = rng.random(200000), rng.random(200000)
    one = lambda p: np.broadcast_to(p, (2, 2, p.size))  # noqa: E731
    for level in (0.05, 0.01):
        hold, _ = V.look_two_rejects(one(p1), one(p2), level)
        assert hold.mean() == pytest.approx(level / 2, abs=4 * sigma(level / 2, p1.size))
        assert (p1 < V.EARLY * level / 2).mean() == pytest.approx(V.EARLY * level / 2, abs=4 * sigma(0.001, p1.size))
    for level in np.geomspace(1e-6, 1.0, 25):
        assert special.ndtr(-V.look_two_bound(level / 2) / V.STAGE_WEIGHTS[1]) <= level / 2


def test_look_two_rejects_is_the_combination_test_written_out():
    """The two-stage decision on random stage p-values against helpers/family.py's, at the levels the graph uses;
    "within" needs both of its tests, "against" one; a test with no interval at either look never rejects."""
    rng = np.random.default_rng(2)
    p1, p2 = rng.random(300) ** 3, rng.random(300) ** 3
    for level in (0.05, 0.0125, 0.0025):
        hold, _ = V.look_two_rejects(np.broadcast_to(p1, (2, 2, 300)), np.broadcast_to(p2, (2, 2, 300)), level)
        want = [naive.two_stage_rejects(a, b, level / 2) for a, b in zip(p1, p2)]
        assert hold.tolist() == want
    both = np.array([[[0.0001], [0.4]], [[0.4], [0.0001]]])  # for: one test clears, one does not; against likewise
    hold, fail = V.look_two_rejects(both, both, 0.05)
    assert hold.tolist() == [False] and fail.tolist() == [True]
    gone = np.full((2, 2, 1), math.nan)
    assert V.look_two_rejects(gone, gone, 0.05)[0].tolist() == [False]
    # a stage without an interval adds z = 0: the pilot alone at look 2 needs z1 > c2 / w1
    c2 = V.look_two_bound(0.025)
    for z1, want in ((c2 / V.STAGE_WEIGHTS[0] - 1e-6, False), (c2 / V.STAGE_WEIGHTS[0] + 1e-6, True)):
        p = np.full((2, 2, 1), special.ndtr(-z1))
        assert V.look_two_rejects(p, gone, 0.05)[0].tolist() == [want or p[0, 0, 0] < V.EARLY * 0.025]


def test_look_two_power_is_the_noncentral_t_given_the_pilot():
    """look_two_power against its formula written out with scipy.stats (the bound from helpers/family.py) and
    against simulated second stages judged by the written-out combination test."""
    level, p1 = 0.025, 0.04
    c2 = naive.look_two_bound(level / 2)
    a = stats.norm.sf((c2 - naive.W * stats.norm.isf(p1)) / naive.W)
    for n2, effect, sd in ((3, 6.45, 6.5), (8, 1.0, 1.2), (20, 0.3, 1.0)):
        want = stats.nct.sf(stats.t.isf(a, n2 - 1), n2 - 1, effect * math.sqrt(n2) / sd)
        assert plan.look_two_power(n2, (effect, effect), sd, (p1, p1), level) == pytest.approx(want, abs=1e-6)
    rng = np.random.default_rng(3)
    d2 = rng.normal(1.0, 1.2, (4000, 8))
    p2 = stats.ttest_1samp(d2, 0.0, axis=1, alternative="greater").pvalue
    held = np.mean([naive.two_stage_rejects(p1, p, level / 2) for p in p2])
    assert held == pytest.approx(plan.look_two_power(8, (1.0, 1.0), 1.2, (p1, p1), level), abs=3 * sigma(0.5, 4000))
    # "within": the two tests' powers summed less 1; a test look 1 rejected counts 1; sd 0 decides
    one = plan.look_two_power(6, (1.0, 1.0), 1.0, (0.2, 0.2), level)
    other = plan.look_two_power(6, (2.0, 2.0), 1.0, (0.05, 0.05), level)
    assert plan.look_two_power(6, (1.0, 2.0), 1.0, (0.2, 0.05), level, both=True) == pytest.approx(one + other - 1)
    assert plan.look_two_power(6, (1.0, 1.0), 1.0, (V.EARLY * level / 2 / 2, 0.5), level) == 1.0
    assert plan.look_two_power(2, (0.1, 0.1), 0.0, (0.4, 0.4), level) == 1.0
    assert plan.look_two_power(5, (-0.1, -0.1), 1.0, (0.4, 0.4), level) == 0.0
    assert plan.look_two_power(5, (1.0, 1.0), 1.0, (0.4, 0.4), 0.0) == 0.0
    n = plan.seeds_to_add((1.0, 1.0), 1.2, (p1, p1), level)
    assert plan.look_two_power(n, (1.0, 1.0), 1.2, (p1, p1), level) >= 0.8 > \
        plan.look_two_power(n - 1, (1.0, 1.0), 1.2, (p1, p1), level)


# --------------------------------------------------------------------------- simulations (plan_simulation.py)
@pytest.mark.parametrize("kind", [V.BETTER, V.Kind("not worse", 1.0)], ids=["better", "not worse"])
@pytest.mark.parametrize("rule", ["planner", "peek"])
def test_two_looks_keep_the_error_at_alpha_whatever_rule_adds_the_seeds(kind, rule):
    """The claim's bound true: false holds over both looks at the design's one-sided 0.025, look 1's share at
    0.005, whether the planner chose the added seeds or a rule that adds few where the pilot looks promising."""
    sims = 20000
    r = sim.two_looks_null(kind, 3, sims, np.random.default_rng(4), rule)
    assert r["rate"] == pytest.approx(r["bound"], abs=4 * sigma(r["bound"], sims)), r
    assert r["at_look_1"] == pytest.approx(V.LOOK_ALPHAS[0] / 2, abs=4 * sigma(0.005, sims))


@pytest.mark.parametrize("n1, effect", [(3, 1.0), (5, 1.0), (5, sim.DEMO["diff"] / sim.DEMO["sd"])],
                         ids=["3 seeds, 1 sd", "5 seeds, 1 sd", "the demo's 1a"])
def test_plans_keep_their_power_promise_over_the_pilots(n1, effect):
    """The realised power of the planned seeds, given each pilot and at the true difference, averaged over pilots
    drawn at it: at least 0.8 (today's rule, the added seeds alone at the pilot's sd, fell short: 0.61-0.74)."""
    pilots = 150
    r = sim.power_check(n1, effect, pilots, np.random.default_rng(5), today=False)["new"]
    assert r["power"] >= 0.8, r


def test_a_declared_effect_keeps_the_promise_where_the_pilots_delta_cannot():
    """A true difference of 0.5 sd: planned at the pilot's Delta the promise fails; at the declared 0.5 it holds
    (where 100 seeds can reach it)."""
    pilot_delta = sim.power_check(5, 0.5, 120, np.random.default_rng(6), today=False)["new"]
    declared = sim.power_check(5, 0.5, 120, np.random.default_rng(6), declared=0.5, today=False)["new"]
    assert pilot_delta["power"] < 0.8 <= declared["power"], (pilot_delta, declared)


def test_the_demos_1a_is_planned_at_ten_seeds_in_all():
    r = sim.demo(30, np.random.default_rng(7))
    assert (r["today"], r["new"], r["single"]) == (13, 10, 7)


@pytest.mark.parametrize("scenario", list(sim.SCENARIOS))
def test_the_family_keeps_its_error_at_alpha(scenario):
    """Any false holds or does not hold at most 0.05, false holds at most 0.025, one look and two (peeking)."""
    sims = 6000
    for looks in (1, 2):
        r = sim.family_error(sim.SCENARIOS[scenario], sims, np.random.default_rng(8), looks)
        assert r["fwer"] <= V.ALPHA + 3 * sigma(V.ALPHA, sims), (looks, r)
        assert r["false_holds"] <= V.ALPHA / 2 + 3 * sigma(V.ALPHA / 2, sims), (looks, r)


def test_a_stuck_primary_claim_leaves_the_secondary_claims_their_power():
    """1a true, 2a on its bound: the true secondary claims still hold in most grids (the gate would close them)."""
    r = sim.family_error(sim.SCENARIOS["1a true, 2a stuck, two secondary true"], 4000, np.random.default_rng(9))
    assert r["secondary_power"] > 0.3, r


def test_the_primary_claims_planned_together_hold_together():
    r = sim.joint_power(60, np.random.default_rng(10))
    assert r["together"]["both"] >= 0.8, r


# --------------------------------------------------------------------------- the planner
def demo_grid() -> dict:
    return yaml.safe_load((ROOT / "config" / "config.yaml").read_text())


OTHERS = {"se_sum": 2.0, "probe_top1": 50.0, "ret_p10": 30.0}  # Tables 1-2's other metrics, readable, even


def pilot_frame(d1a=None, d2a=None, dataset: str = "synthetic", seed: int = 4) -> pd.DataFrame:
    """Tables 1-2 of the demo grid, 5 seeds: BayesNCL - NCL on SC ``d1a`` (default: the demo's 1a, Delta 6.45, sd
    4.19), on top-1 ``d2a`` (default: Delta 0.5, sd 5.3, as the demo's 2a); the rest noise."""
    rng = np.random.default_rng(seed)
    d1a = exact(6.45, 4.19) if d1a is None else d1a
    d2a = exact(0.5, 5.3) if d2a is None else d2a
    rows = []
    for s in range(5):
        for v in ("SimCLR", N, "Top-k NCL", B, "BayesNCL (Gumbel)"):
            rows.append(row(v, s, MAIN, dataset=dataset, sc=15.0 + (d1a[s] if v == B else 0.0 if v == N else
                                                                      rng.normal(0, 2)),
                            se_sum=2.0 + rng.normal(0, 0.1), ret_p10=22.0 + rng.normal(0, 2),
                            probe_top1=38.0 + (d2a[s] if v == B else 0.0 if v == N else rng.normal(0, 3))))
    return frame(rows)


def test_the_demos_pilot_plans_1a_at_ten_seeds_and_the_secondary_claims_despite_2a():
    """The demo's pilot (1a: Delta +6.45, sd 4.19; 2a: sd 5.3): 1a at +5 seeds (10 in all; 13 by the rule that
    read the added seeds alone); 2a cannot be decided in 100 seeds; the secondary claims are planned at the level 1a
    passes on when it holds (a quarter of the family's, shared), and plan.md names them."""
    wf = demo_grid()
    p = plan.make_plan(pilot_frame(), wf)
    need = {n.claim: n for n in p.needs}
    assert need["1a"].add == 5 and need["1a"].n + need["1a"].add == 10
    assert need["1a"].sd == pytest.approx(4.19) and need["1a"].sd_plan == pytest.approx(plan.upper_sd(4.19, 4))
    assert need["1a"].alpha == pytest.approx(V.ALPHA / 2 / 2) and need["1a"].power == 0.8  # 2a out: 1a alone
    assert need["2a"].add is None and need["2a"].why == "more than 100 seeds"
    tested = [n for n in p.needs if n.family == "secondary" and n.sd == n.sd]  # 1b, 1c, 2b, 3, 4: an interval
    assert len(tested) == 5 and all(n.alpha == pytest.approx(V.ALPHA / 4 / 5 / 2) for n in tested if n.add)
    planned = [n for n in tested if n.add]
    assert planned and p.grow["table1"] == max(n.add for n in planned if "table1" in n.sets)
    line = plan.family_line(p, {"synthetic": "Synthetic"})
    assert line.startswith("The primary claims: planned for a joint power of 80% at least, each at 80%: "
                           "1a (Synthetic); cannot be decided: 2a (Synthetic) (more than 100 seeds).")
    assert ("With 2a (Synthetic) stuck, the secondary claims are still tested, at the level the others pass on; "
            "planned at it: " + ", ".join(f"{n.claim} (Synthetic)" for n in planned) + ".") in line


def test_the_levels_are_the_graphs_shares_of_the_comparisons_with_a_test():
    """A primary comparison's level is its share (1/k of the family's, once look 1's holds have passed theirs on);
    a secondary one's what the primary ones planned pass on, shared among the secondary comparisons with an
    interval only (not run and one-seed rows take none), never the primary family's level."""
    df = pilot_frame(d2a=exact(1.5, 1.0))  # 2a decidable: both primary claims planned, each at 90%
    p = plan.make_plan(df, demo_grid())
    need = {n.claim: n for n in p.needs}
    assert need["1a"].power == need["2a"].power == pytest.approx(0.9) and need["2a"].add
    assert need["1a"].alpha == need["2a"].alpha == pytest.approx(V.ALPHA / 2 / 2)
    tested = [n for n in p.needs if n.family == "secondary" and n.sd == n.sd]
    assert all(n.alpha == pytest.approx(V.ALPHA / len(tested) / 2) for n in tested if n.add)  # Holm's first share
    # a secondary comparison decided at look 1 keeps no level but passes its own on; so does 2a decided
    strong = pilot_frame(d2a=exact(9.0, 0.5))
    p = plan.make_plan(strong, demo_grid())
    need = {n.claim: n for n in p.needs}
    assert need["2a"].why == "decided at look 1: holds (family)"
    assert need["1a"].alpha == pytest.approx(V.ALPHA * 0.75 / 2)  # its half, and half of 2a's
    # Table 4 of one seed a side: claim 5 runs without an interval, no node; its share would lower the others'
    extra = frame([*df.to_dict("records"), row(B, 0, "table4", sc=30.0), row("Soft gate", 0, "table4", sc=20.0)])
    five = next(n for n in plan.make_plan(extra, demo_grid()).needs if n.claim == "5")
    assert five.why.startswith("no pilot sd")
    assert {n.alpha for n in plan.make_plan(extra, demo_grid()).needs if n.family == "secondary" and n.add} == \
        {n.alpha for n in plan.make_plan(df, demo_grid()).needs if n.family == "secondary" and n.add}


def test_a_comparison_look_1_decided_either_way_gets_no_seeds():
    fails = pilot_frame(d1a=exact(-30.0, 1.0))
    need = {n.claim: n for n in plan.make_plan(fails, demo_grid()).needs}
    assert need["1a"].why == "decided at look 1: does not hold (family)" and need["1a"].add is None


def test_the_welch_sd_is_both_sides_variances_added():
    """A pilot whose sides share no seed: the sd planned for a pair is sqrt(var_left + var_right), ddof 1."""
    left, right = [21.0, 27.0, 18.0, 25.0], [14.0, 15.5, 13.0]
    rows = [row(B, s, MAIN, sc=v, **OTHERS) for s, v in enumerate(left)]
    rows += [row(N, 10 + s, MAIN, sc=v, **OTHERS) for s, v in enumerate(right)]
    need = {n.claim: n for n in plan.make_plan(frame(rows), demo_grid()).needs}
    assert need["1a"].sd == pytest.approx(math.sqrt(np.var(left, ddof=1) + np.var(right, ddof=1)))


def test_within_is_planned_on_both_of_its_tests():
    """Claim 8 (within 1 point): its power bounded by both one-sided tests (2 x - 1 where they are alike, the pilot's
    Delta 0), so more seeds than one test alone would need."""
    bg = exact(0.0, 0.8)
    rows = []
    for s in range(5):
        rows.append(row(B, s, "table6", bg_acc=90.0 + bg[s]))
        rows.append(row(N, s, "table6", bg_acc=90.0))
    p = plan.make_plan(frame(rows), demo_grid())
    need = next(n for n in p.needs if n.claim == "8")
    c = next(c for _, cs in judge.claims_rows(frame(rows)) for c in cs if c.claim == "8")
    p1 = V.stage_p(c.result, c.kind)[0]
    level = need.alpha * 2
    assert need.add == plan.seeds_to_add((1.0, 1.0), need.sd_plan, p1, level, both=True)
    assert need.add > plan.seeds_to_add((1.0, 1.0), need.sd_plan, p1, level)
    # a pilot 0.3 above NCL: 1.3 from the lower bound, 0.7 from the upper
    shifted = frame([{**r, "bg_acc": r["bg_acc"] + (0.3 if r["variant"] == B else 0.0)} for r in rows])
    need = next(n for n in plan.make_plan(shifted, demo_grid()).needs if n.claim == "8")
    c = next(c for _, cs in judge.claims_rows(shifted) for c in cs if c.claim == "8")
    assert need.add == plan.seeds_to_add((1.3, 0.7), need.sd_plan, V.stage_p(c.result, c.kind)[0], level, both=True)


def test_at_most_and_not_worse_are_planned_at_the_pilots_delta_and_may_not_hold_at_their_margin():
    """12b (at most 6% more time): a pilot 14% faster is planned at its Delta (few seeds), not at 0; 12a (GFLOPs,
    every seed alike, +1.46% against a 1% margin) cannot hold at its margin and says so instead of a seed count."""
    minutes = {B: 86.0 + exact(0.0, 6.0), N: 100.0 + exact(0.0, 6.0)[::-1]}
    rows = [*pilot_frame().to_dict("records")]  # 1a and 2a open at look 1: no level passed on, nothing decided
    for s in range(5):
        for v in (B, N):
            rows.append(row(v, s, "table7", train_minutes=minutes[v][s], gflops=1.0146 if v == B else 1.0))
    df = frame(rows)
    need = {n.claim: n for n in plan.make_plan(df, demo_grid()).needs}
    c = {c.claim: c for _, cs in judge.claims_rows(df) for c in cs}["12b"]
    assert need["12b"].planned == pytest.approx(c.result.diff) and c.result.diff == pytest.approx(-14.0)
    p1, level = V.stage_p(c.result, c.kind)[0], need["12b"].alpha * 2
    at_zero = plan.seeds_to_add((c.result.tol,) * 2, need["12b"].sd_plan, p1, level)
    assert need["12b"].add == plan.seeds_to_add((c.result.tol + 14.0,) * 2, need["12b"].sd_plan, p1, level)
    assert need["12b"].add < (at_zero or 101)
    assert need["12a"].add is None and need["12a"].why == ("cannot hold at its margin: the pilot's difference "
                                                           "+1.46% lies beyond its bound +1% (every seed alike: sd 0)")


def test_a_declared_effect_is_planned_for_and_checked():
    wf = {**demo_grid(), "plan": {"effects": {"1a": 2.0}}}
    need = {n.claim: n for n in plan.make_plan(pilot_frame(), wf).needs}
    assert need["1a"].planned == 2.0 and need["1a"].add > 5
    for bad, phrase in (({"9z": 1.0}, "plan.effects.9z: no comparison '9z' in the claims table; its ids: 1a, 1b"),
                        ({"1a": math.nan}, "plan.effects.1a: nan is not a finite number"),
                        ([1], "plan.effects: expected {comparison id: difference}")):
        with pytest.raises(ConfigError) as e:
            plan.make_plan(pilot_frame(), {**demo_grid(), "plan": {"effects": bad}})
        assert str(e.value).startswith(phrase)


def test_a_declared_claim_reusing_a_paper_id_is_secondary():
    """A declared claim with id "1a" is not the paper's 1a: it takes no primary share and gates nothing."""
    decl = [{"id": "1a", "metric": "sc", "left": "Top-k NCL", "right": "SimCLR", "relation": ">"}]
    df = pilot_frame()
    comps = [c for _, cs in judge.claims_rows(df, claims.parse_claims(decl)) for c in cs if c.claim == "1a"]
    p = plan.make_plan(df, {**demo_grid(), "claims": decl})
    assert [c.primary for c in comps] == [True, False] and comps[1].paper == "declared"
    assert [n.family for n in p.needs if n.claim == "1a"] == ["primary", "secondary"]


def test_an_unreadable_pilot_column_is_refused_in_one_line():
    df = pilot_frame()
    for value in ("abc", ""):
        bad = df.assign(sc=value)
        with pytest.raises(plan.DataError) as e:
            plan.make_plan(bad, demo_grid(), pilot="--pilot runs.csv")
        assert str(e.value).startswith("--pilot runs.csv: column 'sc' holds no number in any of its 25 runs (text or "
                                       "empty), though claim 1a reads it from table1's runs")



def test_a_per_epoch_column_is_read_as_the_claim_reads_it():
    """A dynamics column is a list per run: readable where some run recorded an epoch (a side whose runs recorded none
    is only not run), refused where no run did."""
    from helpers.claims import frame, row

    rows = [row(v, s, "table3", dyn_epochs="[1]", dyn_gv_sc="[-0.4]", dyn_af_gv="[0.5]" if v == "NCL" else "[]")
            for v in ("NCL", "BayesNCL (STE)") for s in range(2)]
    judged = judge.judge(frame(rows))
    every = [(d, c) for d, comps in judged.blocks for c in comps]
    assert {c.claim: c.verdict for _, c in every}["7c"] == "not run"
    plan._unreadable(every, frame(rows), "the pilot")  # NCL's runs hold numbers
    nothing = frame([{**r, "dyn_af_gv": "[]"} for r in rows])
    with pytest.raises(plan.DataError, match=r"^the pilot: column 'dyn_af_gv' holds no number in any of its 4 runs"):
        plan._unreadable([(d, c) for d, comps in judge.judge(nothing).blocks for c in comps], nothing, "the pilot")


# --------------------------------------------------------------------------- the overlay and the grown grid
def test_the_overlay_grows_each_set_on_seeds_no_pilot_run_used():
    """table1 (the global list) and table4 (its first 3) grown: table4's added seeds are 5, 6, ..., never 3-4, whose
    BayesNCL runs the pilot ran for table1: every run of the grown grid is pilot evidence for all its sets or for
    none."""
    wf = demo_grid()
    p = Plan([], {s: grid.set_seeds(wf, s) for s in wf["sets"]}, {"table1": 2, "table4": 3})
    layer = plan.overlay(p, wf)
    assert layer["seeds"] == [0, 1, 2, 3, 4, 5, 6]
    assert layer["sets"]["table1"] == {"n_seeds": 7} and layer["sets"]["table2"] == {"n_seeds": 5}
    assert layer["sets"]["table4"] == {"seeds": [0, 1, 2, 5, 6, 7], "n_seeds": None}
    assert "table5" not in layer["sets"]  # not grown, a prefix: as it was
    big = plan.grown(wf, layer)
    assert grid.set_seeds(big, "table4") == [0, 1, 2, 5, 6, 7] and grid.set_seeds(big, "table5") == [0, 1, 2]
    assert grid.pilot_seeds(big) == p.pilot
    runs = grid.expand_grid(big)
    for r in runs.values():
        both = [*r.sets, *r.init_of]
        assert r.pilot_of in ([], list(dict.fromkeys(both))), r.run_id
        assert bool(r.pilot_of) == (r.config["seed"] < 5), r.run_id
    # BayesNCL's runs of seeds 3-4 were pilot evidence for table1: table4 does not take them as added seeds; its
    # added seeds are runs table1 adds too, added evidence for both
    assert not [r for r in runs.values() if "table4" in r.sets and r.config["seed"] in (3, 4)]
    ste = [r for r in runs.values() if "table4" in r.sets and r.labels["table4"] == B and r.config["seed"] in (5, 6)]
    assert len(ste) == 2 and all({"table1", "table4"} <= set(r.sets) and not r.pilot_of for r in ste)


def test_a_set_with_its_own_seeds_grows_its_own_list():
    wf = demo_grid()
    wf["sets"]["table1"] = {**wf["sets"]["table1"], "seeds": [7, 9, 11]}
    p = plan.Plan([], {s: grid.set_seeds(wf, s) for s in wf["sets"]}, {"table1": 4})
    layer = plan.overlay(p, wf)
    # its own list grows past every pilot seed (12 on), the global list does not (its 5 serve every other set)
    assert layer["sets"]["table1"] == {"seeds": [7, 9, 11, 12, 13, 14, 15]} and layer["seeds"] == wf["seeds"]
    assert grid.set_seeds(plan.grown(wf, layer), "table1") == [7, 9, 11, 12, 13, 14, 15]


def test_a_run_the_pilot_ran_is_pilot_evidence_for_every_set():
    """A grid grown the old way (table4's prefix lengthened into seeds 3-4, which table1's pilot ran): BayesNCL's run
    of seed 3 was pilot evidence for table1, so it is for table4 too, never added evidence."""
    wf = demo_grid()
    wf["sets"]["table4"]["n_seeds"] = 5
    wf["plan"] = {"pilot": {s: grid.set_seeds(demo_grid(), s) for s in wf["sets"]}}
    run = next(r for r in grid.expand_grid(wf).values()
               if {"table1", "table4"} <= set(r.sets) and r.labels["table4"] == B and r.config["seed"] == 3)
    assert "table4" in run.pilot_of and "table1" in run.pilot_of


def test_a_set_the_plan_does_not_name_is_pilot_evidence():
    wf = {**demo_grid(), "plan": {"pilot": {"table1": [0, 1]}}}
    runs = grid.expand_grid(wf)
    only2 = [r for r in runs.values() if r.sets == ["table2"] or set(r.sets) <= {"table2", "figure3", "table6"}]
    assert only2 and all(r.pilot_of for r in only2 if "table1" not in r.sets)
    grown_ = [r for r in runs.values() if "table1" in r.sets and r.config["seed"] >= 2]
    assert grown_ and all(r.pilot_of == [*dict.fromkeys([*r.sets, *r.init_of])] for r in grown_)  # table2's too


def test_the_plan_of_a_pilot_and_its_overlay():
    wf = demo_grid()
    p = plan.make_plan(pilot_frame(), wf)
    layer = plan.overlay(p, wf)
    big = plan.grown(wf, layer)
    for s in wf["sets"]:
        assert grid.set_seeds(big, s)[:len(p.pilot[s])] == p.pilot[s]  # the pilot's seeds stay first
        assert len(grid.set_seeds(big, s)) == len(p.pilot[s]) + p.grow.get(s, 0)
    assert layer["plan"]["pilot"] == p.pilot and grid.pilot_seeds(big) == p.pilot
    with pytest.raises(ConfigError, match="already a second look"):
        plan.make_plan(pilot_frame(), big)


def test_a_grown_grids_table_judges_two_looks_written_out():
    """Seeds 0-2 the pilot (pilot_of), 3-7 added: 1a's look 2 combines the pilot's one-sided t-test with the added
    seeds' own (helpers/family.py), at the primary claim's share of 0.05; 2a held at look 1; the Family column
    names the look, the caption the rule."""
    d = [0.6, 3.0, 1.0, 2.1, 2.6, 1.9, 2.4, 2.2]  # BayesNCL - NCL on SC per seed
    rows = []
    for s in range(8):
        for v, sc in ((B, 20.0 + d[s]), (N, 20.0)):
            rows.append(row(v, s, MAIN, sc=sc, probe_top1=50.0 + (1.0 + s / 10 if v == B else 0.0),
                            pilot_of=MAIN if s < 3 else ""))
    df = frame(rows)
    comps = {c.claim: c for _, cs in judge.claims_rows(df) for c in cs}
    p1 = stats.ttest_1samp(d[:3], 0, alternative="greater").pvalue
    p2 = stats.ttest_1samp(d[3:], 0, alternative="greater").pvalue
    assert not p1 < V.EARLY * 0.0125 and naive.two_stage_rejects(p1, p2, 0.0125)  # the primary share, one-sided
    assert comps["1a"].looks[0].n == (3,) and comps["1a"].looks[1].n == (5,) and comps["1a"].result.n == (8,)
    assert comps["1a"].family == "holds (family, look 2)"
    assert comps["2a"].family == "holds (family, look 1)"  # decided on the pilot: it stands
    md = claims_table.render_claims(df, "md")
    assert "Two looks (docs/METHOD.md section 9, \"Planning\"): look 1 judged the pilot's seeds at 0.01" in md
    assert "secondary tested at 0.05 over two looks" in md
    single = {c.claim: c for _, cs in judge.claims_rows(frame([{**r, "pilot_of": ""} for r in rows])) for c in cs}
    assert single["1a"].family == "holds (family)" and single["1a"].looks == ()


def test_two_looks_on_arrays():
    """two_looks by hand: look 1 decides at EARLY of a comparison's share; look 2 combines; a comparison with no
    added seeds stays at look 1; a stuck primary claim passes nothing on, the one that holds half its share."""
    nan = math.nan

    def tests(*p):
        return np.broadcast_to(np.array(p, float), (2, 2, len(p)))
    prim = np.array([True, True, False])
    # 1a held at look 1 (one-sided 0.0001 < 0.2 x 0.0125); 2a stuck, no seeds added; the secondary at look 2: what
    # 1a passed on
    codes, ctl, look = V.two_looks(tests(0.0001, 0.5, 0.01), tests(nan, nan, 0.0005), prim)
    assert codes.tolist() == [V.HOLD, V.OPEN, V.HOLD] and ctl.all() and look.tolist() == [1, 1, 2]
    assert naive.two_stage_rejects(0.01, 0.0005, 0.025 / 4)  # 1a's half of its half: a quarter of 0.025
    # the same secondary with both primary claims stuck: no level, its plain verdict not controlled
    codes, ctl, _ = V.two_looks(tests(0.5, 0.5, 0.01), tests(0.5, 0.5, 0.0005), prim)
    assert codes.tolist() == [V.OPEN] * 3 and ctl.tolist() == [True, True, False]


def test_a_secondary_verdict_the_graph_leaves_uncontrolled_names_its_look():
    """Both primary claims open at both looks: 1c gets no level; its verdict is its plain one on all seeds, marked
    not controlled, at look 2 (seeds were added)."""
    se_gap = [0.5, -0.3, 0.1, 0.30, 0.31, 0.29, 0.30, 0.32]  # NCL - BayesNCL per seed: open on 0-2, clear on all
    probe = [3.0, -4.0, 1.0, -2.0, 5.0, -6.0, 2.0, 0.0]  # 2a: wide, open
    sc = [1.0, -1.0, 0.5, -0.5, 0.2, -0.2, 0.1, -0.1]  # 1a: open
    rows = []
    for s in range(8):
        for v in (B, N):
            rows.append(row(v, s, MAIN, sc=20.0 + (sc[s] if v == B else 0.0),
                            se_sum=2.0 - (se_gap[s] if v == B else 0.0),
                            probe_top1=50.0 + (probe[s] if v == B else 0.0), pilot_of=MAIN if s < 3 else ""))
    comps = {c.claim: c for _, cs in judge.claims_rows(frame(rows)) for c in cs}
    assert comps["2a"].family == "inconclusive (family, look 2)"
    assert comps["1c"].verdict == HOLDS and comps["1c"].family == "holds (not controlled, look 2)"


def test_claims_not_run_keep_their_primary_flag():
    missing = dict(judge.claims_rows(frame([])))[""]
    assert [c.claim for c in missing if c.primary] == ["1a", "2a"]


def test_a_grown_grids_pilot_key_is_checked():
    wf = demo_grid()
    for bad in ([1], {"pilot": [0, 1]}):
        with pytest.raises(ConfigError, match=r"^plan.pilot: expected \{set: \[seeds\]\}, as `bayesncl plan`"):
            grid.pilot_seeds({**wf, "plan": bad})
    with pytest.raises(ConfigError) as e:
        grid.pilot_seeds({**wf, "plan": {"pilot": {"table9": [0]}}})
    assert str(e.value) == ("plan.pilot.table9: the grid has no set 'table9'; the plan was written for another grid "
                            "(rerun `bayesncl plan` with this grid's --grid)")


# --------------------------------------------------------------------------- the price
def two_datasets() -> dict:
    """Tables 1-2 of the demo grid on its synthetic set and CIFAR-10."""
    wf = demo_grid()
    wf["datasets"]["cifar10"] = {"data": {"dataset": "cifar10", "root": "data/cifar10"}}
    wf["sets"] = {name: {**wf["sets"][name], "datasets": ["synthetic", "cifar10"]} for name in ("table1", "table2")}
    return wf


def test_the_price_is_each_rows_own_datasets_added_runs_with_their_start_up():
    """A grid of two datasets: each row's GPU-hours are its own dataset's added runs, each as its jobs hold the GPU
    (pretraining, its start-up and the evaluation's sections with theirs); the overlay's are every added run's."""
    from bayesncl.planning.estimate import PRETRAIN_START_S, measured_rates, run_cost

    wf = two_datasets()
    df = frame([*pilot_frame().to_dict("records"),
                *pilot_frame(d1a=exact(9.0, 8.0), dataset="cifar10").to_dict("records")])
    rates = measured_rates("h200")
    p = plan.make_plan(df, wf, rates)
    base = set(grid.expand_grid(wf))
    new = {rid: r for rid, r in grid.expand_grid(plan.grown(wf, plan.overlay(p, wf))).items() if rid not in base}

    flops, costs = {}, {}

    def cost(r):  # estimate's, each run once (its model's FLOPs counted once)
        if r.run_id not in costs:
            costs[r.run_id] = run_cost(r, rates, None, flops)
        return costs[r.run_id]

    def held(r):
        return cost(r)["pretrain_h"] + PRETRAIN_START_S / 3600 + cost(r)["eval_held_h"]
    assert p.runs_added == len(new) and p.gpu_h == pytest.approx(sum(held(r) for r in new.values()))
    assert p.gpu_h > sum(cost(r)["pretrain_h"] + cost(r)["eval_h"] for r in new.values())  # not the work alone
    rows = [n for n in p.needs if n.add and n.claim == "1a"]
    assert {n.dataset for n in rows} == {"synthetic", "cifar10"}
    for n in rows:
        alone = Plan([n], p.pilot, {s: n.add for s in n.sets})
        added = {rid: r for rid, r in grid.expand_grid(plan.grown(wf, plan.overlay(alone, wf))).items()
                 if rid not in base}
        assert {r.config["data"]["dataset"] for r in added.values()} == {"synthetic", "cifar10"}
        mine = sum(held(r) for r in added.values() if r.config["data"]["dataset"] == n.dataset)
        assert n.gpu_h == pytest.approx(mine)


# --------------------------------------------------------------------------- the command
def test_the_plan_command(tmp_path, capsys):
    csv = tmp_path / "runs.csv"
    pilot_frame().to_csv(csv, index=False)
    grid_file = ROOT / "config" / "tiny.yaml"  # priced quickly: a few small runs
    assert main(["plan", "--grid", str(grid_file)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no pilot: run the grid once" in err and "--pilot" in err
    out = tmp_path / "plan.yaml"
    assert main(["plan", "--grid", str(grid_file), "--pilot", str(csv), "--out", str(out),
                 "--text", str(tmp_path / "plan.md")]) == 0
    printed = capsys.readouterr().out
    assert "Seeds each claim needs" in printed and " 1a " in printed and "The primary claims: " in printed
    assert "GPU-hours on one NVIDIA H200" in printed and f"overlay: {out}" in printed
    assert (tmp_path / "plan.md").read_text() in printed
    layer = yaml.safe_load(out.read_text())
    assert set(layer) == {"seeds", "sets", "plan"} and out.read_text().startswith("# bayesncl plan")
    big = plan.grown(yaml.safe_load(grid_file.read_text()), layer)
    assert main(["plan", "--grid-json", json.dumps(big), "--pilot", str(csv), "--out", str(tmp_path / "p2.yaml")]) == 0
    assert "already a second look" in capsys.readouterr().out
    assert yaml.safe_load((tmp_path / "p2.yaml").read_text()) == {}


def test_the_plan_command_plans_the_grids_declared_claims(tmp_path, capsys):
    csv = tmp_path / "runs.csv"
    pilot_frame().to_csv(csv, index=False)
    wf = demo_grid()
    wf["claims"] = [{"id": "D1", "metric": "sc", "left": B, "right": "SimCLR", "relation": ">"}]
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(wf))
    assert main(["plan", "--grid", str(tmp_path / "g.yaml"), "--pilot", str(csv)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.split()[1:2] == ["D1"])
    assert line.split()[2] == "secondary" and line.split()[3] == "5"


def test_plan_help_prints_no_doubled_percent(capsys):
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    out = capsys.readouterr().out
    assert "80% power" in out and "%%" not in out


def test_the_plans_words():
    wf = demo_grid()
    against = frame([row(v, s, MAIN, sc=20.0 + (-1.0 - s if v == B else 0.0), **OTHERS) for v in (B, N)
                     for s in range(3)])
    need = {n.claim: n for n in plan.make_plan(against, wf).needs}
    assert need["1a"].why == "the pilot's difference is not in the claim's direction: no number of seeds is planned"
    p = plan.make_plan(pilot_frame(), wf)
    text = plan.render(p, {"synthetic": "Synthetic"})
    head, rest = text.split("\n", 1)
    assert head.startswith("Seeds each claim needs (docs/METHOD.md section 9, \"Planning\"): look 1 judges the "
                           "pilot's seeds at 0.01, look 2 all the seeds at the rest of 0.05")
    assert text.endswith(f"\n\nGrow: {', '.join(f'{s} +{k}' for s, k in p.grow.items())}.\n")
    cols = next(line.split() for line in rest.splitlines() if line.startswith("Synthetic  1a "))
    assert cols[:14] == ["Synthetic", "1a", "primary", "5", "4.19", f"{plan.upper_sd(4.19, 4):.3g}", "6.45", "6.45",
                         "0.013", "80%", "5", "10", "-"][:14]
    p.gpu, p.gpu_h, p.runs_added = "NVIDIA H200", 12.345, 7
    for n in p.needs:
        n.gpu_h = 0.0123
    text = plan.render(p)
    assert "\nThe overlay adds 7 runs: 12.3 GPU-hours on one NVIDIA H200" in text
    assert next(line for line in text.splitlines() if line.startswith("synthetic  1a ")).split()[12] == "0.012"
    p.gpu, p.unpriced = "", "GPU-hours not priced: give --images"
    assert plan.render(p).endswith("\nGPU-hours not priced: give --images.\n")
    lines = plan.render(plan.make_plan(pilot_frame(), wf)).splitlines()
    not_run = next(line.split() for line in lines if line.split()[1:2] == ["7a"])
    assert not_run[0] == "-" and not_run[3:13] == ["-"] * 10
    assert plan.render(Plan([], {})).endswith("\n\nGrow: nothing.\n")


def test_the_family_line_without_a_stuck_primary_claim():
    planned = Need("synthetic", "1a", "", "primary", add=5, power=0.9)
    held = Need("synthetic", "2a", "", "primary", why="decided at look 1: holds (family)")
    gone = Need("cifar10", "2a", "", "primary", why="not run: run its sets first")
    sec = Need("synthetic", "4", "", "secondary", add=3)
    assert plan.family_line(Plan([planned, held, gone, sec], {})) == (
        "The primary claims: planned for a joint power of 80% at least, each at 90%: 1a (synthetic); held at look 1: "
        "2a (synthetic). The secondary claims are tested at the level the primary claims pass on; planned at it: "
        "4 (synthetic).")
    assert plan.family_line(Plan([], {})) == ("No primary claim ran: the comparisons are one family. No secondary "
                                              "claim is planned.")


def test_a_set_grows_by_the_most_any_of_its_comparisons_needs():
    """1a, declared at a small effect, needs the most seeds of Table 1's comparisons and comes first: the ones after
    it need fewer and must not shrink the set's growth."""
    wf = {**demo_grid(), "plan": {"effects": {"1a": 2.0}}}
    p = plan.make_plan(pilot_frame(), wf)
    adds = [n.add for n in p.needs if n.add and "table1" in n.sets]
    assert len(set(adds)) > 1 and adds[0] == max(adds)
    assert p.grow["table1"] == max(adds)


def test_a_difference_on_the_claims_bound_cannot_hold_there():
    """A "not worse" claim planned at exactly its margin (a distance of 0 from its bound) is no seed count: no
    number of seeds gives it power there."""
    wf = {**demo_grid(), "plan": {"effects": {"2a": -1.0}}}
    need = {n.claim: n for n in plan.make_plan(pilot_frame(), wf).needs}["2a"]
    assert need.add is None and need.why.startswith("cannot hold at its margin: the declared effect -1 lies beyond "
                                                    "its bound -1")


def test_with_no_primary_claim_to_pass_level_on_a_secondary_one_gets_none():
    """1a against its direction and 2a beyond its margin: no primary claim holds or is planned, so the secondary
    comparisons have no level to be planned at, and say so (not "more than 100 seeds")."""
    p = plan.make_plan(pilot_frame(d1a=exact(-2.0, 3.0), d2a=exact(-4.0, 3.0)), demo_grid())
    tested = [n for n in p.needs if n.family == "secondary" and n.sd == n.sd and n.sd_plan == n.sd_plan]
    assert tested and {n.why for n in tested} == {"no level: no primary claim holds or is planned to pass level on"}
    assert not p.grow
