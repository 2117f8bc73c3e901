"""workflow/scripts/allocation.py: a pretraining job stops before its allocation ends and requeues itself.

SLURM's clients are stand-ins on PATH here: `squeue` prints the end time the test writes to a file, `scontrol`
records its arguments (and refuses when told to). The command is a small program that exits 75 on SIGTERM, as
`bayesncl pretrain` does after saving its checkpoint. The real cluster: tests/test_slurm_allocations.py.

A test that expects the stop runs on a clock of its own (`clock`): time passes only while the script waits on the
command, and only once the command has set its SIGTERM handler, so the stop's time is exact and no test races the
machine's speed. Signals from outside are raised once the command is ready.
"""

from __future__ import annotations

import importlib.util
import signal
import subprocess
import sys
import textwrap
import time
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace

import pytest

from bayesncl.core.errors import REQUEUE_EXIT
from helpers.processes import wait_until

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("allocation", ROOT / "workflow" / "scripts" / "allocation.py")
allocation = importlib.util.module_from_spec(spec)
spec.loader.exec_module(allocation)
WAIT_S = allocation.REQUEUE_WAIT_S

# Runs for `seconds` unless SIGTERM comes first: then notes the time and exits 75. OUT.ready: the handler is set.
COMMAND = textwrap.dedent("""\
    import signal, sys, time
    out, seconds = sys.argv[1], float(sys.argv[2])
    def stop(signum, frame):
        open(out, "w").write(str(time.time()))
        sys.exit(75)
    signal.signal(signal.SIGTERM, stop)
    open(out + ".ready", "w").close()
    time.sleep(seconds)
""")


