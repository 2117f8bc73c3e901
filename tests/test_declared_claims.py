"""The workflow config's own claims (claims:), judged by the paper's claims' rule (report/claims.py)."""

import io
import re
from pathlib import Path

import pandas as pd
import pytest

from bayesncl.core.errors import ConfigError
from bayesncl.grid.expand import SETS
from bayesncl.report import claims as K, judge

VARIANTS = {"A": {}, "B": {}}


def _rows(a, b, metric="sc", sets="table1"):
    return pd.DataFrame([{"run_id": f"synthetic/{m}/seed~{s}", "dataset": "synthetic", "arch": "resnet18",
                          "method": m, "variant": v, "sets": sets, "seed": s, metric: x}
                         for m, v, xs in (("ncl", "A", a), ("bayesncl", "B", b)) for s, x in enumerate(xs)])


def _judge(decl, df):
    blocks = dict(judge.claims_rows(df, K.parse_claims([decl])))
    (c,) = [c for c in blocks.get("synthetic", []) + blocks.get("", []) if c.claim == decl.get("id", "D1")]
    return c


@pytest.mark.parametrize("decl, message", [
    ({"metric": "sc", "left": "A", "right": "B"}, "claims[0]: missing relation; a claim takes absolute, id, left,"),
    ({"metric": "sc", "left": "A", "right": "B", "relation": ">", "colour": 1}, "claims[0]: unknown key colour;"),
    ({"metric": "nope", "left": "A", "right": "B", "relation": ">"}, "claims[0].metric: unknown metric 'nope';"),
    ({"metric": "sc", "left": "A", "right": "B", "relation": "=>"}, "claims[0].relation: '=>' is not one of >, <,"),
    ({"metric": "sc", "left": "A", "right": "C", "relation": ">"}, "claims[0].right: no variant 'C'; the variants: A, B"),
    ({"metric": "sc", "left": "A", "right": "B", "relation": "within"},
     "claims[0].tolerance: 'within' needs a positive tolerance"),
    ({"metric": "sc", "left": "A", "right": "B", "relation": ">", "set": "table9"}, "claims[0].set: unknown set 'table9'"),
    ("sc > B", "claims[0]: expected a mapping with metric, left, right and relation, got 'sc > B'"),
])
def test_a_bad_claim_is_one_line_naming_it(decl, message):
    with pytest.raises(ConfigError) as e:
        K.parse_claims([decl], VARIANTS)
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_two_claims_with_one_id_are_refused():
    d = {"id": "x", "metric": "sc", "left": "A", "right": "B", "relation": ">"}
    with pytest.raises(ConfigError) as e:
        K.parse_claims([d, d], VARIANTS)
    assert str(e.value) == "claims[1].id: 'x' is used twice; give each claim its own id"


def test_an_unknown_set_is_refused_listing_the_sets():
    with pytest.raises(ConfigError) as e:
        K.parse_claims([{"metric": "sc", "left": "A", "right": "B", "relation": ">", "set": "table9"}], VARIANTS)
    listed = str(e.value).split("; the sets: ")[1].split(", ")
    assert listed == list(SETS) and "table1" in listed and "figure4a" in listed


def test_greater_holds_on_a_paired_interval_above_zero_and_not_below():
    # paired differences 20, 21, 19: mean 20, t interval well above 0
    c = _judge({"metric": "sc", "left": "A", "right": "B", "relation": ">"}, _rows([30, 31, 29], [10, 10, 10]))
    assert c.verdict == "holds" and c.result.diff == pytest.approx(20.0) and c.paper == "declared"
    c = _judge({"metric": "sc", "left": "A", "right": "B", "relation": ">"}, _rows([10, 10, 10], [30, 31, 29]))
    assert c.verdict == "does not hold"
    # "<" on the same runs: A is below B, so it holds
    c = _judge({"metric": "sc", "left": "A", "right": "B", "relation": "<"}, _rows([10, 10, 10], [30, 31, 29]))
    assert c.verdict == "holds" and c.result.diff == pytest.approx(20.0)


def test_the_claims_caption_explains_declared_only_when_the_table_has_one():
    from bayesncl.report import claims_table
    from bayesncl.report.summary import prepare

    df = prepare(_rows([30, 31, 29], [10, 10, 10]))
    with_decl = claims_table.render_claims(df, "md", K.parse_claims([{"metric": "sc", "left": "A", "right": "B",
                                                                       "relation": ">"}]))
    note = claims_table.DECLARED_NOTE.strip()
    assert note in with_decl.splitlines()[1] and note not in claims_table.render_claims(df, "md")


@pytest.mark.parametrize("relation, a, b, verdict", [
    # not worse by more than 1 point: paired differences -0.2, 0.2, 0 clear -1; -5, -6, -4 lie wholly beyond it
    (">=", [49.8, 50.2, 50.0], [50.0, 50.0, 50.0], "holds"), ("≥", [49.8, 50.2, 50.0], [50.0, 50.0, 50.0], "holds"),
    (">=", [45.0, 44.0, 46.0], [50.0, 50.0, 50.0], "does not hold"),
    ("<=", [50.2, 49.8, 50.0], [50.0, 50.0, 50.0], "holds"), ("≤", [50.2, 49.8, 50.0], [50.0, 50.0, 50.0], "holds"),
    ("<=", [55.0, 56.0, 54.0], [50.0, 50.0, 50.0], "does not hold"),
])
def test_not_worse_relations_are_judged_against_one_point(relation, a, b, verdict):
    c = _judge({"metric": "sc", "left": "A", "right": "B", "relation": relation}, _rows(a, b))
    assert c.verdict == verdict and c.result.tol == pytest.approx(1.0)
    assert c.better == ("down" if relation in ("<=", "≤") else "up")


