"""Run workflows through the Snakemake SLURM executor on a real one-node cluster.

Each test starts its own cluster (tests/slurm/local_cluster.sh via
tests/slurm/run_workflow.sh) and checks afterwards that none of the daemons it
started is still alive, also when the test process itself is terminated from
outside. Selected with `pytest -m slurm`; needs root (apt packages, munge user,
daemons).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from helpers.slurm import (CLUSTER, REPO, RUN, SCRIPTS, TEST_TIMEOUT, alive, cluster_state,  # noqa: F401 - fixtures
                           recorded_pids, run_workflow, slurm_requirements, snakemake_exe, tail)

pytestmark = pytest.mark.slurm

# The tiny grid's limit for snakemake (a slow or shared machine needs more).
TINY_LIMIT = int(os.environ.get("SLURM_TINY_LIMIT", "600"))


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
    rc, out = run_workflow(cluster_state, "--profile", str(wd / "profile"), "all", directory=wd)
    assert rc == 0, tail(out)
    assert out.count("has been submitted with SLURM jobid") == 2, tail(out)
    lines = (wd / "out" / "second.txt").read_text().split("\n")
    first_id = lines[0].split("job=")[1].split()[0]
    second_id = lines[1].split("job=")[1]
    assert first_id.isdigit() and second_id.isdigit() and first_id != second_id, lines


def test_failing_rule_fails_run_and_shows_job_log(tmp_path, cluster_state):
    wd = _workflow(tmp_path, FAILING)
    rc, out = run_workflow(cluster_state, "--profile", str(wd / "profile"), "all", directory=wd)
    assert rc != 0, tail(out)
    assert rc != 124, "snakemake timed out instead of noticing the failed job:\n" + tail(out)
    assert "===== SLURM job logs (1) =====" in out, tail(out)
    assert "job-log-marker-42" in out.split("===== SLURM job logs")[1], tail(out)
    # The rule's own log: file (where real rules send their output) is printed too.
    assert "rule-log-marker-49" in out, tail(out)


class KillSection(threading.Thread):
    """Kills (SIGKILL) the process of one evaluation section of one run, the first time it runs, and records
    which sections of that run had ended by then."""

    def __init__(self, eval_dir: Path, section: str):
        super().__init__(daemon=True)
        self.eval_dir, self.section = str(eval_dir), section
        self.stop, self.killed, self.ended_before = threading.Event(), None, None

    def _find(self) -> int | None:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                argv = [a.decode(errors="replace") for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")]
            except OSError:
                continue
            # `bayesncl evaluate ... --out EVAL --only SECTION` itself (not the shell or srun around it)
            if "evaluate" in argv and "--only" in argv and self.section in argv and self.eval_dir in argv:
                return int(pid)
        return None

    def run(self):
        while not self.stop.is_set():
            pid = self._find()
            if pid is not None:
                self.ended_before = sorted(p.stem for p in Path(self.eval_dir).glob("*.json"))
                os.kill(pid, signal.SIGKILL)
                self.killed = pid
                return
            time.sleep(0.05)


def _minutes(limit: str) -> int:
    """A SLURM time limit (minutes, [D-]HH:MM:SS or MM:SS) in minutes."""
    if limit.isdigit():
        return int(limit)
    days, _, clock = limit.rpartition("-")
    parts = [int(x) for x in clock.split(":")]
    h, m, sec = ([0] * (3 - len(parts)) + parts)
    return (int(days or 0) * 24 + h) * 60 + m + (sec > 0)


def test_real_tiny_workflow(tmp_path, cluster_state):
    """The README's command, `snakemake --profile slurm all`, from the repository root.

    Added after it, unavoidably: the tiny grid (`--configfile config/tiny.yaml`; the paper grid needs the
    datasets, GPUs and days) writing to a temp dir (`--config results=...`, so old results in the tree
    neither make the run a no-op nor get overwritten), and run_workflow.sh's overrides for the one-node
    cluster (its partition, no account, no GPU, memory it has, squeue status checks).

    Two submissions per run that trains (pretraining, then the run's evaluation group), one per untrained twin (its
    initialisation inside its evaluation group), one for the atlas: counted by the cluster itself (its job
    completion log). One evaluation section is killed mid-run: its submission is
    retried, that section runs again and the sections that had ended are restored, not run again; nothing is
    retrained.
    """
    import yaml

    from bayesncl.grid.expand import evaluation_sections, expand_grid

    results = tmp_path / "results"
    runs = expand_grid(yaml.safe_load((REPO / "config" / "tiny.yaml").read_text()))
    trained = [rid for rid, run in runs.items() if run.config["train"]["epochs"]]
    sections = {rid: evaluation_sections(run) for rid, run in runs.items()}
    victim = max(runs, key=lambda rid: (len(sections[rid]), rid))
    killer = KillSection(results / "runs" / victim / "eval", "linear_probe")
    killer.start()
    try:
        rc, out = run_workflow(
            cluster_state, "--profile", "slurm", "all",
            "--configfile", "config/tiny.yaml", "--config", f"results={results}",
            directory=REPO, limit=TINY_LIMIT, timeout=TINY_LIMIT + 60,
        )
    finally:
        killer.stop.set()
    argv = (cluster_state / "snakemake.argv").read_text().splitlines()
    assert argv[:4] == ["snakemake", "--profile", "slurm", "all"], argv
    assert rc == 0, tail(out)
    assert killer.killed is not None, "the linear_probe section of " + victim + " never ran"

    # What Snakemake submitted: pretrain jobs of the runs that train, the atlas, and one group per run (the
    # victim's twice).
    submitted = re.findall(r"has been submitted with SLURM jobid (\d+) \(log: (\S+?)\)", out)
    kinds: dict[str, list[str]] = {}
    for jobid, log in submitted:  # logs: .../rule_<rule>/... or .../group_eval_<run>_<its sections>/<id>.log
        group = [rid for rid in runs if f"/group_eval_{rid}_" in log]
        m = re.search(r"/rule_(\w+)/", log)
        assert group or m, log
        kinds.setdefault(f"eval {max(group, key=len)}" if group else m.group(1), []).append(jobid)
    assert len(kinds["pretrain"]) == len(trained), kinds  # nothing retrained
    assert len(kinds["atlas"]) == 1
    for rid in runs:
        assert len(kinds[f"eval {rid}"]) == (2 if rid == victim else 1), (rid, kinds)
    expected = len(trained) + len(runs) + 1 + 1  # pretraining, evaluation per run, the atlas, the retry
    assert sum(map(len, kinds.values())) == expected, kinds

    # What the cluster ran: its job completion log, one line per job.
    lines = (cluster_state / "log" / "jobcomp.txt").read_text().splitlines()
    jobs = {m.group(1): line for line in lines if (m := re.search(r"\bJobId=(\d+)", line))}
    assert set(jobs) == {j for ids in kinds.values() for j in ids}, (sorted(jobs), kinds)
    first, retry = kinds[f"eval {victim}"]
    assert "JobState=FAILED" in jobs[first] and "JobState=COMPLETED" in jobs[retry], (jobs[first], jobs[retry])
    # The sections of a submission run in series: it asks for one request shared among them
    # (bayesncl.planning.time_requests, at least FLOOR_MIN, learned from the jobs that had ended by then); the retry is
    # attempt 2: twice what the first attempt asked.
    from bayesncl.planning.time_requests import FLOOR_MIN

    limit = re.search(r"\bTimeLimit=(\S+)", jobs[retry]).group(1)
    first_limit = re.search(r"\bTimeLimit=(\S+)", jobs[first]).group(1)
    assert _minutes(first_limit) >= FLOOR_MIN and _minutes(limit) == 2 * _minutes(first_limit), (jobs[first],
                                                                                                jobs[retry])

    # The retry ran the killed section alone: the ones that had ended were restored.
    eval_dir = results / "runs" / victim / "eval"
    assert "features" in killer.ended_before and "linear_probe" not in killer.ended_before
    for name in killer.ended_before:
        assert "restored from attempt 1" in (eval_dir / f"{name}.log").read_text(), name
    assert "restored" not in (eval_dir / "linear_probe.log").read_text()
    for rid in runs:
        for name in sections[rid]:
            written = json.loads((results / "runs" / rid / "eval" / f"{name}.json").read_text())
            assert written["run"]["method"] == runs[rid].config["method"]["name"], (rid, name)
    for i in range(1, 8):
        assert (results / "tables" / f"table{i}.tex").stat().st_size > 0
    for name in ("figure3", "figure4a", "figure4b"):
        assert (results / "figures" / f"{name}.pdf").stat().st_size > 0
    jobs_csv = (results / "summary" / "jobs.csv").read_text()
    assert jobs_csv.count("\npretrain,") == len(runs)


# One job that runs until it is cancelled; it records the PID of its payload.
SLEEPER = """\
localrules: all

