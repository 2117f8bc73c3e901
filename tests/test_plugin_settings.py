"""A plugin's own settings (bayesncl.settings.registry.setting), declared as bayesncl.settings.config declares the
package's keys: set under the method's, dataset's or section's block, validated in one line, named in run ids, swept,
part of the rerun trigger, recorded; what identifies a plugin's code in its runs' records and rerun triggers; and the
registry's behaviours no test pinned before (a dataset without background labels, a second spec of one module)."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import yaml

from bayesncl.settings import config as C
from bayesncl.settings import plugins, registry
from bayesncl.core.errors import ConfigError, RunFileError
from bayesncl.grid.expand import GridWarning, expand_grid, job_trigger, read_by, trigger_config, trigger_diff
from helpers import grids
from helpers.grids import WEIGHT, plugin_method
from helpers.grids import tiny_with as _grid
from helpers.plugins import forget, registered

ROOT = Path(__file__).resolve().parents[1]


def _cfg(*sets, base=None):
    return C.resolve(base=base, sets=list(sets))


# ------------------------------------------------------------------------------------------- a method's settings
def test_a_method_s_setting_is_in_its_runs_configs_at_its_default_and_nowhere_else():
    with plugin_method():
        cfg = _cfg("method.name=l1m")
        assert cfg["method"]["l1_weight"] == 1e-3
        assert _cfg("method.name=l1m", "method.l1_weight=0.01")["method"]["l1_weight"] == 0.01
        # YAML 1.1 reads 3e-3 as a string: a number where the setting is one, as the package's keys
        assert C.resolve(base={"method": {"name": "l1m", "l1_weight": "3e-3"}})["method"]["l1_weight"] == 3e-3
        # another method's run leaves it out, even where a shared layer (a grid's defaults) sets it
        ncl = C.resolve(base={"method": {"name": "ncl", "l1_weight": 0.5}})
        assert "l1_weight" not in ncl["method"] and ncl == _cfg("method.name=ncl")
        assert read_by(registry.METHODS["l1m"], "method.l1_weight")
        assert not read_by(registry.METHODS["ncl"], "method.l1_weight")
    with pytest.raises(ConfigError, match=r"^method.l1_weight: unknown key; known keys here: detach, gate, "):
        _cfg("method.name=ncl", "method.l1_weight=0.5")  # no method declares it now


SETTINGS = {"mode": registry.setting("a", "the mode", choices=("a", "b")),
            "k": registry.setting(3, "how many", ge=1, null="every dimension"),
            "on": registry.setting(True, "whether it is on"),
            "scale": registry.setting(0.5, "a share", gt=0, lt=1),
            "tag": registry.setting("x", "a name"),
            "cap": registry.setting(1.0, "a cap", le=2), "below": registry.setting(1, "under five", lt=5),
            "share": registry.setting(0.5, "a share or all", gt=0, le=1),
            "frac": registry.setting(0.5, "none or a share", ge=0, lt=1)}


@pytest.mark.parametrize("key, value, line", [
    ("l1_weight", -0.1, "method.l1_weight: got -0.1, expected a number >= 0"),
    ("l1_weight", "heavy", "method.l1_weight: got 'heavy', expected a number >= 0"),
    ("l1_weight", True, "method.l1_weight: got True, expected a number >= 0"),
    ("l1_weight", None, "method.l1_weight: got None, expected a number >= 0"),
    ("mode", "c", "method.mode: got 'c', expected one of a, b"),
    ("k", 0, "method.k: got 0, expected an integer >= 1 or null (every dimension)"),
    ("k", 2.5, "method.k: got 2.5, expected an integer >= 1 or null (every dimension)"),
    ("on", 1, "method.on: got 1, expected true or false"),
    ("scale", 1.0, "method.scale: got 1.0, expected a number strictly between 0 and 1"),
    ("tag", 3, "method.tag: got 3, expected a string"),
    ("cap", 2.5, "method.cap: got 2.5, expected a number <= 2"),  # each kind of end in its own words
    ("below", 5, "method.below: got 5, expected an integer < 5"),
    ("share", 0, "method.share: got 0, expected a number in (0, 1]"),
    ("frac", 1, "method.frac: got 1, expected a number in [0, 1)"),
])
def test_a_bad_value_is_one_line_naming_the_key_and_what_is_allowed(key, value, line):
    with plugin_method(settings={**WEIGHT, **SETTINGS}):
        with pytest.raises(ConfigError) as e:
            C.resolve(base={"method": {"name": "l1m", key: value}})
        assert str(e.value) == line
        assert C.resolve(base={"method": {"name": "l1m", "k": None}})["method"]["k"] is None  # null where allowed
        assert C.resolve(base={"method": {"name": "l1m", "l1_weight": 0}})["method"]["l1_weight"] == 0


def test_a_declaration_that_contradicts_itself_is_one_line():
    s = registry.setting
    # what its values are, in the words of a bad value's line (test_a_bad_value_is_one_line_naming_the_key...)
    for args, kw, line in [((-1, "w"), {"ge": 0}, "setting 'w': its default -1 is not one of its own values "
                                                   "(an integer >= 0)"),
                           ((0, "w"), {"le": 1, "added": 2}, "setting 'w': its added 2 is not one of its own values "
                                                             "(an integer <= 1)"),
                           (("c", "m"), {"choices": ("a", "b")}, "setting 'm': its default 'c' is not one of its own "
                                                                 "values (one of a, b)"),
                           ((1.5, "f"), {"gt": 0, "lt": 1, "null": "off"},
                            "setting 'f': its default 1.5 is not one of its own values (a number strictly between 0 "
                            "and 1 or null (off))")]:
        with pytest.raises(ConfigError) as e:
            s(*args, **kw)
        assert str(e.value) == line
    with pytest.raises(ConfigError, match=r"^setting with default 1: its doc must be one line of text"):
        s(1, "two\nlines")
    with pytest.raises(ConfigError, match=r"^setting with default 1: its doc must be one line"):
        s(1, " ")
    with pytest.raises(ConfigError, match=r"^setting 'w': kind <class 'list'> is not bool, int, float or str"):
        s([1], "w")
    with pytest.raises(ConfigError, match=r"^setting 'w': kind None is not"):
        s(None, "w", null="off")  # a null default: the kind must be given
    assert s(None, "w", kind=int, null="off").kind is int
    assert s(1, "w", kind=float).default == 1.0 and isinstance(s(1, "w", kind=float).default, float)
    assert s(1, "w").kind is int and s(True, "w").kind is bool and s(1e-3, "w").kind is float
    with pytest.raises(ConfigError, match=r"^method 'x': setting name 'a.b' is not a key"):
        registry.register_method("x", impl="bayesncl.model.methods:NCL", settings={"a.b": s(1, "w")})
    with pytest.raises(ConfigError,
                       match=r"^method 'x': setting 'w' is 0.001; declare it with bayesncl.api.setting"):
        registry.register_method("x", impl="bayesncl.model.methods:NCL", settings={"w": 1e-3})
    with pytest.raises(ConfigError, match=r"^dataset 'y': setting name 3 is not a key"):
        registry.register_dataset("y", load=len, check=len, crop=8, settings={3: s(1, "w")})
    assert "x" not in registry.METHODS and "y" not in registry.DATASETS


def test_setting_allows_exactly_its_values():
    s = registry.setting(2, "k", ge=1, le=3)
    assert [s.allows(v) for v in (1, 3, 0, 4, 2.0, True, None, "2")] == [True, True, False, False, False, False,
                                                                          False, False]
    f = registry.setting(0.5, "f", gt=0, lt=1)
    assert [f.allows(v) for v in (0.1, 1, 0, 0.0, 1.0, float("nan"), float("inf"), False)] == [
        True, False, False, False, False, False, False, False]
    assert registry.setting(0.5, "f", gt=0).allows(3)  # an integer is a number
    # a float without bounds, or with one end: finite numbers only (no bound would catch inf or NaN)
    for bounds in ({}, {"ge": 0}, {"le": 1}):
        assert [registry.setting(0.5, "u", **bounds).allows(v) for v in (0.25, float("nan"), float("inf"),
                                                                            -float("inf"))] == [True] + [False] * 3
    for bad in (float("inf"), float("nan")):  # ... and such a default is refused where it is declared
        with pytest.raises(ConfigError, match=r"^setting 'w': its default (inf|nan) is not one of its own values"):
            registry.setting(bad, "w")
    assert [registry.setting(True, "b").allows(v) for v in (False, 0, None)] == [True, False, False]
    assert registry.setting("a", "c", choices=("a", 1)).allows(1) and not registry.setting(
        "a", "c", choices=("a", 1)).allows(True)
    assert registry.setting(None, "n", kind=str, null="off").allows(None)


def test_a_setting_made_directly_takes_the_documented_defaults():
    s = registry.Setting(0.5, "a number")
    assert (s.kind, s.ge, s.gt, s.le, s.lt, s.choices, s.null, s.added) == (float, None, None, None, None, (), None,
                                                                            registry.UNSET)
    assert s.allows(3.0) and s.allows(-1) and not s.allows(None) and not s.allows(True) and not s.allows("1")
    assert repr(registry.UNSET) == "UNSET"
    spec = registry.MethodSpec("x", "X", "m:C")
    assert (spec.settings, spec.version) == ((), "")
    d = registry.DatasetSpec("y", "Y", "m:f", "m:g", crop=8)
    assert (d.settings, d.version, d.verify, d.verifier()) == ((), "", None, None)


def test_a_setting_named_as_a_package_key_is_refused():
    with plugin_method(settings={"rho": registry.setting(0.5, "my rho", gt=0)}):
        with pytest.raises(ConfigError) as e:
            _cfg("method.name=l1m")
        assert str(e.value) == ("method.rho: a plugin declares a setting where the package has the key method.rho; "
                                "give the plugin's setting another name")
    # a name a run's records give another setting (runs.csv's width is model.width): refused too, the others taken
    with plugin_method(settings={"width": registry.setting(2, "my width", ge=1)}):
        with pytest.raises(ConfigError) as e:
            _cfg("method.name=l1m")
        assert str(e.value) == ("method.width: a plugin declares a setting named as the run's model.width in its "
                                "records and runs.csv; give the plugin's setting another name")
    with plugin_method(settings={"depth": registry.setting(2, "my depth", ge=1)}):
        assert C.run_settings(_cfg("method.name=l1m"))["depth"] == 2
    # a dataset named as a key of the package's data block: its settings' block would be that key
    with registered():
        registry.register_dataset("download", load=len, check=len, crop=8, needs_root=False, module="my_dl",
                                  settings={"size": registry.setting(8, "the side", ge=1)})
        with pytest.raises(ConfigError) as e:
            _cfg("data.dataset=download")
        assert str(e.value) == ("data.download.size: a plugin declares a setting where the package has the key "
                                "data.download; give the plugin's setting another name")


# -------------------------------------------------------------------------------------- ids, sweeps, triggers
def test_run_ids_name_it_off_its_default_and_a_variant_or_a_sweep_gives_one_run_per_value():
    with plugin_method():
        wf = _grid({"L1": {"method": {"name": "l1m"}}, "L1 x10": {"method": {"name": "l1m", "l1_weight": 0.01}}},
                   {"table1": {"variants": ["NCL", "L1", "L1 x10"]},
                    "figure4b": {"variants": ["L1"], "sweep": {"method.l1_weight": [0.0, 0.01]}}})
        with warnings.catch_warnings():
            warnings.simplefilter("error", GridWarning)
            runs = expand_grid(wf)  # the sweep's 0.01 is L1 x10's run: trained once, named by each set
        ids = sorted(r for r in runs if "/l1m/" in r and "epochs~0" not in r)
        assert ids == ["synthetic/l1m/l1_weight~0.01/seed~0", "synthetic/l1m/l1_weight~0/seed~0",
                       "synthetic/l1m/seed~0"]
        swept = runs["synthetic/l1m/l1_weight~0/seed~0"]
        assert swept.config["method"]["l1_weight"] == 0.0 and swept.sweeps == {"figure4b": ["l1_weight"]}
        shared = runs["synthetic/l1m/l1_weight~0.01/seed~0"]  # one run, two sets, a name in each
        assert shared.sets == ["figure4b", "table1"] and shared.labels == {"figure4b": "L1", "table1": "L1 x10"}
        # a value stated in the grid's defaults is the base the ids are read against (as for a package key), and
        # the other methods' runs never see it
        wf2 = _grid({"L1": {"method": {"name": "l1m"}}}, {"table1": {"variants": ["NCL", "L1"]}},
                    method={"l1_weight": 0.01})
        runs2 = expand_grid(wf2)
        assert "synthetic/l1m/seed~0" in runs2 and runs2["synthetic/l1m/seed~0"].config["method"]["l1_weight"] == 0.01
        assert "l1_weight" not in runs2["synthetic/ncl/seed~0"].config["method"]
    # the setting reaches its runs' configs only: NCL's run is as it was before the plugin
    before = expand_grid(_grid({}, {"table1": {"variants": ["NCL"]}}))
    assert {k: v.config for k, v in before.items()} == {k: v.config for k, v in expand_grid(
        _grid({}, {"table1": {"variants": ["NCL"]}})).items()}


def test_a_value_written_for_runs_whose_method_does_not_declare_it_is_refused_where_it_was_written():
    line = "{}: method ncl does not declare l1_weight (l1m does); remove it there or write it for one of those"
    with plugin_method():
        for variants, sets, place in (
                ({"NCL": {"method": {"name": "ncl", "l1_weight": 5.0}}}, {"table1": {"variants": ["NCL"]}},
                 "variants.NCL.method.l1_weight"),  # out of its bounds too: refused for where it is, first
                ({"L1": {"method": {"name": "l1m"}}}, {"figure4b": {"variants": ["L1", "NCL"],
                                                                    "sweep": {"method.l1_weight": [0.0, 0.1]}}},
                 "sets.figure4b.sweep.method.l1_weight")):
            with pytest.raises(ConfigError) as e:
                expand_grid(_grid(variants, sets))
            assert str(e.value) == line.format(place)
        with pytest.raises(ConfigError) as e:
            _cfg("method.name=ncl", "method.l1_weight=0.1")
        assert str(e.value) == line.format("--set method.l1_weight=0.1")
        with pytest.raises(ConfigError, match=r"^method.name: got 'nope'"):  # a bad method is named as before
            _cfg("method.name=nope", "method.l1_weight=0.1")
        # where its method declares it, and where a layer every run shares writes it, it is taken
        assert _cfg("method.name=l1m", "method.l1_weight=0.1")["method"]["l1_weight"] == 0.1
        runs = expand_grid(_grid({"L1": {"method": {"name": "l1m", "l1_weight": 0.1}}},
                                 {"figure4b": {"variants": ["L1"], "sweep": {"method.l1_weight": [0.0, 0.2]}},
                                  "table1": {"variants": ["NCL", "L1"]}}, method={"l1_weight": 0.3}))
        weights = {rid: r.config["method"].get("l1_weight") for rid, r in runs.items() if "epochs~0" not in rid}
        assert weights == {"synthetic/ncl/seed~0": None, "synthetic/l1m/l1_weight~0.1/seed~0": 0.1,
                           "synthetic/l1m/l1_weight~0/seed~0": 0.0, "synthetic/l1m/l1_weight~0.2/seed~0": 0.2}


def test_the_demo_grid_s_ids_and_triggers_are_as_before_plugins_had_settings_or_code():
    """Nothing a plugin brings changes the package's own runs: the demo's 116 run ids with its overlay of that time
    (grids.demo_with_old_sweeps) and their triggers are those of the commit before plugins had settings (digests
    computed there), and a job's trigger is trigger_config's JSON alone (the params Snakemake recorded for every
    finished run). Since then one change: w/o detach's and BayesNCL (Gumbel)'s untrained twins are BayesNCL (STE)'s
    (one twin per distinct untrained network), so the twins they had are written back here as that grid planned
    them."""
    import hashlib

    from bayesncl.settings.config import resolve
    from bayesncl.grid.expand import merged, run_id

    wf = grids.demo_with_old_sweeps()
    with plugin_method():
        runs = expand_grid(wf)
        configs = {rid: r.config for rid, r in runs.items()}
        base = resolve(base=merged(wf["defaults"], wf["datasets"]["synthetic"], {"method": {"name": "bayesncl"}}))
        for run in runs.values():
            own = {"w/o detach", "BayesNCL (Gumbel)"} & set(run.labels.values())
            if own and run.twin:  # its own twin, as it was: the run at 0 epochs
                cfg = merged(run.config, {"train": {"epochs": 0, "dynamics_every": 0}})
                configs[run_id(cfg, base)] = cfg
                assert configs[run.twin]["method"]["detach"] is True and configs[run.twin]["method"]["gate"] == "ste"
        ids = sorted(configs)
        triggers = "".join(job_trigger(configs[r]) + job_trigger(configs[r], "evaluate", "features") for r in ids)
    for run in runs.values():
        assert job_trigger(run.config) == json.dumps(trigger_config(run.config, "pretrain"), sort_keys=True)
        for section in ("features", "linear_probe"):
            assert job_trigger(run.config, "evaluate", section) == json.dumps(
                trigger_config(run.config, "evaluate"), sort_keys=True)
    assert len(runs) == 108 and len(ids) == 116
    assert hashlib.sha256("\n".join(ids).encode()).hexdigest()[:16] == "2cf1efa7a51790cb"
    assert hashlib.sha256(triggers.encode()).hexdigest()[:16] == "34b3caff48f84619"


def test_the_pretraining_trigger_holds_it_for_its_method_s_runs_only():
    with plugin_method():
        base = trigger_config(_cfg("method.name=l1m"))
        assert base["method"]["l1_weight"] == 1e-3
        assert trigger_config(_cfg("method.name=l1m", "method.l1_weight=0.002")) != base
        assert trigger_diff(_cfg("method.name=l1m"), _cfg("method.name=l1m", "method.l1_weight=0.002")) == [
            ("method.l1_weight", 1e-3, 0.002)]
        ncl_with = trigger_config(_cfg("method.name=ncl"))
    assert ncl_with == trigger_config(_cfg("method.name=ncl"))


def test_a_setting_added_with_its_old_value_reruns_nothing_and_completes_an_old_record():
    later = {**WEIGHT, "decay": registry.setting(0.0, "a later setting", ge=0, added=0.0)}
    with plugin_method(settings=later):
        cfg = _cfg("method.name=l1m")
        assert cfg["method"]["decay"] == 0.0 and "decay" not in trigger_config(cfg)["method"]
        assert C.keys_added(cfg)["method.decay"] == 0.0 and "method.decay" not in C.KEYS_ADDED
        old = copy.deepcopy(cfg)
        del old["method"]["decay"]  # recorded before the setting existed
        assert C.as_recorded(old)["method"]["decay"] == 0.0
        assert trigger_diff(C.as_recorded(old), cfg) == [] and trigger_config(old) == trigger_config(cfg)
        assert trigger_diff(C.as_recorded(old), _cfg("method.name=l1m", "method.decay=0.5")) == [
            ("method.decay", 0.0, 0.5)]
    with plugin_method(settings={**WEIGHT, "decay": registry.setting(0.0, "no added", ge=0)}):
        old = copy.deepcopy(_cfg("method.name=l1m"))
        del old["method"]["decay"]
        # without `added`, a record that lacks it differs from today's: "absent" (what Snakemake sees too)
        assert trigger_diff(C.as_recorded(old), _cfg("method.name=l1m")) == [("method.decay", "absent", 0.0)]


# ---------------------------------------------------------------------------------- a dataset's, a section's
@contextlib.contextmanager
def plugin_dataset(settings, **traits):
    with registered():
        yield registry.register_dataset("plugds", "Plug", load="bayesncl.data:_load_synthetic",
                                        check="bayesncl.data:_check_synthetic", crop=16, needs_root=False,
                                        settings=settings, module="my_ds", **traits)


def test_a_dataset_s_settings_are_its_block_in_its_runs_configs():
    with plugin_dataset({"size": registry.setting(8, "the side", ge=1)}):
        cfg = _cfg("data.dataset=plugds")
        assert cfg["data"]["plugds"] == {"size": 8}
        assert _cfg("data.dataset=plugds", "data.plugds.size=12")["data"]["plugds"]["size"] == 12
        with pytest.raises(ConfigError) as e:
            _cfg("data.dataset=plugds", "data.plugds.size=0")
        assert str(e.value) == "data.plugds.size: got 0, expected an integer >= 1"
        with pytest.raises(ConfigError, match=r"^data.plugds: expected a mapping of size, got 3"):
            C.resolve(base={"data": {"dataset": "plugds", "plugds": 3}})
        with pytest.raises(ConfigError, match=r"^data.plugds.other: unknown key; known keys here: size"):
            _cfg("data.dataset=plugds", "data.plugds.other=1")
        synthetic = C.resolve(base={"data": {"plugds": {"size": 9}}})  # another dataset's run: left out
        assert "plugds" not in synthetic["data"] and synthetic == _cfg()
        for job in ("pretrain", "evaluate"):
            assert trigger_config(cfg, job)["data"]["plugds"] == {"size": 8}
        assert registry.plugin_code(cfg) == {"dataset plugds": "module my_ds (no file)"}  # its code, by its name
        assert C.validate(C.as_recorded({**copy.deepcopy(cfg), "data": {**cfg["data"], "plugds": {}}}))
    with plugin_dataset({"size": registry.setting(8, "the side", ge=1, added=8)}):
        old = copy.deepcopy(_cfg("data.dataset=plugds"))
        del old["data"]["plugds"]  # the whole block recorded before it existed
        assert C.as_recorded(old)["data"]["plugds"] == {"size": 8}
        assert "plugds" not in trigger_config(_cfg("data.dataset=plugds"))["data"]


def test_a_section_s_settings_are_every_run_s_and_rerun_that_section_alone():
    from bayesncl.evaluation.sections import SECTIONS, section

    @section("plug_sec", every_run=True, settings={"thr": registry.setting(0.5, "a threshold", ge=0, le=1)})
    def plug_sec(ctx):
        """A plugin's measure."""
        return {}

    try:
        for name in ("ncl", "bayesncl"):
            assert _cfg(f"method.name={name}")["eval"]["plug_sec"] == {"thr": 0.5}
        with pytest.raises(ConfigError, match=r"^eval.plug_sec.thr: got 2, expected a number in \[0, 1\]$"):
            _cfg("eval.plug_sec.thr=2")
        with pytest.raises(ConfigError, match=r"^eval.plug_sec.nope: unknown key; known keys here: thr$"):
            _cfg("eval.plug_sec.nope=2")
        with pytest.raises(ConfigError, match=r"^eval.nope: unknown key; known keys here: .*, plug_sec, probe, "):
            _cfg("eval.nope=2")  # the sections' blocks among the evaluation's keys
        a, b = _cfg(), _cfg("eval.plug_sec.thr=0.25")
        assert job_trigger(a, "evaluate", "features") == job_trigger(b, "evaluate", "features")
        assert job_trigger(a, "evaluate", "plug_sec") != job_trigger(b, "evaluate", "plug_sec")
        assert job_trigger(a) == job_trigger(b)  # evaluation settings never retrain
        assert "plug_sec" in trigger_config(a, "evaluate")["eval"]  # by some section: the default
        assert SECTIONS["plug_sec"].module == __name__
    finally:
        SECTIONS._specs.pop("plug_sec")
        registry.SECTION_SETTINGS.pop("plug_sec")
    assert "plug_sec" not in _cfg()["eval"]



