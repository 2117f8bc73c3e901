"""Whether a run was still learning (bayesncl.measures.learning), carried into runs.csv, the tables and the claims
table; the evaluation BatchNorm mode named in the captions."""

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from bayesncl.measures.learning import learning_slope
from bayesncl.report import summary as summ
from bayesncl.report.claims_table import render_claims
from bayesncl.report.tables import render_table

GOLDEN = Path(__file__).parent / "golden" / "runs.csv"


def naive_slope(ys):
    """Least squares slope and its 95% t-interval, written out (n - 2 degrees of freedom)."""
    n = len(ys)
    xs = np.arange(n, dtype=float)
    xbar, ybar = xs.mean(), float(np.mean(ys))
    sxx = float(((xs - xbar) ** 2).sum())
    b = float(((xs - xbar) * (np.asarray(ys) - ybar)).sum()) / sxx
    resid = np.asarray(ys) - (ybar + b * (xs - xbar))
    se = math.sqrt(float((resid ** 2).sum()) / (n - 2) / sxx)
    hw = stats.t.ppf(0.975, n - 2) * se
    return b, b - hw, b + hw


@pytest.mark.parametrize("losses", [
    [5.5, 5.4, 5.3, 5.25, 5.2, 5.15, 5.1, 5.05, 5.0, 4.97, 4.95, 4.93, 4.91, 4.90, 4.89, 4.88],  # still falling
    [5.5, 5.0, 4.8, 4.7, 4.65, 4.6, 4.61, 4.59, 4.60, 4.61, 4.60, 4.59, 4.61, 4.60, 4.6, 4.61],  # flat at the end
    [5.0, 4.0, 4.5, 4.2, 4.4, 4.1, 4.3, 4.2, 4.25, 4.15, 4.3, 4.2, 4.22, 4.18, 4.27, 4.13, 4.2, 4.22, 4.19, 4.2],
])
def test_slope_over_the_last_fifth_equals_least_squares(losses):
    got = learning_slope(losses)
    n = max(3, math.ceil(0.2 * len(losses)))
    b, lo, hi = naive_slope(losses[-n:])
    assert got["epochs"] == n
    assert got["slope"] == pytest.approx(b, abs=1e-12)
    assert (got["lo"], got["hi"]) == (pytest.approx(lo, abs=1e-9), pytest.approx(hi, abs=1e-9))
    assert got["still_learning"] == (hi < 0)


def test_still_learning_decisions():
    falling = [5.0 - 0.05 * e for e in range(20)]
    assert learning_slope(falling)["still_learning"] is True
    noisy_flat = [4.6, 4.62, 4.58, 4.61, 4.59, 4.6, 4.62, 4.58, 4.6, 4.61]
    assert learning_slope(noisy_flat)["still_learning"] is False
    assert learning_slope([5.0, 4.0])["still_learning"] is None  # too few epochs to fit
    assert learning_slope([5.0, 4.0, float("nan")])["still_learning"] is None


def _golden(still: dict[str, float] | None = None, bn: str = "batch") -> pd.DataFrame:
    df = summ.prepare(pd.read_csv(GOLDEN))
    df["eval_bn"] = bn
    df["still_learning"] = 0.0
    for variant, v in (still or {}).items():
        df.loc[df["variant"] == variant, "still_learning"] = v
    return df


def test_tables_mark_rows_with_runs_still_learning_and_count_them():
    df = _golden({"NCL": 1.0})
    n_ncl = int(((df["variant"] == "NCL") & df["sets"].str.contains("table1")).sum())
    n_all = int(df["sets"].str.contains("table1").sum())
    md = render_table(df, "table1", "md")
    assert f"{n_ncl} of the table's {n_all} runs were still learning" in md
    ncl_rows = [line for line in md.splitlines() if line.startswith("| NCL")]
    assert ncl_rows and all("§" in line for line in ncl_rows)
    assert not any("§" in line for line in md.splitlines() if line.startswith("| SimCLR"))
    tex = render_table(df, "table1", "tex")
    assert r"$^\S$" in tex
    quiet = render_table(_golden(), "table1", "md")
    assert "still learning" not in quiet and "§" not in quiet


def test_claims_table_marks_rows_resting_on_runs_still_learning():
    df = _golden({"NCL": 1.0})
    md = render_claims(df, "md")
    rows = [line for line in md.splitlines() if line.startswith("| 1a")]
    assert rows and all("1a§" in line for line in rows)  # 1a compares BayesNCL with NCL
    marked = sum("§" in line.split("|")[1] for line in md.splitlines() if line.startswith("| "))
    assert marked >= 1 and f"§ {marked} of the" in md
    assert "still learning" not in render_claims(_golden(), "md")