# Table 1, 2, 4-7 and Figure 3: the sets a claim without `set` reads (docs/EXTENDING.md).
@pytest.mark.parametrize("sets", ["table1", "table2", "table4", "table5", "table6", "table7", "figure3"])
def test_a_claim_without_a_set_reads_each_default_set(sets):
    c = _judge({"metric": "sc", "left": "A", "right": "B", "relation": ">"}, _rows([30, 31, 29], [10, 10, 10],
                                                                                       sets=sets))
    assert c.verdict == "holds"


def test_a_claim_on_a_training_metric_says_why_it_has_no_control_at_init():
    from bayesncl.report.tables import TABLES

    spec = {t.name: t.columns for t in TABLES}
    for metric in spec["table7"] + spec["table3"] + ("sc",):
        (claim,) = K.parse_claims([{"metric": metric, "left": "A", "right": "B", "relation": ">"}], VARIANTS)
        want = K.NO_INIT["cost"] if metric in spec["table7"] else K.NO_INIT["dyn"] if metric in spec["table3"] else ""
        assert claim.at_init == want, metric


def test_a_within_claim_states_its_tolerance_in_its_text():
    (absolute, relative) = K.parse_claims([
        {"id": "a", "metric": "sc", "left": "A", "right": "B", "relation": "within", "tolerance": 1.5},
        {"id": "r", "metric": "sc", "left": "A", "right": "B", "relation": "within", "tolerance": 0.05,
         "relative": True}], VARIANTS)
    assert absolute.title.endswith(": @A within 1.5 of @B") and relative.title.endswith(": @A within 5% of @B")


def test_within_is_judged_against_the_tolerance():
    # differences 0.1, -0.1, 0.0 around 0: inside 1 point, outside 0.01
    rows = _rows([50.1, 49.9, 50.0], [50.0, 50.0, 50.0])
    assert _judge({"metric": "sc", "left": "A", "right": "B", "relation": "within", "tolerance": 1.0},
                  rows).verdict == "holds"
    assert _judge({"metric": "sc", "left": "A", "right": "B", "relation": "within", "tolerance": 0.01},
                  rows).verdict != "holds"


def test_a_claim_reads_only_its_set_and_says_so_when_its_runs_are_missing():
    rows = _rows([30, 31, 29], [10, 10, 10], sets="table4")
    c = _judge({"metric": "sc", "left": "A", "right": "B", "relation": ">", "set": "table1"}, rows)
    assert c.verdict == "not run"
    c = _judge({"metric": "sc", "left": "A", "right": "B", "relation": ">", "set": "table4"}, rows)
    assert c.verdict == "holds"


def test_a_relative_within_claim_is_judged_relative_to_the_right_side():
    """relative: true reads the tolerance as a fraction of the right side's mean (A: 50, B: 100 here), so 10%
    is 10 points of B, never 5 points of A: differences of 7 hold against B's 10, would fail against A's 5."""
    decl = {"metric": "sc", "left": "B", "right": "A", "relation": "within", "tolerance": 0.1, "relative": True}
    c = _judge(decl, _rows([100.0, 100.0, 100.0], [107.0, 106.9, 107.1]))
    assert c.result.tol == pytest.approx(10.0) and c.verdict == "holds"
    c = _judge({**decl, "left": "A", "right": "B"}, _rows([100.0, 100.0, 100.0], [107.0, 106.9, 107.1]))
    assert c.result.tol == pytest.approx(10.7) and c.verdict == "holds"
    # B - A = 30: half of A (the right side, 50) is 25: does not hold; half of B (80) would be 40 and hold
    c = _judge({**decl, "tolerance": 0.5}, _rows([50.0, 50.0, 50.0], [80.0, 79.9, 80.1]))
    assert c.result.tol == pytest.approx(25.0) and c.verdict == "does not hold"


def test_an_at_most_claim_is_one_sided():
    rows = _rows([10.0, 10.1, 9.9], [8.0, 8.1, 7.9])  # B 20% cheaper than A
    decl = {"metric": "sc", "left": "B", "right": "A", "relation": "at most", "tolerance": 0.05, "relative": True}
    c = _judge(decl, rows)
    assert c.verdict == "holds" and c.kind.name == "at most" and "at most 5% more than" in c.text
    c = _judge({**decl, "left": "A", "right": "B"}, rows)  # A 25% dearer than B
    assert c.verdict == "does not hold"
    with pytest.raises(ConfigError, match=r"claims\[0\].tolerance: 0 is not a finite positive number"):
        K.parse_claims([{**decl, "tolerance": 0}], VARIANTS)


