"""The package's layers (docs/DESIGN.md, "Layers"): each top-level folder of src/bayesncl is one layer, and beside
them only the package's own modules. Every import, at module level or inside a function, and every module named
to importlib.import_module, runs from a higher layer to a lower one or within a layer; it names a module that
exists; and the module import graph has no cycle."""

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

# The layers, lowest first: a folder each. A new folder, or a module loose beside them, must be placed here (and in
# docs/DESIGN.md) before the tests pass.
LAYERS = ["core", "settings", "data", "model", "measures", "runs", "training", "evaluation", "grid", "report",
          "planning", "cli"]
# The package's own modules, above every layer: its name (installs the public API's old module paths), `python -m
# bayesncl`, and the public API for plugins.
TOP = ["__init__", "__main__", "api"]
# Folders whose __init__ is an API of its own (data: its loaders' front; report: summarize and write_report); every
# other layer's __init__ is a docstring and imports nothing when imported.
INIT_WITH_IMPORTS = {"data", "report"}


def modules(root: Path = SRC) -> dict[str, Path]:
    out = {}
    for path in (root / "bayesncl").rglob("*.py"):
        parts = path.relative_to(root).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def layer(module: str) -> int:
    """The layer of a module: its top-level folder's index; the package's own modules are above every layer."""
    parts = module.split(".")
    if len(parts) == 1 or (len(parts) == 2 and parts[1] in TOP):
        return len(LAYERS)
    assert parts[1] in LAYERS, f"{module} is in no layer: add its folder to tests/test_layers.py's LAYERS (and to " \
                               "docs/DESIGN.md), or move it into a layer's folder"
    return LAYERS.index(parts[1])


def _type_checking(tree: ast.AST) -> set[int]:
    return {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
            and "TYPE_CHECKING" in ast.unparse(node.test) for n in ast.walk(node)}


def imports(module: str, path: Path, known: set[str]) -> tuple[set[str], set[str]]:
    """(the bayesncl modules `module` imports anywhere in its file, at module level, inside functions or through
    importlib.import_module; the bayesncl names it imports that are no module), TYPE_CHECKING blocks excluded."""
    tree = ast.parse(path.read_text())
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    skip = _type_checking(tree)
    found, missing = set(), set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "bayesncl":
                    (found if a.name in known else missing).add(a.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            elif node.module and node.module.split(".")[0] == "bayesncl":
                target = node.module
            else:
                continue
            if target not in known:
                missing.add(target)
                continue
            for a in node.names:  # `from . import arrays` names a module
                found.add(f"{target}.{a.name}" if f"{target}.{a.name}" in known else target)
        elif isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[-1] == "import_module" and node.args:
            name = node.args[0].value if isinstance(node.args[0], ast.Constant) else None
            if isinstance(name, str) and name.split(".")[0] == "bayesncl":
                (found if name in known else missing).add(name)
    return {m for m in found if m != module}, missing


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {m: imports(m, p, set(mods))[0] for m, p in mods.items()}


def test_the_package_is_its_layers_folders_and_its_own_modules():
    """Nothing loose at the top but the package's own modules; every folder is a listed layer and every layer is
    a folder; every module is in a layer."""
    top = sorted(p.name for p in (SRC / "bayesncl").iterdir() if p.name != "__pycache__" and p.suffix != ".typed")
    folders = [n for n in top if (SRC / "bayesncl" / n).is_dir()]
    loose = [n[:-3] for n in top if n.endswith(".py")]
    assert sorted(folders) == sorted(LAYERS), "a folder of src/bayesncl is no layer, or a layer has no folder"
    assert sorted(loose) == sorted(TOP), f"modules loose at the top of src/bayesncl: {sorted(set(loose) - set(TOP))}"
    assert [p for p in top if p not in folders and not p.endswith(".py")] == []
    for m in modules():
        layer(m)


def test_the_layer_check_refuses_an_unlisted_folder_or_a_loose_module():
    with pytest.raises(AssertionError, match="is in no layer"):
        layer("bayesncl.newfolder.thing")
    with pytest.raises(AssertionError, match="is in no layer"):
        layer("bayesncl.loose_module")
    assert layer("bayesncl.api") == layer("bayesncl") == len(LAYERS) > layer("bayesncl.cli.main")


def test_every_import_runs_down_the_layers():
    upward = [f"{m} ({LAYERS[layer(m)] if layer(m) < len(LAYERS) else 'top'}) imports {t} "
              f"({LAYERS[layer(t)] if layer(t) < len(LAYERS) else 'top'})"
              for m, targets in graph().items() for t in sorted(targets) if layer(t) > layer(m)]
    assert not upward, "\n".join(upward)


def test_every_import_names_a_module_that_exists():
    """The package's code imports no module path that does not exist: in particular none of the public API's old
    paths (bayesncl.api.OLD_PATHS), which only plugins written against the earlier docs may use."""
    mods = modules()
    missing = {m: sorted(imports(m, p, set(mods))[1]) for m, p in mods.items()}
    assert {m: t for m, t in missing.items() if t} == {}


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


def test_a_layer_s_init_imports_nothing():
    """Importing a layer's module loads that module's imports only, not its siblings (`from bayesncl.training
    import embed` does not import the training loop)."""
    for name in LAYERS:
        if name in INIT_WITH_IMPORTS:
            continue
        tree = ast.parse((SRC / "bayesncl" / name / "__init__.py").read_text())
        assert not [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))], name


