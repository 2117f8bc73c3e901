"""The claims table (bayesncl.report.claims) on constructed runs.csv rows: the verdict rule of METHOD.md
section 9 against scipy's t-tests, each claim's wiring (which sets, metric, direction, points), NaN seeds,
architectures, flags (fast; no torch)."""

from __future__ import annotations

import io
import json
import math
import random
import re
import warnings

import numpy as np
import pytest
from scipy import stats

from bayesncl.report import claims, claims_table, judge, summary, tables, verdicts
from helpers.claims import AGAINST, B, FAILS, FOR, HOLDS, MAIN, N, NOT_RUN, frame, full_grid, row, wired_rows


def comparisons(df, dataset="synthetic") -> dict[str, list]:
    out: dict[str, list] = {}
    for d, comps in judge.claims_rows(df):
        if d == dataset:
            for c in comps:
                out.setdefault(c.claim, []).append(c)
    return out


def one(df, cid, dataset="synthetic"):
    (c,) = comparisons(df, dataset)[cid]
    return c


# --------------------------------------------------------------------------- the rule, against scipy
def reference(left, right, kind: verdicts.Kind, better: str = "up") -> dict:
    """METHOD.md section 9 written out with scipy.stats: ``left``/``right`` are (seed, value) pairs (right may
    be a constant); returns the test, n, the signed mean difference, the 95% interval and the verdict."""
    fin = lambda side: [(s, v) for s, v in side if math.isfinite(v)]  # noqa: E731
    sign = -1.0 if better == "down" and kind.name != "within" else 1.0
    left = fin(left)
    ci = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # scipy on identical values (std 0)
        if not isinstance(right, list):
            x = [sign * (v - right) for _, v in left]
            if not x:
                return {"verdict": NOT_RUN}
            test, n, diff, ref = "one-sample", (len(x),), float(np.mean(x)), abs(right)
            if len(x) >= 2:
                ci = stats.ttest_1samp(x, 0.0).confidence_interval(0.95)
        else:
            right = fin(right)
            if not left or not right:
                return {"verdict": NOT_RUN}
            lv, rv = dict(left), dict(right)
            shared = sorted(set(lv) & set(rv))
            if len(shared) >= 2:
                a, b = [lv[s] for s in shared], [rv[s] for s in shared]
                test, n = "paired", (len(shared),)
                ci = (stats.ttest_rel(a, b) if sign > 0 else stats.ttest_rel(b, a)).confidence_interval(0.95)
            else:
                a, b = list(lv.values()), list(rv.values())
                test, n = "Welch", (len(a), len(b))
                if len(a) >= 2 and len(b) >= 2:
                    pair = (a, b) if sign > 0 else (b, a)
                    ci = stats.ttest_ind(*pair, equal_var=False).confidence_interval(0.95)
            diff, ref = sign * float(np.mean(np.subtract(a, b)) if test == "paired" else np.mean(a) - np.mean(b)), \
                abs(float(np.mean(b)))
    tol = kind.margin * ref if kind.relative else kind.margin
    lo, hi = (float(ci.low), float(ci.high)) if ci is not None else (math.nan, math.nan)
    if kind.name == "better":
        holds, fails, lean = lo > 0, hi < 0, diff > 0
    elif kind.name == "not worse":
        holds, fails, lean = lo > -tol, hi < -tol, diff > -tol
    else:
        holds, fails, lean = -tol <= lo and hi <= tol, lo > tol or hi < -tol, abs(diff) <= tol
    verdict = HOLDS if ci is not None and holds else FAILS if ci is not None and fails else FOR if lean else AGAINST
    return {"verdict": verdict, "test": test, "n": n, "diff": diff, "low": lo, "high": hi, "tol": tol, "ref": ref}


def agrees(got: verdicts.Outcome, want: dict) -> None:
    assert got.verdict == want["verdict"], (got, want)
    if want["verdict"] == NOT_RUN:
        assert got.test == ""
        return
    assert (got.test, got.n) == (want["test"], want["n"])
    assert got.diff == pytest.approx(want["diff"], abs=1e-9) and got.tol == pytest.approx(want["tol"])
    assert got.ref == pytest.approx(want["ref"])
    if math.isnan(want["low"]):
        assert not got.has_interval
    else:
        assert (got.low, got.high) == (pytest.approx(want["low"], abs=1e-9), pytest.approx(want["high"], abs=1e-9))


# Written from the spec, not read from bayesncl: ">" has no margin, ">=" a margin of 1 point.
KINDS = {"better": verdicts.Kind("better", 0.0), "not worse": verdicts.Kind("not worse", 1.0),
         "within": verdicts.Kind("within", 1.0), "within relative": verdicts.Kind("within", 0.06, relative=True)}
BASE = [10.0, 14.0, 9.0, 12.0]      # per seed: paired and unpaired tests differ on these
NOISE = [-1.0, 0.5, 1.0, -0.5]


@pytest.mark.parametrize("kind, better", [("better", "up"), ("better", "down"), ("not worse", "up"),
                                          ("not worse", "down"), ("within", "up"), ("within relative", "up")])
@pytest.mark.parametrize("test", ["paired", "Welch"])
def test_rule_reaches_every_verdict_and_matches_scipy(kind, test, better):
    k = KINDS[kind]
    scale = 0.06 * 100.0 if k.relative else 1.0  # the tolerance (relative: 6% of a right side near 100)
    offset = 88.0 if k.relative else 0.0
    reached = set()
    for shift in np.linspace(-3, 3, 24) * scale:  # no exact tie
        for spread in np.array([0.05, 0.4, 1.5]) * scale:
            right = [(s, offset + b) for s, b in enumerate(BASE)]
            if test == "paired":
                left = [(s, offset + b + shift + spread * e) for s, (b, e) in enumerate(zip(BASE, NOISE))]
            else:  # no seed in common; the right side has one run more and its own spread
                right = [(s, offset + 11.0 + spread * e / 2) for s, e in enumerate(NOISE + [0.2])]
                left = [(s + 10, offset + 11.0 + shift + spread * e) for s, e in enumerate(NOISE)]
            if better == "down":  # the same evidence, the claim stated the other way round
                left, right = right, left
            want = reference(left, right, k, better)
            got = verdicts.compare(left, right, k, better)
            agrees(got, want)
            assert got.test == test
            reached.add(got.verdict)
    assert reached == {HOLDS, FAILS, FOR, AGAINST}, (kind, test, reached)


@pytest.mark.parametrize("kind, better", [("better", "up"), ("better", "down"), ("not worse", "up"),
                                          ("within", "up"), ("within relative", "up")])
@pytest.mark.parametrize("const", [0.0, 100.0])
def test_one_sample_rule_matches_scipy(kind, better, const):
    """Claims 7a-b compare with 0; the rule is the same against any constant (2 values already give an interval)."""
    k = KINDS[kind]
    scale = 0.06 * const if k.relative and const else 1.0
    reached = set()
    for shift in np.linspace(-3, 3, 24) * scale:
        for spread, noise in ((0.02, NOISE), (0.3, NOISE), (0.3, NOISE[:2])):
            left = [(s, const + shift + spread * scale * e) for s, e in enumerate(noise)]
            want = reference(left, const, k, better)
            got = verdicts.compare(left, const, k, better)
            agrees(got, want)
            assert got.test == "one-sample" and got.has_interval
            reached.add(got.verdict)
    if not (k.relative and const == 0):  # a relative tolerance around 0 is 0: nothing lies inside
        assert reached == {HOLDS, FAILS, FOR, AGAINST}, reached


def test_rule_matches_scipy_on_random_rows():
    """Random seed sets (shared or not, NaN values) and values: the test chosen, the interval and the verdict."""
    rng = random.Random(0)
    for i in range(400):
        def side():
            seeds = rng.sample(range(6), rng.randint(0, 5))
            return [(s, math.nan if rng.random() < 0.15 else round(rng.gauss(30, 5), 2)) for s in seeds]
        kind = list(KINDS.values())[i % 4]
        better = "down" if i % 3 == 0 else "up"
        left, right = side(), side()
        agrees(verdicts.compare(left, right, kind, better), reference(left, right, kind, better))


