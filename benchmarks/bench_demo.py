"""Where the demo's time goes (config/config.yaml), part by part, on the CPU.

    PYTHONPATH=src python benchmarks/bench_demo.py step      # the training step split into its parts
    PYTHONPATH=src python benchmarks/bench_demo.py startup   # process start and imports of a job
    PYTHONPATH=src python benchmarks/bench_demo.py data      # synthetic set: generation, cached load
    PYTHONPATH=src python benchmarks/bench_demo.py eval --run RUN_DIR   # each evaluation job: whole vs work
    PYTHONPATH=src python benchmarks/bench_demo.py grid      # runs and jobs of the grid, per rule

`step` times augmentation (two views), forward + loss, backward and the optimizer step of the real
training step on a real batch of the demo's set, for NCL and BayesNCL (STE), at each thread count and
with/without channels_last (which training turns off on the CPU: `training.device.channels_last`). Variants are
interleaved step by step (A B A B ...) so a drift in the machine's speed hits all alike; medians are
printed. `eval` runs each section of a pretrained run twice: as the workflow does (`bayesncl evaluate
--only NAME` in a new process) and in-process after the imports, so the difference is process start-up,
imports and loading. Figures vary with the machine and its load: compare within one call.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def demo_config(method: str, gate: str = "ste", seed: int = 0, extra: list[str] | None = None) -> dict:
    """The resolved run config of one demo run (grid defaults <- dataset <- method)."""
    from bayesncl.settings.config import resolve
    from bayesncl.grid.expand import merged

    with open(ROOT / "config/config.yaml") as fh:
        wf = yaml.safe_load(fh)
    raw = merged(wf["defaults"], wf["datasets"]["synthetic"], {"method": {"name": method, "gate": gate}},
                  {"seed": seed})
    return resolve(base=raw, sets=extra or [])


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


# ------------------------------------------------------------------------------------------------- the step
def bench_step(args) -> None:
    import torch

    from bayesncl.data import SimCLRAugment, iter_batches, load_split
    from bayesncl.model.methods import build_method
    from bayesncl.training.optim import build_optimizer

    variants = []
    for method in args.methods:
        for threads in args.threads:
            for cl in (False, True) if args.channels_last else (False,):
                variants.append((method, threads, cl))
    setups = {}
    for method, threads, cl in variants:
        cfg = demo_config(method)
        ds = load_split(cfg["data"], "train")
        torch.manual_seed(0)
        model = build_method(cfg)
        if cl:
            model = model.to(memory_format=torch.channels_last)
        opt = build_optimizer(model, cfg)
        aug = SimCLRAugment(ds.crop_size, ds.mean, ds.std, crop_scale=(cfg["train"]["crop_min_scale"], 1.0))
        x, _, _ = next(iter(iter_batches(ds, cfg["train"]["batch_size"], shuffle=True, seed=0, drop_last=True,
                                         device=torch.device("cpu"), num_workers=0)))
        setups[(method, threads, cl)] = (model, opt, aug, x, torch.Generator().manual_seed(0))
    parts = ("augment", "forward+loss", "backward", "optimizer")
    # CPU seconds of the process per part (on a shared machine wall time counts the other processes' turns
    # too), and the step's wall time.
    cpu = {v: {p: [] for p in parts} for v in variants}
    wall = {v: [] for v in variants}

    def one(v, record: bool):
        model, opt, aug, x, gen = setups[v]
        torch.set_num_threads(v[1])
        t0, c0 = time.perf_counter(), time.process_time()
        v1, v2 = aug(x, gen), aug(x, gen)
        if v[2]:
            v1, v2 = (t.contiguous(memory_format=torch.channels_last) for t in (v1, v2))
        c1 = time.process_time()
        loss, _ = model.training_loss(v1, v2)
        c2 = time.process_time()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        c3 = time.process_time()
        opt.step()
        c4, t4 = time.process_time(), time.perf_counter()
        if record:
            for p, dt in zip(parts, (c1 - c0, c2 - c1, c3 - c2, c4 - c3)):
                cpu[v][p].append(dt)
            wall[v].append(t4 - t0)

    for _ in range(args.warmup):
        for v in variants:
            one(v, False)
    for _ in range(args.steps):
        for v in variants:
            one(v, True)
    print(f"training step at the demo's sizes (batch {demo_config('ncl')['train']['batch_size']}), median of "
          f"{args.steps} interleaved steps after {args.warmup} warm-up; parts in CPU seconds of the process, "
          f"the step in CPU and wall seconds; torch {torch.__version__}, {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.2f}")
    print(f"{'method':9s} {'threads':>7s} {'ch_last':>7s} " + " ".join(f"{p:>12s}" for p in parts)
          + f" {'step CPU':>8s} {'min CPU':>8s} {'wall':>8s}")
    for v in variants:
        tot = [sum(ts) for ts in zip(*(cpu[v][p] for p in parts))]
        print(f"{v[0]:9s} {v[1]:7d} {str(v[2]):>7s} " + " ".join(f"{_median(cpu[v][p]):12.4f}" for p in parts)
              + f" {_median(tot):8.4f} {min(tot):8.4f} {_median(wall[v]):8.4f}")


# --------------------------------------------------------------------------------------------- process start
def _run(cmd: list[str], env=None) -> tuple[float, float]:
    """(wall, CPU) seconds of a command; CPU = user + sys of the finished child, which a shared machine's
    load inflates far less than wall time."""
    import resource

    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def bench_startup(args) -> None:
    py = sys.executable
    imports = ["numpy", "torch", "bayesncl.cli.main", "torch._dynamo", "torchvision", "bayesncl.evaluation.runner",
               "bayesncl.training.train", "timm.optim", "scipy.stats", "pandas"]
    cmds = {"python -c pass": [py, "-c", "pass"], **{f"import {m}": [py, "-c", f"import {m}"] for m in imports},
            "import matplotlib.pyplot": [py, "-c", "import matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot"],
            "bayesncl --help": [py, "-m", "bayesncl.cli.main", "--help"],
            "snakemake --version": ["snakemake", "--version"]}
    times = {k: [] for k in cmds}
    for _ in range(args.repeats):  # interleaved
        for k, c in cmds.items():
            times[k].append(_run(c, {**os.environ, "OMP_NUM_THREADS": "1"}))
    print(f"process start + imports, median of {args.repeats} interleaved runs, seconds "
          f"(OMP_NUM_THREADS=1; load average {os.getloadavg()[0]:.2f})")
    print(f"{'command':34s} {'CPU':>7s} {'wall':>7s}")
    for k, ts in times.items():
        print(f"{k:34s} {_median([c for _, c in ts]):7.3f} {_median([w for w, _ in ts]):7.3f}")


# ---------------------------------------------------------------------------------------------------- data
def bench_data(args) -> None:
    import torch

    from bayesncl.data import load_split
    from bayesncl.data.synthetic import make_synthetic

    cfg = demo_config("ncl")
    gen, load = [], []
    params = cfg["data"]["synthetic"]
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            make_synthetic(params)
            gen.append(time.perf_counter() - t0)
            d = {**cfg["data"], "cache_dir": tmp}
            load_split(d, "train")  # writes the cache once
            t0 = time.perf_counter()
            load_split(d, "train"), load_split(d, "test")
            load.append(time.perf_counter() - t0)
    print(f"synthetic set {params}: generate {_median(gen):.3f} s, load both splits from the cache "
          f"{_median(load):.3f} s (median of {args.repeats}; torch threads {torch.get_num_threads()})")


# ----------------------------------------------------------------------------------------------- evaluation
def bench_eval(args) -> None:
    from bayesncl.evaluation.runner import evaluate

    import torch

    torch.set_num_threads(1)
    run = Path(args.run)
    model = run / "model.pt"
    sections = args.sections
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    whole = {s: [] for s in sections}  # (wall, CPU) of the job as the workflow runs it
    inproc = {s: [] for s in sections}  # CPU of the same work in this process, after the imports
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "eval"
        # features first: the other sections read its cache.
        for _ in range(args.repeats):
            for s in sections:
                cmd = [sys.executable, "-m", "bayesncl.cli.main", "evaluate", "--checkpoint", str(model), "--out",
                       str(out), "--only", s, "--quiet"] + [a for kv in args.set for a in ("--set", kv)]
                whole[s].append(_run(cmd, env))
                c0 = time.process_time()
                evaluate(model, out, only=[s], sets=args.set, progress=False)
                inproc[s].append(time.process_time() - c0)
    print(f"evaluation jobs of {run}, median of {args.repeats}, seconds (OMP_NUM_THREADS=1 for the job; the "
          f"in-process work after the imports, same thread count: {torch_threads()}; load average "
          f"{os.getloadavg()[0]:.2f})")
    print(f"{'section':18s} {'job CPU':>8s} {'job wall':>8s} {'work CPU':>8s} {'start-up share of CPU':>22s}")
    for s in sections:
        w, c, i = _median([x[0] for x in whole[s]]), _median([x[1] for x in whole[s]]), _median(inproc[s])
        print(f"{s:18s} {c:8.2f} {w:8.2f} {i:8.2f} {100 * (c - i) / c:21.0f}%")


def torch_threads() -> int:
    import torch

    return torch.get_num_threads()


# ----------------------------------------------------------------------------------------------------- grid
def bench_grid(args) -> None:
    import warnings

    from bayesncl.grid.expand import evaluation_sections, expand_grid

    with open(ROOT / args.config) as fh:
        wf = yaml.safe_load(fh)
    if args.seeds:
        wf["seeds"] = json.loads(args.seeds)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runs = expand_grid(wf)
    per_rule: dict[str, int] = {}
    steps = 0
    by_cost: dict[str, int] = {}
    for run in runs.values():
        for s in evaluation_sections(run):
            per_rule[s] = per_rule.get(s, 0) + 1
        c = run.config
        n = c["data"]["synthetic"]["train_size"] // c["train"]["batch_size"] * c["train"]["epochs"]
        steps += n
        key = f"{c['model']['arch']} w{c['model']['width']} D{c['model']['proj_dim']} {c['method']['name']}"
        by_cost[key] = by_cost.get(key, 0) + 1
    print(f"{args.config}: {len(runs)} runs, {steps} training steps, {sum(per_rule.values())} evaluation jobs")
    for k, v in per_rule.items():
        print(f"  {k:18s} {v}")
    for k, v in sorted(by_cost.items()):
        print(f"  runs {k:34s} {v}")
    # The wall-time estimate: core-seconds of every job over the cores (Snakemake keeps both busy; the
    # grid's jobs are many and short, so packing loses little).
    r50 = sum(1 for r in runs.values() if r.config["model"]["arch"] == "resnet50")
    epochs = {r.config["train"]["epochs"] for r in runs.values()}
    per_epoch = (args.run_s - args.run_start_s) / args.at_epochs
    run_s = args.run_start_s + per_epoch * max(epochs) * args.step_factor
    pre = (len(runs) - r50) * run_s + r50 * (args.run_start_s + (run_s - args.run_start_s) * args.r50_factor)
    jobs = sum(per_rule.values())
    ev = len(runs) * args.grouped_s if args.grouped_s else jobs * args.eval_job_s
    total = pre + ev + args.report_s
    print(f"estimate at {max(epochs)} epochs: pretraining {pre:.0f} core-s ({run_s:.1f} s a ResNet-18 run), "
          f"evaluation {ev:.0f}, report {args.report_s:.0f}: {total:.0f} core-s, {total / args.cores / 60:.1f} "
          f"min on {args.cores} cores")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="part", required=True)
    s = sub.add_parser("step")
    s.add_argument("--methods", nargs="+", default=["ncl", "bayesncl"])
    s.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    s.add_argument("--channels-last", action="store_true", help="also time channels_last (forced on the CPU)")
    s.add_argument("--steps", type=int, default=20)
    s.add_argument("--warmup", type=int, default=3)
    s = sub.add_parser("startup")
    s.add_argument("--repeats", type=int, default=5)
    s = sub.add_parser("data")
    s.add_argument("--repeats", type=int, default=3)
    s = sub.add_parser("eval")
    s.add_argument("--run", required=True, help="a pretrained run folder (model.pt, log.jsonl)")
    s.add_argument("--sections", nargs="+",
                   default=["features", "interpretability", "retrieval", "linear_probe", "background_probe", "cost"])
    s.add_argument("--repeats", type=int, default=3)
    s.add_argument("--set", action="append", default=[], help="eval.*/data.* override, e.g. "
                   "data.synthetic.test_size=2048 (repeatable)")
    s = sub.add_parser("grid")
    s.add_argument("--config", default="config/config.yaml")
    s.add_argument("--seeds", default=None, help="JSON list replacing the global seed list")
    s.add_argument("--run-s", type=float, default=36.5, help="measured seconds of one ResNet-18 pretraining "
                   "run (one core, two runs side by side) at --at-epochs")
    s.add_argument("--at-epochs", type=int, default=36)
    s.add_argument("--run-start-s", type=float, default=4.0, help="of which process start, imports, data")
    s.add_argument("--step-factor", type=float, default=1.0, help="a faster step: its time over today's")
    s.add_argument("--r50-factor", type=float, default=1.3, help="ResNet-50 stand-in step over ResNet-18's")
    s.add_argument("--eval-job-s", type=float, default=3.0, help="seconds of one evaluation job")
    s.add_argument("--grouped-s", type=float, default=0.0, help="seconds of one evaluation job per run "
                   "(all sections in one process); 0: one job per section")
    s.add_argument("--report-s", type=float, default=30.0, help="summarize, report and atlas together")
    s.add_argument("--cores", type=int, default=2)
    args = p.parse_args()
    {"step": bench_step, "startup": bench_startup, "data": bench_data, "eval": bench_eval,
     "grid": bench_grid}[args.part](args)


if __name__ == "__main__":
    main()
