"""The package's layers (docs/DESIGN.md): every import, at module level or inside a function, runs from a
higher layer to a lower one or within a layer, and the module import graph has no cycle."""

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

# Lowest first. A package name stands for all its modules unless a module is listed on its own.
LAYERS = [
    ["bayesncl", "bayesncl.errors", "bayesncl.atomic", "bayesncl.startup", "bayesncl.evaluation",
     "bayesncl.registry", "bayesncl.plugins", "bayesncl.learning",
     "bayesncl.forkserver",  # the fork server's protocol, client and server: standard library only
     "bayesncl.keyrules", "bayesncl.yamlio"],
    ["bayesncl.config"],
    ["bayesncl.data", "bayesncl.losses", "bayesncl.backbones", "bayesncl.rundir", "bayesncl.events"],
    ["bayesncl.methods", "bayesncl.optim", "bayesncl.checkpoint", "bayesncl.runtime", "bayesncl.outdir"],
    ["bayesncl.evaluation.arrays", "bayesncl.evaluation.probe", "bayesncl.evaluation.dynamics",
     "bayesncl.evaluation.cost", "bayesncl.evaluation.linear"],
    ["bayesncl.train", "bayesncl.step", "bayesncl.weights"],
    ["bayesncl.evaluation.sections", "bayesncl.evaluation.runner", "bayesncl.evaluation.context"],
    ["bayesncl.grid", "bayesncl.preflight", "bayesncl.stale", "bayesncl.status"],
    # estimate: the atlas submissions (report.atlas); wfconfig: a grid's declared claims parsed (report.claims);
    # catalog: `bayesncl list`, every registry, the claims among them; time_requests: the finished jobs
    # (report.jobs) it learns from
    ["bayesncl.report", "bayesncl.estimate", "bayesncl.plan", "bayesncl.wfconfig", "bayesncl.catalog",
     "bayesncl.time_requests"],
    ["bayesncl.commands"],  # each command's handler
    ["bayesncl.cli"],  # the parser, main and the `bayesncl` script's entry (routes a command through the fork server)
    ["bayesncl.__main__", "bayesncl.forkserver.__main__"],  # `python -m bayesncl`; a fork server's process
]


def modules() -> dict[str, Path]:
    out = {}
    for path in (SRC / "bayesncl").rglob("*.py"):
        parts = path.relative_to(SRC).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def layer(module: str) -> int:
    best = None
    for i, names in enumerate(LAYERS):
        for name in names:
            prefix = name != "bayesncl" and module.startswith(name + ".")  # the package's own name is its __init__ alone
            if (module == name or prefix) and (best is None or len(name) > best[1]):
                best = (i, len(name))
    assert best is not None, f"{module} is in no layer of tests/test_layers.py; add it (and to docs/DESIGN.md)"
    return best[0]


def imports(module: str, path: Path, known: set[str]) -> set[str]:
    """The bayesncl modules `module` imports anywhere in its file (TYPE_CHECKING blocks excluded)."""
    tree = ast.parse(path.read_text())
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    skip = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
            and "TYPE_CHECKING" in ast.unparse(node.test) for n in ast.walk(node)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("bayesncl")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            elif node.module and node.module.startswith("bayesncl"):
                target = node.module
            else:
                continue
            for a in node.names:  # `from . import metrics` names a module
                found.add(f"{target}.{a.name}" if f"{target}.{a.name}" in known else target)
    return {m for m in found if m in known and m != module}


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {m: imports(m, p, set(mods)) for m, p in mods.items()}


def test_every_module_is_in_a_layer_of_its_own_name():
    """A new module must be placed: the package's own name covers its __init__ only, never every module."""
    import pytest

    for m in modules():
        layer(m)
    with pytest.raises(AssertionError, match="is in no layer"):
        layer("bayesncl.newly_added")


def test_every_import_runs_down_the_layers():
    upward = [f"{m} (layer {layer(m)}) imports {t} (layer {layer(t)})"
              for m, targets in graph().items() for t in sorted(targets) if layer(t) > layer(m)]
    assert not upward, "\n".join(upward)


def test_no_import_cycle_between_modules():
    edges = graph()
    state: dict[str, int] = {}

    def visit(m, path):
        state[m] = 1
        for t in sorted(edges.get(m, ())):
            assert state.get(t) != 1, "import cycle: " + " -> ".join(path + [t])
            if t not in state:
                visit(t, path + [t])
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m, [m])


