"""How local jobs should start: plain processes or children of the fork server (docs/DESIGN.md, "Local jobs").

    PYTHONPATH=src python benchmarks/local_jobs.py [--repeat 3] [--grid config/config.yaml]

Measures, on this machine, each job's start-up (process start to the start of its work, the record
bayesncl.core.startup writes) for a pretraining and an evaluation job of the tiny test run, run (b) through the
fork server and as plain processes; and the floor any plain process pays, `import torch` alone. Then, from the
demo grid's plan (`snakemake -n`), the wall time start-up costs the demo on 2 cores:
  (a) plain processes with fewer, coarser local jobs (one evaluation job per run, as the SLURM profile groups
      them) and imports cut to the floor: runs x 2 x the floor / 2 cores, the other jobs (some need no torch)
      counted free; a lower bound;
  (b) the fork server, as the workflow runs now: every job x its measured routed start-up / 2 cores.
The design rule (issue: "keep (a) unless (b) saves more than two minutes") reads the difference.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

CORES = 2


def _run(args: list[str], env: dict, timing: Path) -> float:
    r = subprocess.run([sys.executable, "-m", "bayesncl", *args], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"local_jobs: `bayesncl {' '.join(args[:1])}` failed: {r.stderr.strip()[-300:]}")
    return json.loads(timing.read_text())["startup_seconds"]


def startups(repeat: int) -> dict[str, dict[str, float]]:
    """Median start-up seconds of a pretraining and an evaluation job, routed and plain, and the import floor."""
    from bayesncl.cli import forkserver
    from conftest import TINY

    work = Path(tempfile.mkdtemp(prefix="blj-", dir="/tmp"))
    sets = sum((["--set", s] for s in TINY), [])
    base = dict(os.environ, PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1", BAYESNCL_FORKSERVER_IDLE="600")
    base[forkserver.DIR_ENV] = str(work / "fs")
    out: dict[str, dict[str, float]] = {}
    try:
        for mode in ("routed", "plain"):
            env = dict(base)
            env.pop(forkserver.ENV, None)
            if mode == "routed":
                env[forkserver.ENV] = "1"
            got: dict[str, list[float]] = {"pretrain": [], "evaluate": []}
            for i in range(repeat + (mode == "routed")):  # the first routed job starts the server: not counted
                run = work / f"{mode}{i}"
                env["BAYESNCL_TIMING"] = str(work / "t.json")
                p = _run(["pretrain", "--out", str(run), "--quiet", *sets], env, work / "t.json")
                e = _run(["evaluate", "--checkpoint", str(run / "model.pt"), "--out", str(run / "eval"), "--quiet",
                          "--only", "features", "interpretability"], env, work / "t.json")
                if mode == "plain" or i > 0:
                    got["pretrain"].append(p)
                    got["evaluate"].append(e)
            out[mode] = {k: statistics.median(v) for k, v in got.items()}
        floors = []
        for _ in range(repeat):
            t0 = time.monotonic()
            subprocess.run([sys.executable, "-c", "import torch"], check=True)
            floors.append(time.monotonic() - t0)
        out["floor"] = {"import torch": statistics.median(floors)}
    finally:
        forkserver.end_servers(str(work / "fs"))
    return out


def demo_jobs(grid: str) -> dict[str, int]:
    """Jobs per rule of the grid's full plan (`snakemake -n` into an empty results folder)."""
    exe = Path(sys.executable).with_name("snakemake")
    with tempfile.TemporaryDirectory() as tmp:
        r = subprocess.run([str(exe), "-n", "--cores", str(CORES), "--configfile", grid, "--config", f"results={tmp}"],
                           cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"local_jobs: snakemake -n failed: {r.stderr.strip()[-300:]}")
    table = r.stdout.split("Job stats:")[1]
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M) if m.group(1) != "total"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--grid", default="config/config.yaml")
    args = ap.parse_args(argv)
    from bayesncl.evaluation.sections import SECTIONS

    jobs = demo_jobs(args.grid)
    s = startups(args.repeat)
    runs = jobs.get("pretrain", 0)
    evals = sum(n for rule, n in jobs.items() if rule in SECTIONS)
    other = sum(jobs.values()) - runs - evals
    b = (runs * s["routed"]["pretrain"] + (evals + other) * s["routed"]["evaluate"]) / CORES
    plain_now = (runs * s["plain"]["pretrain"] + (evals + other) * s["plain"]["evaluate"]) / CORES
    a = 2 * runs * s["floor"]["import torch"] / CORES  # other jobs free: a lower bound
    print(f"grid {args.grid}: {sum(jobs.values())} jobs ({runs} pretrain, {evals} evaluation sections, {other} other)")
    print("start-up per job, median of", args.repeat, "(s):")
    for mode in ("routed", "plain"):
        print(f"  {mode:7s} pretrain {s[mode]['pretrain']:.2f}  evaluate {s[mode]['evaluate']:.2f}")
    print(f"  floor   import torch {s['floor']['import torch']:.2f}")
    print(f"start-up wall time of the grid on {CORES} cores (s):")
    print(f"  (b) fork server, {sum(jobs.values())} jobs: {b:.0f}")
    print(f"  plain processes, the same {sum(jobs.values())} jobs: {plain_now:.0f}")
    print(f"  (a) plain, one pretraining and one evaluation job per run ({2 * runs} torch jobs) at the import floor, "
          f"the {other} other jobs free: {a:.0f} (lower bound)")
    print(f"(b) saves at least {(a - b) / 60:.1f} min over (a); rule: keep (a) unless (b) saves more than 2 min "
          f"-> {'keep (b)' if a - b > 120 else 'keep (a)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
