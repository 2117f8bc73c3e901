"""bayesncl.settings.registry: the one list of method and dataset names, and plugins that add to it."""

import ast
import os
import re
import sys
import textwrap
from pathlib import Path

import pytest

from bayesncl.settings import config as C
from bayesncl.settings import plugins, registry
from bayesncl.core.errors import ConfigError
from helpers.plugins import registered

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "bayesncl"
# Where a name may be written: the registry itself and each dataset's own module (its name in its messages and cache
# folders). The paper's claims find their sides by the registry's traits (report/claims.py).
ALLOWED = {SRC / "settings" / "registry.py", *(SRC / "data").glob("*.py")}


def _names() -> set[str]:
    return set(registry.METHODS) | set(registry.DATASETS)


def _uses(tree: ast.AST, names: set[str]) -> list[tuple[int, str]]:
    """Comparisons with a name, and literal lists, sets, tuples or dict keys that hold one."""
    def named(node) -> bool:
        return isinstance(node, ast.Constant) and node.value in names

    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for side in [node.left, *node.comparators]:
                if named(side) or (isinstance(side, (ast.Tuple, ast.List, ast.Set)) and any(map(named, side.elts))):
                    out.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)) and sum(map(named, node.elts)) >= 2:
            out.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Dict) and any(named(k) for k in node.keys if k is not None):
            out.append((node.lineno, ast.unparse(node)[:80]))
    return out


def find_name_uses(files, names: set[str]) -> list[str]:
    found = []
    for path in files:
        where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        text = path.read_text()
        if path.suffix == ".py":
            found += [f"{where}:{line}: {what}" for line, what in _uses(ast.parse(text), names)]
        else:  # Snakemake files: Python with rule blocks, so a line scan
            for i, line in enumerate(text.splitlines(), 1):
                if re.search(r"""(==|!=|\bin)\s*\(?["'](%s)["']""" % "|".join(map(re.escape, names)), line):
                    found.append(f"{where}:{i}: {line.strip()}")
    return found


def test_no_method_or_dataset_name_is_compared_outside_the_registry():
    files = [p for p in SRC.rglob("*.py") if p not in ALLOWED]
    files += [ROOT / "workflow" / "Snakefile", *(ROOT / "workflow" / "rules").glob("*.smk")]
    assert find_name_uses(files, _names()) == []


def test_the_scan_finds_a_bypass(tmp_path):
    """The check above, on code that bypasses the registry in each way it looks for."""
    bad = tmp_path / "bad.py"
    bad.write_text(textwrap.dedent("""
        if cfg["method"]["name"] == "bayesncl": pass
        keys = {"cl": 1}
        ok = method in ("ncl", "topk_ncl")
        fine = cfg["method"]["name"] == name
    """))
    smk = tmp_path / "rule.smk"
    smk.write_text('x = 1 if d != "imagenet100" else 2\n')
    found = find_name_uses([bad, smk], _names())
    assert {":".join(Path(f.split(": ")[0]).name.split(":")[:2]) for f in found} == {
        "bad.py:2", "bad.py:3", "bad.py:4", "rule.smk:1"}, found


# --------------------------------------------------------------------------------------------- the registry
def test_an_unknown_name_is_one_line_naming_the_key_and_the_choices():
    with pytest.raises(ConfigError) as e:
        registry.METHODS["nope"]
    assert str(e.value) == ("method.name: unknown method 'nope'; allowed: cl, ncl, topk_ncl, bayesncl (a plugin's "
                            "method: name its module with --plugin FILE.py (or $BAYESNCL_PLUGINS) by hand, or in the "
                            "workflow config's plugins: list; `bayesncl list` shows what is loaded)")
    with pytest.raises(ConfigError, match="data.dataset: unknown dataset 'nope'"):
        registry.DATASETS["nope"]


def test_a_name_registered_twice_is_refused_and_the_same_spec_again_is_not():
    spec = registry.METHODS["ncl"]
    assert registry.METHODS.register(spec) is spec
    with pytest.raises(ConfigError, match="registered twice"):
        registry.register_method("ncl", "Other", impl="x:y")


