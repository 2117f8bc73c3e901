"""Planning (docs/METHOD.md section 9, "Planning"; bayesncl.plan, `bayesncl plan`): the seeds a claim needs from
a pilot by the noncentral t, checked against simulated grids; the two-look rule and the gatekeeping checked by
simulation under the null (benchmarks/plan_simulation.py at a small seeded size); the grown grid's claims table
judged in two looks; the overlay and the command."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats

from bayesncl import grid, plan
from bayesncl.plan import Plan
from bayesncl.cli import main
from bayesncl.report import claims_table, judge, verdicts as V
from bayesncl.errors import ConfigError
from helpers.claims import HOLDS, MAIN, frame, row

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("plan_simulation", ROOT / "benchmarks" / "plan_simulation.py")
sim = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sim)
B, N = "BayesNCL (STE)", "NCL"


def sigma(p: float, n: int) -> float:
    return math.sqrt(p * (1 - p) / n)


# --------------------------------------------------------------------------- the power formula
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
    assert plan.power(30, 1.0, 1.0, 0.01, two_sided_bound=True) > 0.9
    assert plan.seeds_needed(-1.0, 1.0, 0.01) is None and plan.seeds_needed(0.01, 1.0, 0.0001) is None
    assert plan.seeds_needed(1.0, 0.0, 0.01) == 2  # equal differences: any interval decides
    assert plan.seeds_needed(1.0, math.nan, 0.01) is None


@pytest.mark.parametrize("pilot", sim.PILOTS[:4], ids=[p[0] for p in sim.PILOTS[:4]])
def test_planned_seeds_decide_in_80_percent_of_simulated_grids(pilot):
    """Grids of the planned n drawn with the pilot's mean and sd hold in at least 80% (within simulation error),
    and one seed fewer does not: the n is the smallest, from the noncentral t, not a normal approximation."""
    name, kind, mean, sd, m = pilot
    sims = 4000
    r = sim.power_check(kind, mean, sd, m, sims, np.random.default_rng(1))
    n = r["n"]
    assert r[n] >= 0.8 - 3 * sigma(0.8, sims), r
    if n - 1 >= 2:
        assert r[n - 1] <= 0.8 + 3 * sigma(0.8, sims), r


# --------------------------------------------------------------------------- the two looks and the gate
@pytest.mark.parametrize("kind, sd", [(V.BETTER, 6.5), (V.NOT_WORSE, 1.2)], ids=["better", "not worse"])
def test_two_looks_keep_the_error_over_both_at_alpha(kind, sd):
    """The claim's bound true, the second look always taken (the worst case): false holds over both looks at the
    rule's designed level (a1 + (1 - a1) a2, one-sided), and never above alpha / 2 beyond simulation error."""
    sims = 40000
    r = sim.two_looks_null(kind, sd, 3, sims, np.random.default_rng(2))
    s = sigma(r["designed"], sims)
    assert abs(r["rate"] - r["designed"]) <= 4 * s, r
    assert r["rate"] <= r["bound"] + 3 * s and r["designed"] <= r["bound"]
    assert r["at_look_1"] == pytest.approx(V.LOOK_ALPHAS[0] / 2, abs=4 * sigma(0.005, sims))


def test_gatekeeping_keeps_the_familywise_error_at_alpha():
    sims = 40000
    r = sim.gatekeeping_fwer(sims, np.random.default_rng(3))
    assert r["fwer"] <= r["bound"] + 3 * sigma(r["bound"], sims), r
    assert r["gate_open"] < 0.05  # the false primary claim keeps it closed but where it holds by chance


