"""One prepared check of the GPU path within one time budget (default 5 minutes, counted from the process's
start, imports included) on one H100 or H200: what the paper grid needs first, then extras while the budget lasts.

    PYTHONPATH=src python benchmarks/gpu_check.py --device cuda --out DIR          # at most 5 min on one H100/H200
    PYTHONPATH=src python benchmarks/gpu_check.py --plan                           # the plan per GPU; runs nothing
    PYTHONPATH=src python benchmarks/gpu_check.py --device cpu --tiny --out DIR    # every step, small, on CPU

Steps, in this order (each timed and guarded: a failing step records its error and the next one runs). What the
grid needs first:
  cuda_tests      pytest on the tests that skip without CUDA
  throughput      `bayesncl.training.train.pretrain` itself in the mode the paper grid trains in (train.graph=eager),
  each
                  of its methods (SimCLR, NCL, Top-k NCL, BayesNCL), on a CIFAR-100-format set of random images:
                  images/s, BayesNCL's overhead, peak memory, achieved FLOP/s (counted forward FLOPs x 3 for
                  forward+backward, x 2 views); the model's stem, padding and GFLOPs per view are recorded with the
                  rates (what `bayesncl estimate --measured DIR/gpu_check.json` prices from)
  sigterm_resume  `bayesncl pretrain` through the CLI, SIGTERM mid-epoch (exit 75), rerun: final weights must
                  equal an uninterrupted run's (eager, train.deterministic=true)
  imagenet_input  generated 500x375 JPEGs decoded and resized as bayesncl.data.imagenet does, and their prepared
                  copy (bayesncl prepare-imagenet), with 1 worker and one per CPU, feeding the 224 px on-device
                  crop: images/s; the CPUs per GPU to ask for come from the prepared copy's per-core rate
  grid_estimate   GPU-hours of config/paper.yaml's pretraining jobs from the measured rate, scaled by FLOPs (on a
                  CPU the jobs are priced, no GPU-hours kept: a CPU's rate is not a GPU's)
Extras after:
  matmul_peak     a large bf16 matmul: the FLOP/s ceiling the training step is compared with
  captured_step   an option the grid does not use: the throughput of the step captured in a CUDA graph
                  (train.graph=cudagraph), NCL and BayesNCL
  step_profile    where one training step's time goes, NCL and BayesNCL: augmentation (two views), forward +
                  loss, backward, LARS update, logged sums (median ms from device events after warm-up, one batch
                  reused); on CUDA also the captured step's replay time
  official_feed   the same model and optimizer fed the released code's way: per-image PIL augmentations of
                  two views in DataLoader workers (one per CPU); images/s and ours / official-style
  cli_end_to_end  `bayesncl pretrain` + `bayesncl evaluate` on synthetic 32 px data: every eval/<section>.json written
  captured_resume sigterm_resume with train.graph=cudagraph (recorded)
  compiled_step   `pretrain` with train.graph=compile (torch.compile of the whole step): compile time, images/s
The budget (--budget, default 300 s; 600 s with --tiny) counts from the process's start. A step starts only
where its time (its seconds in --previous where that ran it on the same device, else the plan's for this
machine: common.PLANNED_S, an H200's, an H100's for any other GPU, the CPU-measured one with --tiny) ends
before the budget less 10 s kept for the summary; a step still running then is stopped (its subprocesses
killed) and recorded "stopped". Each step not started is listed with why. --tiny on a CPU: 4-5 minutes on two cores busy with other work (3 min 47 s and
5 min 1 s measured at a load average of 8-9), within its default budget of 600 s.
Writes DIR/gpu_check.json and DIR/gpu_check.md after every step (so a run cut short still leaves its
figures) and prints a summary: the figures a GPU is for, each with its goal, its value ("pending: no GPU" on a
CPU) and the minute it is planned by on an H100 and an H200; the targets: BayesNCL overhead <= 6% (the paper's
5.9%; goal 3%), >= 15% of the measured bf16 matmul peak (goal 20%), >= 3x the official-style feed. The commit
recorded is --commit, else $BAYESNCL_COMMIT, else git HEAD when no file differs from it, else "unknown" (a copied
tree's .git can be older than its files).
"""

from __future__ import annotations

import time  # noqa: I001 - first: the budget's fallback clock starts before torch's import

T0 = time.monotonic()  # where /proc/self/stat is not there to say when the process started

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
# The device machine runs the project from src/ without installing it; the check's parts live in gpu/ beside
# this file.
for path in (SRC, HERE):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import torch  # noqa: E402

from gpu.check import Check, process_start  # noqa: E402
from gpu.common import (BUDGET_S, GPU_KINDS, NEEDED, PLANNED_S, RESERVE_S, START_S, STEPS, TINY_BUDGET_S,  # noqa: E402
                        plan)
