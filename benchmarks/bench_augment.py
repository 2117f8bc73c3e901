"""Throughput of the batched SimCLR augmentation, in views per second: one view per call, and both views of a
batch in one pass (`SimCLRAugment.two_views`, what the trainer runs; the same images as two calls).

    python benchmarks/bench_augment.py                 # CPU 16 px (the demo) and 32 px, plus CUDA (32, 224) if present
    python benchmarks/bench_augment.py --device cuda --batch 256 --iters 50
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

try:
    from bayesncl.data import SimCLRAugment
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from bayesncl.data import SimCLRAugment

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def bench(device: str, batch: int, stored: int, size: int, iters: int, warmup: int = 3) -> tuple[float, float]:
    """(views/s one view per call, views/s both views in one pass), alternating call by call."""
    dev = torch.device(device)
    x = torch.randint(0, 256, (batch, 3, stored, stored), dtype=torch.uint8, device=dev)
    aug = SimCLRAugment(size, MEAN, STD)
    g = torch.Generator(device=dev).manual_seed(0)
    clock = time.thread_time if dev.type == "cpu" else time.perf_counter  # CPU: this thread's time only
    ways = {"two calls": lambda: (aug(x, g), aug(x, g)), "one pass": lambda: aug.two_views(x, g)}
    times = {k: 0.0 for k in ways}
    for i in range(warmup + iters):
        for k, fn in ways.items():
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            t0 = clock()
            fn()
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            if i >= warmup:
                times[k] += clock() - t0
    return tuple(2 * batch * iters / times[k] for k in ways)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=["cpu", "cuda", "all"], default="all")
    ap.add_argument("--batch", type=int, default=128, help="images per batch (the demo's 128)")
    ap.add_argument("--iters", type=int, default=None, help="timed calls (default: 5 on CPU, 50 on CUDA)")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (the demo runs 1 per process)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    cases = []
    if args.device in ("cpu", "all"):
        cases += [("cpu", 16, 16), ("cpu", 32, 32)]
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("CUDA requested but not available")
    if args.device in ("cuda", "all") and torch.cuda.is_available():
        cases += [("cuda", 32, 32), ("cuda", 256, 224)]

    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads"
          + (f", {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ""))
    for device, stored, size in cases:
        iters = args.iters or (10 if device == "cpu" else 50)
        calls, one_pass = bench(device, args.batch, stored, size, iters)
        print(f"{device:4s} batch {args.batch} {stored}->{size}: {calls:12,.0f} views/s one view per call, "
              f"{one_pass:12,.0f} both views in one pass ({one_pass / calls:.2f}x)")


if __name__ == "__main__":
    main()