def test_two_looks_on_arrays():
    """two_looks by hand: look 1 decides at 0.01, the rest goes to look 2 at 0.04; a primary that failed at look 1
    or is open without added seeds keeps the secondary verdicts uncontrolled."""
    nan = math.nan
    ran = np.array([True, True])
    prim = np.array([True, False])
    # primary held at look 1 (p 0.005); secondary open at look 1 (0.03), holds at look 2 (0.03 < 0.04)
    codes, ctl, look = V.two_looks((np.array([0.005, 0.03]), np.array([1.0, 1.0])), ran,
                                   (np.array([nan, 0.03]), np.array([nan, 1.0])), np.array([False, True]), prim)
    assert codes.tolist() == [V.HOLD, V.HOLD] and ctl.tolist() == [True, True] and look.tolist() == [1, 2]
    # the same at look 2 but 0.045: open
    codes, _, _ = V.two_looks((np.array([0.005, 0.03]), np.array([1.0, 1.0])), ran,
                              (np.array([nan, 0.045]), np.array([nan, 1.0])), np.array([False, True]), prim)
    assert codes.tolist() == [V.HOLD, V.OPEN]
    # primary open at look 1 and given no added seeds: the secondary's look-2 hold is not controlled
    codes, ctl, look = V.two_looks((np.array([0.5, 0.03]), np.array([1.0, 1.0])), ran,
                                   (np.array([nan, 0.001]), np.array([nan, 1.0])), np.array([False, True]), prim)
    assert ctl.tolist() == [True, False] and look.tolist() == [1, 2]
    # primary failed at look 1: likewise
    codes, ctl, _ = V.two_looks((np.array([1.0, 0.03]), np.array([0.001, 1.0])), ran,
                                (np.array([nan, 0.001]), np.array([nan, 1.0])), np.array([False, True]), prim)
    assert codes[0] == V.FAIL and ctl.tolist() == [True, False]
    # primary open at look 1, holds at look 2: the secondary is tested at look 2
    codes, ctl, look = V.two_looks((np.array([0.5, 0.5]), np.array([1.0, 1.0])), ran,
                                   (np.array([0.001, 0.001]), np.array([1.0, 1.0])), ran, prim)
    assert codes.tolist() == [V.HOLD, V.HOLD] and ctl.tolist() == [True, True] and look.tolist() == [2, 2]


def test_a_grown_grids_table_judges_two_looks_written_out():
    """Seeds 0-2 the pilot (pilot_of names table1), 3-7 added: look 1 reads seeds 0-2 at 0.01 (doubled p), look 2
    seeds 3-7 alone at 0.04; the Family column names the look, the caption the rule."""
    d = [0.6, 3.0, 1.0, 2.1, 2.6, 1.9, 2.4, 2.2]  # BayesNCL - NCL on SC per seed
    rows = []
    for s in range(8):
        for v, sc in ((B, 20.0 + d[s]), (N, 20.0)):
            rows.append(row(v, s, MAIN, sc=sc, probe_top1=50.0 + (1.0 + s / 10 if v == B else 0.0),
                            pilot_of=MAIN if s < 3 else ""))
    df = frame(rows)
    comps = {c.claim: c for _, cs in judge.claims_rows(df) for c in cs}
    one = 2 * stats.ttest_1samp(d[:3], 0, alternative="greater").pvalue
    two = 2 * stats.ttest_1samp(d[3:], 0, alternative="greater").pvalue
    assert one > 0.01 / 2 and two < 0.04 / 2  # open at look 1; holds at look 2 within the primary family of 2
    assert comps["1a"].looks[0].n == (3,) and comps["1a"].looks[1].n == (5,) and comps["1a"].result.n == (8,)
    assert comps["1a"].family == "holds (family, look 2)"
    assert comps["2a"].family == "holds (family, look 1)"  # decided on the pilot: it stands
    md = claims_table.render_claims(df, "md")
    assert "Two looks (docs/METHOD.md section 9, \"Planning\"): look 1 judged the pilot's seeds at 0.01" in md
    assert "secondary tested at 0.01 (look 1) and 0.04 (look 2)" in md or "secondary not controlled" in md
    # the same runs without pilot_of: one look, the plain family
    single = {c.claim: c for _, cs in judge.claims_rows(frame([{**r, "pilot_of": ""} for r in rows])) for c in cs}
    assert single["1a"].family == "holds (family)" and single["1a"].looks == ()


# --------------------------------------------------------------------------- the planner and its overlay
def demo_grid() -> dict:
    return yaml.safe_load((ROOT / "config" / "config.yaml").read_text())


