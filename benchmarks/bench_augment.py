"""Throughput of the batched SimCLR augmentation (one view per call), in images per second.

    python benchmarks/bench_augment.py                 # 512 x 32x32 on CPU, plus CUDA (32 and 224) if present
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


def bench(device: str, batch: int, stored: int, size: int, iters: int, warmup: int = 3) -> float:
    dev = torch.device(device)
    x = torch.randint(0, 256, (batch, 3, stored, stored), dtype=torch.uint8, device=dev)
    aug = SimCLRAugment(size, MEAN, STD)
    g = torch.Generator(device=dev).manual_seed(0)
    for _ in range(warmup):
        aug(x, g)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    t0 = time.perf_counter()
    for _ in range(iters):
        aug(x, g)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    return batch * iters / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=["cpu", "cuda", "all"], default="all")
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--iters", type=int, default=None, help="timed calls (default: 5 on CPU, 50 on CUDA)")
    args = ap.parse_args()

    cases = []
    if args.device in ("cpu", "all"):
        cases.append(("cpu", 32, 32))
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("CUDA requested but not available")
    if args.device in ("cuda", "all") and torch.cuda.is_available():
        cases += [("cuda", 32, 32), ("cuda", 256, 224)]

    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads"
          + (f", {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ""))
    for device, stored, size in cases:
        iters = args.iters or (5 if device == "cpu" else 50)
        rate = bench(device, args.batch, stored, size, iters)
        print(f"{device:4s} batch {args.batch} {stored}->{size}: {rate:12,.0f} images/s (one view per image)")


if __name__ == "__main__":
    main()
