"""One prepared check of the GPU path: CUDA tests, training throughput, input paths, a real run, grid cost.

    PYTHONPATH=src python benchmarks/gpu_check.py --device cuda --out DIR          # ~5 min on one H200
    PYTHONPATH=src python benchmarks/gpu_check.py --device cpu --tiny --out DIR    # every step, small, on CPU

Steps (each timed and guarded: a failing step records its error and the next one runs):
  cuda_tests      pytest on the tests that skip without CUDA
  sigterm_resume  `bayesncl pretrain` through the CLI, SIGTERM mid-epoch (exit 75), rerun: final weights must
                  equal an uninterrupted run's (eager; on CUDA also recorded for train.graph=cudagraph)
  matmul_peak     a large bf16 matmul: the FLOP/s ceiling the training step is compared with
  throughput      `bayesncl.train.pretrain` itself (on-device augmentation + forward/backward + LARS) on a
                  CIFAR-100-format set of random images, NCL and BayesNCL, eager and (CUDA) with the step captured
                  in a CUDA graph (train.graph=cudagraph): images/s, overhead, peak memory, achieved FLOP/s
                  (counted forward FLOPs x 3 for forward+backward, x 2 views)
  step_profile    where one training step's time goes, NCL and BayesNCL: augmentation (two views), forward +
                  loss, backward, LARS update, logged sums (median ms from device events after warm-up, one batch
                  reused); on CUDA also the captured step's replay time
  official_feed   the same model and optimizer fed the released code's way: per-image PIL augmentations of
                  two views in DataLoader workers (one per CPU); images/s and ours / official-style
  imagenet_input  generated 500x375 JPEGs decoded and resized as bayesncl.data.imagenet does, and their prepared
                  copy (bayesncl prepare-imagenet), with 1 worker and one per CPU, feeding the 224 px on-device
                  crop: images/s; the CPUs per GPU to ask for come from the prepared copy's per-core rate
  cli_end_to_end  `bayesncl pretrain` + `bayesncl evaluate` on synthetic 32 px data: every eval/<section>.json written
  grid_estimate   GPU-hours of config/paper.yaml's pretraining jobs from the measured rate, scaled by FLOPs
  compiled_step   `pretrain` with train.graph=compile (torch.compile of the whole step): compile time, images/s
Writes DIR/gpu_check.json and DIR/gpu_check.md after every step (so a run cut short still leaves its
figures) and prints a summary with the targets: BayesNCL overhead <= 6% (the paper's 5.9%; goal 3%),
>= 15% of the measured bf16 matmul peak (goal 20%), >= 3x the official-style feed. The commit recorded is --commit, else $BAYESNCL_COMMIT, else git HEAD
when no file differs from it, else "unknown" (a copied tree's .git can be older than its files).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import pickle
import platform
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
if str(SRC) not in sys.path:  # the device machine runs the project from src/ without installing it
    sys.path.insert(0, str(SRC))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from bayesncl.atomic import atomic_write_text  # noqa: E402

STEPS = ("cuda_tests", "sigterm_resume", "matmul_peak", "throughput", "step_profile", "official_feed",
         "imagenet_input", "cli_end_to_end", "grid_estimate", "compiled_step")
# BayesNCL's time overhead over NCL: at most the paper's 5.9% (6%), goal 3%; achieved / bf16 matmul peak: at
# least 15%, goal 20%.
TARGETS = {"overhead_pct_max": 6.0, "overhead_pct_goal": 3.0, "feed_ratio_min": 3.0, "peak_frac_min": 0.15,
           "peak_frac_goal": 0.20}
# The captured step the targets are judged on (train.graph), where the device has it.
CAPTURED = "cudagraph"
PAPER_MINUTES = {"ncl": 70.95, "bayesncl": 75.12}  # CIFAR-100, 200 epochs (Table 7)
TRAIN_IMAGES = {"cifar10": 50_000, "cifar100": 50_000, "imagenet100": 126_689}
# Every section the synthetic set supports (its own background label stands in for Waterbirds').
E2E_SECTIONS = ("features", "interpretability", "linear_probe", "retrieval", "background_probe", "dynamics", "cost")
PAPER_MODEL = ["model.arch=resnet18", "model.width=64", "model.stem=cifar", "model.proj_hidden=2048",
               "model.proj_dim=256"]


@dataclasses.dataclass
class Sizes:
    """Everything --tiny shrinks."""

    sig_sets: list            # the SIGTERM run (synthetic data)
    tput_model: list          # the throughput / official-feed model
    batch: int
    cifar_train: int          # images in the generated CIFAR-100-format train split
    tput_seconds: float       # timed training per method
    warm_steps: int           # steps per epoch of the 2-epoch warm-up run before each timed run
    feed_seconds: float       # timed official-style feed
    matmul_n: int
    jpeg_files: int
    jpeg_seconds: float       # timed JPEG feed per worker setting
    jpeg_batch: int
    e2e_sets: list            # the CLI end-to-end run
    max_workers: int | None   # cap on DataLoader workers (None: one per CPU)
    profile_steps: tuple      # (warm-up, timed) steps of the step profile
    subprocess_timeout: int


FULL = Sizes(
    sig_sets=["data.synthetic.train_size=4096", "data.synthetic.test_size=256", "data.synthetic.image_size=32",
              "model.width=16", "model.proj_hidden=256", "model.proj_dim=64", "train.batch_size=64",
              "train.epochs=4", "train.warmup_epochs=1", "method.name=bayesncl", "method.gate=gumbel"],
    tput_model=PAPER_MODEL, batch=256, cifar_train=50_000, tput_seconds=20.0, warm_steps=15, feed_seconds=20.0,
    matmul_n=8192, jpeg_files=384, jpeg_seconds=8.0, jpeg_batch=64,
    e2e_sets=PAPER_MODEL + ["data.synthetic.train_size=2048", "data.synthetic.test_size=1000",
                            "data.synthetic.image_size=32", "train.batch_size=256", "train.epochs=3",
                            "train.warmup_epochs=1", "train.dynamics_every=1", "method.name=bayesncl",
                            "eval.probe=fast"],
    max_workers=None, subprocess_timeout=240, profile_steps=(10, 30),
)
TINY = Sizes(
    sig_sets=["data.synthetic.train_size=256", "data.synthetic.test_size=64", "data.synthetic.image_size=16",
              "model.width=4", "model.proj_hidden=32", "model.proj_dim=16", "train.batch_size=32",
              "train.epochs=4", "train.warmup_epochs=1", "train.threads=1", "method.name=bayesncl",
              "method.gate=gumbel"],
    tput_model=["model.arch=resnet18", "model.width=4", "model.stem=cifar", "model.proj_hidden=64",
                "model.proj_dim=32"],
    batch=32, cifar_train=1024, tput_seconds=1.5, warm_steps=2, feed_seconds=1.5, matmul_n=256, jpeg_files=24,
    jpeg_seconds=1.0, jpeg_batch=4,
    e2e_sets=["model.width=4", "model.proj_hidden=64", "model.proj_dim=32", "data.synthetic.train_size=256",
              "data.synthetic.test_size=200", "data.synthetic.image_size=32", "train.batch_size=64",
              "train.epochs=2", "train.warmup_epochs=1", "train.dynamics_every=1", "train.threads=1",
              "method.name=bayesncl", "eval.probe=fast", "eval.batch_size=128"],
    max_workers=2, subprocess_timeout=180, profile_steps=(1, 3),
)


class StepFailed(RuntimeError):
    """A step ran but its check did not hold; the message says what was seen."""


def _version(package: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def git_commit(explicit: str | None = None) -> tuple[str, str]:
    """(commit, where it came from): --commit, else BAYESNCL_COMMIT, else git HEAD only while no file differs
    from it, else "unknown". A copied working tree (the device machine's) can hold a .git whose HEAD is far
    older than its files, so a HEAD with changes on top is never recorded as the commit."""
    if explicit:
        return explicit, "--commit"
    if os.environ.get("BAYESNCL_COMMIT", "").strip():
        return os.environ["BAYESNCL_COMMIT"].strip(), "BAYESNCL_COMMIT"
    fix = "pass --commit or set BAYESNCL_COMMIT"
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              timeout=10)
        if head.returncode != 0 or not head.stdout.strip():
            return "unknown", f"no git HEAD here; {fix}"
        # no optional locks: other processes may be committing in this checkout
        status = subprocess.run(["git", "--no-optional-locks", "status", "--porcelain"], cwd=ROOT,
                                capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        return "unknown", f"git failed ({type(e).__name__}); {fix}"
    sha = head.stdout.strip()
    if status.returncode != 0:
        return "unknown", f"git status failed with HEAD {sha}; {fix}"
    changed = len(status.stdout.splitlines())
    if changed:
        return "unknown", f"{changed} paths changed or untracked against git HEAD {sha}; {fix}"
    return sha, "git HEAD, no file changed"


def tail(path: Path, n: int = 1500) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""


# ---------------------------------------------------------------- test data (written once, in the work dir)

def write_cifar100(root: Path, n_train: int, n_test: int, seed: int = 0) -> Path:
    """Random uint8 images in torchvision's CIFAR-100 pickle layout (what bayesncl.data.cifar reads)."""
    folder = root / "cifar-100-python"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for name, n in (("train", n_train), ("test", n_test)):
        entry = {"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
                 "fine_labels": rng.integers(0, 100, n).tolist()}
        with open(folder / name, "wb") as fh:
            pickle.dump(entry, fh)
    with open(folder / "meta", "wb") as fh:
        pickle.dump({"fine_label_names": [f"class{i}" for i in range(100)]}, fh)
    return root


def write_jpeg_tree(root: Path, n_files: int, n_classes: int = 4, seed: int = 0) -> list[str]:
    """<root>/train/<wnid>/*.JPEG, 500x375 photo-like JPEGs (smooth structure + grain, quality 90: about
    100 KB each, near ImageNet's mean file size). Returns the wnids."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    wnids = [f"n{9000000 + i:08d}" for i in range(n_classes)]
    for i in range(n_files):
        low = rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)
        im = np.asarray(Image.fromarray(low).resize((500, 375), Image.Resampling.BICUBIC), dtype=np.int16)
        im = np.clip(im + rng.integers(-25, 26, im.shape, dtype=np.int16), 0, 255).astype(np.uint8)
        folder = root / "train" / wnids[i % n_classes]
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(im).save(folder / f"img_{i:05d}.JPEG", quality=90)
    return wnids


# ---------------------------------------------------------------- the check

class Check:
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
            if elapsed > self.budget_s:
                self.report["steps"][name] = {"status": "skipped", "seconds": 0.0,
                                              "error": f"time budget of {self.budget_s:.0f} s spent"}
                continue
            print(f"\n== {name} ({elapsed:.0f} s elapsed)", flush=True)
            t0 = time.perf_counter()
            entry: dict = {}
            try:
                entry["result"] = getattr(self, name)()
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

    # ------------------------------------------------------------ 1. CUDA tests
    def cuda_tests(self) -> dict:
        nodes = cuda_test_ids(ROOT / "tests")
        if not nodes:
            raise StepFailed("no test in tests/ is marked to skip without CUDA; the discovery pattern is stale")
        xml = self.work / "cuda_tests.xml"
        log = self.work / "cuda_tests.log"
        with open(log, "wb") as fh:
            r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                                f"--junitxml={xml}", *nodes], cwd=ROOT, env=self.env, stdout=fh,
                               stderr=subprocess.STDOUT, timeout=self.s.subprocess_timeout)
        counts = junit_counts(xml)
        res = {"tests": nodes, **counts, "pytest_exit": r.returncode}
        if counts["failures"] or counts["errors"]:
            raise StepFailed(f"{counts['failures']} failed, {counts['errors']} errors: {tail(log)}")
        if self.device.type == "cuda":
            if counts["skipped"] or counts["passed"] == 0:
                raise StepFailed(f"{counts['skipped']} of {counts['tests']} CUDA tests skipped on a CUDA "
                                 f"device: {tail(log)}")
        else:
            res["note"] = f"no CUDA here: {counts['skipped']} of {counts['tests']} CUDA tests skipped"
        return res

    # ------------------------------------------------------------ 1b. SIGTERM + resume through the CLI
    def sigterm_resume(self) -> dict:
        """Eager (the bit-identical resume the trainer promises); on CUDA also the step captured in a CUDA graph
        (recorded, not required: a resumed process captures its own graph)."""
        res = self._sigterm_resume(self.s.sig_sets + self.device_sets(), self.work / "sigterm")
        if self.device.type == "cuda":
            try:
                res[CAPTURED] = self._sigterm_resume(self.s.sig_sets + self.device_sets() + [f"train.graph={CAPTURED}"],
                                                     self.work / f"sigterm_{CAPTURED}")
            except StepFailed as e:
                res[CAPTURED] = {"identical": False, "error": str(e)[:1000]}
        return res

    def _sigterm_resume(self, sets: list[str], base: Path) -> dict:
        from bayesncl.train import REQUEUE_EXIT

        base.mkdir()
        t0 = time.perf_counter()
        ref = self.cli("pretrain", "--out", str(base / "ref"), sets=sets, log=base / "ref.log")
        if ref.returncode != 0:
            raise StepFailed(f"uninterrupted run exited {ref.returncode}: {tail(base / 'ref.log')}")
        ref_seconds = time.perf_counter() - t0
        attempts = []
        for i, frac in enumerate((0.4, 0.2, 0.6)):
            run = base / f"run{i}"
            log = base / f"run{i}.log"
            proc = self.cli("pretrain", "--out", str(run), sets=sets, log=log, wait=False)
            # Epochs 1-2 logged (warm-up over), then SIGTERM at `frac` of epoch 2's duration into epoch 3.
            lines = wait_for_log(run / "log.jsonl", 2, proc, timeout=self.s.subprocess_timeout)
            time.sleep(frac * lines[-1]["epoch_seconds"])
            proc.send_signal(signal.SIGTERM)
            try:
                code = proc.wait(timeout=self.s.subprocess_timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                raise StepFailed(f"no exit within {self.s.subprocess_timeout} s of SIGTERM: {tail(log)}")
            if code == 0:  # the run ended before the signal: try again, earlier
                attempts.append({"exit": code})
                continue
            state = torch.load(run / "checkpoint.pt", map_location="cpu", weights_only=True)
            attempts.append({"exit": code, "epoch": state["epoch"], "step": state["step"]})
            if code != REQUEUE_EXIT:
                raise StepFailed(f"SIGTERM gave exit {code}, expected {REQUEUE_EXIT}: {tail(log)}")
            if state["step"] > 0:
                break
        else:
            raise StepFailed(f"SIGTERM never landed mid-epoch in {len(attempts)} tries: {attempts}")
        if (run / "model.pt").exists():
            raise StepFailed("model.pt exists after the interrupted run")
        again = self.cli("pretrain", "--out", str(run), sets=sets, log=log)
        if again.returncode != 0:
            raise StepFailed(f"resumed run exited {again.returncode}: {tail(log)}")
        res = {"interrupted_at": attempts[-1], "attempts": len(attempts), "ref_run_seconds": round(ref_seconds, 1)}
        res.update(compare_weights(run / "model.pt", base / "ref" / "model.pt"))
        if not res["identical"]:
            # Tell a resume bug from run-to-run nondeterminism: a second uninterrupted run.
            ref2 = self.cli("pretrain", "--out", str(base / "ref2"), sets=sets, log=base / "ref2.log")
            if ref2.returncode == 0:
                res["uninterrupted_runs_identical"] = compare_weights(base / "ref2" / "model.pt",
                                                                      base / "ref" / "model.pt")["identical"]
            raise StepFailed(f"resumed weights differ from the uninterrupted run's: {res}")
        return res

    # ------------------------------------------------------------ bf16 matmul ceiling
    def matmul_peak(self) -> dict:
        n, dev = self.s.matmul_n, self.device
        a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
        b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
        for _ in range(3):
            a @ b
        sync(dev)
        reps, t0 = 50, time.perf_counter()
        for _ in range(reps):
            a @ b
        sync(dev)
        dt = time.perf_counter() - t0
        return {"n": n, "dtype": "bfloat16", "tflops": 2 * n**3 * reps / dt / 1e12}

    # ------------------------------------------------------------ 2. training throughput, the real loop
    def throughput(self) -> dict:
        """`pretrain` itself, NCL and BayesNCL, eager and (on CUDA) with the step captured in a CUDA graph."""
        from bayesncl.config import resolve
        from bayesncl.train import pretrain

        bs = self.s.batch
        data = ["data.dataset=cifar100", f"data.root={self.cifar_root}", f"train.batch_size={bs}",
                "train.warmup_epochs=1"]
        steps_in_data = self.s.cifar_train // bs
        modes = ("eager", CAPTURED) if self.device.type == "cuda" else ("eager",)
        res: dict = {"batch": bs, "model": self.s.tput_model, "precision": self.precision(),
                     "channels_last": self.device.type == "cuda", "graph_modes": list(modes)}
        for mode in modes:
            for method in ("ncl", "bayesncl"):
                key = method if mode == "eager" else f"{method}_{mode}"
                sets = self.s.tput_model + data + self.device_sets() + [
                    f"method.name={method}", f"train.precision={self.precision()}", f"train.graph={mode}"]
                # Warm-up run (kernels, allocator, autotuning), whose second epoch gives a rough rate to size
                # the timed run.
                warm_steps = min(self.s.warm_steps, steps_in_data)
                log = run_pretrain(pretrain, resolve(sets=sets + ["train.epochs=2",
                                                                 f"train.max_steps_per_epoch={warm_steps}"]),
                                   self.work / "tput" / f"{key}_warm")
                rough = log[-1]["img_per_s"]
                epoch_steps = max(3, min(steps_in_data, int(rough * self.s.tput_seconds / 3 / bs)))
                epochs = max(3, min(8, math.ceil(rough * self.s.tput_seconds / (epoch_steps * bs))))
                if self.device.type == "cuda":
                    torch.cuda.reset_peak_memory_stats(self.device)
                log = run_pretrain(pretrain, resolve(sets=sets + [f"train.epochs={epochs}",
                                                                 f"train.max_steps_per_epoch={epoch_steps}"]),
                                   self.work / "tput" / key)
                # epoch 1 holds a capture's warm-up and capture: the rate is the median of the others
                rates = [r["img_per_s"] for r in log]
                res[key] = {"img_per_s": statistics.median(rates[1:]), "epoch_rates": rates, "epochs": epochs,
                            "steps_per_epoch": epoch_steps, "graph": mode,
                            "peak_mem_mb": max((r["peak_mem_mb"] or 0) for r in log) or None,
                            "gflops_fwd_per_view": forward_flops(resolve(sets=sets)) / 1e9}
                m = res[key]
                # Per source image: two views, each forward + backward (~3x the forward).
                m["achieved_tflops"] = m["img_per_s"] * 2 * 3 * m["gflops_fwd_per_view"] / 1e3
                m["ms_per_step"] = 1e3 * bs / m["img_per_s"]
                print(f"{key:19s} {m['img_per_s']:10.1f} images/s, {m['ms_per_step']:.2f} ms/step, "
                      f"{m['achieved_tflops']:.1f} TFLOP/s, peak {m['peak_mem_mb']} MiB", flush=True)
            sfx = "" if mode == "eager" else f"_{mode}"
            res[f"overhead_pct{sfx}"] = 100 * (res[f"ncl{sfx}"]["img_per_s"] / res[f"bayesncl{sfx}"]["img_per_s"] - 1)
        peak = self.step_result("matmul_peak")
        if peak:
            for mode in modes:
                for method in ("ncl", "bayesncl"):
                    m = res[method if mode == "eager" else f"{method}_{mode}"]
                    m["peak_frac"] = m["achieved_tflops"] / peak["tflops"]
        return res

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

    # ------------------------------------------------------------ 2b. where a training step's time goes
    def step_profile(self) -> dict:
        """TrainStep's phases, NCL and BayesNCL, one batch reused: augmentation of the two views (with their
        random draws), forward + loss, backward, LARS update, the logged sums (device events between them,
        eager); and, on CUDA, the whole step replayed from its CUDA graph (one span: no phases inside a graph).
        The methods alternate step by step; medians."""
        from bayesncl.data import SimCLRAugment, iter_batches, load_split
        from bayesncl.train import TrainStep

        sys.path.insert(0, str(ROOT / "benchmarks"))
        from bench_train import after_phases

        bs, dev = self.s.batch, self.device
        warm, timed = self.s.profile_steps
        names = ("augment", "forward", "backward", "optimizer", "sums")
        res: dict = {"batch": bs, "warm_steps": warm, "timed_steps": timed, "phases": list(names)}
        steps, x = {}, None
        for method in ("ncl", "bayesncl"):
            cfg = self.step_config(method)
            train = load_split(cfg["data"], "train")
            aug = SimCLRAugment(train.crop_size, train.mean, train.std,
                                crop_scale=(cfg["train"]["crop_min_scale"], 1.0))
            model, opt, _ = self.step_model(cfg)
            steps[method] = TrainStep(model, opt, aug, cfg, dev, 1000)
            steps[method].start(0)
            if x is None:
                x = next(iter_batches(train, bs, shuffle=True, seed=0, drop_last=True, device=dev, num_workers=0))[0]
        gens = {m: torch.Generator(device=dev).manual_seed(0) for m in steps}
        rows = {m: [] for m in steps}
        for i in range(warm + timed):
            for m, st in steps.items():
                r = after_phases(st, x, gens[m])
                if i >= warm:
                    rows[m].append(r)
        for m in steps:
            per = {n: statistics.median(c) for n, c in zip(names, zip(*rows[m]))}
            per["total"] = statistics.median(sum(r) for r in rows[m])
            res[m] = {k: round(v, 3) for k, v in per.items()}
        res["bayesncl_minus_ncl_ms"] = {k: round(res["bayesncl"][k] - res["ncl"][k], 3) for k in (*names, "total")}
        if dev.type == "cuda":  # the captured step: replay time per step
            for m in ("ncl", "bayesncl"):
                cfg = self.step_config(m, graph=CAPTURED)
                train = load_split(cfg["data"], "train")
                aug = SimCLRAugment(train.crop_size, train.mean, train.std,
                                    crop_scale=(cfg["train"]["crop_min_scale"], 1.0))
                model, opt, _ = self.step_model(cfg)
                st = TrainStep(model, opt, aug, cfg, dev, 1000)
                st.start(0)
                gen = torch.Generator(device=dev).manual_seed(0)
                for _ in range(warm):
                    st(x, gen)
                ev = [torch.cuda.Event(enable_timing=True) for _ in range(timed + 1)]
                ev[0].record()
                for k in range(timed):
                    st(x, gen)
                    ev[k + 1].record()
                torch.cuda.synchronize(dev)
                res[f"{m}_{CAPTURED}_ms"] = round(statistics.median(a.elapsed_time(b) for a, b in zip(ev, ev[1:])), 3)
                del st, model, opt
            res[f"overhead_pct_{CAPTURED}"] = 100 * (res[f"bayesncl_{CAPTURED}_ms"] / res[f"ncl_{CAPTURED}_ms"] - 1)
        print("step profile (ms): " + "; ".join(f"{m} " + ", ".join(f"{k} {res[m][k]:.2f}" for k in (*names, "total"))
                                                 for m in ("ncl", "bayesncl"))
              + "".join(f"; {m} captured {res[f'{m}_{CAPTURED}_ms']:.2f}" for m in ("ncl", "bayesncl")
                        if f"{m}_{CAPTURED}_ms" in res), flush=True)
        return res

    # ------------------------------------------------------------ 3. the released code's way of feeding CIFAR
    def official_feed(self) -> dict:
        from torch.utils.data import DataLoader, RandomSampler

        from bayesncl.data import load_split
        from bayesncl.optim import lr_at, set_lr
        from bayesncl.runtime import autocast

        bs, dev = self.s.batch, self.device
        cfg = self.step_config("ncl")
        train = load_split(cfg["data"], "train")
        ds = PILCifar(np.ascontiguousarray(train.images.permute(0, 2, 3, 1).numpy()), train.labels.tolist(),
                      TwoViews(official_transform(32, train.mean, train.std)))
        sampler = RandomSampler(ds, num_samples=10**7)  # no epoch ends (and worker restarts) inside the window
        loader = DataLoader(ds, batch_size=bs, sampler=sampler, num_workers=self.workers, drop_last=True,
                            pin_memory=dev.type == "cuda")
        model, opt, cl = self.step_model(cfg)
        skip = self.workers + 2  # the first batches arrive together (every worker starts at once)
        t0, n, i = None, 0, 0
        for i, ((v1, v2), _) in enumerate(loader):
            if i == skip:
                sync(dev)
                t0, n = time.perf_counter(), 0
            v1, v2 = (v.to(dev, non_blocking=True) for v in (v1, v2))
            if cl:
                v1, v2 = (v.contiguous(memory_format=torch.channels_last) for v in (v1, v2))
            set_lr(opt, lr_at(i, 200, cfg["train"]))
            with autocast(dev, cfg["train"]["precision"]):
                loss, _ = model.training_loss(v1, v2)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if t0 is not None:
                n += bs
                if time.perf_counter() - t0 >= self.s.feed_seconds:
                    break
        sync(dev)
        if t0 is None:
            raise StepFailed(f"only {i + 1} batches arrived")
        rate = n / (time.perf_counter() - t0)
        del loader
        res = {"workers": self.workers, "img_per_s": rate, "batches_timed": n // bs}
        ours = self.step_result("throughput")
        if ours:
            res["ours_img_per_s"] = ours["ncl"]["img_per_s"]
            res["ratio"] = ours["ncl"]["img_per_s"] / rate
        print(f"official-style feed: {rate:.1f} images/s with {self.workers} workers", flush=True)
        return res

    # ------------------------------------------------------------ 4. ImageNet-100 input path
    def imagenet_input(self) -> dict:
        from bayesncl.data import IMAGENET_MEAN, IMAGENET_STD, SimCLRAugment, iter_batches
        from bayesncl.data.imagenet import PreparedImages, decode_image, load_imagenet100, prepare_imagenet100

        root, cache = self.work / "jpeg", self.work / "jpeg_cache"
        wnids = write_jpeg_tree(root, self.s.jpeg_files)
        ds = load_imagenet100(root, "train", classes=wnids, prepared=False)
        files = ds.dataset.paths
        mean_kb = sum(os.path.getsize(p) for p in files) / len(files) / 1024
        cuda = self.device.type == "cuda"

        def per_core(fn) -> float:  # in process, one core
            t0, n = time.perf_counter(), 0
            while time.perf_counter() - t0 < self.s.jpeg_seconds / 2:
                n += fn(n)
            return n / (time.perf_counter() - t0)

        decode_rate = per_core(lambda i: (decode_image(files[i % len(files)], ds.stored_size), 1)[1])
        # The prepared copy (bayesncl prepare-imagenet): decoded once, then read through a memory map.
        t0 = time.perf_counter()
        prepare_imagenet100(root, "train", classes=wnids, cache_dir=cache, workers=self.workers)
        prepare_s = time.perf_counter() - t0
        prep = load_imagenet100(root, "train", classes=wnids, cache_dir=cache)
        if not isinstance(prep.dataset, PreparedImages):
            raise StepFailed("the loader did not read the prepared copy it was just given")
        same = all(torch.equal(prep.dataset[i][0], ds.dataset[i][0]) for i in range(len(files)))
        if not same:
            raise StepFailed("the prepared images differ from the decoded JPEGs")
        gidx = torch.Generator().manual_seed(0)
        # Reading a batch into page-locked memory (on CUDA), the CPU's whole share of a prepared batch.
        fetch_rate = per_core(lambda i: prep.dataset.fetch(
            torch.randint(len(files), (self.s.jpeg_batch,), generator=gidx), pin=cuda)[0].shape[0])

        # Through iter_batches, feeding the on-device 224 px crops of two views.
        reps = 100_000 // len(files) + 1
        big, big_prep = repeated(ds, reps), repeated(prep, reps)
        aug = SimCLRAugment(ds.crop_size, IMAGENET_MEAN, IMAGENET_STD)
        gen = torch.Generator(device=self.device).manual_seed(0)

        def fed(source, workers: int) -> float:
            t0, n = None, 0
            batches = iter_batches(source, self.s.jpeg_batch, shuffle=True, seed=0, drop_last=True,
                                   device=self.device, num_workers=workers)
            for i, (x, _, _) in enumerate(batches):
                aug(x, gen), aug(x, gen)  # the two views training makes
                if i == workers + 1:  # after the first batch of every worker
                    sync(self.device)
                    t0, n = time.perf_counter(), 0
                elif t0 is not None:
                    n += x.shape[0]
                    if time.perf_counter() - t0 >= self.s.jpeg_seconds:
                        break
            sync(self.device)
            batches.close()
            return n / (time.perf_counter() - t0)

        rates, prep_rates = {}, {}
        for workers in sorted({1, self.workers}):
            rates[workers] = fed(big, workers)
            prep_rates[workers] = fed(big_prep, workers)
            print(f"ImageNet-100 feed, {workers:2d} workers: JPEG {rates[workers]:8.1f}, prepared "
                  f"{prep_rates[workers]:8.1f} images/s", flush=True)
        return {"files": len(files), "size": "500x375", "mean_kb": mean_kb, "stored_size": ds.stored_size,
                "crop": ds.crop_size, "decode_img_per_s_1core": decode_rate,
                "img_per_s_1_worker": rates[1], "workers": self.workers,
                "img_per_s_all_workers": rates[self.workers],
                "img_per_s_per_worker_all": rates[self.workers] / self.workers,
                "prepare_img_per_s": len(files) / prepare_s, "prepared_identical": same,
                "prepared_fetch_img_per_s_1core": fetch_rate,
                "prepared_img_per_s_1_worker": prep_rates[1],
                "prepared_img_per_s_all_workers": prep_rates[self.workers]}

    # ------------------------------------------------------------ 5. a real run through the CLI
    def cli_end_to_end(self) -> dict:
        base = self.work / "e2e"
        base.mkdir()
        run = base / "run"
        sets = self.s.e2e_sets + self.device_sets()
        t0 = time.perf_counter()
        p = self.cli("pretrain", "--out", str(run), sets=sets, log=base / "pretrain.log")
        if p.returncode != 0:
            raise StepFailed(f"pretrain exited {p.returncode}: {tail(base / 'pretrain.log')}")
        t1 = time.perf_counter()
        e = self.cli("evaluate", "--checkpoint", str(run / "model.pt"), "--out", str(run / "eval"), "--only",
                     *E2E_SECTIONS, sets=["eval.probe=fast"], log=base / "evaluate.log")
        if e.returncode != 0:
            raise StepFailed(f"evaluate exited {e.returncode}: {tail(base / 'evaluate.log')}")
        missing = [name for name in E2E_SECTIONS if not (run / "eval" / f"{name}.json").is_file()]
        if missing:
            raise StepFailed(f"evaluate exited 0 but wrote no {', '.join(f'eval/{n}.json' for n in missing)}")
        m = {}
        for name in E2E_SECTIONS:
            m.update(json.loads((run / "eval" / f"{name}.json").read_text()))
        log = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines() if line.strip()]
        return {"pretrain_seconds": round(t1 - t0, 1), "evaluate_seconds": round(time.perf_counter() - t1, 1),
                "epochs": len(log), "loss": [round(r["loss"], 4) for r in log],
                "sc": m["interpretability"].get("sc"), "probe_top1": m["linear_probe"].get("top1"),
                "cost": m["cost"], "sections": sorted(m)}

    # ------------------------------------------------------------ 6. the paper grid's GPU-hours
    def grid_estimate(self) -> dict:
        import yaml

        from bayesncl.grid import expand_grid

        tput = self.step_result("throughput")
        if not tput:
            raise StepFailed("needs the throughput step's measured rates")
        # The rate of the captured step where it was measured (what a grid run with train.graph set would get).
        mode = CAPTURED if f"ncl_{CAPTURED}" in tput else "eager"
        rates = {m: tput[m if mode == "eager" else f"{m}_{mode}"] for m in ("ncl", "bayesncl")}
        wf = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())
        runs = expand_grid(wf)
        est = estimate_grid([r.config for r in runs.values()], rates)
        est["rates_from"] = f"train.graph={mode}"
        feed = self.step_result("imagenet_input")
        if feed and "imagenet100" in est["per_dataset"]:
            need = est["per_dataset"]["imagenet100"]["img_per_s_resnet18"]
            est["imagenet_img_per_s_needed"] = need
            est["imagenet_cpus_per_gpu_jpeg"] = cpus_per_gpu(need, feed["img_per_s_per_worker_all"])
            if "prepared_fetch_img_per_s_1core" in feed:  # a run from before the prepared copy has none
                est["imagenet_cpus_per_gpu"] = cpus_per_gpu(need, feed["prepared_fetch_img_per_s_1core"])
            else:
                est["imagenet_cpus_per_gpu"] = est["imagenet_cpus_per_gpu_jpeg"]
        return est


    # ------------------------------------------------------------ 7. the step compiled whole (train.graph=compile)
    def compiled_step(self) -> dict:
        """`pretrain` with train.graph=compile (torch.compile of the whole step, CUDA graphs on CUDA), NCL and
        BayesNCL, 3 epochs: the compile (and CUDA-graph capture) seconds, logged apart from the epochs', and the
        rate of epochs 2-3."""
        if self.device.type != "cuda":
            return {"note": "measured on CUDA only (on CPU the compile takes minutes; tests/test_step_compile.py "
                            "checks the compiled step against eager)"}
        from bayesncl.config import resolve
        from bayesncl.train import pretrain

        bs = self.s.batch
        tput = self.step_result("throughput") or {}
        steps = tput.get("ncl", {}).get("steps_per_epoch", max(3, self.s.cifar_train // bs // 4))
        res: dict = {"batch": bs, "steps_per_epoch": steps}
        for method in ("ncl", "bayesncl"):
            sets = self.s.tput_model + self.device_sets() + [
                "data.dataset=cifar100", f"data.root={self.cifar_root}", f"train.batch_size={bs}",
                "train.warmup_epochs=1", f"method.name={method}", f"train.precision={self.precision()}",
                "train.graph=compile", "train.epochs=3", f"train.max_steps_per_epoch={steps}"]
            log = run_pretrain(pretrain, resolve(sets=sets), self.work / "tput" / f"{method}_compile")
            rate = statistics.median([r["img_per_s"] for r in log[1:]])
            res[method] = {"img_per_s": rate, "first_epoch_s": log[0]["epoch_seconds"],
                           "compile_s": log[0].get("compile_seconds"), "ms_per_step": 1e3 * bs / rate}
            if method in tput and "gflops_fwd_per_view" in tput[method]:
                res[method]["achieved_tflops"] = rate * 2 * 3 * tput[method]["gflops_fwd_per_view"] / 1e3
                peak = self.step_result("matmul_peak")
                if peak:
                    res[method]["peak_frac"] = res[method]["achieved_tflops"] / peak["tflops"]
            print(f"{method:9s} {rate:10.1f} images/s with train.graph=compile (compile: "
                  f"{log[0].get('compile_seconds', float('nan')):.1f} s; epoch 1: {log[0]['epoch_seconds']:.1f} s)",
                  flush=True)
        res["overhead_pct"] = 100 * (res["ncl"]["img_per_s"] / res["bayesncl"]["img_per_s"] - 1)
        return res


# ---------------------------------------------------------------- helpers the steps share (tested alone)

def cpus_per_gpu(need_img_per_s: float, per_core_img_per_s: float) -> int:
    """CPUs to ask for per GPU: enough feeding cores for the GPU's images/s, plus one for the training process."""
    return math.ceil(need_img_per_s / per_core_img_per_s) + 1


