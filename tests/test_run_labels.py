"""A run's name in each set, decided once when the grid is expanded (grid.expand.Run.labels), and its settings, read
from its own record: runs.csv, the tables and the claims take both from there, whatever the order of the grid's keys or
of its files. The case: a plugin setting swept by one set, whose point is another variant of a table."""

from __future__ import annotations

import copy
import json
import warnings
from pathlib import Path

import pandas as pd
import pytest
import yaml

from bayesncl.settings import registry
from bayesncl.grid.expand import GridWarning, expand_grid, merged
from bayesncl.report import claims as K
from bayesncl.report import groups, judge, summary
from helpers.plugins import registered
from helpers.report import write_eval

ROOT = Path(__file__).resolve().parents[1]
SHARED = "synthetic/lpm/lp_weight~0.01/seed~1"  # NCL + Lp (x10) of Table 1 and the 1e-2 point of Figure 4b's sweep
CLAIMS = [{"metric": "sc", "left": "NCL + Lp (x10)", "right": "NCL + Lp", "relation": ">"},
          {"metric": "sc", "left": "NCL + Lp", "right": "NCL", "relation": ">"}]


def _plugin():
    registry.register_method("lpm", "NCL + Lp", "bayesncl.model.methods:NCL", reads=("temperature", "nonneg"),
                             module="my_lp",
                             settings={"lp_weight": registry.setting(1e-3, "the penalty's weight", ge=0, le=1),
                                       "lp_power": registry.setting(1, "the norm's power", ge=1, le=2)})


def _overlays(results) -> tuple[dict, dict]:
    """The grid (Table 1 with both variants, two datasets) and an overlay that sweeps the setting (Figure 4b)."""
    tiny = yaml.safe_load((ROOT / "config" / "tiny.yaml").read_text())
    data = tiny["datasets"]["synthetic"]["data"]
    grid = {"results": str(results), "seeds": [0, 1, 2], "defaults": tiny["defaults"],
            "datasets": {"alpha": {"data": data}, "beta": {"data": {"dataset": "cifar10", "root": "/no/cifar"}}},
            "variants": {"NCL": {"method": {"name": "ncl"}}, "NCL + Lp": {"method": {"name": "lpm"}},
                         "NCL + Lp (x10)": {"method": {"name": "lpm", "lp_weight": 1.0e-2}}},
            "sets": {"table1": {"variants": ["NCL", "NCL + Lp", "NCL + Lp (x10)"]}}}
    sweep = {"sets": {"figure4b": {"variants": ["NCL + Lp"],
                                   "sweep": {"method.lp_weight": [0.0, 1.0e-3, 1.0e-2], "method.lp_power": [1, 2]}}},
             "claims": CLAIMS}
    return grid, sweep


def _reversed(d):
    """The mapping with every key order reversed, all the way down (lists kept)."""
    return {k: _reversed(v) for k, v in reversed(d.items())} if isinstance(d, dict) else d


def _evaluated(wf: dict) -> dict:
    """Each run's evaluation files (helpers.report.write_eval), SC a function of its settings: 10 points per step of
    the setting, seeds a little apart; an untrained twin's SC is 5 whatever its variant."""
    runs = write_eval(wf)
    for rid, run in runs.items():
        path = Path(wf["results"]) / "runs" / rid / "eval" / "interpretability.json"
        body = json.loads(path.read_text())
        m, seed = run.config["method"], run.config["seed"]
        level = {None: 20.0, 0.0: 25.0, 1e-3: 30.0, 1e-2: 40.0}[m.get("lp_weight")] + 3 * (m.get("lp_power") == 2)
        body["interpretability"]["sc"] = (5.0 if run.config["train"]["epochs"] == 0 else level) + seed * (1 + level / 100)
        path.write_text(json.dumps(body))
    return runs


def _runs_csv(wf: dict, tmp_path) -> str:
    out = tmp_path / "runs.csv"
    summary.write_summary(json.loads(json.dumps(wf, sort_keys=True)), out)  # as the summarize rule hands it over
    return out.read_text()