def pilot_frame() -> pd.DataFrame:
    """Tables 1-2 of the demo grid, 5 seeds: 1a leans for with a wide spread, 2a even; the rest noise."""
    rng = np.random.default_rng(4)
    rows = []
    for s in range(5):
        for v in ("SimCLR", N, "Top-k NCL", B, "BayesNCL (Gumbel)"):
            rows.append(row(v, s, MAIN, sc=20.0 + (4.0 + rng.normal(0, 4) if v == B else rng.normal(0, 1)),
                            se_sum=2.0 + rng.normal(0, 0.1), probe_top1=50.0 + rng.normal(0, 1),
                            ret_p10=30.0 + rng.normal(0, 2)))
    return frame(rows)


def test_the_plan_of_a_pilot_and_its_overlay():
    wf = demo_grid()
    df = pilot_frame()
    p = plan.make_plan(df, wf)
    need = {n.claim: n for n in p.needs}
    c1a = next(c for _, cs in judge.claims_rows(df) for c in cs if c.claim == "1a")
    sd = float(np.std(np.array(c1a.result.left) - np.array(c1a.result.right), ddof=1))
    assert need["1a"].sd == pytest.approx(sd) and need["1a"].diff == pytest.approx(c1a.result.diff)
    m_primary = sum(n.family == "primary" and not n.why for n in p.needs)
    assert need["1a"].alpha == pytest.approx(V.LOOK_ALPHAS[1] / m_primary / 2)
    assert need["1a"].add == plan.seeds_needed(c1a.result.diff, sd, need["1a"].alpha)
    assert need["2a"].effect == 1.0  # not worse: planned at a true difference of 0 against its 1-point margin
    assert need["1a"].sets == ("table1",) and need["2a"].sets == ("table2",)
    assert p.grow["table1"] == max(n.add for n in p.needs if n.add and "table1" in n.sets)
    assert {n.why for n in p.needs if n.claim == "7a"} == {"not run: run its sets first"}
    layer = plan.overlay(p, wf)
    big = plan.grown(wf, layer)
    for s in wf["sets"]:
        assert grid.set_seeds(big, s)[:len(p.pilot[s])] == p.pilot[s]  # the pilot's seeds stay first
        assert len(grid.set_seeds(big, s)) == len(p.pilot[s]) + p.grow.get(s, 0)
    assert layer["plan"]["pilot"] == p.pilot and grid.pilot_seeds(big) == p.pilot
    assert layer["seeds"] == list(range(len(layer["seeds"]))) and len(layer["seeds"]) > 5  # 0-4, then 5, 6, ...
    runs = grid.expand_grid(big)
    added = [r for r in runs.values() if "table1" in r.sets and r.config["seed"] >= 5]
    assert added and all("table1" not in r.pilot_of for r in added)
    assert all("table1" in r.pilot_of for r in runs.values() if "table1" in r.sets and r.config["seed"] < 5)
    with pytest.raises(ConfigError, match="already a second look"):
        plan.make_plan(df, big)


def test_a_set_with_its_own_seeds_grows_its_own_list():
    wf = demo_grid()
    wf["sets"]["table1"] = {**wf["sets"]["table1"], "seeds": [7, 9, 11]}
    p = plan.Plan([], {s: grid.set_seeds(wf, s) for s in wf["sets"]}, {"table1": 4})
    layer = plan.overlay(p, wf)
    # its own list grows (7 seeds), the global list does not (its 5 serve every other set)
    assert layer["sets"]["table1"] == {"seeds": [7, 9, 11, 12, 13, 14, 15]} and layer["seeds"] == wf["seeds"]
    assert grid.set_seeds(plan.grown(wf, layer), "table1") == [7, 9, 11, 12, 13, 14, 15]