@pytest.mark.parametrize("bn,phrase", [("batch", "batch statistics of each test batch"),
                                       ("running", "running statistics (eval mode")])
def test_captions_name_the_evaluation_batchnorm_mode(bn, phrase):
    df = _golden(bn=bn)
    df["sets"] = df["sets"] + ";table4;table5"  # every table has rows
    for table in ("table1", "table2", "table4", "table5"):
        md = render_table(df, table, "md")
        assert "| no runs" not in md and phrase in md, table
    assert "BatchNorm" not in render_table(df, "table7", "md")


def test_summary_reads_the_mode_and_the_learning_record(tmp_path):
    """runs.csv's eval_bn, learning_slope, learning_hi, still_learning, collapsed, collapse_epoch,
    infonce_chance and infonce_final come from features.json."""
    from helpers.report import tiny_config, write_eval  # the fake evaluation files of the report tests

    wf = tiny_config(tmp_path / "results")
    runs = write_eval(wf)
    rid = next(iter(runs))
    folder = Path(wf["results"]) / "runs" / rid / "eval"
    data = json.loads((folder / "features.json").read_text())
    data["run"]["eval_bn"] = "running"
    data["training"]["learning"] = {"slope": -0.01, "lo": -0.02, "hi": -0.001, "epochs": 4, "still_learning": True}
    data["training"]["collapse"] = {"collapsed": True, "epoch": 163, "chance": math.log(255)}
    data["training"]["infonce_final"] = 3.25
    (folder / "features.json").write_text(json.dumps(data))
    rows = {r["run_id"]: r for r in summ.summarize(wf).to_dict("records")}
    r = rows[rid]
    assert (r["eval_bn"], r["learning_slope"], r["learning_hi"], r["still_learning"]) == ("running", -0.01, -0.001, 1.0)
    assert (r["collapsed"], r["collapse_epoch"], r["infonce_chance"]) == (1.0, 163.0, math.log(255))
    assert r["infonce_final"] == 3.25
    other = rows[list(runs)[1]]
    assert other["eval_bn"] == "" and math.isnan(other["still_learning"]) and math.isnan(other["collapsed"])
    assert math.isnan(other["infonce_final"])


def naive_saturated(means, start, share=0.95):
    """The criterion written out: walk down from the budget below the largest; a budget counts when each of its
    three means covered `share` of the way from the start to the largest budget's (InfoNCE falling, SC and
    top-1 rising); the answer is the last budget reached before the first that does not count."""
    budgets = sorted(e for e in means if e > 0)
    if len(budgets) < 2:
        return None
    top = means[budgets[-1]]
    answer = None
    for e in budgets[-2::-1]:
        ok = True
        for k in ("infonce", "sc", "top1"):
            way = top[k] - start[k]
            gone = means[e][k] - start[k]
            if k == "infonce":
                way, gone = -way, -gone
            if not (way > 0 and gone >= share * way):  # NaN fails both
                ok = False
        if not ok:
            break
        answer = e
    return answer


def m(loss, sc, top1):
    return {"infonce": loss, "sc": sc, "top1": top1}


START = {"infonce": math.log(255), "sc": 15.0, "top1": 35.0}


def test_saturated_budget_is_the_smallest_from_which_every_budget_covered_95_percent_of_the_way():
    from bayesncl.measures.learning import SATURATION_SHARE, saturated_budget

    assert SATURATION_SHARE == 0.95
    # the way to 256: InfoNCE 5.541 -> 4.50 (1.04), SC 15 -> 75 (60), top-1 35 -> 95 (60)
    curve = {0: m(math.nan, 15, 35), 16: m(5.2, 15, 38), 64: m(4.55, 72, 92), 128: m(4.52, 74, 94),
             256: m(4.50, 75, 95)}
    assert saturated_budget(curve, START) == 64  # 0 (random init) never counts; 64 covered >= 95% everywhere
    assert saturated_budget({**curve, 64: m(4.55, 71.9, 92)}, START) == 128  # SC 94.8% of its way
    assert saturated_budget({**curve, 64: m(4.55, 72, 91.9)}, START) == 128  # top-1 94.8%
    assert saturated_budget({**curve, 64: m(4.56, 72, 92)}, START) == 128  # InfoNCE 94.3%
    assert saturated_budget({**curve, 128: m(4.60, 74, 94)}, START) is None  # from itself on: 128 falls short
    assert saturated_budget({**curve, 64: m(4.45, 80, 99)}, START) == 64  # past the largest counts as there
    assert saturated_budget({**curve, 64: m(math.nan, 72, 92)}, START) == 128  # a missing mean never counts
    assert saturated_budget({**curve, 256: m(4.50, 14, 95)}, START) is None  # SC never rose: nothing to saturate
    assert saturated_budget({16: curve[16], 256: curve[256]}, START) is None  # only the reference itself
    assert saturated_budget({256: curve[256]}, START) is None


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.floats(4.0, 5.6), st.floats(10, 90), st.floats(30, 99)), min_size=1, max_size=6),
       st.floats(10, 30), st.floats(30, 50))