@pytest.mark.parametrize("key,value,message", [
    ("metric", ["sc"], "claims[0].metric: ['sc'] is not a name; give it as text, e.g. metric: sc"),
    ("relation", {"a": 1}, "claims[0].relation: {'a': 1} is not a name; give it as text, e.g. relation: >"),
    ("left", ["A"], "claims[0].left: ['A'] is not a name; give it as text, e.g. left: NCL, or a role, e.g. left: "
                    "{role: reference}"),
    ("right", True, "claims[0].right: True is not a name; give it as text, e.g. right: NCL, or a role, e.g. right: "
                    "{role: reference}, or a number, e.g. right: 0"),
    ("right", float("inf"), "claims[0].right: inf is not a name; give it as text, e.g. right: NCL, or a role, e.g. "
                            "right: {role: reference}, or a number, e.g. right: 0"),
    ("left", 0, "claims[0].left: 0 is not a name; give it as text, e.g. left: NCL, or a role, e.g. left: "
                "{role: reference}"),
    ("set", ["table1", 4], "claims[0].set: ['table1', 4] is not a name; give it as text, e.g. set: table1"),
    ("set", [], "claims[0].set: [] is not a name; give it as text, e.g. set: table1"),
    ("name", ["D"], "claims[0].name: ['D'] is not a name; give it as text, e.g. name: \"$\\lambda$\""),
    ("point", 2048, "claims[0].point: 2048 is not a name; give it as text, e.g. point: \"$D = @$\""),
    ("absolute", "yes", "claims[0].absolute: 'yes' is not true or false"),
    ("paper", ["36.14"], "claims[0].paper: ['36.14'] is not text, nor {value of the sweep: text}; give it as text, "
                         "e.g. paper: 36.14 vs 14.93"),
    ("paper", {"D": "x"}, "claims[0].paper: {'D': 'x'} is not text, nor {value of the sweep: text}; give it as "
                          "text, e.g. paper: 36.14 vs 14.93"),
    ("paper", {2048: 2}, "claims[0].paper: {2048: 2} is not text, nor {value of the sweep: text}; give it as "
                         "text, e.g. paper: 36.14 vs 14.93"),
    ("left", {"role": "any"}, "claims[0].left: {'role': 'any'} is not a name; give it as text, e.g. left: NCL, or a "
                              "role, e.g. left: {role: reference}"),
    ("right", {"role": "bayes", "gate": "ste"}, "claims[0].right: {'role': 'bayes', 'gate': 'ste'} is not a name; "
                                                "give it as text, e.g. right: NCL, or a role, e.g. right: "
                                                "{role: reference}, or a number, e.g. right: 0"),
    ("id", {"x": 1}, "claims[0].id: {'x': 1} is not a name; give it as text, e.g. id: D1"),
    ("id", True, "claims[0].id: True is not a name; give it as text, e.g. id: D1"),
    ("tolerance", 0, "claims[0].tolerance: 0 is not a finite positive number; give the margin in the metric's unit "
                     "(or a fraction of the right side with relative: true), e.g. 1.0"),
    ("tolerance", float("nan"), "claims[0].tolerance: nan is not a finite positive number; give the margin"),
    ("tolerance", True, "claims[0].tolerance: True is not a finite positive number"),
    ("relative", "yes", "claims[0].relative: 'yes' is not true or false"),
])
def test_a_claim_value_of_the_wrong_type_is_one_line_naming_it(key, value, message):
    """An unhashable, non-finite or mistyped value is one exact line, never a TypeError."""
    d = {"metric": "sc", "left": "A", "right": "B", "relation": "within", "tolerance": 1.0, key: value}
    with pytest.raises(ConfigError) as e:
        K.parse_claims([d], VARIANTS)
    assert str(e.value) == message or (str(e.value).startswith(message) and key == "tolerance"), str(e.value)
    assert "\n" not in str(e.value)


def test_a_claim_with_an_integer_id_and_a_boolean_relative_is_taken():
    (c,) = K.parse_claims([{"id": 7, "metric": "sc", "left": "A", "right": "B", "relation": "within",
                            "tolerance": 0.05, "relative": True}], VARIANTS)
    assert c.number == "7" and c.title == "SC: @A within 5% of @B"


# ------------------------------------------------------------------------- claims over a sweep of any setting
def _swept(values: dict, variant="L1", method="l1m", param="l1_weight", column="l1_weight", sets="figure4b"):
    """Runs of one variant in ``sets``, points of the ``param`` sweep: {setting value: its seeds' SC}."""
    return [{"run_id": f"synthetic/{method}/{param}~{x}/seed~{s}", "dataset": "synthetic", "arch": "resnet18",
             "method": method, "variant": variant, "sets": sets, "sweep": f"figure4b:{param}", "seed": s, column: x,
             "sc": v}
            for x, vs in values.items() for s, v in enumerate(vs)]


U = {0.0: [30.0, 31.0, 29.5], 0.01: [35.0, 37.0, 36.5], 0.1: [29.0, 30.0, 28.0]}


def _paired_t(a, b):
    """(mean, low, high) of the paired differences a - b with the 95% t interval, from the textbook formula."""
    import math
    import statistics

    from scipy import stats

    d = [x - y for x, y in zip(a, b)]
    half = stats.t.ppf(0.975, len(d) - 1) * statistics.stdev(d) / math.sqrt(len(d))
    return statistics.mean(d), statistics.mean(d) - half, statistics.mean(d) + half