rule all:
    input: "out/never.txt"

rule sleeper:
    output: "out/never.txt"
    shell: "echo $$ > out/job.pid; exec sleep 600"
"""
KILL_STATE = "SLURM_KILL_TEST_STATE"


@pytest.mark.skipif(not os.environ.get(KILL_STATE), reason="started by test_killed_test_leaves_no_daemons")
def test_inner_run_until_killed():
    state = Path(os.environ[KILL_STATE])
    run_workflow(state, "--profile", str(state.parent / "wf" / "profile"), "all", directory=state.parent / "wf",
                 limit=600, timeout=600)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_killed_test_leaves_no_daemons(tmp_path, sig):
    """A pytest killed from outside mid-run (a CI timeout) leaves no daemon or job behind.

    SIGTERM: the test passes it on to run_workflow.sh and waits for its clean-up. SIGKILL: nothing
    runs in the test process, so run_workflow.sh's watchdog has to notice and clean up.
    """
    wd = _workflow(tmp_path, SLEEPER)
    state = tmp_path / "cluster"
    job_pid_file = wd / "out" / "job.pid"
    inner = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-s", "-m", "slurm", "-p", "no:cacheprovider",
         f"{Path(__file__)}::test_inner_run_until_killed"],
        cwd=REPO, env=dict(os.environ, **{KILL_STATE: str(state)}), stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 150
        while not job_pid_file.exists() or not job_pid_file.read_text().strip():
            assert inner.poll() is None, f"inner pytest exited {inner.returncode} before its job ran"
            assert time.monotonic() < deadline, "the SLURM job did not start within 150 s"
            time.sleep(0.5)
        job = int(job_pid_file.read_text())
        started = recorded_pids(state)
        assert {n for n, _ in started} == {"munged", "slurmctld", "slurmd"} and alive("sleep", job), started
        t0 = time.monotonic()
        inner.send_signal(sig)
        inner.wait(timeout=120)
        left: list = []
        while time.monotonic() - t0 < 90:
            left = [(n, p) for n, p in [*started, ("sleep", job)] if alive(n, p)]
            if not left:
                break
            time.sleep(0.5)
        print(f"[timing] {sig.name}: everything gone after {time.monotonic() - t0:.1f}s")
        assert not left, f"still alive {time.monotonic() - t0:.0f}s after {sig.name} to pytest: {left}"
    finally:
        if inner.poll() is None:
            os.killpg(inner.pid, signal.SIGKILL)
            inner.wait()
        subprocess.run(["bash", str(CLUSTER), "stop", str(state)], timeout=120, check=False,
                       capture_output=True)
