"""What a grid costs before its first submission (`bayesncl estimate --grid FILE --gpu NAME`): GPU-hours of
pretraining and evaluation, and the SLURM submissions, for any workflow config.

The rate: `benchmarks/gpu_check.py`'s measured training images/s of a ResNet-18 CIFAR step (NCL and BayesNCL;
its own run, each method) on the named GPU (MEASURED, or the user's own gpu_check.json), in the mode the run
trains in (`train.graph`: the paper grid's eager; a mode not measured is priced at the eager rate and said so),
scaled to each run's model and input size by
counted forward FLOPs: rate(run) = rate(measured) x F(measured) / F(run) (the same achieved FLOP/s assumed;
224 px convolutions usually run nearer the peak, so ImageNet-100 is more likely over- than underestimated).
A training image costs two views, forward and backward: 6 forward views. So a forward pass of one view (the
features, the probes' embeddings) costs 1/6 of a training image.

- pretraining: epochs x whole batches of the training set;
- evaluation, GPU work: `features` (the test split, and the train split where a CPU section reads it), the
  paper-protocol probe (eval.probe_epochs passes over the training set, forward of one view) and Waterbirds'
  embedding (background probe);
- evaluation, held: the evaluation submission holds its GPU while its CPU sections run too: expected, each
  section's GPU work, or CPU_SECTION_S for a CPU section, plus SECTION_START_S for its start-up, and an untrained
  twin's initialisation (PRETRAIN_START_S: its pretraining job, train.epochs 0, runs in that submission);
- requests: the SLURM time each job asks for, decided by bayesncl.planning.time_requests (the workflow asks the same
  Planner): the expected times, PRIOR times over before any job of a kind has finished and learned from the grid's
  finished jobs after;
- submissions: one pretraining submission per run that trains (or as many as its time over `--time-limit`, less
  the stop margin), one evaluation submission per run (an untrained twin's initialisation in it), one per dataset
  atlas, one per prepared ImageNet-100 copy (workflow/rules/common.smk, the eval_<run> groups of evaluate.smk).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import ConfigError
from ..settings.registry import METHODS
from .time_requests import FLOOR_MIN, PRIOR, STOP_MARGIN_S, Learned, Planner, trains

__all__ = ["MEASURED", "Estimate", "estimate", "forward_flops", "measured_on", "measured_rates", "planner",
           "pretrain_seconds", "reference", "render", "run_cost", "section_seconds"]

# gpu_check's throughput step per GPU, one record per measured method (images/s of the training step, counted
# forward GFLOPs of one 32 px view of its model, the model): batch 256, bf16, eager step. The H200's were measured
# on the CIFAR stem with padding 1 (1.114 GFLOPs per view); the grid trains the released padding 2 (1.41), priced
# by FLOP scaling until a gpu_check.json measured on it is given (--measured: it records its model).
_PADDING_1 = {"arch": "resnet18", "width": 64, "stem": "cifar", "cifar_padding": 1, "proj_hidden": 2048,
              "proj_dim": 256}
MEASURED = {
    "h200": {"gpu": "NVIDIA H200",
             "source": "benchmarks/gpu_check.py, run 2 of 2026-11-30 (docs/BENCHMARKS.md, \"Measured figures\")",
             "methods": [{"method": "ncl", "graph": "eager", "img_per_s": 10_474.0, "gflops_fwd_per_view": 1.1140,
                          "model": _PADDING_1},
                         {"method": "bayesncl", "graph": "eager", "img_per_s": 9_265.0,
                          "gflops_fwd_per_view": 1.1171, "model": _PADDING_1}]},
}
EAGER = "eager"  # train.graph's default, the paper grid's mode: what a mode not measured is priced at
FORWARD_SHARE = 1 / 6  # one forward view against a training image (two views, forward + backward)
# What the jobs are expected to hold (docs/CLUSTER.md, "What it costs"; what they ask for:
# bayesncl.planning.time_requests). Expected per evaluation section: SECTION_START_S of start-up (process, imports, the
# checkpoint or the cached features loaded: the imports took about 3 s without the fork server, docs/MINIATURE.md) and
# its GPU work, or CPU_SECTION_S for a CPU section (at the paper grid's sizes at most 3.5 s on one thread, retrieval
# with its curve on a CIFAR test split: benchmarks/bench_metrics.py). PRETRAIN_START_S: a pretraining job's data, model
# and checkpoint loaded before its first step (all a run of train.epochs 0 does, saving its initialisation).
# The sections priced so; a plugin's section is expected to take the runtime it declares
# (bayesncl.planning.time_requests asks for that, not PRIOR times it, until such sections have finished).
PRICED = ("features", "interpretability", "retrieval", "linear_probe", "background_probe", "dynamics", "cost")
SECTION_START_S = 20.0
CPU_SECTION_S = 10.0
PRETRAIN_START_S = 60.0


def measured_rates(gpu: str | None = None, measured: str | Path | None = None) -> dict:
    """{"gpu", "source", "methods": [{"method", "graph", "img_per_s", "gflops_fwd_per_view"}, ...]} from a
    gpu_check.json (`measured`: its throughput step's eager rates and its captured step's, where run) or
    MEASURED[gpu]."""
    if measured is not None:
        path = Path(measured)
        fix = "give the gpu_check.json that `benchmarks/gpu_check.py --out DIR` wrote"
        try:
            report = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            why = e.strerror if isinstance(e, OSError) else "not a UTF-8 text file" if isinstance(
                e, UnicodeDecodeError) else f"not JSON: {e}"
            raise ConfigError(f"--measured {path}: cannot be read as gpu_check.json ({why}); {fix}") from None
        steps = report.get("steps") if isinstance(report, dict) else None
        if not isinstance(steps, dict) or not all(isinstance(v, dict) for v in steps.values()):
            raise ConfigError(f"--measured {path}: no `steps` mapping of step records, as gpu_check.json has; {fix}")

        def result(name):
            step = steps.get(name) or {}
            out = step.get("result") if step.get("status") == "ok" else {}
            return out if isinstance(out, dict) else {}

        tput, captured = result("throughput"), result("captured_step")
        records = [{"method": m, "graph": EAGER, **tput[m]} for m in METHODS if _rate(tput.get(m))]
        if not records:
            raise ConfigError(f"--measured {path}: its throughput step did not end ok; rerun "
                              "`benchmarks/gpu_check.py --only throughput` on the GPU")
        for m in METHODS:  # the captured step (an option): its own step, or in throughput as older files have it
            rec = captured.get(m) if isinstance(captured.get(m), dict) else tput.get(f"{m}_cudagraph")
            if _rate(rec):
                records.append({"method": m, "graph": "cudagraph", **rec})
        info = report.get("info") if isinstance(report.get("info"), dict) else {}
        name = gpu or info.get("gpu") or info.get("device_name") or str(path)
        return {"gpu": name, "source": str(path), "methods": records}
    key = (gpu or "").lower().replace("nvidia", "").replace(" ", "").replace("-", "")
    if key not in MEASURED:
        raise ConfigError(f"--gpu {gpu}: no gpu_check measurement for it (measured: {', '.join(MEASURED)}); run "
                          "`benchmarks/gpu_check.py --device cuda --out DIR` on that GPU and pass "
                          "--measured DIR/gpu_check.json")
    return MEASURED[key]


def _rate(record) -> bool:
    """A measured record the price can use: a positive images/s and forward GFLOPs."""
    return isinstance(record, dict) and all(
        isinstance(record.get(k), (int, float)) and not isinstance(record.get(k), bool) and record[k] > 0
        for k in ("img_per_s", "gflops_fwd_per_view"))


def measured_on(rates: dict) -> str:
    """What the rates were measured on: the GPU, each record's model (its stem and padding) and GFLOPs per view."""
    def model(m: dict | None) -> str:
        if not m:
            return "model not recorded"
        return f"{m['arch']} {m['stem']} stem" + (f" padding {m['cifar_padding']}" if m["stem"] == "cifar" else "")

    groups: dict[str, list[str]] = {}
    for r in rates["methods"]:
        groups.setdefault(f"{model(r.get('model'))}, {r.get('graph', EAGER)} step", []).append(
            f"{r['method']} {r['gflops_fwd_per_view']:.3f}")
    return f"one {rates['gpu']}, " + "; ".join(f"{m} (GFLOPs per view: {', '.join(v)})" for m, v in groups.items())


