"""Time the interpretability suite and retrieval (K=256) on ImageNet-100-val-sized features.

    PYTHONPATH=src python benchmarks/bench_metrics.py [--device cuda] [--threads 1]

10,000 x 2,048 non-negative features, ~16% non-zero, 100 classes, 2 backgrounds. Target on one CPU
thread: interpretability < 1 s.
"""

from __future__ import annotations

import argparse
import time

import torch

from bayesncl.evaluation.metrics import background_dominance, interpretability
from bayesncl.evaluation.retrieval import retrieval_precision


def timed(fn, device, repeats):
    fn()  # warm-up (lazy init, allocator, kernels)
    best = float("inf")
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--d", type=int, default=2_048)
    ap.add_argument("--classes", type=int, default=100)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)

    g = torch.Generator().manual_seed(0)
    F = torch.relu(torch.randn(args.n, args.d, generator=g) - 1.0).to(device)
    y = torch.randint(0, args.classes, (args.n,), generator=g).to(device)
    bg = torch.randint(0, 2, (args.n,), generator=g).to(device)

    print(f"features {args.n} x {args.d}, {args.classes} classes, device {device}, threads {args.threads}, "
          f"{100 * float((F > 0).float().mean()):.1f}% non-zero; best of {args.repeats} after warm-up")
    t = timed(lambda: interpretability(F, y, args.classes), device, args.repeats)
    print(f"interpretability       {t:.3f} s")
    t = timed(lambda: background_dominance(F, y, bg, args.classes, 2), device, args.repeats)
    print(f"background_dominance   {t:.3f} s")
    t = timed(lambda: retrieval_precision(F, y, K=256), device, args.repeats)
    print(f"retrieval P@k (K=256)  {t:.3f} s")


if __name__ == "__main__":
    main()
