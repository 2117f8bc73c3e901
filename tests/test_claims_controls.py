"""The claims table's controls (docs/METHOD.md section 9, "Controls") against written-out calculations: the
initialisation control (each trained comparison made again on the runs' untrained twins, and the change training
brought judged by the same rule), the familywise control (the graph over the table, against Bretz et al. 2009's
Algorithm 1 written out in helpers/family.py), and the planning of
the untrained twins (bayesncl.grid.expand.plan_init_runs). Fast; the one torch check builds two tiny networks."""

from __future__ import annotations

import copy
import math
import random
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats

from bayesncl.grid import expand as grid
from bayesncl.settings.config import flatten
from bayesncl.report import claims, claims_table, judge, verdicts
from bayesncl.report.cells import Fmt
from helpers import family as naive, grids
from helpers.claims import FAILS, FOR, HOLDS, MAIN, NOT_RUN, frame, row, with_twins

ROOT = Path(__file__).resolve().parents[1]
B, N = "BayesNCL (STE)", "NCL"


# --------------------------------------------------------------------------- written-out references
def t_interval(d) -> tuple[float, float, float]:
    d = np.asarray(d, dtype=float)
    half = stats.t.ppf(0.975, d.size - 1) * d.std(ddof=1) / math.sqrt(d.size)
    return d.mean(), d.mean() - half, d.mean() + half


def rule(low: float, high: float, diff: float, tol: float = 0.0) -> str:
    """The "better" / "not worse" rule of section 9, written out."""
    if low > -tol:
        return HOLDS
    if high < -tol:
        return FAILS
    return FOR if diff > -tol else "inconclusive (leans against)"


def naive_holm(p: list[float]) -> list[float]:
    """Holm's step-down as its definition reads: the k-th smallest p (k from 1) times (m - k + 1), never below
    the adjusted p of a smaller one, at most 1."""
    m, adjusted, running = len(p), [0.0] * len(p), 0.0
    for k, i in enumerate(sorted(range(m), key=lambda j: p[j]), start=1):
        running = max(running, min(1.0, (m - k + 1) * p[i]))
        adjusted[i] = running
    return adjusted


def paired_p(d, tol: float = 0.0, within: bool = False, at_most: bool = False) -> tuple[float, float]:
    """(p for, p against) from scipy's one-sample t-test on the per-seed differences, doubled (the 95%
    interval's two sides). "at most": the differences below tol (for), above it (against)."""
    def one(bound, side):
        return min(1.0, 2 * stats.ttest_1samp(d, bound, alternative=side).pvalue)
    if within:
        return max(one(-tol, "greater"), one(tol, "less")), min(one(tol, "greater"), one(-tol, "less"))
    if at_most:
        return one(tol, "less"), one(tol, "greater")
    return one(-tol, "greater"), one(-tol, "less")


# --------------------------------------------------------------------------- Holm and the p-values
def test_without_primary_claims_the_graph_is_holm():
    """Equal weights, each node passing to the others equally: Holm's step-down, written out."""
    rng = random.Random(3)
    for _ in range(200):
        p = [rng.choice([rng.random(), rng.random() / 50, 1.0, 0.0]) for _ in range(rng.randint(1, 12))]
        m = len(p)
        got, _ = verdicts.graph_test(p, *verdicts.graph(np.zeros(m, bool), np.ones(m, bool)), 0.05)
        assert got.tolist() == [a < 0.05 for a in naive_holm(p)], p


def test_the_graph_procedure_is_bretz_algorithm_1():
    """graph_test against Algorithm 1 written out (helpers/family.py), on random graphs and on the table's own
    design (verdicts.graph against section 9's words, helpers.family.design), a NaN p never rejected; the order of the
    rejections (the package takes the first candidate, the reference the last) does not change the result."""
    rng = np.random.default_rng(8)
    for _ in range(300):
        m = int(rng.integers(1, 8))
        p = rng.choice([0.0001, 0.004, 0.01, 0.02, 0.04, 0.3, math.nan], m)
        g = rng.random((m, m)) * (rng.random((m, m)) < 0.6)
        np.fill_diagonal(g, 0.0)
        g = g / np.maximum(g.sum(axis=1, keepdims=True), 1.0)
        w = rng.dirichlet(np.ones(m)) * rng.choice([1.0, 0.8])
        got, _ = verdicts.graph_test(p, w, g, 0.05)
        assert set(np.flatnonzero(got)) == naive.bretz(list(p), list(w), g.tolist(), 0.05)[0], (p, w, g)
        primary = rng.random(m) < 0.4
        w, g = verdicts.graph(primary, np.ones(m, bool))
        want_w, want_g = naive.design(list(primary))
        assert np.allclose(w, want_w) and np.allclose(g, want_g), primary
        got, left = verdicts.graph_test(p, w, g, 0.05)
        want, want_left = naive.bretz(list(p), want_w, want_g, 0.05)
        assert set(np.flatnonzero(got)) == want and np.allclose(left, want_left)
    # a comparison without a test is no node: the graph of the others, as if it were not there
    w, g = verdicts.graph(np.array([True, True, False, False]), np.array([True, False, True, True]))
    want_w, want_g = naive.design([True, False, False])
    keep = [0, 2, 3]
    assert np.allclose(w[keep], want_w) and w[1] == 0 and np.allclose(g[np.ix_(keep, keep)], want_g)
    assert not g[1].any() and not g[:, 1].any()


