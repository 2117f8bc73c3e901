"""Training step speed: images/s and BayesNCL's overhead over NCL, or where a step's time goes.

    python benchmarks/bench_train.py                      # CPU: the demo model (config/config.yaml), 1 thread
    python benchmarks/bench_train.py --phases             # CPU: per phase, the step before / after, interleaved
    python benchmarks/bench_train.py --preset cifar       # ResNet-18 CIFAR, batch 256 (use a GPU)
    python benchmarks/bench_train.py --graph compile      # the step as train.graph=compile runs it
    python benchmarks/bench_train.py --batches 32 64 128 256  # CPU time per image against the batch
    python benchmarks/bench_train.py --scaler             # what train.loss_scaler=fp16's check costs a step
    python benchmarks/bench_train.py --deterministic      # what train.deterministic costs a step

Times `bayesncl.training.step.TrainStep` (on-device augmentation of two views, forward, InfoNCE (+ KL), backward,
LARS update, the logged sums) on random uint8 images held on the device, after a warm-up.

--phases splits the step into augmentation (both views, with their random draws), forward + loss, backward,
LARS and the logged sums, and times each with the calling thread's CPU time (on CPU; robust to other processes
sharing the cores), for "before" (the step as the trainer ran it until the fused step: bench_ops.py's copy of
it, with timm's Lars) and "after" (TrainStep's phases), alternating one step of each; medians over the steps.
--batches times NCL's step (thread CPU time, median) at each batch size: a time per image that stays flat
as the batch grows says the step is compute-bound, so training several seeds in one batched step would save
only the fixed part (docs/MINIATURE.md).
Target on a GPU: BayesNCL costs at most 6% more time per step than NCL (the paper measured 5.9%; goal 3%).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import yaml

HERE = Path(__file__).resolve().parent
try:
    import bayesncl  # noqa: F401
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(HERE.parent / "src"))
sys.path.insert(0, str(HERE))

from bayesncl.settings.config import resolve  # noqa: E402
from bayesncl.data import SimCLRAugment  # noqa: E402
from bayesncl.model.methods import build_method  # noqa: E402
from bayesncl.training.optim import build_optimizer  # noqa: E402
from bayesncl.training.device import autocast, channels_last  # noqa: E402
from bayesncl.training.step import TrainStep  # noqa: E402

PRESETS = {
    "cifar": ["model.width=64", "model.proj_hidden=2048", "model.proj_dim=256", "train.batch_size=256"],
}
PHASES = ("augment", "forward", "backward", "lars", "sums")


def demo_sets() -> list[str]:
    with open(HERE.parent / "config" / "config.yaml") as fh:
        d = yaml.safe_load(fh)["defaults"]
    flat = []
    for section in ("model", "train", "method"):
        flat += [f"{section}.{k}={v}" for k, v in d.get(section, {}).items() if k not in ("device", "threads")]
    return flat


def make_step(method: str, sets: list[str], size: int, device: torch.device, graph: str = "eager") -> TrainStep:
    cfg = resolve(sets=sets + [f"method.name={method}", f"train.graph={graph}"])
    torch.manual_seed(0)
    model = build_method(cfg).to(device).train()
    if channels_last(cfg, device):
        model = model.to(memory_format=torch.channels_last)
    aug = SimCLRAugment(size, (0.5,) * 3, (0.25,) * 3, crop_scale=(cfg["train"]["crop_min_scale"], 1.0))
    step = TrainStep(model, build_optimizer(model, cfg), aug, cfg, device, 100)
    step.start(0)
    return step


def bench(method: str, sets: list[str], size: int, device: torch.device, steps: int, warmup: int,
          graph: str = "eager") -> float:
    step = make_step(method, sets, size, device, graph)
    bs = resolve(sets=sets)["train"]["batch_size"]
    x = torch.randint(0, 256, (bs, 3, size, size), dtype=torch.uint8, device=device)
    gen = torch.Generator(device=device).manual_seed(0)
    for _ in range(warmup):
        step(x, gen)
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        step(x, gen)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return steps * bs / (time.perf_counter() - t0)


# ---------------------------------------------------------------- --phases


class Phases:
    """Thread CPU time (CPU) or CUDA events (GPU) between marks."""

    def __init__(self, device: torch.device):
        self.device, self.marks = device, []

    def mark(self) -> None:
        if self.device.type == "cuda":
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            self.marks.append(e)
        else:
            self.marks.append(time.thread_time())

    def ms(self) -> list[float]:
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            return [a.elapsed_time(b) for a, b in zip(self.marks, self.marks[1:])]
        return [1e3 * (b - a) for a, b in zip(self.marks, self.marks[1:])]


def after_phases(step: TrainStep, x: torch.Tensor, gen: torch.Generator) -> list[float]:
    """TrainStep.body's phases in order, timed (the same calls as the body makes)."""
    t = Phases(step.device)
    t.mark()
    views, gate_u = step.draws(x.shape[0], gen)
    lr, v = step.inputs(x, views)
    t.mark()
    loss, parts, out = step.forward(v, gate_u)
    t.mark()
    grads = step.backward(loss, [])
    t.mark()
    step.update(grads, lr)
    t.mark()
    step.log(loss, parts, out)
    t.mark()
    return t.ms()


