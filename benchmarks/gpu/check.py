"""The runner: one guarded, timed step after another within one time budget, the report written after each."""

from __future__ import annotations

import contextlib
import datetime
import json
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

import torch

from bayesncl.core.atomic import atomic_write_text

from . import estimate, steps_cli, steps_feed, steps_train
from .common import (FULL, NEEDS, PLANNED_S, RESERVE_S, ROOT, SRC, STEPS, TINY, StepFailed, _version, cpu_count, fits,
                     git_commit, gpu_kind, tail)
from .inputs import write_cifar100
from .summary import markdown, targets

# Step name -> function of the Check, in the order of STEPS: what the grid needs first, then the extras.
STEP_FUNCS = {f.__name__: f for f in (
    steps_cli.cuda_tests, steps_train.throughput, steps_cli.sigterm_resume, steps_feed.imagenet_input,
    estimate.grid_estimate, steps_train.matmul_peak, steps_train.captured_step, steps_train.step_profile,
    steps_feed.official_feed, steps_cli.cli_end_to_end, steps_cli.captured_resume, steps_train.compiled_step)}
assert tuple(STEP_FUNCS) == STEPS
clock = time.monotonic  # the budget's clock (a test stands a fake one in)


class OutOfTime(BaseException):
    """The budget's end reached inside a step: raised by the watchdog, not an Exception, so that no step's own
    error handling takes it."""


def process_start(fallback: float, stat: str = "/proc/self/stat") -> float:
    """When this process started, on `clock`: from its `stat` (Linux; the interpreter's start and every import
    count against the budget), else `fallback` (the script's first line); never later than that."""
    try:
        fields = Path(stat).read_text().rsplit(")", 1)[1].split()
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return fallback
    return min(fallback, clock() - age) if age < 86_400 else fallback  # a day or more: not this run's