@pytest.mark.parametrize("kind", [verdicts.BETTER, verdicts.NOT_WORSE, verdicts.within(1.0), verdicts.at_most(1.0)],
                         ids=lambda k: k.name)
def test_p_values_are_scipys_one_sided_tests_and_agree_with_the_interval(kind):
    """p < 0.05 exactly when the plain rule decides in that direction: a family of one is the plain table."""
    rng = np.random.default_rng(11)
    seen = set()
    for _ in range(120):
        n = int(rng.integers(2, 7))
        left = rng.normal(rng.choice([-3.0, -1.0, 0.0, 0.6, 2.0]), rng.choice([0.3, 1.0, 3.0]), n)
        right = rng.normal(0.0, 1.0, n)
        r = verdicts.compare(list(enumerate(left)), list(enumerate(right)), kind)
        want = paired_p(left - right, kind.margin, kind.name == "within", kind.name == "at most")
        got = verdicts.p_values(r, kind)
        assert np.allclose(got, want, rtol=1e-9, atol=1e-12), (got, want)
        assert (got[0] < 0.05) == (r.verdict == HOLDS) and (got[1] < 0.05) == (r.verdict == FAILS)
        seen.add(r.verdict)
    assert {HOLDS, FAILS} <= seen


def test_welch_p_values_are_scipys_welch_tests():
    rng = np.random.default_rng(5)
    for _ in range(50):
        a, b = rng.normal(1.0, 1.0, 4), rng.normal(0.0, 2.0, 3)
        r = verdicts.compare([(s, v) for s, v in enumerate(a)], [(10 + s, v) for s, v in enumerate(b)],
                           verdicts.NOT_WORSE)
        assert r.test == "Welch"
        want = [min(1.0, 2 * stats.ttest_ind(a + 1.0, b, equal_var=False, alternative=side).pvalue)
                for side in ("greater", "less")]
        assert np.allclose(verdicts.p_values(r, verdicts.NOT_WORSE), want, rtol=1e-9)


def test_untested_comparisons_stay_out_of_the_family():
    one_seed = verdicts.compare([(0, 5.0)], [(0, 1.0)])
    degenerate = verdicts.compare([(s, 2.0) for s in range(3)], [(s, 1.0) for s in range(3)])
    assert math.isnan(verdicts.p_values(one_seed, verdicts.BETTER)[0])
    assert verdicts.p_values(degenerate, verdicts.BETTER) == (0.0, 1.0)  # std 0: decided as its interval [1, 1]
    got = verdicts.family_verdicts([(one_seed, verdicts.BETTER), (degenerate, verdicts.BETTER),
                                    (verdicts.compare([], [(0, 1.0)]), verdicts.BETTER)])
    assert got.verdicts == ["inconclusive (family)", "holds (family)", NOT_RUN]
    # Holm's m counts only the comparisons with an interval: with two untested ones beside it, a p of 0.03
    # holds (m = 1); a third tested one doubles it (m = 2: 0.06, open).
    mid = verdicts.compare([(s, v) for s, v in enumerate((0.2, 2.9, 1.6, 0.4, 2.4))], [(s, 0.0) for s in range(5)])
    p = verdicts.p_values(mid, verdicts.BETTER)[0]
    assert 0.025 < p < 0.05
    assert verdicts.family_verdicts([(one_seed, verdicts.BETTER), (mid, verdicts.BETTER), (one_seed, verdicts.BETTER)]
                                    ).verdicts[1] == "holds (family)"
    assert verdicts.family_verdicts([(mid, verdicts.BETTER), (mid, verdicts.BETTER)]).verdicts == \
        ["inconclusive (family)"] * 2


# --------------------------------------------------------------------------- the family, in the table
D_MARGINAL = [0.6, 2.9, 1.6, 0.9, 2.4]  # BayesNCL - NCL on SC per seed: p 0.018: holds alone, not among 7
D_STRONG = [2.0, 2.6, 1.8, 1.2, 3.0]    # p 0.0025: survives 7 comparisons
D_WEAK = [0.1, 2.9, 1.6, 0.3, 2.4]      # p 0.058: open even alone


def main_table(d_sc: list[float], d_probe: list[float] | None = None) -> pd.DataFrame:
    """Tables 1-2 of five seeds: SC of BayesNCL (STE) = NCL's + ``d_sc``, its top-1 NCL's + ``d_probe`` (else
    noise); every other difference noise."""
    rng = np.random.default_rng(7)
    rows = []
    for v in ("SimCLR", N, "Top-k NCL", B, "BayesNCL (Gumbel)"):
        for s in range(5):
            sc = 20.0 + (d_sc[s] if v == B else 0.0 if v == N else rng.normal(0, 2))
            probe = 50.0 + rng.normal(0, 3)
            if d_probe is not None and v in (B, N):
                probe = 50.0 + (d_probe[s] if v == B else 0.0)
            rows.append(row(v, s, MAIN, sc=sc, se_sum=2.0 + rng.normal(0, 0.1), probe_top1=probe,
                            ret_p10=30.0 + rng.normal(0, 3)))
    return frame(rows)