def repeated(ds, reps: int):
    """A file-backed split ``reps`` times over (JPEG files or a prepared copy): one long epoch to time, so
    loader workers start once per measure, as in training."""
    from bayesncl.data.imagenet import ImageFileDataset

    d = ds.dataset
    d = ImageFileDataset(d.paths * reps, d.labels * reps, d.stored_size) if isinstance(d, ImageFileDataset) \
        else _Repeated(d, reps)
    return dataclasses.replace(ds, dataset=d, labels=ds.labels.repeat(reps))


class _Repeated(torch.utils.data.Dataset):
    """A prepared split ``reps`` times over (index i is image i mod N)."""

    def __init__(self, dataset, reps: int) -> None:
        self.dataset, self.n, self.reps, self.stored_size = dataset, len(dataset), reps, dataset.stored_size

    def __len__(self) -> int:
        return self.n * self.reps

    def __getitem__(self, i):
        return self.dataset[i % self.n]

    def fetch(self, idx, pin: bool = False):
        return self.dataset.fetch(torch.as_tensor(idx) % self.n, pin)


def cuda_test_ids(tests: Path) -> list[str]:
    """Node ids of the tests that skip without CUDA: functions under a skipif naming cuda, or whole files
    with such a module-level pytestmark."""
    deco = re.compile(r"@pytest\.mark\.skipif\([^\n]*cuda[^\n]*\n(?:[ \t]*@[^\n]*\n)*[ \t]*def (test_\w+)")
    ids = []
    for path in sorted(tests.glob("test_*.py")):
        text = path.read_text()
        rel = path.relative_to(tests.parent).as_posix()
        if re.search(r"^pytestmark\s*=.*skipif\([^\n]*cuda", text, re.M):
            ids.append(rel)
            continue
        ids += [f"{rel}::{name}" for name in deco.findall(text)]
    return ids