def test_fewer_than_two_seeds_never_decide():
    # One seed either way: inconclusive, whichever way it leans, however large the difference.
    for left, right, lean in (([(0, 90.0)], [(0, 10.0), (1, 11.0)], FOR),
                              ([(0, 1.0)], [(0, 10.0), (1, 11.0)], AGAINST),
                              ([(0, 90.0), (1, 91.0)], [(5, 10.0)], FOR),
                              ([(0, 1.0), (1, 1.5)], [(5, 10.0)], AGAINST)):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no variance of one value is taken (numpy would warn on the terminal)
            got = verdicts.compare(left, right)
        assert got.verdict == lean and got.test == "Welch" and not got.has_interval
        assert math.isnan(got.se) and math.isnan(got.dof)
    # One seed shared out of two each: not a paired test; Welch decides on both sides' seeds.
    got = verdicts.compare([(0, 10.0), (1, 12.0)], [(1, 5.0), (2, 6.0)])
    assert got.test == "Welch" and got.n == (2, 2) and got.has_interval
    # A NaN seed leaves one pair: no pairing, Welch over each side's finite seeds.
    got = verdicts.compare([(0, 10.0), (1, math.nan), (2, 13.0)], [(0, 5.0), (1, 6.0), (3, 4.0)])
    assert got.test == "Welch" and got.n == (2, 3)
    assert verdicts.compare([(0, 1.0)], 0.0).verdict == FOR and not verdicts.compare([(0, 1.0)], 0.0).has_interval
    # No finite value on a side: not run.
    assert verdicts.compare([(0, math.nan)], [(0, 1.0), (1, 2.0)]).verdict == NOT_RUN
    assert verdicts.compare([], [(0, 1.0)]).verdict == NOT_RUN and verdicts.compare([], 0.0).verdict == NOT_RUN
    # Repeated seeds on a side cannot be paired.
    assert verdicts.compare([(0, 1.0), (0, 2.0), (1, 3.0)], [(0, 0.0), (1, 0.5)]).test == "Welch"


def test_std_zero_gives_a_degenerate_interval():
    flops_b, flops_n = 0.004567, 0.004502  # the demo's GFLOPs: equal on every seed
    for right_seeds in ((0, 1, 2), (5, 6, 7)):  # paired, Welch
        got = verdicts.compare([(s, flops_b) for s in range(3)], [(s, flops_n) for s in right_seeds],
                             verdicts.within(0.01, relative=True))
        assert got.low == pytest.approx(flops_b - flops_n) and got.high == pytest.approx(flops_b - flops_n)
        assert got.verdict == FAILS  # 1.44% > 1%, decided like any interval (not NaN, not "inconclusive")
        assert verdicts.compare([(s, flops_b) for s in range(3)], [(s, flops_n) for s in right_seeds],
                              verdicts.within(0.02, relative=True)).verdict == HOLDS
    same = verdicts.compare([(s, 2.0) for s in range(3)], [(s, 2.0) for s in range(3)])
    assert (same.low, same.high, same.verdict) == (0.0, 0.0, AGAINST)  # a tie is no evidence for ">"
    # "within" is strict, as its familywise test (p < alpha): an interval touching the tolerance does not hold
    tie = [(s, 2.0) for s in range(3)]
    assert verdicts.compare(tie, tie, verdicts.within(0.0)).verdict == FOR  # the lean: |0| <= 0
    assert verdicts.compare(tie, tie, verdicts.within(0.1)).verdict == HOLDS
    shifted = verdicts.compare([(s, 3.0 + s) for s in range(3)], [(s, 1.0 + s) for s in range(3)])
    assert (shifted.low, shifted.high, shifted.verdict) == (2.0, 2.0, HOLDS)


def test_direction_is_up_or_down():
    with pytest.raises(ValueError, match="better"):
        verdicts.compare([(0, 1.0), (1, 2.0)], [(0, 0.0), (1, 1.0)], verdicts.BETTER, "higher")


def test_combine_several_parts():
    def part(verdict, diff):
        return verdicts.Outcome(verdict, "paired", (3,), diff)
    assert verdicts.combine([part(HOLDS, 3), part(HOLDS, 1)])[0] == HOLDS
    assert verdicts.combine([part(HOLDS, 3), part(FAILS, -1)])[0] == FAILS
    assert verdicts.combine([part(FOR, 3), part(FAILS, -1)])[0] == FAILS
    assert verdicts.combine([part(HOLDS, 3), part(FOR, 1)]) == (FOR, part(FOR, 1))
    assert verdicts.combine([part(FOR, 3), part(AGAINST, -1)]) == (AGAINST, part(AGAINST, -1))
    # a lean against is weaker than a lean for whatever the differences ("within": leaning for at -0.9, against at 1.5)
    assert verdicts.combine([part(FOR, -0.9), part(AGAINST, 1.5)]) == (AGAINST, part(AGAINST, 1.5))
    assert verdicts.combine([part(FOR, 3), part(FOR, 1)])[1].diff == 1  # among equals, the smaller difference
    assert verdicts.combine([part(HOLDS, 3), verdicts.Outcome(NOT_RUN)])[0] == NOT_RUN
    # "not run" is weaker than "does not hold", in either order (its diff is NaN, so only the rank decides)
    assert verdicts.combine([part(FAILS, -1), verdicts.Outcome(NOT_RUN)])[0] == NOT_RUN
    assert verdicts.combine([verdicts.Outcome(NOT_RUN), part(FAILS, -1)])[0] == NOT_RUN


# --------------------------------------------------------------------------- through runs.csv rows
def _sc_pair(bayes, ncl, extra=(), seeds=None):
    seeds = seeds or (range(len(bayes)), range(len(ncl)))
    return frame([row("BayesNCL (STE)", s, "table1", sc=v) for s, v in zip(seeds[0], bayes)]
                 + [row("NCL", s, "table1", sc=v) for s, v in zip(seeds[1], ncl)] + list(extra))


def test_claim_rows_judge_by_the_rule():
    rng = random.Random(1)
    for i in range(12):
        bayes = [round(rng.uniform(20, 40), 2) for _ in range(rng.randint(0, 4))]
        ncl = [round(rng.uniform(20, 40), 2) for _ in range(rng.randint(1, 4))]
        c = one(_sc_pair(bayes, ncl), "1a")
        agrees(c.result, reference(list(enumerate(bayes)), list(enumerate(ncl)), verdicts.BETTER))
        se = frame([row("BayesNCL (STE)", s, "table1", se_sum=v) for s, v in enumerate(bayes)]
                   + [row("NCL", s, "table1", se_sum=v) for s, v in enumerate(ncl)])
        agrees(one(se, "1c").result, reference(list(enumerate(bayes)), list(enumerate(ncl)), verdicts.BETTER, "down"))
    # Paired differences of 5.19 / 3.40 / 1.88 do not decide "holds" on 3 seeds.
    c = one(_sc_pair([24.0 + 5.19, 22.0 + 3.40, 20.0 + 1.88], [24.0, 22.0, 20.0]), "1a")
    assert c.verdict == FOR and (round(c.result.low, 1), round(c.result.high, 1)) == (-0.6, 7.6)