def written_out_family(df) -> dict[str, str]:
    """The familywise verdicts by hand (docs/METHOD.md section 9, "Controls"): each tested comparison's doubled
    one-sided p from scipy; Bretz et al.'s Algorithm 1 written out on section 9's graph (helpers/family.py), once on
    the p for, once on the p against; a comparison the graph gives no level either way keeps its plain verdict,
    marked "not controlled"."""
    comps = [c for _, cs in judge.claims_rows(df) for c in cs]
    tested = [c for c in comps if c.result.has_interval]
    assert all(c.result.test == "paired" for c in tested)
    ps = []
    for c in tested:
        d = np.array(c.result.left) - np.array(c.result.right)
        ps.append(paired_p(-d if c.better == "down" else d, c.result.tol, c.kind.name == "within"))
    w, g = naive.design([c.claim in ("1a", "2a") for c in tested])
    hold, w_for = naive.bretz([p for p, _ in ps], w, g, 0.05)
    fail, w_against = naive.bretz([p for _, p in ps], w, g, 0.05)
    out = {}
    for i, c in enumerate(tested):
        if i in hold:
            out[c.claim] = "holds (family)"
        elif i in fail:
            out[c.claim] = "does not hold (family)"
        elif w_for[i] > 0 or w_against[i] > 0:
            out[c.claim] = "inconclusive (family)"
        else:
            out[c.claim] = (c.verdict if c.verdict in (HOLDS, FAILS) else "inconclusive") + " (not controlled)"
    return out


@pytest.mark.parametrize("d_sc, d_probe, verdict, family", [
    (D_MARGINAL, None, HOLDS, "holds (family)"), (D_STRONG, None, HOLDS, "holds (family)"),
    ([-d for d in D_STRONG], None, FAILS, "does not hold (family)"),
    (D_WEAK, None, FOR, "inconclusive (family)"),
    (D_MARGINAL, [1.0, 1.2, 0.9, 1.1, 1.0], HOLDS, "holds (family)"),
    (D_WEAK, [1.0, 1.2, 0.9, 1.1, 1.0], FOR, "inconclusive (family)")],
    ids=["1a survives the primary family of 2, not a family of 7", "1a survives it", "1a fails and survives it",
         "1a open", "both primary claims hold", "2a holds, 1a open"])
def test_familywise_verdicts_are_the_graph_over_the_table(d_sc, d_probe, verdict, family):
    df = main_table(d_sc, d_probe)
    comps = {c.claim: c for _, cs in judge.claims_rows(df) for c in cs}
    assert comps["1a"].verdict == verdict and comps["1a"].family == family
    want = written_out_family(df)
    assert len(want) == 7 and {k: comps[k].family for k in want} == want
    assert [k for k, c in comps.items() if c.primary] == ["1a", "2a"]
    md = claims_table.render_claims(df, "md")
    line = next(x for x in md.splitlines() if x.startswith("| 1a"))
    assert line.rstrip(" |").endswith(family) and f"| {verdict} " in line
    kept = sum(want[c.claim] == c.verdict + " (family)" for c in comps.values() if c.verdict in (HOLDS, FAILS))
    decisive = sum(c.verdict in (HOLDS, FAILS) for c in comps.values())
    assert f"{kept} of the {decisive} decisive verdicts survive the familywise control" in md
    assert f"{kept} of the {decisive} decisive verdicts survive" in claims_table.outcome(df)
    held = [k for k in ("1a", "2a") if want[k] == "holds (family)"]
    decided = [k for k in ("1a", "2a") if want[k] in ("holds (family)", "does not hold (family)")]
    secondary = [k for k in want if k not in ("1a", "2a")]
    assert all(want[k].endswith("(not controlled)") != bool(decided) for k in secondary)
    blocking = ", ".join(f"{k} {want[k].split(' (')[0]}" for k in ("1a", "2a") if want[k] != "holds (family)")
    if len(held) == 2:
        assert "Family: primary: 2 of 2 hold; secondary tested at 0.05;" in md
    elif not decided:
        assert f"Family: secondary not controlled: primary {blocking};" in md
        assert f"family: secondary not controlled: primary {blocking};" in claims_table.outcome(df)
    else:  # one primary claim holds: half its level, a quarter of the family's, went to the secondary claims
        level = "0.0125" if held else "0"
        assert f"Family: primary: {len(held)} of 2 hold ({blocking}); secondary tested at {level} " in md


