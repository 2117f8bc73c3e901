"""The public API (bayesncl.api): every name docs/EXTENDING.md uses from one module, looked up lazily; and the old
module paths of that API (bayesncl.api.OLD_PATHS), so that a plugin written against the earlier docs still loads."""

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bayesncl import api

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"

# A method plugin and a measure plugin exactly as the docs wrote them before the layers (their imports are the point).
OLD_METHOD = '''
from bayesncl import registry
from bayesncl.methods import NCL
import bayesncl.losses


@registry.method("ncl_old", label="NCL (old imports)", reads=("temperature", "nonneg"),
                 settings={"old_weight": registry.setting(1e-3, "a weight", ge=0)})
class OldNCL(NCL):
    def head(self, h, z, gate_u=None):
        zplus = bayesncl.losses.nonneg(z, self.cfg["method"]["nonneg"])
        return {"zplus": zplus, "feature": bayesncl.losses.normalize(zplus)}
'''
OLD_MEASURE = '''
from bayesncl.evaluation.sections import section
from bayesncl.report.cells import METRICS, Metric


@section("old_share", every_run=True, columns={"percent": "old_share"})
def old_share(ctx):
    return {"old_share": {"percent": 0.0}}


METRICS["old_share"] = Metric("old_share", "Old (%)", 2, "up")
'''


def run(code: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, cwd=cwd,
                          env={"PYTHONPATH": f"{SRC}:{cwd}", "PATH": "/usr/bin:/bin"}, timeout=300)


def test_every_name_of_the_api_is_the_object_where_it_lives():
    import importlib

    assert api.__all__ == sorted(api.NAMES) and set(api.__all__) <= set(dir(api))
    for name, module in api.NAMES.items():
        assert getattr(api, name) is getattr(importlib.import_module(module), name), name
    with pytest.raises(AttributeError, match="the public API: BayesNCL, CL, Claim"):
        api.not_a_name  # noqa: B018


def test_importing_the_api_imports_nothing_of_the_package(tmp_path):
    r = run("import sys, bayesncl.api; print(sorted(m for m in sys.modules if m.startswith('bayesncl')))", tmp_path)
    assert r.returncode == 0 and r.stdout.split() == ["['bayesncl',", "'bayesncl.api']"], r.stderr


def test_a_plugin_written_against_the_old_docs_still_loads(tmp_path):
    (tmp_path / "old_method.py").write_text(OLD_METHOD)
    (tmp_path / "old_measure.py").write_text(OLD_MEASURE)
    r = run("""
        import old_method, old_measure
        import bayesncl.losses, bayesncl.methods, bayesncl.registry
        from bayesncl.errors import DataError
        from bayesncl.core import errors
        from bayesncl.model import losses, methods
        from bayesncl.settings import registry
        from bayesncl.evaluation.sections import SECTIONS
        from bayesncl.evaluation.context import Context
        from bayesncl.evaluation import runner
        assert Context is runner.Context and bayesncl.evaluation.context is runner
        assert bayesncl.registry is registry and bayesncl.methods is methods and bayesncl.losses is losses
        assert DataError is errors.DataError
        assert registry.METHODS["ncl_old"].label == "NCL (old imports)" and "old_share" in SECTIONS
        assert issubclass(old_method.OldNCL, methods.NCL)
        print("loaded")
    """, tmp_path)
    assert r.returncode == 0 and r.stdout == "loaded\n", r.stderr


def test_the_old_paths_are_the_public_api_s_alone(tmp_path):
    """A module that moved but is no part of the API has no old path: the hook answers for OLD_PATHS only."""
    r = run("""
        import importlib
        for name in ("bayesncl.runtime", "bayesncl.grid_old", "bayesncl.wfconfig"):
            try:
                importlib.import_module(name)
            except ModuleNotFoundError:
                print("missing", name)
    """, tmp_path)
    assert r.stdout.split("\n")[:-1] == ["missing bayesncl.runtime", "missing bayesncl.grid_old",
                                         "missing bayesncl.wfconfig"], r.stderr


def test_the_docs_import_the_public_api_alone():
    """Every `bayesncl` import in docs/EXTENDING.md's code is from bayesncl.api, and every name it imports is one."""
    text = (ROOT / "docs" / "EXTENDING.md").read_text()
    code = "\n".join(re.findall(r"```python\n(.*?)```", text, re.S))
    imports = re.findall(r"^\s*(?:from|import)\s+(bayesncl\S*)(?:\s+import\s+(.+))?$", code, re.M)
    assert imports and {m for m, _ in imports} == {"bayesncl.api"}
    names = {n.strip() for _, names in imports for n in names.split(",")}
    assert names <= set(api.__all__), names - set(api.__all__)


def test_nothing_outside_the_api_uses_an_old_path():
    """Tests, benchmarks and the workflow use the modules' own paths (the package's code: tests/test_layers.py)."""
    old = "|".join(re.escape(p.split(".", 1)[1]) for p in api.OLD_PATHS)
    pattern = re.compile(rf"\bbayesncl\.({old})\b|\bfrom bayesncl import [^\n]*\b({old})\b")
    files = [*ROOT.glob("tests/**/*.py"), *ROOT.glob("benchmarks/**/*.py"), *ROOT.glob("workflow/**/*.smk"),
             *ROOT.glob("workflow/scripts/*.py"), ROOT / "workflow" / "Snakefile"]
    found = [f"{p.relative_to(ROOT)}:{i}" for p in files if p.name != "test_api.py"
             for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert found == []
