"""How a local workflow run starts its jobs (workflow/rules/common.smk reads these; a cluster's scheduler does this
work there): the GPUs this machine shows, the fork server's folder of this run, the `bayesncl` script PATH
should find first, and Snakemake's scheduler kept to one wake-up timer."""

from __future__ import annotations

import os
import shutil
import subprocess
import sysconfig
import threading

__all__ = ["end_forkservers", "one_wakeup_timer", "own_forkserver_folder", "script_folder", "visible_gpus"]


def visible_gpus() -> list[str]:
    """GPU ids as CUDA_VISIBLE_DEVICES lists them (ids before the first negative one), else nvidia-smi's (none
    where it is missing, fails or hangs)."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        ids = []
        for gpu in (g.strip() for g in env.split(",")):
            if not gpu or gpu.startswith("-"):
                break
            ids.append(gpu)
        return ids
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return []
    return out.stdout.split() if out.returncode == 0 else []


def own_forkserver_folder(wanted: bool, cwd: str | None = None) -> str | None:
    """With ``wanted`` (the run routes its jobs through fork servers, and this is Snakemake's own process), a
    socket folder of this run's, in the environment every job's shell inherits, so its servers are its own and end
    with it (end_forkservers); None where BAYESNCL_FORKSERVER_DIR already names one (the user's: kept) or not
    wanted."""
    from .forkserver import DIR_ENV, run_folder

    if not wanted or os.environ.get(DIR_ENV):
        return None
    folder = run_folder(cwd or os.getcwd())
    os.environ[DIR_ENV] = folder
    return folder


def end_forkservers(folder: str | None) -> None:
    """End the servers of a run's own folder (own_forkserver_folder) and remove it; nothing for None."""
    if folder:
        from .forkserver import end_servers

        end_servers(folder)


def script_folder() -> str | None:
    """Where PATH finds a version manager's shim for `bayesncl` (pyenv's, asdf's: a shell script under .../shims/,
    a tenth of a second per job), the folder of the script this interpreter installed, to go first on PATH; else
    None (PATH finds the script itself, or this interpreter installed none)."""
    if f"{os.sep}shims{os.sep}" not in (shutil.which("bayesncl") or ""):
        return None
    scripts = sysconfig.get_path("scripts")
    return scripts if os.path.isfile(os.path.join(scripts, "bayesncl")) else None


def one_wakeup_timer(scheduler_class=None) -> bool:
    """Keep Snakemake's job scheduler to one pending wake-up timer; True where it was patched.

    Snakemake 9 (scheduling/job_scheduler.py) starts a timer thread that wakes the scheduler after the job-rate
    timespan at every pass of its loop, and every finished job starts a pass: the timers chain, one more per
    finished job, each waking the loop once a second. In the demo's 573 jobs that grew to hundreds of threads and a
    fifth of a core taken from the jobs. One pending timer wakes it as well (a finished job wakes it by itself).
    A Snakemake without the method is left as it is."""
    if scheduler_class is None:
        from snakemake.scheduling.job_scheduler import JobScheduler as scheduler_class
    if not hasattr(scheduler_class, "_schedule_reevalutation"):
        return False

    def schedule_reevaluation(self, delay) -> None:
        if getattr(self, "_bayesncl_wakeup", None) is not None:
            return

        def wake():
            self._bayesncl_wakeup = None  # before the release: the pass it wakes may ask for the next one
            self._open_jobs.release()

        timer = threading.Timer(delay, wake)
        timer.daemon = True  # a wake-up left pending never holds the finished workflow's exit
        self._bayesncl_wakeup = timer
        timer.start()

    scheduler_class._schedule_reevalutation = schedule_reevaluation
    return True