def test_the_graph_on_its_own():
    """family_verdicts with primary flags: the primary comparisons share the level; one that holds passes half of it to
    the secondary ones; a primary one that is stuck no longer silences them; a primary one not run is no node."""
    strong = verdicts.compare([(s, v) for s, v in enumerate(D_STRONG)], [(s, 0.0) for s in range(5)])
    weak = verdicts.compare([(s, v) for s, v in enumerate(D_WEAK)], [(s, 0.0) for s in range(5)])
    margin = verdicts.compare([(s, v) for s, v in enumerate(D_MARGINAL)], [(s, 0.0) for s in range(5)])
    gone = verdicts.compare([], [(0, 1.0)])
    b = verdicts.BETTER
    p_margin, p_strong = verdicts.p_values(margin, b)[0], verdicts.p_values(strong, b)[0]
    assert 0.0125 < p_margin < 0.025 and p_strong < 0.00625
    fam = verdicts.family_verdicts([(strong, b), (margin, b), (margin, b)], [True, False, False])
    # a lone primary passes all its level on: two secondary p of 0.018 -> Holm: both hold
    assert fam.verdicts == ["holds (family)"] * 3 and fam.gate_open and fam.primary == (0,) and fam.secondary == 0.05
    fam = verdicts.family_verdicts([(weak, b), (strong, b), (margin, b)], [True, False, False])
    assert fam.verdicts == ["inconclusive (family)", "holds (not controlled)", "holds (not controlled)"]
    assert fam.blocking == (0,) and not fam.gate_open and fam.secondary == 0.0
    # two primary claims, one stuck: the one that holds passes half its half on (0.0125 to the secondary family)
    fam = verdicts.family_verdicts([(strong, b), (weak, b), (strong, b), (margin, b)], [True, True, False, False])
    assert fam.verdicts == ["holds (family)", "inconclusive (family)", "holds (family)", "inconclusive (family)"]
    assert fam.blocking == (1,) and fam.secondary == pytest.approx(0.0125)
    fam = verdicts.family_verdicts([(gone, b), (strong, b)], [True, False])
    assert fam.verdicts == [NOT_RUN, "holds (family)"] and fam.gate_open
    fam = verdicts.family_verdicts([(strong, b), (weak, b), (gone, b)], [True, False, False])
    assert fam.verdicts == ["holds (family)", "inconclusive (family)", NOT_RUN]
    # a primary comparison without an interval is no node: it takes no level, and the secondary one holds at it all
    one_seed = verdicts.compare([(0, 5.0)], [(0, 1.0)])
    fam = verdicts.family_verdicts([(one_seed, b), (strong, b)], [True, False])
    assert fam.verdicts == ["inconclusive (family)", "holds (family)"]
    fails = verdicts.compare([(s, -v) for s, v in enumerate(D_STRONG)], [(s, 0.0) for s in range(5)])
    fam = verdicts.family_verdicts([(fails, b), (fails, b)], [True, False])
    assert fam.verdicts == ["does not hold (family)", "does not hold (family)"]  # the graph against, apart


def test_a_family_verdict_needs_its_adjusted_p_below_alpha(monkeypatch):
    """Decisive only where the adjusted p is below 0.05, as for the plain interval (p at 0.05 exactly: open)."""
    judged = [(verdicts.compare([(0, 1.0), (1, 2.0)], [(0, 0.0), (1, 0.5)]), verdicts.BETTER)]
    for p, want in (((0.05, 0.9), "inconclusive (family)"), ((0.9, 0.05), "inconclusive (family)"),
                    ((0.0499, 0.9), "holds (family)"), ((0.9, 0.0499), "does not hold (family)")):
        monkeypatch.setattr(verdicts, "p_values", lambda r, k, p=p: p)
        assert verdicts.family_verdicts(judged).verdicts == [want], p


# --------------------------------------------------------------------------- the initialisation control
TRAINED = {B: [28.1, 26.3, 29.0, 27.2, 25.9], N: [20.0, 20.9, 21.2, 19.4, 20.6]}  # 1a holds plainly


def sc_pair(init: dict[str, list[float]]) -> pd.DataFrame:
    df = frame([row(v, s, MAIN, sc=TRAINED[v][s]) for v in (B, N) for s in range(5)])
    return with_twins(df, lambda r: {"sc": init[r["variant"]][int(r["seed"])]})


