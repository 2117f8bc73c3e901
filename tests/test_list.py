"""`bayesncl list` (bayesncl.cli.catalog): every method, dataset, evaluation section, measure and claim, each with its
settings (type, bounds, default, doc), read from the registries as they are, plugins loaded by hand (--plugin, a
module's file in $BAYESNCL_PLUGINS) or by a grid (--grid); and the line that refuses a plugin's method by name when
the plugin is not loaded."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from bayesncl.settings import plugins, registry
from bayesncl.cli.catalog import entries, render
from bayesncl.settings.config import DEFAULTS, RULES, flatten
from helpers.plugins import registered

ROOT = Path(__file__).resolve().parents[1]

METHOD = textwrap.dedent('''
    from bayesncl.settings import registry
    from bayesncl.model.methods import NCL


    @registry.method("ncl_lp", label="NCL + Lp", reads=("temperature", "nonneg"),
                     settings={"lp_weight": registry.setting(0.5, "the Lp penalty's weight", ge=0, le=1),
                               "lp_power": registry.setting(1, "the penalty's power p", ge=1, le=2)})
    class NCLLp(NCL):
        extra_names = ("lp",)

        def extra_loss(self, out):
            m = self.cfg["method"]
            return {"lp": m["lp_weight"] * out["zplus"].float().pow(m["lp_power"]).sum(dim=1).mean()}
''')
MEASURE = textwrap.dedent('''
    import numpy as np

    from bayesncl.settings import registry
    from bayesncl.evaluation.sections import section
    from bayesncl.report.cells import register_measure


    @section("zero_share", every_run=True, columns={"percent": "zero_share"},
             settings={"scale": registry.setting(100.0, "percent per unit", gt=0)})
    def zero_share(ctx):
        """Share of exactly-zero entries of the evaluation feature (test split), in percent."""
        return {"zero_share": {"percent": float(np.mean(ctx.features("test")["feature"] == 0))}}


    register_measure("zero_share", "Zeros (%)", 2, "up")
''')
LP_WEIGHT = "    method.lp_weight (float; a number in [0, 1]; default 0.5): the Lp penalty's weight"
LP_POWER = "    method.lp_power (int; an integer in [1, 2]; default 1): the penalty's power p"


def bayesncl(*args, env=None, cwd=None) -> subprocess.CompletedProcess:
    """`bayesncl ARGS` in a process of its own (the plugins it loads stay there)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BAYESNCL_PLUGIN")} | (env or {})
    env["PYTHONPATH"] = str(ROOT / "src")
    return subprocess.run([sys.executable, "-m", "bayesncl", *args], capture_output=True, text=True, env=env,
                          cwd=cwd or ROOT, timeout=120)


@pytest.fixture
def plugin_files(tmp_path):
    (tmp_path / "my_method.py").write_text(METHOD)
    (tmp_path / "my_measure.py").write_text(MEASURE)
    return tmp_path


def test_a_plugin_loaded_by_hand_is_listed_with_its_settings_and_bounds(plugin_files):
    r = bayesncl("list", "--plugin", str(plugin_files / "my_method.py"), "--plugin",
                 str(plugin_files / "my_measure.py"))
    assert r.returncode == 0 and r.stderr == "", r.stderr
    lines = r.stdout.splitlines()
    at = lines.index("  ncl_lp: NCL + Lp [my_method] (feature on z+)")
    assert lines[at + 1:at + 5] == [
        "    method.temperature (float; a positive number; default 0.2): the InfoNCE temperature T",
        '    method.nonneg (choice; one of relu, rep_relu; default "rep_relu"): how z+ is made non-negative',
        LP_WEIGHT, LP_POWER]
    at = lines.index("  zero_share: Share of exactly-zero entries of the evaluation feature (test split), in percent. "
                     "[my_measure] (every run, runs.csv: zero_share, reads features)")
    assert lines[at + 1] == "    eval.zero_share.scale (float; a positive number; default 100.0): percent per unit"
    assert "  zero_share: Zeros (%) (higher is better)" in lines
    assert "    method.rho (float; a number strictly between 0 and 1; default 0.8): the gate prior Bern(rho)" \
        in lines  # BayesNCL's own keys under it
    for heading in ("methods (method.name):", "datasets (data.dataset):", "claims:"):
        assert heading in lines
    # the same from the variable, a module's file as its item; only what was asked
    r = bayesncl("list", "methods", env={"BAYESNCL_PLUGINS": str(plugin_files / "my_method.py")})
    assert r.returncode == 0 and LP_POWER in r.stdout.splitlines() and "claims:" not in r.stdout