def test_the_checker_sees_function_level_and_relative_imports(tmp_path):
    known = {"bayesncl.train", "bayesncl.evaluation", "bayesncl.evaluation.arrays", "bayesncl.runtime"}
    mod = tmp_path / "x.py"
    mod.write_text("def f():\n    from ..train import pretrain\n    from . import arrays\n"
                   "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..runtime import embed\n")
    assert imports("bayesncl.evaluation.x", mod, known) == {"bayesncl.train", "bayesncl.evaluation.arrays"}
    assert layer("bayesncl.train") > layer("bayesncl.evaluation.arrays")


def test_the_bayesncl_script_enters_at_the_cli():
    """The `bayesncl` script is cli.entry, which calls the fork server's client a layer below; a script installed
    before it moved (bayesncl.forkserver:entry, kept until `pip install -e .` runs again) reaches the same entry."""
    import subprocess
    import sys
    import tomllib

    scripts = tomllib.loads((SRC.parent / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"bayesncl": "bayesncl.cli:entry"}
    assert "bayesncl.forkserver.client" in graph()["bayesncl.cli"]
    for module in ("bayesncl.cli", "bayesncl.forkserver"):
        code = f"import sys; from {module} import entry; sys.argv = ['bayesncl', 'status', '--help']; sys.exit(entry())"
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                           env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"})
        assert r.returncode == 0 and r.stdout.startswith("usage: bayesncl status"), r.stderr


def test_no_test_file_imports_another():
    """Shared helpers live in tests/helpers/ and shared fixtures in conftest.py: no test file imports a test file
    or conftest (a test module imported twice over, and its tests' order coupled)."""
    found = []
    for path in sorted((SRC.parent / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            found += [f"{path.name}: {n}" for n in names if n.split(".")[0].startswith("test_") or n == "conftest"]
    assert not found, found


def _top_names(path: Path) -> tuple[set[str], dict[str, ast.ImportFrom]]:
    """What a module defines at its top level, and what it imports there ({name: the import})."""
    defined, imported = set(), {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                defined |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.ImportFrom):
            imported.update({a.asname or a.name: node for a in node.names})
    return defined, imported


def homeless_imports(files, mods: dict[str, Path]) -> list[str]:
    """`from M import name` where M neither defines `name` nor is the package whose own module does (bayesncl.data's
    interface, say): an import from an old home, or from a module that imported the name for its own use."""
    tops = {m: _top_names(p) for m, p in mods.items()}
    packages = {m for m, p in mods.items() if p.name == "__init__.py"}
    found = []
    for path in files:
        parts = path.relative_to(SRC).with_suffix("").parts if path.is_relative_to(SRC) else ()
        here = ".".join(parts[:-1] if parts and parts[-1] == "__init__" else parts)
        package = here if path.name == "__init__.py" else here.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            source = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + [node.module or ""]
                              ).rstrip(".") if node.level else node.module or ""
            if source not in mods:
                continue
            defined, imported = tops[source]
            for a in node.names:
                via = imported.get(a.name)
                own = source in packages and via is not None and via.level == 1  # its own module's name
                if a.name not in defined and f"{source}.{a.name}" not in mods and not own:
                    found.append(f"{path.relative_to(SRC.parent)}:{node.lineno}: {a.name} from {source}")
    return found


@pytest.mark.xdist_group("tests_folder")  # reads every file in tests/ (a probe below writes one)
def test_each_name_is_imported_from_its_home():
    """One import path per name, in the package, its tests and benchmarks: ConfigError from bayesncl.errors, never
    from bayesncl.config, which imports it for its own use."""
    mods = modules()
    files = [*(SRC / "bayesncl").rglob("*.py"), *(SRC.parent / "tests").rglob("*.py"),
             *(SRC.parent / "benchmarks").rglob("*.py")]
    assert not homeless_imports(files, mods), "\n".join(homeless_imports(files, mods))


@pytest.mark.xdist_group("tests_folder")  # writes a file in tests/, which the home check reads
def test_the_home_checker_finds_an_old_home(tmp_path):
    (tmp_path / "t.py").write_text("from bayesncl.config import ConfigError, resolve\nfrom bayesncl.data import ImageSet\n"
                                   "from bayesncl.report.claims import compare\nfrom bayesncl import config\n")
    tmp = SRC.parent / "tests" / "_home_probe.py"  # where a test file lies, so its path reads as one
    tmp.write_text((tmp_path / "t.py").read_text())
    try:
        found = homeless_imports([tmp], modules())
    finally:
        tmp.unlink()
    assert [f.split(": ", 1)[1] for f in found] == ["ConfigError from bayesncl.config",
                                                    "compare from bayesncl.report.claims"]


def test_no_module_answers_for_names_it_does_not_define():
    """No module-level __getattr__ (a view computed on access): each name is defined where a reader looks for it."""
    found = [m for m, p in modules().items()
             if any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__" for n in ast.parse(p.read_text()).body)]
    assert not found, found