def test_rows_show_both_sides_the_interval_and_the_test():
    c = one(_sc_pair([30.0, 32.0, 31.0, 35.0], [20.0, 21.0, 19.0], seeds=([0, 1, 2, 3], [0, 1, 2])), "1a")
    assert c.result.test == "paired" and c.result.n == (3,)
    # The sides over the seeds the test used: seed 3 of BayesNCL has no partner.
    assert c.left.stat.mean == pytest.approx(31.0) and c.left.stat.n == 3 and c.left.runs == 4
    md = claims_table.render_claims(_sc_pair([30.0, 32.0, 31.0, 35.0], [20.0, 21.0, 19.0],
                                       seeds=([0, 1, 2, 3], [0, 1, 2])), "md")
    line = next(x for x in md.splitlines() if x.startswith("| 1a"))
    cells = [x.strip() for x in line.split("|")[1:-1]]
    assert cells == ["1a", "SC: BayesNCL (STE) > NCL", "31.00 ± 1.00 (3/4)", "20.00 ± 1.00 (3)",
                     "+11.00 [8.52, 13.48]", "paired (3)", "-", "no untrained runs", "36.14 vs 14.93", "holds", "-",
                     "holds (family)"]
    header = next(x for x in md.splitlines() if x.startswith("|  "))
    assert [x.strip() for x in header.split("|")[1:-1]] == ["", "Claim", "Left", "Right", "Δ [95% CI]", "Test (n)",
                                                            "Margin", "Δ at init [95% CI]", "Paper", "Verdict",
                                                            "Training", "Family (graph)"]
    se = frame([row("BayesNCL (STE)", s, "table1", se_sum=v) for s, v in enumerate([1.0, 1.1])]
               + [row("NCL", s, "table1", se_sum=v) for s, v in enumerate([2.0])])
    line = next(x for x in claims_table.render_claims(se, "md").splitlines() if x.startswith("| 1c"))
    assert "| Welch (2, 1), right - left |" in line and "+0.950 (no CI)" in line
    assert "inconclusive (leans for)" in line


def test_nan_seeds_are_counted_and_left_out_of_both_sides():
    # Seed 1 of BayesNCL collapsed (no active dimension: SC NaN): the pairs are seeds 0 and 2.
    df = _sc_pair([30.0, math.nan, 34.0], [20.0, 21.0, 25.0])
    c = one(df, "1a")
    assert c.result.test == "paired" and c.result.n == (2,)
    assert c.right.stat.mean == pytest.approx(22.5)  # seeds 0 and 2 of NCL, not all three
    assert (c.left.runs, c.left.nan, c.right.stat.n) == (3, 1, 2)
    md = claims_table.render_claims(df, "md")
    assert "32.00 ± 2.83 (2/3; 1 NaN)" in md and "22.50 ± 3.54 (2/3)" in md
    # Tables: the cell says it averages 2 of 3 seeds; the caption explains the mark.
    tex, md1 = tables.render_table(df, "table1"), tables.render_table(df, "table1", "md")
    assert r"$\mathbf{32.00}_{\pm 2.83}^{2/3}$" in tex and "**32.00 ± 2.83** (2/3)" in md1
    assert "averages the k of its row's n seeds" in md1 and "Mean ± std over 3 seeds" in md1
    assert "(k/n)" in md1 and "(2/3)" not in tables.render_table(_sc_pair([1.0, 2.0], [1.0, 2.0]), "table1", "md")
    # Every seed of a side NaN: not run, and the cell says why.
    dead = _sc_pair([math.nan] * 3, [20.0, 21.0, 25.0])
    assert one(dead, "1a").verdict == NOT_RUN
    assert "- (0/3; 3 NaN)" in claims_table.render_claims(dead, "md")


def test_tolerance_claims():
    def bg(bayes, ncl):
        return frame([row("BayesNCL (STE)", s, "table6", bg_acc=v) for s, v in enumerate(bayes)]
                     + [row("NCL", s, "table6", bg_acc=v) for s, v in enumerate(ncl)])
    assert one(bg([93.0, 94.0, 93.5], [93.1, 94.2, 93.4]), "8").verdict == HOLDS
    assert one(bg([95.0, 95.2, 95.1], [93.0, 93.1, 93.0]), "8").verdict == FAILS      # 2 points apart
    assert one(bg([93.0, 96.0, 94.0], [93.0, 93.1, 93.0]), "8").verdict == AGAINST    # +1.3, wide interval
    assert one(bg([93.4], [93.3]), "8").verdict == FOR                                # one seed each
    assert one(bg([94.0], [93.0]), "8").verdict == FOR                                # exactly 1 point: within
    assert one(bg([94.5], [93.0]), "8").verdict == AGAINST
    assert one(bg([93.4], []), "8").verdict == NOT_RUN

    def cost(bayes_min, ncl_min, bayes_gf=1.419, ncl_gf=1.416):
        return frame([row("BayesNCL (STE)", s, "table7", train_minutes=v, gflops=bayes_gf) for s, v in enumerate(bayes_min)]
                     + [row("NCL", s, "table7", train_minutes=v, gflops=ncl_gf) for s, v in enumerate(ncl_min)])
    df = cost([74.6, 74.7, 74.55], [70.95, 71.0, 70.9])  # +5.2%, interval [5.1, 5.3]%
    assert one(df, "12a").verdict == HOLDS and one(df, "12b").verdict == HOLDS
    df = cost([80.0, 80.1, 80.3], [70.95, 71.0, 70.9], bayes_gf=1.5)  # +12.8% time, +5.9% FLOPs
    assert one(df, "12a").verdict == FAILS and one(df, "12b").verdict == FAILS
    # The difference is shown in percent of the right side.
    assert "+5.93% [5.93, 5.93]" in claims_table.render_claims(df, "md")
    # One-sided ("at most 6% more"): a cheaper BayesNCL satisfies it, however much cheaper (the README's run
    # read "does not hold" for 19% faster under the old two-sided "within").
    df = cost([57.0, 57.2, 57.1], [70.95, 71.0, 70.9], bayes_gf=1.3)
    assert one(df, "12a").verdict == HOLDS and one(df, "12b").verdict == HOLDS
    assert re.search(r"\| -19\.5\d% \[-19\.\d\d, -19\.\d\d\]", claims_table.render_claims(df, "md"))
    assert one(cost([73.0, 74.5, 76.5], [70.95, 71.0, 70.9]), "12b").verdict == FOR  # +5.2% [-1.0, 11.5]: open
    assert one(cost([75.0, 75.9, 76.8], [70.95, 71.0, 70.9]), "12b").verdict == AGAINST  # +7.0% [4.4, 9.5]
    assert one(cost([76.0], [71.0]), "12b").verdict == AGAINST  # +7.0%, one seed: the lean alone


def test_dynamics_claim_reads_the_last_epoch():
    def dyn(v, s, af_gv, gv_sc):
        return row(v, s, "table3", dyn_epochs="[10, 20]", dyn_af_gv=json.dumps(af_gv), dyn_gv_sc=json.dumps(gv_sc))
    # The first epoch says the opposite: only the last recorded epoch counts.
    df = frame([dyn("NCL", s, [-0.9, 0.6 + s / 10], [0.9, -0.5 - s / 10]) for s in range(3)]
               + [dyn("BayesNCL (STE)", s, [0.9, 0.1 + s / 100], [-0.9, -0.1 + s / 100]) for s in range(3)])
    for cid in ("7a", "7b", "7c", "7d"):
        assert one(df, cid).verdict == HOLDS, cid
    assert one(df, "7a").left.stat.mean == pytest.approx(0.7) and one(df, "7a").result.test == "one-sample"
    assert one(df, "7b").result.diff == pytest.approx(0.6)  # the sign claim "< 0" is judged on -rho
    # BayesNCL flips the sign but keeps the strength: not a weakening (absolute values).
    flipped = frame([dyn("NCL", s, [0.0, 0.6 + s / 100], [0.0, -0.5]) for s in range(3)]
                    + [dyn("BayesNCL (STE)", s, [0.0, -0.7 - s / 100], [0.0, 0.5]) for s in range(3)])
    assert one(flipped, "7c").verdict == FAILS
    # A missing (NaN) value at the last epoch is not replaced by an earlier epoch's; it is counted, and so
    # is a run that recorded no epoch at all.
    undefined = frame([dyn("NCL", s, [0.6, None], [-0.5, None]) for s in range(2)]
                      + [row("NCL", 2, "table3", dyn_epochs="", dyn_af_gv="", dyn_gv_sc="")])
    assert one(undefined, "7a").verdict == NOT_RUN and one(undefined, "7a").left.nan == 3