@pytest.fixture
def slurm(tmp_path, monkeypatch):
    """Stand-in squeue/scontrol; returns a function that sets the job's end time (Unix seconds, or text)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "squeue").write_text(f"#!/bin/sh\necho \"$*\" >> {tmp_path}/squeue.calls\ncat {tmp_path}/end\n")
    (bin_dir / "scontrol").write_text(
        f"#!/bin/sh\necho \"$*\" >> {tmp_path}/scontrol.calls\n"
        f"if [ -e {tmp_path}/refuse ]; then echo 'Requested operation is presently disabled' >&2; exit 1; fi\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")
    monkeypatch.delenv("SLURM_JOB_END_TIME", raising=False)
    monkeypatch.setattr(allocation, "REQUEUE_WAIT_S", 0)  # SLURM would end the allocation here
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}

    def end_at(value):
        text = datetime.fromtimestamp(value).isoformat(timespec="seconds") if isinstance(value, float) else value
        (tmp_path / "end").write_text(text + "\n")

    yield end_at
    for s, h in handlers.items():
        signal.signal(s, h)


class Clock:
    """allocation.run's `now`; its command's process waits on this clock (see the module's docstring)."""

    def __init__(self, start: float, ready: Path):
        self.t, self.ready, self.signals = start, ready, []

    def __call__(self) -> float:
        return self.t

    def popen(self, args):
        clock = self

        class Command(subprocess.Popen):
            def wait(self, timeout=None):
                if timeout is None:
                    return super().wait()
                wait_until(lambda: self.poll() is not None or clock.ready.exists(), "the command is ready", self)
                if self.poll() is not None:
                    return self.returncode
                clock.t += max(timeout, 0.01)  # as real time, it always passes
                time.sleep(0.005)  # the command runs meanwhile
                raise subprocess.TimeoutExpired(self.args, timeout)

            def send_signal(self, sig):
                clock.signals.append((sig, clock.t))
                super().send_signal(sig)

        return Command(args)


@pytest.fixture
def clock(tmp_path, monkeypatch):
    """A Clock started at the real time, for allocation.run(..., now=clock)."""
    c = Clock(time.time(), tmp_path / "stopped.ready")
    monkeypatch.setattr(allocation, "subprocess", SimpleNamespace(
        Popen=c.popen, run=subprocess.run, TimeoutExpired=subprocess.TimeoutExpired,
        SubprocessError=subprocess.SubprocessError))
    return c


def calls(tmp_path: Path, tool: str) -> list[str]:
    f = tmp_path / f"{tool}.calls"
    return f.read_text().splitlines() if f.exists() else []


def command(tmp_path: Path, seconds: float) -> list[str]:
    return [sys.executable, "-c", COMMAND, str(tmp_path / "stopped"), str(seconds)]


def test_stopped_margin_seconds_before_the_end_then_requeued(tmp_path, slurm, capsys, clock):
    start = clock()
    slurm(float(int(start) + 5))  # squeue prints whole seconds
    rc = allocation.run(command(tmp_path, 30), margin=2, job_id="4242", now=clock)
    assert rc == REQUEUE_EXIT and (tmp_path / "stopped").exists()
    assert clock.signals == [(signal.SIGTERM, int(start) + 3)]  # at end - margin
    assert calls(tmp_path, "scontrol") == ["requeue 4242"]
    assert calls(tmp_path, "squeue")[0] == "--noheader --jobs 4242 --format %e"
    err = capsys.readouterr().err  # the log names the stop's time (end - margin) and the requeue
    assert f"stopping the command at {datetime.fromtimestamp(int(start) + 3).isoformat()} " in err
    assert "job 4242 requeued" in err


def test_a_command_that_ends_in_time_is_left_alone(tmp_path, slurm):
    slurm(time.time() + 3600)
    assert allocation.run(command(tmp_path, 0.2), margin=600, job_id="7") == 0
    assert not (tmp_path / "stopped").exists() and calls(tmp_path, "scontrol") == []


def test_outside_a_job_or_without_an_end_time_nothing_is_stopped(tmp_path, slurm):
    assert allocation.run(command(tmp_path, 0.2), margin=1, job_id=None) == 0
    assert calls(tmp_path, "squeue") == []  # not asked: no job
    for text in ("N/A", "Unknown", "NONE"):
        slurm(text)
        assert allocation.run(command(tmp_path, 0.2), margin=1, job_id="7") == 0
    assert not (tmp_path / "stopped").exists() and calls(tmp_path, "scontrol") == []


def test_no_stop_when_the_margin_has_passed_at_start(tmp_path, slurm, capsys):
    """Stopping at once would requeue the job without any progress, forever: it runs to the limit instead."""
    slurm(time.time() + 2)
    assert allocation.run(command(tmp_path, 3), margin=10, job_id="7") == 0
    assert not (tmp_path / "stopped").exists() and calls(tmp_path, "scontrol") == []
    assert "within the margin" in capsys.readouterr().err


def test_a_raised_time_limit_postpones_the_stop(tmp_path, slurm, monkeypatch):
    """At the stop the end time is read again (`scontrol update TimeLimit=...` while the job runs)."""
    slurm(float(int(time.time()) + 3))
    real = allocation.job_end_time
    reads = []

    def later(job_id):  # the limit is raised once the job has started
        reads.append(job_id)
        if len(reads) == 2:
            slurm(time.time() + 3600)
        return real(job_id)

    monkeypatch.setattr(allocation, "job_end_time", later)
    assert allocation.run(command(tmp_path, 3), margin=1, job_id="7") == 0
    assert not (tmp_path / "stopped").exists() and calls(tmp_path, "scontrol") == []


def test_exit_75_without_our_stop_is_not_requeued(tmp_path, slurm):
    """A preempted job (SIGTERM from SLURM) is requeued by SLURM itself, or cancelled as the cluster says."""
    slurm(time.time() + 3600)
    script = "import sys; sys.exit(75)"
    assert allocation.run([sys.executable, "-c", script], margin=1, job_id="7") == REQUEUE_EXIT
    assert calls(tmp_path, "scontrol") == []


def test_a_refused_requeue_exits_75_and_says_how_to_allow_it(tmp_path, slurm, capsys, clock):
    (tmp_path / "refuse").touch()
    slurm(float(int(clock()) + 3))
    assert allocation.run(command(tmp_path, 30), margin=1, job_id="9", now=clock) == REQUEUE_EXIT
    assert calls(tmp_path, "scontrol") == ["requeue 9"]
    err = capsys.readouterr().err
    assert "slurm-requeue" in err
    assert "(Requested operation is presently disabled)" in err  # scontrol's reason, as text
    assert "requeued:" not in err


def test_sigterm_from_outside_reaches_the_command(tmp_path, slurm):
    """Preemption: SLURM signals the job; the command saves its checkpoint (here: exits 75)."""
    import threading

    slurm(time.time() + 3600)
    signal.signal(signal.SIGTERM, lambda s, f: None)  # this process survives it even if run() installs nothing
    ready = tmp_path / "stopped.ready"

    def preempt():
        wait_until(ready.exists, "the command is ready")
        signal.raise_signal(signal.SIGTERM)

    threading.Thread(target=preempt).start()
    assert allocation.run(command(tmp_path, 120), margin=1, job_id="7") == REQUEUE_EXIT
    assert (tmp_path / "stopped").exists() and calls(tmp_path, "scontrol") == []


@pytest.mark.parametrize("text,expected", [("2026-12-03T04:15:00", datetime(2026, 12, 3, 4, 15).timestamp()),
                                           ("N/A", None), ("Unknown", None), ("", None), ("NONE\n", None)])
def test_parse_end_time(text, expected):
    assert allocation.parse_end_time(text) == expected


def test_the_end_time_from_the_environment_when_squeue_says_nothing(tmp_path, slurm, monkeypatch):
    slurm("N/A")
    monkeypatch.setenv("SLURM_JOB_END_TIME", "1900000000")
    assert allocation.job_end_time("7") == 1900000000.0


def iso(t: float) -> str:
    """An end time as squeue would print it, but to the microsecond: a stop a fraction of a second away."""
    return datetime.fromtimestamp(t).isoformat()


def test_after_a_granted_requeue_it_waits_for_slurm_to_end_the_job(tmp_path, slurm, monkeypatch, clock):
    """`scontrol requeue` granted: SLURM ends this allocation; until then the script waits (no early exit 75).
    Refused: it exits 75 at once."""
    sleeps = []
    monkeypatch.setattr(allocation, "REQUEUE_WAIT_S", WAIT_S)  # the module's own wait, not the fixture's 0
    monkeypatch.setattr(allocation, "time", SimpleNamespace(sleep=sleeps.append, time=time.time))
    slurm(iso(clock() + 2.8))
    assert allocation.run(command(tmp_path, 30), margin=2, job_id="5", now=clock) == REQUEUE_EXIT
    assert calls(tmp_path, "scontrol") == ["requeue 5"]
    assert len(sleeps) == 1 and sleeps[0] > 0
    (tmp_path / "refuse").touch()
    (tmp_path / "stopped").unlink()
    (tmp_path / "stopped.ready").unlink()
    sleeps.clear()
    slurm(iso(clock() + 2.8))
    assert allocation.run(command(tmp_path, 30), margin=2, job_id="5", now=clock) == REQUEUE_EXIT
    assert (tmp_path / "stopped").exists() and calls(tmp_path, "scontrol") == ["requeue 5"] * 2
    assert sleeps == []


def test_sighup_from_outside_reaches_the_command_as_sigterm(tmp_path, slurm):
    """The command saves its checkpoint on SIGTERM only (bayesncl pretrain); a hangup must not kill it without one."""
    import threading

    slurm(time.time() + 3600)
    signal.signal(signal.SIGHUP, lambda s, f: None)  # this process survives it even if run() installs nothing
    ready = tmp_path / "stopped.ready"

    def hang_up():
        wait_until(ready.exists, "the command is ready")
        signal.raise_signal(signal.SIGHUP)

    threading.Thread(target=hang_up).start()
    assert allocation.run(command(tmp_path, 120), margin=1, job_id="7") == REQUEUE_EXIT
    assert (tmp_path / "stopped").exists() and calls(tmp_path, "scontrol") == []


def test_a_lowered_time_limit_brings_the_stop_forward(tmp_path, slurm, monkeypatch, clock):
    """The end time is read again every RECHECK_S while the command runs (`scontrol update TimeLimit=...`)."""
    monkeypatch.setattr(allocation, "RECHECK_S", 0.2)
    slurm(clock() + 3600)
    real = allocation.job_end_time
    lowered = []

    def sooner(job_id):  # at the first recheck the job ends 1.5 s from now
        if not lowered and (tmp_path / "squeue.calls").exists():
            lowered.append(float(int(clock()) + 2))  # whole seconds, as squeue prints them
            slurm(lowered[0])
        return real(job_id)

    monkeypatch.setattr(allocation, "job_end_time", sooner)
    assert allocation.run(command(tmp_path, 120), margin=1, job_id="7", now=clock) == REQUEUE_EXIT
    assert (tmp_path / "stopped").exists()
    [(sig, at)] = clock.signals
    assert sig == signal.SIGTERM and at == pytest.approx(lowered[0] - 1)  # at the new end - margin
    assert calls(tmp_path, "scontrol") == ["requeue 7"]


def test_a_margin_passed_at_start_stays_ignored_all_run(tmp_path, slurm, monkeypatch, capsys):
    """The recheck every RECHECK_S neither stops the command later nor fails on a job without an end time."""
    monkeypatch.setattr(allocation, "RECHECK_S", 0.1)
    end = float(int(time.time()) + 100)
    slurm(end)
    assert allocation.run(command(tmp_path, 0.5), margin=102, job_id="7", now=lambda: end - 2) == 0
    assert "the job ends in 2 s, within the margin of 102 s" in capsys.readouterr().err
    slurm("N/A")
    assert allocation.run(command(tmp_path, 0.5), margin=1, job_id="7") == 0
    assert not (tmp_path / "stopped").exists() and calls(tmp_path, "scontrol") == []


def test_without_squeue_the_end_time_comes_from_the_environment(tmp_path, slurm, monkeypatch):
    (tmp_path / "bin" / "squeue").unlink()
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))  # no squeue anywhere
    monkeypatch.setenv("SLURM_JOB_END_TIME", "1900000000")
    assert allocation.job_end_time("7") == 1900000000.0
    monkeypatch.delenv("SLURM_JOB_END_TIME")
    assert allocation.job_end_time("7") is None