def test_an_inverted_u_over_a_plugin_setting_is_judged_as_claim_11():
    from helpers.grids import plugin_method

    decl = {"id": "U1", "metric": "sc", "left": "L1", "relation": "inverted U", "sweep": "method.l1_weight"}
    with plugin_method():
        c = _judge(decl, pd.DataFrame(_swept(U)))
        # the best inner point (0.01) against the weaker end: 0 (paired diffs 5, 6, 7 against 6, 7, 8.5)
        mean, low, high = _paired_t(U[0.01], U[0.0])
        assert (c.result.diff, c.result.low, c.result.high) == pytest.approx((mean, low, high))
        assert c.verdict == "holds" and low > 0 and c.family and c.init_note == K.NO_INIT["sweep"]
        assert c.text == "SC of @A: l1_weight = 0.01 $>$ ends 0, 0.1 (right: 0)" and c.left.label == "L1"
        rising = {0.0: [30.0, 31.0, 29.5], 0.01: [33.0, 34.0, 32.0], 0.1: [36.0, 37.0, 35.5]}
        assert _judge(decl, pd.DataFrame(_swept(rising))).verdict == "does not hold"
        # another variant's points of the same sweep are not its own
        both = _judge(decl, pd.DataFrame(_swept(U) + _swept(rising, variant="L2")))
        assert (both.verdict, both.result.diff, both.result.low) == pytest.approx(("holds", mean, low))
        two = _judge(decl, pd.DataFrame(_swept({0.0: U[0.0], 0.1: U[0.1]})))
        assert two.verdict == "not run" and two.text == "SC of @A: inverted U over l1_weight"
        none = _judge(decl, pd.DataFrame(_swept(U, variant="L2")))  # no runs of its own: named as declared
        assert none.verdict == "not run" and none.left.label == "L1"


def test_a_declared_inverted_u_over_lambda_is_claim_11a_itself():
    rows = _swept({0.0: U[0.0], 3e-5: U[0.01], 1e-4: U[0.1]}, "BayesNCL (STE)", "bayesncl", "lambda", "lambda")
    df = pd.DataFrame(rows).assign(gate="ste", detach=1.0, head_depth=2.0)
    c = _judge({"id": "U2", "metric": "sc", "left": "BayesNCL (STE)", "relation": "inverted U", "sweep": "lambda"}, df)
    (paper,) = [p for _, comps in judge.claims_rows(df) for p in comps if p.claim == "11a"]
    assert (c.verdict, c.result.diff, c.result.low, c.result.right) == (
        paper.verdict, paper.result.diff, paper.result.low, paper.result.right)


def test_rises_with_and_at_each_value_over_a_plugin_setting():
    from helpers.grids import plugin_method

    rising = {0.0: [30.0, 31.0, 29.5], 0.01: [33.0, 34.0, 32.0], 0.1: [36.0, 37.0, 35.5]}
    with plugin_method():
        other = [{**_swept({0.0: [100.0]})[0], "sweep": "l1_power", "seed": 1,  # a point of another sweep only
                  "run_id": "synthetic/l1m/l1_power~2/seed~1"}]
        df = pd.DataFrame(_swept(rising) + _swept(U, variant="L2") + other)
        c = _judge({"id": "R", "metric": "sc", "left": "L1", "relation": "rises with", "sweep": "l1_weight"}, df)
        assert c.text == "SC: @A at l1_weight = 0.1 $>$ at l1_weight = 0"
        assert c.verdict == "holds" and c.result.diff == pytest.approx(6.0)
        assert _judge({"id": "R", "metric": "sc", "left": "L2", "relation": "rises with", "sweep": "l1_weight"},
                      df).verdict == "does not hold"
        decl = K.parse_claims([{"id": "E", "metric": "sc", "left": "L2", "right": "L1", "relation": ">",
                                "sweep": "l1_weight"}])
        each = {c.claim: c for _, comps in judge.claims_rows(df, decl) for c in comps if c.claim.startswith("E")}
        assert sorted(each) == ["E-0", "E-0.01", "E-0.1"]
        assert each["E-0.01"].verdict == "holds" and each["E-0.1"].verdict == "does not hold"
        assert each["E-0.01"].result.diff == pytest.approx(_paired_t(U[0.01], rising[0.01])[0])