@pytest.mark.parametrize("init, verdict", [
    ({B: [23.4, 19.6, 22.2, 23.8, 19.3], N: [14.8, 15.0, 14.7, 15.1, 14.6]}, FOR),  # the lead was there untrained
    ({B: [15.0, 14.9, 15.2, 14.8, 15.1], N: [14.8, 15.0, 14.7, 15.1, 14.6]}, HOLDS),  # no lead untrained
], ids=["the control changes 1a", "1a survives it"])
def test_delta_at_init_and_the_training_verdict_are_written_out_paired_t(init, verdict):
    c = next(c for _, cs in judge.claims_rows(sc_pair(init)) for c in cs if c.claim == "1a")
    assert c.verdict == HOLDS
    d_trained = np.array(TRAINED[B]) - np.array(TRAINED[N])
    d_init = np.array(init[B]) - np.array(init[N])
    diff, low, high = t_interval(d_init)
    assert c.init.test == "paired" and np.allclose([c.init.diff, c.init.low, c.init.high], [diff, low, high])
    change = d_trained - d_init
    diff, low, high = t_interval(change)
    assert np.allclose([c.change.diff, c.change.low, c.change.high], [diff, low, high])
    assert c.change.verdict == rule(low, high, diff) == verdict
    md = claims_table.render_claims(sc_pair(init), "md")
    line = next(x for x in md.splitlines() if x.startswith("| 1a")).split("|")
    header = next(x for x in md.splitlines() if x.startswith("|") and "Δ at init" in x).split("|")
    cell = dict(zip([h.strip() for h in header], [x.strip() for x in line]))
    m, lo, hi = t_interval(d_init)
    assert cell["Δ at init [95% CI]"] == f"{m:+.2f} [{lo:.2f}, {hi:.2f}]"
    assert cell["Training"] == verdict and cell["Verdict"] == HOLDS
    tex = next(x for x in claims_table.render_claims(sc_pair(init), "tex").splitlines() if x.startswith("1a & "))
    control, shown = tex.split(" & ")[5], tex.split(" & ")[7]
    interval = f"[{lo:.2f}, {hi:.2f}]".replace("-", "$-$")
    assert control == f"${m:+.2f}$ {interval} \\newline training: " + verdict.replace(" (", r" \newline (")
    assert shown.startswith(r"holds \newline family: ")


def test_training_change_follows_the_claims_direction_and_margin():
    """1c (SE, lower is the claim: right - left) and 2a (not worse, margin 1 point) on their twins."""
    se = {B: [1.50, 1.62, 1.55, 1.48, 1.60], N: [1.90, 1.95, 1.85, 1.92, 1.88]}
    se0 = {B: [1.70, 1.80, 1.72, 1.66, 1.79], N: [1.91, 1.96, 1.90, 1.89, 1.93]}
    top = {B: [40.0, 41.0, 39.5, 40.2, 40.8], N: [41.1, 41.9, 40.1, 41.3, 41.6]}
    top0 = {B: [31.2, 31.5, 31.3, 31.4, 31.0], N: [30.2, 30.0, 30.3, 30.1, 29.8]}
    df = frame([row(v, s, MAIN, se_sum=se[v][s], probe_top1=top[v][s]) for v in (B, N) for s in range(5)])
    df = with_twins(df, lambda r: {"se_sum": se0[r["variant"]][int(r["seed"])],
                                   "probe_top1": top0[r["variant"]][int(r["seed"])]})
    comps = {c.claim: c for _, cs in judge.claims_rows(df) for c in cs}
    change = (np.array(se[N]) - np.array(se[B])) - (np.array(se0[N]) - np.array(se0[B]))
    diff, low, high = t_interval(change)
    assert np.allclose([comps["1c"].change.diff, comps["1c"].change.low], [diff, low])
    assert comps["1c"].change.verdict == rule(low, high, diff)
    change = (np.array(top[B]) - np.array(top[N])) - (np.array(top0[B]) - np.array(top0[N]))
    diff, low, high = t_interval(change)
    assert comps["2a"].change.verdict == rule(low, high, diff, 1.0) == FAILS  # plain: inconclusive
    assert comps["2a"].verdict != FAILS


def test_claims_without_a_meaning_at_init_say_why():
    from helpers.claims import full_grid

    df = with_twins(full_grid(datasets=("synthetic",)), lambda r: {"sc": 10.0 + r["seed"]})
    comps = [c for _, cs in judge.claims_rows(df) for c in cs]
    notes = {c.claim: c.init_note for c in comps if c.init is None}
    assert set(notes) >= {"7a", "7b", "7c", "7d", "11a", "11b", "12a", "12b"}
    assert notes["7a"] == claims.NO_INIT["dyn"] and notes["11a"] == claims.NO_INIT["sweep"]
    assert notes["12b"] == claims.NO_INIT["cost"]
    # each reason reads as the caption's legend has it: "n/a: ..."
    assert all(note.startswith("n/a: ") for note in claims.NO_INIT.values()) and len(claims.NO_INIT) == 3
    assert all(c.init is not None for c in comps if c.claim.split("-")[0] in ("1a", "4", "5", "9", "10a", "10b"))
    md = claims_table.render_claims(df, "md")
    assert claims.NO_INIT["dyn"] in md and claims_table.FAMILY_HEADER in md
    # runs.csv of a grid without the twins: the column says so, nothing else changes
    plain = [c for _, cs in judge.claims_rows(full_grid(datasets=("synthetic",))) for c in cs]
    assert {c.init_note for c in plain if c.claim == "1a"} == {claims.NO_TWINS}
    assert [c.verdict for c in plain] == [c.verdict for c in comps]


# --------------------------------------------------------------------------- planning the untrained twins
def _grid(name: str) -> dict:
    return yaml.safe_load((ROOT / "config" / name).read_text())


def _base(wf: dict, dataset: str, method: str) -> dict:
    """The config a run's id is read against: the grid's defaults for its dataset and method, written out."""
    from bayesncl.settings.config import resolve

    return resolve(base=grid.merged(wf["defaults"], wf["datasets"][dataset], {"method": {"name": method}}))