def reference(rates: dict, method: str, graph: str = EAGER) -> dict:
    """The measurement a run of `method` in mode `graph` (train.graph) is priced from: among the records of that
    mode (of the eager mode where it was not measured), its method's own, else one of a method with the same
    gating (the gating head is what changes the step), else the first."""
    from ..settings.registry import method_traits

    records = [r for r in rates["methods"] if r.get("graph", EAGER) == graph] or [
        r for r in rates["methods"] if r.get("graph", EAGER) == EAGER]
    return next((r for r in records if r["method"] == method), None) or next(
        (r for r in records if method_traits(r["method"]).gated == method_traits(method).gated), records[0])


def forward_flops(cfg: dict) -> float:
    """Counted forward FLOPs of one training view (backbone + projector + gating head), on the meta device."""
    import torch

    from ..settings.config import crop_size
    from ..measures.cost import count_flops_per_image
    from ..model.methods import build_method

    s = crop_size(cfg)
    with torch.device("meta"):
        model = build_method(cfg).train()
    return count_flops_per_image(model, torch.randn(2, 3, s, s, device="meta"))


def images(data_cfg: dict, override: dict[str, int] | None = None) -> dict:
    """{"train", "test"} images of a dataset (eval.max_images is applied by the caller)."""
    from ..settings.registry import DATASETS

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
    eval_h: float = 0.0            # GPU work of the evaluation submissions
    eval_held_h: float = 0.0       # expected time they hold their GPU (work, CPU sections, start-up, twins' init)
    pretrain_request_h: float = 0.0  # what the pretraining submissions ask for (time requests, each allocation)
    eval_request_h: float = 0.0    # what the evaluation submissions ask for
    submissions: int = 0
    allocations: int = 0           # pretraining submissions