@pytest.mark.parametrize("decl, message", [
    ({"metric": "sc", "left": "A", "relation": "inverted U"}, "claims[0].sweep: 'inverted U' is said over a sweep;"),
    ({"metric": "sc", "left": "A", "relation": ">", "sweep": "x"}, "claims[0]: missing right;"),
    ({"metric": "sc", "left": "A", "relation": "rises with", "sweep": ["x"]}, "claims[0].sweep: ['x'] is not a name"),
    ({"metric": "sc", "left": "A", "right": "B", "relation": ">", "name": "$D$"},
     "claims[0].name: names the swept setting in the text; give sweep too, or remove name"),
    ({"metric": "sc", "left": "A", "right": "B", "relation": ">", "point": "D = @"},
     "claims[0].point: names the swept setting in the text; give sweep too, or remove point"),
    ({"metric": "sc", "left": "A", "relation": "rises with", "sweep": "x", "point": "$D$"},
     "claims[0].point: '$D$' has no @ for the value; e.g. point: \"$D = @$\""),
])
def test_a_bad_sweep_claim_is_one_line_naming_it(decl, message):
    with pytest.raises(ConfigError) as e:
        K.parse_claims([decl], VARIANTS)
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_a_sweep_claim_reads_its_setting_s_own_column():
    from bayesncl.settings import registry
    from helpers.grids import plugin_method

    with plugin_method(settings={"alive": registry.setting(0.5, "named as a metric's column", ge=0)}):
        df = pd.DataFrame(_swept(U, param="alive", column="method.alive"))
        c = _judge({"id": "U3", "metric": "sc", "left": "L1", "relation": "inverted U", "sweep": "alive"}, df)
        assert c.verdict == "holds" and c.result.diff == pytest.approx(_paired_t(U[0.01], U[0.0])[0])


def test_a_sweep_claim_without_a_right_side_is_taken_and_reads_figure4b():
    (c,) = K.parse_claims([{"metric": "sc", "left": "A", "relation": "inverted U", "sweep": "lambda"}], VARIANTS)
    assert c.sets == ("figure4b",) and c.at_init == K.NO_INIT["sweep"]
    (c,) = K.parse_claims([{"metric": "sc", "left": "A", "right": "B", "relation": ">", "sweep": "proj_dim",
                            "set": "figure4a"}], VARIANTS)
    assert c.sets == ("figure4a",) and c.at_init == ""  # its runs have untrained twins (grid.expand.INIT_SETS)


def test_bayesncl_report_draws_and_judges_a_swept_setting_from_runs_csv(tmp_path):
    """End to end on a runs.csv of the swept runs (no plugin loaded): `bayesncl report --grid` with the grid's claim."""
    import yaml

    from bayesncl.cli import main as cli
    from bayesncl.report import summary

    csv, grid = tmp_path / "runs.csv", tmp_path / "g.yaml"
    summary.prepare(pd.DataFrame(_swept(U, method="ncl"))).to_csv(csv, index=False)  # NCL standing in for its plugin
    # the claims' grid: its variants name the sides
    wf = yaml.safe_load((Path(__file__).parents[1] / "config" / "tiny.yaml").read_text())
    wf["variants"]["L1"] = {"method": {"name": "ncl"}}
    wf["claims"] = [{"id": "U", "metric": "sc", "left": "L1", "relation": "inverted U", "sweep": "l1_weight"}]
    grid.write_text(yaml.safe_dump(wf))
    assert cli.main(["report", "--summary", str(csv), "--out", str(tmp_path / "r"), "--grid", str(grid)]) == 0
    row = next(line for line in (tmp_path / "r" / "tables" / "claims.md").read_text().splitlines()
               if line.startswith("| U "))
    assert "SC of L1: l1_weight = 0.01 > ends 0, 0.1 (right: 0)" in row and "| holds" in row, row
    assert (tmp_path / "r" / "figures" / "figure4b.png").stat().st_size > 0


def test_two_reports_with_different_declared_claims_in_one_process_keep_each_its_own(tmp_path, monkeypatch):
    """A report's declared claims are its workflow config's, parsed for it and given to the judge: the next report,
    of another config, in the same process, shows its own and none of the first's."""
    import yaml

    from bayesncl import report

    monkeypatch.setattr(report, "render_figures", lambda *a, **k: [])  # the claims alone are looked at here
    csv = tmp_path / "runs.csv"
    _rows([30, 31, 29], [10, 10, 10]).to_csv(csv, index=False)
    grids = {}
    for name, ids in (("one", ["X1"]), ("two", ["Y1", "Y2"]), ("none", [])):
        grids[name] = tmp_path / f"{name}.yaml"
        grids[name].write_text(yaml.safe_dump({"claims": [{"id": i, "metric": "sc", "left": "A", "right": "B",
                                                           "relation": ">"} for i in ids]}))
    shown = {}
    for name in ("one", "two", "none", "one"):
        out = io.StringIO()
        report.write_report(csv, tmp_path / name, stream=out, grid=grids[name])
        table = (tmp_path / name / "tables" / "claims.md").read_text()
        shown[name] = [i for i in ("X1", "Y1", "Y2") if f"| {i} " in table]
        assert [i for i in ("X1", "Y1", "Y2") if re.search(rf"\b{i}\b", out.getvalue())] == shown[name], name
    assert shown == {"one": ["X1"], "two": ["Y1", "Y2"], "none": []}


