"""workflow/scripts/controller.sbatch, the grid's controller, run as SLURM would run it (a copy of the script, in the
submit folder) with stand-ins for `sbatch` and `snakemake` on PATH: Snakemake gets the arguments; near the time limit
(USR1) the successor is submitted after this job and Snakemake is stopped with SIGINT (it then cancels its jobs);
its exit status is the controller's. Each runs in a session of its own (conftest's `procs`), so the script and the
stand-in's loop end with the test, passed or failed; the controller gets SIGUSR1 and Snakemake SIGINT at their
default dispositions, also where the test run was started with SIGINT ignored."""

import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from helpers.processes import PATIENCE, wait_until

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "workflow" / "scripts" / "controller.sbatch"

FAKE_SNAKEMAKE = """#!/bin/bash
echo "$@" > "$LOG/snakemake.args"
trap 'echo INT > "$LOG/snakemake.signal"; exit 130' INT
trap 'echo TERM > "$LOG/snakemake.signal"; exit 143' TERM
[ -n "${EXIT_AT_ONCE:-}" ] && exit "$EXIT_AT_ONCE"
while true; do sleep 0.1; done
"""
FAKE_SBATCH = """#!/bin/bash
echo "$@" > "$LOG/sbatch.args"
echo "Submitted batch job 43"
"""


@pytest.fixture
def submit(tmp_path):
    """A submit folder laid out as the repository root, and PATH with the stand-ins first."""
    repo = tmp_path / "repo"
    (repo / "workflow" / "scripts").mkdir(parents=True)
    shutil.copy(SCRIPT, repo / "workflow" / "scripts" / "controller.sbatch")
    (repo / "Snakefile").write_text("")
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    for name, text in (("snakemake", FAKE_SNAKEMAKE), ("sbatch", FAKE_SBATCH)):
        (bin_ / name).write_text(text)
        (bin_ / name).chmod(0o755)
    spool = tmp_path / "spool" / "slurm_script"  # SLURM runs a copy elsewhere
    spool.parent.mkdir()
    shutil.copy(SCRIPT, spool)
    env = dict(os.environ, PATH=f"{bin_}{os.pathsep}{os.environ['PATH']}", LOG=str(tmp_path),
               SLURM_SUBMIT_DIR=str(repo), SLURM_JOB_ID="42")
    env.pop("BAYESNCL_VENV", None)
    return spool, env, tmp_path


def test_near_the_limit_it_submits_its_successor_and_stops_snakemake_with_sigint(submit, procs):
    spool, env, log = submit
    p = procs.popen(["bash", str(spool), "all", "--config", "smoke=true"], cwd=log, env=env,
                    stderr=subprocess.PIPE, text=True, signals=True)
    args = wait_until(lambda: (log / "snakemake.args").exists() and (log / "snakemake.args").read_text(),
                      "the stand-in snakemake started", p)
    assert args.split() == ["--profile", "slurm", "all", "--config", "smoke=true"]
    p.send_signal(signal.SIGUSR1)  # what #SBATCH --signal=B:USR1@600 sends
    assert p.wait(timeout=PATIENCE) == 130
    assert (log / "sbatch.args").read_text().split() == [
        "--dependency=afterany:42", "--export=ALL", "workflow/scripts/controller.sbatch", "all", "--config",
        "smoke=true"]
    assert (log / "snakemake.signal").read_text().strip() == "INT"
    assert "snakemake exited with 130" in p.stderr.read()


def test_a_finished_grid_submits_nothing_and_keeps_snakemake_s_status(submit, procs):
    spool, env, log = submit
    for code in ("0", "1"):
        r = procs.run(["bash", str(spool), "all"], cwd=log, env={**env, "EXIT_AT_ONCE": code},
                      capture_output=True, text=True)
        assert r.returncode == int(code) and not (log / "sbatch.args").exists()


def test_outside_the_repository_or_without_snakemake_it_says_so(submit, tmp_path, procs):
    spool, env, log = submit
    r = procs.run(["bash", str(spool), "all"], env={**env, "SLURM_SUBMIT_DIR": str(tmp_path)},
                  capture_output=True, text=True)
    assert r.returncode == 2 and "repository root" in r.stderr
    r = procs.run(["bash", str(spool), "all"], env={**env, "PATH": "/usr/bin:/bin"}, capture_output=True, text=True)
    assert r.returncode == 2 and "no snakemake on PATH" in r.stderr


def test_its_sbatch_lines_ask_for_the_warning_signal_and_a_cpu_partition():
    lines = [line.split(None, 1)[1] for line in SCRIPT.read_text().splitlines() if line.startswith("#SBATCH")]
    assert "--signal=B:USR1@600" in lines and "--job-name=bayesncl-controller" in lines
    assert not any("gpu" in line.lower() for line in lines)
