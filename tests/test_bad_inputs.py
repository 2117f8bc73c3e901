"""Every entry point, given input it cannot use: exit 2 and one line naming the file or key, what was wrong and
the fix; never a traceback, never exit 0 on nothing, and nothing written (earlier outputs as they were).

One row per case: the entry point and its arguments, the exit code, a phrase the line must contain (so that
breaking any one message fails its row), and the files each case starts from. Every row snapshots its folder
before and after: a failing command must leave it byte for byte as it was. The entry points run in this process
(`bayesncl.cli.main.main`, the `main` of benchmarks/claims_stability.py, replay_steps.py and demo_runs.py, the
workflow's config check as common.smk runs it); one row runs
Snakemake itself, for the wiring. Cases that need a trained run or another user id are tested where their
fixtures live: ELSEWHERE lists them, and a test checks they still exist.

At the end, property-based tests (Hypothesis) of the readers of user files: runs.csv, the benchmark .tsv, the
claims tables and the grid YAML, given arbitrary bytes or a truncated good file, give a clean error (the
project's error types, exit 2) or a correct result, never a traceback. Then one per reader of the files each
command reads (log.jsonl, config.resolved.yaml, runs.csv, the workflow config, args.json,
backgrounds.csv), given arbitrary bytes, JSON values and YAML values: one line or success, and no file changed but
the command's own outputs.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import io
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest
import torch
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import bayesncl.cli.main as cli
from bayesncl.core.errors import REQUEUE_EXIT, BayesNCLError
from helpers.processes import PATIENCE

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("claims_stability", ROOT / "benchmarks" / "claims_stability.py")
stability = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(stability)
_spec = importlib.util.spec_from_file_location("demo_runs", ROOT / "benchmarks" / "demo_runs.py")
demo_runs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(demo_runs)
_spec = importlib.util.spec_from_file_location("replay_steps", ROOT / "benchmarks" / "replay_steps.py")
replay_steps = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(replay_steps)

# ------------------------------------------------------------------------------------------------ inputs
TSV_HEADER = ("s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\tjobid\trule_name\t"
              "wildcards\tparams\tthreads\tcpu_usage\tresources\tinput_size_mb")
TSV_RECORD = ("12.5\t0:00:12\t812.5\t900\t800\t805\t0.1\t0.2\t50.0\t10.5\t7\tpretrain\t{'run': 'x'}\t{}\t1\t"
              "NA\t{'gpu': 1, 'mem_mb': 4000}\t{}")
RUNS_HEADER = "run_id,dataset,arch,method,variant,sets,seed,sc"
RUNS_ROW = "synthetic/ncl/seed~0,synthetic,resnet18,ncl,NCL,table1,0,20.0"
CLAIMS_HEAD = "| | Claim | Left | Right | Δ [95% CI] | Test (n) | Paper | Verdict |\n|:--|:--|--:|--:|:--|:--|:--|:--|\n"
PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe\x00\x01"
WNIDS = ["n01440764", "n01443537"]


def claims(dataset: str, verdicts: dict[str, str]) -> str:
    return CLAIMS_HEAD + f"| *{dataset}* | | | | | | | |\n" + "".join(
        f"| {cid} | SC: X > Y | 1 | 2 | +1 [0, 2] | paired (5) | - | {v} |\n" for cid, v in verdicts.items())


def files(**content) -> Callable[[Path], None]:
    """A setup writing ``{relative path: text or bytes}``, the path's ``/`` written ``__`` and the dot of its
    extension too (``b__r__tsv``: ``b/r.tsv``); a value None: a folder."""
    def setup(tmp: Path) -> None:
        for name, body in content.items():
            stem, _, ext = name.rpartition("__")
            if ext in ("tsv", "csv", "md", "png", "yaml", "bin", "pt", "py"):
                name = f"{stem}.{ext}"
            path = tmp / name.replace("__", "/")
            if body is None:
                path.mkdir(parents=True, exist_ok=True)
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(body if isinstance(body, bytes) else body.encode())
    return setup


def both(*setups) -> Callable[[Path], None]:
    def setup(tmp: Path) -> None:
        for s in setups:
            s(tmp)
    return setup


def checkpoint(content) -> Callable[[Path], None]:
    def setup(tmp: Path) -> None:
        torch.save(content, tmp / "model.pt")
    return setup


def released(args: dict | None = None, drop: str = "", extra: dict | None = None, width: int = 2,
             arch: str = "resnet18", proj_in: int | None = None) -> Callable[[Path], None]:
    """A checkpoint in the released code's layout (bayesncl.runs.released) at {tmp}/r.ckpt, a tiny ResNet of
    this package under its names; `args`: method_kwargs of an args.json beside it; `drop`: a key prefix left out."""
    def setup(tmp: Path) -> None:
        from bayesncl.model.backbones import build_backbone

        bb = build_backbone(arch, width)
        f = proj_in or bb.out_dim
        sd = {f"backbone.{k}": v for k, v in bb.state_dict().items()}
        sd.update({"projector.0.weight": torch.zeros(8, f), "projector.0.bias": torch.zeros(8),
                   "projector.2.weight": torch.zeros(4, 8), "projector.2.bias": torch.zeros(4),
                   "gating_head.0.weight": torch.zeros(8, f), "gating_head.0.bias": torch.zeros(8),
                   "gating_head.2.weight": torch.zeros(4, 8), "gating_head.2.bias": torch.zeros(4)})
        sd = {k: v for k, v in sd.items() if not (drop and k.startswith(drop))} | (extra or {})
        torch.save({"epoch": 0, "state_dict": sd, "pytorch-lightning_version": "2.0.2"}, tmp / "r.ckpt")
        if args is not None:
            (tmp / "args.json").write_text(json.dumps({"method_kwargs": args}))
    return setup


def _model_pt(tmp: Path) -> None:
    from bayesncl.runs.files import save
    from bayesncl.settings.config import resolve
    from bayesncl.model.methods import build_method

    cfg = resolve(sets=["model.width=4", "model.proj_hidden=8", "model.proj_dim=4"])
    save({"config": cfg, "model": build_method(cfg).state_dict()}, tmp / "model.pt")


IMPORT = ["import", "--checkpoint", "{tmp}/r.ckpt", "--out", "{tmp}/run"]
CLAIM = {"metric": "sc", "left": "NCL", "right": "BayesNCL (STE)", "relation": ">", "tolerance": 1.0}


TINY_GRID = yaml.safe_load((ROOT / "config" / "tiny.yaml").read_text())


def _pilot(**values) -> str:
    """A pilot's runs.csv: Tables 1-2 of five variants and five seeds, every metric a claim reads set (``values``
    replace a column)."""
    from helpers.claims import MAIN, frame, row

    rows = [row(v, s, MAIN, sc=15.0 + s * (v == "BayesNCL (STE)"), se_sum=2.0, probe_top1=40.0, ret_p10=20.0)
            for v in ("SimCLR", "NCL", "Top-k NCL", "BayesNCL (STE)", "BayesNCL (Gumbel)") for s in range(5)]
    rows += [row("NCL", s, "table7", gflops=1.0, train_minutes=10.0 + s) for s in range(5)]
    rows += [row("BayesNCL (STE)", s, "table7", gflops=1.01, train_minutes=10.0 - s) for s in range(5)]
    rows += [row(v, s, "table6", bg_acc=90.0 + s * (v == "NCL")) for v in ("NCL", "BayesNCL (STE)") for s in range(5)]
    rows += [row(v, s, "table4", sc=15.0 + s) for v in ("BayesNCL (STE)", "Soft gate") for s in range(5)]
    return frame(rows).assign(**values).to_csv(index=False)


PILOT = _pilot()


def _grid_with(**keys) -> str:
    """config/tiny.yaml with its results in {tmp}/r (run from {tmp}) and `keys` added."""
    grid = yaml.safe_load((ROOT / "config" / "tiny.yaml").read_text())
    return yaml.safe_dump({**grid, "results": "r", **keys})


def _no_bytecode(mp):
    mp.setattr(sys, "dont_write_bytecode", True)  # a plugin's __pycache__ is no output of the command


def _own_registry(mp):
    """A case's plugin registers into copies of the registries, put back after it (each case's module is its own)."""
    from bayesncl.settings import plugins, registry

    _no_bytecode(mp)
    mp.setattr(registry.METHODS, "_specs", dict(registry.METHODS._specs))
    mp.setattr(plugins, "_LOADED", dict(plugins._LOADED))


def _plugin_method(module: str, settings: str = 'registry.setting(1e-3, "the L1 weight", ge=0)',
                   key: str = "l1_weight") -> str:
    """A plugin module registering method `module`_m with one setting."""
    return (f"from bayesncl.settings import registry\nfrom bayesncl.model.methods import NCL\n\n\n"
            f"@registry.method({module + '_m'!r}, reads=('temperature', 'nonneg'), settings={{{key!r}: {settings}}})\n"
            f"class Plug(NCL):\n    pass\n")


def _plugin_grid(module: str, **method) -> Callable[[Path], None]:
    """{tmp}/g.yaml: the tiny grid with one variant of the plugin's method (its `method` settings) in table1."""
    return files(g__yaml=_grid_with(plugins=[module], variants={"L1": {"method": {"name": module + "_m", **method}}},
                                    sets={"table1": {"variants": ["L1"]}}))


# Earlier outputs of a good run, which a failing command must leave as they were.
EARLIER_REPORT = files(results__tables__table1__md="earlier table\n", results__figures__figure3__png=b"earlier")
EARLIER_JOBS = files(summary__jobs__csv="rule,run\nearlier,1\n", summary__jobs__md="earlier\n")
IMAGENET_TREE = files(**{f"imagenet__{s}__{w}": None for s in ("train", "val") for w in WNIDS})


@dataclass
class Case:
    id: str
    argv: list[str]             # "{tmp}" stands for the case's folder
    phrase: str                 # the one line must contain it ("{tmp}" as in argv)
    code: int = 2
    setup: Callable[[Path], None] | None = None
    run: str = "cli"            # cli | stability | replay | demo | workflow | snakemake
    patch: Callable[[pytest.MonkeyPatch], None] | None = None
    config: Callable[[dict], None] | None = None  # the workflow rows: an edit of config/tiny.yaml


def _no_pdflatex(mp):
    import bayesncl.report.document as document
    mp.setattr(document.shutil, "which", lambda name: None)


def _no_cuda(mp):
    mp.setattr(torch.cuda, "is_available", lambda: False)


def _disk_full(mp):
    import bayesncl.data.synthetic as synthetic

    def full(*a, **k):
        raise OSError(28, "No space left on device")
    mp.setattr(synthetic.torch, "save", full)


SYN = ["--set", "data.synthetic.train_size=40", "--set", "data.synthetic.test_size=20",
       "--set", "data.synthetic.image_size=8"]
IMAGENET = ["--set", "data.dataset=imagenet100", "--set", "data.root={tmp}/imagenet", "--set",
            f"data.classes=[{','.join(WNIDS)}]", "--set", "data.imagenet_stored_size=16"]
JOBS = ["jobs", "--benchmarks", "{tmp}/b", "--out", "{tmp}/summary/jobs.csv"]
REPORT = ["report", "--summary", "{tmp}/runs.csv", "--out", "{tmp}/results"]
REPLAY_CONFIG = ("train: {epochs: 2, batch_size: 8}\n"
                 "data: {synthetic: {train_size: 40, test_size: 20, image_size: 8}}\n")  # a run's, tiny