def test_a_grid_s_plugins_and_claims_are_listed(plugin_files):
    wf = yaml.safe_load((ROOT / "config" / "tiny.yaml").read_text())
    wf.update(plugins=["my_method", "my_measure"], variants={"NCL": {"method": {"name": "ncl"}},
                                                             "NCL + Lp": {"method": {"name": "ncl_lp"}}},
              sets={"table1": {"variants": ["NCL", "NCL + Lp"]}},
              claims=[{"metric": "zero_share", "left": "NCL + Lp", "right": "NCL", "relation": ">"}])
    (plugin_files / "grid.yaml").write_text(yaml.safe_dump(wf))
    r = bayesncl("list", "claims", "methods", "--grid", str(plugin_files / "grid.yaml"))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "claims:" and "  D1: Zeros (%): NCL + Lp > NCL [the workflow config] (sets table1, table2, " \
        "table4, table5, table6, table7, figure3)" in lines
    assert "  1: BayesNCL SC above NCL and Top-k NCL; SE lower [the paper] (sets table1)" in lines
    assert LP_WEIGHT in lines


def test_pretrain_help_lists_a_plugin_method_s_settings_and_an_unknown_method_says_how_to_load_one(plugin_files):
    r = bayesncl("pretrain", "--help", "--plugin", str(plugin_files / "my_method.py"))
    assert r.returncode == 0
    assert ("plugin methods' own settings (--set method.KEY=...):\n"
            "  ncl_lp: method.lp_weight (float; a number in [0, 1]; default 0.5): the Lp penalty's weight\n"
            "  ncl_lp: method.lp_power (int; an integer in [1, 2]; default 1): the penalty's power p\n") in r.stdout
    assert "bayesncl list" in r.stdout and "ncl_lp" not in bayesncl("pretrain", "--help").stdout
    r = bayesncl("pretrain", "--out", str(plugin_files / "run"), "--set", "method.name=ncl_lp")
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == ("bayesncl pretrain: error: method.name: got 'ncl_lp', expected one of cl, ncl, topk_ncl, "
                        "bayesncl; a plugin's method: name its module with --plugin FILE.py (or $BAYESNCL_PLUGINS) by "
                        "hand, or in the workflow config's plugins: list; `bayesncl list` shows what is loaded\n")
    assert not (plugin_files / "run").exists()


def test_a_plugin_method_trains_by_hand_with_its_settings(plugin_files, tiny_sets):
    out = plugin_files / "run"
    r = bayesncl("pretrain", "--plugin", str(plugin_files / "my_method.py"), "--out", str(out), "--quiet",
                 "--set", "method.name=ncl_lp", "--set", "method.lp_weight=0.25", *(x for s in tiny_sets
                 for x in ("--set", s)), "--set", "train.epochs=1", "--set", "train.max_steps_per_epoch=1")
    assert r.returncode == 0, r.stderr
    method = yaml.safe_load((out / "config.resolved.yaml").read_text())["method"]
    assert (method["name"], method["lp_weight"], method["lp_power"]) == ("ncl_lp", 0.25, 1)
    assert (out / "plugin_code.json").is_file()  # its code recorded, as a workflow run's


@pytest.mark.parametrize("item, why", [
    ("nope.py", "--plugin nope.py: no such file; give a plugin module's .py file, or its module name"),
    ("nope_module", "--plugin: no plugin module 'nope_module' (looked for nope_module.py in no folder and among the "
                    "installed packages); give its file (--plugin path/to/nope_module.py), add its folder to "
                    "$BAYESNCL_PLUGIN_PATH, or install it"),
])
def test_a_plugin_given_by_hand_that_is_not_there_is_one_line(item, why, tmp_path):
    r = bayesncl("list", "--plugin", item, cwd=tmp_path)
    assert (r.returncode, r.stdout) == (2, "") and r.stderr.startswith(f"bayesncl: error: {why}"), r.stderr
    assert r.stderr.count("\n") == 1


# ------------------------------------------------------------------------------------------------ the reader
def test_the_package_s_keys_are_read_from_its_config_definition():
    rows = {r.key: r for e in entries(["settings"])["settings"] for r in e.settings}
    assert list(rows) == list(RULES)
    flat = flatten(DEFAULTS)
    for key, row in rows.items():
        assert (row.allowed, row.default) == (str(RULES[key][1]), flat[key]) and row.doc and not row.declared, key
    assert (rows["method.topk_k"].kind, rows["method.head_depth"].kind, rows["data.classes"].kind) == (
        "int | null", "choice", "str | list | null")
    assert rows["method.name"].kind == "choice" and rows["method.name"].allowed.startswith("one of cl, ncl")
    text = render(entries(["settings"]))
    assert "  train.epochs (int; an integer >= 0; default 200): training epochs; 0: no training, the random-init " \
        "network (a reference)" in text.splitlines()


