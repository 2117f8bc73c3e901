"""Evaluation noise against seed noise: how large should the synthetic test split be?

    PYTHONPATH=src python benchmarks/eval_noise.py --left RUN_DIR ... --right RUN_DIR ... [--big 8192]

Every run (a folder with model.pt; `--left` and `--right` paired in the order given, e.g. BayesNCL and NCL
seeds 0..4) is evaluated on one large test split of the same synthetic distribution (`--big` images; the
train split and so the weights do not depend on the test size), cut into disjoint blocks of n images. Each
block is an independent test split of size n, so:

- evaluation noise at n: the sd of a metric over blocks, for one model (averaged over models), and of the
  paired difference left - right of one seed;
- seed noise: the sd over seeds of the metric on the whole large split, and of the paired difference.

All seeds are scored on the same test split, so the test split's own error is shared by every seed: the
t-interval over seeds does not see it, and it must stay small against the interval's half-width.
Metrics: SC (evaluation feature), the fast linear probe's top-1 on h and the background probe (both
trained once on the train split, scored per block). The binomial sd sqrt(p(1-p)/n) is printed beside
the measured one for top-1.
"""

from __future__ import annotations

import argparse
import math
import statistics
from pathlib import Path

import numpy as np


def measure(run: Path, big: int, sizes: list[int]) -> dict:
    """{metric: {"full": value, n: [value per block]}} for one run."""
    import torch

    from bayesncl.runs import files
    from bayesncl.settings.config import merge
    from bayesncl.data import load_split
    from bayesncl.measures import arrays as metrics
    from bayesncl.measures.linear import predict_logits, standardize, train_linear
    from bayesncl.training.embed import embed
    from bayesncl.core.yamlio import nest

    state = files.load(run / "model.pt")
    cfg = merge(state["config"], nest({"data.synthetic.test_size": big}))
    model = files.model_from_state(state, run / "model.pt")
    device = torch.device("cpu")
    test, train = load_split(cfg["data"], "test"), load_split(cfg["data"], "train")
    feat, h = embed(model, test, cfg, device, key=("feature", "h"))
    h_train, = embed(model, train, cfg, device, key="h")
    xtr, xte = standardize(h_train.numpy(), h.numpy())
    preds = {}
    for name, ytr, yte, C in (("probe_top1", train.labels, test.labels, test.num_classes),
                              ("bg_acc", train.backgrounds, test.backgrounds, test.num_backgrounds)):
        W, b = train_linear(xtr, ytr.numpy(), C, seed=cfg["seed"])  # the fast protocol's defaults
        preds[name] = (predict_logits(W, b, xte).argmax(1) == yte.numpy()).astype(np.float64) * 100.0
    y, C = test.labels, test.num_classes

    def values(idx) -> dict:
        return {"sc": metrics.interpretability(feat[idx], y[idx], C)["sc"],
                **{k: float(v[idx.numpy()].mean()) for k, v in preds.items()}}

    out = {"full": values(torch.arange(big))}
    for n in sizes:
        out[n] = [values(torch.arange(s, s + n)) for s in range(0, big - n + 1, n)]
    return out


def _sd(xs) -> float:
    xs = [x for x in xs if math.isfinite(x)]
    return statistics.stdev(xs) if len(xs) > 1 else math.nan


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--left", nargs="+", required=True)
    p.add_argument("--right", nargs="+", required=True)
    p.add_argument("--big", type=int, default=8192)
    p.add_argument("--sizes", type=int, nargs="+", default=[512, 1024, 2048])
    args = p.parse_args()
    if len(args.left) != len(args.right):
        p.error("--left and --right pair runs by position: give as many of each")
    import torch

    torch.set_num_threads(1)
    left = [measure(Path(r), args.big, args.sizes) for r in args.left]
    right = [measure(Path(r), args.big, args.sizes) for r in args.right]
    print(f"{len(left)} seed pairs; large test split {args.big} images, blocks of n; evaluation sd = sd over "
          "blocks (mean over models); seed sd = sd over seeds on the large split")
    for m in ("sc", "probe_top1", "bg_acc"):
        print(f"\n{m}")
        for side, runs in (("left", left), ("right", right)):
            full = [r["full"][m] for r in runs]
            line = f"  {side:5s} mean {statistics.mean(full):6.2f}  seed sd {_sd(full):5.2f}  evaluation sd"
            for n in args.sizes:
                ev = statistics.mean(_sd([b[m] for b in r[n]]) for r in runs)
                line += f"  n={n}: {ev:4.2f}"
                if m != "sc":
                    pbar = statistics.mean(full) / 100
                    line += f" (binomial {100 * math.sqrt(pbar * (1 - pbar) / n):4.2f})"
            print(line)
        d_full = [a["full"][m] - b["full"][m] for a, b in zip(left, right)]
        line = f"  left - right, paired: mean {statistics.mean(d_full):+6.2f}  seed sd {_sd(d_full):5.2f}  evaluation sd"
        for n in args.sizes:
            ev = statistics.mean(_sd([x[m] - y[m] for x, y in zip(a[n], b[n])]) for a, b in zip(left, right))
            line += f"  n={n}: {ev:4.2f}"
        print(line)


if __name__ == "__main__":
    main()