def demo_run(name: str, epochs: int, log: bool = True) -> Callable[[Path], None]:
    """A finished run of `demo_runs.py run` under study/: result.json, its config and (``log``) its log."""
    result = {"method": "ncl", "seed": 0, "epochs": epochs, "train_bn": "view", "sets": [], "infonce": 4.0,
              "learning": {"still_learning": 0}, "top1": 50.0, "batch": {"sc": 10.0, "act": 20.0}}
    content = {f"study__{name}__result.json": json.dumps(result), f"study__{name}__config.resolved.yaml":
               "train: {batch_size: 8}\n"}
    if log:
        content[f"study__{name}__log.jsonl"] = "".join(json.dumps({"infonce": 4.0 - e / 10}) + "\n"
                                                       for e in range(epochs))
    return files(**content)


SATURATION = ["saturation", "{tmp}/study", "--figure", "{tmp}/fig/saturation"]
TSV_FIX = "rerun the job that writes it"
RUNS_FIX = "run `bayesncl summarize` to write it again"


def runs(*rows: dict[str, str]) -> str:
    """runs.csv text: a good run (RUNS_ROW, seed i) per item of ``rows``, its columns replaced by the item's."""
    head = RUNS_HEADER.split(",")
    out = [RUNS_HEADER]
    for i, edit in enumerate(rows):
        row = dict(zip(head, RUNS_ROW.split(",")), run_id=f"synthetic/ncl/seed~{i}", seed=str(i))
        out.append(",".join({**row, **edit}[c] for c in head))
    return "\n".join(out) + "\n"


def bad_runs(col: str, value: str, at: int = 1) -> Callable[[Path], None]:
    """Earlier report outputs and a runs.csv of 3 good runs but row ``at`` (0: the first run) with
    ``col``=``value``."""
    return both(EARLIER_REPORT, files(runs__csv=runs(*({col: value} if i == at else {} for i in range(3)))))