@dataclass
class Estimate:
    gpu: str
    source: str
    rows: dict[str, Row] = field(default_factory=dict)
    atlas: int = 0
    prepare: int = 0
    time_limit_min: float | None = None
    graphs: dict[str, str] = field(default_factory=dict)  # train.graph of the runs -> the mode it was priced at
    measured_on: str = ""  # the GPU, model and GFLOPs per view of the rates (measured_on)
    benchmarks: str | None = None  # where the finished jobs the requests learned from were looked for
    learned: Learned = field(default_factory=Learned)

    def total(self) -> Row:
        t = Row()
        for r in self.rows.values():
            for k in vars(t):
                setattr(t, k, getattr(t, k) + getattr(r, k))
        t.submissions += self.atlas + self.prepare
        return t


def section_seconds(run, rate: float, n: dict, cap: float) -> dict[str, tuple[float, float]]:
    """(expected seconds, GPU work seconds) of each evaluation section of `run`
    (bayesncl.grid.expand.evaluation_sections) at `rate` training images/s, `n` its dataset's images, `cap`
    eval.max_images: the GPU work is forward views at FORWARD_SHARE of a training image (0 for a CPU section); expected,
    SECTION_START_S of start-up and the GPU work or, for a CPU section, CPU_SECTION_S."""
    from ..evaluation.sections import SECTIONS, _needs_train_h
    from ..grid.expand import evaluation_sections
    from ..settings.registry import BACKGROUND_PROBE, DATASETS

    cfg = run.config
    views: dict[str, float | None] = {}
    for name in evaluation_sections(run):
        if name == "features":
            views[name] = min(n["test"], cap) + (min(n["train"], cap) if _needs_train_h(cfg) else 0)
        elif name == "linear_probe" and SECTIONS[name].gpu(cfg):
            views[name] = cfg["eval"]["probe_epochs"] * min(n["train"], cap)
        elif name == "background_probe" and SECTIONS[name].gpu(cfg):
            views[name] = sum(min(v, cap) for v in (DATASETS[BACKGROUND_PROBE].sizes({}) or {}).values())
        else:
            views[name] = None  # a CPU section
    work = {k: 0.0 if v is None else v * FORWARD_SHARE / rate for k, v in views.items()}
    out = {k: (SECTION_START_S + (CPU_SECTION_S if views[k] is None else w), w) for k, w in work.items()}
    for name in (k for k in out if k not in PRICED):  # a plugin's: its declared runtime, on the GPU where it runs
        s = SECTIONS[name]
        out[name] = (60.0 * s.runtime, 60.0 * s.runtime if s.gpu(cfg) else 0.0)
    return out