def test_a_section_without_a_version_is_identified_by_its_source_and_its_declaration_errors_name_it():
    """section()'s defaults: no version, so the code's SHA-256 identifies the section (a declared version
    replaces it); a bad settings declaration names the section."""
    from bayesncl.evaluation.sections import SECTIONS, section
    from bayesncl.grid.expand import section_code

    def measure(ctx):
        """A plugin's measure."""
        return {}

    measure.__module__ = __name__  # a plugin module: this test file, which has a source file
    try:
        section("plug_plain")(measure)
        assert section_code("plug_plain") == {"section plug_plain": f"sha256 {plugins.source_digest(__file__)}"}
        section("plug_versioned", version="2")(lambda ctx: {})
        SECTIONS._specs["plug_versioned"] = dataclasses.replace(SECTIONS["plug_versioned"], module=__name__)
        assert section_code("plug_versioned") == {"section plug_versioned": "version 2"}
    finally:
        SECTIONS._specs.pop("plug_plain", None)
        SECTIONS._specs.pop("plug_versioned", None)
    with pytest.raises(ConfigError, match=r"^evaluation section 'plug_bad': setting name 'a.b' is not a key"):
        section("plug_bad", settings={"a.b": registry.setting(1, "w")})(measure)
    assert "plug_bad" not in SECTIONS