CASES = [
    # ---- prepare-imagenet
    Case("prepare-imagenet cache folder under a file", ["prepare-imagenet", *IMAGENET, "--set",
         "data.cache_dir={tmp}/blocker/cache"], "data.cache_dir: the prepared copy's folder {tmp}/blocker/cache",
         setup=both(IMAGENET_TREE, files(blocker="a file"))),
    Case("prepare-imagenet --workers -1", ["prepare-imagenet", *IMAGENET, "--workers", "-1"],
         "--workers: -1 is negative; give 0", setup=IMAGENET_TREE),
    # ---- jobs
    Case("jobs --benchmarks missing", JOBS, "--benchmarks {tmp}/b does not exist; give the workflow's",
         setup=EARLIER_JOBS),
    Case("jobs --benchmarks a file", JOBS, "--benchmarks {tmp}/b is a file, not a folder",
         setup=both(EARLIER_JOBS, files(b="x"))),
    Case("jobs --benchmarks without .tsv", JOBS, "--benchmarks {tmp}/b: no benchmark files",
         setup=both(EARLIER_JOBS, files(b=None))),
    Case("jobs ragged .tsv", JOBS, "{tmp}/b/pretrain/r.tsv: not a benchmark table",
         setup=both(EARLIER_JOBS, files(b__pretrain__r__tsv="s\tmax_rss\n1\t2\t3\t4\n"))),
    Case("jobs empty .tsv", JOBS, "{tmp}/b/pretrain/r.tsv: empty; expected Snakemake's benchmark record",
         setup=both(EARLIER_JOBS, files(b__pretrain__r__tsv=""))),
    Case("jobs binary .tsv", JOBS, "{tmp}/b/pretrain/r.tsv: not a text file",
         setup=both(EARLIER_JOBS, files(b__pretrain__r__tsv=PNG))),
    Case("jobs header-only .tsv", JOBS, "{tmp}/b/pretrain/r.tsv: a header but no record; remove it, or " + TSV_FIX,
         setup=both(EARLIER_JOBS, files(b__pretrain__r__tsv=TSV_HEADER + "\n"))),
    Case("jobs non-numeric .tsv", JOBS, "{tmp}/b/pretrain/r.tsv: column 's' is 'abc', not a number of seconds",
         setup=both(EARLIER_JOBS, files(b__pretrain__r__tsv=TSV_HEADER + "\n" + TSV_RECORD.replace("12.5", "abc", 1)
                                        + "\n"))),
    Case("jobs .tsv without wall seconds", JOBS, "{tmp}/b/pretrain/r.tsv: no column 's'",
         setup=both(EARLIER_JOBS, files(b__pretrain__r__tsv="foo\tbar\n1\t2\n"))),
    Case("jobs one bad .tsv among good ones", JOBS, "{tmp}/b/z/bad.tsv: a header but no record",
         setup=both(EARLIER_JOBS, files(b__pretrain__ok__tsv=f"{TSV_HEADER}\n{TSV_RECORD}\n",
                                        b__z__bad__tsv=TSV_HEADER + "\n"))),
    # ---- report
    Case("report empty runs.csv", REPORT, "{tmp}/runs.csv: empty, no header and no runs; " + RUNS_FIX,
         setup=both(EARLIER_REPORT, files(runs__csv=""))),
    Case("report header-only runs.csv", REPORT, "{tmp}/runs.csv: a header but no runs; " + RUNS_FIX,
         setup=both(EARLIER_REPORT, files(runs__csv=RUNS_HEADER + "\n"))),
    Case("report runs.csv without a run's columns", REPORT, "{tmp}/runs.csv: no column run_id, dataset, method, "
         "variant, sets, seed", setup=both(EARLIER_REPORT, files(runs__csv="a,b\n1,2\n"))),
    Case("report runs.csv lacking one column", REPORT, "{tmp}/runs.csv: no column sets (a runs.csv names",
         setup=both(EARLIER_REPORT, files(runs__csv=RUNS_HEADER.replace(",sets", "") + "\n"
                                          + RUNS_ROW.replace(",table1", "") + "\n"))),
    Case("report binary runs.csv", REPORT, "{tmp}/runs.csv: not a text file",
         setup=both(EARLIER_REPORT, files(runs__csv=PNG))),
    Case("report ragged runs.csv", REPORT, "{tmp}/runs.csv: not a CSV table",
         setup=both(EARLIER_REPORT, files(runs__csv=RUNS_HEADER + "\n" + RUNS_ROW + ",1,2,3\n" + RUNS_ROW + "\n"))),
    # ---- identity columns of runs.csv (a bad one changed verdicts in silence)
    Case("report runs.csv text seed", REPORT, "{tmp}/runs.csv: column seed, row 3 ('abc'): expected a "
         "non-negative integer; " + RUNS_FIX, setup=bad_runs("seed", "abc")),
    Case("report runs.csv empty seed", REPORT, "{tmp}/runs.csv: column seed, row 4 (''): expected a non-negative",
         setup=bad_runs("seed", "", at=2)),
    Case("report runs.csv fractional seed", REPORT, "column seed, row 3 ('1.5')", setup=bad_runs("seed", "1.5")),
    Case("report runs.csv negative seed", REPORT, "column seed, row 3 ('-1')", setup=bad_runs("seed", "-1")),
    Case("report runs.csv NaN seed", REPORT, "column seed, row 3 ('nan')", setup=bad_runs("seed", "nan")),
    Case("report runs.csv empty seeds in rows", REPORT, "column seed, rows 2 (''), 3 (''), 4 (''): expected",
         setup=both(EARLIER_REPORT, files(runs__csv=runs({"seed": ""}, {"seed": ""}, {"seed": ""})))),
    Case("report runs.csv empty method", REPORT, "{tmp}/runs.csv: column method, row 3 (''): expected one of cl, "
         "ncl, topk_ncl, bayesncl", setup=bad_runs("method", "")),
    Case("report runs.csv unknown method", REPORT, "column method, row 2 ('NCL')", setup=bad_runs("method", "NCL", 0)),
    Case("report runs.csv empty dataset", REPORT, "column dataset, row 3 (''): expected one of synthetic",
         setup=bad_runs("dataset", "")),
    Case("report runs.csv empty variant", REPORT, "column variant, row 3 (''): expected the variant's name",
         setup=bad_runs("variant", "")),
    Case("report runs.csv padded variant", REPORT, "column variant, row 3 (' NCL')", setup=bad_runs("variant", " NCL")),
    Case("report runs.csv empty run_id", REPORT, "column run_id, row 3 (''): expected a run's id",
         setup=bad_runs("run_id", "")),
    Case("document runs.csv text seed", ["document", "--summary", "{tmp}/runs.csv", "--out", "{tmp}/results"],
         "{tmp}/runs.csv: column seed, row 3 ('abc')", setup=bad_runs("seed", "abc")),
    # ---- clean lines that left files behind
    Case("pretrain cudagraph on a CPU-only machine", ["pretrain", "--out", "{tmp}/run", *SYN, "--set",
         "train.batch_size=8", "--set", "train.graph=cudagraph"], "train.graph: 'cudagraph' needs a CUDA device",
         patch=_no_cuda),
    *[Case(f"replay_steps {' '.join(argv)}", ["{tmp}/c.yaml", *argv], phrase, run="replay",
           setup=files(c__yaml=REPLAY_CONFIG)) for argv, phrase in (
        (["--from-epoch", "1", "--epochs", "2"], "--from-epoch 1 --epochs 2: {tmp}/c.yaml trains 2 epochs; give "
                                                 "--from-epoch 0 to 1 and --epochs 1 to 2 - --from-epoch"),
        (["--from-epoch", "2"], "--from-epoch 2 --epochs 1: {tmp}/c.yaml trains 2 epochs"),
        (["--epochs", "0"], "--from-epoch 0 --epochs 0: {tmp}/c.yaml trains 2 epochs"),
        (["--from-epoch", "-1"], "--from-epoch -1 --epochs 1: {tmp}/c.yaml trains 2 epochs"),
        (["--skip", "2:0"], "--skip 2:0: epoch 2 is not replayed (epochs 1 to 1)"))],
    Case("demo_runs saturation a run without its log", SATURATION, "{tmp}/study/ncl-view-e4-s0: its result.json, "
         "config.resolved.yaml or log.jsonl is missing or unreadable", run="demo",
         setup=both(demo_run("ncl-view-e0-s0", 0), demo_run("ncl-view-e4-s0", 4, log=False))),
    Case("demo_runs saturation missing folder --figure", SATURATION, "{tmp}/study does not exist; give the --out",
         run="demo"),
    Case("demo_runs saturation empty folder --figure", SATURATION, "no NCL result.json with per-view BatchNorm "
         "under {tmp}/study", run="demo", setup=files(study=None)),
    Case("demo_runs saturation one budget --figure", SATURATION, "needs NCL at two budgets or more under "
         "{tmp}/study", run="demo", setup=both(demo_run("ncl-view-e0-s0", 0), demo_run("ncl-view-e4-s0", 4))),
    Case("report --summary a folder", REPORT, "--summary {tmp}/runs.csv is a folder, not a file",
         setup=both(EARLIER_REPORT, files(runs__csv=None))),
    Case("report --summary missing", REPORT, "--summary {tmp}/runs.csv does not exist; run `bayesncl summarize`",
         setup=EARLIER_REPORT),
    # ---- claims_stability.py
    Case("claims_stability missing file", ["{tmp}/a.md", "{tmp}/none.md"], "{tmp}/none.md does not exist; give the "
         "claims.md", run="stability", setup=files(a__md=claims("Synthetic", {"1a": "holds"}))),
    Case("claims_stability a folder", ["{tmp}/a.md", "{tmp}"], "{tmp} is a folder, not a file", run="stability",
         setup=files(a__md=claims("Synthetic", {"1a": "holds"}))),
    Case("claims_stability no claim in common", ["{tmp}/a.md", "{tmp}/b.md"], "the two tables share no claim "
         "(1 rows in A, 2 in B", run="stability",
         setup=files(a__md=claims("Synthetic", {"1a": "holds"}), b__md=claims("CIFAR-10", {"1a": "holds", "2": "holds"}))),
    Case("claims_stability binary", ["{tmp}/a.md", "{tmp}/b.md"], "{tmp}/b.md: not a text file", run="stability",
         setup=files(a__md=claims("Synthetic", {"1a": "holds"}), b__md=PNG)),
    Case("claims_stability not a claims table", ["{tmp}/a.md", "{tmp}/b.md"], "{tmp}/b.md: no claims table with a "
         "Verdict column", run="stability",
         setup=files(a__md=claims("Synthetic", {"1a": "holds"}), b__md="| a | b |\n|---|---|\n| 1 | 2 |\n")),
    Case("claims_stability header only", ["{tmp}/a.md", "{tmp}/b.md"], "{tmp}/b.md: the claims table has no claim "
         "rows", run="stability", setup=files(a__md=claims("Synthetic", {"1a": "holds"}), b__md=CLAIMS_HEAD)),
    Case("claims_stability ragged row", ["{tmp}/a.md", "{tmp}/b.md"], "{tmp}/b.md, line 4: 3 cells, the header has 8",
         run="stability", setup=files(a__md=claims("Synthetic", {"1a": "holds"}),
                                      b__md=CLAIMS_HEAD + "| *Synthetic* | | | | | | | |\n| 1a | SC | holds |\n")),
    # ---- make-synthetic
    Case("make-synthetic cache under a file", ["make-synthetic", *SYN, "--set", "data.cache_dir={tmp}/blocker/c"],
         "data.cache_dir {tmp}/blocker/c: {tmp}/blocker is a file, not a folder", setup=files(blocker="x")),
    Case("make-synthetic cache write fails", ["make-synthetic", *SYN, "--set", "data.cache_dir={tmp}/c"],
         "data.cache_dir: nothing was cached (could not write synthetic cache", patch=_disk_full,
         setup=files(c=None)),
    # ---- the workflow's config check (`snakemake --config ...` over config/tiny.yaml)
    Case("workflow smoke=maybe", ["smoke=maybe"], "smoke: 'maybe' is not true or false; fix it in", run="workflow"),
    Case("workflow forkserver=maybe", ["forkserver=maybe"], "forkserver: 'maybe' is not true or false; fix it in",
         run="workflow"),
    Case("workflow gpu_request=gpu", ["gpu_request=gpu"], "gpu_request: 'gpu' is not one of ['gpus', 'gres']; fix it in",
         run="workflow"),
    Case("workflow seeds=[]", ["seeds=[]"], "seeds: [] is empty; give at least 1 item; fix it in", run="workflow"),
    Case("workflow seeds=[0,0]", ["seeds=[0,0]"], "seeds: ['0', '0'] repeats 0; give each item once",
         run="workflow"),
    Case("workflow seeds=[-1]", ["seeds=[-1]"], "seeds: '-1' is not a non-negative integer; fix it in",
         run="workflow"),
    Case("workflow seeds=abc", ["seeds=abc"], "seeds: 'abc' is not a list; fix it in config/tiny.yaml or give "
         "--config 'seeds=[0,1,2]'", run="workflow"),
    Case("workflow unknown top-level key", [], "the config: unknown key bogus (it takes results", run="workflow",
         config=lambda c: c.update(bogus=1)),
    Case("workflow dataset without data", [], "datasets.x: the key data is missing", run="workflow",
         config=lambda c: c["datasets"].update(x={})),
    Case("workflow set seeds=[]", [], "sets.table1.seeds: [] is empty", run="workflow",
         config=lambda c: c["sets"]["table1"].update(seeds=[])),
    Case("workflow unknown variant", [], "sets.table1.variants", run="workflow",
         config=lambda c: c["sets"]["table1"]["variants"].append("MoCo")),
    Case("workflow bad method.rho", [], "method.rho", run="workflow",
         config=lambda c: c["defaults"].setdefault("method", {}).update(rho=1.5)),
    Case("workflow unknown set", [], "sets.table8", run="workflow",
         config=lambda c: c["sets"].update(table8={"variants": ["NCL"]})),
    Case("snakemake seeds=[0,0]", ["seeds=[0,0]"], "invalid workflow config: seeds: ['0', '0'] repeats 0",
         run="snakemake"),
    # ---- the earlier review's cases: --set values, --out, checkpoints, config files, data, summarize, ...
    Case("pretrain --set unparsable YAML", ["pretrain", "--set", "method.rho=[0.5", "--out", "{tmp}/x"],
         "--set method.rho: value '[0.5' is not valid YAML"),
    Case("pretrain --set @", ["pretrain", "--set", "method.rho=@x", "--out", "{tmp}/x"],
         "--set method.rho: value '@x' is not valid YAML"),
    Case("evaluate --set unparsable YAML", ["evaluate", "--checkpoint", "{tmp}/m.pt", "--set", "eval.batch_size=[1",
                                            "--out", "{tmp}/x"], "--set eval.batch_size: value '[1' is not valid YAML"),
    Case("pretrain --out under a file", ["pretrain", "--out", "{tmp}/blocker/run"], "{tmp}/blocker is a file, not a "
         "folder; choose another location", setup=files(blocker="x")),
    Case("pretrain --out is a file", ["pretrain", "--out", "{tmp}/blocker"], "{tmp}/blocker is a file, not a folder",
         setup=files(blocker="x")),
    Case("evaluate --out under a file", ["evaluate", "--checkpoint", "{tmp}/model.pt", "--out", "{tmp}/blocker/e"],
         "--out {tmp}/blocker/e: {tmp}/blocker is a file", setup=files(blocker="x", model__pt="never read")),
    Case("report --out under a file", ["report", "--summary", "{tmp}/runs.csv", "--out", "{tmp}/blocker/r"],
         "--out {tmp}/blocker/r: {tmp}/blocker is a file", setup=files(blocker="x", runs__csv=RUNS_HEADER)),
    Case("summarize --out under a file", ["summarize", "--grid-json", "{}", "--out", "{tmp}/blocker/s/runs.csv"],
         "{tmp}/blocker is a file, not a folder", setup=files(blocker="x")),
    Case("summarize --out a folder", ["summarize", "--grid-json", "{}", "--out", "{tmp}/out"],
         "--out {tmp}/out is a folder; give the CSV file to write", setup=files(out=None)),
    Case("summarize --grid missing", ["summarize", "--grid", "{tmp}/none.yaml", "--out", "{tmp}/runs.csv"],
         "--grid {tmp}/none.yaml does not exist"),
    Case("summarize --grid-json not JSON", ["summarize", "--grid-json", "{", "--out", "{tmp}/runs.csv"],
         "--grid-json: not valid JSON"),
    *[Case(f"{cmd} --grid-json without defaults", [cmd, "--grid-json", '{"results": "r", "seeds": [0]}', *extra],
           "the config: the keys defaults, datasets, variants, sets are missing; fix it in --grid-json",
           setup=files(runs__csv=PILOT))
      for cmd, extra in (("plan", ["--pilot", "{tmp}/runs.csv"]), ("summarize", ["--out", "{tmp}/s.csv"]))],
    Case("summarize --grid binary", ["summarize", "--grid", "{tmp}/g.bin", "--out", "{tmp}/runs.csv"],
         "--grid {tmp}/g.bin: not a text file", setup=files(g__bin=PNG)),
    Case("summarize --grid not a mapping", ["summarize", "--grid", "{tmp}/g.yaml", "--out", "{tmp}/runs.csv"],
         "--grid {tmp}/g.yaml: expected a mapping", setup=files(g__yaml="- a\n- b\n")),
    Case("pretrain --config binary", ["pretrain", "--config", "{tmp}/c.bin", "--out", "{tmp}/run"],
         "config file {tmp}/c.bin: not a text file", setup=files(c__bin=PNG)),
    Case("pretrain --config missing", ["pretrain", "--config", "{tmp}/c.yaml", "--out", "{tmp}/run"],
         "{tmp}/c.yaml does not exist"),
    Case("pretrain --config-json not an object", ["pretrain", "--config-json", "[1]", "--out", "{tmp}/run"],
         "--config-json: expected a JSON object of config keys, got [1]"),
    Case("evaluate truncated checkpoint", ["evaluate", "--checkpoint", "{tmp}/model.pt", "--out", "{tmp}/e"],
         "{tmp}/model.pt could not be read", setup=files(model__pt="truncated")),
    Case("evaluate junk checkpoint", ["evaluate", "--checkpoint", "{tmp}/model.pt", "--out", "{tmp}/e"],
         "expected a file that `bayesncl pretrain` wrote", setup=files(model__pt=PNG * 40)),
    Case("evaluate pickled object checkpoint", ["evaluate", "--checkpoint", "{tmp}/model.pt", "--out", "{tmp}/e"],
         "expected a file that `bayesncl pretrain` wrote", setup=checkpoint({"model": {}, "note": Path("x")})),
    Case("evaluate foreign checkpoint", ["evaluate", "--checkpoint", "{tmp}/model.pt", "--out", "{tmp}/e"],
         "is this a bayesncl checkpoint", setup=checkpoint({"weights": torch.zeros(2)})),
    Case("evaluate missing checkpoint", ["evaluate", "--checkpoint", "{tmp}/nope/model.pt", "--out", "{tmp}/e"],
         "--checkpoint {tmp}/nope/model.pt does not exist; give the model.pt"),
    Case("evaluate checkpoint a folder", ["evaluate", "--checkpoint", "{tmp}/d", "--out", "{tmp}/e"],
         "--checkpoint {tmp}/d is a folder, not a file", setup=files(d=None)),
    *[Case(f"pretrain {bad}", ["pretrain", "--out", "{tmp}/run", "--set", bad], key) for bad, key in (
        ("method.name=simsiam", "method.name"), ("method.rho=1.5", "method.rho"), ("method.rho=0", "method.rho"),
        ("method.lambda=-1", "method.lambda"), ("train.epochs=-1", "train.epochs"), ("method.gate=hard", "method.gate"),
        ("model.arch=vit", "model.arch"), ("model.depth=3", "model.depth"), ("train.graph=fast", "train.graph"),
        ("no.such_key=1", "no: unknown key; known keys here: data, eval"))],
    Case("pretrain cifar10 without data.root", ["pretrain", "--out", "{tmp}/run", "--set", "data.dataset=cifar10"],
         "data.root"),
    Case("pretrain cifar100 root missing", ["pretrain", "--out", "{tmp}/run", "--set", "data.dataset=cifar100",
                                            "--set", "data.root={tmp}/nowhere"], "{tmp}/nowhere"),
    Case("pretrain imagenet100 class folders missing", ["pretrain", "--out", "{tmp}/run", *IMAGENET[:2], "--set",
         "data.root={tmp}/imagenet"], "class folders missing", setup=IMAGENET_TREE),
    Case("make-synthetic another key", ["make-synthetic", *SYN, "--set", "train.epochs=3"],
         "--set train.epochs: make-synthetic takes data.synthetic.* and data.cache_dir only"),
    Case("make-synthetic a cifar config", ["make-synthetic", "--config", "{tmp}/c.yaml"],
         "data.dataset: make-synthetic generates the synthetic set, but", setup=files(c__yaml="data: {dataset: "
                                                                                      "cifar10, root: /x}\n")),
    Case("prepare-imagenet a cifar config", ["prepare-imagenet", "--set", "data.dataset=cifar10", "--set",
                                              "data.root=/x"], "has no prepared copy (nothing to prepare)"),
    Case("prepare-imagenet root missing", ["prepare-imagenet", *IMAGENET[:2], "--set", "data.root={tmp}/nope"],
         "{tmp}/nope: data.root not found"),
    Case("document --summary missing", ["document", "--summary", "{tmp}/none.csv", "--out", "{tmp}"],
         "--summary {tmp}/none.csv does not exist; run `bayesncl summarize` first"),
    Case("document empty runs.csv", ["document", "--summary", "{tmp}/runs.csv", "--out", "{tmp}/results"],
         "{tmp}/runs.csv: empty", setup=both(EARLIER_REPORT, files(runs__csv=""))),
    Case("pdf without pdflatex", ["pdf", "--tex", "{tmp}/report.tex", "--out", "{tmp}/report.pdf"],
         "pdflatex not found", patch=_no_pdflatex),
    Case("atlas --run missing", ["atlas", "--run", "{tmp}/missing"], "config.resolved.yaml: not found"),
    Case("import a ViT", IMPORT, "the backbone is not a ResNet (backbone.cls_token",
         setup=released(drop="backbone.", extra={"backbone.cls_token": torch.zeros(1, 1, 8),
                                                 "backbone.patch_embed.proj.weight": torch.zeros(8, 3, 4, 4)})),
    Case("import a ResNet-34", IMPORT, "a ResNet with [3, 4, 6, 3] Basic blocks per stage; only ResNet-18 and",
         setup=released(arch="resnet50", drop="backbone.layer1.0.conv3")),
    Case("import BayesNCL without its gating head", IMPORT, "use_bayes is True but the state dict has no gating_head",
         setup=released(args={"use_bayes": True, "non_neg": "relu"}, drop="gating_head.")),
    Case("import a projector of another width", IMPORT, "the projector's layers are (out, in) [(8, 20), (4, 8)]",
         setup=released(proj_in=20)),
    Case("import a gating head of another hidden width", IMPORT, "the gating head's hidden widths are [6]; this package's "
         "head of depth 2 has [8]", setup=released(extra={"gating_head.0.weight": torch.zeros(6, 16),
                                                           "gating_head.0.bias": torch.zeros(6),
                                                           "gating_head.2.weight": torch.zeros(4, 6)})),
    Case("import keys of no module here", IMPORT, "keys of no module this package has (momentum_backbone.w)",
         setup=released(extra={"momentum_backbone.w": torch.zeros(1)})),
    Case("import no method to be told", IMPORT, "no hyper-parameters and no gating head, so the method is not known",
         setup=released(drop="gating_head.")),
    Case("import non_neg gelu", IMPORT, "method_kwargs.non_neg 'gelu'",
         setup=released(args={"use_bayes": True, "non_neg": "gelu"})),
    Case("import a list gate_type", IMPORT, "method_kwargs.gate_type ['STE']; the released gates are",
         setup=released(args={"use_bayes": True, "non_neg": "relu", "gate_type": ["STE"]})),
    Case("import a text topk_k", IMPORT, "method_kwargs.topk_k '5' is not a positive whole number",
         setup=released(args={"use_topk": True, "non_neg": "relu", "topk_k": "5"}, drop="gating_head.")),
    Case("import a list method_kwargs in the checkpoint", IMPORT, "method_kwargs is '[1]', not a mapping",
         setup=lambda tmp: (released()(tmp), torch.save({**torch.load(tmp / "r.ckpt"),
                                                          "hyper_parameters": {"method_kwargs": [1]}}, tmp / "r.ckpt"))),
    Case("import a pickled object", IMPORT, "pickles Python objects that are not read without running their code",
         setup=lambda tmp: torch.save({"state_dict": {}, "hyper_parameters": {"p": Path("x")}}, tmp / "r.ckpt")),
    Case("import missing checkpoint", IMPORT, "checkpoint {tmp}/r.ckpt does not exist"),
    Case("export a narrow backbone to timm", ["export", "--checkpoint", "{tmp}/model.pt", "--format", "timm",
                                              "--out", "{tmp}/x"], "model.width is 4; timm's resnet18 has base width 64",
         setup=lambda tmp: _model_pt(tmp)),
    Case("atlas --grid missing", ["atlas", "--run", "{tmp}/missing", "--grid", "{tmp}/g.yaml"],
         "--grid {tmp}/g.yaml does not exist"),
    # ---- a plugin's own failure and a claim's value of the wrong type, each one line
    *[Case(f"stale plugin {what}", ["stale", "--grid", "{tmp}/g.yaml"], f"plugins: plugin 'plug' ({{tmp}}/plug.py, "
           f"line {line}) {phrase} while imported; fix the plugin", setup=files(g__yaml=_grid_with(plugins=["plug"]),
                                                                               plug__py=body, r=None),
           patch=_no_bytecode)
      for what, body, line, phrase in (
          ("raises", "import os\nraise RuntimeError('no GPU here')\n", 2, "raised RuntimeError: no GPU here"),
          ("SyntaxError", "def f(:\n    pass\n", 1, "raised SyntaxError: invalid syntax"),
          ("sys.exit(3)", "import sys\nsys.exit(3)\n", 2, "called sys.exit(3)"))],
    Case("a job's plugin calls sys.exit(3)", ["status", "{tmp}"], "$BAYESNCL_PLUGINS: plugin 'plug' ({tmp}/plug.py, "
         "line 2) called sys.exit(3) while imported", setup=files(plug__py="import sys\nsys.exit(3)\n"),
         patch=lambda mp: (_no_bytecode(mp), mp.setenv("BAYESNCL_PLUGINS", "plug"),
                           mp.setenv("BAYESNCL_PLUGIN_PATH", "."))),
    # ---- a plugin's settings and its import, each one line
    *[Case(f"stale plugin setting {what}", ["stale", "--grid", "{tmp}/g.yaml"], phrase,
           setup=both(_plugin_grid(module, **given), files(**{f"{module}__py": _plugin_method(module, **decl)}),
                      files(r=None)), patch=_own_registry)
      for what, module, given, decl, phrase in (
          ("out of bounds", "plug48a", {"l1_weight": -0.5}, {},
           "datasets.synthetic / variants.L1 / sets.table1: method.l1_weight: got -0.5, expected a number >= 0"),
          ("of another type", "plug48b", {"l1_weight": "heavy"}, {},
           "method.l1_weight: got 'heavy', expected a number >= 0"),
          ("of another method", "plug48c", {"weight": 0.1}, {},
           "method.weight: unknown key; known keys here: detach, gate, head_depth, head_lr, l1_weight, lambda"),
          ("named as a package key", "plug48d", {}, {"key": "rho"},
           "method.rho: a plugin declares a setting where the package has the key method.rho; give the plugin's "
           "setting another name"),
          ("declared out of its own bounds", "plug48e", {}, {"settings": 'registry.setting(-1, "w", ge=0)'},
           "plugins: plugin 'plug48e': setting 'w': its default -1 is not one of its own values (an integer >= "
           "0)"))],
    # ---- a method setting written for runs whose method does not read it: refused where it was written
    *[Case(f"snakemake a setting written on {where}", ["plugins=[plug57a]", given], f"invalid workflow config: "
           f"{place}: method ncl does not declare l1_weight (plug57a_m does); remove it there or write "
           "it for one of those", run="snakemake", setup=files(plug57a__py=_plugin_method("plug57a")),
           patch=lambda mp: (mp.setenv("PYTHONDONTWRITEBYTECODE", "1"), mp.setenv("BAYESNCL_PLUGIN_PATH", os.getcwd())))
      for where, given, place in (
          ("a variant", "variants={NCL: {method: {name: ncl, l1_weight: 0.5}}}", "variants.NCL.method.l1_weight"),
          ("a sweep", "sets={figure4b: {variants: [NCL], sweep: {method.l1_weight: [0.1, 0.2]}}}",
           "sets.figure4b.sweep.method.l1_weight"))],
    Case("stale a setting written on another method's variant", ["stale", "--grid", "{tmp}/g.yaml"],
         "variants.NCL.method.l1_weight: method ncl does not declare l1_weight (plug57b_m does)",
         setup=both(files(g__yaml=_grid_with(plugins=["plug57b"], variants={"NCL": {"method": {
             "name": "ncl", "l1_weight": 0.5}}}, sets={"table1": {"variants": ["NCL"]}})),
             files(plug57b__py=_plugin_method("plug57b"), r=None)), patch=_own_registry),
    Case("pretrain --set a plugin's setting on another method", ["pretrain", "--set", "method.name=ncl", "--set",
                                                                  "method.l1_weight=0.1", "--out", "{tmp}/x"],
         "--set method.l1_weight=0.1: method ncl does not declare l1_weight (plug57c_m does)",
         setup=files(plug57c__py=_plugin_method("plug57c")),
         patch=lambda mp: (_own_registry(mp), mp.setenv("BAYESNCL_PLUGINS", "plug57c"),
                           mp.setenv("BAYESNCL_PLUGIN_PATH", "."))),
    Case("snakemake a plugin that raises while imported", ["plugins=[plug48f]"], "invalid workflow config: plugins: "
         "plugin 'plug48f' ({tmp}/plug48f.py, line 2) raised RuntimeError: no GPU here while imported; fix the plugin "
         "or remove it from the workflow config's plugins", run="snakemake",
         setup=files(plug48f__py="import os\nraise RuntimeError('no GPU here')\n"),
         patch=lambda mp: (mp.setenv("PYTHONDONTWRITEBYTECODE", "1"), mp.setenv("BAYESNCL_PLUGIN_PATH", os.getcwd()))),
    *[Case(f"document claims {key}: {value!r}", ["document", "--summary", "{tmp}/runs.csv", "--out", "{tmp}/results",
                                                 "--grid", "{tmp}/g.yaml"], f"claims[0].{key}: {phrase}",
           setup=both(EARLIER_REPORT, files(runs__csv=runs(), g__yaml=_grid_with(claims=[{**CLAIM, key: value}]))))
      for key, value, phrase in (
          ("metric", ["sc"], "['sc'] is not a name; give it as text"),
          ("relation", {"a": 1}, "{'a': 1} is not a name"),
          ("left", ["NCL"], "['NCL'] is not a name"),
          ("set", {"t": 1}, "{'t': 1} is not a name"),
          ("tolerance", float("nan"), "nan is not a finite positive number"),
          ("tolerance", float("inf"), "inf is not a finite positive number"),
          ("tolerance", -0.5, "-0.5 is not a finite positive number"),
          ("tolerance", "1", "'1' is not a finite positive number"),
          ("relative", "yes", "'yes' is not true or false"),
          ("id", [1], "[1] is not a name"))],
    # ---- `plan` reads its grid as Snakemake does and checks its outputs before the work
    *[Case(f"plan grid {what}", ["plan", "--grid", "{tmp}/g.yaml", "--pilot", "{tmp}/runs.csv", "--out",
                                 "{tmp}/plan.yaml"], phrase, setup=files(g__yaml=_grid_with(**keys), runs__csv=PILOT))
      for what, keys, phrase in (
          ("claim with an unknown metric", {"claims": [{**CLAIM, "metric": "nosuch"}]},
           "claims[0].metric: unknown metric 'nosuch'"),
          ("claim with an unknown side", {"claims": [{**CLAIM, "left": "Nobody"}]},
           "claims[0].left: no variant 'Nobody'; the variants: "),
          ("claim with tolerance .nan", {"claims": [{**CLAIM, "relation": "within", "tolerance": math.nan}]},
           "claims[0].tolerance: nan is not a finite positive number"),
          ("defaults train: 5", {"defaults": {**TINY_GRID["defaults"], "train": 5}},
           "train: expected a mapping of epochs"),
          ("train.epochs -3", {"defaults": {**TINY_GRID["defaults"], "train": {**TINY_GRID["defaults"]["train"],
                                                                               "epochs": -3}}},
           "train.epochs: got -3, expected an integer >= 0"),
          ("unknown variant in a set", {"sets": {**TINY_GRID["sets"], "table1": {"variants": ["Nobody"]}}},
           "sets.table1.variants: unknown variant 'Nobody'"),
          ("missing plugin", {"plugins": ["nosuch58"]}, "plugins: no plugin module 'nosuch58'"),
          ("effect .nan", {"plan": {"effects": {"1a": math.nan}}}, "plan.effects.1a: nan is not a finite number"))],
    *[Case(f"plan {flag} {where}", ["plan", "--grid", "{tmp}/g.yaml", "--pilot", "{tmp}/runs.csv", flag, path],
           phrase, setup=files(g__yaml=_grid_with(), runs__csv=PILOT, f="a file", d=None))
      for flag in ("--out", "--text")
      for where, path, phrase in (("under a file", "{tmp}/f/plan.yaml", f"{flag} {{tmp}}/f/plan.yaml: {{tmp}}/f is a "
                                                                          "file, not a folder"),
                                  ("a folder", "{tmp}/d", f"{flag} {{tmp}}/d is a folder; give the file to write"))],
    *[Case(f"{cmd} --measured {what}", [cmd, "--grid", "{tmp}/g.yaml", *extra, "--measured", "{tmp}/m.bin"], phrase,
           setup=files(g__yaml=_grid_with(), runs__csv=PILOT, m__bin=body))
      for cmd, extra in (("plan", ["--pilot", "{tmp}/runs.csv"]), ("estimate", []))
      for what, body, phrase in (
          ("binary", PNG, "--measured {tmp}/m.bin: cannot be read as gpu_check.json (not a UTF-8 text file)"),
          ("a list", "[1, 2]", "--measured {tmp}/m.bin: no `steps` mapping of step records"),
          ("steps a list", '{"steps": [1]}', "--measured {tmp}/m.bin: no `steps` mapping of step records"),
          ("a step a number", '{"steps": {"throughput": 1}}', "--measured {tmp}/m.bin: no `steps` mapping of step "
                                                                 "records"),
          ("a rate of 0", json.dumps({"steps": {"throughput": {"status": "ok", "result": {"ncl": {
              "img_per_s": 0, "gflops_fwd_per_view": 1.1}}}}}), "--measured {tmp}/m.bin: its throughput step did "
                                                                  "not end ok"))],
    *[Case(f"{cmd} --grid-json a list", [cmd, "--grid-json", "[1, 2]", *extra],
           "--grid-json: expected the workflow config as a JSON object, got [1, 2]", setup=files(runs__csv=PILOT))
      for cmd, extra in (("plan", ["--pilot", "{tmp}/runs.csv"]), ("summarize", ["--out", "{tmp}/s.csv"]))],
    *[Case(f"plan pilot sc {what}", ["plan", "--grid", "{tmp}/g.yaml", "--pilot", "{tmp}/runs.csv", "--out",
                                     "{tmp}/plan.yaml"],
           "--pilot {tmp}/runs.csv: column 'sc' holds no number in any of its 55 runs (text or empty), though claim "
           "1a reads it", setup=files(g__yaml=_grid_with(), runs__csv=_pilot(sc=value)))
      for what, value in (("all text", "abc"), ("all NaN", ""))],
]