def test_config_validation_reads_the_registry_as_it_is_now():
    with pytest.raises(ConfigError) as e:
        C.resolve(sets=["method.name=extra"])
    assert str(e.value) == ("method.name: got 'extra', expected one of cl, ncl, topk_ncl, bayesncl; a plugin's method: "
                            "name its module with --plugin FILE.py (or $BAYESNCL_PLUGINS) by hand, or in the workflow "
                            "config's plugins: list; `bayesncl list` shows what is loaded")
    with registered():
        registry.register_method("extra", "Extra", impl="bayesncl.model.methods:NCL", reads=("temperature", "nonneg"))
        assert C.resolve(sets=["method.name=extra"])["method"]["name"] == "extra"
        assert "extra" in registry.METHODS
    assert "extra" not in registry.METHODS


def test_a_plugin_module_registers_its_method_and_is_recorded(tmp_path, monkeypatch):
    (tmp_path / "plug_l1.py").write_text(textwrap.dedent("""
        from bayesncl.settings import registry
        from bayesncl.model.methods import NCL

        @registry.method("plug_l1", label="NCL + L1", reads=("temperature", "nonneg"))
        class PlugL1(NCL):
            extra_names = ("l1",)

            def extra_loss(self, out):
                return {"l1": 1e-3 * out["zplus"].float().sum(dim=1).mean()}
    """))
    monkeypatch.delenv(plugins.ENV, raising=False)
    with registered():
        try:
            (info,) = plugins.load(["plug_l1"], [tmp_path])
            assert info["module"] == "plug_l1" and info["file"] == str(tmp_path / "plug_l1.py")
            assert len(info["sha256"]) == 64
            cfg = C.resolve(sets=["method.name=plug_l1", "model.width=4", "model.proj_hidden=8", "model.proj_dim=8"])
            from bayesncl.model.methods import build_method

            import torch

            model = build_method(cfg)
            assert type(model).__name__ == "PlugL1" and registry.method_label("plug_l1") == "NCL + L1"
            loss, parts = model.training_loss(torch.rand(4, 3, 16, 16), torch.rand(4, 3, 16, 16))
            assert set(parts) == {"infonce", "l1", "out"} and torch.isclose(loss, parts["infonce"] + parts["l1"])
        finally:
            sys.modules.pop("plug_l1", None)
            plugins._LOADED.pop("plug_l1", None)


def test_a_missing_plugin_is_one_line_naming_where_it_looked(tmp_path):
    with pytest.raises(ConfigError) as e:
        plugins.load(["no_such_plugin"], [tmp_path])
    assert str(e.value) == (f"plugins: no plugin module 'no_such_plugin' (looked for no_such_plugin.py in {tmp_path} "
                            "and among the installed packages); put it beside the workflow config or install it")
    with pytest.raises(ConfigError, match="expected a list of module names"):
        plugins.load("my_method")


# A value other than the default for every method.* key a method may read.
OTHER = {"temperature": 0.5, "nonneg": "relu", "rho": 0.3, "lambda": 0.5, "gate": "gumbel", "detach": False,
         "head_depth": 3, "tau_g": 0.3, "head_lr": 0.7, "topk_k": 3}
TINY = ["model.width=4", "model.proj_hidden=8", "model.proj_dim=8", "train.batch_size=8"]


