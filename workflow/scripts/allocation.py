"""Run a resumable command inside a SLURM allocation; stop it before the allocation ends and requeue the job.

    python allocation.py --margin SECONDS -- COMMAND [ARG ...]

A run longer than the partition's time limit continues in as many allocations as it needs. MARGIN seconds
before the job's end time (`squeue -o %e`, read again every few minutes, so a limit raised with `scontrol
update` counts) the command gets SIGTERM: `bayesncl pretrain` saves a checkpoint and exits 75. This process
then requeues its own job (`scontrol requeue`): the same job id waits in the queue, starts again from the
batch script and the command resumes from its checkpoint; Snakemake, which polls that job id, sees it
pending or running, never failed, so no retry count caps the number of allocations.

SIGTERM is sent by this process rather than asked of SLURM (`sbatch --signal`): SLURM signals every process
of the job's steps, Snakemake's own among them, which then fails the job. A SIGTERM, SIGINT or SIGHUP from
outside (preemption) is passed on to the command. Outside a SLURM job (no SLURM_JOB_ID), with no end time, or
when the margin has already passed at start (it would stop the command before any progress), the command just
runs. Exit status: the command's; 75 also when the requeue was refused or scontrol failed (Snakemake's retries
then resubmit).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from datetime import datetime

REQUEUE_EXIT = 75  # bayesncl.core.errors.REQUEUE_EXIT: stopped by SIGTERM with a checkpoint; rerun to resume
RECHECK_S = 300  # how often the job's end time is read again
REQUEUE_WAIT_S = 120  # after `scontrol requeue`, SLURM ends this job; if it has not by then, exit 75


def log(msg: str) -> None:
    print(f"allocation: {msg}", file=sys.stderr, flush=True)


def parse_end_time(text: str) -> float | None:
    """squeue's %e (local time, e.g. 2026-12-03T04:15:00) as a Unix time; None for N/A, Unknown, NONE."""
    try:
        return datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        return None


def job_end_time(job_id: str) -> float | None:
    """When SLURM ends this job (its start plus its time limit), or None if it does not say."""
    try:
        out = subprocess.run(["squeue", "--noheader", "--jobs", job_id, "--format", "%e"], capture_output=True,
                             text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        out = None
    end = parse_end_time(out.stdout) if out is not None and out.returncode == 0 else None
    if end is None and os.environ.get("SLURM_JOB_END_TIME", "").isdigit():  # set by SLURM >= 22.05 at job start
        end = float(os.environ["SLURM_JOB_END_TIME"])
    return end


def requeue(job_id: str) -> bool:
    try:
        out = subprocess.run(["scontrol", "requeue", job_id], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:  # slurmctld not answering, no scontrol: as refused
        log(f"scontrol requeue {job_id} failed ({e}); exit {REQUEUE_EXIT}, for Snakemake's retries")
        return False
    if out.returncode != 0:
        log(f"scontrol requeue {job_id} refused ({out.stderr.strip()}); exit {REQUEUE_EXIT}, for Snakemake's "
            "retries (allow requeueing: sbatch --requeue, slurm-requeue in the profile)")
    return out.returncode == 0


def run(command: list[str], margin: float, job_id: str | None, now=time.time) -> int:
    proc = subprocess.Popen(command)

    def forward(signum, frame):
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM if signum == signal.SIGHUP else signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    stopped = False
    end = job_end_time(job_id) if job_id else None
    if end is not None and end - margin <= now():
        log(f"the job ends in {end - now():.0f} s, within the margin of {margin:.0f} s: not stopping it early "
            "(lower the margin or raise the time limit)")
        end = None
    elif end is not None:
        log(f"job {job_id}: stopping the command at {datetime.fromtimestamp(end - margin).isoformat()} "
            f"({margin:.0f} s before the allocation ends), then requeueing the job")
    while True:
        wait = RECHECK_S if end is None or stopped else min(RECHECK_S, max(end - margin - now(), 0.0))
        try:
            rc = proc.wait(timeout=wait if job_id else None)
            break
        except subprocess.TimeoutExpired:
            pass
        if end is not None and not stopped and now() >= end - margin:
            end = job_end_time(job_id) or end  # a raised limit postpones the stop
            if now() >= end - margin:
                log(f"{margin:.0f} s left in the allocation: stopping the command (SIGTERM)")
                proc.send_signal(signal.SIGTERM)
                stopped = True
        elif end is not None and not stopped:
            end = job_end_time(job_id) or end
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # nothing left to pass them to
        signal.signal(sig, signal.SIG_DFL)
    if rc == REQUEUE_EXIT and stopped and requeue(job_id):
        log(f"job {job_id} requeued: it resumes from its checkpoint in the next allocation")
        time.sleep(REQUEUE_WAIT_S)  # SLURM ends this allocation now (SIGTERM)
    return rc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--margin", type=float, required=True, metavar="SECONDS",
                        help="stop the command this long before the job's end time")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARG ...]")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command or args.margin < 0:
        parser.error("give --margin SECONDS (>= 0) and a command after --")
    return run(command, args.margin, os.environ.get("SLURM_JOB_ID") or None)


if __name__ == "__main__":
    sys.exit(main())