def test_a_claim_registered_twice_is_one_line_and_a_plugin_s_claim_is_never_primary():
    from helpers.plugins import registered

    with registered():
        mine = K.register_claim({"id": "1a", "metric": "sc", "left": "A", "right": "B", "relation": ">"})
        assert mine.module == __name__ and K.CLAIMS["1a"] is mine and K.register_claim(mine) == mine
        with pytest.raises(ConfigError) as e:
            K.register_claim({"id": "1a", "metric": "sc", "left": "A", "right": "B", "relation": "<"})
        assert str(e.value) == (f"claims: claim '1a' is registered twice (first by {__name__}); give the new one "
                                "another name")
        with pytest.raises(ConfigError, match=r"^claims: claim '1' is registered twice \(first by bayesncl\); "):
            K.register_claim(K.Claim(1, ("table1",), "mine", lambda runs: []))
        df = _rows([30, 31, 29], [10, 10, 10])
        ones = [c for _, cs in judge.claims_rows(df) for c in cs if c.claim == "1a"]
        assert [c.primary for c in ones] == [True, False] and ones[1].left.label == "A"
        idle = [c for _, cs in judge.claims_rows(df.iloc[:0]) for c in cs if c.claim == "1a"]  # the not-run block
        assert [c.primary for c in idle] == [True, False] and idle[1].left.label == "A"
    assert "1a" not in K.CLAIMS and list(K.CLAIMS)[:3] == ["1", "2", "3"]


def test_a_side_given_as_a_role_is_found_by_its_settings_as_the_paper_s_sides_are():
    """{role: bayes} finds the paper's BayesNCL by its settings whatever its label: the declared claim is claim 1a's
    comparison, with the variant's own label; a list of sets reads the first that has runs."""
    from helpers.claims import MAIN, frame, row

    rows = [row(v, s, MAIN, sc=x + s) for v, x in (("NCL", 20.0), ("BayesNCL (STE)", 30.0)) for s in range(3)]
    rows += [row("Soft gate", s, "table4", sc=5.0 + s) for s in range(3)]
    rows += [row("Soft gate", s, "table4", dataset="cifar10", sc=5.0 + s) for s in range(3)]  # no BayesNCL, no NCL
    df = frame(rows)
    decl = K.parse_claims([{"id": "R", "metric": "sc", "left": {"role": "bayes"}, "right": {"role": "reference"},
                            "relation": ">", "set": ["table4", "table1"]},
                           {"id": "S", "metric": "sc", "left": "BayesNCL (STE)", "right": {"role": "soft"},
                            "relation": ">", "set": ["table1", "table4"]}])
    got = {c.claim: c for c in dict(judge.claims_rows(df, decl))["synthetic"]}
    mine, paper = got["R"], got["1a"]
    assert (mine.left.label, mine.right.label, mine.left.set_name) == ("BayesNCL (STE)", "NCL", "table1")
    assert (mine.result.diff, mine.verdict, mine.paper, mine.primary) == (paper.result.diff, paper.verdict,
                                                                          "declared", False)
    assert (got["S"].left.set_name, got["S"].right.set_name, got["S"].right.label) == ("table1", "table4",
                                                                                      "Soft gate")
    other = [c.claim for c in dict(judge.claims_rows(df, decl))["cifar10"]]
    assert "S" in other and "R" not in other  # judged where a side's role or label has runs, there only
    none = dict(judge.claims_rows(df.iloc[:0], decl))[""]
    assert [(c.left.label, c.right.label) for c in none if c.claim in ("R", "S")] == [
        ("BayesNCL", "NCL"), ("BayesNCL (STE)", "Soft gate")]


def test_the_paper_s_own_keys_are_refused_in_a_workflow_config():
    base = {"metric": "sc", "left": "A", "right": "B", "relation": ">"}
    with pytest.raises(ConfigError, match=r"^claims\[0\]: unknown key paper; a claim takes absolute, id, left, "):
        K.parse_claims([{**base, "paper": "36.14"}])
    with pytest.raises(ConfigError, match=r"^claims\[0\]: unknown key text; "):
        K.parse_claims([{**base, "text": "mine"}])
    with pytest.raises(ConfigError, match=r"^claims\[0\].set: unknown set 'table9'; the sets: "):
        K.parse_claims([{**base, "set": ["table1", "table9"]}])
    (c,) = K.parse_claims([{**base, "left": {"role": "bayes"}}], variants=["A", "B"])  # a role is no variant's label
    assert c.module == K.WORKFLOW


def _dyn(a, b, key="dyn_af_gv"):
    """Runs of A (NCL) and B (BayesNCL) in table3 recording ``key`` at three epochs: {seed: its list}."""
    import json

    return _rows([json.dumps(v) for v in a], [json.dumps(v) for v in b], metric=key, sets="table3")


def _one_sample_t(values, const):
    """(mean, low, high) of values - const with the 95% t interval, from the textbook formula."""
    return _paired_t(values, [const] * len(values))


def test_a_right_side_may_be_a_number_tested_one_sample():
    c = _judge({"metric": "sc", "left": "A", "right": 25, "relation": ">"}, _rows([30, 31, 29.5], [10, 10, 10]))
    assert (c.result.test, c.right.label, c.right_text, c.right.runs) == ("one-sample", "25", "25", 0)
    assert (c.result.diff, c.result.low, c.result.high) == pytest.approx(_one_sample_t([30, 31, 29.5], 25))
    assert c.verdict == "holds" and c.text == "SC: @A $>$ @B"
    below = _judge({"metric": "sc", "left": "A", "right": 35.5, "relation": "<"}, _rows([30, 31, 29.5], [10] * 3))
    mean, low, high = _one_sample_t([30, 31, 29.5], 35.5)
    assert (below.result.diff, below.result.low, below.result.high) == pytest.approx((-mean, -high, -low))
    assert below.verdict == "holds" and below.delta == "$-$left"
    # judged where its one side has runs: B's runs alone do not make it apply
    assert _judge({"metric": "sc", "left": "A", "right": 0, "relation": ">", "set": "table2"},
                  _rows([30, 31, 29.5], [10] * 3)).verdict == "not run"


