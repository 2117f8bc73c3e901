import os

import pytest

from helpers import TINY, processes  # tests/ is on sys.path

# Fork servers that the tests' workflow runs start (bayesncl/forkserver/) exit soon after their last job.
os.environ.setdefault("BAYESNCL_FORKSERVER_IDLE", "10")
# One cache for the synthetic datasets of the whole test session (generated once per parameter set).
os.environ.setdefault("BAYESNCL_CACHE", os.path.join(os.path.dirname(__file__), "..", ".pytest_cache", "bayesncl"))


@pytest.fixture(scope="session", autouse=True)
def _session_procs():
    """The processes that session- and module-scoped fixtures start (processes.current() outside a test)."""
    owner = processes.Processes()
    processes._session = owner
    try:
        yield owner
    finally:
        processes._session = None
        owner.end()


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
    """A test that loads plugins (bayesncl.plugins.export_env) must not pass them on to the jobs of later tests."""
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
    import bayesncl.methods
    from helpers.models import TinyBackbone

    monkeypatch.setattr(bayesncl.methods, "build_backbone", TinyBackbone)


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
    r = processes.current().run([exe, "--cores", "2", *args], cwd=root, env=env, capture_output=True, text=True,
                                timeout=4 * processes.PATIENCE)
    assert r.returncode == 0, (r.stdout + r.stderr)[-5000:]
    return out, args, r