def test_inverted_u_and_widths():
    def sweep(points, param="lambda", seeds=(0,)):
        return frame([row("BayesNCL (STE)", s, "figure4b", sweep=param, sc=sc + s, **{param: x})
                      for x, sc in points for s in seeds])
    u = sweep([(0.0, 10.0), (1e-5, 20.0), (3e-5, 15.0), (1e-4, 5.0)])
    c = one(u, "11a")
    assert c.verdict == FOR  # one seed per point
    assert (c.left.stat.mean, c.right.stat.mean) == (20.0, 10.0)  # best inner point vs the weaker end part
    assert one(sweep([(0.0, 10.0), (1e-5, 20.0), (3e-5, 25.0), (1e-4, 30.0)]), "11a").verdict == AGAINST
    assert one(sweep([(0.0, 10.0), (1e-5, 20.0)]), "11a").verdict == NOT_RUN  # no inner point
    assert one(u, "11b").verdict == NOT_RUN  # no rho sweep
    # Paired by seed across the sweep: the same offset per seed at every point, so the intervals are exact.
    three = sweep([(0.0, 10.0), (1e-5, 20.0), (1e-4, 5.0)], seeds=(0, 1, 2))
    c = one(three, "11a")
    assert c.verdict == HOLDS and c.result.test == "paired" and c.result.diff == pytest.approx(10.0)
    worse = sweep([(0.0, 10.0), (1e-5, 20.0), (1e-4, 25.0)], seeds=(0, 1, 2))
    c = one(worse, "11a")
    assert c.verdict == FAILS and c.right.stat.mean == pytest.approx(26.0)  # the end that beats it
    # The sweep column decides: the default point (rho 0.8, lambda 3e-5) as a point of the rho sweep only,
    # as when the lambda sweep's values leave out the default, is no lambda point.
    lam = [row("BayesNCL (STE)", 0, "figure4b", sweep="lambda", sc=sc, **{"lambda": x})
           for x, sc in ((0.0, 10.0), (1e-5, 20.0), (1e-4, 5.0))]
    rho = [row("BayesNCL (STE)", 0, "figure4b", sweep="rho", sc=sc, rho=x) for x, sc in ((0.5, 30.0), (0.8, 50.0))]
    c = one(frame(lam + rho), "11a")
    assert "$\\lambda$ = 1e-05 $>$" in c.text and (c.left.stat.mean, c.right.stat.mean) == (20.0, 10.0)

    widths = frame([row(v, s, "figure4a", proj_dim=D, sc=base * D / 32 + s * (1 + D / 100))
                    for v, base in (("NCL", 10.0), ("BayesNCL (STE)", 20.0)) for D in (32.0, 64.0) for s in range(3)])
    comps = comparisons(widths)
    assert [c.verdict for c in comps["10a"]] == [HOLDS]
    assert [c.verdict for c in comps["10b-32"] + comps["10b-64"]] == [HOLDS, HOLDS]  # one id per width
    assert comps["10a"][0].left.stat.mean == pytest.approx(41.64) and comps["10a"][0].right.stat.mean == pytest.approx(21.32)
    assert comps["10a"][0].text == "SC: @A at $D = 64$ $>$ at $D = 32$"  # the setting in its math, as the paper
    assert comps["10b-32"][0].text == "SC at $D = 32$: @A $>$ @B" and comps["10b-32"][0].paper == ""


# --------------------------------------------------------------------------- every claim's wiring
def _pick(rows, variant, set_name, metric, arch="resnet18", last=False, **where):
    out = []
    for r in rows:
        if (r["variant"], r["arch"]) == (variant, arch) and set_name in r["sets"].split(";") \
                and all(r[k] == v for k, v in where.items()):
            out.append((r["seed"], json.loads(r[metric])[-1] if last else r[metric]))
    return out


WIRING = {
    "1a": ("sc", (B, "table1"), (N, "table1"), "better", "up"),
    "1b": ("sc", (B, "table1"), ("Top-k NCL", "table1"), "better", "up"),
    "1c": ("se_sum", (B, "table1"), (N, "table1"), "better", "down"),
    "2a": ("probe_top1", (B, "table2"), (N, "table2"), "not worse", "up"),
    "2b": ("probe_top1", (B, "table2"), ("SimCLR", "table2"), "not worse", "up"),
    "3": ("ret_p10", (B, "table2"), (N, "table2"), "not worse", "up"),
    "4": ("sc", (B, "table1"), ("BayesNCL (Gumbel)", "table1"), "not worse", "up"),
    "5": ("sc", (B, "table4"), ("Soft gate", "table4"), "better", "up"),
    "6a": ("sc", (B, "table4"), ("w/o detach", "table4"), "not worse", "up"),
    "6b": ("sc", (B, "table4"), ("1-layer head", "table4"), "better", "up"),
    "6c": ("sc", (B, "table4"), ("3-layer head", "table4"), "better", "up"),
    "8": ("bg_acc", (B, "table6"), (N, "table6"), "within", "up"),
    "9": ("sc", (B, "table5", {"arch": "resnet50"}), (N, "table5", {"arch": "resnet50"}), "better", "up"),
    "10a": ("sc", (B, "figure4a", {"proj_dim": 2048.0}), (B, "figure4a", {"proj_dim": 16.0}), "better", "up"),
    "12a": ("gflops", (B, "table7"), (N, "table7"), "within 1% of the right", "up"),
    "12b": ("train_minutes", (B, "table7"), (N, "table7"), "within 6% of the right", "up"),
}
WIRED_KINDS = {"better": KINDS["better"], "not worse": KINDS["not worse"], "within": KINDS["within"],
               "within 1% of the right": verdicts.Kind("within", 0.01, relative=True),
               "within 6% of the right": verdicts.Kind("within", 0.06, relative=True)}


def _side(rows, spec, metric, last=False, absolute=False):
    variant, set_name, *where = spec
    where = dict(where[0]) if where else {}
    vals = _pick(rows, variant, set_name, metric, last=last, **where)
    return [(s, abs(v)) for s, v in vals] if absolute else vals


@pytest.mark.parametrize("order", ["grid", "reversed"])
def test_every_claim_reads_its_sets_metric_direction_and_points(order):
    """Reversed rows: a side is found by its settings, not by coming first (Top-k NCL before NCL, ...)."""
    rows = wired_rows() if order == "grid" else wired_rows()[::-1]
    comps = comparisons(frame(rows))
    expected = dict(WIRING)
    for cid, (metric, lspec, rspec, kind, better) in expected.items():
        (c,) = comps[cid]
        left, right = _side(rows, lspec, metric), _side(rows, rspec, metric)
        assert (c.left.label, c.right.label) == (lspec[0], rspec[0]), cid
        want = reference(left, right, WIRED_KINDS[kind], better)
        agrees(c.result, want)
        if want["test"] == "paired":  # the sides over the seeds they share
            shared = {s for s, _ in left} & {s for s, _ in right}
            left, right = [(s, v) for s, v in left if s in shared], [(s, v) for s, v in right if s in shared]
        assert c.left.stat.mean == pytest.approx(np.mean([v for _, v in left])), cid
        assert c.right.stat.mean == pytest.approx(np.mean([v for _, v in right])), cid
    # 10b: one row per width, each its own id, BayesNCL against NCL at the same width.
    tens = [c for d in (16, 32, 2048) for c in comps[f"10b-{d}"]]
    assert [c.text for c in tens] == [f"SC at $D = {d}$: @A $>$ @B" for d in (16, 32, 2048)]
    assert [c.paper for c in tens] == ["", "", "$2\\times$ NCL at $D = 2048$"]
    for c, d in zip(tens, (16.0, 32.0, 2048.0)):
        left, right = _side(rows, (B, "figure4a", {"proj_dim": d}), "sc"), _side(rows, (N, "figure4a", {"proj_dim": d}), "sc")
        agrees(c.result, reference(left, right, verdicts.BETTER))
        assert (c.left.stat.mean, c.right.stat.mean) == (pytest.approx(np.mean([v for _, v in left])),
                                                         pytest.approx(np.mean([v for _, v in right])))
    # 7: NCL's last-epoch correlations against 0, then |rho| of BayesNCL against NCL's (lower is the claim).
    for cid, key, better in (("7a", "dyn_af_gv", "up"), ("7b", "dyn_gv_sc", "down")):
        (c,) = comps[cid]
        left = _side(rows, (N, "table3"), key, last=True)
        agrees(c.result, reference(left, 0.0, verdicts.BETTER, better))
        assert c.left.label == N and c.left.stat.mean == pytest.approx(np.mean([v for _, v in left]))
    for cid, key in (("7c", "dyn_af_gv"), ("7d", "dyn_gv_sc")):
        (c,) = comps[cid]
        assert (c.left.label, c.right.label) == (B, N)
        agrees(c.result, reference(_side(rows, (B, "table3"), key, last=True, absolute=True),
                                   _side(rows, (N, "table3"), key, last=True, absolute=True), verdicts.BETTER, "down"))
    # 11: the best inner point (lambda 1e-5; rho 0.8) against each end, paired by seed; the weaker part shows.
    for cid, param, inner, ends in (("11a", "lambda", 1e-5, (0.0, 1e-4)), ("11b", "rho", 0.8, (0.5, 0.95))):
        (c,) = comps[cid]
        parts = [reference(_side(rows, (B, "figure4b", {param: inner, "sweep": param}), "sc"),
                           _side(rows, (B, "figure4b", {param: e, "sweep": param}), "sc"), verdicts.BETTER) for e in ends]
        weakest = min(parts, key=lambda p: (verdicts._STRENGTH[p["verdict"]], p["diff"]))
        agrees(c.result, weakest)
        assert (c.left.label, c.right.label) == (B, B)
        assert f"= {inner:g} $>$ ends {ends[0]:g}, {ends[1]:g}" in c.text
    assert {c.verdict for cs in comps.values() for c in cs} == {HOLDS, FAILS, FOR, AGAINST}