def test_a_dynamics_metric_is_read_at_the_last_recorded_epoch_and_absolute_compares_magnitudes():
    """Metric.value: the last recorded epoch's correlation, never an earlier one's (an empty list is NaN); with
    absolute: true each value's magnitude, a constant's too."""
    a = [[0.9, 0.1, -0.6], [0.9, 0.2, -0.5], [0.9, 0.1, -0.7]]
    b = [[-0.9, 0.5, 0.2], [-0.9, 0.6, 0.1], [-0.9, 0.4, 0.15]]
    decl = {"metric": "dyn_af_gv", "left": "A", "right": "B", "relation": "<", "set": "table3"}
    plain = _judge(decl, _dyn(a, b))
    assert plain.left.values == [(0, -0.6), (1, -0.5), (2, -0.7)] and plain.verdict == "holds"
    mags = _judge({**decl, "absolute": True}, _dyn(a, b))
    assert mags.left.values == [(0, 0.6), (1, 0.5), (2, 0.7)] and mags.right.values == [(0, 0.2), (1, 0.1), (2, 0.15)]
    assert mags.verdict == "does not hold" and mags.delta == "right $-$ left"
    assert mags.init_note == K.NO_INIT["dyn"]
    const = _judge({**decl, "right": -0.55, "absolute": True, "relation": ">"}, _dyn(a, b))
    assert const.right_text == "0.55" and const.result.diff == pytest.approx(0.6 - 0.55)
    empty = _judge(decl, _dyn([[], [0.3], [0.1, 0.2]], b))
    assert [v for _, v in empty.left.values][1:] == [0.3, 0.2] and empty.left.nan == 1


def test_claim_7_is_the_declared_form_s_comparison():
    """7a against 0 and 7c on magnitudes, as a workflow config's entries with the same roles give them."""
    from helpers.claims import frame, row

    a = [[0.2, 0.4, 0.6], [0.1, 0.5, 0.55], [0.3, 0.2, 0.65]]
    b = [[0.2, -0.1, 0.2], [0.1, 0.1, -0.1], [0.3, 0.4, 0.15]]
    rows = [row(v, s, "table3", dyn_epochs="[1, 2, 3]", dyn_af_gv=str(xs[s]))
            for v, xs in (("NCL", a), ("BayesNCL (STE)", b)) for s in range(3)]
    df = frame(rows)
    mine = K.parse_claims([{"id": "S", "metric": "dyn_af_gv", "left": {"role": "reference"}, "right": 0,
                            "relation": ">", "set": "table3"},
                           {"id": "W", "metric": "dyn_af_gv", "left": {"role": "bayes"},
                            "right": {"role": "reference"}, "relation": "<", "absolute": True, "set": "table3"}])
    got = {c.claim: c for c in dict(judge.claims_rows(df, mine))["synthetic"]}
    for paper, declared in (("7a", "S"), ("7c", "W")):
        p, d = got[paper], got[declared]
        assert (p.left.values, p.right.values, p.result, p.kind, p.delta, p.right_text) == (
            d.left.values, d.right.values, d.result, d.kind, d.delta, d.right_text), paper
    assert got["7a"].left.values == [(0, 0.6), (1, 0.55), (2, 0.65)] and got["7a"].verdict == "holds"
    assert got["7c"].left.values == [(0, 0.2), (1, 0.1), (2, 0.15)] and got["7c"].verdict == "holds"


def _bayes_swept(values: dict, param="lambda", variant="BayesNCL (STE)", sweep=None):
    rows = _swept(values, variant, "bayesncl", param, param)
    return [{**r, "gate": "ste", "detach": 1.0, "head_depth": 2.0,
             **({"sweep": sweep} if sweep is not None else {})} for r in rows]


def test_a_role_in_a_sweep_claim_finds_its_runs_by_their_settings():
    """{role: bayes} in an inverted U is claim 11a's own comparison whatever the variant's label; named by the
    runs' label, or by the role's where it has none."""
    df = pd.DataFrame(_bayes_swept({0.0: U[0.0], 3e-5: U[0.01], 1e-4: U[0.1]}, variant="Mine"))
    decl = {"id": "U", "metric": "sc", "left": {"role": "bayes"}, "relation": "inverted U", "sweep": "lambda"}
    c = _judge(decl, df)
    (paper,) = [p for _, comps in judge.claims_rows(df) for p in comps if p.claim == "11a"]
    assert (c.result, c.left.label, c.text) == (paper.result, "Mine", "SC of @A: lambda = 3e-05 $>$ ends 0, 0.0001 "
                                                                     "(right: 0)")
    assert c.verdict == "holds" and c.paper == "declared"
    ncl = df.assign(method="ncl")  # no gated run: the role's label
    none = _judge(decl, pd.concat([ncl, pd.DataFrame(_rows([1], [1]))]))
    assert none.verdict == "not run" and none.left.label == "BayesNCL"


