"""Run workflows through the Snakemake SLURM executor on a real one-node cluster.

Each test starts its own cluster (tests/slurm/local_cluster.sh via
tests/slurm/run_workflow.sh) and checks afterwards that none of the daemons it
started is still alive. Selected with `pytest -m slurm`; needs root (apt
packages, munge user, daemons).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "tests" / "slurm"
RUN = SCRIPTS / "run_workflow.sh"
CLUSTER = SCRIPTS / "local_cluster.sh"
# Whole-test limit; snakemake itself gets SLURM_TEST_TIMEOUT (run_workflow.sh).
TEST_TIMEOUT = int(os.environ.get("SLURM_PYTEST_TIMEOUT", "280"))


def _snakemake() -> str | None:
    cand = Path(sys.executable).with_name("snakemake")
    return str(cand) if cand.exists() else shutil.which("snakemake")


@pytest.fixture(autouse=True)
def _requirements():
    if os.geteuid() != 0:
        pytest.skip("needs root: installs SLURM packages and starts munged/slurmctld/slurmd")
    if _snakemake() is None:
        pytest.skip("snakemake not installed (pip install -e '.[workflow]')")
    try:
        import snakemake_executor_plugin_slurm  # noqa: F401
    except ImportError:
        pytest.skip("snakemake-executor-plugin-slurm not installed")


def _alive(name: str, pid: int) -> bool:
    """True if pid still runs the named daemon (zombies and recycled PIDs count as dead)."""
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return comm.startswith(name) and stat.rsplit(")", 1)[1].split()[0] != "Z"


def _recorded_pids(state: Path) -> list[tuple[str, int]]:
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
    started = _recorded_pids(state)
    left = [(n, p) for n, p in started if _alive(n, p)]
    # Safety net only: the script itself must have stopped them.
    subprocess.run(["bash", str(CLUSTER), "stop", str(state)], timeout=120, check=False)
    assert {n for n, _ in started} >= {"munged", "slurmctld", "slurmd"}, f"daemons not recorded: {started}"
    assert not left, f"daemons still alive after run_workflow.sh exited: {left}"


def run_workflow(state: Path, *args: str, timeout: int = TEST_TIMEOUT) -> tuple[int, str]:
    """Run run_workflow.sh; return (exit status, combined output). Prints the output and timing."""
    env = dict(os.environ, SNAKEMAKE=_snakemake(), PYTHONUNBUFFERED="1")
    cmd = ["bash", str(RUN), "--state", str(state), *args]
    t0 = time.monotonic()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
        start_new_session=True, stdin=subprocess.DEVNULL,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        # TERM lets the script's trap cancel jobs and stop the daemons.
        proc.send_signal(signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
        out += f"\n[test] run_workflow.sh killed after {timeout}s\n"
    dt = time.monotonic() - t0
    print(out)
    print(f"[timing] run_workflow.sh {' '.join(args)}: {dt:.1f}s, exit {proc.returncode}")
    return proc.returncode, out


def _tail(text: str, n: int = 150) -> str:
    return "\n".join(text.splitlines()[-n:])


# A profile with the kind of cluster-specific settings a real one has; the
# script must override them for the local node.
PROFILE = """\
executor: slurm
jobs: 4
latency-wait: 10
printshellcmds: true
default-resources:
  - slurm_partition=gpu-a100
  - slurm_account=nosuchaccount
  - mem_mb=64000
  - runtime=30
set-resources:
  - second:gpu=1
  - second:cpus_per_task=16
"""

TWO_RULES = """\
localrules: all

rule all:
    input: "out/second.txt"

rule first:
    output: "out/first.txt"
    threads: 8
    shell: "echo first job=$SLURM_JOB_ID host=$(hostname -s) > {output}"

rule second:
    input: "out/first.txt"
    output: "out/second.txt"
    resources: mem_mb=500000
    shell: "cat {input} > {output}; echo second job=$SLURM_JOB_ID >> {output}"