def junit_counts(xml: Path) -> dict:
    root = ET.parse(xml).getroot()
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    c = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    c["passed"] = c["tests"] - c["failures"] - c["errors"] - c["skipped"]
    return c


def wait_for_log(path: Path, epochs: int, proc: subprocess.Popen, timeout: float) -> list[dict]:
    """Poll a training log.jsonl (written atomically) until it has `epochs` lines."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        if path.exists():
            lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            if len(lines) >= epochs:
                return lines
        if proc.poll() is not None:
            raise StepFailed(f"training exited ({proc.returncode}) before epoch {epochs} was logged")
        time.sleep(0.005)
    proc.kill()
    raise StepFailed(f"epoch {epochs} was not logged within {timeout:.0f} s")


def compare_weights(a: Path, b: Path) -> dict:
    sa = torch.load(a, map_location="cpu", weights_only=True)["model"]
    sb = torch.load(b, map_location="cpu", weights_only=True)["model"]
    if sa.keys() != sb.keys():
        return {"identical": False, "max_abs_diff": None, "differing_tensors": sorted(set(sa) ^ set(sb))}
    diff = [k for k in sa if not torch.equal(sa[k], sb[k])]
    mx = max((float((sa[k].double() - sb[k].double()).abs().max()) for k in diff), default=0.0)
    return {"identical": not diff, "max_abs_diff": mx, "differing_tensors": len(diff), "tensors": len(sa)}


def run_pretrain(pretrain, cfg: dict, out: Path) -> list[dict]:
    pretrain(cfg, out, progress=False)
    return [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines() if line.strip()]


def crop_size(cfg: dict) -> int:
    return int(cfg["data"].get("imagenet_crop_size", 224)) if cfg["data"]["dataset"] == "imagenet100" else 32


def forward_flops(cfg: dict) -> float:
    """Counted forward FLOPs of one training view (backbone + projector + gating head), built on the meta
    device (no weights, no compute)."""
    from bayesncl.evaluation.cost import count_flops_per_image
    from bayesncl.methods import build_method

    s = crop_size(cfg)
    with torch.device("meta"):
        model = build_method(cfg).train()
    return count_flops_per_image(model, torch.randn(2, 3, s, s, device="meta"))


def estimate_grid(configs: list[dict], tput: dict) -> dict:
    """GPU-hours of pretraining every config, each at the measured rate of its method family scaled by
    counted FLOPs: rate(run) = rate(measured model) x F(measured) / F(run). (Assumes the same achieved
    FLOP/s; 224 px convolutions usually run more efficiently than 32 px ones, so ImageNet-100 is likely
    overestimated.) The linear probe (paper protocol: forward of one view per image per epoch) is added at
    1/6 of a training image's cost."""
    flops: dict = {}
    per_ds: dict = {}
    total_s = probe_s = 0.0
    for cfg in configs:
        gated = cfg["method"]["name"] == "bayesncl"  # only the gating head adds FLOPs to backbone + projector
        key = json.dumps([cfg["model"], gated and cfg["method"]["head_depth"], crop_size(cfg)], sort_keys=True)
        if key not in flops:
            flops[key] = forward_flops(cfg)
        ref = tput["bayesncl" if cfg["method"]["name"] == "bayesncl" else "ncl"]
        rate = ref["img_per_s"] * ref["gflops_fwd_per_view"] * 1e9 / flops[key]
        ds = cfg["data"]["dataset"]
        n = TRAIN_IMAGES[ds]
        bs = cfg["train"]["batch_size"]
        seconds = cfg["train"]["epochs"] * (n // bs) * bs / rate
        probe = cfg["eval"]["probe_epochs"] * n / (6 * rate) if cfg["eval"]["probe"] == "paper" else 0.0
        d = per_ds.setdefault(ds, {"jobs": 0, "gpu_hours": 0.0, "probe_gpu_hours": 0.0})
        d["jobs"] += 1
        d["gpu_hours"] += seconds / 3600
        d["probe_gpu_hours"] += probe / 3600
        total_s += seconds
        probe_s += probe
        plain = cfg["model"]["arch"] == "resnet18" and cfg["method"]["name"] in ("ncl", "bayesncl") and \
            cfg["method"]["head_depth"] == 2 and cfg["model"]["proj_dim"] in (256, 2048)
        if plain and cfg["method"]["gate"] == "ste" and cfg["method"]["detach"]:
            d.setdefault("minutes_per_run", {})[cfg["method"]["name"]] = seconds / 60
            if ds == "imagenet100":
                d["img_per_s_resnet18"] = max(rate, d.get("img_per_s_resnet18", 0.0))
    return {"jobs": len(configs), "pretrain_gpu_hours": total_s / 3600, "probe_gpu_hours": probe_s / 3600,
            "per_dataset": per_ds, "paper_minutes_cifar100": PAPER_MINUTES}


class PILCifar(torch.utils.data.Dataset):
    """torchvision.datasets.CIFAR100's item path on in-memory HWC uint8 arrays: PIL image -> transform."""

    def __init__(self, data: np.ndarray, targets: list[int], transform):
        self.data, self.targets, self.transform = data, targets, transform

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int):
        from PIL import Image

        return self.transform(Image.fromarray(self.data[i])), self.targets[i]