def run_cost(run, rates: dict, sizes: dict[str, int] | None = None,
             flops_cache: dict[str, float] | None = None) -> dict:
    """One run's expected cost (a bayesncl.grid.expand Run): {"pretrain_h", "eval_h", "eval_held_h", "sections",
    "expected", "declared", "graph", "prepared"}: GPU-hours of pretraining and of the evaluation's GPU work, the hours
    its evaluation submission is expected to hold its GPU, each section's (expected seconds, GPU work seconds), each
    job's expected seconds (pretrain, none for imported weights, then the sections: what bayesncl.planning.time_requests
    asks for), the sections whose expected seconds are the runtime they declare (a plugin's), the mode it was
    priced at and the prepared copy its data needs (None: none). `flops_cache` (shared across runs) keeps each
    distinct model's counted FLOPs."""
    from ..settings.config import crop_size
    from ..settings.registry import DATASETS, method_traits

    flops = {} if flops_cache is None else flops_cache
    cfg = run.config
    gated = method_traits(cfg["method"]["name"]).gated
    ref = reference(rates, cfg["method"]["name"], cfg["train"]["graph"])
    # only the gating head adds FLOPs to backbone + projector
    key = json.dumps([cfg["model"], gated and cfg["method"]["head_depth"], crop_size(cfg)], sort_keys=True)
    if key not in flops:
        flops[key] = forward_flops(cfg)
    rate = ref["img_per_s"] * ref["gflops_fwd_per_view"] * 1e9 / flops[key]
    n = images(cfg["data"], sizes)
    pre = 0.0 if run.imported else pretrain_seconds(cfg, rate, n["train"])  # imported weights: never trained
    sections = section_seconds(run, rate, n, cfg["eval"].get("max_images") or math.inf)
    manifests = DATASETS[cfg["data"]["dataset"]].manifests(cfg["data"])
    # an untrained twin's initialisation, saved inside its evaluation submission
    init = 0.0 if trains(cfg) or run.imported else PRETRAIN_START_S
    return {"pretrain_h": pre / 3600, "eval_h": sum(w for _, w in sections.values()) / 3600,
            "eval_held_h": (init + sum(t for t, _ in sections.values())) / 3600, "sections": sections,
            "expected": {**({} if run.imported else {"pretrain": pre + PRETRAIN_START_S}),
                         **{k: t for k, (t, _) in sections.items()}},
            "declared": tuple(k for k in sections if k not in PRICED), "graph": ref.get("graph", EAGER),
            # one prepare_data job per prepared copy (common.smk, PREPARED)
            "prepared": tuple(manifests) if manifests else None}


def planner(runs: dict, rates: dict, results: str | Path | None = None, *, sizes: dict[str, int] | None = None,
            strict: bool = True, time_limit_min: float | None = None, margin_s: float = STOP_MARGIN_S,
            remaining: bool = False) -> Planner:
    """The requests of the grid's `runs` (bayesncl.planning.time_requests.Planner) priced by run_cost at `rates`,
    learning from the finished jobs under `results`. `strict`: a run that cannot be priced (a dataset of unknown size)
    is a ConfigError, else it asks what its rules declare."""
    flops: dict[str, float] = {}

    def price(run) -> dict | None:
        try:
            return run_cost(run, rates, sizes, flops)
        except ConfigError:
            if strict:
                raise
            return None

    return Planner(runs, price, results, time_limit_min=time_limit_min, margin_s=margin_s, remaining=remaining)