def test_wiring_verdicts_and_rows_that_a_wrong_reading_would_change():
    """The grid above decides these rows one way; each would change under a plausible mis-wiring."""
    comps = comparisons(frame(wired_rows()))
    v = {cid: cs[0] for cid, cs in comps.items()}
    assert (v["6b"].verdict, v["6c"].verdict) == (FOR, AGAINST)
    assert v["6a"].verdict == HOLDS and -1 < v["6a"].result.low < v["6a"].result.high < 0  # the margin decides
    assert v["9"].verdict == FAILS and "SC (ResNet-50)" in v["9"].text     # Table 1's ResNet-18 runs: holds
    assert v["4"].verdict == FAILS                                         # the sides swapped: holds
    assert v["12a"].verdict == FAILS and v["12a"].result.tol == pytest.approx(0.01 * 0.004502)  # absolute: holds
    assert v["11b"].verdict == FAILS and v["11b"].right.stat.mean > v["11b"].left.stat.mean  # rho 0.95 beats 0.8
    md = claims_table.render_claims(frame(wired_rows()), "md")
    assert "+1.44% [1.44, 1.44]" in md


def test_sides_found_by_settings_with_defaults_for_missing_ones():
    """A runs.csv without gate/detach/head depth (NaN, "") reads them as the defaults: STE, detach, 2 layers."""
    bare = [dict(row(B, s, "table1", sc=30.0 + s), gate="", detach=math.nan, head_depth=math.nan) for s in range(3)]
    twin = [row("3-layer head", s, "table1", sc=50.0 + s) for s in range(3)]  # first, but not the default head
    ncl = [row(N, s, "table1", sc=20.0 + 2 * s) for s in range(3)]
    c = one(frame(twin + bare + ncl), "1a")
    assert (c.left.label, c.left.stat.mean, c.right.stat.mean) == (B, 31.0, 22.0)


CONTROLS = (6, 7, 10, 11)  # Margin, and the controls' columns (Δ at init, Training, Family): test_claims_controls.py


def _plain(cells: list[str]) -> list[str]:
    return [c for i, c in enumerate(cells) if i not in CONTROLS]


def _md_rows_of(md: str) -> list[list[str]]:
    return [_plain([x.strip() for x in re.split(r"(?<!\\)\|", line)[1:-1]]) for line in md.splitlines()
            if line.startswith("| ") and not line.startswith("|  ")]


def _md_row(md: str, cid: str, nth: int = 0) -> list[str]:
    lines = [x for x in md.splitlines() if x.startswith(f"| {cid} ")]
    return _plain([x.strip() for x in lines[nth].split("|")[1:-1]])


def _tex_row(tex: str, cid: str) -> list[str]:
    line = next(x for x in tex.splitlines() if x.startswith(f"{cid} & "))
    return [x.strip() for x in line.removesuffix(r"\\").split(" & ")]


def test_cells_as_printed():
    df = frame(wired_rows())
    md, tex = claims_table.render_claims(df, "md"), claims_table.render_claims(df, "tex")
    assert _md_row(md, "7a")[2:] == ["0.516 ± 0.029 (5)", "0", "+0.516 [0.479, 0.553]", "one-sample (5)", "-", "holds"]
    assert _md_row(md, "7b")[4:6] == ["+0.289 [0.265, 0.314]", "one-sample (5), -left"]
    assert _md_row(md, "1c")[4:6] == ["-0.606 [-0.621, -0.592]", "paired (5), right - left"]
    assert _md_row(md, "12a")[2:] == ["0.004567 ± 0.000000 (5)", "0.004502 ± 0.000000 (5)", "+1.44% [1.44, 1.44]",
                                      "paired (5)", "1.419 vs 1.416", FAILS]
    assert [_md_row(md, cid)[6] for cid in ("1b", "8", "10a", "12b")] == ["-", "93.38 vs 93.33", "36.14 at D = 2048",
                                                                        "75.12 vs 70.95 min"]
    assert _md_row(md, "10a")[1] == "SC: BayesNCL (STE) at D = 2048 > at D = 16"
    assert _md_row(md, "11a")[1:3] == ["SC of BayesNCL (STE): λ = 1e-05 > ends 0, 0.0001 (right: 0)",
                                       "28.14 ± 0.78 (3)"]
    assert _md_row(md, "11a")[6] == "worse for λ > 4e-5" and _md_row(md, "11b")[6] == "inverted U"
    assert _md_row(md, "5")[2:4] == ["22.14 ± 0.78 (3/5)", "28.66 ± 0.89 (3)"]  # paired on the 3 shared seeds
    assert _tex_row(tex, "12a")[4] == r"$+1.44$\% [1.44, 1.44] \newline paired (5) \newline margin $+$1\% (paper)"
    assert _tex_row(tex, "5")[2:5] == [r"\begin{tabular}[t]{@{}r@{}}$22.14_{\pm 0.78}$\\(3/5)\end{tabular}",
                                       r"\begin{tabular}[t]{@{}r@{}}$28.66_{\pm 0.89}$\\(3)\end{tabular}",
                                       r"$-6.52$ [$-$6.80, $-$6.24] \newline paired (3)"]
    assert _tex_row(tex, "7b")[3:5] == ["0", r"$+0.289$ [0.265, 0.314] \newline one-sample (5), $-$left"]
    assert _tex_row(tex, "6c")[-1] == r"inconclusive \newline (leans against) \newline family: inconclusive"
    # Equal sides: an exact zero difference has no sign, whichever way the claim points.
    same = frame([row(v, s, "table1", sc=20.0 + s, se_sum=1.5 + s) for v in (B, N) for s in range(3)])
    md = claims_table.render_claims(same, "md")
    assert _md_row(md, "1a")[4] == "+0.00 [0.00, 0.00]" and _md_row(md, "1c")[4] == "+0.000 [0.000, 0.000]"
    # A side without runs is a dash; the other side still shows its values; no Δ, no test.
    alone = frame([row(B, s, "table1", sc=20.0 + s) for s in range(3)])
    md = claims_table.render_claims(alone, "md")
    assert _md_row(md, "1a")[1:] == ["SC: BayesNCL (STE) > NCL", "21.00 ± 1.00 (3)", "-", "-", "-", "36.14 vs 14.93",
                                     "not run"]
    assert _md_row(md, "9")[1:4] == ["SC (ResNet-50): BayesNCL > NCL", "-", "-"]  # in the not-run block
    # A side that repeats another result carries the double dagger in its cell.
    assert _md_row(claims_table.render_claims(_topk_grid([0.0, 0.0]), "md"), "1b")[3] == "20.50 ± 0.71‡ (2)"