class TwoViews:
    def __init__(self, t):
        self.t = t

    def __call__(self, img):
        return self.t(img), self.t(img)


class PILGaussianBlur:
    """The SimCLR-family codes' blur: PIL's GaussianBlur with sigma ~ U[0.1, 2.0]."""

    def __call__(self, img):
        from PIL import ImageFilter

        return img.filter(ImageFilter.GaussianBlur(radius=random.uniform(0.1, 2.0)))


def official_transform(size: int, mean, std):
    from torchvision import transforms as T

    return T.Compose([
        T.RandomResizedCrop(size, scale=(0.08, 1.0), interpolation=T.InterpolationMode.BICUBIC),
        T.RandomApply([T.ColorJitter(0.8, 0.8, 0.8, 0.2)], p=0.8),
        T.RandomGrayscale(p=0.2),
        T.RandomApply([PILGaussianBlur()], p=0.5),
        T.RandomHorizontalFlip(),
        T.ToTensor(),
        T.Normalize(mean, std),
    ])


# ---------------------------------------------------------------- summary

def targets(steps: dict) -> list[dict]:
    def res(name):
        e = steps.get(name)
        return e.get("result") if e and e["status"] == "ok" else None

    def overhead(name, v):
        return {"name": name, "value": f"{v:+.2f}%",
                "target": f"<= {TARGETS['overhead_pct_max']:g}% (paper 5.9%), goal {TARGETS['overhead_pct_goal']:g}%",
                "pass": v <= TARGETS["overhead_pct_max"], "goal": v <= TARGETS["overhead_pct_goal"]}

    def peak(name, v):
        return {"name": name, "value": f"{100 * v:.1f}%",
                "target": f">= {100 * TARGETS['peak_frac_min']:g}%, goal {100 * TARGETS['peak_frac_goal']:g}%",
                "pass": v >= TARGETS["peak_frac_min"], "goal": v >= TARGETS["peak_frac_goal"]}

    out = []
    t = res("throughput")
    if t:
        for mode in t.get("graph_modes", ["eager"]):
            sfx = "" if mode == "eager" else f"_{mode}"
            out.append(overhead(f"BayesNCL time overhead over NCL, train.graph={mode}", t[f"overhead_pct{sfx}"]))
            for m in ("ncl", "bayesncl"):
                if "peak_frac" in t[f"{m}{sfx}"]:
                    out.append(peak(f"{m} achieved / bf16 matmul peak, train.graph={mode}", t[f"{m}{sfx}"]["peak_frac"]))
    c = res("compiled_step")
    if c and "overhead_pct" in c:
        out.append(overhead("BayesNCL time overhead over NCL, train.graph=compile", c["overhead_pct"]))
        for m in ("ncl", "bayesncl"):
            if "peak_frac" in c[m]:
                out.append(peak(f"{m} achieved / bf16 matmul peak, train.graph=compile", c[m]["peak_frac"]))
    f = res("official_feed")
    if f and "ratio" in f:
        out.append({"name": "ours / official-style feed (NCL)", "value": f"{f['ratio']:.2f}x",
                    "target": f">= {TARGETS['feed_ratio_min']:g}x", "pass": f["ratio"] >= TARGETS["feed_ratio_min"]})
    return out