def test_a_sweep_claim_names_its_setting_and_values_as_given():
    df = pd.DataFrame(_bayes_swept({64: [10.0, 11.0, 10.5], 256: [20.0, 21.0, 20.2]}, "proj_dim",
                                   sweep="figure4a:proj_dim")).assign(sets="figure4a")
    df["sweep"] = "figure4a:proj_dim"
    ncl = df.assign(method="ncl", variant="NCL", sc=df["sc"] - 5.0,
                    run_id=[r.replace("bayesncl", "ncl") for r in df["run_id"]])
    both = pd.concat([df, ncl[ncl["proj_dim"] == 64], ncl[ncl["proj_dim"] == 64].assign(
        proj_dim=1024, run_id=lambda f: f["run_id"] + "-1024")])
    rises = {"id": "R", "metric": "sc", "left": {"role": "bayes"}, "relation": "rises with", "sweep": "proj_dim",
             "set": "figure4a", "name": "$D$", "point": "$D = @$"}
    c = _judge(rises, both)
    assert c.text == "SC: @A at $D = 256$ $>$ at $D = 64$" and c.verdict == "holds"
    assert _judge(rises, both.iloc[:0]).text == "SC: @A rises with $D$"
    each = K.parse_claims([{"id": "E", "metric": "sc", "left": {"role": "bayes"}, "right": {"role": "reference"},
                            "relation": ">", "sweep": "proj_dim", "set": "figure4a", "name": "$D$",
                            "paper": {256: "x at 256"}}], module="")
    got = {c.claim: c for _, cs in judge.claims_rows(both, each) for c in cs if c.claim.startswith("E")}
    # a row at each value either side ran: NCL has no run at 256, BayesNCL none at 1024, so those rows are not run
    assert sorted(got) == ["E-1024", "E-256", "E-64"] and got["E-64"].verdict == "holds"
    assert got["E-256"].verdict == got["E-1024"].verdict == "not run"
    assert each[0].title == "SC of BayesNCL: > proj_dim"  # a role named as `bayesncl list` shows it
    const = K.parse_claims([{"id": "C", "metric": "sc", "left": {"role": "bayes"}, "right": -15, "absolute": True,
                             "relation": ">", "sweep": "proj_dim", "set": ["table1", "figure4a"]}])
    tagged = pd.concat([both, pd.DataFrame(_rows([1.0], [])).assign(sweep="figure4a:proj_dim")])  # an NCL run in table1
    at = {c.claim: c for _, cs in judge.claims_rows(tagged, const) for c in cs if c.claim.startswith("C")}
    # the points of the set the side's runs are in (figure4a), each against |-15|
    assert (at["C-64"].right_text, at["C-64"].verdict, at["C-256"].verdict) == ("15", "does not hold", "holds")
    assert (got["E-64"].text, got["E-64"].paper, got["E-256"].paper) == ("SC at $D$ = 64: @A $>$ @B", "", "x at 256")
    idle = [c for _, cs in judge.claims_rows(both.iloc[:0], each) for c in cs if c.claim.startswith("E")]
    assert [(c.claim, c.text) for c in idle] == [("E", "SC at each $D$: @A $>$ @B")]
    with pytest.raises(ConfigError, match=r"^claims\[0\].paper: paper values by value are for a claim at each "):
        K.parse_claims([{**rises, "paper": {64: "x"}}], module="")


def test_a_set_whose_runs_record_no_sweep_has_every_run_with_a_value_as_a_point():
    """Rows made by hand, with no `sweep`: each run with a value of the setting is a point (as claim 10 reads
    figure4a); once a run of the set records a sweep, only the runs it names are."""
    rows = _bayes_swept({64: [10.0, 11.0, 10.5], 256: [20.0, 21.0, 20.2]}, "proj_dim", sweep="")
    decl = {"id": "R", "metric": "sc", "left": "BayesNCL (STE)", "relation": "rises with", "sweep": "proj_dim",
            "set": "figure4b"}
    assert _judge(decl, pd.DataFrame(rows)).verdict == "holds"
    unset = {**rows[0], "proj_dim": float("nan"), "sc": 99.0, "seed": 5}  # a run without a value: no point
    c = _judge(decl, pd.DataFrame(rows + [unset]))
    assert c.text == "SC: @A at proj_dim = 256 $>$ at proj_dim = 64" and c.left.runs == 3
    tagged = [{**r, "sweep": "figure4b:proj_dim" if r["proj_dim"] == 64 else ""} for r in rows]
    assert _judge(decl, pd.DataFrame(tagged)).text == "SC: @A rises with proj_dim"


def test_what_training_changed_against_a_constant_is_the_left_side_s_gain():
    """Delta - Delta at init = (left - k) - (left at init - k): the left side's gain per seed against 0."""
    from bayesncl.report import verdicts

    left, init = [(0, 30.0), (1, 31.0), (2, 29.0)], [(0, 10.0), (1, 12.0), (2, 10.5)]
    trained = K._judged("x", "", K.Side("A", list(left)), 25.0, verdicts.BETTER, "up")
    untrained = K._judged("x", "", K.Side("A", list(init)), 25.0, verdicts.BETTER, "up")
    got = judge.training_change(trained, untrained)
    assert (got.test, got.diff) == ("one-sample", pytest.approx(_one_sample_t([20.0, 19.0, 18.5], 0.0)[0]))