def test_a_run_shared_by_two_sets_takes_each_set_s_own_name(tmp_path):
    with registered():
        _plugin()
        grid, sweep = _overlays(tmp_path / "results")
        with warnings.catch_warnings():
            warnings.simplefilter("error", GridWarning)  # two sets naming one run differently is no mistake
            runs = expand_grid(merged(grid, sweep))
        assert runs[SHARED].labels == {"figure4b": "NCL + Lp", "table1": "NCL + Lp (x10)"}
        twin = next(r for r in runs.values() if r.config["train"]["epochs"] == 0
                    and r.config["method"].get("lp_weight") == 1e-2 and r.config["seed"] == 1
                    and r.config["data"]["dataset"] == "synthetic")
        assert twin.labels == {"table1": "NCL + Lp (x10)"} and twin.init_of == ["table1"]
        _evaluated(merged(grid, sweep))
        _runs_csv(merged(grid, sweep), tmp_path)
        df = summary.read_summary(tmp_path / "runs.csv")
        shared = df[df["run_id"] == SHARED]
        assert list(zip(shared["variant"], shared["sets"], shared["lp_weight"], shared["sweep"])) == [
            ("NCL + Lp", "figure4b", 1e-2, "figure4b:lp_weight"), ("NCL + Lp (x10)", "table1", 1e-2, "")]
        # Table 1: three rows of three seeds each, per dataset, none mixing two settings
        for dataset, gs in groups.blocks(df, "table1"):
            rows = {g.variant: (g.n, sorted({x for x in g.values("lp_weight") if x == x})) for g in gs}  # NaN: NCL's
            assert rows == {"NCL": (3, []), "NCL + Lp": (3, [1e-3]), "NCL + Lp (x10)": (3, [1e-2])}, dataset
        # Figure 4b: the sweep's points, its own variant's name
        fig = df[[groups.in_set(s, "figure4b") for s in df["sets"]]]
        assert set(fig["variant"]) == {"NCL + Lp"}
        assert sorted(summary.sweep_rows(fig, "lp_weight", "figure4b")["lp_weight"]) == [0.0] * 6 + [1e-3] * 6 + [1e-2] * 6
        assert sorted(summary.sweep_rows(fig, "lp_power", "figure4b")["lp_power"]) == [1.0] * 6 + [2.0] * 6
        judged = {c.claim: c for c in judge.judge(df, K.parse_claims(CLAIMS)).comparisons if c.claim.startswith("D")}
        assert sorted(judged) == ["D1", "D2"] and all(c.verdict == "holds" for c in judged.values()), judged
        d1 = judged["D1"]
        assert (d1.left.label, d1.left.runs, d1.right.label, d1.right.runs) == ("NCL + Lp (x10)", 3, "NCL + Lp", 3)
        assert d1.init is not None and d1.init.verdict != "not run"  # their twins, named as they are


def test_runs_csv_is_the_same_whatever_the_order_of_the_keys_and_files(tmp_path):
    """The sets, the datasets, the swept keys and the two files in either order: one runs.csv, byte for byte, and the
    same names in Snakemake's grid as in the report's."""
    with registered():
        _plugin()
        grid, sweep = _overlays(tmp_path / "results")
        _evaluated(merged(grid, sweep))
        orders = {"as written": merged(grid, sweep), "overlay first": merged(sweep, grid),
                  "every key reversed": merged(_reversed(grid), _reversed(sweep)),
                  "both": merged(_reversed(sweep), _reversed(grid))}
        assert list(orders["overlay first"]["sets"]) == ["figure4b", "table1"]  # the orders do differ
        texts = {}
        for name, wf in orders.items():
            out = tmp_path / f"{name}.csv"
            summary.write_summary(copy.deepcopy(wf), out)
            texts[name] = out.read_text()
            assert {r: run.labels for r, run in expand_grid(wf).items()} == {
                r: run.labels for r, run in expand_grid(orders["as written"]).items()}, name
        assert len(set(texts.values())) == 1, [n for n in texts if texts[n] != texts["as written"]]
        assert texts["as written"] == _runs_csv(orders["both"], tmp_path)