"""

# The marker is computed when the job runs, so it cannot come from Snakemake
# echoing the shell command: seeing it proves the job log was printed.
# `ok` finishes alongside `boom` only to save time: a status check that sees a
# job succeed resets the plugin's polling interval, which Snakemake otherwise
# sleeps out (~25 s) before exiting.
FAILING = """\
localrules: all

rule all:
    input: "out/never.txt", "out/ok.txt"

rule ok:
    output: "out/ok.txt"
    shell: "touch {output}"

rule boom:
    output: "out/never.txt"
    log: "logs/boom.log"
    shell: "echo job-log-marker-$((6*7)) >&2; echo rule-log-marker-$((7*7)) > {log}; exit 3"
"""


def _workflow(tmp_path: Path, snakefile: str) -> Path:
    wd = tmp_path / "wf"
    (wd / "profile").mkdir(parents=True)
    (wd / "Snakefile").write_text(textwrap.dedent(snakefile))
    (wd / "profile" / "config.yaml").write_text(PROFILE)
    return wd


@pytest.mark.skipif(not os.environ.get("SLURM_HARNESS_SELFTEST"),
                    reason="harness self-test (foreign profile keys overridden); the real tiny workflow covers "
                           "dependent SLURM jobs within the 5-minute budget. Set SLURM_HARNESS_SELFTEST=1 to run")
def test_two_dependent_rules_run_as_slurm_jobs(tmp_path, cluster_state):
    wd = _workflow(tmp_path, TWO_RULES)
    rc, out = run_workflow(cluster_state, "--profile", str(wd / "profile"), "--directory", str(wd), "all")
    assert rc == 0, _tail(out)
    assert out.count("has been submitted with SLURM jobid") == 2, _tail(out)
    lines = (wd / "out" / "second.txt").read_text().split("\n")
    first_id = lines[0].split("job=")[1].split()[0]
    second_id = lines[1].split("job=")[1]
    assert first_id.isdigit() and second_id.isdigit() and first_id != second_id, lines


def test_failing_rule_fails_run_and_shows_job_log(tmp_path, cluster_state):
    wd = _workflow(tmp_path, FAILING)
    rc, out = run_workflow(cluster_state, "--profile", str(wd / "profile"), "--directory", str(wd), "all")
    assert rc != 0, _tail(out)
    assert rc != 124, "snakemake timed out instead of noticing the failed job:\n" + _tail(out)
    assert "===== SLURM job logs (1) =====" in out, _tail(out)
    assert "job-log-marker-42" in out.split("===== SLURM job logs")[1], _tail(out)
    # The rule's own log: file (where real rules send their output) is printed too.
    assert "rule-log-marker-49" in out, _tail(out)


def test_real_tiny_workflow(tmp_path, cluster_state):
    """The project's own workflow, tiny config, through profiles/slurm, from the repo root.

    Outputs go to a temp dir (config key `results`), so old results in the
    tree neither make the run a no-op nor get overwritten.
    """
    results = tmp_path / "results"
    rc, out = run_workflow(
        cluster_state, "--timeout", "420", "--profile", str(REPO / "profiles" / "slurm"),
        "--configfile", str(REPO / "config" / "tiny.yaml"),
        "--directory", str(REPO), "all", "--config", f"results={results}", timeout=480,
    )
    assert rc == 0, _tail(out)
    # Every pretrain and evaluate job went through SLURM; summarize and report are local rules.
    import yaml

    from bayesncl.grid import expand_grid

    runs = expand_grid(yaml.safe_load((REPO / "config" / "tiny.yaml").read_text()))
    assert out.count("has been submitted with SLURM jobid") == 2 * len(runs), _tail(out)
    for rid in runs:
        metrics = json.loads((results / "runs" / rid / "eval" / "metrics.json").read_text())
        assert metrics["run"]["method"] == runs[rid].config["method"]["name"]
    for i in range(1, 8):
        assert (results / "tables" / f"table{i}.tex").stat().st_size > 0
    for name in ("figure3", "figure4a", "figure4b"):
        assert (results / "figures" / f"{name}.pdf").stat().st_size > 0
