"""What a grid costs before its first submission (`bayesncl estimate --grid FILE --gpu NAME`): GPU-hours of
pretraining and evaluation, and the SLURM submissions, for any workflow config.

The rate: `benchmarks/gpu_check.py`'s measured training images/s of a ResNet-18 CIFAR step (NCL and BayesNCL)
on the named GPU (MEASURED, or the user's own gpu_check.json), scaled to each run's model and input size by
counted forward FLOPs: rate(run) = rate(measured) x F(measured) / F(run) (the same achieved FLOP/s assumed;
224 px convolutions usually run nearer the peak, so ImageNet-100 is more likely over- than underestimated).
A training image costs two views, forward and backward: 6 forward views. So a forward pass of one view (the
features, the probes' embeddings) costs 1/6 of a training image.

- pretraining: epochs x whole batches of the training set;
- evaluation, GPU work: `features` (the test split, and the train split where a CPU section reads it), the
  paper-protocol probe (eval.probe_epochs passes over the training set, forward of one view) and Waterbirds'
  embedding (background probe);
- evaluation, held: the evaluation submission holds its GPU while its CPU sections run too. Their time is
  not measured; the submission's time request (the sum of its sections' `runtime`) is its upper bound;
- submissions: one pretraining submission per run (or as many as its time over `--time-limit`), one
  evaluation submission per run, one per dataset atlas, one per prepared ImageNet-100 copy
  (workflow/rules/common.smk, the eval_<run> groups of evaluate.smk).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from .errors import ConfigError
from .registry import METHODS

__all__ = ["MEASURED", "Estimate", "estimate", "forward_flops", "measured_rates", "pretrain_seconds", "reference",
           "render", "run_cost"]

# gpu_check's throughput step per GPU, one record per measured method (images/s of the training step, counted
# forward GFLOPs of one 32 px view of its model): ResNet-18 CIFAR stem, width 64, projector 2048/256, batch 256,
# bf16, eager step.
MEASURED = {
    "h200": {"gpu": "NVIDIA H200",
             "source": "benchmarks/gpu_check.py, run 2 of 2026-11-30 (docs/BENCHMARKS.md, \"Measured figures\")",
             "methods": [{"method": "ncl", "img_per_s": 10_474.0, "gflops_fwd_per_view": 1.1140},
                         {"method": "bayesncl", "img_per_s": 9_265.0, "gflops_fwd_per_view": 1.1171}]},
}
CAPTURED = "cudagraph"  # gpu_check's captured-step rate, preferred where it was measured (as its grid_estimate)
FORWARD_SHARE = 1 / 6  # one forward view against a training image (two views, forward + backward)


def measured_rates(gpu: str | None = None, measured: str | Path | None = None) -> dict:
    """{"gpu", "source", "ncl": {...}, "bayesncl": {...}} from a gpu_check.json (`measured`) or MEASURED[gpu]."""
    if measured is not None:
        path = Path(measured)
        try:
            report = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise ConfigError(f"--measured {path}: cannot be read as gpu_check.json ({e}); give the gpu_check.json "
                              "that `benchmarks/gpu_check.py --out DIR` wrote") from None
        step = (report.get("steps") or {}).get("throughput") or {}
        tput = step.get("result") if step.get("status") == "ok" else None
        measured = [m for m in METHODS if isinstance((tput or {}).get(m), dict)]
        if not measured:
            raise ConfigError(f"--measured {path}: its throughput step did not end ok; rerun "
                              "`benchmarks/gpu_check.py --only throughput` on the GPU")
        # the captured step's rates where every method has one (as gpu_check's own grid estimate)
        mode = CAPTURED if all(f"{m}_{CAPTURED}" in tput for m in measured) else None
        info = report.get("info") or {}
        name = gpu or info.get("gpu") or info.get("device_name") or str(path)
        return {"gpu": name, "source": f"{path}" + (f" (train.graph={mode})" if mode else ""),
                "methods": [{"method": m, **tput[f"{m}_{mode}" if mode else m]} for m in measured]}
    key = (gpu or "").lower().replace("nvidia", "").replace(" ", "").replace("-", "")
    if key not in MEASURED:
        raise ConfigError(f"--gpu {gpu}: no gpu_check measurement for it (measured: {', '.join(MEASURED)}); run "
                          "`benchmarks/gpu_check.py --device cuda --out DIR` on that GPU and pass "
                          "--measured DIR/gpu_check.json")
    return MEASURED[key]


def reference(rates: dict, method: str) -> dict:
    """The measurement a run of `method` is priced from: its own, else one of a method with the same gating
    (the gating head is what changes the step), else the first."""
    from .registry import method_traits

    records = rates["methods"]
    return next((r for r in records if r["method"] == method), None) or next(
        (r for r in records if method_traits(r["method"]).gated == method_traits(method).gated), records[0])


def forward_flops(cfg: dict) -> float:
    """Counted forward FLOPs of one training view (backbone + projector + gating head), on the meta device."""
    import torch

    from .config import crop_size
    from .evaluation.cost import count_flops_per_image
    from .methods import build_method

    s = crop_size(cfg)
    with torch.device("meta"):
        model = build_method(cfg).train()
    return count_flops_per_image(model, torch.randn(2, 3, s, s, device="meta"))


def images(data_cfg: dict, override: dict[str, int] | None = None) -> dict:
    """{"train", "test"} images of a dataset (eval.max_images is applied by the caller)."""
    from .registry import DATASETS

    name = data_cfg["dataset"]
    if override and name in override:
        return {"train": override[name], "test": max(1, override[name] // 5)}
    sizes = DATASETS[name].sizes(data_cfg)
    if sizes is None:
        raise ConfigError(f"data.dataset {name!r}: its number of images is not known before it is read; give "
                          f"--images {name}=N (its training images)")
    return sizes


def pretrain_seconds(cfg: dict, rate: float, n_train: int) -> float:
    """Epochs x whole batches (steps_per_epoch's drop-last; train.max_steps_per_epoch caps them), at `rate`."""
    t = cfg["train"]
    steps = n_train // t["batch_size"]
    if t.get("max_steps_per_epoch"):
        steps = min(steps, t["max_steps_per_epoch"])
    return t["epochs"] * steps * t["batch_size"] / rate


@dataclass
class Row:
    runs: int = 0
    pretrain_h: float = 0.0
    eval_h: float = 0.0       # GPU work of the evaluation submissions
    eval_held_h: float = 0.0  # what they ask for: the sum of their sections' runtimes
    submissions: int = 0
    allocations: int = 0      # pretraining submissions


@dataclass
class Estimate:
    gpu: str
    source: str
    rows: dict[str, Row] = field(default_factory=dict)
    atlas: int = 0
    prepare: int = 0
    time_limit_min: float | None = None

    def total(self) -> Row:
        t = Row()
        for r in self.rows.values():
            for k in vars(t):
                setattr(t, k, getattr(t, k) + getattr(r, k))
        t.submissions += self.atlas + self.prepare
        return t


def run_cost(run, rates: dict, sizes: dict[str, int] | None = None, flops_cache: dict[str, float] | None = None, *,
             time_limit_min: float | None = None) -> dict:
    """One run's cost (a bayesncl.grid Run): {"pretrain_h", "eval_h", "eval_held_h", "allocations", "submissions",
    "prepared"}: GPU-hours of pretraining and of the evaluation's GPU work, the evaluation's time request in hours,
    its pretraining submissions, all its submissions, and the prepared copy its data needs (None: none).
    `flops_cache` (shared across runs) keeps each distinct model's counted FLOPs."""
    from .config import crop_size
    from .evaluation.sections import SECTIONS, _needs_train_h
    from .grid import evaluation_sections
    from .registry import BACKGROUND_PROBE, DATASETS, method_traits

    flops = {} if flops_cache is None else flops_cache
    cfg = run.config
    gated = method_traits(cfg["method"]["name"]).gated
    ref = reference(rates, cfg["method"]["name"])
    # only the gating head adds FLOPs to backbone + projector
    key = json.dumps([cfg["model"], gated and cfg["method"]["head_depth"], crop_size(cfg)], sort_keys=True)
    if key not in flops:
        flops[key] = forward_flops(cfg)
    rate = ref["img_per_s"] * ref["gflops_fwd_per_view"] * 1e9 / flops[key]
    n = images(cfg["data"], sizes)
    cap = cfg["eval"].get("max_images") or math.inf
    pre = pretrain_seconds(cfg, rate, n["train"])
    allocations = max(1, math.ceil(pre / 60 / time_limit_min)) if time_limit_min else 1
    sections = evaluation_sections(run)
    fwd = 0.0  # forward views of one image each
    if "features" in sections:
        fwd += min(n["test"], cap) + (min(n["train"], cap) if _needs_train_h(cfg) else 0)
    if "linear_probe" in sections and SECTIONS["linear_probe"].gpu(cfg):
        fwd += cfg["eval"]["probe_epochs"] * min(n["train"], cap)
    if "background_probe" in sections and SECTIONS["background_probe"].gpu(cfg):
        wb = DATASETS[BACKGROUND_PROBE].sizes({}) or {}
        fwd += sum(min(v, cap) for v in wb.values())
    manifests = DATASETS[cfg["data"]["dataset"]].manifests(cfg["data"])
    return {"pretrain_h": pre / 3600, "eval_h": fwd * FORWARD_SHARE / rate / 3600,
            "eval_held_h": sum(SECTIONS[s].runtime for s in sections) / 60, "allocations": allocations,
            "submissions": allocations + (1 if sections else 0),
            # one prepare_data job per prepared copy (common.smk, PREPARED)
            "prepared": tuple(manifests) if manifests else None}


def estimate(wf: dict, rates: dict, *, time_limit_min: float | None = None,
             sizes: dict[str, int] | None = None, progress: bool = False) -> Estimate:
    """The cost of every run of the workflow config `wf` (bayesncl.grid), per dataset."""
    from tqdm.auto import tqdm

    from .grid import expand_grid
    from .report.atlas import atlas_runs

    runs = expand_grid(wf)
    est = Estimate(rates["gpu"], rates["source"], time_limit_min=time_limit_min)
    flops: dict[str, float] = {}
    prepared = set()
    for run in tqdm(runs.values(), disable=not progress, desc="estimate", unit="run", leave=False):
        cost = run_cost(run, rates, sizes, flops, time_limit_min=time_limit_min)
        row = est.rows.setdefault(run.config["data"]["dataset"], Row())
        row.runs += 1
        for k in ("pretrain_h", "eval_h", "eval_held_h", "allocations", "submissions"):
            setattr(row, k, getattr(row, k) + cost[k])
        if cost["prepared"]:
            prepared.add(cost["prepared"])
    est.atlas = len(atlas_runs(runs))
    est.prepare = len(prepared)
    return est


def render(est: Estimate) -> str:
    """The table `bayesncl estimate` prints."""
    head = f"{'dataset':<14} {'runs':>5} {'pretrain':>9} {'eval':>7} {'eval held':>10} {'total':>8} {'submissions':>12}"
    lines = [f"GPU-hours on one {est.gpu}, from {est.source}", "", head]

    def line(name: str, r: Row) -> str:
        return (f"{name:<14} {r.runs:>5} {r.pretrain_h:>9.1f} {r.eval_h:>7.1f} {r.eval_held_h:>10.1f} "
                f"{r.pretrain_h + r.eval_h:>8.1f} {r.submissions:>12}")

    for name, r in est.rows.items():
        lines.append(line(name, r))
    lines.append(line("all", est.total()))
    t = est.total()
    lines += ["",
              f"submissions: {t.allocations} pretraining"
              + (f" (at most {est.time_limit_min:g} minutes each)" if est.time_limit_min else "")
              + f", {t.submissions - t.allocations - est.atlas - est.prepare} evaluation, {est.atlas} atlas, "
                f"{est.prepare} prepare_data",
              "eval: the GPU work of the evaluation submissions (features, the paper-protocol and Waterbirds probes); "
              "eval held: their time requests, the most they hold a GPU while their CPU sections run",
              "total: pretrain + eval; job start-up and queueing not included"]
    return "\n".join(lines) + "\n"
