"""One untrained twin per distinct untrained network (bayesncl.grid.expand.init_config, plan_init_runs): a method's
settings that change only how it trains (MethodSpec.loss_only) are left at the grid's defaults in its twin, and a
method that only changes another's loss (MethodSpec.init_as) takes that one's twin, without its settings or code.
What justifies each declaration is checked on the networks themselves; the claims' initialisation control reads a
shared twin for every side it serves (report.claims.twin_records)."""

from __future__ import annotations

import copy

import pytest
import torch
import yaml

from bayesncl.grid import expand as grid
from bayesncl.settings import registry
from bayesncl.settings.config import flatten, resolve
from bayesncl.core.errors import ConfigError
from bayesncl.report import claims, claims_table, judge
from bayesncl.report.cells import Fmt
from helpers.claims import MAIN, frame, row, with_twins
from helpers.grids import plugin_method
from helpers.grids import tiny_with as _grid

B, N = "BayesNCL (STE)", "NCL"
# Another value of each loss-only setting of the package's methods
OTHER = {"temperature": 0.3, "rho": 0.5, "lambda": 1e-3, "detach": False, "head_lr": 0.05}
SMALL = {"model": {"arch": "resnet18", "width": 4, "proj_hidden": 32, "proj_dim": 16}, "seed": 3}