def test_inverted_u_with_collapsed_points():
    def sweep(points):
        return frame([row(B, s, "figure4b", sweep="lambda", sc=sc, **{"lambda": x}) for x, sc in points
                      for s in range(3)])
    c = one(sweep([(0.0, math.nan), (1e-5, 20.0), (1e-4, 5.0)]), "11a")
    assert c.verdict == NOT_RUN and c.right.nan == 3 and "(right: 0)" in c.text
    # A collapsed inner point is no candidate for the best one; with none left, not run.
    c = one(sweep([(0.0, 1.0), (1e-5, math.nan), (3e-5, 20.0), (1e-4, 5.0)]), "11a")
    assert "λ$ = 3e-05 $>$" in c.text.replace("\\lambda", "λ") and c.verdict == HOLDS
    c = one(sweep([(0.0, 1.0), (1e-5, math.nan), (1e-4, 5.0)]), "11a")
    assert c.verdict == NOT_RUN and c.text == "SC of @A: inverted U over $\\lambda$"


# --------------------------------------------------------------------------- architectures
def test_claims_never_pool_architectures():
    rows = [row(v, s, "table1", arch=a, sc=base + off + s) for a, off in (("resnet18", 0.0), ("resnet50", 50.0))
            for v, base in ((B, 30.0), (N, 20.0)) for s in range(3)]
    rows += [row(v, s, "table5", arch="resnet50", sc=base + s) for v, base in ((B, 12.0), (N, 14.0)) for s in range(3)]
    comps = comparisons(frame(rows))
    assert [c.text for c in comps["1a-r18"] + comps["1a-r50"]] == ["SC: @A $>$ @B (ResNet-18)",
                                                                            "SC: @A $>$ @B (ResNet-50)"]
    both_1a = comps["1a-r18"] + comps["1a-r50"]  # each architecture's row its own id, both primary
    assert [c.left.stat.mean for c in both_1a] == [31.0, 81.0] and [c.result.n for c in both_1a] == [(3,), (3,)]
    assert all(c.primary for c in both_1a) and "1a" not in comps
    (c9,) = comps["9"]  # Table 5 alone, never Table 1's runs of the same architecture
    assert (c9.left.stat.mean, c9.right.stat.mean, c9.verdict) == (13.0, 15.0, FAILS)
    assert c9.text == "SC (ResNet-50): @A $>$ @B"
    # Claim 9 names the architecture its runs have; an architecture without a display name keeps its own.
    other = [dict(r, arch="convnext_t") for r in rows if r["sets"] == "table5"]
    assert one(frame(other), "9").text == "SC (convnext_t): @A $>$ @B"
    assert one(frame([dict(r, arch="resnet18") for r in other]), "9").text == "SC (ResNet-18): @A $>$ @B"
    # Claim 9's text names its architecture already: no suffix when both architectures ran it.
    both = other + [dict(r, arch="resnet18", run_id=r["run_id"] + "/r18") for r in other]
    assert [c.text for c in comparisons(frame(both))["9"]] == ["SC (convnext_t): @A $>$ @B",
                                                                "SC (ResNet-18): @A $>$ @B"]
    # The headline of the terminal and metrics.json keep the architectures apart too.
    out = claims_table.outcome(frame(rows))
    assert "ResNet-18" in out and "ResNet-50" in out
    head = summary.headline(frame(rows))
    assert head["synthetic"]["resnet18"][B]["sc"] == pytest.approx(31.0)
    assert head["synthetic"]["resnet50"][B]["sc"] == pytest.approx(81.0)


# --------------------------------------------------------------------------- the whole table
EVERY_ROW = ["1a", "1b", "1c", "2a", "2b", "3", "4", "5", "6a", "6b", "6c", "7a", "7b", "7c", "7d", "8", "9",
             "10a", "10b-32", "10b-64", "10b-128", "11a", "11b", "12a", "12b"]
NOT_RUN_IDS = [c if not c.startswith("10b-") else "10b" for c in dict.fromkeys(
    c if not c.startswith("10b-") else "10b" for c in EVERY_ROW)]


def test_every_claim_row_on_a_full_grid(tmp_path):
    df = full_grid()
    blocks = judge.claims_rows(df)
    assert [d for d, _ in blocks] == ["synthetic", "cifar100"]
    for _, comps in blocks:
        assert [c.claim for c in comps] == EVERY_ROW  # unique ids: claims_stability pairs rows by them
        assert all(c.verdict != NOT_RUN for c in comps), [(c.claim, c.verdict) for c in comps]
    v = {c.claim: c.verdict for c in blocks[0][1]}
    assert v["1a"] == v["12a"] == v["8"] == HOLDS and v["5"] == FOR  # 1 soft-gate seed: no interval
    written = claims_table.write_claims(df, tmp_path)
    assert sorted(p.name for p in written) == ["claims.md", "claims.tex"]
    md = (tmp_path / "claims.md").read_text()
    for cid in set(EVERY_ROW):
        assert sum(line.split("|")[1].strip() == cid for line in md.splitlines() if line.startswith("|")) == \
            2 * EVERY_ROW.count(cid)
    assert "| *Synthetic*" in md and "36.14 vs 14.93" in md
    tex = (tmp_path / "claims.tex").read_text()
    assert r"\begin{table*}" in tex and r"$\geq$" in tex and "Synthetic (continued)" in tex
    assert r"paired (3)" in tex and r"inconclusive \newline (leans for)" in tex
    # The terminal: the verdicts' tally and the new columns.
    out = claims_table.outcome(df)
    assert out.startswith("Claims (docs/METHOD.md section 9") and "holds: " in out and "Δ [95% CI]" in out
    assert "paired (3)" in out and "inconclusive (leans for)" in out


NOT_RUN_ROWS = [  # how each claim reads before any run: (claim, text, left, right, the paper's values)
    ("1a", "SC: BayesNCL > NCL", "36.14 vs 14.93"), ("1b", "SC: BayesNCL > Top-k NCL", "-"),
    ("1c", "SE-Sum: BayesNCL < NCL", "-"), ("2a", "Top-1: BayesNCL ≥ NCL", "70.44 vs 69.63"),
    ("2b", "Top-1: BayesNCL ≥ SimCLR", "70.44 vs 68.31"), ("3", "P@10 (top-K dims): BayesNCL ≥ NCL", "-"),
    ("4", "SC: BayesNCL ≥ BayesNCL (Gumbel)", "-"), ("5", "SC: BayesNCL > Soft gate", "22.0 vs 8.5 (CIFAR-100)"),
    ("6a", "SC: BayesNCL ≥ w/o detach", "-"), ("6b", "SC: BayesNCL > 1-layer head", "-"),
    ("6c", "SC: BayesNCL > 3-layer head", "-"), ("7a", "ρ(AF, GV) of NCL > 0", "-"), ("7b", "ρ(GV, SC) of NCL < 0", "-"),
    ("7c", r"\|ρ(AF, GV)\|: BayesNCL < NCL", "-"), ("7d", r"\|ρ(GV, SC)\|: BayesNCL < NCL", "-"),
    ("8", "BG acc.: BayesNCL within 1 point of NCL", "93.38 vs 93.33"), ("9", "SC (ResNet-50): BayesNCL > NCL", "-"),
    ("10a", "SC: BayesNCL rises with D", "36.14 at D = 2048"), ("10b", "SC at each D: BayesNCL > NCL", "-"),
    ("11a", "SC of BayesNCL: inverted U over λ", "worse for λ > 4e-5"),
    ("11b", "SC of BayesNCL: inverted U over ρ", "inverted U"),
    ("12a", "GFLOPs: BayesNCL at most 1% more than NCL", "1.419 vs 1.416"),
    ("12b", "Train time: BayesNCL at most 6% more than NCL", "75.12 vs 70.95 min"),
]


