"""Runs of the workflow through the Snakemake SLURM executor on a real one-node cluster (tests/slurm/): each test's
own cluster (`cluster_state`: no daemon it started may outlive it), `run_workflow`, and the autouse requirement
check (root, snakemake, the SLURM executor plugin) its test files import."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "tests" / "slurm"
RUN = SCRIPTS / "run_workflow.sh"
CLUSTER = SCRIPTS / "local_cluster.sh"
# Whole-test limit; snakemake itself gets SLURM_TEST_TIMEOUT (run_workflow.sh).
TEST_TIMEOUT = int(os.environ.get("SLURM_PYTEST_TIMEOUT", "280"))


def snakemake_exe() -> str | None:
    cand = Path(sys.executable).with_name("snakemake")
    return str(cand) if cand.exists() else shutil.which("snakemake")


@pytest.fixture(autouse=True)
def slurm_requirements():
    if os.geteuid() != 0:
        pytest.skip("needs root: installs SLURM packages and starts munged/slurmctld/slurmd")
    if snakemake_exe() is None:
        pytest.skip("snakemake not installed (pip install -e '.[workflow]')")
    try:
        import snakemake_executor_plugin_slurm  # noqa: F401
    except ImportError:
        pytest.skip("snakemake-executor-plugin-slurm not installed")


def alive(name: str, pid: int) -> bool:
    """True if pid still runs the named daemon (zombies and recycled PIDs count as dead)."""
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return comm.startswith(name) and stat.rsplit(")", 1)[1].split()[0] != "Z"


def recorded_pids(state: Path) -> list[tuple[str, int]]:
    for f in (state / "pids", state / "pids.stopped"):
        if f.exists():
            return [(n, int(p)) for n, p in (line.split() for line in f.read_text().splitlines() if line.strip())]
    return []


@pytest.fixture
def cluster_state(tmp_path):
    """Cluster dir for run_workflow.sh; after the test, no daemon it started may be alive."""
    state = tmp_path / "cluster"
    yield state
    if not state.exists():  # skipped before the script ran
        return
    started = recorded_pids(state)
    left = [(n, p) for n, p in started if alive(n, p)]
    # Safety net only: the script itself must have stopped them.
    subprocess.run(["bash", str(CLUSTER), "stop", str(state)], timeout=120, check=False)
    assert {n for n, _ in started} >= {"munged", "slurmctld", "slurmd"}, f"daemons not recorded: {started}"
    assert not left, f"daemons still alive after run_workflow.sh exited: {left}"


def run_workflow(state: Path, *snakemake_args: str, directory: Path = REPO, limit: int | None = None,
                 timeout: int = TEST_TIMEOUT) -> tuple[int, str]:
    """`snakemake SNAKEMAKE_ARGS` from `directory` on a fresh local cluster (run_workflow.sh);
    return (exit status, combined output). `limit`: snakemake's own time limit. Prints output and timing.

    A SIGTERM to this process (a CI timeout) is passed on to run_workflow.sh, whose traps stop
    snakemake and the daemons; this process then terminates as asked. (If this process dies without
    that chance, e.g. SIGKILL, the script's watchdog does the same.)
    """
    env = dict(os.environ, SNAKEMAKE=snakemake_exe(), PYTHONUNBUFFERED="1")
    cmd = ["bash", str(RUN), "--state", str(state), "--directory", str(directory)]
    if limit is not None:
        cmd += ["--timeout", str(limit)]
    cmd += ["--", *snakemake_args]
    t0 = time.monotonic()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
        start_new_session=True, stdin=subprocess.DEVNULL,
    )

    class Terminated(Exception):
        pass

    def on_term(signum, frame):
        raise Terminated

    previous = signal.signal(signal.SIGTERM, on_term)
    terminated = False
    try:
        out, _ = proc.communicate(timeout=timeout)
    except (subprocess.TimeoutExpired, Terminated) as stop:
        terminated = isinstance(stop, Terminated)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one clean-up at a time
        # TERM lets the script's trap cancel jobs and stop the daemons.
        proc.send_signal(signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
        out += f"\n[test] run_workflow.sh stopped: {'SIGTERM to the test' if terminated else f'after {timeout}s'}\n"
    finally:
        signal.signal(signal.SIGTERM, previous)
    dt = time.monotonic() - t0
    print(out)
    print(f"[timing] run_workflow.sh {' '.join(snakemake_args)}: {dt:.1f}s, exit {proc.returncode}")
    if terminated:  # cleaned up; now end as the sender asked
        sys.stdout.flush()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
    return proc.returncode, out


def tail(text: str, n: int = 150) -> str:
    return "\n".join(text.splitlines()[-n:])