# ------------------------------------------------------------------------------------------ the plugin's code
PLUGIN = '''
from bayesncl.settings import registry
from bayesncl.model.methods import NCL


@registry.method("{name}", label="NCL + L1", reads=("temperature", "nonneg"){version},
                 settings={{"l1_weight": registry.setting({default}, "the L1 penalty's weight", ge=0)}})
class NCLL1(NCL):
    extra_names = ("l1",)

    def extra_loss(self, out):
        return {{"l1": self.cfg["method"]["l1_weight"] * out["zplus"].float().sum(dim=1).{reduce}()}}
'''


@contextlib.contextmanager
def plugin_file(tmp_path, name="plug_code", **fmt):
    """A plugin module written to tmp_path and loaded, as the workflow loads it; unloaded after."""
    def write(**kw):
        kw = {"name": name, "version": "", "default": "1e-3", "reduce": "mean", **fmt, **kw}
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(PLUGIN.format(**kw)))

    def reload(**kw):
        write(**kw)
        forget(name)
        sys.modules.pop(name, None)
        plugins._LOADED.pop(name, None)
        plugins.load([name], [tmp_path])

    try:
        with registered():
            reload()
            yield reload
    finally:
        sys.modules.pop(name, None)
        plugins._LOADED.pop(name, None)
        while str(tmp_path.resolve()) in sys.path:
            sys.path.remove(str(tmp_path.resolve()))