@contextlib.contextmanager
def watchdog(seconds: float):
    """Raise OutOfTime in the main thread after `seconds` (wall clock) unless the block ends first."""
    if math.isinf(seconds) or threading.current_thread() is not threading.main_thread():
        yield
        return
    if seconds <= 0:
        raise OutOfTime

    def ring(signum, frame):
        raise OutOfTime

    previous = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class Check:
    """What the steps share: the device, the sizes (`s`), a work folder, the report so far, the CLI in a
    subprocess. `run` calls each step function of STEP_FUNCS with this object, each only while it fits the
    budget of `budget_s` seconds from `started` (on `clock`; default now), planned by PLANNED_S[`kind`] (default:
    "tiny" with --tiny, else the GPU's, common.gpu_kind)."""

    def __init__(self, device: torch.device, tiny: bool, out: Path, budget_s: float, commit: str | None = None, *,
                 started: float | None = None, kind: str | None = None):
        self.device, self.tiny, self.out, self.budget_s = device, tiny, out, budget_s
        self.s = TINY if tiny else FULL
        self.started = clock() if started is None else started
        self._children: list[subprocess.Popen] = []
        self.work = Path(tempfile.mkdtemp(prefix="gpu_check_"))
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", "BAYESNCL_CACHE": str(self.work / "cache"),
                    "PYTHONPATH": os.pathsep.join([str(SRC)] + [p for p in os.environ.get("PYTHONPATH", "").split(
                        os.pathsep) if p])}
        self.workers = cpu_count() if self.s.max_workers is None else min(cpu_count(), self.s.max_workers)
        sha, source = git_commit(commit)
        info = {"device": str(device), "tiny": tiny, "commit": sha, "commit_source": source,
                "torch": torch.__version__, "timm": _version("timm"),
                "python": platform.python_version(), "cpus": cpu_count(), "workers": self.workers,
                "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
        if device.type == "cuda":
            info["gpu"] = torch.cuda.get_device_name(device)
            info["cuda"] = torch.version.cuda
            info["cudnn"] = torch.backends.cudnn.version()
        self.kind = kind or ("tiny" if tiny else gpu_kind(info.get("gpu")))
        info["plan"] = self.kind
        info["budget_s"] = budget_s if budget_s != float("inf") else None
        info["startup_s"] = round(clock() - self.started, 1)  # interpreter, imports, the device's start
        self.report: dict = {"info": info, "steps": {}, "targets": []}
        self._cifar: Path | None = None

    # -- shared inputs
    @property
    def cifar_root(self) -> Path:
        if self._cifar is None:
            self._cifar = write_cifar100(self.work / "cifar", self.s.cifar_train, 1000)
        return self._cifar

    def cli(self, *args: str, sets=(), log: Path, timeout: int | None = None, wait=True):
        cmd = [sys.executable, "-m", "bayesncl.cli.main", *args, "--quiet"]
        for s in sets:
            cmd += ["--set", s]
        fh = open(log, "ab")
        proc = subprocess.Popen(cmd, cwd=ROOT, env=self.env, stdout=fh, stderr=subprocess.STDOUT)
        self._children.append(proc)  # killed if the budget ends while it runs
        fh.close()
        if wait:
            try:
                proc.wait(timeout=timeout or self.s.subprocess_timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise StepFailed(f"`bayesncl {args[0]}` ran past {timeout or self.s.subprocess_timeout} s; "
                                 f"log tail: {tail(log)}")
        return proc

    def device_sets(self) -> list[str]:
        return [f"train.device={self.device.type}"]

    # -- bookkeeping
    def run(self, only: list[str], previous: dict | None = None) -> int:
        print(f"gpu_check: device {self.device}, tiny={self.tiny}, plan {self.kind}, budget {self.budget_s:g} s from "
              f"the process's start ({self.report['info']['startup_s']:g} s spent before the first step), work dir "
              f"{self.work}", flush=True)
        for name in STEPS:
            if name not in only:
                if previous and name in previous.get("steps", {}):  # a rerun of some steps keeps the others
                    self.report["steps"][name] = {**previous["steps"][name], "from_previous": True}
                    prev = previous.get("info", {})
                    self.report["info"]["previous_run"] = {k: prev.get(k) for k in ("date", "commit")}
                continue
            elapsed = clock() - self.started
            why = self.not_started(name, elapsed, previous)
            if why:
                self.report["steps"][name] = {"status": "skipped", "seconds": 0.0, "error": why}
                print(f"-- {name}: skipped ({why})", flush=True)
                continue
            print(f"\n== {name} ({elapsed:.0f} s elapsed)", flush=True)
            entry = self.run_step(name, elapsed)
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
            self.report["steps"][name] = entry
            print(f"-- {name}: {entry['status']} in {entry['seconds']:.1f} s"
                  + (f" ({entry['error']})" if "error" in entry else ""), flush=True)
            self.write()
        self.report["targets"] = targets(self.report["steps"])
        self.report["info"]["total_seconds"] = round(clock() - self.started, 1)
        self.write()
        print("\n" + markdown(self.report), flush=True)
        shutil.rmtree(self.work, ignore_errors=True)
        return 0 if all(e["status"] == "ok" for e in self.report["steps"].values()) else 1

    def expected_s(self, name: str, previous: dict | None = None) -> tuple[float, str]:
        """(seconds, "measured" or "planned"): the step's time in `previous` where that ran it ok on the same
        device at the same sizes, else its planned time on this kind of machine (PLANNED_S)."""
        prev = (previous or {}).get("info", {})
        entry = (previous or {}).get("steps", {}).get(name, {})
        same = all(prev.get(k) == self.report["info"].get(k) for k in ("device", "gpu", "tiny"))
        if same and entry.get("status") == "ok" and not entry.get("from_previous"):
            return float(entry["seconds"]), "measured"
        return float(PLANNED_S[self.kind][name]), "planned"

    def not_started(self, name: str, elapsed: float, previous: dict | None = None) -> str | None:
        """Why the step does not start `elapsed` seconds after the process's start (None: it starts)."""
        need = NEEDS.get(name)
        if need and self.step_result(need) is None:
            return f"needs {need}'s result, which this run does not have"
        seconds, source = self.expected_s(name, previous)
        if not fits(elapsed, seconds, self.budget_s):
            left = max(0.0, self.budget_s - RESERVE_S - elapsed)
            return (f"{source} {seconds:.0f} s, {left:.0f} s left of the {self.budget_s:g} s budget less "
                    f"{RESERVE_S:g} s kept for the summary")
        return None

    def run_step(self, name: str, elapsed: float) -> dict:
        """One step, guarded (a failure is recorded) and stopped at the budget's end (less RESERVE_S)."""
        t0, entry = clock(), {}
        try:
            with watchdog(self.budget_s - RESERVE_S - elapsed):
                try:
                    entry["result"] = STEP_FUNCS[name](self)
                    entry["status"] = "ok"
                except Exception as e:  # guarded: record and go on to the next step
                    entry["status"] = "failed"
                    entry["error"] = f"{type(e).__name__}: {e}"
                    entry["traceback"] = traceback.format_exc()[-3000:]
                    print(entry["traceback"], file=sys.stderr, flush=True)
        except OutOfTime:
            entry = {"status": "stopped", "error": f"still running at the budget's end ({self.budget_s:g} s from the "
                                                   f"process's start less {RESERVE_S:g} s kept for the summary)"}
            for proc in self._children:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        entry["seconds"] = round(clock() - t0, 2)
        return entry

    def write(self) -> None:
        atomic_write_text(self.out / "gpu_check.json", json.dumps(self.report, indent=1, default=str) + "\n")
        atomic_write_text(self.out / "gpu_check.md", markdown(self.report))


    def precision(self) -> str:
        return "bf16" if self.device.type == "cuda" else "auto"

    def step_result(self, name: str) -> dict | None:
        e = self.report["steps"].get(name)
        return e.get("result") if e and e["status"] == "ok" else None

    def step_config(self, method: str, graph: str = "eager") -> dict:
        """The throughput model on the generated CIFAR-100 set, for a training step outside `pretrain`."""
        from bayesncl.settings.config import resolve

        return resolve(sets=self.s.tput_model + self.device_sets() + [
            f"method.name={method}", f"train.batch_size={self.s.batch}", f"train.precision={self.precision()}",
            "data.dataset=cifar100", f"data.root={self.cifar_root}", f"train.graph={graph}"])

    def step_model(self, cfg: dict):
        """(model in train mode on the device, its LARS optimizer, whether inputs go channels_last)."""
        from bayesncl.model.methods import build_method
        from bayesncl.training.optim import build_optimizer
        from bayesncl.training.device import channels_last

        torch.manual_seed(0)
        model = build_method(cfg).to(self.device)
        cl = channels_last(cfg, self.device)
        if cl:
            model = model.to(memory_format=torch.channels_last)
        return model.train(), build_optimizer(model, cfg), cl
