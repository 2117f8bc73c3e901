"""How long the demo's miniature needs to train: NCL and BayesNCL (STE) curves over a long run.

    PYTHONPATH=src python benchmarks/training_length.py run --method ncl --seed 0 --out DIR/ncl-0
    PYTHONPATH=src python benchmarks/training_length.py table DIR/*        # mean ± sd per recorded epoch

`run` pretrains one demo run (config/config.yaml's defaults; the warm-up kept at the demo's share of the
epochs) for --epochs with gradient dynamics every --every epochs, exactly as `bayesncl pretrain` does, and
at each dynamics epoch also measures, on the test split: SC of the evaluation feature (what Table 1 and
claim 1a use; for BayesNCL the gated feature), SC of z+ (what the dynamics record keeps), Act., the fast
linear probe's top-1 on h and the background probe (as the evaluation sections do). It writes
`curves.jsonl` (one line per dynamics epoch) beside the run's log.jsonl. Pretraining never reads the test
split, so --test-size changes only the measurement's noise, not the weights.

`table` prints, per method and recorded epoch, the mean and sd over seeds of loss (InfoNCE, the epoch's
mean) and of each measure, the change of the means per recorded interval, and the per-seed paired
difference BayesNCL - NCL of SC and probe top-1 with its 95% t-interval.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def run_config(method: str, seed: int, epochs: int, every: int, test_size: int, threads: int) -> dict:
    from bayesncl.settings.config import resolve
    from bayesncl.grid.expand import merged

    with open(ROOT / "config/config.yaml") as fh:
        wf = yaml.safe_load(fh)
    d = wf["defaults"]
    warm = max(1, round(epochs * d["train"]["warmup_epochs"] / d["train"]["epochs"]))
    variant = {"ncl": {"name": "ncl"}, "bayesncl": {"name": "bayesncl", "gate": "ste"}}[method]
    raw = merged(d, wf["datasets"]["synthetic"], {"method": variant}, {"seed": seed},
                  {"train": {"epochs": epochs, "warmup_epochs": warm, "dynamics_every": every, "threads": threads},
                   "data": {"synthetic": {"test_size": test_size}}})
    return resolve(base=raw)


def cmd_run(args) -> None:
    import torch

    import bayesncl.training.train as train_mod
    from bayesncl.data import load_split
    from bayesncl.measures import arrays as metrics
    from bayesncl.measures.linear import linear_probe_fast  # NumPy; takes CPU tensors

    cfg = run_config(args.method, args.seed, args.epochs, args.every, args.test_size, args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    train_set = load_split(cfg["data"], "train")
    original = train_mod.embed
    done = {"n": 0}
    curves = out / "curves.jsonl"
    t_start = time.perf_counter()

    def embed_and_measure(model, ds, cfg_, device, key="feature"):
        result = original(model, ds, cfg_, device, key=key)
        if "zplus" not in ((key,) if isinstance(key, str) else tuple(key)):  # not the dynamics pass
            return result
        done["n"] += 1
        keys = ("feature", "zplus", "h") + (("gate",) if cfg["method"]["name"] == "bayesncl" else ())
        test = dict(zip(keys, original(model, ds, cfg_, device, key=keys)))
        h_train, = original(model, train_set, cfg_, device, key="h")
        C = ds.num_classes
        r_feat = metrics.interpretability(test["feature"], ds.labels, C)
        r_zp = metrics.interpretability(test["zplus"], ds.labels, C)
        probe = linear_probe_fast(h_train, train_set.labels, test["h"], ds.labels, C, seed=cfg["seed"])
        bg = linear_probe_fast(h_train, train_set.backgrounds, test["h"], ds.backgrounds, ds.num_backgrounds,
                               seed=cfg["seed"])
        line = {"epoch": done["n"] * args.every, "sc": r_feat["sc"], "sc_zplus": r_zp["sc"], "act": r_feat["act"],
                "alive": r_feat["alive"], "probe_top1": probe["top1"], "bg_acc": bg["top1"],
                "wall_s": time.perf_counter() - t_start}
        if "gate" in test:
            line["open_gates_test"] = float((test["gate"] > 0.5).float().mean())
        with open(curves, "a") as fh:
            fh.write(json.dumps(line) + "\n")
        return result

    train_mod.embed = embed_and_measure
    if curves.exists():
        curves.unlink()
    torch.manual_seed(0)
    train_mod.pretrain(cfg, out, progress=False)
    print(f"{args.method} seed {args.seed}: {args.epochs} epochs in {time.perf_counter() - t_start:.0f} s -> {out}")


def _t(n: int) -> float:
    from scipy.stats import t

    return float(t.ppf(0.975, n - 1))


def _ms(xs: list[float]) -> str:
    xs = [x for x in xs if x is not None and math.isfinite(x)]
    if not xs:
        return "-"
    sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
    return f"{statistics.mean(xs):6.2f} ± {sd:5.2f}"


def cmd_table(args) -> None:
    runs: dict[str, dict[int, dict]] = {}  # method -> seed -> {epoch: line}
    for d in map(Path, args.dirs):
        cfg = yaml.safe_load((d / "config.resolved.yaml").read_text())
        method, seed = cfg["method"]["name"], cfg["seed"]
        logs = [json.loads(x) for x in (d / "log.jsonl").read_text().splitlines() if x.strip()]
        lines = {}
        for x in (d / "curves.jsonl").read_text().splitlines():
            if x.strip():
                r = json.loads(x)
                r["loss"] = logs[r["epoch"] - 1]["infonce"] if r["epoch"] <= len(logs) else None
                lines[r["epoch"]] = r
        runs.setdefault(method, {})[seed] = lines
    measures = ("loss", "sc", "sc_zplus", "probe_top1", "bg_acc", "act")
    for method, seeds in runs.items():
        epochs = sorted(set.intersection(*(set(v) for v in seeds.values())))
        print(f"\n{method}: seeds {sorted(seeds)}, mean ± sd over seeds per recorded epoch")
        print(f"{'epoch':>5s} " + " ".join(f"{m:>15s}" for m in measures) + "   d(loss)  d(SC)")
        prev = None
        for e in epochs:
            vals = {m: [seeds[s][e].get(m) for s in seeds] for m in measures}
            means = {m: statistics.mean(v) for m, v in vals.items() if all(x is not None for x in v)}
            delta = ("" if prev is None else f"  {means['loss'] - prev['loss']:+8.4f} {means['sc'] - prev['sc']:+6.2f}")
            print(f"{e:5d} " + " ".join(f"{_ms(vals[m]):>15s}" for m in measures) + delta)
            prev = means
    if {"ncl", "bayesncl"} <= set(runs):
        shared = sorted(set(runs["ncl"]) & set(runs["bayesncl"]))
        epochs = sorted(set.intersection(*(set(runs[m][s]) for m in ("ncl", "bayesncl") for s in shared)))
        print(f"\nBayesNCL - NCL, paired by seed ({shared}): mean, 95% t-interval, per seed")
        for m in ("sc", "probe_top1", "bg_acc"):
            print(f"  {m}")
            for e in epochs:
                d = [runs["bayesncl"][s][e][m] - runs["ncl"][s][e][m] for s in shared]
                mean = statistics.mean(d)
                sd = statistics.stdev(d) if len(d) > 1 else math.nan
                hw = _t(len(d)) * sd / math.sqrt(len(d)) if len(d) > 1 else math.nan
                print(f"  {e:5d} {mean:+7.2f} [{mean - hw:+7.2f}, {mean + hw:+7.2f}] sd_d {sd:5.2f}  "
                      + " ".join(f"{x:+6.1f}" for x in d))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("run")
    s.add_argument("--method", choices=["ncl", "bayesncl"], required=True)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--epochs", type=int, default=150)
    s.add_argument("--every", type=int, default=10)
    s.add_argument("--test-size", type=int, default=2048)
    s.add_argument("--threads", type=int, default=1)
    s.add_argument("--out", required=True)
    s = sub.add_parser("table")
    s.add_argument("dirs", nargs="+")
    args = p.parse_args()
    {"run": cmd_run, "table": cmd_table}[args.cmd](args)
    sys.exit(0)


if __name__ == "__main__":
    main()