class Before:
    """The step as the trainer ran it before the fused step (bench_ops.py's copy), phase by phase."""

    def __init__(self, method: str, sets: list[str], size: int, device: torch.device):
        import bench_ops

        self.ops = bench_ops
        self.cfg = resolve(sets=sets + [f"method.name={method}"])
        torch.manual_seed(0)
        self.model = build_method(self.cfg).to(device).train()
        self.opt = bench_ops.timm_optimizer(self.model, self.cfg)
        self.aug = SimCLRAugment(size, (0.5,) * 3, (0.25,) * 3, crop_scale=(self.cfg["train"]["crop_min_scale"], 1.0))
        self.device, self.sums, self.i = device, {}, 0

    def __call__(self, x: torch.Tensor, gen: torch.Generator) -> list[float]:
        t = Phases(self.device)
        t.mark()
        v1, v2 = self.aug(x, gen), self.aug(x, gen)
        t.mark()
        with autocast(self.device, self.cfg["train"]["precision"]):
            loss, parts, out = self.ops.old_loss(self.model, v1, v2)
        t.mark()
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        t.mark()
        self.ops.set_group_lrs(self.opt, self.i, self.cfg["train"])
        self.opt.step()
        t.mark()
        vals = {"loss": loss, **parts}
        if "gate" in out:
            vals["open_gates"] = (out["gate"] > 0.5).float().mean()
        for k, val in vals.items():
            val = val.detach().double()
            self.sums[k] = self.sums[k] + val if k in self.sums else val
        t.mark()
        self.i += 1
        return t.ms()


def phases(sets: list[str], size: int, device: torch.device, steps: int, warmup: int) -> None:
    bs = resolve(sets=sets)["train"]["batch_size"]
    x = torch.randint(0, 256, (bs, 3, size, size), dtype=torch.uint8, device=device)
    print(f"per-phase medians over {steps} steps after {warmup} warm-up, ms of "
          f"{'thread CPU time' if device.type == 'cpu' else 'device time'}; before and after alternate step by step")
    print(f"{'':9s} {'':7s}" + "".join(f"{p:>10s}" for p in (*PHASES, "total")))
    # Four steppers (NCL and BayesNCL, before and after), one step of each in turn, the order rotated every
    # round (so that none always follows the same one): a change in the machine's load hits all four alike.
    runners = {}
    for method in ("ncl", "bayesncl"):
        runners[(method, "before")] = (Before(method, sets, size, device), torch.Generator(device=device).manual_seed(0))
        step = make_step(method, sets, size, device)
        runners[(method, "after")] = (lambda x, g, s=step: after_phases(s, x, g),
                                      torch.Generator(device=device).manual_seed(0))
    rows = {k: [] for k in runners}
    keys = list(runners)
    for i in range(warmup + steps):
        for k in keys[i % 4:] + keys[: i % 4]:
            fn, gen = runners[k]
            r = fn(x, gen)
            if i >= warmup:
                rows[k].append(r)
    totals = {}
    for (method, when), r in rows.items():
        per = [statistics.median(c) for c in zip(*r)]
        totals[(method, when)] = statistics.median(sum(v) for v in r)
        print(f"{method:9s} {when:7s}" + "".join(f"{v:10.2f}" for v in (*per, totals[(method, when)])))
    for when in ("before", "after"):
        ov = 100 * (totals[("bayesncl", when)] / totals[("ncl", when)] - 1)
        print(f"BayesNCL's extra time per step, {when}: {ov:+.1f}%")
    # Paired: each after step against the before step next to it, then the median of those ratios.
    print(f"{'after / before, paired medians':27s}" + "".join(f"{p:>10s}" for p in (*PHASES, "total")))
    for m in ("ncl", "bayesncl"):
        b, a = rows[(m, "before")], rows[(m, "after")]  # step i of each: the same round
        ratios = [statistics.median(ai[k] / bi[k] for ai, bi in zip(a, b)) for k in range(len(PHASES))]
        tot = statistics.median(sum(ai) / sum(bi) for ai, bi in zip(a, b))
        print(f"{m:27s}" + "".join(f"{v:10.3f}" for v in (*ratios, tot)))


def batch_scaling(sets: list[str], size: int, device: torch.device, batches: list[int], steps: int,
                  warmup: int) -> None:
    print(f"NCL step, {torch.get_num_threads()} thread(s), median of {steps} steps (thread CPU time)")
    for bs in batches:
        step = make_step("ncl", sets + [f"train.batch_size={bs}"], size, device)
        x = torch.randint(0, 256, (bs, 3, size, size), dtype=torch.uint8, device=device)
        gen = torch.Generator(device=device).manual_seed(0)
        for _ in range(warmup):
            step(x, gen)
        times = []
        for _ in range(steps):
            t0 = time.thread_time()
            step(x, gen)
            times.append(time.thread_time() - t0)
        ms = 1000 * statistics.median(times)
        print(f"batch {bs:5d}: {ms:8.1f} ms/step {ms / bs:7.3f} ms/image")