def test_what_registers_now_is_listed_and_what_unregisters_is_not():
    """The registries as they are when asked: no list of names of its own."""
    from bayesncl.evaluation.sections import SECTIONS, section
    from bayesncl.report.cells import METRICS, register_measure
    from bayesncl.report.claims import CLAIMS, register_claim

    def names():
        return {kind: [e.name for e in found] for kind, found in entries().items()}

    before = names()
    assert before["methods"] == list(registry.METHODS) and before["datasets"] == list(registry.DATASETS)
    assert before["sections"] == list(SECTIONS) and before["measures"] == list(METRICS)
    with registered():
        registry.register_method("listed_m", "Listed", impl="bayesncl.model.methods:NCL",
                                 settings={"w": registry.setting(2, "a weight", ge=1, kind=float)})
        registry.register_dataset("listed_d", "Listed data", load="x:y", check="x:z", crop=8,
                                  settings={"n": registry.setting("a", "a name", choices=("a", "b"))})
        section("listed_s", settings={"k": registry.setting(True, "a switch")})(lambda ctx: {})
        register_measure("listed_c", "Listed", 1, "down")
        claim = register_claim({"id": "L1", "metric": "listed_c", "left": "A", "right": "B", "relation": "<"})
        try:
            found = entries()
            assert {k: v[len(before[k]):] for k, v in names().items()} == {
                "methods": ["listed_m"], "datasets": ["listed_d"], "sections": ["listed_s"], "measures": ["listed_c"],
                "claims": ["L1"]}
            rows = {e.name: e.settings for kind in found.values() for e in kind}
            assert [(r.key, r.kind, r.allowed, r.default, r.declared) for r in rows["listed_m"]] == [
                ("method.temperature", "float", "a positive number", 0.2, False),
                ("method.w", "float", "a number >= 1", 2.0, True)]
            assert [(r.key, r.kind, r.allowed, r.default) for r in rows["listed_d"]] == [
                ("data.listed_d.n", "choice", "one of a, b", "a")]
            assert [(r.key, r.kind, r.allowed, r.default) for r in rows["listed_s"]] == [
                ("eval.listed_s.k", "bool", "true or false", True)]
            assert found["claims"][-1].label == "Listed: A < B" and found["claims"][-1].source == "a plugin"
        finally:
            METRICS._specs.pop("listed_c")
            CLAIMS._specs.pop(claim.name)
    assert names() == before


def test_load_given_reads_files_and_names(tmp_path, monkeypatch):
    """A module's file is imported from its folder, and named in the environment for the processes this one
    starts ($BAYESNCL_PLUGINS, $BAYESNCL_PLUGIN_PATH)."""
    (tmp_path / "given_plugin.py").write_text("VALUE = 7\n")
    monkeypatch.delenv("BAYESNCL_PLUGINS", raising=False)
    monkeypatch.delenv("BAYESNCL_PLUGIN_PATH", raising=False)
    try:
        out = plugins.load_given([str(tmp_path / "given_plugin.py")])
        assert [p["module"] for p in out] == ["given_plugin"] and sys.modules["given_plugin"].VALUE == 7
        assert os.environ["BAYESNCL_PLUGINS"] == "given_plugin"
        assert os.environ["BAYESNCL_PLUGIN_PATH"] == str(tmp_path.resolve())
        assert plugins.load_given([]) == []
    finally:
        sys.modules.pop("given_plugin", None)
        plugins._LOADED.pop("given_plugin", None)
        while str(tmp_path.resolve()) in sys.path:
            sys.path.remove(str(tmp_path.resolve()))


def test_a_declared_claim_s_sides_are_listed_by_their_labels_or_their_roles():
    """A role side is listed as the paper's label of the role; a claim over a sweep, without a right side, too."""
    found = entries(["claims"], claims=[
        {"id": "R1", "metric": "sc", "left": {"role": "bayes"}, "right": {"role": "reference"}, "relation": ">"},
        {"id": "R2", "metric": "sc", "left": "NCL", "relation": "rises with", "sweep": "lambda"}])["claims"]
    mine = {e.name: (e.label, e.source) for e in found if e.name in ("R1", "R2")}
    assert mine == {"R1": ("SC: BayesNCL > NCL", "the workflow config"),
                    "R2": ("SC of NCL: rises with lambda", "the workflow config")}
