"""Plugins: modules that register methods and datasets (bayesncl.settings.registry), named in the workflow config.

`plugins: [my_method]` in the workflow config: the module `my_method` is imported from the folder of the workflow
config (my_method.py there) or from the installed packages, in every process of the run: Snakemake's (which
validates the grid), and each job's (`bayesncl` reads $BAYESNCL_PLUGINS and $BAYESNCL_PLUGIN_PATH, which the
workflow sets). By hand, `bayesncl COMMAND --plugin my_method.py` (any command; repeatable) or
`BAYESNCL_PLUGINS=my_method.py`: a module's file, imported from its folder, or a module's name, looked for in the
folders of $BAYESNCL_PLUGIN_PATH and among the installed packages (`load_given`). What each run used is recorded:
the module's name, its file and the file's SHA-256 (`loaded`), in the report's provenance. What identifies a
plugin's code in its runs' records and rerun triggers is `code_identity`.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
from pathlib import Path

from ..core.errors import ConfigError

__all__ = ["ENV", "PATH_ENV", "code_identity", "export_env", "how_to_load", "load", "load_from_env", "load_given",
           "load_grid", "loaded"]

ENV = "BAYESNCL_PLUGINS"  # module names or their .py files, comma-separated
PATH_ENV = "BAYESNCL_PLUGIN_PATH"  # folders searched first, os.pathsep-separated
FLAG = "--plugin"  # every command's (bayesncl.cli.main): a module's file or name, repeatable


def how_to_load(kind: str) -> str:
    """How a plugin's method or dataset (`kind`) is made known, for the line that refuses an unknown name."""
    return (f"a plugin's {kind}: name its module with {FLAG} FILE.py (or ${ENV}) by hand, or in the workflow "
            "config's plugins: list; `bayesncl list` shows what is loaded")

_LOADED: dict[str, dict] = {}


def _sha(path: str | None) -> str:
    if not path or not os.path.isfile(path):
        return ""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def code_identity(module: str, version="") -> str:
    """A plugin entry's code as its runs record it and their rerun triggers hold it: "version V" where the entry
    declares one (an edit then reruns nothing until the version changes), else "sha256 <hex>" of its module's
    source less its settings' declarations (`source_digest`: any other edit reruns its runs; a declared default
    reaches each run through its config, so a changed default reruns only the runs that take it)."""
    if version not in ("", None):
        return f"version {version}"
    file = getattr(sys.modules.get(module), "__file__", None)
    digest = source_digest(file) if file and os.path.isfile(file) else ""
    return f"sha256 {digest}" if digest else f"module {module} (no file)"


_DIGESTS: dict[tuple, str] = {}


def source_digest(file: str) -> str:
    """SHA-256 of a Python file with each call of `setting(...)` or `Setting(...)` (a declaration of a setting,
    bayesncl.settings.registry) cut out; the file's plain SHA-256 where it does not parse. Cut by the syntax tree's
    positions in the file's bytes, so the same file digests alike under every Python version."""
    import ast

    st = os.stat(file)
    key = (file, st.st_mtime_ns, st.st_size)
    if key not in _DIGESTS:
        data = Path(file).read_bytes()
        try:
            tree = ast.parse(data)
        except (SyntaxError, ValueError):
            tree = None
        starts = [0] + [i + 1 for i, b in enumerate(data) if b == 10]  # byte offset of each line (ast: 1-based)
        spans = sorted((starts[n.lineno - 1] + n.col_offset, starts[n.end_lineno - 1] + n.end_col_offset)
                       for n in (ast.walk(tree) if tree else ()) if isinstance(n, ast.Call)
                       and getattr(n.func, "attr", getattr(n.func, "id", None)) in ("setting", "Setting"))
        kept, at = [], 0
        for a, b in spans:
            if a >= at:  # a call inside a cut one is cut with it
                kept.append(data[at:a])
                at = b
        _DIGESTS[key] = hashlib.sha256(b"setting()".join([*kept, data[at:]])).hexdigest()
    return _DIGESTS[key]


