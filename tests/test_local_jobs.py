"""How a local workflow run starts its jobs (bayesncl.cli.local_jobs, read by workflow/rules/common.smk): the GPUs it
sees, its fork servers' folder and their end, the `bayesncl` script PATH finds first, Snakemake's one wake-up timer."""

import os
import stat
import subprocess
import sysconfig
import threading

import pytest

from bayesncl.cli import local_jobs
from helpers.processes import PATIENCE
from bayesncl.cli.forkserver import DIR_ENV


@pytest.mark.parametrize("env,gpus", [("0,1", ["0", "1"]), (" 2 , 5", ["2", "5"]), ("3,-1,4", ["3"]),
                                      ("-1", []), ("", []), ("1,,2", ["1"])])
def test_visible_gpus_follow_cuda_visible_devices_up_to_the_first_hidden_one(monkeypatch, env, gpus):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", env)
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("nvidia-smi asked though the variable is set"))
    assert local_jobs.visible_gpus() == gpus


def _nvidia_smi(tmp_path, monkeypatch, script: str):
    tool = tmp_path / "nvidia-smi"
    tool.write_text(f"#!/bin/sh\n{script}\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")


def test_visible_gpus_are_nvidia_smi_s_without_the_variable(tmp_path, monkeypatch):
    _nvidia_smi(tmp_path, monkeypatch, 'echo 0; echo 1; echo 2')
    assert local_jobs.visible_gpus() == ["0", "1", "2"]


@pytest.mark.parametrize("script", ["echo 0; exit 9", "exit 0"])
def test_a_failing_or_silent_nvidia_smi_shows_no_gpu(tmp_path, monkeypatch, script):
    _nvidia_smi(tmp_path, monkeypatch, script)
    assert local_jobs.visible_gpus() == []


def test_no_nvidia_smi_or_a_hung_one_shows_no_gpu(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    for error in (FileNotFoundError("nvidia-smi"), subprocess.TimeoutExpired("nvidia-smi", 60)):
        def run(*a, error=error, **k):
            assert 0 < k["timeout"] <= 60  # a hung nvidia-smi is given up on
            raise error
        monkeypatch.setattr(subprocess, "run", run)
        assert local_jobs.visible_gpus() == []


def test_a_run_gets_a_fork_server_folder_of_its_own_unless_one_is_named(tmp_path, monkeypatch):
    monkeypatch.delenv(DIR_ENV, raising=False)
    assert local_jobs.own_forkserver_folder(False) is None and DIR_ENV not in os.environ
    folder = local_jobs.own_forkserver_folder(True, cwd=str(tmp_path))
    assert folder and os.environ[DIR_ENV] == folder  # the jobs' shells inherit it
    assert local_jobs.own_forkserver_folder(True, cwd=str(tmp_path)) is None  # a named folder is the user's: kept
    assert os.environ[DIR_ENV] == folder


def test_the_run_s_own_servers_are_ended_with_it(monkeypatch):
    ended = []
    monkeypatch.setattr("bayesncl.cli.forkserver.end_servers", ended.append)
    local_jobs.end_forkservers(None)
    local_jobs.end_forkservers("/run/user/x/bayesncl-run")
    assert ended == ["/run/user/x/bayesncl-run"]


@pytest.mark.parametrize("found,installed,first", [("/home/u/.pyenv/shims/bayesncl", True, True),
                                                   ("/home/u/.pyenv/shims/bayesncl", False, False),
                                                   ("/usr/local/bin/bayesncl", True, False), (None, True, False)])
def test_the_interpreter_s_own_script_goes_before_a_version_manager_s_shim(tmp_path, monkeypatch, found, installed,
                                                                          first):
    if installed:
        (tmp_path / "bayesncl").write_text("#!/bin/sh\n")
    monkeypatch.setattr(local_jobs.shutil, "which", lambda name: found if name == "bayesncl" else None)
    monkeypatch.setattr(sysconfig, "get_path", lambda name: str(tmp_path) if name == "scripts" else None)
    assert local_jobs.script_folder() == (str(tmp_path) if first else None)


def _timers() -> set:
    return {t for t in threading.enumerate() if isinstance(t, threading.Timer)}


def test_the_scheduler_keeps_one_wakeup_timer_however_often_its_loop_passes():
    """Snakemake's loop asks for a wake-up at every pass (one more per finished job); one pending timer serves them
    all, wakes the loop once, and the next pass after it fires gets a new one."""
    from snakemake.scheduling.job_scheduler import JobScheduler

    class Scheduler(JobScheduler):  # the real method, patched on a subclass: the test leaves Snakemake's as it is
        def __init__(self):
            self._open_jobs = threading.Semaphore(0)

    assert local_jobs.one_wakeup_timer(Scheduler)
    assert JobScheduler._schedule_reevalutation is not Scheduler._schedule_reevalutation
    pending = Scheduler()
    before = _timers()
    for _ in range(50):
        pending._schedule_reevalutation(600)  # pending at every pass: one timer, however often the loop asks
    assert _timers() - before == {pending._bayesncl_wakeup} and pending._bayesncl_wakeup.daemon
    pending._bayesncl_wakeup.cancel()
    s = Scheduler()
    s._schedule_reevalutation(0.05)
    timer = s._bayesncl_wakeup
    assert s._open_jobs.acquire(timeout=PATIENCE)  # it wakes the loop
    s._schedule_reevalutation(0.05)  # the pass it woke asks for the next wake-up at once, and gets it
    assert s._bayesncl_wakeup not in (None, timer)
    assert s._open_jobs.acquire(timeout=PATIENCE)
    timer.join(PATIENCE)
    assert not s._open_jobs.acquire(timeout=0.5)  # each timer woke it once


def test_a_snakemake_without_the_timer_method_is_left_as_it_is():
    class Scheduler:
        pass

    assert not local_jobs.one_wakeup_timer(Scheduler) and not hasattr(Scheduler, "_schedule_reevalutation")