def _what_it_does(cfg):
    """A method's loss, gradients, evaluation outputs and lr peaks on fixed inputs: what a setting can change."""
    import torch

    from bayesncl.model.methods import build_method
    from bayesncl.training.optim import build_optimizer, group_peaks

    torch.manual_seed(0)
    model = build_method(cfg)
    x = torch.rand(2, 8, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    shape = model.gate_draws(16)  # uniform draws for both views' 16 images (a stochastic gate's)
    u = torch.rand(shape, generator=torch.Generator().manual_seed(2)) if shape else None
    loss, parts = model.training_loss(x[0], x[1], u)
    loss.backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    model.eval()
    out = model.features(x[0])
    return [loss.detach(), grads, *(out[k] for k in sorted(out))], sorted(out), group_peaks(build_optimizer(model, cfg))


@pytest.mark.parametrize("name", ["cl", "ncl", "topk_ncl", "bayesncl"])
def test_a_method_spec_says_what_its_class_reads_and_outputs(name):
    """`reads`: the method.* keys whose change changes the method (its loss, gradients, outputs or lr); `nonnegative`,
    `arrays`, `gated`, `masked`: the outputs its class gives."""
    import torch

    spec = registry.METHODS[name]
    base, keys, peaks = _what_it_does(C.resolve(sets=[f"method.name={name}", *TINY]))
    read = []
    for key, value in OTHER.items():
        other, _, other_peaks = _what_it_does(C.resolve(sets=[f"method.name={name}", *TINY, f"method.{key}={value}"]))
        if peaks != other_peaks or any(a.shape != b.shape or not torch.equal(a, b) for a, b in zip(base, other)):
            read.append(key)
    assert sorted(read) == sorted(spec.reads)
    assert ("zplus" in keys) == spec.nonnegative
    assert set(spec.arrays) <= set(keys) and ({"gate", "mask"} & set(keys)) == set(spec.arrays)
    assert ("gate" in keys) == spec.gated and ("mask" in keys) == spec.masked


def test_the_registry_s_labels_and_reference_are_the_papers():
    assert {n: registry.method_label(n) for n in registry.METHODS} == {
        "cl": "SimCLR", "ncl": "NCL", "topk_ncl": "Top-k NCL", "bayesncl": "BayesNCL"}
    assert registry.METHODS.names(lambda s: s.reference) == ("ncl",)  # the baseline figures draw against
    assert registry.METHODS["bayesncl"].always_named == ("method.rho", "method.lambda")
    assert registry.METHODS["topk_ncl"].always_named == ("method.topk_k",)
    assert registry.method_traits("unknown").label == "unknown" and not registry.method_traits("unknown").gated


def test_a_plugin_method_takes_the_documented_defaults():
    spec = registry.MethodSpec("x", "X", "m:C")
    assert (spec.reads, spec.nonnegative, spec.arrays, spec.gated, spec.masked, spec.reference, spec.module,
            spec.always_named) == (("temperature",), True, (), False, False, False, "", ())
    with pytest.raises(AttributeError):
        spec.label = "Y"  # frozen: a spec is read by every process alike
    with pytest.raises(ConfigError, match="method.name: method 'x' has no implementation"):
        registry.register_method("x")
    with pytest.raises(ConfigError) as e:
        registry.METHODS.register(registry.MethodSpec("ncl", "Mine", "m:C", module="my_plugin"))
    assert str(e.value) == ("method.name: method 'ncl' is registered twice (first by bayesncl); give the new one "
                            "another name")


def test_each_method_spec_agrees_with_its_class():
    for name in registry.METHODS:
        spec, cls = registry.METHODS[name], registry.METHODS[name].load()
        assert cls.name == name
        assert ("kl" in cls.extra_names) == spec.gated  # the gate's prior
    cfg = C.resolve(sets=["method.name=topk_ncl", "model.proj_dim=20"])
    assert C.topk_k(cfg) == 2


def test_each_dataset_spec_gives_the_crop_and_retrieval_k_of_docs_method():
    crop = {n: registry.DATASETS[n].crop_size(C.resolve(sets=[f"data.dataset={n}", "data.root=/x"]))
            for n in ("cifar10", "cifar100", "imagenet100")}
    assert crop == {"cifar10": 32, "cifar100": 32, "imagenet100": 224}
    assert registry.DATASETS["synthetic"].crop_size(C.resolve(sets=["data.synthetic.image_size=16"])) == 16
    assert {n: registry.DATASETS[n].retrieval_k for n in registry.training_datasets()} == {
        "synthetic": 32, "cifar10": 64, "cifar100": 128, "imagenet100": 256, "imagefolder": 64}
    folder = C.resolve(sets=["data.dataset=imagefolder", "data.root=/x", "data.imagefolder.crop_size=96"])
    assert registry.DATASETS["imagefolder"].crop_size(folder) == 96


def test_a_plugin_claim_is_judged_beside_the_paper_s():
    import pandas as pd

    from bayesncl.report import claims as K, judge

    claim = K.register_claim({"id": "P1", "metric": "sc", "left": "A", "right": "B", "relation": ">"})
    try:
        with pytest.raises(ConfigError, match="registered twice"):
            K.register_claim({"id": "P1", "metric": "sc", "left": "A", "right": "B", "relation": "<"})
        with pytest.raises(ConfigError, match=r"^claim P2\[0\]: missing relation"):  # named by its id
            K.register_claim({"id": "P2", "metric": "sc", "left": "A", "right": "B"})
        with pytest.raises(ConfigError, match=r"^claim \?\[0\]: missing relation"):  # no id to name it by
            K.register_claim({"metric": "sc", "left": "A", "right": "B"})
        rows = [{"run_id": f"synthetic/{m}/seed~{s}", "dataset": "synthetic", "arch": "resnet18", "method": m,
                 "variant": v, "sets": "table1", "seed": s, "sc": sc + s}
                for m, v, sc in (("ncl", "A", 30.0), ("bayesncl", "B", 10.0)) for s in range(3)]
        blocks = dict(judge.claims_rows(pd.DataFrame(rows)))
        (mine,) = [c for c in blocks["synthetic"] if c.claim == "P1"]
        assert mine.left.label == "A" and mine.right.label == "B" and mine.verdict == "holds"
        assert mine.result.diff == pytest.approx(20.0)
        assert claim.number == "P1"
    finally:
        K.CLAIMS._specs.pop(claim.name)


def test_plugins_travel_to_every_job_through_the_environment(tmp_path, monkeypatch):
    """What the workflow exports (export_env) is what each job loads (load_from_env), beside the grid's own."""
    (tmp_path / "plug_env.py").write_text("LOADED = True\n")
    monkeypatch.setattr(os, "environ", {k: v for k, v in os.environ.items() if k not in (plugins.ENV, plugins.PATH_ENV)})
    assert plugins.load_from_env() == []
    plugins.export_env([], [tmp_path])  # no plugins: the environment as it was
    assert plugins.ENV not in os.environ and plugins.PATH_ENV not in os.environ
    try:
        plugins.export_env(["plug_env"], [tmp_path])
        plugins.export_env(["plug_env", "other"], [])  # names are added once, in order; folders kept
        assert os.environ[plugins.ENV] == "plug_env,other"
        assert os.environ[plugins.PATH_ENV] == str(tmp_path.resolve())
        os.environ[plugins.ENV] = "plug_env"
        (info,) = plugins.load_from_env()
        assert info["module"] == "plug_env" and sys.modules["plug_env"].LOADED
        assert info["sha256"] == __import__("hashlib").sha256(b"LOADED = True\n").hexdigest()
        assert info in plugins.loaded()
        # the grid's list and the environment's, each once
        assert plugins.load_grid({"plugins": ["plug_env"]}, [tmp_path]) == [info]
        with pytest.raises(ConfigError, match=r"\$BAYESNCL_PLUGINS: no plugin module 'gone'"):
            os.environ[plugins.ENV] = "gone"
            plugins.load_from_env()
    finally:
        sys.modules.pop("plug_env", None)
        plugins._LOADED.pop("plug_env", None)
        if str(tmp_path.resolve()) in sys.path:
            sys.path.remove(str(tmp_path.resolve()))


def test_a_plugin_that_imports_a_missing_package_says_which(tmp_path):
    (tmp_path / "plug_dep.py").write_text("import no_such_dependency_xyz\n")
    try:
        with pytest.raises(ConfigError) as e:
            plugins.load(["plug_dep"], [tmp_path])
        assert str(e.value) == "plugins: plugin 'plug_dep' imports 'no_such_dependency_xyz', which is not installed"
    finally:
        sys.modules.pop("plug_dep", None)


def test_plugins_edge_cases_each_give_one_line_or_a_record(tmp_path, monkeypatch):
    """mutmut's survivors of plugins.py, each pinned."""
    monkeypatch.delenv(plugins.ENV, raising=False)
    monkeypatch.delenv(plugins.PATH_ENV, raising=False)
    assert (plugins.ENV, plugins.PATH_ENV) == ("BAYESNCL_PLUGINS", "BAYESNCL_PLUGIN_PATH")  # what the docs name
    for bad in ([""], [1], "one"):
        with pytest.raises(ConfigError, match=r"^plugins: expected a list of module names, e.g. \[my_method\]"):
            plugins.load(bad)
    with pytest.raises(ConfigError) as e:
        plugins.load(["no_such_plugin_2"])
    assert "(looked for no_such_plugin_2.py in no folder and among the installed packages)" in str(e.value)
    (tmp_path / "plug_pkg").mkdir()
    (tmp_path / "plug_pkg" / "__init__.py").write_text("")
    with pytest.raises(ConfigError, match=r"^plugins: no plugin module 'plug_pkg.missing' \(looked for"):
        plugins.load(["plug_pkg.missing"], [tmp_path])  # the package is there, its module is not
    assert sys.path[0] == str(tmp_path.resolve())  # the workflow config's folder first
    (tmp_path / "plug_bad.py").write_text("from bayesncl.core.errors import ConfigError\nraise ConfigError('x: y')\n")
    with pytest.raises(ConfigError, match=r"^plugins: plugin 'plug_bad': x: y$"):
        plugins.load(["plug_bad"], [tmp_path])
    (info,) = plugins.load(["itertools"])  # a module with no file: recorded without one
    assert info == {"module": "itertools", "file": "", "sha256": ""}
    assert plugins._sha(str(tmp_path / "gone.py")) == "" and plugins._sha(None) == ""
    # the grid's list alone (no environment), and two names in the environment
    (tmp_path / "plug_a.py").write_text("")
    (tmp_path / "plug_b.py").write_text("")
    try:
        assert [p["module"] for p in plugins.load_grid({"plugins": ["plug_a"]}, [tmp_path])] == ["plug_a"]
        monkeypatch.setenv(plugins.ENV, "plug_a,plug_b")
        assert [p["module"] for p in plugins.load_from_env()] == ["plug_a", "plug_b"]
    finally:
        for m in ("plug_a", "plug_b", "plug_pkg", "plug_bad", "itertools"):
            plugins._LOADED.pop(m, None)
        for m in ("plug_a", "plug_b", "plug_pkg", "plug_bad"):
            sys.modules.pop(m, None)
        while str(tmp_path.resolve()) in sys.path:
            sys.path.remove(str(tmp_path.resolve()))


def test_a_plugin_that_fails_while_imported_is_one_exact_line(tmp_path, monkeypatch):
    """Whatever a plugin raises, even with no message, and wherever its file could not be found."""
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    (tmp_path / "plug_bare.py").write_text("x = 1\nraise RuntimeError()\n")
    (tmp_path / "plug_pkg").mkdir()
    (tmp_path / "plug_pkg" / "__init__.py").write_text("raise ValueError('half made')\n")
    with pytest.raises(ConfigError) as e:
        plugins.load(["plug_bare"], [tmp_path])
    assert str(e.value) == (f"plugins: plugin 'plug_bare' ({tmp_path.resolve()}/plug_bare.py, line 2) raised "
                            "RuntimeError while imported; fix the plugin or remove it from the workflow config's plugins")
    with pytest.raises(ConfigError) as e:
        plugins.load(["plug_pkg.sub"], [tmp_path])  # its package fails first: no file of its own to name
    assert str(e.value) == ("plugins: plugin 'plug_pkg.sub' raised ValueError: half made while imported; fix the "
                            "plugin or remove it from the workflow config's plugins")


# ------------------------------------------------------------------------------------ every name once
def test_the_paper_s_claim_sides_are_found_by_the_registry_s_traits():
    """report/claims.py reads no method name: a method declared gated stands for BayesNCL, one declared the
    reference for NCL (here two plugin methods in place of the paper's), and the labels of sides without runs are
    the registry's."""
    import pandas as pd

    from bayesncl.report import claims as C, judge as K

    with registered():
        registry.register_method("gated_x", "Gated X", impl="bayesncl.model.methods:BayesNCL", gated=True,
                                 module="plug_x")
        registry.register_method("ref_x", "Ref X", impl="bayesncl.model.methods:NCL", module="plug_x")
        rows = [{"run_id": f"synthetic/{m}/seed~{s}", "dataset": "synthetic", "arch": "resnet18", "method": m,
                 "variant": v, "sets": "table1", "seed": s, "sc": sc + s, "gate": "ste", "detach": True,
                 "head_depth": 2}
                for m, v, sc in (("gated_x", "G", 30.0), ("ref_x", "R", 10.0)) for s in range(3)]
        one_a = next(c for c in dict(K.claims_rows(pd.DataFrame(rows)))["synthetic"] if c.claim == "1a")
        assert (one_a.left.label, one_a.right.label) == ("G", "(no runs)") or one_a.right.label == "NCL"
        assert one_a.left.label == "G" and one_a.left.runs == 3 and one_a.right.runs == 0  # ref_x: not the reference
        rows = [{**r, "method": "ncl" if r["method"] == "ref_x" else r["method"]} for r in rows]
        one_a = next(c for c in dict(K.claims_rows(pd.DataFrame(rows)))["synthetic"] if c.claim == "1a")
        assert (one_a.left.label, one_a.right.label, one_a.verdict) == ("G", "R", "holds")
    assert {r: C.default_label(r) for r in ("bayes", "reference", "topk", "simclr")} == {
        "bayes": "BayesNCL", "reference": "NCL", "topk": "Top-k NCL", "simclr": "SimCLR"}


def test_datasets_and_methods_each_mean_the_registry_s_specs():
    """One meaning per name: no other module gives DATASETS or METHODS another (the training names, the classes)."""
    import importlib
    import pkgutil

    import bayesncl

    for info in pkgutil.walk_packages(bayesncl.__path__, "bayesncl."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for name in ("DATASETS", "METHODS"):
            assert getattr(module, name, getattr(registry, name)) is getattr(registry, name), (info.name, name)


def test_every_public_name_of_the_registry_is_used():
    """registry.dataset, dataset_label (and report.names.METHOD_LABELS) were never called: dead, removed."""
    texts = [p.read_text() for p in [*SRC.rglob("*.py"), *(ROOT / "tests").glob("*.py")]
             if p != SRC / "settings" / "registry.py"]
    texts += [p.read_text() for p in (ROOT / "workflow").rglob("*.smk")] + [(ROOT / "docs" / "EXTENDING.md").read_text()]

    def used(n: str) -> bool:  # a function: called, or imported by name, or reached as registry.<name>
        pattern = rf"\b{n}\b" if n[0].isupper() else rf"registry\.{n}\b|\bimport\b[^\n]*\b{n}\b|(?<![\w.]){n}\("
        return any(re.search(pattern, text) for text in texts)

    assert [n for n in registry.__all__ if n != "Registry" and not used(n)] == []  # Registry: their type
    from bayesncl.report import names

    assert not hasattr(names, "METHOD_LABELS") and not hasattr(registry, "dataset_label")



def test_a_section_or_a_measure_registered_twice_is_one_line_and_the_same_again_is_not():
    """Sections and measures are registered as methods are (one Registry): a second entry under a taken name is one
    ConfigError line naming the kind, the name and who registered it first; the same entry again is no error."""
    from bayesncl.evaluation.sections import SECTIONS, section
    from bayesncl.report.cells import METRICS, register_measure

    with registered():
        def mine(ctx):
            return {}

        assert section("twice_s")(mine) is mine and section("twice_s")(mine) is mine
        with pytest.raises(ConfigError) as e:
            section("twice_s")(lambda ctx: {})
        assert str(e.value) == (f"evaluate --only: evaluation section 'twice_s' is registered twice (first by "
                                f"{__name__}); give the new one another name")
        with pytest.raises(ConfigError) as e:
            section("features")(mine)
        assert str(e.value).startswith("evaluate --only: evaluation section 'features' is registered twice (first "
                                       "by bayesncl.evaluation.sections)")
        assert register_measure("twice_m", "Twice", 1, "up") is METRICS["twice_m"]
        assert register_measure("twice_m", "Twice", 1, "up") == METRICS["twice_m"]
        with pytest.raises(ConfigError) as e:
            register_measure("sc", "Mine", 2, "up")
        assert str(e.value) == ("metric: measure 'sc' is registered twice (first by bayesncl); give the new one "
                                "another name")
        with pytest.raises(ConfigError, match=r"^metric: measure 'x' has better='higher'; give 'up', 'down' or None$"):
            register_measure("x", "X", 1, "higher")
    assert "twice_s" not in SECTIONS and "twice_m" not in METRICS and "x" not in METRICS


def test_an_unknown_section_or_measure_is_one_line_listing_what_is_registered():
    from bayesncl.evaluation.sections import SECTIONS
    from bayesncl.report.cells import METRICS

    with pytest.raises(ConfigError) as e:
        SECTIONS["nope"]
    assert str(e.value).startswith(f"evaluate --only: unknown evaluation section 'nope'; allowed: "
                                   f"{', '.join(SECTIONS)} (a plugin's evaluation section: ")
    with pytest.raises(ConfigError, match=rf"^metric: unknown measure 'nope'; allowed: {', '.join(METRICS)} \("):
        METRICS["nope"]
    assert list(SECTIONS)[0] == "features" and [n for n, _ in SECTIONS.items()] == [s.name for s in SECTIONS.values()]


def test_a_measure_set_as_in_a_dict_is_registered_under_its_own_name():
    """`METRICS[key] = Metric(...)`, as plugins wrote before register_measure, registers it; under another name it is
    one line, not a measure two names reach."""
    from bayesncl.report.cells import METRICS, Metric

    with registered():
        METRICS["dict_m"] = Metric("dict_m", "Dict", 1, None)
        assert METRICS["dict_m"].header == "Dict" and list(METRICS)[-1] == "dict_m"
        with pytest.raises(ConfigError, match=r"^metric: measure 'dict_n' given as 'other'; register it under its "):
            METRICS["other"] = Metric("dict_n", "Dict", 1, None)
        assert "other" not in METRICS and "dict_n" not in METRICS



def test_a_plugin_measure_registered_through_the_api_is_usable_in_a_declared_claim():
    import pandas as pd

    from bayesncl import api
    from bayesncl.report import claims as K, judge

    rows = [{"run_id": f"synthetic/{v}/seed~{s}", "dataset": "synthetic", "arch": "resnet18", "method": "ncl",
             "variant": v, "sets": "table1", "seed": s, "zeros": z + 0.5 * s}
            for v, z in (("A", 10.0), ("B", 40.0)) for s in range(3)]
    decl = [{"id": "Z", "metric": "zeros", "left": "A", "right": "B", "relation": "<"}]
    with pytest.raises(ConfigError, match=r"^claims\[0\].metric: unknown metric 'zeros'; .*register_measure\)$"):
        K.parse_claims(decl)
    with registered():
        api.register_measure("zeros", "Zeros", 1, "down")
        (mine,) = [c for c in dict(judge.claims_rows(pd.DataFrame(rows), K.parse_claims(decl)))["synthetic"]
                   if c.claim == "Z"]
        assert (mine.left.label, mine.right.label, mine.verdict, mine.text) == ("A", "B", "holds", "Zeros: @A $<$ @B")
        assert mine.result.diff == pytest.approx(30.0) and mine.left.decimals == 1


def test_an_evaluation_of_an_unknown_section_is_the_registry_s_line_before_any_work(tmp_path):
    from bayesncl.evaluation import runner

    with pytest.raises(ConfigError, match=r"^evaluate --only: unknown evaluation section 'nope'; allowed: features, "):
        runner._evaluate(tmp_path / "none.pt", tmp_path, ["features", "nope"], (), None, None, False, False, None)