@pytest.mark.parametrize("name", ["config.yaml", "tiny.yaml", "paper.yaml"])
def test_every_run_of_an_init_set_gets_its_untrained_twin_and_nothing_else_changes(name, monkeypatch):
    wf = _grid(name)
    runs = grid.expand_grid(wf)
    monkeypatch.setattr(grid, "plan_init_runs", lambda runs, bases: None)
    before = grid.expand_grid(_grid(name))
    # the runs of the grid without the control keep their ids, configs, sets and triggers
    assert list(runs)[:len(before)] == list(before)
    for rid, run in before.items():
        assert runs[rid].config == run.config and runs[rid].sets == run.sets
        assert grid.trigger_config(runs[rid].config) == grid.trigger_config(run.config)
    served: dict[str, set] = {}
    for run in before.values():
        wanted = [s for s in run.sets if s in grid.INIT_SETS]
        if not wanted:
            assert runs[run.run_id].twin == ""
            continue
        twin = runs[runs[run.run_id].twin]
        served.setdefault(twin.run_id, set()).update(wanted)
        assert twin.config["train"]["epochs"] == 0
        # the run's config but for its length and what only changes how its method trains, at the grid's defaults
        method = run.config["method"]["name"]
        flat, flat_twin = grid.flatten(run.config), grid.flatten(twin.config)
        base = grid.flatten(_base(wf, run.config["data"]["dataset"], method))
        loss_only = {f"method.{k}" for k in grid.METHODS[method].loss_only}
        same = {f"method.{k}": values for k, values in grid.METHODS[method].init_same}
        assert {k for k in flat if flat[k] != flat_twin[k]} <= {"train.epochs", "train.dynamics_every", *loss_only,
                                                                  *same}
        assert all(flat_twin[k] == base[k] for k in loss_only), run.run_id
        assert all(flat_twin[k] == flat[k] or {flat[k], flat_twin[k], base[k]} <= set(v) for k, v in same.items())
        if "table6" in wanted:
            assert "background_probe" in grid.evaluation_sections(twin)
    for r in runs.values():  # a twin serves exactly the sets of the runs it initialises
        assert set(r.init_of) == served.get(r.run_id, set()), r.run_id
    new = [r for r in runs.values() if r.run_id not in before]
    assert new and all(not r.sets and r.init_of and "cost" not in grid.evaluation_sections(r) for r in new)
    # one twin per distinct initialisation; an epochs-0 run the grid has (the saturation set's) is reused
    assert len({grid._identity(r.config) for r in runs.values()}) == len(runs)
    reused = [r for r in before.values() if runs[r.run_id].init_of]
    assert all(r.config["train"]["epochs"] == 0 for r in reused)
    if "saturation" in wf["sets"]:
        assert reused


def test_variants_that_differ_only_in_how_they_train_share_one_twin():
    """The demo's w/o detach (BayesNCL with the gate head's gradient reaching the backbone) and BayesNCL (Gumbel)
    (whose gate evaluates noise-free, as STE's) start from BayesNCL (STE)'s network: one twin per seed serves the
    three, and a sweep of lambda on Table 1 would add no twin; the soft gate, whose alpha is the evaluated gate, keeps
    its own."""
    runs = grid.expand_grid(grids.demo())
    trained = [r for r in runs.values() if "table4" in r.sets]
    twin_of = {(r.labels["table4"], r.config["seed"]): r.twin for r in trained}
    for seed in range(3):
        assert twin_of[("w/o detach", seed)] == twin_of[(B, seed)] == twin_of[("BayesNCL (Gumbel)", seed)]
        assert twin_of[(B, seed)] != twin_of[("Soft gate", seed)]
        assert len({twin_of[(v, seed)] for v, _ in twin_of}) == 4  # 6 variants, 4 networks at init
    shared = runs[twin_of[(B, 0)]]
    assert shared.run_id == "synthetic/bayesncl/rho~0.8/lambda~3e-05/epochs~0/seed~0"
    assert shared.config["method"]["detach"] is True
    assert set(shared.init_of) == {"table1", "table2", "table4", "table6", "figure4a"}
    swept = grids.demo()
    swept["sets"]["table1"] = {"variants": [B], "sweep": {"method.lambda": [0.0, 3e-5, 1e-4]}}
    more = grid.expand_grid(swept)
    assert {r.twin for r in more.values() if "table1" in r.sets} <= set(runs)


def test_a_twin_whose_id_another_config_holds_is_refused_naming_both():
    from bayesncl.settings.config import resolve
    from bayesncl.core.errors import ConfigError

    base = resolve()
    trained = grid.Run("", copy.deepcopy(base), {"table1": "NCL"}, ["table1"])
    trained.run_id = grid.run_id(trained.config, base)
    taken = grid.run_id(grid.init_config(base, base), base)
    runs = {trained.run_id: trained, taken: grid.Run(taken, dict(base, seed=base["seed"] + 1), {"table1": "other"})}
    with pytest.raises(ConfigError) as e:
        grid.plan_init_runs(runs, {rid: base for rid in runs})
    assert str(e.value) == (f"the untrained twin of run {trained.run_id} maps to run {taken!r}, another config")