def load(names, search=(), where: str = "plugins") -> list[dict]:
    """Import each module of `names`, looking in the folders `search` first; [{module, file, sha256}]."""
    if isinstance(names, str) or not all(isinstance(n, str) and n for n in names):
        raise ConfigError(f"{where}: expected a list of module names, e.g. [my_method], got {names!r}")
    for folder in reversed([str(Path(f).resolve()) for f in search if f]):
        if folder not in sys.path:
            sys.path.insert(0, folder)
    out = []
    for name in names:
        if name not in _LOADED:
            try:
                module = importlib.import_module(name)
            except ModuleNotFoundError as e:
                if e.name != name and not name.startswith(f"{e.name}."):
                    raise ConfigError(f"{where}: plugin {name!r} imports {e.name!r}, which is not installed") from None
                looked = ", ".join(str(Path(f).resolve()) for f in search if f) or "no folder"
                fix = ("put it beside the workflow config or install it" if where == "plugins" else
                       f"give its file ({FLAG} path/to/{name}.py), add its folder to ${PATH_ENV}, or install it")
                raise ConfigError(f"{where}: no plugin module {name!r} (looked for {name}.py in {looked} and among "
                                  f"the installed packages); {fix}") from None
            except ConfigError as e:
                raise ConfigError(f"{where}: plugin {name!r}: {e}") from None
            except (Exception, SystemExit) as e:  # noqa: BLE001 - the plugin's own failure: one line naming it
                raise ConfigError(_failed(name, e, where)) from None
            file = getattr(module, "__file__", None)
            _LOADED[name] = {"module": name, "file": str(file or ""), "sha256": _sha(file)}
        out.append(_LOADED[name])
    return out


def _failed(name: str, e: BaseException, where: str) -> str:
    """One line for a plugin that failed while imported: its file (and line) and what it raised or exited with."""
    import traceback

    try:
        spec = importlib.util.find_spec(name)
        file = spec.origin if spec is not None else None
    except (Exception, SystemExit):  # noqa: BLE001 - a package whose __init__ failed: name the module only
        file = None
    line = None
    if isinstance(e, SyntaxError) and e.filename:
        file, line = e.filename, e.lineno
    elif file:  # the deepest frame in the plugin's own file
        line = next((f.lineno for f in reversed(traceback.extract_tb(e.__traceback__)) if f.filename == file), None)
    at = f" ({file}{f', line {line}' if line else ''})" if file else ""
    if isinstance(e, SystemExit):
        what = f"called sys.exit({e.code!r}) while imported"
    else:
        text = (e.msg if isinstance(e, SyntaxError) else str(e)).strip().splitlines()
        what = f"raised {type(e).__name__}{': ' + text[0] if text else ''} while imported"
    return f"{where}: plugin {name!r}{at} {what}; fix the plugin or remove it from the workflow config's plugins"


def _modules(items, where: str) -> tuple[list[str], list[str]]:
    """(module names, the folders of those given as files) of plugins named by hand: a module's .py file, or its
    name."""
    names, folders = [], []
    for item in items:
        if item.endswith(".py") or os.sep in item:
            path = Path(item).expanduser()
            if not path.is_file():
                raise ConfigError(f"{where} {item}: no such file; give a plugin module's .py file, or its module "
                                  f"name (found in ${PATH_ENV}'s folders or among the installed packages)")
            names.append(path.stem)
            folders.append(str(path.resolve().parent))
        else:
            names.append(item)
    return names, folders


def load_from_env() -> list[dict]:
    """The plugins a job's environment names (set by the workflow for every job, or by hand)."""
    items = [n.strip() for n in os.environ.get(ENV, "").split(",") if n.strip()]
    names, folders = _modules(items, f"${ENV}")
    search = [*folders, *(p for p in os.environ.get(PATH_ENV, "").split(os.pathsep) if p)]
    return load(names, search, where=f"${ENV}") if names else []


def load_given(items) -> list[dict]:
    """The plugins named on the command line (--plugin), imported and named in this process's environment, so that
    every process it starts imports them too."""
    names, folders = _modules(items, FLAG)
    if not names:
        return []
    search = [*folders, *(p for p in os.environ.get(PATH_ENV, "").split(os.pathsep) if p)]
    out = load(names, search, where=FLAG)
    export_env(names, folders)
    return out


def load_grid(wf: dict, search=()) -> list[dict]:
    """The workflow config's `plugins`, and the environment's."""
    env = load_from_env()
    names = wf.get("plugins") or []
    search = [*search, *(p for p in os.environ.get(PATH_ENV, "").split(os.pathsep) if p)]
    return env + [p for p in load(names, search) if p not in env]


def export_env(names, search) -> None:
    """Name the plugins in this process's environment, so every job it starts imports them too (nothing when
    there are none: a grid without plugins leaves the environment as it was)."""
    if not names:
        return
    names = [n for n in dict.fromkeys([*os.environ.get(ENV, "").split(","), *names]) if n]
    if names:
        os.environ[ENV] = ",".join(names)
    paths = [p for p in dict.fromkeys([*(str(Path(s).resolve()) for s in search),
                                        *os.environ.get(PATH_ENV, "").split(os.pathsep)]) if p]
    if paths:
        os.environ[PATH_ENV] = os.pathsep.join(paths)


def loaded() -> list[dict]:
    """Every plugin this process imported: {module, file, sha256}."""
    return list(_LOADED.values())
