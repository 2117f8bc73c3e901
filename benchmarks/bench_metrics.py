"""Time the interpretability suite and retrieval (K=256) on ImageNet-100-val-sized features.

    PYTHONPATH=src python benchmarks/bench_metrics.py [--threads 1]
    PYTHONPATH=src python benchmarks/bench_metrics.py --n 10000 --d 256    # a CIFAR test split of the paper grid

10,000 x 2,048 non-negative features, ~16% non-zero, 100 classes, 2 backgrounds, with the measures the
tables use (bayesncl.measures.arrays, NumPy). Target on one CPU thread: interpretability < 1 s.
"""

from __future__ import annotations

import argparse
import os
import time


def timed(fn, repeats):
    fn()  # warm-up (lazy init, allocator)
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--d", type=int, default=2_048)
    ap.add_argument("--classes", type=int, default=100)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):  # before NumPy loads its BLAS
        os.environ[var] = str(args.threads)
    import numpy as np

    from bayesncl.measures.arrays import (background_dominance, default_Ks, interpretability, retrieval_curve,
                                          retrieval_precision)

    rng = np.random.default_rng(0)
    F = np.maximum(rng.standard_normal((args.n, args.d), dtype=np.float32) - 1.0, 0.0)
    y = rng.integers(0, args.classes, args.n)
    bg = rng.integers(0, 2, args.n)

    print(f"features {args.n} x {args.d}, {args.classes} classes, threads {args.threads}, "
          f"{100 * float((F > 0).mean()):.1f}% non-zero; best of {args.repeats} after warm-up")
    t = timed(lambda: interpretability(F, y, args.classes), args.repeats)
    print(f"interpretability       {t:.3f} s")
    t = timed(lambda: background_dominance(F, y, bg, args.classes, 2), args.repeats)
    print(f"background_dominance   {t:.3f} s")
    t = timed(lambda: retrieval_precision(F, y, K=256), args.repeats)
    print(f"retrieval P@k (K=256)  {t:.3f} s")
    t = timed(lambda: retrieval_curve(F, y, default_Ks(args.d)), args.repeats)
    print(f"retrieval curve        {t:.3f} s  (K = {', '.join(map(str, default_Ks(args.d)))})")


if __name__ == "__main__":
    main()