def test_squeue_wins_over_the_environment(tmp_path, slurm, monkeypatch):
    """SLURM_JOB_END_TIME is the end time at the job's start; squeue's includes a limit raised since."""
    slurm(1950000000.0)
    monkeypatch.setenv("SLURM_JOB_END_TIME", "1900000000")
    assert allocation.job_end_time("7") == 1950000000.0


def exits(code: int) -> list[str]:
    return [sys.executable, "-c", f"import sys; sys.exit({code})"]


def test_main_runs_the_command_after_the_double_dash(tmp_path, slurm, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert allocation.main(["--margin", "0", "--", *exits(3)]) == 3  # margin 0 allowed: stop at the end time
    assert allocation.main(["--margin", "600", *exits(4)]) == 4  # without `--` the command is the rest
    assert calls(tmp_path, "squeue") == []  # outside a job nothing is asked
    monkeypatch.setenv("SLURM_JOB_ID", "")
    assert allocation.main(["--margin", "600", "--", *exits(0)]) == 0
    assert calls(tmp_path, "squeue") == []


def test_main_inside_a_job_asks_for_its_end_time(tmp_path, slurm, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "31")
    slurm(time.time() + 3600)
    assert allocation.main(["--margin", "600", "--", *exits(0)]) == 0
    assert calls(tmp_path, "squeue") == ["--noheader --jobs 31 --format %e"]


@pytest.mark.parametrize("argv", [["--", "true"], ["--margin", "-1", "--", "true"], ["--margin", "1", "--"],
                                  ["--margin", "1"]], ids=["no margin", "negative margin", "no command", "no --"])
def test_main_usage_errors(argv, capsys):
    with pytest.raises(SystemExit) as e:
        allocation.main(argv)
    assert e.value.code == 2 and "usage:" in capsys.readouterr().err


def test_the_script_exits_with_the_command_status(tmp_path):
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    script = ROOT / "workflow" / "scripts" / "allocation.py"
    out = subprocess.run([sys.executable, str(script), "--margin", "600", "--", *exits(3)], env=env)
    assert out.returncode == 3


@pytest.mark.parametrize("error", [__import__("subprocess").TimeoutExpired(["scontrol"], 60),
                                   FileNotFoundError(2, "No such file or directory: 'scontrol'")],
                         ids=["scontrol hangs", "no scontrol"])
def test_a_failed_scontrol_is_a_refused_requeue(tmp_path, slurm, monkeypatch, capsys, error, clock):
    """slurmctld not answering (or no scontrol): the command's exit 75 stands, for Snakemake's retries."""
    import subprocess

    real = subprocess.run

    def run(args, **kwargs):
        if args[0] == "scontrol":
            raise error
        return real(args, **kwargs)

    monkeypatch.setattr(allocation.subprocess, "run", run)
    slurm(iso(time.time() + 2.8))
    assert allocation.run(command(tmp_path, 30), margin=2, job_id="9", now=clock) == REQUEUE_EXIT
    assert (tmp_path / "stopped").exists()
    err = capsys.readouterr().err
    assert "scontrol requeue 9 failed" in err and "slurm-requeue" not in err
    assert "requeued:" not in err  # nor waits for an end of the allocation that SLURM was never asked for