def _fmt(x, nd=1) -> str:
    if isinstance(x, float):
        return f"{x:,.{nd}f}"
    return "-" if x is None else str(x)


def key_figures(name: str, r: dict) -> str:
    if name == "cuda_tests":
        return r.get("note") or f"{r['passed']} of {r['tests']} passed"
    if name == "sigterm_resume":
        a = r["interrupted_at"]
        s = f"exit {a['exit']} at epoch {a['epoch'] + 1} step {a['step']}; resumed weights identical: {r['identical']}"
        if CAPTURED in r:
            s += f"; with train.graph={CAPTURED}: {r[CAPTURED].get('identical')}"
        return s
    if name == "matmul_peak":
        return f"{r['n']}^3 {r['dtype']}: {_fmt(r['tflops'])} TFLOP/s"
    if name == "throughput":
        s = ""
        for mode in r.get("graph_modes", ["eager"]):
            sfx = "" if mode == "eager" else f"_{mode}"
            parts = [f"{m} {_fmt(r[m + sfx]['img_per_s'], 0)} img/s ({_fmt(r[m + sfx].get('ms_per_step'), 2)} ms), "
                     f"{_fmt(r[m + sfx]['achieved_tflops'])} TFLOP/s, peak {_fmt(r[m + sfx]['peak_mem_mb'], 0)} MiB"
                     for m in ("ncl", "bayesncl")]
            s += f"{'; ' if s else ''}{mode}: " + "; ".join(parts) + f"; overhead {r['overhead_pct' + sfx]:+.2f}%"
        return s
    if name == "step_profile":
        d = r["bayesncl_minus_ncl_ms"]
        names = r.get("phases", ("augment", "forward", "backward", "optimizer"))
        s = ("eager ms per step, NCL / BayesNCL: "
             + ", ".join(f"{k} {_fmt(r['ncl'][k], 2)} / {_fmt(r['bayesncl'][k], 2)}" for k in (*names, "total"))
             + "; BayesNCL's extra: " + ", ".join(f"{k} {d[k]:+.2f}" for k in (*names, "total")))
        if f"ncl_{CAPTURED}_ms" in r:
            s += (f"; captured ({CAPTURED}) NCL / BayesNCL {_fmt(r[f'ncl_{CAPTURED}_ms'], 2)} / "
                  f"{_fmt(r[f'bayesncl_{CAPTURED}_ms'], 2)} ms, overhead {r[f'overhead_pct_{CAPTURED}']:+.2f}%")
        return s
    if name == "compiled_step":
        if "note" in r:
            return r["note"]
        return (", ".join(f"{m} {_fmt(r[m]['img_per_s'], 0)} img/s ({_fmt(r[m]['ms_per_step'], 2)} ms, compile "
                          f"{_fmt(r[m].get('compile_s'))} s)" for m in ("ncl", "bayesncl"))
                + f"; overhead {r['overhead_pct']:+.2f}%")
    if name == "official_feed":
        s = f"{_fmt(r['img_per_s'], 0)} img/s with {r['workers']} workers"
        return s + (f"; ours {_fmt(r['ratio'], 2)}x" if "ratio" in r else "")
    if name == "imagenet_input":
        s = (f"JPEG: decode {_fmt(r['decode_img_per_s_1core'], 0)} img/s/core; "
             f"1 worker {_fmt(r['img_per_s_1_worker'], 0)}, "
             f"{r['workers']} workers {_fmt(r['img_per_s_all_workers'], 0)} img/s "
             f"({_fmt(r['img_per_s_per_worker_all'], 0)} per worker)")
        if "prepared_fetch_img_per_s_1core" in r:
            s += (f"; prepared copy: read {_fmt(r['prepared_fetch_img_per_s_1core'], 0)} img/s/core, "
                  f"1 thread {_fmt(r['prepared_img_per_s_1_worker'], 0)}, {r['workers']} threads "
                  f"{_fmt(r['prepared_img_per_s_all_workers'], 0)} img/s, same pixels: {r['prepared_identical']}")
        return s
    if name == "cli_end_to_end":
        return (f"{r['epochs']} epochs in {r['pretrain_seconds']} s, evaluate {r['evaluate_seconds']} s; "
                f"SC {_fmt(r['sc'])}, probe top-1 {_fmt(r['probe_top1'])}")
    if name == "grid_estimate":
        s = f"{r['jobs']} jobs, {_fmt(r['pretrain_gpu_hours'])} GPU-h pretraining + {_fmt(r['probe_gpu_hours'])} probe"
        return s + (f"; ImageNet-100: {r['imagenet_cpus_per_gpu']} CPUs/GPU" if "imagenet_cpus_per_gpu" in r else "")
    return ""


