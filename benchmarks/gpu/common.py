"""What every part of the GPU check shares: the step list, targets, the two size sets, small helpers."""

from __future__ import annotations

import dataclasses
import os
import subprocess
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
BENCHMARKS = ROOT / "benchmarks"

# What the paper grid needs first (the CUDA tests, the eager step's rate of each method, resume, the ImageNet-100
# feed and the grid's cost), then the extras, each started only while the budget lasts (check.Check.run).
NEEDED = ("cuda_tests", "throughput", "sigterm_resume", "imagenet_input", "grid_estimate")
EXTRAS = ("matmul_peak", "captured_step", "step_profile", "official_feed", "cli_end_to_end", "captured_resume",
          "compiled_step")
STEPS = NEEDED + EXTRAS
# Seconds each step is planned to take, per kind of machine: what decides whether a step starts (check.Check.run)
# and what `--plan` shows. "h200": one H200 at the full sizes (the earlier runs: all of 8 steps in 232 s,
# docs/BENCHMARKS.md; throughput now times 4 methods of 8 s each; not measured as a whole). "h100": one H100, the
# H200's with the steps of fixed GPU work (not a timed window) about 1.2-1.3x slower (less memory bandwidth; a plan,
# not a measurement). "tiny": --tiny as measured on a CPU, the slower of two runs on 2 cores shared with other
# work (load average 8-9: 227 s and 301 s in all); faster on a GPU.
PLANNED_S = {
    "h200": {"cuda_tests": 45, "throughput": 75, "sigterm_resume": 45, "imagenet_input": 30, "grid_estimate": 10,
             "matmul_peak": 5, "captured_step": 35, "step_profile": 15, "official_feed": 25, "cli_end_to_end": 45,
             "captured_resume": 45, "compiled_step": 90},
    "h100": {"cuda_tests": 50, "throughput": 80, "sigterm_resume": 55, "imagenet_input": 30, "grid_estimate": 10,
             "matmul_peak": 6, "captured_step": 40, "step_profile": 20, "official_feed": 25, "cli_end_to_end": 55,
             "captured_resume": 55, "compiled_step": 110},
    "tiny": {"cuda_tests": 45, "throughput": 40, "sigterm_resume": 80, "imagenet_input": 15, "grid_estimate": 12,
             "matmul_peak": 6, "captured_step": 1, "step_profile": 12, "official_feed": 8, "cli_end_to_end": 85,
             "captured_resume": 1, "compiled_step": 1},
}
GPU_KINDS = ("h100", "h200")  # the GPUs the check is planned for (--plan shows both)
# The budget counts from the process's start (imports included, check.process_age_s): START_S of it is planned
# for the interpreter, torch's import and the device's start before the first step; RESERVE_S is kept at the end
# for the summary, the work folder's removal and the exit. A step starts only where its planned (or measured) end
# falls before the budget less RESERVE_S (`fits`); one still running then is stopped.
BUDGET_S = 300.0
TINY_BUDGET_S = 600.0  # --tiny's default: every step of it on a busy 2-core CPU (PLANNED_S["tiny"])
START_S = 10.0
RESERVE_S = 10.0
# A step that reads another's result, skipped where that one has none.
NEEDS = {"grid_estimate": "throughput"}
# The methods the paper grid trains (its eager rate is measured for each): SimCLR, NCL, Top-k NCL, BayesNCL.
GRID_METHODS = ("cl", "ncl", "topk_ncl", "bayesncl")
GRID_MODE = "eager"  # train.graph the paper grid trains in (config/paper.yaml sets none: the default)
# BayesNCL's time overhead over NCL: at most the paper's 5.9% (6%), goal 3%; achieved / bf16 matmul peak: at
# least 15%, goal 20%.
TARGETS = {"overhead_pct_max": 6.0, "overhead_pct_goal": 3.0, "feed_ratio_min": 3.0, "peak_frac_min": 0.15,
           "peak_frac_goal": 0.20, "cpus_per_gpu_goal": 8}
# The captured step, measured as an option (captured_step, captured_resume): train.graph=cudagraph.
CAPTURED = "cudagraph"
PAPER_MINUTES = {"ncl": 70.95, "bayesncl": 75.12}  # CIFAR-100, 200 epochs (Table 7)
TRAIN_IMAGES = {"cifar10": 50_000, "cifar100": 50_000, "imagenet100": 126_689}
# Every section the synthetic set supports (its own background label stands in for Waterbirds').
E2E_SECTIONS = ("features", "interpretability", "linear_probe", "retrieval", "background_probe", "dynamics", "cost")
PAPER_MODEL = ["model.arch=resnet18", "model.width=64", "model.stem=cifar", "model.cifar_padding=2",
               "model.proj_hidden=2048", "model.proj_dim=256"]


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
    tput_model=PAPER_MODEL, batch=256, cifar_train=50_000, tput_seconds=8.0, warm_steps=15, feed_seconds=15.0,
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


def gpu_kind(name: str | None) -> str:
    """The plan of PLANNED_S a device follows: an H200's by its name, any other GPU the H100's (the slower)."""
    return "h200" if name and "h200" in name.lower() else "h100"


def fits(elapsed_s: float, seconds: float, budget_s: float) -> bool:
    """Whether a step of `seconds`, started `elapsed_s` after the process's start, ends within the budget less
    RESERVE_S."""
    return elapsed_s + seconds <= budget_s - RESERVE_S


def plan(kind: str = "h200", budget_s: float = BUDGET_S, steps=STEPS) -> dict[str, float | None]:
    """The minute from the process's start each step is planned to end at on `kind` (PLANNED_S, after START_S),
    None where it does not start: in order, each step whose planned end fits the budget (`fits`), the grid's
    first, the extras after, a step whose NEEDS did not run left out."""
    t, out = START_S, {}
    for name in steps:
        need = NEEDS.get(name)
        if fits(t, PLANNED_S[kind][name], budget_s) and not (need in out and out[need] is None):
            t += PLANNED_S[kind][name]
            out[name] = t / 60
        else:
            out[name] = None
    return out


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