def scaler_cost(sets: list[str], size: int, device: torch.device, steps: int, warmup: int) -> None:
    """Each method's step with train.loss_scaler none and fp16 (the emulated check under fp32), one step of each
    in turn on one batch; medians of the calling thread's CPU time (CUDA: device events)."""
    x = torch.randint(0, 256, (128, 3, size, size), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    x = x.to(device)
    for method in ("ncl", "bayesncl"):
        runs = {k: make_step(method, sets + [f"train.loss_scaler={k}"], size, device) for k in ("none", "fp16")}
        gens = {k: torch.Generator(device=device).manual_seed(0) for k in runs}
        ms = {k: [] for k in runs}
        for i in range(warmup + steps):
            for k, step in runs.items():
                t = Phases(device)
                t.mark()
                step(x, gens[k])
                t.mark()
                if i >= warmup:
                    ms[k].append(t.ms()[0])
        med = {k: statistics.median(v) for k, v in ms.items()}
        print(f"{method:9s} loss_scaler none {med['none']:7.1f} ms, fp16 {med['fp16']:7.1f} ms: "
              f"{100 * (med['fp16'] / med['none'] - 1):+.1f}%")


def deterministic_cost(sets: list[str], size: int, device: torch.device, steps: int, warmup: int) -> None:
    """Each method's step with train.deterministic off and on (training.device.set_deterministic around the step), one
    step of each in turn on one batch, each first in every other round; medians of the calling thread's CPU time
    (CUDA: device events)."""
    from bayesncl.training.device import set_deterministic

    x = torch.randint(0, 256, (128, 3, size, size), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    x = x.to(device)
    for method in ("ncl", "bayesncl"):
        runs = {k: make_step(method, sets, size, device) for k in ("off", "on")}
        gens = {k: torch.Generator(device=device).manual_seed(0) for k in runs}
        ms = {k: [] for k in runs}
        for i in range(warmup + steps):
            for k in ("off", "on") if i % 2 else ("on", "off"):  # each first in every other round
                step = runs[k]
                restore = set_deterministic(k == "on")
                t = Phases(device)
                t.mark()
                step(x, gens[k])
                t.mark()
                restore()
                if i >= warmup:
                    ms[k].append(t.ms()[0])
        med = {k: statistics.median(v) for k, v in ms.items()}
        print(f"{method:9s} train.deterministic off {med['off']:7.1f} ms, on {med['on']:7.1f} ms: "
              f"{100 * (med['on'] / med['off'] - 1):+.1f}%")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", choices=["demo", "cifar"], default="demo")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (the demo runs 1 per process)")
    p.add_argument("--graph", choices=["eager", "compile", "cudagraph"], default="eager",
                   help="train.graph for the timed step (compile: the first steps hold the compile)")
    p.add_argument("--phases", action="store_true", help="per-phase times, the step before / after")
    p.add_argument("--batches", type=int, nargs="+", default=None, help="time NCL's step at these batch sizes")
    p.add_argument("--scaler", action="store_true", help="the step with and without the loss scaler's check")
    p.add_argument("--deterministic", action="store_true", help="the step with train.deterministic off and on")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    sets = demo_sets() if args.preset == "demo" else PRESETS[args.preset]
    with open(HERE.parent / "config" / "config.yaml") as fh:
        size = yaml.safe_load(fh)["defaults"]["data"]["synthetic"]["image_size"] if args.preset == "demo" else 32
    if args.batches:
        batch_scaling(sets, size, device, args.batches, args.steps or 10, args.warmup)
        return
    if args.scaler:
        scaler_cost(sets, size, device, args.steps or 40, args.warmup)
        return
    if args.deterministic:
        deterministic_cost(sets, size, device, args.steps or 40, args.warmup)
        return
    if args.phases:
        phases(sets, size, device, args.steps or (20 if device.type == "cpu" else 30), args.warmup)
        return
    steps = args.steps or (50 if device.type == "cuda" else 10)
    print(f"device {device}, preset {args.preset}, train.graph={args.graph}, {steps} timed steps after "
          f"{args.warmup} warm-up, {torch.get_num_threads()} threads")
    rates = {}
    for method in ("ncl", "bayesncl"):
        rates[method] = bench(method, sets, size, device, steps, args.warmup, args.graph)
        print(f"{method:9s} {rates[method]:10.1f} images/s")
    overhead = 100 * (rates["ncl"] / rates["bayesncl"] - 1)
    print(f"BayesNCL time overhead over NCL: {overhead:+.2f}% (target <= 6%, goal 3%)")


if __name__ == "__main__":
    main()