def test_claims_not_run_anywhere_are_listed():
    rows = [r for r in _md_rows_of(claims_table.render_claims(frame([]), "md")) if r[0] and not r[0].startswith("*")]
    assert [(r[0], r[1], r[6]) for r in rows] == NOT_RUN_ROWS
    assert all(r[2:6] == ["-", "0" if r[0] in ("7a", "7b") else "-", "-", "-"] and r[7] == NOT_RUN for r in rows)
    df = frame([row("NCL", 0, "table1", sc=1.0)])
    blocks = judge.claims_rows(df)
    assert [d for d, _ in blocks] == ["synthetic", ""]
    every = [c.claim for _, comps in blocks for c in comps]
    assert sorted(every) == sorted(NOT_RUN_IDS)
    assert all(c.verdict == NOT_RUN for _, comps in blocks for c in comps)
    assert "Not run on any dataset" in claims_table.render_claims(df, "md")
    assert verdicts.VERDICTS == (HOLDS, FOR, AGAINST, FAILS, NOT_RUN)


# --------------------------------------------------------------------------- flags
def _topk_grid(topk_bound):
    return frame([row("NCL", s, "table1", sc=20.0 + s) for s in range(2)]
                 + [row("Top-k NCL", s, "table1", sc=20.0 + s, topk_bound=b) for s, b in enumerate(topk_bound)]
                 + [row("BayesNCL (STE)", s, "table1", sc=30.0 + s) for s in range(2)])


def test_topk_run_whose_mask_never_bound_is_flagged():
    df = _topk_grid([0.0, 0.0])
    tex, md = tables.render_table(df, "table1"), tables.render_table(df, "table1", "md")
    assert r"Top-k NCL$^\ddagger$ &" in tex
    assert "identical to NCL: the top-k mask never bound" in tex and "identical to NCL" in md
    assert "Top-k NCL‡" in md
    # A flagged row is no result of its own: never bold, even where it would be best.
    best = _topk_grid([0.0, 0.0])
    best.loc[best["variant"] == "Top-k NCL", "se_sum"] = 0.1
    best.loc[best["variant"] != "Top-k NCL", "se_sum"] = 0.5
    assert r"\mathbf" not in [line for line in tables.render_table(best, "table1").splitlines()
                               if line.startswith("Top-k")][0]
    c = one(df, "1b")
    assert c.right.repeats.startswith("identical to NCL") and "^\\ddagger" in claims_table.render_claims(df)
    # Partly bound: flagged with the count; bound in every run: not flagged.
    assert "never bound in 1 of 2 runs" in tables.render_table(_topk_grid([0.0, 0.4]), "table1")
    for kind in ("tex", "md"):
        assert "ddagger" not in tables.render_table(_topk_grid([0.3, 0.4]), "table1", kind)
        assert "‡" not in tables.render_table(_topk_grid([0.3, 0.4]), "table1", kind)


def test_rows_with_identical_weights_are_flagged():
    rows = [row("BayesNCL (STE)", s, "table4", sc=30.0 + s) for s in range(2)]
    twins = [dict(r, variant="w/o detach", detach=0.0, run_id=r["run_id"] + "x") for r in rows]  # same weights
    other = [row("Soft gate", s, "table4", sc=10.0) for s in range(2)]
    tex = tables.render_table(frame(rows + twins + other), "table4")
    assert r"w/o detach$^\ddagger$ &" in tex and "identical to BayesNCL (STE) (same trained weights)" in tex
    assert r"BayesNCL (STE) &" in tex  # the first of the twins is the result
    # Different weights in one seed: no flag.
    twins[1]["weights_sha"] = "other"
    assert "ddagger" not in tables.render_table(frame(rows + twins + other), "table4")


def test_each_claim_is_run_exactly_when_its_sets_have_runs():
    """A grid of one claim's sets only: every claim sharing none of them is listed as not run (found by its own
    number, so a claim numbered like another cannot hide it), and none of the others is."""
    grid = full_grid(datasets=("synthetic",), seeds=(0, 1))
    number = lambda cid: int(re.match(r"\d+", cid).group())  # noqa: E731
    every = {c.claim for _, comps in judge.claims_rows(frame([])) for c in comps}
    for claim in claims.CLAIMS.values():
        keep = set(claim.sets)
        df = grid.assign(sets=[";".join(s for s in x.split(";") if s in keep) for x in grid["sets"]])
        blocks = dict(judge.claims_rows(df[df["sets"] != ""]))
        idle = {d.number for d in claims.CLAIMS.values() if not keep & set(d.sets)}
        assert {c.claim for c in blocks.get("", [])} == {cid for cid in every if number(cid) in idle}, claim.number
        assert {number(c.claim) for c in blocks["synthetic"]} == {d.number for d in claims.CLAIMS.values()} - idle


def test_caption_says_when_the_runs_stop_before_saturation():
    """The claims caption carries the saturation criterion's verdict where the grid ran the saturation set and
    NCL has not met it; nothing where it has, or where the set was not run."""
    def curve(sc_at_8: float) -> list[dict]:
        rows = []
        for e, loss, sc, top1 in ((0, math.nan, 15.0, 35.0), (4, 5.3, 15.0, 36.0), (8, 5.25, sc_at_8, 37.4),
                                  (16, 5.24, 20.0, 37.5)):
            for s in range(2):
                rows.append(row("NCL", s, "saturation", epochs=e, infonce_chance=math.log(255),
                                infonce_final=loss, sc=sc + s, probe_top1=top1))
        return rows

    base = full_grid(datasets=("synthetic",)).to_dict("records")
    for kind in ("md", "tex"):
        text = claims_table.render_claims(frame(base + curve(sc_at_8=16.0)), kind)
        assert "These runs stop before saturation" in text and "NCL has not saturated below 16 epochs" in text
    caption = claims_table.render_claims(frame(base + curve(sc_at_8=16.0)), "md").splitlines()[1]
    assert re.search(r"These runs stop before saturation \(figures/saturation; docs/METHOD\.md section 10\): "
                     r"Synthetic: NCL has not saturated below 16 epochs \(.*\)\.$", caption), caption
    assert "stop before saturation" not in claims_table.render_claims(frame(base + curve(sc_at_8=20.0)), "md")
    assert "stop before saturation" not in claims_table.render_claims(frame(base), "md")


