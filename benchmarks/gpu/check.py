"""The runner: one guarded, timed step after another, the report written after each."""

from __future__ import annotations

import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch

from bayesncl.atomic import atomic_write_text

from . import estimate, steps_cli, steps_feed, steps_train
from .common import (FULL, NEEDED, PLANNED_S, ROOT, SRC, STEPS, TINY, StepFailed, _version, cpu_count, git_commit,
                     tail)
from .inputs import write_cifar100
from .summary import markdown, targets

# Step name -> function of the Check, in the order of STEPS: what the grid needs first, then the extras.
STEP_FUNCS = {f.__name__: f for f in (
    steps_cli.cuda_tests, steps_train.throughput, steps_cli.sigterm_resume, steps_feed.imagenet_input,
    estimate.grid_estimate, steps_train.matmul_peak, steps_train.captured_step, steps_train.step_profile,
    steps_feed.official_feed, steps_cli.cli_end_to_end, steps_cli.captured_resume, steps_train.compiled_step)}
assert tuple(STEP_FUNCS) == STEPS


class Check:
    """What the steps share: the device, the sizes (`s`), a work folder, the report so far, the CLI in a
    subprocess. `run` calls each step function of STEP_FUNCS with this object."""

    def __init__(self, device: torch.device, tiny: bool, out: Path, budget_s: float, commit: str | None = None):
        self.device, self.tiny, self.out, self.budget_s = device, tiny, out, budget_s
        self.s = TINY if tiny else FULL
        self.t_start = time.perf_counter()
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
        info["budget_s"] = budget_s if budget_s != float("inf") else None
        self.report: dict = {"info": info, "steps": {}, "targets": []}
        self._cifar: Path | None = None

    # -- shared inputs
    @property
    def cifar_root(self) -> Path:
        if self._cifar is None:
            self._cifar = write_cifar100(self.work / "cifar", self.s.cifar_train, 1000)
        return self._cifar

    def cli(self, *args: str, sets=(), log: Path, timeout: int | None = None, wait=True):
        cmd = [sys.executable, "-m", "bayesncl.cli", *args, "--quiet"]
        for s in sets:
            cmd += ["--set", s]
        fh = open(log, "ab")
        proc = subprocess.Popen(cmd, cwd=ROOT, env=self.env, stdout=fh, stderr=subprocess.STDOUT)
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
        print(f"gpu_check: device {self.device}, tiny={self.tiny}, work dir {self.work}", flush=True)
        for name in STEPS:
            if name not in only:
                if previous and name in previous.get("steps", {}):  # a rerun of some steps keeps the others
                    self.report["steps"][name] = {**previous["steps"][name], "from_previous": True}
                    prev = previous.get("info", {})
                    self.report["info"]["previous_run"] = {k: prev.get(k) for k in ("date", "commit")}
                continue
            elapsed = time.perf_counter() - self.t_start
            # what the grid needs always runs; an extra only while its planned time fits the budget (--tiny: the
            # plan's seconds are an H200's at full size, not these)
            if name not in NEEDED and elapsed + (0 if self.tiny else PLANNED_S[name]) > self.budget_s:
                self.report["steps"][name] = {"status": "skipped", "seconds": 0.0,
                                              "error": f"time budget of {self.budget_s:.0f} s spent"}
                continue
            print(f"\n== {name} ({elapsed:.0f} s elapsed)", flush=True)
            t0 = time.perf_counter()
            entry: dict = {}
            try:
                entry["result"] = STEP_FUNCS[name](self)
                entry["status"] = "ok"
            except Exception as e:  # guarded: record and go on to the next step
                entry["status"] = "failed"
                entry["error"] = f"{type(e).__name__}: {e}"
                entry["traceback"] = traceback.format_exc()[-3000:]
                print(entry["traceback"], file=sys.stderr, flush=True)
            entry["seconds"] = round(time.perf_counter() - t0, 2)
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
            self.report["steps"][name] = entry
            print(f"-- {name}: {entry['status']} in {entry['seconds']:.1f} s"
                  + (f" ({entry['error']})" if "error" in entry else ""), flush=True)
            self.write()
        self.report["targets"] = targets(self.report["steps"])
        self.report["info"]["total_seconds"] = round(time.perf_counter() - self.t_start, 1)
        self.write()
        print("\n" + markdown(self.report), flush=True)
        shutil.rmtree(self.work, ignore_errors=True)
        return 0 if all(e["status"] == "ok" for e in self.report["steps"].values()) else 1

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
        from bayesncl.config import resolve

        return resolve(sets=self.s.tput_model + self.device_sets() + [
            f"method.name={method}", f"train.batch_size={self.s.batch}", f"train.precision={self.precision()}",
            "data.dataset=cifar100", f"data.root={self.cifar_root}", f"train.graph={graph}"])

    def step_model(self, cfg: dict):
        """(model in train mode on the device, its LARS optimizer, whether inputs go channels_last)."""
        from bayesncl.methods import build_method
        from bayesncl.optim import build_optimizer
        from bayesncl.runtime import channels_last

        torch.manual_seed(0)
        model = build_method(cfg).to(self.device)
        cl = channels_last(cfg, self.device)
        if cl:
            model = model.to(memory_format=torch.channels_last)
        return model.train(), build_optimizer(model, cfg), cl