def test_saturated_budget_equals_the_written_out_criterion(points, sc0, top0):
    from bayesncl.measures.learning import saturated_budget

    means = {16 * 2 ** i: m(*p) for i, p in enumerate(points)}
    start = {"infonce": math.log(255), "sc": sc0, "top1": top0}
    assert saturated_budget(means, start) == naive_saturated(means, start)


def test_gain_shares_are_the_share_of_the_way_to_the_largest_budget():
    from bayesncl.measures.learning import gain_shares

    shares = gain_shares({64: m(4.55, 72, 92), 256: m(4.50, 75, 95)}, START)
    assert shares[256] == {"infonce": 1.0, "sc": 1.0, "top1": 1.0}
    assert shares[64]["sc"] == pytest.approx(57 / 60) and shares[64]["top1"] == pytest.approx(57 / 60)
    assert shares[64]["infonce"] == pytest.approx((START["infonce"] - 4.55) / (START["infonce"] - 4.50))
    assert math.isnan(gain_shares({64: m(4.5, 20, 40), 128: m(5.6, 30, 50)}, START)[64]["infonce"])  # loss rose


def naive_collapse(losses, batch):
    """The collapse rule written out: the first epoch whose loss climbed back more than half of what the run
    had gained below chance, ln(2N - 1), once that gain reached 0.5."""
    chance = math.log(2 * batch - 1)
    for e in range(1, len(losses)):
        before = [v for v in losses[:e] if math.isfinite(v)]
        if not before or not math.isfinite(losses[e]):
            continue
        best = min(before)
        if chance - best >= 0.5 and losses[e] - best > (chance - best) / 2:
            return e + 1
    return None


@pytest.mark.parametrize("losses,batch,epoch", [
    ([5.5, 5.2, 4.9, 4.6, 4.43, 4.42, 4.85, 5.54, 5.53, 5.5], 128, 8),  # like seed 8: 4.85 gave back 0.43 < 0.56
    ([5.5, 5.2, 4.9, 4.6, 4.43, 4.42, 4.54, 4.44, 4.40], 128, None),  # epoch noise of 0.12
    ([5.54, 5.45, 5.50, 5.53, 5.40], 128, None),  # gained under 0.5: noise near chance is not a collapse
    ([5.5, 5.32, 5.40, 5.447, 5.29], 128, None),  # a 0.13 rise after a 0.22 gain (seen in the miniature): noise
    ([4.0, 3.0, 2.0, 2.9, 3.0], 16, 4),  # chance ln(31) = 3.43: 2.9 - 2.0 > (3.43 - 2.0) / 2
    ([4.0, 3.0, 2.0, 2.7, 2.6], 16, None),  # 0.7 < 0.72: climbed back less than half
    ([4.0, 3.0, 2.0, 2.5, 2.8], 16, 5),  # measured from the best so far (2.0), not the last epoch
    ([5.0, 4.0, float("nan"), 4.9], 64, 4),  # a NaN epoch is skipped, not a best
])
def test_collapse_is_the_first_epoch_that_gives_back_half_the_gain(losses, batch, epoch):
    from bayesncl.measures.learning import collapse

    got = collapse(losses, batch)
    assert got["chance"] == pytest.approx(math.log(2 * batch - 1))
    assert got["epoch"] == epoch == naive_collapse(losses, batch)
    assert got["collapsed"] is (epoch is not None)