from gpu.estimate import cpus_per_gpu, estimate_grid  # noqa: E402, F401
from gpu.inputs import repeated, write_jpeg_tree  # noqa: E402, F401
from gpu.procs import compare_weights, cuda_test_ids, junit_counts  # noqa: E402, F401

# What tests and bench_feed.py take from this script by name.
__all__ = ["PLANNED_S", "STEPS", "compare_weights", "cpus_per_gpu", "cuda_test_ids", "estimate_grid", "junit_counts",
           "main", "plan", "plan_text", "repeated", "write_jpeg_tree"]


def main(argv: list[str] | None = None, started: float | None = None) -> int:
    """The command line; `started`: the process's start on gpu.check.clock (default: now)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda", help="cuda or cpu (default cuda)")
    p.add_argument("--out", metavar="DIR", help="where gpu_check.json and gpu_check.md go (needed unless --plan)")
    p.add_argument("--plan", action="store_true", help="print the steps' and figures' planned minutes; run nothing")
    p.add_argument("--tiny", action="store_true",
                   help="tiny sizes: every step end to end, to see that the script works (on a CPU 4-5 minutes on two "
                        f"cores busy with other work; default budget {TINY_BUDGET_S:g} s)")
    p.add_argument("--only", nargs="+", choices=STEPS, default=list(STEPS), metavar="STEP",
                   help=f"run these steps only ({', '.join(STEPS)})")
    p.add_argument("--previous", metavar="JSON",
                   help="a gpu_check.json whose results stand in for the steps not run now (with --only), and whose "
                        "measured seconds plan the steps run again on the same device")
    p.add_argument("--budget", "--budget-s", dest="budget_s", type=float, metavar="SECONDS",
                   help=f"the whole run's seconds from the process's start, imports included (default {BUDGET_S:g}; "
                        f"--tiny: {TINY_BUDGET_S:g}): a step starts only if its measured or planned time ends "
                        f"{RESERVE_S:g} s before it, one still running then is stopped")
    p.add_argument("--commit", help="the commit recorded for this run (default: $BAYESNCL_COMMIT, else git HEAD "
                   "if no file differs from it, else 'unknown'); give it where the tree is a copy without git")
    args = p.parse_args(argv)
    if args.plan:
        print(plan_text(args.budget_s or BUDGET_S), end="")
        return 0
    if args.budget_s is None:
        args.budget_s = TINY_BUDGET_S if args.tiny else BUDGET_S
    if not args.budget_s > 0:
        print(f"gpu_check: --budget {args.budget_s:g}: give the run's seconds, more than 0 (default {BUDGET_S:g})",
              file=sys.stderr)
        return 2
    if not args.out:
        print("gpu_check: --out DIR is needed (where gpu_check.json goes); or --plan to see the plan only",
              file=sys.stderr)
        return 2
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
    return Check(device, args.tiny, out, args.budget_s, args.commit, started=started).run(args.only, previous)


def plan_text(budget_s: float = BUDGET_S) -> str:
    """The plan on each GPU kind: each step's planned seconds and the minute it ends by, or that it is not
    started; then every figure with "pending: no GPU" and the minute it is planned by on each (the summary's
    Figures table of a run on a CPU)."""
    from gpu.summary import figures

    when = {k: plan(k, budget_s) for k in GPU_KINDS}
    names = {k: k.upper() for k in GPU_KINDS}
    lines = [f"gpu_check plan, budget {budget_s:g} s from the process's start ({START_S:g} s planned for the start-up, "
             f"{RESERVE_S:g} s kept for the summary): what the grid needs first, extras while it lasts", "",
             "| step | | " + " | ".join(f"{names[k]} planned s | {names[k]} ends by (minute)" for k in GPU_KINDS)
             + " |", "|---|---|" + "---|---|" * len(GPU_KINDS)]
    for n in STEPS:
        cells = [f"{PLANNED_S[k][n]} | " + (f"{when[k][n]:.1f}" if when[k][n] is not None else "not started")
                 for k in GPU_KINDS]
        lines.append(f"| {n} | {'needed' if n in NEEDED else 'extra'} | " + " | ".join(cells) + " |")
    lines.append("")
    for k in GPU_KINDS:
        run = [n for n in STEPS if when[k][n] is not None]
        left = [n for n in STEPS if when[k][n] is None]
        lines.append(f"{names[k]}: {len(run)} of {len(STEPS)} steps, planned to end by minute "
                     f"{max(when[k][n] for n in run):.1f}" + (f"; not started: {', '.join(left)}" if left else ""))
    lines += ["", "| figure | goal | value | " + " | ".join(f"planned on {names[k]} (minute)" for k in GPU_KINDS)
              + " |", "|---|---|---|" + "---|" * len(GPU_KINDS)]
    report = {"info": {"device": "cpu"}, "steps": {}}  # nothing measured here
    lines += [f"| {f['name']} | {f['goal']} | {f['value']} | " + " | ".join(f["planned"][k] for k in GPU_KINDS)
              + " |" for f in figures(report, budget_s)]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main(started=process_start(T0)))