def test_the_checker_sees_function_level_relative_and_importlib_imports(tmp_path):
    known = {"bayesncl.training.train", "bayesncl.measures", "bayesncl.measures.arrays", "bayesncl.training.device",
             "bayesncl.cli.main", "bayesncl.training"}
    mod = tmp_path / "x.py"
    mod.write_text("import importlib\n"
                   "def f():\n    from ..training.train import pretrain\n    from . import arrays\n"
                   "    importlib.import_module('bayesncl.cli.main')\n    from ..nowhere import gone\n"
                   "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..training.device import autocast\n")
    assert imports("bayesncl.measures.x", mod, known) == (
        {"bayesncl.training.train", "bayesncl.measures.arrays", "bayesncl.cli.main"}, {"bayesncl.nowhere"})
    assert layer("bayesncl.training.train") > layer("bayesncl.measures.arrays")
    assert layer("bayesncl.cli.main") > layer("bayesncl.measures.x")


def test_the_bayesncl_script_enters_at_the_cli():
    """The `bayesncl` script is bayesncl.cli:entry (a name an installed script keeps), which hands a routed command to
    the fork server's client, in the same layer, and imports the CLI's main only where this process runs the command.
    Building the parser imports no torch (`export --format`'s choices are read from runs.export, which imports it
    when it writes)."""
    import subprocess
    import sys
    import tomllib

    scripts = tomllib.loads((SRC.parent / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"bayesncl": "bayesncl.cli:entry"}
    assert "bayesncl.cli.forkserver.client" in graph()["bayesncl.cli"]
    assert "bayesncl.cli.main" in graph()["bayesncl.cli"]
    code = ("import atexit, sys; atexit.register(lambda: print('torch imported:', 'torch' in sys.modules)); "
            "from bayesncl.cli import entry; sys.argv = ['bayesncl', 'status', '--help']; sys.exit(entry())")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0 and r.stdout.startswith("usage: bayesncl status"), r.stderr
    assert r.stdout.endswith("torch imported: False\n")


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


# The public API (bayesncl.api): the one module that answers for names defined elsewhere, each looked up where it
# lives on first use, so that a dataset plugin does not import the networks. Only plugins (and the API's own tests)
# import from it.
PUBLIC = "bayesncl.api"


def homeless_imports(files, mods: dict[str, Path]) -> list[str]:
    """`from M import name` where M neither defines `name` nor is the package whose own module does (bayesncl.data's
    interface, say): an import from an old home, or from a module that imported the name for its own use. The
    public API is the home of the names it lists."""
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
            if source not in mods or source == PUBLIC:
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
    """One import path per name, in the package, its tests and benchmarks: ConfigError from bayesncl.core.errors,
    never from bayesncl.settings.config, which imports it for its own use."""
    mods = modules()
    files = [*(SRC / "bayesncl").rglob("*.py"), *(SRC.parent / "tests").rglob("*.py"),
             *(SRC.parent / "benchmarks").rglob("*.py")]
    assert not homeless_imports(files, mods), "\n".join(homeless_imports(files, mods))


@pytest.mark.xdist_group("tests_folder")  # writes a file in tests/, which the home check reads
def test_the_home_checker_finds_an_old_home(tmp_path):
    (tmp_path / "t.py").write_text("from bayesncl.settings.config import ConfigError, resolve\n"
                                   "from bayesncl.data import ImageSet\nfrom bayesncl.report.claims import compare\n"
                                   "from bayesncl.settings import config\nfrom bayesncl.api import NCL\n")
    tmp = SRC.parent / "tests" / "_home_probe.py"  # where a test file lies, so its path reads as one
    tmp.write_text((tmp_path / "t.py").read_text())
    try:
        found = homeless_imports([tmp], modules())
    finally:
        tmp.unlink()
    assert [f.split(": ", 1)[1] for f in found] == ["ConfigError from bayesncl.settings.config",
                                                    "compare from bayesncl.report.claims"]


def test_no_module_answers_for_names_it_does_not_define():
    """No module-level __getattr__ (a view computed on access): each name is defined where a reader looks for it.
    The public API alone answers for the names it lists (PUBLIC), and the package's code never imports it."""
    found = [m for m, p in modules().items() if m != PUBLIC
             and any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__" for n in ast.parse(p.read_text()).body)]
    assert not found, found
    users = [m for m, targets in graph().items() if PUBLIC in targets and m not in ("bayesncl", PUBLIC)]
    assert not users, users