def test_the_grid_plans_twins_for_exactly_the_sets_the_controlled_claims_read():
    """grid.expand.INIT_SETS and report/claims.py agree: every claim with a control (no at_init note) reads only sets
    whose runs get twins, and every such set is read by one; the others say why they have none."""
    controlled = {s for c in claims.CLAIMS.values() if not c.at_init for s in c.sets}
    assert controlled == set(grid.INIT_SETS)
    assert all(not set(c.sets) & set(grid.INIT_SETS) for c in claims.CLAIMS.values() if c.at_init)


@pytest.mark.parametrize("sweeps", [False, True])
def test_the_demo_plans_its_twins_and_reuses_the_saturation_set_random_inits(sweeps):
    """Tables 1-2 and 6: 4 networks x 5 seeds (BayesNCL (Gumbel) starts from BayesNCL (STE)'s), less the seeds 0-2
    of the saturation set's variants (NCL; with config/sweeps.yaml also BayesNCL (STE)), whose runs at 0 epochs are
    the twins (17; 14); Table 4: 3 ablations x 3 seeds (9; w/o detach starts from BayesNCL (STE)'s network); Table 5:
    2 x 3 (6); Figure 4a at D = 256: 2 x 2 (4; the overlay's 5 seeds: 10)."""
    runs = grid.expand_grid(grids.demo(sweeps))
    new = [r for r in runs.values() if not r.sets]
    assert len(new) == (14 + 9 + 6 + 10 if sweeps else 17 + 9 + 6 + 4)
    assert sum(1 for r in runs.values() if r.sets == ["saturation"] and r.init_of) == (6 if sweeps else 3)


def test_a_twin_is_the_runs_own_initialisation(tmp_path):
    """pretrain at 0 epochs saves the network its trained run starts from (same seed, same build)."""
    import torch

    from bayesncl.runs import files
    from bayesncl.model.methods import build_method
    from bayesncl.training.train import pretrain

    runs = grid.expand_grid(_grid("tiny.yaml"))
    run = next(r for r in runs.values() if "table1" in r.sets and r.config["method"]["name"] == "bayesncl")
    twin = next(r for r in runs.values() if "table1" in r.init_of and r.labels["table1"] == run.labels["table1"])
    cfg = copy.deepcopy(twin.config)
    cfg["seed"] = run.config["seed"]
    saved = files.load(pretrain(cfg, tmp_path, progress=False))["model"]
    torch.manual_seed(run.config["seed"])
    fresh = build_method(run.config).state_dict()
    assert saved.keys() == fresh.keys() and all(torch.equal(saved[k], fresh[k]) for k in fresh)


def test_same_network_at_init_says_so_instead_of_a_training_verdict():
    """2a reads the backbone's probe: BayesNCL and NCL of one seed start from the same backbone, so every seed's
    Delta at init is exactly 0 and Training would repeat the verdict; 1a's gated SC differs at init."""
    top = {B: [40.0, 41.0, 39.5, 40.2, 40.8], N: [38.1, 38.9, 38.1, 38.3, 38.6]}
    top0 = [31.2, 31.5, 31.3, 31.4, 31.0]  # one backbone per seed, both methods
    sc0 = {B: [23.4, 19.6, 22.2, 23.8, 19.3], N: [14.8, 15.0, 14.7, 15.1, 14.6]}
    df = frame([row(v, s, MAIN, sc=TRAINED[v][s], probe_top1=top[v][s]) for v in (B, N) for s in range(5)])
    twins = with_twins(df, lambda r: {"probe_top1": top0[int(r["seed"])], "sc": sc0[r["variant"]][int(r["seed"])]})
    comps = {c.claim: c for _, cs in judge.claims_rows(twins) for c in cs}
    assert comps["2a"].same_init and comps["2a"].init.diff == 0.0 and not comps["1a"].same_init
    cells = {k: claims_table.claim_cells(comps[k], Fmt("md")) for k in ("1a", "2a")}
    assert cells["2a"]["training"] == claims.SAME_INIT == "same network at init"
    assert cells["1a"]["training"] == comps["1a"].change.verdict
    # the same values on all but one seed: a different network at init, and Training gives its verdict
    off = with_twins(df, lambda r: {"probe_top1": top0[int(r["seed"])] + (1e-9 if r["variant"] == B and
                                                                           r["seed"] == 3 else 0.0)})
    c2a = next(c for _, cs in judge.claims_rows(off) for c in cs if c.claim == "2a")
    assert not c2a.same_init and claims_table.claim_cells(c2a, Fmt("md"))["training"] == c2a.change.verdict


def test_a_comparison_whose_twins_were_not_run_says_why_and_has_no_training_verdict():
    init = {B: [23.4, 19.6, 22.2, 23.8, 19.3], N: [14.8, 15.0, 14.7, 15.1, 14.6]}
    df = sc_pair(init)
    no_bayes_twins = df[~((df["epochs"] == 0.0) & (df["variant"] == B))]
    c = next(c for _, cs in judge.claims_rows(no_bayes_twins) for c in cs if c.claim == "1a")
    assert c.init is None and c.change is None and c.init_note == claims.NO_TWINS == "no untrained runs"
    cells = claims_table.claim_cells(c, Fmt("md"))
    assert (cells["init"], cells["training"]) == ("no untrained runs", "-")