def test_two_variants_of_one_set_that_are_one_run_keep_the_first_name_and_say_so():
    with registered():
        _plugin()
        grid, _ = _overlays("results")
        grid["variants"]["Also Lp"] = {"method": {"name": "lpm", "lp_weight": 1e-3}}
        grid["sets"]["table1"]["variants"].append("Also Lp")
        with pytest.warns(GridWarning) as caught:
            runs = expand_grid(grid)
        notes = {str(w.message).split(": ", 1)[1] for w in caught}
        assert notes == {"variant 'Also Lp' resolves to the same run config as 'NCL + Lp' in sets.table1; the run is "
                         "trained once and its rows there show 'NCL + Lp'"}
        assert {run.labels["table1"] for run in runs.values() if "table1" in run.sets} == {
            "NCL", "NCL + Lp", "NCL + Lp (x10)"}


def test_a_run_s_settings_are_those_it_recorded_with_a_column_for_every_method_setting(tmp_path):
    """runs.csv reads a run's settings from its own record (features.json's config), not from today's grid: a run
    trained at another value reads it (and is marked stale); every method setting has a column, a plugin's too."""
    with registered():
        _plugin()
        grid, sweep = _overlays(tmp_path / "results")
        _evaluated(merged(grid, sweep))
        rid = "synthetic/lpm/seed~0"  # NCL + Lp at its default weight 1e-3, as the grid gives it today
        path = tmp_path / "results" / "runs" / rid / "eval" / "features.json"
        body = json.loads(path.read_text())
        body["config"]["method"].update(lp_weight=5e-3, temperature=0.3)
        path.write_text(json.dumps(body))
        _runs_csv(merged(grid, sweep), tmp_path)
        df = summary.read_summary(tmp_path / "runs.csv")
        head = list(df.columns)
        assert head[head.index("pilot_of") + 1:head.index("weights_sha")] == [
            "width", "proj_dim", "gate", "detach", "head_depth", "nonneg", "rho", "lambda", "topk_k", "tau_g",
            "head_lr", "temperature", "epochs", "seed"]
        assert head[-2:] == ["lp_weight", "lp_power"]
        rows = df[df["run_id"] == rid]
        assert list(zip(rows["sets"], rows["lp_weight"], rows["temperature"])) == [("figure4b;table1", 5e-3, 0.3)]
        assert json.loads(rows["stale"].iloc[0]) == {"method.lp_weight": [5e-3, 1e-3], "method.temperature": [0.3, 0.2],
                                                     "code of method lpm": ["absent", "module my_lp (no file)"]}
        ncl = df[df["method"] == "ncl"]
        assert set(ncl["temperature"]) == {0.2} and ncl["lp_weight"].isna().all() and set(ncl["lp_power"].isna()) == {True}


def test_a_plugin_setting_named_as_another_column_takes_its_dotted_key():
    """A method setting named as a runs.csv column already is (a measure's `sc`) is the column method.sc, numbers or
    text as its kind; a name two methods declare is one column."""
    with registered():
        registry.register_method("scm", "SC", "bayesncl.model.methods:NCL", module="my_sc",
                                 settings={"sc": registry.setting(0.5, "a weight"), "tag": registry.setting("a", "a tag")})
        registry.register_method("scm2", "SC2", "bayesncl.model.methods:NCL", module="my_sc",
                                 settings={"tag": registry.setting(1, "a number")})
        assert summary.setting_columns() == {"sc": ("method.sc", False), "tag": ("tag", True)}
        df = summary.prepare(pd.DataFrame({"method.sc": ["0.5"], "tag": ["a"], "other": ["1"]}))
        assert df["method.sc"].tolist() == [0.5] and df["tag"].tolist() == ["a"] and df["other"].tolist() == ["1"]