# Bad-input cases whose fixtures (a trained run, another user id, a cluster, DataLoader workers) live in other
# test files; test_cases_tested_elsewhere_still_exist keeps this list honest.
ELSEWHERE = {
    "test_cli.py": ["test_out_in_read_only_folder_fails_before_work", "test_corrupt_jpeg_in_a_worker_is_the_same_one_line_error",
                    "test_evaluate_by_default_computes_what_the_run_has", "test_a_bug_keeps_its_traceback"],
    "test_evaluate.py": ["test_checkpoint_with_other_config_is_refused", "test_empty_split_is_a_clear_error"],
    "test_atlas.py": ["test_cli_errors_name_the_file_and_the_fix"],
    "test_feed.py": ["test_prepare_errors_name_the_path_and_layout", "test_a_stale_or_damaged_copy_is_never_read",
                     "test_a_block_corrupted_at_the_same_size_is_caught_and_verify_repairs_it",
                     "test_a_manifest_pointing_at_the_other_splits_file_is_caught"],
    "test_gpu_check.py": ["test_cuda_without_a_gpu_is_a_one_line_error",
                          "test_a_budget_of_no_time_is_a_one_line_error"],
    "test_smoke.py": ["test_a_bad_dataset_root_stops_the_run_before_any_job"],
    "test_workflow.py": ["test_bad_config_fails_when_the_dag_is_built", "test_bad_config_is_reported_with_its_key"],
}