def test_the_training_verdict_of_a_relative_claim_reads_the_trained_claims_unit():
    """A declared "within 10% of NCL" on SC: the tolerance is 10% of the trained NCL's mean (2.0 points of 20.0),
    never 10% of the gains' own mean (0.5 of 5.0). Gains differing by about 1 point hold within 2.0 and would not
    hold within 0.5."""
    trained = {B: [26.0, 26.1, 25.9, 26.2, 25.8], N: [20.0, 20.1, 19.9, 20.2, 19.8]}
    init = {B: [20.0, 20.1, 19.9, 20.2, 19.8], N: [15.0, 15.1, 14.9, 15.2, 14.8]}  # B gains 6.0, NCL 5.0
    df = frame([row(v, s, MAIN, sc=trained[v][s]) for v in (B, N) for s in range(5)])
    df = with_twins(df, lambda r: {"sc": init[r["variant"]][int(r["seed"])]})
    decl = claims.parse_claims([{"id": "rel", "metric": "sc", "left": B, "right": N, "relation": "within",
                                 "tolerance": 0.1, "relative": True, "set": "table1"}])
    c = next(c for _, cs in judge.claims_rows(df, decl) for c in cs if c.claim == "rel")
    assert c.result.tol == pytest.approx(2.0) and c.change.tol == pytest.approx(2.0)
    assert c.change.diff == pytest.approx(1.0) and c.change.verdict == HOLDS
    assert c.change.ref != pytest.approx(20.0)  # the gains' side was never the unit


def test_an_empty_table_is_an_empty_family_with_its_gate_open():
    fam = verdicts.family_verdicts([])
    assert fam == verdicts.Family([], (), (), 0.05) and fam.gate_open
    assert verdicts.Family(["x"]).alpha == verdicts.ALPHA and verdicts.Family(["x"]).primary == ()


def test_at_most_leans_for_a_difference_exactly_at_its_tolerance():
    """One seed (no interval): the lean alone, Δ <= tol leans for, as "within"'s |Δ| <= tol."""
    at = verdicts.at_most(0.5)
    assert verdicts.compare([(0, 1.5)], [(0, 1.0)], at).verdict == FOR
    assert verdicts.compare([(0, 1.5 + 1e-9)], [(0, 1.0)], at).verdict == "inconclusive (leans against)"
    assert verdicts.compare([(0, 3.0)], [(0, 2.0)], verdicts.at_most(0.5, relative=True)).verdict == FOR  # 50% of 2


# --------------------------------------------------------------------------- margins
def test_each_margin_is_its_claims_and_metrics_with_its_source():
    """The Margin column: "not worse" at its metric's margin (claims.MARGINS, spec), the paper's claims 8 and 12a-b at
    the paper's, a declared claim at its own tolerance (>= too), or its metric's without one; "better" none. The
    verdict reads the margin the column shows."""
    rows = [row(v, s, MAIN, sc=20.0 + s + (1.0 if v == B else 0.0), probe_top1=50.0 + s, ret_p10=30.0, se_sum=2.0)
            for v in (B, N, "SimCLR", "BayesNCL (Gumbel)", "Top-k NCL") for s in range(3)]
    rows += [row(v, s, "table7", gflops=1.0, train_minutes=10.0 + s) for v in (B, N) for s in range(3)]
    rows += [row(v, s, "table6", bg_acc=90.0 + s) for v in (B, N) for s in range(3)]
    decl = claims.parse_claims([{"id": "D1", "metric": "probe_top1", "left": B, "right": N, "relation": ">=",
                                 "tolerance": 0.25}, {"id": "D2", "metric": "bg_acc", "left": B, "right": N,
                                                      "relation": ">="}])
    df = frame(rows)
    comps = {c.claim: c for _, cs in judge.claims_rows(df, decl) for c in cs}
    md = claims_table.render_claims(df, "md", decl)
    header = next(x for x in md.splitlines() if x.startswith("|  ")).split("|")
    at = [h.strip() for h in header].index("Margin")
    cell = {cid: next(x for x in md.splitlines() if x.startswith(f"| {cid} ")).split("|")[at].strip()
            for cid in ("1a", "2a", "3", "4", "8", "12a", "12b", "D1", "D2")}
    assert cell == {"1a": "-", "2a": "-1 (spec)", "3": "-1 (spec)", "4": "-1 (spec)", "8": "±1 (paper)",
                    "12a": "+1% (paper)", "12b": "+6% (paper)", "D1": "-0.25 (declared)", "D2": "-1 (spec)"}
    assert {k: claims.MARGINS[m] for k, m in (("2a", "probe_top1"), ("3", "ret_p10"), ("4", "sc"))} == \
        {k: comps[k].kind.margin for k in ("2a", "3", "4")}
    assert comps["D1"].result.tol == 0.25 and comps["2a"].result.tol == 1.0
    assert comps["12b"].result.tol == pytest.approx(0.06 * 11.0)  # relative: 6% of NCL's mean time