def _network(cfg: dict):
    """The untrained network of a run config, as training/train.py builds it, and its evaluated outputs on one batch."""
    from bayesncl.model.methods import build_method

    torch.manual_seed(cfg["seed"])
    model = build_method(cfg).eval()
    x = torch.rand(6, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    return model.state_dict(), model.features(x)


def _same(a, b) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny forward on a shared machine: threads only contend
    yield
    torch.set_num_threads(n)


@pytest.mark.parametrize("method", ["cl", "ncl", "topk_ncl", "bayesncl"])
def test_a_loss_only_setting_leaves_the_untrained_network_and_its_features_as_they_are(method, one_thread):
    """Each setting a method declares loss-only builds the same network from the same seed, and its evaluation
    features are equal bit for bit (soft gate included: alpha is the evaluated gate there); a setting that shapes
    them (D; the gate kind, tau_g under the soft gate, the head's depth) does change them."""
    spec = registry.METHODS[method]
    assert spec.loss_only
    for gate in ("gumbel", "soft") if spec.gated else ("ste",):
        cfg = resolve(base=grid.merged(SMALL, {"method": {"name": method, "gate": gate}}))
        weights, feats = _network(cfg)
        changes = [{"method": {key: OTHER[key]}} for key in spec.loss_only]
        for change in changes:
            other = resolve(base=grid.merged(cfg, change))
            assert flatten(other) != flatten(cfg)
            w, f = _network(other)
            assert _same(weights, w) and _same(feats, f), (gate, change)
        for key, values in spec.init_same:  # each equal value: the same network, the same features
            for value in values if cfg["method"][key] in values else ():
                w, f = _network(resolve(base=grid.merged(cfg, {"method": {key: value}})))
                assert _same(weights, w) and _same(feats, f), (gate, key, value)
        shaping = [{"model": {"proj_dim": 8}}] + ([{"method": {"head_depth": 3}}] if spec.gated else [])
        shaping += [{"method": {"gate": "ste" if gate == "soft" else "soft"}}] if spec.gated else []
        shaping += [{"method": {"tau_g": 2.0}}] if gate == "soft" else []
        for change in shaping:
            w, f = _network(resolve(base=grid.merged(cfg, change)))
            assert not (_same(weights, w) and _same(feats, f)), (gate, change)


def test_the_package_s_methods_declare_what_only_changes_their_training():
    assert {m: registry.METHODS[m].loss_only for m in ("cl", "ncl", "topk_ncl", "bayesncl")} == {
        "cl": ("temperature",), "ncl": ("temperature",), "topk_ncl": ("temperature",),
        "bayesncl": ("temperature", "rho", "lambda", "detach", "head_lr")}
    assert not any(registry.METHODS[m].init_as for m in registry.METHODS)
    assert {m: registry.METHODS[m].init_same for m in registry.METHODS} == {
        "cl": (), "ncl": (), "topk_ncl": (), "bayesncl": (("gate", ("ste", "gumbel")),)}


def test_the_gumbel_gate_s_runs_share_ste_s_twins_and_the_soft_gate_keeps_its_own():
    """Equal values of a setting (MethodSpec.init_same) give one twin, named as the grid's default's; a grid whose
    default is the other equal value names its twins by it; a value outside them has twins of its own."""
    variants = {v: {"method": {"name": "bayesncl", "gate": g}} for v, g in (("STE", "ste"), ("Gumbel", "gumbel"),
                                                                          ("Soft", "soft"))}
    wf = _grid(variants, {"table1": {"variants": list(variants)}})
    twins = _twins(grid.expand_grid(wf))
    assert twins["STE"] == twins["Gumbel"] == "synthetic/bayesncl/rho~0.8/lambda~3e-05/epochs~0/seed~0"
    assert twins["Soft"] == "synthetic/bayesncl/gate~soft/rho~0.8/lambda~3e-05/epochs~0/seed~0"
    wf["defaults"].setdefault("method", {})["gate"] = "gumbel"
    runs = grid.expand_grid(wf)
    twins = _twins(runs)
    assert twins["STE"] == twins["Gumbel"] == "synthetic/bayesncl/rho~0.8/lambda~3e-05/epochs~0/seed~0"
    assert runs[twins["STE"]].config["method"]["gate"] == "gumbel" and len(set(twins.values())) == 2


def test_a_plugin_s_equal_values_are_taken_as_a_mapping_and_share_a_twin():
    variants = {"A": {"method": {"name": "l1m", "l1_weight": 0.0}}, "B": {"method": {"name": "l1m", "l1_weight": 0.5}},
                "C": {"method": {"name": "l1m", "l1_weight": 0.7}}}
    with plugin_method(init_same={"l1_weight": [0.5, 0.0]}):
        assert registry.METHODS["l1m"].init_same == (("l1_weight", (0.5, 0.0)),)
        twins = _twins(grid.expand_grid(_grid(variants, {"table1": {"variants": list(variants)}})))
    assert twins["A"] == twins["B"] == "synthetic/l1m/l1_weight~0.5/epochs~0/seed~0"  # the first: 1e-3 is neither
    assert twins["C"] == "synthetic/l1m/l1_weight~0.7/epochs~0/seed~0"


# ----------------------------------------------------------------------------------------------- a plugin's twin
def _plugin_grid(**defaults) -> dict:
    variants = {"NCL + L1": {"method": {"name": "l1m"}}, "NCL + L1 (x10)": {"method": {"name": "l1m",
                                                                                      "l1_weight": 1e-2}}}
    return _grid(variants, {"table1": {"variants": ["NCL", *variants]}}, **defaults)


def _twins(runs: dict) -> dict[str, str]:
    return {r.labels["table1"]: r.twin for r in runs.values() if "table1" in r.sets}


def test_a_plugin_has_its_own_twins_unless_it_says_what_only_changes_its_loss():
    """Undeclared (the conservative default): each value of its setting is a network of its own, its twins hold
    its code in their trigger. Its setting declared loss-only: one twin of its own for both values, at the default.
    init_as ncl: NCL's twin serves all three variants, an ncl run without the plugin's setting or code."""
    with plugin_method():
        runs = grid.expand_grid(_plugin_grid())
        twins = _twins(runs)
        assert len(set(twins.values())) == 3
        assert twins["NCL + L1 (x10)"] == "synthetic/l1m/l1_weight~0.01/epochs~0/seed~0"
        assert "plugin_code" in grid.job_trigger(runs[twins["NCL + L1"]].config)
    with plugin_method(loss_only=("l1_weight", "temperature")):
        runs = grid.expand_grid(_plugin_grid())
        twins = _twins(runs)
        assert twins["NCL + L1"] == twins["NCL + L1 (x10)"] == "synthetic/l1m/epochs~0/seed~0" != twins["NCL"]
        assert runs[twins["NCL + L1"]].config["method"]["l1_weight"] == 1e-3
    with plugin_method(init_as="ncl"):
        runs = grid.expand_grid(_plugin_grid(method={"temperature": 0.4}))
        twins = _twins(runs)
        assert set(twins.values()) == {"synthetic/ncl/epochs~0/seed~0"}
        twin = runs["synthetic/ncl/epochs~0/seed~0"]
        assert twin.config["method"]["name"] == "ncl" and "l1_weight" not in twin.config["method"]
        assert twin.config["method"]["temperature"] == 0.4  # the grid's default
        assert "plugin_code" not in grid.job_trigger(twin.config)
        assert twin.config == grid.init_config(runs["synthetic/ncl/seed~0"].config, twin.config)


def test_a_method_initialised_as_a_plugin_method_takes_that_one_s_settings_at_their_defaults():
    """p2 only changes p1's loss (init_as p1); p1's weight only weighs its loss: p2's and p1's runs share one twin, a
    run of p1 at its defaults, named as p1's own twins are."""
    weight = {"w": registry.setting(1.0, "a weight", ge=0)}
    with plugin_method(name="p1", module="my_p1", settings=weight, loss_only=("w",)):
        with plugin_method(name="p2", module="my_p2", settings={"v": registry.setting(2.0, "another", ge=0)},
                           init_as="p1"):
            variants = {"P2": {"method": {"name": "p2", "v": 3.0}}, "P1": {"method": {"name": "p1", "w": 0.3}}}
            runs = grid.expand_grid(_grid(variants, {"table1": {"variants": ["P2", "P1"]}}))
    assert set(_twins(runs).values()) == {"synthetic/p1/epochs~0/seed~0"}
    method = runs["synthetic/p1/epochs~0/seed~0"].config["method"]
    assert method["name"] == "p1" and method["w"] == 1.0 and "v" not in method


def test_a_loss_only_setting_swept_or_set_by_a_set_shares_the_twin_at_the_grid_s_default():
    wf = _plugin_grid()
    wf["sets"]["table1"]["overrides"] = {"method": {"temperature": 0.9}}  # every run of the set: one twin each still
    with plugin_method(init_as="ncl"):
        runs = grid.expand_grid(wf)
    twin = runs["synthetic/ncl/epochs~0/seed~0"]
    assert set(_twins(runs).values()) == {twin.run_id}
    assert twin.config["method"]["temperature"] == resolve(base=wf["defaults"])["method"]["temperature"] != 0.9


@pytest.mark.parametrize("traits, line", [
    ({"loss_only": ("rho",)}, "method 'l1m': loss_only names 'rho', which it neither reads nor declares; name some "
                              "of temperature, nonneg, l1_weight"),
    ({"init_same": {"gate": ["ste", "gumbel"]}}, "method 'l1m': init_same names 'gate', which it neither reads nor "
                                                 "declares; name some of temperature, nonneg, l1_weight"),
    ({"init_as": "nope"}, "method 'l1m': init_as 'nope' is not a registered method whose untrained network is its "
                          "own; name one of cl, ncl, topk_ncl, bayesncl"),
    ({"init_as": "l1m"}, "method 'l1m': init_as 'l1m' is not a registered method whose untrained network is its own"),
    ({"init_as": "bayesncl"}, "method 'l1m': init_as 'bayesncl', but its arrays differs from bayesncl's, so its "
                              "evaluated features are not bayesncl's; drop init_as"),
    ({"init_as": "ncl", "nonnegative": False}, "method 'l1m': init_as 'ncl', but its nonnegative differs"),
])
def test_a_wrong_twin_declaration_is_one_line_at_registration(traits, line):
    with pytest.raises(ConfigError) as e:
        with plugin_method(**traits):
            pass
    assert str(e.value).startswith(line)
    assert "l1m" not in registry.METHODS


def test_a_method_initialised_as_another_that_is_so_itself_is_refused():
    with plugin_method(init_as="ncl"):
        with pytest.raises(ConfigError, match="init_as 'l1m' is not a registered method whose untrained network"):
            with plugin_method(name="l2m", module="my_l2", init_as="l1m"):
                pass


# ---------------------------------------------------------------------------------- the claims read a shared twin
def _shared(df):
    """w/o detach's runs name BayesNCL (STE)'s twin of the same seed, as the grid plans them (their own removed)."""
    rows = df.to_dict("records")
    ste = {r["seed"]: r["twin"] for r in rows if r["variant"] == B and r["twin"]}
    own = {r["twin"] for r in rows if r["variant"] == "w/o detach"}
    for r in rows:
        if r["variant"] == "w/o detach":
            r["twin"] = ste[r["seed"]]
        if r["run_id"] in ste.values():
            r["init_of"] = "table1;table2;table4"
    return frame([r for r in rows if r["run_id"] not in own])


def test_a_twin_shared_by_two_variants_is_each_side_s_initialisation():
    """6a (SC: BayesNCL (STE) >= w/o detach) reads one twin per seed for both sides: Delta at init 0 on every seed,
    "same network at init"; 1a's control is the same twins as before."""
    sc = {B: [30.0, 31.0, 29.5], "w/o detach": [28.0, 30.5, 27.9], N: [20.0, 21.0, 19.0]}
    sc0 = {B: [23.4, 19.6, 22.2], "w/o detach": [0.0, 0.0, 0.0], N: [14.8, 15.0, 14.7]}
    df = frame([row(v, s, MAIN + (";table4" if v == B else "") if v != "w/o detach" else "table4", sc=sc[v][s])
                for v in sc for s in range(3)])
    df = _shared(with_twins(df, lambda r: {"sc": sc0[r["variant"]][int(r["seed"])]}))
    assert len(df) == 15  # 9 trained, 6 twins: BayesNCL (STE)'s serve w/o detach too
    comps = {c.claim: c for _, cs in judge.claims_rows(df) for c in cs}
    c6a = comps["6a"]
    assert c6a.init is not None and c6a.init.diff == 0.0 and c6a.same_init
    assert [v for _, v in c6a.right.values] == sc["w/o detach"]
    assert claims_table.claim_cells(c6a, Fmt("md"))["training"] == "same network at init"
    assert comps["1a"].init.diff == pytest.approx(sum(a - b for a, b in zip(sc0[B], sc0[N])) / 3)


def test_a_declared_claim_finds_a_shared_twin_by_its_variant():
    """A loss-only plugin's variant (init_as ncl) and NCL share NCL's twin: a declared claim between them has
    Delta at init 0 on every seed."""
    rows = [row(N, s, MAIN, sc=20.0 + s) for s in range(3)]
    rows += [dict(row(N, s, MAIN, sc=22.0 + s), variant="NCL + L1", method="l1m", run_id=f"l1/{s}") for s in range(3)]
    df = with_twins(frame(rows[:3]), lambda r: {"sc": 15.0 + r["seed"] / 3})
    twin = {r["seed"]: r["twin"] for r in df.to_dict("records") if r["twin"]}
    df = frame(df.to_dict("records") + [dict(r, twin=twin[r["seed"]]) for r in rows[3:]])
    decl = claims.parse_claims([{"metric": "sc", "left": "NCL + L1", "right": N, "relation": ">", "set": "table1"}])
    c = next(c for _, cs in judge.claims_rows(df, decl) for c in cs if c.claim == "D1")
    assert c.same_init and c.init.diff == 0.0 and [v for _, v in c.left.values] == [22.0, 23.0, 24.0]


def test_runs_csv_names_each_run_s_twin():
    from bayesncl.report.summary import _rows

    runs = grid.expand_grid(_grid({}, {"table1": {"variants": ["NCL"]}, "table3": {"variants": ["NCL"]}}))
    rows = {rid: row for rid, r in runs.items() for row in _rows(r, {"run": {"weights_sha": "x"}, "config": r.config})}
    assert {rid: (row["twin"], row["init_of"]) for rid, row in rows.items()} == {
        "synthetic/ncl/seed~0": ("synthetic/ncl/epochs~0/seed~0", ""),
        "synthetic/ncl/epochs~0/seed~0": ("", "table1")}


def test_twin_records_are_the_runs_with_their_twins_numbers_in_the_sets_it_initialises():
    run = dict(row(N, 0, "table1;table3", sc=20.0, probe_top1=40.0), twin="t")
    twin = dict(row(N, 0, "", sc=15.0, probe_top1=30.0, epochs=0.0), run_id="t", init_of="table1", weights_sha="i")
    other = row(B, 0, "table3", sc=25.0)  # no twin: not in the control
    (rec,) = claims.twin_records(frame([run, twin, other]).to_dict("records"))
    assert (rec["run_id"], rec["sets"], rec["variant"], rec["sc"], rec["probe_top1"], rec["epochs"]) == (
        "t", "table1", N, 15.0, 30.0, 0.0)
    assert rec["weights_sha"] == "i"


def test_the_demo_s_shared_twin_is_the_one_its_trained_runs_start_from(tmp_path):
    """pretrain at 0 epochs of the twin w/o detach shares with BayesNCL (STE) saves the network w/o detach's own
    training starts from (same seed, same build), bit for bit."""
    from bayesncl.runs import files
    from bayesncl.model.methods import build_method
    from bayesncl.training.train import pretrain
    from helpers import grids

    wf = grids.demo()
    wf["defaults"] = grid.merged(wf["defaults"], {"model": SMALL["model"], "data": {"synthetic": {"train_size": 256}}})
    runs = grid.expand_grid(wf)
    run = next(r for r in runs.values() if "w/o detach" in r.labels.values())
    twin = runs[run.twin]
    assert twin.config["method"]["detach"] is True and run.config["method"]["detach"] is False
    cfg = copy.deepcopy(twin.config)
    cfg["data"]["cache_dir"] = str(tmp_path / "cache")
    saved = files.load(pretrain(cfg, tmp_path / "run", progress=False))["model"]
    torch.manual_seed(run.config["seed"])
    assert _same(saved, build_method(run.config).state_dict())
    assert yaml.safe_load((tmp_path / "run" / "config.resolved.yaml").read_text())["train"]["epochs"] == 0