def test_claims_table_layout_caption_and_terminal(capsys):
    """The Markdown aligns the sides' numbers right and the rest left; the caption states the controls' rules and
    names each side that repeats another result once, as "label on dataset is why", joined by "; "; the
    terminal's outcome has its columns' headers and goes to the stream it is given, not stdout."""
    twins = [row("BayesNCL (STE)", s, "table4", sc=30.0 + s) for s in range(2)]
    twins += [dict(r, variant="w/o detach", detach=0.0, run_id=r["run_id"] + "x") for r in twins]  # same weights
    df = frame(_topk_grid([0.0, 0.0]).to_dict("records") + twins)
    md = claims_table.render_claims(df, "md")
    head, rule = [line for line in md.splitlines() if line.startswith("|")][:2]
    labels = [h.strip() for h in head.strip("|").split("|")]
    assert labels[:4] == ["", "Claim", "Left", "Right"] and len(labels) == 12
    cols = [c.strip() for c in rule.strip("|").split("|")]
    assert len(cols) == len(labels)
    assert [c.endswith(":") and not c.startswith(":") for c in cols] == [i in (2, 3) for i in range(len(cols))]
    assert all(c.startswith(":") for i, c in enumerate(cols) if i not in (2, 3))
    caption = md.splitlines()[1]
    for rule_text in ("(k/n): k of the side's n runs used, the others NaN",
                      "Controls (docs/METHOD.md section 9): Δ at init is the same comparison on the same "
                      "seeds' untrained networks",
                      "Holds when the interval clears the claim's bound (>: 0; ≥: -margin; within: strictly inside "
                      "±margin; at most: below the margin, one-sided, for 12a-b relative to the right side, Δ = left - "
                      "right in %, a cheaper left side satisfying it)",
                      "not run: no finite value on a side. Claim 7 reads the last recorded epoch; claim 11 compares "
                      "the best inner sweep point",
                      "Family: a graphical procedure (Bretz et al. 2009) at level 0.05 over the one-sided t-tests that "
                      "the intervals read (p doubled, so that a family of one gives the plain verdict), once for holds "
                      "and once for does not hold: the primary claims (1a and 2a on each dataset) share the level; one "
                      "that holds passes half its share to the other primary claims and half to the secondary claims "
                      "(the rest)",
                      "Margin: the claim's bound on Δ and its source: paper (the paper's own words or numbers), spec "
                      "(declared in docs/METHOD.md section 9, per metric; the paper reports no seed spread), declared "
                      "(a declared claim's tolerance). Paper: ImageNet-100 unless stated.",
                      "same network at init: both sides start from the same untrained runs"):
        assert rule_text in caption, rule_text
    flagged = [f"{s.label} on Synthetic is {s.repeats}" for _, comps in judge.claims_rows(df) for c in comps
               for s in (c.left, c.right) if s.repeats]
    assert len(flagged) == 2 and flagged[0] != flagged[1]
    assert re.search(r"‡ Not a separate result: (.*?)\.$", caption).group(1) == "; ".join(flagged)
    # The terminal.
    out = claims_table.outcome(df)
    heads = [re.split(r"\s{2,}", line.strip()) for line in out.splitlines() if line.startswith("Dataset")]
    assert heads[0] == ["Dataset", "Claim", "Left", "Right", "Δ [95% CI]", "Test (n)", "Margin",
                        "Δ at init [95% CI]", "Verdict", "Training", "Family (graph)"]
    assert heads[1][:4] == ["Dataset", "Arch.", "Method", "Seeds"]
    buf = io.StringIO()
    claims_table.print_outcome(df, stream=buf)
    assert buf.getvalue() == out + "\n" and capsys.readouterr().out == ""
    # LaTeX: every paragraph column is set ragged right (the claim texts and verdicts wrap).
    tex = claims_table.render_claims(df, "tex")
    colspec = re.search(r"\\begin\{tabular\}\{(.*)\}$", tex, re.M).group(1)
    assert colspec.count("p{") == 5 and colspec.count(r">{\raggedright\arraybackslash}p{") == 5
    columns = re.findall(r"[lrc]|p\{[\d.]+cm\}", colspec.replace(r">{\raggedright\arraybackslash}", ""))
    assert re.fullmatch(r"@\{\}(?:[lrc]|p\{[\d.]+cm\}|>\{\\raggedright\\arraybackslash\})+@\{\}", colspec)
    tex_header = tex.split("\\toprule\n")[1].splitlines()[0].removesuffix(r" \\").split(" & ")
    assert tex_header == ["", "Claim", "Left", "Right", r"$\Delta$ [95\% CI], test (n)", r"$\Delta$ at init, training",
                          "Paper", r"Verdict, family"] and len(columns) == len(tex_header)
    # The terminal's claims: a block's dataset is named on its first row only.
    body = out.split("Claims (")[1].split("\n\n")[0].splitlines()
    first = next(i for i, line in enumerate(body) if line.startswith("---")) + 1
    assert body[first].startswith("Synthetic") and not any(line.startswith("Synthetic") for line in body[first + 1:])
    # The headline marks a variant that repeats another's result.
    assert any(line.split()[2:5] == ["Top-k", "NCL", "‡"] for line in out.split("Main comparison")[1].splitlines())


def test_numbers_keep_the_sign_of_a_small_negative_and_none_on_zero():
    assert claims_table._num(1.0, 2) == "1.00" and claims_table._num(1.0, 1, plus=True) == "+1.0"
    assert claims_table._num(-0.0, 2, plus=True) == "+0.00" and claims_table._num(0.0, 2) == "0.00"
    assert claims_table._num(-0.001, 2) == "-0.00" and claims_table._num(-0.001, 2, plus=True) == "-0.00"


def test_still_learning_and_collapsed_count_the_runs_of_both_sides():
    """§ and ¶ mark a row by how many of its runs, on either side, were still learning or collapsed."""
    def pair(flag, left_runs, right_runs):
        return frame([row("BayesNCL (STE)", s, MAIN, sc=30.0 + s, **{flag: float(s < left_runs)}) for s in range(3)]
                     + [row("NCL", s, MAIN, sc=20.0 + s, **{flag: float(s < right_runs)}) for s in range(3)])

    for flag, count, mark in (("still_learning", claims_table.still_learning, "§"),
                              ("collapsed", claims_table.collapsed, "¶")):
        for left_runs, right_runs in ((2, 2), (3, 1), (0, 2), (0, 0)):
            df = pair(flag, left_runs, right_runs)
            c = one(df, "1a")
            assert count(c) == left_runs + right_runs, (flag, left_runs, right_runs)
            md = claims_table.render_claims(df, "md")
            assert _md_row(md, "1a" + mark * bool(left_runs + right_runs))
            rows = [r for r in _md_rows_of(md) if not r[0].startswith("*")]  # not the block titles
            marked = sum(r[0].endswith(mark) for r in rows)
            assert md.splitlines()[1].startswith("**Claims.** The paper's claims (docs/METHOD.md section 9)")
            sentence = (f". {mark} {marked} of the {len(rows)} rows compare runs of which some "
                        + ("were still learning when they stopped (" if mark == "§" else "collapsed (their "))
            assert (sentence in md) == bool(marked), (flag, sentence)
    assert ("after falling; docs/METHOD.md section 10); those runs stay in the interval."
            in claims_table.render_claims(pair("collapsed", 1, 0), "md"))


def test_within_an_interval_touching_the_tolerance():
    """(-tol, tol) is open (docs/METHOD.md section 9), as the familywise test's p < alpha: an interval that touches
    the tolerance from inside does not hold, in the plain column nor in the family column; one that touches it
    from outside is not wholly outside (inconclusive); a mean difference of exactly tol leans for."""
    from bayesncl.report.verdicts import _judge

    for d in (1.0, -1.0):  # the degenerate interval [d, d] on the tolerance itself
        got = verdicts.compare([(s, 10.0 + d) for s in range(3)], [(s, 10.0) for s in range(3)], verdicts.within(1.0))
        assert (got.low, got.high, got.verdict) == (d, d, FOR)
        assert verdicts.family_verdicts([(got, verdicts.within(1.0))]).verdicts == ["inconclusive (family)"]
    rel = verdicts.compare([(s, 3.0) for s in range(3)], [(s, 2.0) for s in range(3)], verdicts.within(0.5, relative=True))
    assert (rel.tol, rel.verdict) == (1.0, FOR)  # 50% of the right side's 2.0: exactly 1.0
    w = verdicts.within(1.0)
    assert _judge(w, 0.0, -1.0, 1.0, 1.0) == FOR and _judge(w, 0.0, -1.0 + 1e-9, 1.0 - 1e-9, 1.0) == HOLDS
    # an interval touching the bound from inside: the plain and the family verdicts agree (neither holds)
    spread = [(s, 10.0 + x) for s, x in enumerate((-0.5, 0.0, 0.5))]
    touch = verdicts.compare(spread, [(s, 10.0) for s in range(3)], verdicts.within(1.0))
    edge = verdicts.within(max(-touch.low, touch.high))
    at_edge = verdicts.compare(spread, [(s, 10.0) for s in range(3)], edge)
    assert at_edge.verdict == FOR
    assert verdicts.family_verdicts([(at_edge, edge)]).verdicts == ["inconclusive (family)"]
    wider = verdicts.within(edge.margin * (1 + 1e-9))
    now = verdicts.compare(spread, [(s, 10.0) for s in range(3)], wider)
    assert now.verdict == HOLDS and verdicts.family_verdicts([(now, wider)]).verdicts == ["holds (family)"]
    assert _judge(w, 1.5, 1.0, 2.0, 1.0) == AGAINST and _judge(w, -1.5, -2.0, -1.0, 1.0) == AGAINST
    assert _judge(w, 1.5, 1.0 + 1e-9, 2.0, 1.0) == FAILS and _judge(w, -1.5, -2.0, -1.0 - 1e-9, 1.0) == FAILS
    assert _judge(w, 1.0, math.nan, math.nan, 1.0) == FOR and _judge(w, -1.0, math.nan, math.nan, 1.0) == FOR
    assert _judge(w, 1.0 + 1e-9, math.nan, math.nan, 1.0) == AGAINST