def test_a_plugin_method_s_code_is_in_its_runs_triggers_and_a_default_is_not(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    with plugin_file(tmp_path) as reload:
        cfg = _cfg("method.name=plug_code")
        code = registry.plugin_code(cfg)
        digest = plugins.source_digest(str(tmp_path / "plug_code.py"))
        assert code == {"method plug_code": f"sha256 {digest}"} and len(digest) == 64
        first = json.loads(job_trigger(cfg))
        assert first["plugin_code"] == code and {k: v for k, v in first.items() if k != "plugin_code"} == \
            trigger_config(cfg)
        assert registry.plugin_code(_cfg("method.name=ncl")) == {}
        reload(default="2e-3")  # a default: config, not code
        assert registry.plugin_code(_cfg("method.name=plug_code")) == code
        reload(reduce="sum")  # the code
        assert registry.plugin_code(_cfg("method.name=plug_code")) != code
        reload(version=', version="1"')
        assert registry.plugin_code(_cfg("method.name=plug_code")) == {"method plug_code": "version 1"}
        reload(version=', version="1"', reduce="mean")  # an edit under one version: the same identity
        assert registry.plugin_code(_cfg("method.name=plug_code")) == {"method plug_code": "version 1"}


def test_the_source_digest_cuts_only_setting_declarations(tmp_path):
    def digest(text):
        path = tmp_path / f"m{abs(hash(text))}.py"
        path.write_text(text, encoding="utf-8")
        return plugins.source_digest(str(path))

    a = digest('from bayesncl.api import setting\nS = {"w": setting(1e-3, "é", ge=0)}\nX = 1\n')
    assert a == digest('from bayesncl.api import setting\nS = {"w": setting(2e-3, "é",\n ge=1)}\nX = 1\n')
    assert a == digest('from bayesncl.api import setting\nS = {"w": Setting(1, "x")}\nX = 1\n')
    assert a != digest('from bayesncl.api import setting\nS = {"w": setting(1e-3, "é", ge=0)}\nX = 2\n')
    assert a != digest('from bayesncl.settings import registry\nS = {"v": registry.setting(1e-3, "é", ge=0)}\nX = 1\n')
    # nested calls are cut with the outer one; a file that does not parse is digested whole
    assert digest("x = setting(setting(1), 2)\ny = 1\n") == digest("x = setting(3)\ny = 1\n")
    import hashlib

    # each call replaced by `setting()`, at its place in the bytes (the first line, a later one, the file's start)
    assert digest("x = setting(1, 'é')\n") == hashlib.sha256(b"x = setting()\n").hexdigest()
    assert digest("y = 'é'\nx = setting(1)\n") == hashlib.sha256("y = 'é'\nx = setting()\n".encode()).hexdigest()
    assert digest("setting(1)\nx = 1\n") == hashlib.sha256(b"setting()\nx = 1\n").hexdigest()

    assert digest("def f(:\n") == hashlib.sha256(b"def f(:\n").hexdigest()
    assert plugins.code_identity("no_such_module_xyz") == "module no_such_module_xyz (no file)"
    assert plugins.code_identity("anything", 3) == "version 3"


def _recorded_run(tmp_path: Path) -> tuple[dict, Path]:
    """plug_code's run config, and a run folder holding its record (config.resolved.yaml, plugin_code.json)."""
    from bayesncl.runs.files import record_config

    cfg = _cfg("method.name=plug_code")
    run = tmp_path / "run"
    run.mkdir()
    record_config(run, cfg)
    return cfg, run


def test_a_run_records_its_plugin_code_and_stale_compares_it(tmp_path, monkeypatch):
    from bayesncl.runs.files import CODE, read_code, record_config
    from bayesncl.grid.stale import describe, run_staleness

    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    with plugin_file(tmp_path / "..") as reload:
        cfg, run = _recorded_run(tmp_path)
        assert read_code(run) == registry.plugin_code(cfg)
        assert yaml.safe_load((run / "config.resolved.yaml").read_text())["method"]["l1_weight"] == 1e-3
        grid_run = type("R", (), {"config": cfg})()
        assert run_staleness(cfg, grid_run, read_code(run)) == {}
        reload(reduce="sum")
        today = registry.plugin_code(cfg)["method plug_code"]
        diff = run_staleness(cfg, grid_run, read_code(run))
        was = read_code(run)["method plug_code"]
        assert diff == {"code of method plug_code": [was[:19], today[:19]]}  # a digest by its first 12 digits
        assert describe(diff) == f"code of method plug_code {was[:19]} (today {today[:19]})"
        assert run_staleness(cfg, grid_run, {}) == {"code of method plug_code": ["absent", today[:19]]}  # an old run
        assert run_staleness(cfg, grid_run, {"method plug_code": "version 1"}) == {
            "code of method plug_code": ["version 1", today[:19]]}
        # a plugin entry the run recorded that today's config no longer uses is stale too (its code trained it)
        gone = {"method plug_code": today, "dataset mine": "version 2"}
        assert run_staleness(cfg, grid_run, gone) == {"code of dataset mine": ["version 2", "absent"]}
        record_config(run, _cfg("method.name=ncl"))  # the package's own method: no record, an old one removed
        assert not (run / CODE).exists() and read_code(run) == {}
    fix = "it is the trainer's: restore it, or train the run again"
    for text in ("[1]", '{"method x": 1}', '{"1": "a", "2": ["b"]}'):
        (run / CODE).write_text(text)
        with pytest.raises(RunFileError) as e:
            read_code(run)
        assert str(e.value) == f"{run / CODE}: not an object of plugin entries and their code; {fix}"
    (run / CODE).write_text("{")
    with pytest.raises(RunFileError) as e:
        read_code(run)
    assert str(e.value) == (f"{run / CODE}: cannot be read as JSON (Expecting property name enclosed in double quotes: "
                            f"line 1 column 2 (char 1)); {fix}")
    (run / CODE).unlink()
    (run / CODE).mkdir()
    with pytest.raises(RunFileError) as e:
        read_code(run)
    assert str(e.value) == f"{run / CODE}: cannot be read as JSON (Is a directory); {fix}"


def test_the_code_record_is_written_sorted_one_entry_a_line(tmp_path, monkeypatch):
    from bayesncl.runs.files import CODE, record_config

    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    with plugin_file(tmp_path / ".."), plugin_dataset({}):
        cfg = _cfg("method.name=plug_code", "data.dataset=plugds")
        record_config(tmp_path, cfg)
        method = registry.plugin_code(cfg)["method plug_code"]
        assert (tmp_path / CODE).read_text() == (f'{{\n "dataset plugds": "module my_ds (no file)",\n '
                                                 f'"method plug_code": "{method}"\n}}\n')


def test_a_folder_trained_with_other_plugin_code_holds_another_run(tmp_path, monkeypatch):
    """What makes the workflow's rerun of a changed plugin train anew (its pretraining job replaces the folder): the
    same config under other code is another run, never resumed (a resume would keep the old code's weights)."""
    from bayesncl.runs.ownership import other_run
    from bayesncl.runs.files import CODE, record_config

    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    with plugin_file(tmp_path / "..") as reload:
        cfg, run = _recorded_run(tmp_path)
        assert other_run(run, cfg) is None  # its own run: resumed
        was = json.loads((run / CODE).read_text())["method plug_code"]
        reload(version=', version="3"')
        assert other_run(run, cfg) == f"a run of other plugin code ({CODE}: method plug_code: {was} != version 3)"
        (run / CODE).unlink()  # recorded before the record existed
        assert other_run(run, cfg) == f"a run of other plugin code ({CODE}: method plug_code: absent != version 3)"
        (run / CODE).write_text(json.dumps({"method plug_code": "version 3", "method gone": "version 1"}))
        assert other_run(run, cfg) == f"a run of other plugin code ({CODE}: method gone: version 1 != absent)"
        (run / CODE).write_text("[]")
        assert other_run(run, cfg) == f"a {CODE} that is no record of plugin code"
        assert other_run(run, cfg, imported="abc") is None  # an import is judged by its weights' source alone
    ncl = _cfg("method.name=ncl")
    other = tmp_path / "ncl"
    other.mkdir()
    record_config(other, ncl)
    assert other_run(other, ncl) is None


# ---------------------------------------------------------------------------------- the registry's behaviours
def _no_backgrounds(data_cfg):
    return False


@pytest.mark.parametrize("form", [False, 0, _no_backgrounds, f"{__name__}:_no_backgrounds"])
def test_a_dataset_without_background_labels_gets_no_background_section(form):
    """Whatever form the trait takes (a bool, a function, "module:function"), a dataset that says it has no
    background labels gets no background probe, and a set that needs one stops the grid in one line."""
    from bayesncl.evaluation.sections import SECTIONS

    with plugin_dataset({}, backgrounds=form):
        assert registry.DATASETS["plugds"].has_backgrounds({}) is False
        cfg = _cfg("data.dataset=plugds")
        assert SECTIONS["background_probe"].skip(cfg) == ("dataset 'plugds' has no background labels; set "
                                                          "eval.waterbirds_root=/path/to/waterbird_complete95_forest2water2")
        wf = _grid({}, {"table1": {"variants": ["NCL"]}})
        wf["datasets"] = {"plug": {"data": {"dataset": "plugds"}}}
        assert all("background_probe" not in s for s in map(
            __import__("bayesncl.grid.expand", fromlist=["x"]).evaluation_sections, expand_grid(wf).values()))
        wf["sets"]["table6"] = {"variants": ["NCL"]}
        with pytest.raises(ConfigError, match=r"^sets.table6: run plugds/ncl/seed~0 needs the background_probe "
                                              r"section, but dataset 'plugds' has no background labels"):
            expand_grid(wf)
    with plugin_dataset({}, backgrounds=lambda d: True):
        assert SECTIONS["background_probe"].skip(_cfg("data.dataset=plugds")) is None


def test_an_image_folder_without_backgrounds_csv_gets_no_background_section(tmp_path):
    from bayesncl.evaluation.sections import SECTIONS

    (tmp_path / "train" / "a").mkdir(parents=True)
    cfg = _cfg("data.dataset=imagefolder", f"data.root={tmp_path}")
    assert SECTIONS["background_probe"].skip(cfg) is not None
    (tmp_path / "backgrounds.csv").write_text("path,background\n")
    assert SECTIONS["background_probe"].skip(cfg) is None


def test_the_same_module_registering_another_spec_under_its_name_is_refused():
    with plugin_method(module="my_l1") as spec:
        assert registry.METHODS.register(spec) is spec  # the same spec again (a module imported twice): kept
        with pytest.raises(ConfigError) as e:
            registry.register_method("l1m", "NCL + L1", "bayesncl.model.methods:NCL", reads=("temperature",),
                                     settings=WEIGHT, module="my_l1")
        assert str(e.value) == ("method.name: method 'l1m' is registered twice (first by my_l1); give the new one "
                                "another name")
        assert registry.METHODS["l1m"] is spec
    with plugin_dataset({}) as spec:
        with pytest.raises(ConfigError, match=r"^data.dataset: dataset 'plugds' is registered twice \(first by my_ds\)"):
            registry.register_dataset("plugds", "Plug", load="bayesncl.data:_load_synthetic",
                                      check="bayesncl.data:_check_synthetic", crop=32, needs_root=False, module="my_ds")
        assert registry.DATASETS["plugds"] is spec


def test_declared_finds_each_plugin_key_and_nothing_else():
    with plugin_method(), plugin_dataset({"size": registry.setting(8, "the side", ge=1)}):
        assert registry.declared("method.l1_weight") is WEIGHT["l1_weight"]
        assert registry.declared("method.rho") is None and registry.declared("method.nope") is None
        assert set(registry.declared("data.plugds")) == {"size"}
        assert registry.declared("data.plugds.size").default == 8
        assert registry.declared("data.plugds.nope") is None and registry.declared("data.synthetic") is None
        assert registry.declared("data.plugds.size.x") is None and registry.declared("train.plugds") is None
        assert registry.declared("eval.features") is None
        assert set(registry.settings_of(_cfg("method.name=l1m", "data.dataset=plugds"))) == {
            "method.l1_weight", "data.plugds.size"}
        assert registry.settings_of({"method": ["l1m"], "data": None}) == {}
    assert registry.is_plugin("my_l1") and not registry.is_plugin("bayesncl.model.methods")
    assert not registry.is_plugin("bayesncl") and not registry.is_plugin("") and registry.is_plugin("bayesncl_x")


def test_the_provenance_lists_each_plugin_s_settings_and_code(tmp_path, monkeypatch):
    from bayesncl.report.provenance import _plugins

    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    with plugin_file(tmp_path):
        (entry,) = [p for p in _plugins() if p["module"] == "plug_code"]
        assert entry["file"] == str(tmp_path / "plug_code.py")
        code = f"sha256 {plugins.source_digest(entry['file'])}"
        assert entry["entries"] == [{"kind": "method", "name": "plug_code", "code": code,
                                     "settings": {"method.l1_weight": 1e-3}}]
        registry.register_dataset("plug_ds", load=len, check=len, crop=8, module="plug_code",
                                  settings={"n": registry.setting(4, "images per class")})
        (entry,) = [p for p in _plugins() if p["module"] == "plug_code"]
        assert entry["entries"][1:] == [{"kind": "dataset", "name": "plug_ds", "code": code,
                                         "settings": {"data.plug_ds.n": 4}}]