def estimate(wf: dict, rates: dict, *, time_limit_min: float | None = None, sizes: dict[str, int] | None = None,
             margin_s: float = STOP_MARGIN_S, results: str | Path | None = None, progress: bool = False) -> Estimate:
    """The cost of every run of the workflow config `wf` (bayesncl.grid.expand), per dataset; its requests learned from
    the finished jobs under `results` (None: none)."""
    from tqdm.auto import tqdm

    from ..grid.expand import expand_grid
    from ..report.atlas import atlas_runs

    runs = expand_grid(wf)
    plan = planner(runs, rates, results, sizes=sizes, time_limit_min=time_limit_min, margin_s=margin_s)
    est = Estimate(rates["gpu"], rates["source"], time_limit_min=time_limit_min, measured_on=measured_on(rates),
                   learned=plan.learned(), benchmarks=None if results is None else str(Path(results) / "benchmarks"))
    prepared = set()
    for rid, run in tqdm(runs.items(), disable=not progress, desc="estimate", unit="run", leave=False):
        cost, asked = plan.cost(rid), plan.asked(rid)
        row = est.rows.setdefault(run.config["data"]["dataset"], Row())
        row.runs += 1
        for k in ("pretrain_h", "eval_h", "eval_held_h"):
            setattr(row, k, getattr(row, k) + cost[k])
        row.pretrain_request_h += asked.allocations * (asked.pretrain() or 0) / 60  # each allocation asks as much
        row.eval_request_h += sum(asked.evaluation.values()) / 60
        row.allocations += asked.allocations
        row.submissions += asked.allocations + (1 if asked.evaluation else 0)
        est.graphs[run.config["train"]["graph"]] = cost["graph"]
        if cost["prepared"]:
            prepared.add(cost["prepared"])
    est.atlas = len(atlas_runs(runs))
    est.prepare = len(prepared)
    return est


def render(est: Estimate) -> str:
    """The table `bayesncl estimate` prints."""
    head = (f"{'dataset':<14} {'runs':>5} {'pretrain':>9} {'eval':>7} {'eval held':>10} {'total':>8} "
            f"{'requested':>10} {'submissions':>12}")
    lines = [f"GPU-hours on one {est.gpu}, from {est.source}", "", head]

    def line(name: str, r: Row) -> str:
        return (f"{name:<14} {r.runs:>5} {r.pretrain_h:>9.1f} {r.eval_h:>7.1f} {r.eval_held_h:>10.1f} "
                f"{r.pretrain_h + r.eval_held_h:>8.1f} {r.pretrain_request_h + r.eval_request_h:>10.1f} "
                f"{r.submissions:>12}")

    for name, r in est.rows.items():
        lines.append(line(name, r))
    lines.append(line("all", est.total()))
    t = est.total()
    modes = "; ".join(f"train.graph={g} at the measured {p} rate" + ("" if g == p else f" ({g} not measured)")
                      for g, p in est.graphs.items())
    lines += ["",
              f"submissions: {t.allocations} pretraining"
              + (f" (at most {est.time_limit_min:g} minutes each)" if est.time_limit_min else "")
              + f", {t.submissions - t.allocations - est.atlas - est.prepare} evaluation, {est.atlas} atlas, "
                f"{est.prepare} prepare_data",
              f"rates: {modes or 'no run'}, the mode each run trains in",
              f"measured on: {est.measured_on}; each run's rate scaled by its own counted FLOPs",
              "eval: the GPU work of the evaluation submissions (features, the paper-protocol and Waterbirds probes); "
              "eval held: the hours they are expected to hold their GPU (that work, their CPU sections, each "
              "section's start-up, an untrained twin's initialisation)",
              "total: pretrain + eval held, the GPU-hours the grid is expected to hold; queueing not included",
              f"requested: the time its submissions ask for (each job {PRIOR:g} x expected until jobs of its kind "
              f"have finished, then what they took with a margin from their spread; at least {FLOOR_MIN} minutes a "
              "submission; pretraining: with its stop margin, times its allocations)",
              f"requested against expected: pretraining {t.pretrain_request_h:.1f} for {t.pretrain_h:.1f} "
              f"({_ratio(t.pretrain_request_h, t.pretrain_h)}), evaluation {t.eval_request_h:.1f} for "
              f"{t.eval_held_h:.1f} held ({_ratio(t.eval_request_h, t.eval_held_h)}; "
              f"{_ratio(t.eval_request_h, t.eval_h)} its GPU work)",
              f"learned from: {_learned(est)}"]
    return "\n".join(lines) + "\n"


def _ratio(asked: float, work: float) -> str:
    return f"{asked / work:.2f}x" if work > 0 else "-"


def _learned(est: Estimate) -> str:
    where = f" ({est.benchmarks})" if est.benchmarks else ""
    n, kinds = est.learned.jobs, len(est.learned.ratios)
    if not n:
        return f"no finished job of the grid{where}"
    return f"{n} finished job{'s' * (n != 1)} of the grid, {kinds} kind{'s' * (kinds != 1)} (rule, dataset, " \
           f"architecture){where}"