# ------------------------------------------------------------------------------------------------ running a row
def _snapshot(root: Path) -> dict[str, str]:
    out = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        out[rel] = "folder" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _workflow_check(entries: list[str], edit) -> int:
    """What workflow/rules/common.smk runs on `snakemake --configfile config/tiny.yaml --config ENTRIES`."""
    from snakemake.cli import parse_config

    from bayesncl.core.errors import ConfigError
    from bayesncl.grid.expand import expand_grid
    from bayesncl.cli.workflow import check_workflow_config, coerce_switches

    config = yaml.safe_load((ROOT / "config" / "tiny.yaml").read_text())
    if edit is not None:
        edit(config)
    config.update(parse_config(entries))
    try:
        coerce_switches(config)
        check_workflow_config(config, ROOT / "workflow" / "schemas" / "config.schema.yaml", "config/tiny.yaml")
        expand_grid(config)
    except ConfigError as e:
        print(f"invalid workflow config: {e}", file=sys.stderr)
        return 2
    return 0


def _snakemake(entries: list[str], tmp: Path) -> tuple[int, str, str]:
    exe = shutil.which("snakemake", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    if exe is None:
        pytest.skip("snakemake not installed")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    r = subprocess.run([exe, "-n", "--configfile", "config/tiny.yaml", "--config", *entries, f"results={tmp}/r"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    # Snakemake's own notes (the pdflatex hint of the Snakefile, the workflow profile it read) are not the error
    notes = ("pdflatex not found", "Using workflow specific profile")
    err = "".join(line + "\n" for line in r.stderr.splitlines() if not line.startswith(notes))
    return r.returncode, r.stdout, err


def run_case(case: Case, tmp: Path, monkeypatch) -> tuple[int, str, str]:
    sub = lambda s: s.replace("{tmp}", str(tmp))  # noqa: E731
    argv = [sub(a) for a in case.argv]
    if case.patch is not None:
        case.patch(monkeypatch)
    if case.run == "snakemake":
        return _snakemake(argv, tmp)
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            if case.run == "cli":
                code = cli.main(argv)
            elif case.run == "stability":
                code = stability.main(argv)
            elif case.run == "replay":
                code = replay_steps.main(argv)
            elif case.run == "demo":
                code = demo_runs.main(argv)
            else:
                code = _workflow_check(argv, case.config)
        except SystemExit as e:  # argparse
            code = e.code
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_line_and_writes_nothing(case: Case, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BAYESNCL_CACHE", str(tmp_path / "default-cache"))
    if case.setup is not None:
        case.setup(tmp_path)
    before = _snapshot(tmp_path)
    code, out, err = run_case(case, tmp_path, monkeypatch)
    assert code == case.code, (code, err)
    assert "Traceback" not in err and err.count("\n") == 1 and err.endswith("\n"), err
    assert case.phrase.replace("{tmp}", str(tmp_path)) in err, err
    assert "error" in err.split(":", 2)[1] or err.startswith("invalid workflow config: ")
    assert out == "" or case.run == "snakemake", out  # nothing claimed done ("cached in", "0 jobs", ...)
    assert _snapshot(tmp_path) == before  # nothing written, earlier outputs as they were


@pytest.mark.parametrize("text, given", [("[1, 2]", "[1, 2]"), ("3", "3"), ('"x"', "'x'"), ("null", "None"),
                                         ("[" + "1, " * 20 + "1]", "[" + "1, " * 12 + "..."), ("{", None)])
def test_a_json_flag_is_an_object_or_one_line_naming_the_flag_what_was_expected_and_given(text, given):
    from bayesncl.core.errors import ConfigError
    from bayesncl.core.yamlio import json_flag

    assert json_flag('{"a": 1}', "--config-json") == {"a": 1}
    with pytest.raises(ConfigError) as e:
        json_flag(text, "--config-json")
    assert str(e.value) == (f"--config-json: expected a JSON object of config keys, got {given}" if given else
                            "--config-json: not valid JSON (Expecting property name enclosed in double quotes: line 1 "
                            "column 2 (char 1))")


def test_the_table_has_every_case_once():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))
    assert len(CASES) + sum(map(len, ELSEWHERE.values())) >= 91  # no case lost: 91 when this count was set


def test_cases_tested_elsewhere_still_exist():
    for name, tests in ELSEWHERE.items():
        defined = {n.name for n in ast.walk(ast.parse((ROOT / "tests" / name).read_text()))
                   if isinstance(n, ast.FunctionDef)}
        assert set(tests) <= defined, (name, set(tests) - defined)


# ------------------------------------------------------------------- an image folder's mistakes, by Snakemake
def _image_folder_grid(tmp: Path) -> Path:
    """An image folder of 2 classes (4 PNGs per class and split) and the tiny grid over it (NCL in Table 1)."""
    from PIL import Image

    for split in ("train", "val"):
        for c, colour in (("cat", (200, 40, 40)), ("dog", (40, 40, 200))):
            (tmp / "images" / split / c).mkdir(parents=True)
            for i in range(4):
                Image.new("RGB", (12, 12), colour).save(tmp / "images" / split / c / f"{i}.png")
    wf = yaml.safe_load(_grid_with(datasets={"mine": {"data": {
        "dataset": "imagefolder", "root": str(tmp / "images"), "cache_dir": str(tmp / "cache"),
        "imagefolder": {"stored_size": 8, "crop_size": 8}}}}, sets={"table1": {"variants": ["NCL"]}}))
    wf["results"] = str(tmp / "results")
    (tmp / "g.yaml").write_text(yaml.safe_dump(wf))
    return tmp / "g.yaml"


# Snakemake's own line, printed by its command line before it reads the workflow: the workflow profile (which picks
# the greedy scheduler, profiles/default) is found; nothing the workflow does comes before it or can quiet it.
PROFILE_LINE = "Using workflow specific profile profiles/default for setting default command line arguments."


def _run_grid(grid: Path, *targets: str) -> subprocess.CompletedProcess:
    exe = shutil.which("snakemake", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    if exe is None:
        pytest.skip("snakemake not installed")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1")
    # --nolock: other test workers run Snakemake in the checkout at once (each into a temp folder of its own), and
    # Snakemake's lock files there race between processes
    return subprocess.run([exe, *targets, "--cores", "2", "--nolock", "--configfile", str(grid)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def _refusal(r: subprocess.CompletedProcess) -> str:
    """The one line a run refused before any job printed: all it printed (Snakemake's banner, its job table and
    the rest held back and dropped), after the profile's line."""
    assert r.returncode == 2 and r.stdout == "", (r.stdout + r.stderr)[-3000:]
    lines = r.stderr.splitlines()
    assert len(lines) == 2 and lines[0] == PROFILE_LINE and r.stderr.endswith("\n"), r.stderr[-3000:]
    return lines[1]


@pytest.mark.parametrize("damage", ["no image", "truncated"])
def test_an_undecodable_image_is_one_line_before_any_job(tmp_path, damage):
    """Such a file once passed the dry run and the pre-flight and failed in prepare_data: 76 lines of
    Snakemake's, the clear line in a job's log. The pre-flight reads every image through: one line naming it,
    exit 2, nothing run."""
    grid = _image_folder_grid(tmp_path)
    bad = tmp_path / "images" / "train" / "dog" / "2.png"
    bad.write_bytes(b"not an image" if damage == "no image" else bad.read_bytes()[:60])
    r = _run_grid(grid)
    lines = [_refusal(r)]
    assert lines[0].startswith(f"pre-flight: imagefolder (datasets.mine.data.root: {tmp_path / 'images'}): {bad}: "
                               "not a decodable image (")
    assert lines[0].endswith("); replace the file with the image or remove it (needed by imagefolder/ncl/seed~0 and "
                             "any other run still to be done)")
    from PIL import Image, UnidentifiedImageError
    try:  # the reason in the parentheses: PIL's own first line, or that PIL reads no such format
        with Image.open(bad) as im:
            im.verify()
        why = "verified"
    except UnidentifiedImageError:
        why = "no image format PIL reads"
    except Exception as e:  # noqa: BLE001
        why = str(e).strip().splitlines()[0] or type(e).__name__
    assert f"not a decodable image ({why}); " in lines[0], (why, lines[0])
    assert "Error in rule" not in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "results").exists() and not (tmp_path / "cache").exists()  # no job ran


def test_a_split_lacking_a_class_is_one_line_without_the_root_hint(tmp_path):
    """The root is the right folder: the line says which class is missing where, and no longer tells the user to
    point data.root elsewhere (a root that does not exist still gets that hint: test_preflight.py)."""
    grid = _image_folder_grid(tmp_path)
    shutil.rmtree(tmp_path / "images" / "val" / "dog")
    r = _run_grid(grid)
    lines = [_refusal(r)]
    assert lines[0].startswith("pre-flight: imagefolder (datasets.mine.data.root: ")
    assert (f"{tmp_path / 'images'}: train/ and val/ have different class folders (only in train/: dog; only in val/: "
            "none)") in lines[0]
    assert lines[0].endswith("add or remove class folders so both splits name the same classes (needed by "
                             "imagefolder/ncl/seed~0 and any other run still to be done)")
    assert "Fix: set" not in lines[0] and not (tmp_path / "results").exists()


def test_a_bad_root_no_job_needs_holds_nothing_back(tmp_path):
    """A root that fails its check holds Snakemake's lines back until it knows whether a job to be done reads it:
    here none does (the target is made), so they all come out, in order, and the run says it has nothing to do."""
    grid = _image_folder_grid(tmp_path)
    shutil.rmtree(tmp_path / "images" / "val" / "dog")
    model = tmp_path / "results" / "runs" / "imagefolder" / "ncl" / "seed~0" / "model.pt"
    model.parent.mkdir(parents=True)
    model.write_bytes(b"trained before the class folder went")
    r = _run_grid(grid, str(model))
    assert r.returncode == 0 and "pre-flight" not in r.stderr, r.stderr[-3000:]
    lines = r.stderr.splitlines()
    order = [lines.index(x) for x in (PROFILE_LINE, "Assuming unrestricted shared filesystem usage.",
                                      "Building DAG of jobs...", "Nothing to be done (all requested files are present "
                                                                 "and up to date).")]
    assert order == sorted(order) and "SNAKEMAKE" in lines[order[1]:order[2]], r.stderr


def test_a_good_image_folder_passes_the_read_through_once_prepared(tmp_path):
    """verify_images finds nothing in a good folder, and a prepared copy is not read through again."""
    from bayesncl.data.imagefolder import prepare_imagefolder, verify_images
    from bayesncl.grid.expand import expand_grid
    from bayesncl.grid.preflight import missing_data

    grid = _image_folder_grid(tmp_path)
    wf = yaml.safe_load(grid.read_text())
    runs = expand_grid(wf)
    verify_images({"root": str(tmp_path / "images")})
    (tmp_path / "images" / "val" / "cat" / "0.png").write_bytes(b"")
    assert len(missing_data(wf, runs, {rid: {"pretrain"} for rid in runs})) == 1
    (tmp_path / "images" / "val" / "cat" / "0.png").unlink()
    prepare_imagefolder(str(tmp_path / "images"), stored_size=8, cache_dir=str(tmp_path / "cache"), progress=False)
    (tmp_path / "images" / "val" / "cat" / "1.png").write_bytes(b"damaged after the copy was made")
    assert missing_data(wf, runs, {rid: {"pretrain"} for rid in runs}) == []


# ------------------------------------------------------------------------------------------------ the good paths
def test_partly_different_claim_sets_name_the_unmatched_rows(tmp_path, capsys):
    a, b = tmp_path / "a.md", tmp_path / "b.md"
    a.write_text(claims("Synthetic", {"1a": "holds", "2": "holds"}))
    b.write_text(claims("Synthetic", {"1a": "holds", "3": "inconclusive (leans for)"}))
    assert stability.main([str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "1 of 1 verdicts agree" in out and "2 rows in one table only (not compared)" in out
    assert f"only in A ({a}): 2 SC: X > Y (Synthetic)" in out and f"only in B ({b}): 3 SC: X > Y (Synthetic)" in out


def test_rows_in_one_table_only_are_counted_from_both_sides(tmp_path, capsys):
    """1 row only in A and 3 only in B: 4 unmatched either way round (not A's alone, nor twice one side's)."""
    a, b = tmp_path / "a.md", tmp_path / "b.md"
    a.write_text(claims("Synthetic", {"1a": "holds", "2": "holds"}))
    b.write_text(claims("Synthetic", {"1a": "holds", "3": "holds", "4": "holds", "5": "holds"}))
    for x, y in ((a, b), (b, a)):
        _, n = stability.compare(stability.read_claims(x), stability.read_claims(y))
        assert n["rows"] == 1 and n["only_one"] == 4, n
        assert stability.main([str(x), str(y)]) == 0
        out = capsys.readouterr().out
        assert "; 4 rows in one table only (not compared)" in out and out.count("only in ") == 4


def test_good_inputs_still_work(tmp_path, capsys):
    """The rows' inputs made good: the same commands succeed, so the rows fail for the reason they name."""
    b = tmp_path / "b" / "pretrain"
    b.mkdir(parents=True)
    (b / "r.tsv").write_text(f"{TSV_HEADER}\n{TSV_RECORD}\n")
    assert cli.main(["jobs", "--benchmarks", str(tmp_path / "b"), "--out", str(tmp_path / "jobs.csv")]) == 0
    assert "1 jobs" in capsys.readouterr().out
    from bayesncl.report.summary import read_summary

    (tmp_path / "runs.csv").write_text(f"{RUNS_HEADER}\n{RUNS_ROW}\n")
    df = read_summary(tmp_path / "runs.csv")
    assert list(df["run_id"]) == ["synthetic/ncl/seed~0"] and df["sc"].tolist() == [20.0]
    (tmp_path / "runs.csv").write_text(runs({}, {"seed": "1.0"}, {}))  # summarize writes a seed as 0.0
    assert read_summary(tmp_path / "runs.csv")["seed"].tolist() == [0.0, 1.0, 2.0]
    assert _workflow_check(["seeds=[0,1]", "smoke=true"], None) == 0
    both(*(demo_run(f"ncl-view-e{e}-s0", e) for e in (0, 4, 8)))(tmp_path)
    assert demo_runs.main(["saturation", str(tmp_path / "study"), "--figure", str(tmp_path / "sat")]) == 0
    assert "Criterion (NCL only" in capsys.readouterr().out and (tmp_path / "sat.png").is_file()
    assert cli.main(["make-synthetic", *SYN, "--set", f"data.cache_dir={tmp_path / 'c'}"]) == 0
    assert "cached in" in capsys.readouterr().out and list((tmp_path / "c").glob("synthetic-*.pt"))


def test_runs_csv_errors_are_the_whole_line(tmp_path):
    """read_summary's message is the file, what is wrong and the fix, nothing around them; at most 5 bad rows are
    listed, the rest counted ("row" for one, "rows" for more)."""
    from bayesncl.core.errors import DataError
    from bayesncl.report.summary import read_summary

    path = tmp_path / "runs.csv"

    def message(content: str | bytes) -> str:
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        with pytest.raises(DataError) as err:
            read_summary(path)
        return str(err.value)

    assert message(RUNS_HEADER.replace(",sets", "") + "\n" + RUNS_ROW.replace(",table1", "") + "\n") == (
        f"{path}: no column sets (a runs.csv names each run's run_id, dataset, method, variant, sets, seed); "
        + RUNS_FIX)
    assert message(PNG) == (f"{path}: not a text file; expected the runs.csv that `bayesncl summarize` writes; "
                            + RUNS_FIX)
    assert message(runs({}, {"dataset": "mnist"})) == (
        f"{path}: column dataset, row 3 ('mnist'): expected one of synthetic, cifar10, cifar100, imagenet100, "
        "imagefolder (a plugin's dataset: give the report --grid, the workflow config that names its plugin); "
        + RUNS_FIX)
    assert message(runs({}, {"run_id": ""})) == (
        f"{path}: column run_id, row 3 (''): expected a run's id, as `bayesncl summarize` writes it; " + RUNS_FIX)
    want = ": expected a non-negative integer; " + RUNS_FIX
    assert message(runs({"seed": "x"}, {"seed": "y"}, {})) == f"{path}: column seed, rows 2 ('x'), 3 ('y')" + want
    five = [{"seed": "-1"}] * 5
    assert message(runs(*five, {})) == (
        f"{path}: column seed, rows 2 ('-1'), 3 ('-1'), 4 ('-1'), 5 ('-1'), 6 ('-1')" + want)
    assert message(runs({}, *five, *five[:2])) == (
        f"{path}: column seed, rows 3 ('-1'), 4 ('-1'), 5 ('-1'), 6 ('-1'), 7 ('-1') and 2 more" + want)


@pytest.mark.parametrize("entry,value", [("smoke=0", False), ("smoke=1", True), ("smoke=false", False),
                                         ("smoke=no", False), ("smoke=TRUE", True), ("forkserver=0", False),
                                         ("forkserver=1", True), ("forkserver=False", False)])
def test_a_switch_reads_the_usual_spellings(entry, value):
    """`--config smoke=0` is false (Snakemake passes the number 0; a config file may give the text "0"), never
    true; 2 or maybe stays what it was, for the schema to refuse."""
    from snakemake.cli import parse_config

    from bayesncl.cli.workflow import coerce_switches

    key = entry.split("=")[0]
    for config in (parse_config([entry]), {key: entry.split("=")[1]}):
        coerce_switches(config)
        assert config[key] is value, (entry, config)
    assert _workflow_check([entry], None) == 0
    config = parse_config([f"{key}=2"])
    coerce_switches(config)
    assert config[key] == 2


# ------------------------------------------------------------------------------------------------ SIGTERM
def test_sigterm_while_loading_exits_75(monkeypatch, tmp_path, capsys, tiny_sets):
    """In the middle of start-up (the config resolved, the data about to load): the CLI's handler, exit 75."""
    import bayesncl.data

    def loading(*a, **k):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler ends this sleep
        raise AssertionError("SIGTERM did not stop the start-up")

    def not_main(signum, frame):  # this test's own: main must have replaced it
        raise AssertionError("the CLI installed no SIGTERM handler")

    monkeypatch.setattr(bayesncl.data, "check_data", loading)
    previous = signal.signal(signal.SIGTERM, not_main)
    try:
        with pytest.raises(SystemExit) as exc:
            cli.main(["pretrain", "--out", str(tmp_path / "run")] + sum((["--set", s] for s in tiny_sets), []))
        assert signal.getsignal(signal.SIGTERM) is not_main  # main put the caller's handler back
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert exc.value.code == REQUEUE_EXIT
    assert "stopped by SIGTERM; rerun the same command (exit 75" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def _catches_sigterm(pid: int) -> bool:
    with open(f"/proc/{pid}/status") as fh:
        caught = next(line for line in fh if line.startswith("SigCgt:")).split()[1]
    return bool(int(caught, 16) & (1 << (signal.SIGTERM - 1)))


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
def test_sigterm_right_after_start_exits_75(tmp_path, tiny_sets, procs):
    """A real process, signalled as soon as it catches SIGTERM (before torch is imported, before any data)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    argv = [sys.executable, "-m", "bayesncl.cli.main", "pretrain", "--out", str(tmp_path / "run"), "--quiet",
            *sum((["--set", s] for s in tiny_sets), [])]
    proc = procs.popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, signals=True)
    deadline = time.monotonic() + PATIENCE
    while not _catches_sigterm(proc.pid):  # polled often: the signal comes long before the run writes anything
        assert proc.poll() is None and time.monotonic() < deadline, "the CLI never installed its handler"
        time.sleep(0.002)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=PATIENCE)
    assert proc.returncode == REQUEUE_EXIT, err
    assert "Traceback" not in err and "stopped by SIGTERM" in err
    assert not (tmp_path / "run").exists()  # before training wrote anything


# ------------------------------------------------------------------------------------------------ Hypothesis
FUZZ = settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", 150)), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
                derandomize=True)
TEXTISH = st.one_of(st.binary(max_size=400), st.text(max_size=300).map(str.encode),
                    st.lists(st.sampled_from(["run_id", "dataset", "method", "variant", "sets", "seed", "sc", ",",
                                              "\n", "\t", '"', "s", "1.5", "NA", "|", " ", "Verdict", "holds",
                                              "*Synthetic*", "-", ":", "\\|", "\x00", "\r"]),
                             max_size=60).map(lambda xs: "".join(xs).encode()))


def _good_runs_csv() -> bytes:
    return (ROOT / "tests" / "golden" / "runs.csv").read_bytes()


def _cut(data: bytes, at: float) -> bytes:
    return data[: int(len(data) * at)]


@FUZZ
@given(data=st.one_of(TEXTISH, st.floats(0, 1).map(lambda f: _cut(_good_runs_csv(), f))))
def test_runs_csv_reader_never_tracebacks(data, tmp_path_factory):
    from bayesncl.report.summary import REQUIRED_COLUMNS, read_summary

    path = tmp_path_factory.mktemp("runs") / "runs.csv"
    path.write_bytes(data)
    try:
        df = read_summary(path)
    except BayesNCLError as e:
        assert "\n" not in str(e) and str(path) in str(e)
        return
    assert len(df) >= 1 and all(c in df.columns for c in REQUIRED_COLUMNS)
    good = _good_runs_csv()
    if good.startswith(data):  # a truncated good file: its whole rows, read as they were
        from bayesncl.report.summary import read_summary as rs

        full = rs(ROOT / "tests" / "golden" / "runs.csv")
        whole = len(df) - (0 if data.endswith(b"\n") else 1)
        assert df["run_id"].tolist()[:whole] == full["run_id"].tolist()[:whole]


def _good_tsv() -> bytes:
    return f"{TSV_HEADER}\n{TSV_RECORD}\n".encode()


@FUZZ
@given(data=st.one_of(TEXTISH, st.floats(0, 1).map(lambda f: _cut(_good_tsv(), f))))
def test_benchmark_reader_never_tracebacks(data, tmp_path_factory):
    import math

    from bayesncl.report.jobs import collect

    root = tmp_path_factory.mktemp("bench")
    (root / "pretrain").mkdir()
    (root / "pretrain" / "r.tsv").write_bytes(data)
    try:
        jobs = collect(root)
    except BayesNCLError as e:
        assert "\n" not in str(e) and "r.tsv" in str(e)
        return
    assert len(jobs) == 1 and math.isfinite(jobs["seconds"][0]) and jobs["seconds"][0] >= 0
    if data == _good_tsv():
        assert jobs["seconds"][0] == 12.5 and jobs["gpus"][0] == 1


def _good_claims() -> bytes:
    return claims("Synthetic", {"1a": "holds", "1b": "does not hold", "2": "inconclusive (leans for)"}).encode()


@FUZZ
@given(data=st.one_of(TEXTISH, st.floats(0, 1).map(lambda f: _cut(_good_claims(), f))))
def test_claims_reader_never_tracebacks(data, tmp_path_factory):
    path = tmp_path_factory.mktemp("claims") / "claims.md"
    path.write_bytes(data)
    try:
        rows = stability.read_claims(path)
    except BayesNCLError as e:
        assert "\n" not in str(e) and str(path) in str(e)
        return
    assert rows and all("Verdict" in r for r in rows.values())
    _, n = stability.compare(rows, rows)  # a table against itself: every verdict agrees
    assert n["agree"] == n["rows"] == len(rows) and n["reversed"] == 0


def _good_grid() -> bytes:
    return (ROOT / "config" / "tiny.yaml").read_bytes()


YAML_VALUES = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.text(max_size=5),
                                     st.sampled_from(["NCL", "ncl", "synthetic", "table1", "figure4b", "seeds"])),
                           lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                   st.dictionaries(st.sampled_from(
                                                       ["results", "seeds", "defaults", "datasets", "variants",
                                                        "sets", "data", "method", "name", "dataset", "variants",
                                                        "n_seeds", "sweep", "overrides", "NCL", "table1"]),
                                                       inner, max_size=4)), max_leaves=12)


def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, (*prefix, i))


GOOD_GRID = yaml.safe_load(_good_grid())
GRID_PATHS = [p for p in _paths(GOOD_GRID) if p]


def _replaced(path, value) -> bytes:
    """The good grid with one value (a key's or an item's) replaced."""
    import copy

    config = copy.deepcopy(GOOD_GRID)
    node = config
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    return yaml.safe_dump(config).encode()


@FUZZ
@given(data=st.one_of(TEXTISH, st.floats(0, 1).map(lambda f: _cut(_good_grid(), f)),
                      st.builds(_replaced, st.sampled_from(GRID_PATHS), YAML_VALUES),
                      st.dictionaries(st.sampled_from(["results", "seeds", "defaults", "datasets", "variants",
                                                       "sets", "smoke"]), YAML_VALUES, max_size=7)
                      .map(lambda d: yaml.safe_dump(d).encode())))
def test_grid_yaml_reader_never_tracebacks(data, tmp_path_factory):
    """`bayesncl summarize --grid FILE` (the YAML reader and the grid's expansion) and the workflow's config check,
    on arbitrary files: exit 2 and one line, or a correct result."""
    from bayesncl.core.errors import ConfigError
    from bayesncl.grid.expand import expand_grid
    from bayesncl.cli.workflow import check_workflow_config

    tmp = tmp_path_factory.mktemp("grid")
    (tmp / "grid.yaml").write_bytes(data)
    err = io.StringIO()
    with redirect_stderr(err), redirect_stdout(io.StringIO()):
        code = cli.main(["summarize", "--grid", str(tmp / "grid.yaml"), "--out", str(tmp / "runs.csv")])
    assert code == 2 and err.getvalue().count("\n") == 1, err.getvalue()
    try:
        config = yaml.safe_load(data.decode("utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError):
        return
    if not isinstance(config, dict):
        return
    try:
        check_workflow_config(config, ROOT / "workflow" / "schemas" / "config.schema.yaml", "grid.yaml")
        runs = expand_grid(config)
    except ConfigError as e:
        assert "\n" not in str(e)
        return
    assert runs and all(r.config["seed"] >= 0 for r in runs.values())


# ------------------------------------------------------------------------------------------------ a property per reader
# Each reader of a file a command reads, given arbitrary bytes, JSON values or YAML values in that file (or a good
# file with one value replaced): exit 2 and one line on stderr, or success; never a traceback, and no file
# changed but the command's own outputs. In this process (bayesncl.cli.main.main), few examples each: well within a
# minute for all of them.
FEW = settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES_READERS", 40)), deadline=None, derandomize=True,
               suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
JSON_VALUES = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-10 ** 30, 10 ** 30),
                                     st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=6)),
                           lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                   st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                           max_leaves=8)
YAML_TYPES = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.floats(allow_nan=True),
                                    st.text(max_size=5), st.sampled_from(["2026-12-03", "0x1f", "1e400", "~", ".nan"])),
                          lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                  st.dictionaries(st.text(max_size=5), inner, max_size=3)),
                          max_leaves=8)


def _json(v) -> bytes:
    return json.dumps(v).encode()


def _yaml(v) -> bytes:
    return yaml.safe_dump(v).encode()


def _lines(values) -> bytes:
    return b"".join(json.dumps(v).encode() + b"\n" for v in values)


def _files(strategy_good, keys=()):
    """Arbitrary bytes, a JSON value, a YAML value, a truncated good file, or (for a mapping) the good one with a
    key's value replaced by any JSON value."""
    return st.one_of(TEXTISH, JSON_VALUES.map(_json), YAML_TYPES.map(_yaml),
                     st.floats(0, 1).map(lambda f: _cut(strategy_good(), f)),
                     *([st.builds(lambda k, v: _replace(strategy_good(), k, v), st.sampled_from(keys), JSON_VALUES)]
                       if keys else []))


def _replace(good: bytes, key: str, value) -> bytes:
    text = good.decode()
    if text.lstrip().startswith("{"):  # JSON lines
        rows = [json.loads(x) for x in text.splitlines() if x.strip()]
        rows[-1][key] = value
        return _lines(rows)
    data = yaml.safe_load(text)
    node = data
    *parents, last = key.split(".")
    for k in parents:
        node = node.setdefault(k, {}) if isinstance(node, dict) else {}
    if isinstance(node, dict):
        node[last] = value
    return yaml.safe_dump(data).encode()


def _one_line_or_success(argv: list[str], root: Path, outputs: tuple[str, ...] = (), codes=(0, 2)) -> tuple[int, str]:
    """cli.main.main(argv) leaves every file under root as it was but its outputs, exits 0 or 2 (2: one line on stderr,
    the command's error), never a traceback."""
    def snap():
        return {k: v for k, v in _snapshot(root).items() if not k.startswith(outputs or ("\0",))}

    before = snap()
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = cli.main(argv)
    text = err.getvalue()
    assert code in codes and "Traceback" not in text, (code, text)
    if code == 2:
        assert text.count("\n") == 1 and text.startswith(f"bayesncl {argv[0]}: error: "), text
    assert snap() == before
    return code, out.getvalue() + text


@pytest.fixture(scope="module")
def a_run(tmp_path_factory):
    """A finished tiny run (one step), its config and log as the trainer wrote them."""
    from helpers import TINY

    run = tmp_path_factory.mktemp("a_run") / "run"
    sets = [s for s in TINY if not s.startswith("train.epochs")] + ["train.epochs=2", "train.max_steps_per_epoch=1",
                                                                    "method.name=ncl"]
    with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
        assert cli.main(["pretrain", "--out", str(run), "--quiet", *sum((["--set", s] for s in sets), [])]) == 0
    return run


LOG_KEYS = ("epoch", "loss", "infonce", "epoch_seconds", "img_per_s", "peak_mem_mb", "open_gates")


@FEW
@given(data=st.data())
def test_log_jsonl_readers_are_one_line_or_right(a_run, tmp_path_factory, data):
    """log.jsonl, read by `bayesncl status` (a row saying what is wrong) and by evaluation (`--only cost`: one
    line, exit 2)."""
    good = (a_run / "log.jsonl").read_bytes
    body = data.draw(_files(good, LOG_KEYS))
    root = tmp_path_factory.mktemp("log")
    run = root / "results" / "runs" / "r"
    shutil.copytree(a_run, run)
    (run / "log.jsonl").write_bytes(body)
    code, text = _one_line_or_success(["status", str(root / "results")], root, codes=(0,))
    row = text.splitlines()[1]
    assert row.startswith(("unreadable", "done", "evaluating")), text
    code, text = _one_line_or_success(["evaluate", "--checkpoint", str(run / "model.pt"), "--out", str(run / "eval"),
                                       "--only", "cost", "--quiet"], root,
                                      outputs=("results/runs/r/eval", "results/runs/r/events.out.tfevents."))
    if code == 0:
        cost = json.loads((run / "eval" / "cost.json").read_text())["cost"]
        assert cost["gflops"] > 0
    else:  # a refused evaluation leaves no section's events either
        assert not list(run.glob("events.out.tfevents.*.eval-*"))
    if body == good():
        assert code == 0 and row.startswith("done")


@FEW
@given(data=st.data())
def test_config_resolved_yaml_readers_are_one_line_or_right(a_run, tmp_path_factory, data):
    """config.resolved.yaml, read by `status` (without the plan), `stale` and pretraining's look at its --out."""
    good = (a_run / "config.resolved.yaml").read_bytes
    body = data.draw(_files(good, ("seed", "train", "train.epochs", "train.batch_size", "method.name", "data")))
    root = tmp_path_factory.mktemp("cfg")
    run = root / "results" / "runs" / "r"
    shutil.copytree(a_run, run)
    (run / "config.resolved.yaml").write_bytes(body)
    _one_line_or_success(["status", str(root / "results")], root, codes=(0,))
    grid = root / "grid.yaml"
    grid.write_text(yaml.safe_dump({**yaml.safe_load(_good_grid()), "results": str(root / "results")}))
    _one_line_or_success(["stale", "--grid", str(grid)], root, codes=(0,))
    code, text = _one_line_or_success(["pretrain", "--out", str(run), "--quiet", "--set", "seed=9", *SYN], root)
    assert code == 2 and f"--out {run} holds " in text  # another run's folder, whatever its config says


@FEW
@given(data=_files(_good_runs_csv, ()))
def test_runs_csv_readers_change_nothing_else(data, tmp_path_factory):
    """runs.csv, read by `bayesncl report` (its tables and figures its only outputs) and `document`."""
    root = tmp_path_factory.mktemp("runs")
    (root / "runs.csv").write_bytes(data)
    (root / "results").mkdir()
    (root / "results" / "keep.md").write_text("an earlier table\n")
    for argv in (["report", "--summary", str(root / "runs.csv"), "--out", str(root / "results")],):
        code, _ = _one_line_or_success(argv, root, outputs=("results/tables", "results/figures"))
        if code == 0:
            assert (root / "results" / "tables" / "claims.md").is_file()


@FEW
@given(data=st.one_of(_files(_good_grid, ("results", "seeds", "defaults", "variants", "sets", "claims", "plugins",
                                          "imported", "datasets", "smoke"))))
def test_workflow_config_readers_are_one_line_or_right(data, tmp_path_factory):
    """The workflow config, read by `bayesncl status --grid` and `stale` (and `summarize`, above)."""
    root = tmp_path_factory.mktemp("wf")
    (root / "results" / "runs").mkdir(parents=True)
    (root / "grid.yaml").write_bytes(data)
    for argv in (["status", str(root / "results"), "--grid", str(root / "grid.yaml")],
                 ["stale", "--grid", str(root / "grid.yaml"), "--results", str(root / "results")]):
        _one_line_or_success(argv, root)


def _good_args() -> bytes:
    return json.dumps({"method_kwargs": {"use_bayes": True, "non_neg": "relu", "gate_type": "STE",
                                         "bayesian_prior_prob": 0.8, "bayesian_kl_lambda": 3e-5,
                                         "temperature": 0.2}, "optimizer": {"gating_head_lr": 0.1},
                       "data": {"dataset": "cifar100"}}).encode()


@FEW
@given(data=st.one_of(_files(_good_args, ()), JSON_VALUES.map(lambda v: _json({"method_kwargs": v})),
                      st.builds(lambda k, v: _json({"method_kwargs": {**json.loads(_good_args())["method_kwargs"],
                                                                      k: v}}),
                                st.sampled_from(["use_bayes", "use_topk", "topk_k", "non_neg", "gate_type",
                                                 "bayesian_prior_prob", "bayesian_kl_lambda", "temperature"]),
                                JSON_VALUES)))
def test_args_json_reader_is_one_line_or_right(data, tmp_path_factory):
    """args.json beside a released checkpoint, read by `bayesncl import` (its run folder its only output)."""
    root = tmp_path_factory.mktemp("args")
    released()(root)
    (root / "args.json").write_bytes(data)
    code, _ = _one_line_or_success(["import", "--checkpoint", str(root / "r.ckpt"), "--out", str(root / "run")],
                                   root, outputs=("run",))
    if code == 0:
        assert (root / "run" / "model.pt").is_file()


@pytest.fixture(scope="module")
def image_tree(tmp_path_factory):
    from PIL import Image

    root = tmp_path_factory.mktemp("images") / "folder"
    for split in ("train", "val"):
        for c in ("cat", "dog"):
            (root / split / c).mkdir(parents=True)
            Image.new("RGB", (10, 10), (40 if c == "cat" else 200, 90, 30)).save(root / split / c / f"{c}0.png")
    return root


def _good_backgrounds() -> bytes:
    return b"path,background\n" + b"".join(f"{s}/{c}/{c}0.png,{c}land\n".encode()
                                           for s in ("train", "val") for c in ("cat", "dog"))


@FEW
@given(data=st.one_of(_files(_good_backgrounds, ()),
                      st.lists(st.tuples(st.sampled_from(["train/cat/cat0.png", "val/dog/dog0.png", "x", "", "\x00"]),
                                         st.text(max_size=4)), max_size=5)
                      .map(lambda rows: b"path,background\n" + "".join(f"{p},{b}\n" for p, b in rows).encode())))
def test_backgrounds_csv_reader_is_one_line_or_right(image_tree, data, tmp_path_factory):
    """backgrounds.csv of an image folder, read by `bayesncl prepare` (the cache its only output)."""
    root = tmp_path_factory.mktemp("bg")
    shutil.copytree(image_tree, root / "folder")
    (root / "folder" / "backgrounds.csv").write_bytes(data)
    argv = ["prepare", "--workers", "0", "--set", "data.dataset=imagefolder", "--set", f"data.root={root / 'folder'}",
            "--set", f"data.cache_dir={root / 'cache'}", "--set", "data.imagefolder.stored_size=8",
            "--set", "data.imagefolder.crop_size=8"]
    code, _ = _one_line_or_success(argv, root, outputs=("cache",))
    if data == _good_backgrounds():
        assert code == 0


FIX_LOG = "it is the trainer's: restore it, or train the run again"
NUMBER_KEYS = ("loss", "infonce", "kl", "open_gates", "lr", "epoch_seconds", "img_per_s", "peak_mem_mb",
               "compile_seconds", "skipped", "loss_scale")


@pytest.mark.parametrize("body,fault", [
    (b"\xff\xfe\x00", "{path}: not a text file (not UTF-8)"),
    (b'{"epoch": 1, "loss": 1.0}\nx\n', "{path} line 2: not JSON"),
    (b"[1]\n", "{path} line 1: [1] is not a JSON object of an epoch's values"),
    (b'{"epoch": 1}\n', "{path} line 1: no loss"),
    (b'{"kl": 1}\n', "{path} line 1: no epoch, loss"),
    (b'{"epoch": "1", "loss": 1.0}\n', "{path} line 1: epoch '1' is not a whole number"),
    (b'{"epoch": "' + b"1" * 50 + b'", "loss": 1.0}\n', "{path} line 1: epoch '" + "1" * 36 + "... is not a whole number"),
    *[(json.dumps({"epoch": 1, "loss": 1.0, key: "x" * 30}).encode(),
       f"{{path}} line 1: {key} '{'x' * 30}' is not {'a number of seconds' if key == 'epoch_seconds' else 'a number'}")
      for key in NUMBER_KEYS],
    *[(json.dumps({"epoch": 1, "loss": 1.0, key: None}).encode(),
       f"{{path}} line 1: {key} None is not {'a number of seconds' if key == 'epoch_seconds' else 'a number'}")
      for key in NUMBER_KEYS if key != "peak_mem_mb"],
    (b'{"epoch": 1, "loss": 1.0, "epoch_seconds": -1}\n', "{path} line 1: epoch_seconds -1 is not a number of seconds"),
])
def test_the_training_log_reader_names_each_fault_in_one_exact_line(tmp_path, body, fault):
    from bayesncl.core.errors import RunFileError
    from bayesncl.runs.files import read_log

    (tmp_path / "log.jsonl").write_bytes(body)
    with pytest.raises(RunFileError) as e:
        read_log(tmp_path, ("epoch", "loss"))
    assert str(e.value) == fault.format(path=tmp_path / "log.jsonl") + f"; {FIX_LOG}"


def test_the_training_log_reader_names_a_missing_log_and_cuts_a_long_value(tmp_path):
    from bayesncl.core.errors import MissingInputError
    from bayesncl.core.yamlio import shown
    from bayesncl.runs.files import read_log

    with pytest.raises(MissingInputError) as e:
        read_log(tmp_path)
    assert str(e.value) == (f"{tmp_path / 'log.jsonl'} does not exist; it is written by `bayesncl pretrain --out "
                            f"{tmp_path}`")
    assert shown("x" * 38) == repr("x" * 38) and len(repr("x" * 38)) == 40  # 40 characters: whole
    assert shown("x" * 39) == "'" + "x" * 36 + "..."  # 41: cut to 37 and the dots


def test_the_training_log_reader_takes_what_the_trainer_writes(tmp_path):
    from bayesncl.runs.files import read_log

    (tmp_path / "log.jsonl").write_text(json.dumps({"epoch": 1, "loss": 4, "peak_mem_mb": None, "kl": 0}) + "\n\n"
                                        + json.dumps({"infonce": 3.5, "epoch_seconds": 0}) + "\n"
                                        + json.dumps({"epoch_seconds": 0.5}) + "\n")
    assert read_log(tmp_path) == [{"epoch": 1, "loss": 4.0, "peak_mem_mb": None, "kl": 0.0},
                                  {"infonce": 3.5, "epoch_seconds": 0.0}, {"epoch_seconds": 0.5}]  # a quick epoch