def test_the_still_learning_slope_and_the_collapse_read_infonce_alone():
    """A BayesNCL log: InfoNCE falls steadily while the KL term rises as fast, so the loss (InfoNCE + KL) is flat;
    the run is still learning. Then InfoNCE climbs back to chance while the loss does not: a collapse."""
    from bayesncl.evaluation.sections import training_record

    falling = [5.0 - 0.05 * e + 0.002 * (-1) ** e for e in range(40)]
    log = [{"epoch": e + 1, "infonce": v, "kl": 0.05 * e, "loss": v + 0.05 * e, "open_gates": 0.5}
           for e, v in enumerate(falling)]
    got = training_record(log, 64)
    assert got["learning"]["still_learning"] is True and got["learning"]["slope"] == pytest.approx(-0.05, abs=1e-3)
    assert learning_slope([r["loss"] for r in log])["still_learning"] is False  # what a fit on the loss says
    assert got["infonce_final"] == falling[-1] and got["loss"] == [r["loss"] for r in log]
    assert got["collapse"]["collapsed"] is False and got["open_gates_last"] == 0.5
    chance = math.log(127)
    fell = [{"epoch": 1, "infonce": 4.0, "loss": 4.0}, {"epoch": 2, "infonce": chance, "loss": 3.0}]
    assert training_record(fell, 64)["collapse"]["epoch"] == 2
    old = [{"epoch": e + 1, "loss": v} for e, v in enumerate(falling)]  # a log before the infonce column
    assert training_record(old, 64)["learning"]["still_learning"] is True


def test_collapse_thresholds_at_equality():
    """A gain of exactly COLLAPSE_MIN_GAIN counts (at least 0.5); a climb of exactly half the way back does not
    (more than half); the next float past each boundary decides the other way."""
    from bayesncl.measures.learning import COLLAPSE_MIN_GAIN, collapse

    batch = 64
    chance = math.log(2 * batch - 1)
    best = chance - COLLAPSE_MIN_GAIN  # a gain of exactly the minimum, as collapse computes it
    half = (chance - best) / 2
    back = best + half
    while back - best < half:  # the float whose climb from best is exactly half the way back
        back = math.nextafter(back, math.inf)
    while back - best > half:
        back = math.nextafter(back, -math.inf)
    assert back - best == half
    assert collapse([chance, best, back], batch)["collapsed"] is False  # exactly half: not more than half
    above = math.nextafter(back, math.inf)
    assert collapse([chance, best, above], batch) == {"collapsed": True, "epoch": 3, "chance": chance}
    short = math.nextafter(best, math.inf)  # gained a hair under the minimum: never a collapse
    assert collapse([chance, short, chance], batch)["collapsed"] is False
    assert collapse([chance, best, chance], batch)["epoch"] == 3


def test_collapse_undecided_without_a_finite_epoch():
    from bayesncl.measures.learning import collapse

    assert collapse([], 128)["collapsed"] is None  # the random-init reference (0 epochs)
    assert collapse([float("nan")], 128)["collapsed"] is None


def test_the_claims_collapse_mark_counts_both_sides_and_rows_not_runs():
    """Two collapsed NCL runs, the right side of 1a: a row is marked when a run of either side collapsed, and the
    caption counts the marked rows of all rows (each marked row holds both runs: a count of runs says twice)."""
    import re

    df = _golden()
    df["collapsed"] = 0.0
    ncl = df.index[(df["variant"] == "NCL") & (df["dataset"] == "cifar10")]
    assert len(ncl) >= 2
    df.loc[ncl[:2], "collapsed"] = 1.0
    md = render_claims(df, "md")
    ids = [line.split("|")[1].strip() for line in md.splitlines()
           if line.startswith("| ") and not line.startswith("| *") and line.split("|")[2].strip() not in ("Claim", "")]
    marked = [i for i in ids if i.endswith("¶")]
    assert "1a¶" in ids and 2 <= len(marked) < len(ids)  # 1a: SC: BayesNCL > NCL, NCL on the right
    assert re.search(r"¶ (\d+) of the (\d+) rows compare runs", md).groups() == (str(len(marked)), str(len(ids)))


def test_tables_and_claims_mark_rows_with_collapsed_runs_and_count_them():
    df = _golden()
    df["collapsed"] = 0.0
    t1 = df["sets"].str.contains("table1")
    bayes = df.index[(df["variant"] == "BayesNCL") & t1]
    assert len(bayes)
    df.loc[bayes[:1], "collapsed"] = 1.0  # one seed of one row
    md = render_table(df, "table1", "md")
    assert f"¶ 1 of the table's {int(t1.sum())} runs collapsed" in md
    marked = [line for line in md.splitlines() if line.startswith("| ") and "¶" in line.split("|")[1]]
    assert len(marked) == 1 and marked[0].startswith("| BayesNCL")
    assert r"$^\P$" in render_table(df, "table1", "tex")
    claims = render_claims(df, "md")
    assert any(line.startswith("| 1a¶") for line in claims.splitlines())
    assert "of which some collapsed" in claims
    quiet = _golden()
    quiet["collapsed"] = 0.0
    assert "¶" not in render_table(quiet, "table1", "md") and "some collapsed" not in render_claims(quiet, "md")
    plain = render_table(df, "table1", "txt")
    assert "¶" in plain and r"\P" not in plain
