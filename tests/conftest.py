import os
import tempfile

import pytest

from helpers import TINY, processes  # tests/ is on sys.path

# Fork servers that the tests' workflow runs start (bayesncl/cli/forkserver/) exit soon after their last job.
os.environ.setdefault("BAYESNCL_FORKSERVER_IDLE", "10")
# One cache for the synthetic datasets of the whole test session (generated once per parameter set).
os.environ.setdefault("BAYESNCL_CACHE", os.path.join(os.path.dirname(__file__), "..", ".pytest_cache", "bayesncl"))


@pytest.fixture(scope="session", autouse=True)
def _session_procs():
    """The processes that session- and module-scoped fixtures start (processes.current() outside a test)."""
    owner = processes.Processes()
    processes._session = owner
    # Unless the caller names one (CI does, and ends them itself), the session's fork servers get a folder of its
    # own (one per xdist worker, made where the tests run; short: a socket path has at most 107 bytes), ended with
    # the session: none is left behind, and a workflow run in the checkout (whose own folder is named after the
    # checkout) ends no other worker's servers.
    servers = None
    if not os.environ.get("BAYESNCL_FORKSERVER_DIR"):
        servers = os.environ["BAYESNCL_FORKSERVER_DIR"] = tempfile.mkdtemp(prefix="bncl-t", dir="/tmp")
    try:
        yield owner
    finally:
        processes._session = None
        owner.end()
        if servers:
            from bayesncl.cli import forkserver

            forkserver.end_servers(servers)
            del os.environ["BAYESNCL_FORKSERVER_DIR"]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    """`-n auto` (addopts): most tests wait on a subprocess or hold one core, so two workers on one or two cores;
    at most four (each worker collects the whole suite and holds its own torch)."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # xdist's own hook reads it
    return max(2, min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))


# Tests that share an expensive fixture run on one xdist worker (--dist loadgroup), which builds it once: a
# session fixture's users in its group, a module fixture's in their module's. The tiny grid and test_rerun.py's
# grids run Snakemake in the checkout without a fork-server folder, so their servers are the checkout's run
# folder's (ended with each run): they share one group and never run at once.

@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("xdist_group") or not hasattr(item, "_fixtureinfo"):
            continue
        module = getattr(item.module, "__name__", "")
        ours = [d[-1] for d in item._fixtureinfo.name2fixturedefs.values() if d and d[-1].baseid]  # tests/'s own
        if "tiny_grid" in item.fixturenames or module == "test_rerun":
            group = "tiny_grid"
        elif any(d.scope != "function" and d.argname != "_session_procs" for d in ours):
            group = module
        else:
            continue
        item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture(autouse=True)
def procs():
    """The processes the test starts (procs.popen, .run, .fork; helpers reach it as processes.current()), each in
    a session of its own: every process of those sessions is killed when the test ends, passed or failed."""
    owner = processes.Processes()
    processes._current = owner
    try:
        yield owner
    finally:
        processes._current = None
        owner.end()


@pytest.fixture(autouse=True)
def _plugin_environment():
    """A test that loads plugins (bayesncl.settings.plugins.export_env) must not pass them on to the jobs of later
    tests."""
    names = ("BAYESNCL_PLUGINS", "BAYESNCL_PLUGIN_PATH")
    saved = {k: os.environ.get(k) for k in names}
    yield
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture
def tiny_sets():
    """`--set` items for a CPU run of a few seconds."""
    return list(TINY)


@pytest.fixture
def tiny_backbone(monkeypatch):
    """Every method built on helpers.models.TinyBackbone (the training step's structure, cheaply)."""
    import bayesncl.model.methods
    from helpers.models import TinyBackbone

    monkeypatch.setattr(bayesncl.model.methods, "build_backbone", TinyBackbone)


@pytest.fixture(scope="session")
def tiny_grid(tmp_path_factory):
    """`snakemake --cores 2` over config/tiny.yaml into a temp results folder, once per test session: the
    workflow and report tests read the same run (each run of the tiny grid costs minutes on 2 cores).
    Returns (results folder, the snakemake arguments after --cores, the CompletedProcess)."""
    import shutil
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    exe = shutil.which("snakemake", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    if exe is None:
        pytest.skip("snakemake not installed (pip install -e '.[workflow]')")
    out = tmp_path_factory.mktemp("tiny_grid") / "results"
    args = ("--configfile", "config/tiny.yaml", "--config", f"results={out}")
    env = dict(os.environ, PYTHONPATH=str(root / "src"), OMP_NUM_THREADS="1")
    env.pop("BAYESNCL_FORKSERVER_DIR", None)  # the run's servers in a folder of its own, ended with it
    # --nolock: other workers run Snakemake in the checkout at once (own temp outputs); its lock files race
    r = processes.current().run([exe, "--cores", "2", "--nolock", *args], cwd=root, env=env, capture_output=True, text=True,
                                timeout=4 * processes.PATIENCE)
    assert r.returncode == 0, (r.stdout + r.stderr)[-5000:]
    return out, args, r
