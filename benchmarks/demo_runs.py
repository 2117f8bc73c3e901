"""Complete demo runs for two studies: how much the released protocol matters, and how long the miniature
needs to train (docs/MINIATURE.md).

    PYTHONPATH=src python benchmarks/demo_runs.py run --out DIR --methods ncl bayesncl --seeds 0 1 2 3 4 \\
        --epochs 16 --train-bn view joint [--jobs 2]
    PYTHONPATH=src python benchmarks/demo_runs.py protocol DIR      # per-view vs joint BN, batch vs running eval
    PYTHONPATH=src python benchmarks/demo_runs.py saturation DIR [--figure PATH]  # final quality against the budget
    PYTHONPATH=src python benchmarks/demo_runs.py knobs DIR         # the knob study (runs with --set and --tag)

`run` trains each (method, seed, budget, training BatchNorm) as a complete run of the demo's config (the NCL
or BayesNCL (STE) run of config/config.yaml at that seed; each budget with its own warm-up, the demo's share
of 1/16 of the epochs, and its own cosine), then evaluates it as the workflow does (features,
interpretability, fast linear probe) once with eval.bn=batch and once with eval.bn=running, and writes
`result.json` beside the run: final InfoNCE (last epoch's mean), the learning slope of the last 20% of epochs
(bayesncl.report.learning), and per eval mode SC, top-1, Act. and the open-gate fraction on the test split.
A run folder that already has result.json is skipped, so a killed study resumes.

`saturation` marks the runs that collapsed (bayesncl.measures.learning.collapse, from each log) and applies the
saturation criterion on NCL alone (bayesncl.measures.learning.saturated_budget, read as the report reads it:
bayesncl.report.lines.saturation_curve; it needs the 0-epoch runs as its start). It prints the curve for both
methods, NCL's share of the way to the largest budget, and the paired BayesNCL - NCL differences.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

VARIANT = {"ncl": "NCL", "bayesncl": "BayesNCL (STE)"}


def demo_config(method: str, seed: int, epochs: int, train_bn: str, sets: tuple = ()) -> dict:
    """The demo grid's table1 run of `method` at `seed`, trained for `epochs` with its own warm-up, with the
    `key=value` overrides `sets` (the knob study)."""
    from bayesncl.settings.config import resolve
    from bayesncl.grid.expand import expand_grid

    wf = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    wf["seeds"] = sorted(set(range(5)) | {seed})
    run = next(r for r in expand_grid(wf).values()
               if r.variant == VARIANT[method] and "table1" in r.sets and r.config["seed"] == seed)
    cfg = run.config
    cfg["train"].update(epochs=epochs, warmup_epochs=max(1, round(epochs / 16)), bn=train_bn,
                        dynamics_every=0)
    return resolve(base=cfg, sets=list(sets))


def run_one(job: tuple) -> str:
    method, seed, epochs, train_bn, out, sets, eval_bns = job
    out = Path(out)
    if (out / "result.json").exists():
        return f"{out.name}: done before"
    import numpy as np

    from bayesncl.core.atomic import atomic_write_text
    from bayesncl.evaluation.runner import evaluate
    from bayesncl.measures.learning import learning_slope
    from bayesncl.runs.files import read_log
    from bayesncl.training.train import pretrain

    t0 = time.perf_counter()
    cfg = demo_config(method, seed, epochs, train_bn, sets)
    result = {"method": method, "seed": seed, "epochs": epochs, "train_bn": train_bn, "sets": list(sets)}
    ckpt = pretrain(cfg, out, progress=False)  # 0 epochs: the random-init network (a reference)
    log = read_log(out)
    result.update(infonce=log[-1]["infonce"] if log else None,
                  learning=learning_slope([r["infonce"] for r in log]),
                  train_seconds=sum(r["epoch_seconds"] for r in log))
    for bn in eval_bns:
        ev = out / f"eval-{bn}"
        sections = ["features", "interpretability"] + (["linear_probe"] if bn == "batch" else [])
        evaluate(ckpt, ev, only=sections, sets=[f"eval.bn={bn}"], progress=False)
        interp = json.loads((ev / "interpretability.json").read_text())["interpretability"]
        r = {"sc": interp["sc"], "act": interp["act"]}
        with np.load(ev / "features.npz") as f:
            if "gate" in f:
                r["open_gates"] = float(f["gate"].mean())
        if bn == "batch":  # the probe reads h with running statistics in both modes
            result["top1"] = json.loads((ev / "linear_probe.json").read_text())["linear_probe"]["top1"]
        result[bn] = r
    result["wall_seconds"] = time.perf_counter() - t0
    atomic_write_text(out / "result.json", json.dumps(result, indent=1) + "\n")
    return f"{out.name}: {result['wall_seconds']:.0f} s"


def cmd_run(args) -> None:
    tag = f"{args.tag}-" if args.tag else ""
    jobs = [(m, s, e, bn, str(Path(args.out) / f"{tag}{m}-{bn}-e{e}-s{s}"), tuple(args.set), tuple(args.eval_bn))
            for e in args.epochs for m in args.methods for bn in args.train_bn for s in args.seeds]
    with ProcessPoolExecutor(args.jobs) as pool:
        for line in pool.map(run_one, jobs):
            print(line, flush=True)


def load(folder: str) -> list[dict]:
    """Each run's result.json, with `collapse` (bayesncl.measures.learning.collapse) from its log. A run folder whose
    files are missing or unreadable is a DataError naming it (before anything is drawn or printed)."""
    from bayesncl.core.errors import BayesNCLError, DataError
    from bayesncl.measures.learning import collapse
    from bayesncl.runs.files import CONFIG, LOG, read_log

    if not Path(folder).is_dir():
        state = "is a file, not a folder" if Path(folder).exists() else "does not exist"
        raise DataError(f"{folder} {state}; give the --out folder of `demo_runs.py run`")
    rows = []
    for p in sorted(Path(folder).glob("*/result.json")):
        try:
            r = json.loads(p.read_text())
            batch = yaml.safe_load((p.parent / CONFIG).read_text())["train"]["batch_size"]
            r["collapse"] = collapse([e["infonce"] for e in read_log(p.parent)], batch)
        except (OSError, ValueError, KeyError, TypeError, yaml.YAMLError, BayesNCLError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
            raise DataError(f"{p.parent}: its result.json, {CONFIG} or {LOG} is missing or unreadable ({why}); "
                            f"remove the folder and rerun `demo_runs.py run` for it") from None
        rows.append(r)
    return rows


def interval(d: list[float]) -> tuple[float, float, float]:
    from scipy.stats import t

    m = statistics.mean(d)
    if len(d) < 2:
        return m, math.nan, math.nan
    hw = float(t.ppf(0.975, len(d) - 1)) * statistics.stdev(d) / math.sqrt(len(d))
    return m, m - hw, m + hw


def _ms(xs: list[float]) -> str:
    return f"{statistics.mean(xs):.2f} ± {statistics.stdev(xs) if len(xs) > 1 else 0:.2f}"


def paired(rows, left, right, value) -> str:
    """Mean paired difference left - right over the seeds both have, with its 95% t-interval."""
    a = {r["seed"]: value(r) for r in rows if left(r)}
    b = {r["seed"]: value(r) for r in rows if right(r)}
    seeds = sorted(set(a) & set(b) - {s for s in a if a[s] is None} - {s for s in b if b[s] is None})
    if not seeds:
        return "-"
    m, lo, hi = interval([a[s] - b[s] for s in seeds])
    return f"{m:+.2f} [{lo:+.2f}, {hi:+.2f}] (n={len(seeds)})"


def cmd_protocol(args) -> None:
    rows = load(args.dir)
    print("| method | measure | per-view - joint BatchNorm in training (eval.bn=batch) "
          "| batch - running statistics at evaluation (per-view runs) |")
    print("|---|---|---|---|")
    for m in ("ncl", "bayesncl"):
        rs = [r for r in rows if r["method"] == m]
        measures = [("SC", lambda r: r["batch"]["sc"], lambda r, bn: r[bn]["sc"]),
                    ("top-1", lambda r: r["top1"], None),
                    ("Act.", lambda r: r["batch"]["act"], lambda r, bn: r[bn]["act"])]
        if m == "bayesncl":
            measures.append(("open gates %", lambda r: 100 * r["batch"]["open_gates"],
                             lambda r, bn: 100 * r[bn]["open_gates"]))
        for name, value, by_bn in measures:
            view_joint = paired(rs, lambda r: r["train_bn"] == "view", lambda r: r["train_bn"] == "joint", value)
            view = [r for r in rs if r["train_bn"] == "view"]
            if by_bn is None:
                batch_running = "0 (the probe's h uses running statistics in both modes)"
            else:
                batch_running = paired([{**r, "k": 0} for r in view] + [{**r, "k": 1} for r in view],
                                       lambda r: r["k"] == 0, lambda r: r["k"] == 1,
                                       lambda r: by_bn(r, "batch" if r["k"] == 0 else "running"))
            print(f"| {VARIANT[m]} | {name} | {view_joint} | {batch_running} |")


def study_frame(rows: list[dict]):
    """The study's results as runs.csv rows of set `saturation` (the report's saturation figure reads them)."""
    import pandas as pd

    from bayesncl.report.summary import COLUMNS, TEXT_COLUMNS, prepare

    out = []
    for r in rows:
        row = {c: ("" if c in TEXT_COLUMNS else math.nan) for c in COLUMNS}
        row.update(run_id=f"{r['method']}/e{r['epochs']}/s{r['seed']}", dataset="synthetic", arch="resnet18",
                   method=r["method"], variant=VARIANT[r["method"]], sets="saturation", sweep="epochs", gate="ste",
                   rho=0.8, proj_dim=64.0, epochs=float(r["epochs"]), seed=float(r["seed"]),
                   infonce_final=math.nan if r["infonce"] is None else r["infonce"], sc=r["batch"]["sc"],
                   probe_top1=r["top1"], infonce_chance=r["collapse"]["chance"])
        row["lambda"] = 3e-5
        out.append(row)
    return prepare(pd.DataFrame(out, columns=COLUMNS))


def cmd_saturation(args) -> None:
    from bayesncl.core.errors import DataError
    from bayesncl.report.lines import saturation_curve

    every = [r for r in load(args.dir) if r["train_bn"] == "view"]
    rows = [r for r in every if r["epochs"] > 0]
    budgets = sorted({r["epochs"] for r in rows if r["method"] == "ncl"})
    if not budgets:
        raise DataError(f"no NCL result.json with per-view BatchNorm under {args.dir}; run `demo_runs.py run` first")
    ncl, start, missing = saturation_curve(study_frame(every))  # as the report reads it
    if ncl is None:
        raise DataError(f"{missing} under {args.dir}; run `demo_runs.py run` for it first")
    # Every check above before the figure: a refused study leaves no figure behind.
    if args.figure:
        from matplotlib import rc_context

        from bayesncl.report.drawing import RC, save_figure
        from bayesncl.report.figures import saturation_figure

        out = Path(args.figure)
        with rc_context(RC):
            paths = save_figure(saturation_figure(study_frame(every)), out.parent, out.stem, ("png", "pdf"))
        print("figure:", *paths)
    print("| method | epochs | seeds | final InfoNCE | SC | top-1 | still learning | collapsed (epoch) |")
    print("|---|---|---|---|---|---|---|---|")
    for m in ("ncl", "bayesncl"):
        for e in budgets:
            rs = [r for r in rows if r["method"] == m and r["epochs"] == e]
            if not rs:
                continue
            vals = {"infonce": [r["infonce"] for r in rs], "sc": [r["batch"]["sc"] for r in rs],
                    "top1": [r["top1"] for r in rs]}
            learning = sum(bool(r["learning"]["still_learning"]) for r in rs)
            fell = [f"s{r['seed']} ({r['collapse']['epoch']})" for r in rs if r["collapse"]["collapsed"]]
            print(f"| {VARIANT[m]} | {e} | {len(rs)} | {_ms(vals['infonce'])} | {_ms(vals['sc'])} | "
                  f"{_ms(vals['top1'])} | {learning} of {len(rs)} | {', '.join(fell) or '-'} |")
    from bayesncl.measures.learning import MEASURES, gain_shares, saturated_budget, saturation_rule

    top = max(ncl)  # the reference budget the shares are taken to
    print("\n| epochs | share of the way to the largest budget: final InfoNCE | SC | top-1 |")
    print("|---|---|---|---|")
    for e, sh in gain_shares(ncl, start).items():
        print(f"| {e} | " + " | ".join(f"{sh[k]:.3f}" for k in MEASURES) + " |")
    saturated = saturated_budget(ncl, start)
    print(f"\nCriterion (NCL only, fixed in advance): {saturation_rule()} ({top} epochs): "
          f"{saturated if saturated is not None else f'none below {top}'}")
    print("\n| epochs | SC: BayesNCL (STE) - NCL | top-1: BayesNCL (STE) - NCL |")
    print("|---|---|---|")
    for e in budgets:
        rs = [r for r in rows if r["epochs"] == e]
        sc = paired(rs, lambda r: r["method"] == "bayesncl", lambda r: r["method"] == "ncl", lambda r: r["batch"]["sc"])
        t1 = paired(rs, lambda r: r["method"] == "bayesncl", lambda r: r["method"] == "ncl", lambda r: r["top1"])
        print(f"| {e} | {sc} | {t1} |")


def cmd_knobs(args) -> None:
    """The knob study, NCL only: per setting (its --tag) and budget, the means over seeds, and top-1 above the
    random-init network's (tag rand, 0 epochs)."""
    by = {}
    for p in sorted(Path(args.dir).glob("*/result.json")):
        r = json.loads(p.read_text())
        if r["method"] == "ncl":  # the folder is TAG-ncl-..., or ncl-... for the base settings
            tag = p.parent.name.split("-ncl-")[0] if "-ncl-" in p.parent.name else "base"
            by.setdefault((tag, r["epochs"]), []).append(r)
    rand = [r["top1"] for (t, e), rs in by.items() if e == 0 for r in rs]
    ref = statistics.mean(rand) if rand else math.nan
    print(f"random init (0 epochs): top-1 {_ms(rand) if rand else '-'} over {len(rand)} seeds\n")
    print("| setting | overrides | epochs | seeds | final InfoNCE | SC | top-1 | top-1 - random init | train s / run |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (tag, e), rs in sorted(by.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        if e == 0:
            continue
        top1 = [r["top1"] for r in rs]
        print(f"| {tag} | {' '.join(rs[0].get('sets', [])) or '-'} | {e} | {len(rs)} | "
              f"{_ms([r['infonce'] for r in rs])} | {_ms([r['batch']['sc'] for r in rs])} | {_ms(top1)} | "
              f"{statistics.mean(top1) - ref:+.1f} | {statistics.mean(r['train_seconds'] for r in rs):.0f} |")


def main(argv: list[str] | None = None) -> int:
    """0: done; 2: an input it cannot use (one line on stderr)."""
    from bayesncl.core.errors import BayesNCLError

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("run")
    s.add_argument("--out", required=True)
    s.add_argument("--methods", nargs="+", choices=list(VARIANT), default=list(VARIANT))
    s.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    s.add_argument("--epochs", nargs="+", type=int, default=[16], help="0: the random-init reference")
    s.add_argument("--train-bn", nargs="+", choices=["view", "joint"], default=["view"])
    s.add_argument("--jobs", type=int, default=2)
    s.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a config override for every run (the knob study); record it with --tag")
    s.add_argument("--tag", default="", help="prefix of the run folders: one tag per knob setting")
    s.add_argument("--eval-bn", nargs="+", choices=["batch", "running"], default=["batch", "running"])
    for name in ("protocol", "saturation", "knobs"):
        sub.add_parser(name).add_argument("dir")
    sub.choices["saturation"].add_argument("--figure", help="also draw the report's saturation figure here "
                                                                  "(PATH.png and PATH.pdf)")
    args = p.parse_args(argv)
    try:
        {"run": cmd_run, "protocol": cmd_protocol, "saturation": cmd_saturation, "knobs": cmd_knobs}[args.cmd](args)
    except BayesNCLError as exc:
        print(f"demo_runs.py {args.cmd}: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