def markdown(report: dict) -> str:
    i = report["info"]
    lines = [f"# GPU check: {i.get('gpu', i['device'])}{' (tiny)' if i['tiny'] else ''}", "",
             f"date {i['date']}, commit {i['commit']}"
             + (f" ({i['commit_source']})" if i.get("commit") == "unknown" and i.get("commit_source") else "")
             + f", torch {i['torch']}, timm {i.get('timm')}"
             + (f" (CUDA {i['cuda']})" if "cuda" in i else "") + f", {i['cpus']} CPUs"
             + (f", total {i['total_seconds']} s" if "total_seconds" in i else "")
             + (f"; steps marked (previous run) are from {i['previous_run']['date']}, commit "
                f"{i['previous_run']['commit']}" if i.get("previous_run") else ""), "",
             "| step | status | seconds | figures |", "|---|---|---|---|"]
    for name, e in report["steps"].items():
        if e["status"] == "ok":
            try:
                fig = key_figures(name, e["result"])
            except (KeyError, TypeError) as exc:
                fig = f"(summary failed: {exc})"
        else:
            fig = e.get("error", "")[:300].replace("\n", " ")
        status = e["status"] + (" (previous run)" if e.get("from_previous") else "")
        lines.append(f"| {name} | {status} | {e['seconds']} | {fig.replace('|', '/')} |")
    if report["targets"]:
        lines += ["", "## Targets", ""]
        lines += [f"- {'PASS' if t['pass'] else 'FAIL'}{' (goal met)' if t.get('goal') else ''}: {t['name']} "
                  f"{t['value']} (target {t['target']})" for t in report["targets"]]
    g = report["steps"].get("grid_estimate", {})
    if g.get("status") == "ok":
        r = g["result"]
        lines += ["", "## Paper grid (config/paper.yaml), estimated from the measured rate", "",
                  "| dataset | jobs | pretrain GPU-h | probe GPU-h | minutes per run (NCL / BayesNCL) |",
                  "|---|---|---|---|---|"]
        for ds, d in r["per_dataset"].items():
            mins = d.get("minutes_per_run", {})
            lines.append(f"| {ds} | {d['jobs']} | {_fmt(d['gpu_hours'])} | {_fmt(d['probe_gpu_hours'])} | "
                         f"{_fmt(mins.get('ncl'))} / {_fmt(mins.get('bayesncl'))} |")
        p = r["paper_minutes_cifar100"]
        lines += ["", f"Total: {r['jobs']} pretraining jobs, {_fmt(r['pretrain_gpu_hours'])} GPU-hours, plus "
                  f"{_fmt(r['probe_gpu_hours'])} for the paper-protocol linear probes. Paper, CIFAR-100 "
                  f"(200 epochs): {p['ncl']} / {p['bayesncl']} minutes per run (NCL / BayesNCL)."]
        if "imagenet_cpus_per_gpu" in r:
            lines.append(f"ImageNet-100 needs about {_fmt(r['imagenet_img_per_s_needed'], 0)} images/s per GPU: "
                         f"{r['imagenet_cpus_per_gpu']} CPUs per GPU from the prepared copy (reading cores + 1; "
                         f"decoding the JPEGs: {r.get('imagenet_cpus_per_gpu_jpeg', '-')}).")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda", help="cuda or cpu (default cuda)")
    p.add_argument("--out", required=True, metavar="DIR", help="where gpu_check.json and gpu_check.md go")
    p.add_argument("--tiny", action="store_true", help="tiny sizes: every step end to end in a minute or two")
    p.add_argument("--only", nargs="+", choices=STEPS, default=list(STEPS), metavar="STEP",
                   help=f"run these steps only ({', '.join(STEPS)})")
    p.add_argument("--previous", metavar="JSON",
                   help="a gpu_check.json whose results stand in for the steps not run now (with --only)")
    p.add_argument("--budget-s", type=float, default=360.0,
                   help="start no step after this many seconds (default 360)")
    p.add_argument("--commit", help="the commit recorded for this run (default: $BAYESNCL_COMMIT, else git HEAD "
                   "if no file differs from it, else 'unknown'); give it where the tree is a copy without git")
    args = p.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("gpu_check: --device cuda: no CUDA device is visible (torch.cuda.is_available() is False); "
              "use --device cpu --tiny for the CPU run", file=sys.stderr)
        return 2
    if device.type not in ("cuda", "cpu"):
        print(f"gpu_check: --device {args.device}: use cuda or cpu", file=sys.stderr)
        return 2
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        print(f"gpu_check: --out {out}: cannot create the folder ({e.strerror}); choose a writable folder",
              file=sys.stderr)
        return 2
    previous = None
    if args.previous:
        try:
            previous = json.loads(Path(args.previous).read_text())
        except (OSError, json.JSONDecodeError) as e:
            print(f"gpu_check: --previous {args.previous}: cannot read it as a gpu_check.json ({e}); "
                  "give the file an earlier run wrote", file=sys.stderr)
            return 2
    return Check(device, args.tiny, out, args.budget_s, args.commit).run(args.only, previous)


if __name__ == "__main__":
    sys.exit(main())