def test_the_plan_command(tmp_path, capsys):
    csv = tmp_path / "runs.csv"
    pilot_frame().to_csv(csv, index=False)
    grid_file = ROOT / "config" / "config.yaml"
    assert main(["plan", "--grid", str(grid_file)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no pilot: run the grid once" in err and "--pilot" in err
    assert main(["plan", "--grid", str(grid_file), "--pilot", str(tmp_path / "none.csv")]) == 2
    assert "none.csv: no such file; no pilot" in capsys.readouterr().err
    out = tmp_path / "plan.yaml"
    assert main(["plan", "--grid", str(grid_file), "--pilot", str(csv), "--out", str(out),
                 "--text", str(tmp_path / "plan.md")]) == 0
    printed = capsys.readouterr().out
    assert "Seeds each claim needs" in printed and "| 1a" not in printed and " 1a " in printed
    assert "GPU-hours on one NVIDIA H200" in printed and f"overlay: {out}" in printed
    assert (tmp_path / "plan.md").read_text() in printed
    layer = yaml.safe_load(out.read_text())
    assert set(layer) == {"seeds", "sets", "plan"} and out.read_text().startswith("# bayesncl plan")
    # the grown grid: the command says it is a second look and plans nothing more
    big = plan.grown(yaml.safe_load(grid_file.read_text()), layer)
    assert main(["plan", "--grid-json", json.dumps(big), "--pilot", str(csv), "--out", str(tmp_path / "p2.yaml")]) == 0
    assert "already a second look" in capsys.readouterr().out
    assert yaml.safe_load((tmp_path / "p2.yaml").read_text()) == {}


def test_the_plans_words():
    """What the planner says, whole: why a comparison gets no seeds, the rendering of a priced and an unpriced
    plan, the dataset titles, a grown grid refused."""
    wf = demo_grid()
    df = pilot_frame()
    against = frame([row(v, s, MAIN, sc=20.0 + (-1.0 - s if v == B else 0.0)) for v in (B, N) for s in range(3)])
    need = {n.claim: n for n in plan.make_plan(against, wf).needs}
    assert need["1a"].why == "the pilot's difference is not in the claim's direction: no number of seeds is planned"
    p = plan.make_plan(df, wf)
    text = plan.render(p, {"synthetic": "Synthetic"})
    head, rest = text.split("\n", 1)
    assert head.startswith("Seeds each claim needs (docs/METHOD.md section 9, \"Planning\"): 80% power")
    assert "\nSynthetic  1a " in rest and "\nsynthetic " not in rest
    assert text.endswith(f"\n\nGrow: {', '.join(f'{s} +{k}' for s, k in p.grow.items())}.\n")
    rows = [line.split() for line in rest.splitlines() if line.startswith("Synthetic  1a ")]
    assert rows[0][8] == str(need_1a := next(n for n in p.needs if n.claim == "1a").add) and rows[0][9] == "-"
    assert rows[0][3] == "5" and rows[0][2] == "primary"  # the pilot's seeds, the family
    assert need_1a and "GPU-hours" not in text  # unpriced: no cost column values, no cost line
    p.gpu, p.gpu_h, p.runs_added = "NVIDIA H200", 12.345, 7
    for n in p.needs:
        n.gpu_h = 0.0123
    text = plan.render(p)
    assert "\nThe overlay adds 7 runs: 12.3 GPU-hours on one NVIDIA H200" in text
    assert next(line for line in text.splitlines() if line.startswith("synthetic  1a ")).split()[9] == "0.012"
    p.gpu, p.unpriced = "", "GPU-hours not priced: give --images"
    assert plan.render(p).endswith("\nGPU-hours not priced: give --images.\n")
    with pytest.raises(ConfigError) as e:
        plan.make_plan(df, plan.grown(wf, plan.overlay(p, wf)))
    assert str(e.value) == ("this grid is already a second look (its `plan:` names the pilot's seeds): the rule spends "
                            "its error over two looks, and a third is not planned; read its claims table")


def test_the_plan_command_checks_its_grid(tmp_path, capsys):
    bad = tmp_path / "grid.yaml"
    bad.write_text("results: r\nseeds: [0]\ndefaults: {}\ndatasets: {}\nvariants: {}\nsets: {}\nnonsense: 1\n")
    assert main(["plan", "--grid", str(bad), "--pilot", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("bayesncl plan: error: the config: unknown key nonsense") and f"in --grid {bad}" in err


def test_the_gate_line_and_the_edges_of_a_plan():
    wf = demo_grid()
    even = frame([row(v, s, MAIN, sc=20.0 + (x if v == B else 0.0), probe_top1=50.0 + (y if v == B else 0.0))
                  for v in (B, N) for s, (x, y) in enumerate(((-1.0, 3.0), (0.0, 2.0), (1.0, 4.0)))])
    p = plan.make_plan(even, wf)
    need = {n.claim: n for n in p.needs}
    assert need["1a"].diff == 0.0 and need["1a"].why.startswith("the pilot's difference is not in the claim's direction")
    assert plan.gate_line(p, {"synthetic": "Synthetic"}).startswith(
        "The gate stays closed whatever is added (1a (Synthetic): the pilot's difference is not in")
    assert need["2a"].add and plan.gate_line(Plan([need["2a"]], {})) == (
        "The primary claims are decided or planned: the secondary family is planned as if the gate opens.")
    lines = plan.render(p).splitlines()
    not_run = next(line.split() for line in lines if line.split()[1:2] == ["7a"])  # the block no dataset ran: "-"
    assert not_run[0] == "-" and not_run[3:10] == ["-"] * 7  # n, sd, Δ, planned Δ, level, add, GPU-h: none for a comparison not run
    empty = Plan([], {})
    assert empty.grow == {} and plan.render(empty).endswith("\n\nGrow: nothing.\n")


def test_the_plans_price_is_the_added_runs():
    """GPU-hours of the runs the overlay adds, never the pilot's: the added ids are the grown grid's new ones."""
    from bayesncl.estimate import measured_rates

    wf = demo_grid()
    p = plan.make_plan(pilot_frame(), wf, measured_rates("h200"))
    new = set(grid.expand_grid(plan.grown(wf, plan.overlay(p, wf)))) - set(grid.expand_grid(wf))
    assert p.runs_added == len(new) > 0 and p.gpu_h > 0 and p.gpu == "NVIDIA H200"
    assert all(n.gpu_h > 0 for n in p.needs if n.add)


def test_a_primary_not_run_does_not_close_the_plans_gate():
    planned = plan.Need("synthetic", "1a", "", "primary", add=5)
    gone = plan.Need("cifar10", "2a", "", "primary", why="not run: run its sets first")
    assert plan.gate_line(Plan([planned, gone], {})).startswith("The primary claims are decided or planned")


def test_a_grown_grids_pilot_key_is_checked():
    wf = demo_grid()
    for bad in ([1], {"pilot": [0, 1]}):
        with pytest.raises(ConfigError, match=r"^plan.pilot: expected \{set: \[seeds\]\}, as `bayesncl plan`"):
            grid.pilot_seeds({**wf, "plan": bad})
    with pytest.raises(ConfigError) as e:
        grid.pilot_seeds({**wf, "plan": {"pilot": {"table9": [0]}}})
    assert str(e.value) == ("plan.pilot.table9: the grid has no set 'table9'; the plan was written for another grid "
                            "(rerun `bayesncl plan` with this grid's --grid)")


def test_a_secondary_verdict_the_gate_leaves_uncontrolled_names_its_own_look():
    """2a open at both looks keeps the gate closed: 1c's verdict is its plain one at look 2 (the added seeds
    alone), marked not controlled; on the pilot's seeds alone it was open."""
    se_gap = [0.5, -0.3, 0.1, 0.30, 0.31, 0.29, 0.30, 0.32]  # NCL - BayesNCL per seed: open on 0-2, clear on 3-7
    probe = [3.0, -4.0, 1.0, -2.0, 5.0, -6.0, 2.0, 0.0]  # 2a: wide, open
    rows = []
    for s in range(8):
        for v in (B, N):
            rows.append(row(v, s, MAIN, sc=20.0, se_sum=2.0 - (se_gap[s] if v == B else 0.0),
                            probe_top1=50.0 + (probe[s] if v == B else 0.0), pilot_of=MAIN if s < 3 else ""))
    comps = {c.claim: c for _, cs in judge.claims_rows(frame(rows)) for c in cs}
    assert comps["2a"].family == "inconclusive (family, look 2)"
    assert comps["1c"].looks[0].verdict != HOLDS and comps["1c"].looks[1].verdict == HOLDS
    assert comps["1c"].family == "holds (not controlled, look 2)"


def test_claims_not_run_keep_their_primary_flag():
    missing = dict(judge.claims_rows(frame([])))[""]
    assert [c.claim for c in missing if c.primary] == ["1a", "2a"]
