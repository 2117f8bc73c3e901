"""The evaluation sections: one registry entry per job of the workflow (docs/METHOD.md sections 4-7).

A section is one function `compute(ctx) -> {json key: body}` registered with `@section`, saying whether it
runs the network (`gpu`: it needs the model on the device; the others read the cached features on the CPU),
whether it reads the model at all (`model`: the checkpoint is loaded; the others get the run's config and
identity from features.json and import no torch unless their measure does) and to which runs it applies.
`bayesncl evaluate --only NAME` runs it and writes `eval/NAME.json`; the workflow makes one rule per section
(workflow/rules/evaluate.smk) from what it registered: the files it reads (`reads`), writes beside its JSON
(`outputs`) and what one job needs on a cluster. A plugin's section (docs/EXTENDING.md) says `every_run` and
the runs.csv columns its numbers go to (`columns`).

    features          (GPU) one pass over the test split (and the train split where a CPU section needs it):
                      eval/features.npz, eval/features_train.npz; the training curves from log.jsonl
    interpretability  (CPU) SC, semantic entropies, activation ratio, background dominance, closed gates
    retrieval         (CPU) P@k with the top-K dims by activation frequency (not for SimCLR)
    linear_probe      fast protocol: CPU on the cached h; paper protocol: GPU, augmented crops
    background_probe  predict the background from h: Waterbirds (GPU) or the synthetic set's label (CPU)
    dynamics          (CPU) Spearman correlations of AF, GV, SC from dynamics.pt (train.dynamics_every > 0);
                      SC of the evaluation feature and of z+ per recorded epoch
    cost              (CPU) FLOPs and parameters counted on the model; time and peak memory from log.jsonl
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np

from ..settings.config import crop_size
from ..core.errors import ConfigError
from ..settings.registry import DATASETS, METHODS, SECTION_SETTINGS, Registry, as_settings
from ..runs.files import FEATURE_FILES

if TYPE_CHECKING:
    from .runner import Context

__all__ = ["SECTIONS", "Section", "applicable", "section"]


@dataclass(frozen=True)
class Section:
    name: str
    compute: Callable[["Context"], dict]
    gpu: Callable[[dict], bool]                 # cfg -> does it run the network?
    skip: Callable[[dict], str | None]          # cfg -> why it does not apply to this run (None: it applies)
    model: Callable[[dict], bool]               # cfg -> does it read the checkpoint's model?
    # The workflow's rule: what it reads ("model": model.pt; "features": the features cache; "prepared": the
    # dataset's prepared copy), the files it writes beside eval/<name>.json ({name: file}), and one job's needs.
    reads: tuple[str, ...] = ("features",)
    outputs: tuple[tuple[str, str], ...] = ()
    cpus: int = 1
    mem_mb: int = 4000
    runtime: int = 15                           # minutes
    every_run: bool = False                     # every run it applies to gets it (else the sets ask: grid/expand.py)
    columns: tuple[tuple[str, str], ...] = ()   # (key of its body, runs.csv column) for a plugin's numbers
    module: str = ""                            # where `compute` is defined (a plugin's: its code's identity)
    version: str = ""                           # what identifies its code ("": its module file's SHA-256)

    @property
    def doc(self) -> str:
        """Its function's docstring's first line ("" where it has none: a plugin's may not)."""
        return next(iter((self.compute.__doc__ or "").strip().splitlines()), "")


SECTIONS: Registry[Section] = Registry("evaluation section", "evaluate --only")


def section(name: str, *, gpu: Callable[[dict], bool] = lambda cfg: False,
            skip: Callable[[dict], str | None] = lambda cfg: None, model: Callable[[dict], bool] | None = None,
            reads=("features",), outputs: dict[str, str] | None = None, cpus: int = 1, mem_mb: int = 4000,
            runtime: int = 15, every_run: bool = False, columns: dict[str, str] | None = None,
            settings: dict | None = None, version: str = ""):
    """Register `compute` as section `name`; `model` defaults to `gpu` (running the network reads the model).
    `settings` ({name: bayesncl.settings.registry.setting(...)}): the section's own, eval.<name>.* of every run
    config."""
    def register(fn):
        declared = as_settings(f"evaluation section {name!r}", settings)
        SECTIONS.register(Section(name, fn, gpu, skip, model or gpu, tuple(reads), tuple((outputs or {}).items()),
                                  cpus, mem_mb, runtime, every_run, tuple((columns or {}).items()), fn.__module__,
                                  version))
        if declared:
            SECTION_SETTINGS[name] = declared
        return fn
    return register


def applicable(cfg: dict) -> list[str]:
    """The sections that apply to a run config, in registry order (features first)."""
    return [name for name, s in SECTIONS.items() if s.skip(cfg) is None]


def _has_backgrounds(cfg: dict) -> bool:
    return DATASETS[cfg["data"]["dataset"]].has_backgrounds(cfg["data"])


def _needs_train_h(cfg: dict) -> bool:
    """The CPU sections that read the train split's h: the fast probe, the background probe without Waterbirds."""
    return cfg["eval"]["probe"] == "fast" or (not cfg["eval"]["waterbirds_root"] and _has_backgrounds(cfg))


# ------------------------------------------------------------------------------------------------ features
def training_record(log: list[dict], batch: int) -> dict:
    """features.json's training block from the run's log. The still-learning slope, the collapse and the final
    value read InfoNCE alone (docs/METHOD.md section 10): BayesNCL's loss adds its KL term, which moves on its
    own; a log older than the infonce column gives its loss."""
    from ..measures.learning import collapse, learning_slope

    infonce = [r.get("infonce", r["loss"]) for r in log]
    training = {"epochs": [r["epoch"] for r in log], "loss": [r["loss"] for r in log],
                "infonce_final": infonce[-1] if infonce else None, "learning": learning_slope(infonce),
                "collapse": collapse(infonce, batch)}
    if log and "open_gates" in log[-1]:
        training["open_gates"] = [r.get("open_gates") for r in log]
        training["open_gates_last"] = log[-1]["open_gates"]
    return training


# written last: eval/features_train.npz too, where a CPU section needs the train split
@section("features", gpu=lambda cfg: True, reads=("model", "prepared"), outputs={"test": "features.npz"}, cpus=8,
         mem_mb=64000, runtime=60)
def features(ctx) -> dict:
    """Embed the test split (and the train split where needed) once; cache what the CPU sections read."""
    from ..runs.files import read_log

    cfg = ctx.cfg
    spec = METHODS[cfg["method"]["name"]]
    keys = ("feature", "h") + (("zplus",) if spec.nonnegative else ()) + spec.arrays
    test = ctx.split("test")
    bn = cfg["eval"]["bn"]
    if bn == "running":
        arrays = ctx.labels(test) | {k: v.numpy() for k, v in zip(keys, ctx.embed(test, keys, "running"))}
    else:  # the probes' h with running statistics (as the released linear probe), the rest as eval.bn says
        rest = tuple(k for k in keys if k != "h")
        arrays = ctx.labels(test) | {k: v.numpy() for k, v in zip(rest, ctx.embed(test, rest, bn))}
        arrays["h"] = ctx.embed(test, ("h",), "running")[0].numpy()
    arrays["eval_bn"] = np.array(bn)
    for k in ("gate", "mask"):  # hard 0/1 (every reader thresholds at 0.5)
        if k in arrays:
            arrays[k] = (arrays[k] > 0.5).astype(np.uint8)
    ctx.save_arrays("features", arrays)
    n_train = 0
    if _needs_train_h(cfg):
        train = ctx.split("train")
        h, = ctx.embed(train, ("h",), "running")
        ctx.save_arrays("features_train", ctx.labels(train) | {"h": h.numpy()})
        n_train = len(train.labels)
    training = training_record(read_log(ctx.run_dir, ("epoch", "loss")), cfg["train"]["batch_size"])
    return {"features": {"test_images": len(test.labels), "train_images": n_train, "arrays": sorted(arrays),
                         "bn": bn, "bn_batch": cfg["train"]["batch_size"] if bn == "batch" else None},
            "training": training, "config": ctx.stored_config}  # what the cache-reading sections run on


def _cached_bn(ctx, f: dict) -> str:
    """The BatchNorm mode the cached features were computed with; it must be the one this call asks for."""
    bn = str(f["eval_bn"]) if "eval_bn" in f else "running"  # caches older than eval.bn were eval mode
    if bn != ctx.cfg["eval"]["bn"]:
        raise ConfigError(f"eval.bn: {ctx.out / FEATURE_FILES['test']} holds features computed with eval.bn={bn}, "
                          f"this evaluation asks for {ctx.cfg['eval']['bn']}; rerun `--only features` with it")
    return bn


# ------------------------------------------------------------------------------------------- interpretability
@section("interpretability", outputs={"vectors": "vectors.npz"}, cpus=4, mem_mb=16000, runtime=30)
def interpretability(ctx) -> dict:
    """SC, SE-Sum/Mean/Freq and Act. on the evaluation feature and z+; background dominance; gate/mask binding."""
    from ..measures import arrays as metrics

    f = ctx.features("test")
    bn = _cached_bn(ctx, f)
    labels, C = f["labels"], int(f["num_classes"])
    outs = {k: f[k] for k in ("feature", "zplus", "gate", "mask") if k in f}
    vectors: dict[str, np.ndarray] = {}
    r = metrics.interpretability(outs["feature"], labels, C)
    r["bn"] = bn
    for k, v in r.pop("per_dim").items():
        vectors[f"feature_{k}"] = np.asarray(v)
    r.pop("active", None)
    if "zplus" in outs:
        rz = metrics.interpretability(outs["zplus"], labels, C)
        for k, v in rz.pop("per_dim").items():
            vectors[f"zplus_{k}"] = np.asarray(v)
        r["zplus"] = {k: v for k, v in rz.items() if k != "active"}
    dom = None
    if "backgrounds" in f:
        bg, B = f["backgrounds"], int(f["num_backgrounds"])
        for name in ("zplus", "feature"):
            if name in outs:
                d = metrics.background_dominance(outs[name], labels, bg, C, B)
                r[f"bg_dominated_{name}"] = d["share"]
                for k in ("bg_sc", "lift_bg", "lift_cls"):
                    vectors[f"{name}_{k}"] = np.asarray(d[k])
                if name == "zplus":
                    dom = d
    if "gate" in outs:  # the mechanism: does the gate switch background dims off?
        closed = metrics.closed_gate_rate(outs["zplus"], outs["gate"])
        vectors["zplus_closed_rate"] = closed
        if dom is not None:
            for key, sel in (("closed_bg", dom["bg_dom"]), ("closed_cls", dom["cls_dom"])):
                v = closed[sel & np.isfinite(closed)]
                r[key] = float(v.mean()) if v.size else math.nan
    if "mask" in outs:
        b = metrics.topk_binding(outs["zplus"], outs["mask"])
        r["topk_bound"], r["topk_removed"] = b["bound"], b["removed"]
    ctx.save_arrays("vectors", vectors)
    return {"interpretability": r}


# ---------------------------------------------------------------------------------------------------- retrieval
@section("retrieval", skip=lambda cfg: f"not reported for {METHODS[cfg['method']['name']].label}: its feature is "
         "not built on z+ (docs/METHOD.md section 5)" if not METHODS[cfg["method"]["name"]].nonnegative else None,
         cpus=8, mem_mb=32000, runtime=60)  # all-pairs similarities over the test split, at every K of the curve
def retrieval(ctx) -> dict:
    """P@k (k = 1, 3, 5, 10) with the top-K dims by activation frequency, and P@10 over K."""
    from ..measures import arrays as ret

    f = ctx.features("test")
    bn = _cached_bn(ctx, f)
    F, y = f["feature"], f["labels"]
    K = min(ctx.cfg["eval"]["retrieval_k"] or DATASETS[ctx.cfg["data"]["dataset"]].retrieval_k, F.shape[1])
    r = ret.retrieval_precision(F, y, K=K)
    r["K"], r["bn"] = K, bn
    r["curve"] = {str(k): v for k, v in ret.retrieval_curve(F, y, ret.default_Ks(F.shape[1])).items()}
    return {"retrieval": r}


# ------------------------------------------------------------------------------------------------- linear probe
# the paper protocol runs the network on augmented crops (GPU); the fast one reads the cache
@section("linear_probe", gpu=lambda cfg: cfg["eval"]["probe"] == "paper", reads=("features", "model", "prepared"),
         cpus=8, mem_mb=64000, runtime=240)
def linear_probe(ctx) -> dict:
    """Top-1/Top-5 of a linear classifier on frozen h (fast: cached h; paper: augmented crops on the GPU)."""
    cfg = ctx.cfg
    if cfg["eval"]["probe"] == "paper":
        from . import probe

        r = probe.linear_probe_paper(ctx.model, ctx.split("train"), ctx.split("test"), cfg, ctx.device,
                                     progress=ctx.progress)
    else:  # NumPy on the features cache: the job imports no torch
        from ..measures.linear import linear_probe_fast

        tr, te = ctx.features("train"), ctx.features("test")
        r = linear_probe_fast(tr["h"], tr["labels"], te["h"], te["labels"], int(te["num_classes"]), seed=cfg["seed"])
    return {"linear_probe": r}


# --------------------------------------------------------------------------------------------- background probe
def _background_skip(cfg: dict) -> str | None:
    if cfg["eval"]["waterbirds_root"] or _has_backgrounds(cfg):
        return None
    return (f"dataset {cfg['data']['dataset']!r} has no background labels; set "
            "eval.waterbirds_root=/path/to/waterbird_complete95_forest2water2")


# Waterbirds is embedded on the GPU; the synthetic set's background label is cached
@section("background_probe", gpu=lambda cfg: bool(cfg["eval"]["waterbirds_root"]), skip=_background_skip,
         reads=("features", "model"), cpus=8, mem_mb=32000, runtime=60)
def background_probe(ctx) -> dict:
    """Accuracy of predicting the background from frozen h: Waterbirds `place`, else the synthetic set's label."""
    from ..measures.linear import linear_probe_fast

    cfg = ctx.cfg
    root = cfg["eval"]["waterbirds_root"]
    if root:
        from ..data import load_waterbirds

        wb = {s: ctx.nonempty(load_waterbirds(root, s), f"Waterbirds {s} split under {root}") for s in ("train", "test")}
        (htr,), (hte,) = ctx.embed(wb["train"], ("h",), "running"), ctx.embed(wb["test"], ("h",), "running")
        r = linear_probe_fast(htr.cpu().numpy(), wb["train"].backgrounds.cpu().numpy(), hte.cpu().numpy(),
                              wb["test"].backgrounds.cpu().numpy(), 2, seed=cfg["seed"])
        return {"background_probe": {"acc": r["top1"], "protocol": r["protocol"], "target": "waterbirds_place"}}
    tr, te = ctx.features("train"), ctx.features("test")  # NumPy on the features cache: no torch
    r = linear_probe_fast(tr["h"], tr["backgrounds"], te["h"], te["backgrounds"], int(te["num_backgrounds"]),
                          seed=cfg["seed"])
    return {"background_probe": {"acc": r["top1"], "protocol": r["protocol"],
                                 "target": f"{cfg['data']['dataset']}_background"}}


# ------------------------------------------------------------------------------------------------------ dynamics
@section("dynamics", skip=lambda cfg: None if cfg["train"]["dynamics_every"] else
         "the run recorded no gradient dynamics; pretrain with train.dynamics_every > 0",
         reads=("model",), cpus=1, mem_mb=4000, runtime=15)  # dynamics.pt, written before model.pt
def dynamics(ctx) -> dict:
    """Spearman rho(AF, GV), rho(GV, SC), rho(AF, SC) per recorded epoch (Table 3)."""
    from ..core.errors import MissingInputError
    from ..runs.files import DYNAMICS, load
    from ..measures.dynamics import spearman_table

    path = ctx.run_dir / DYNAMICS
    if not path.is_file():
        raise MissingInputError(f"dynamics: {path} does not exist; pretraining with train.dynamics_every > 0 writes it")
    dyn = load(path)
    epochs = sorted(dyn, key=int)
    rows = [spearman_table(dyn[e]["af"], dyn[e]["gv"], dyn[e]["sc"]) for e in epochs]

    def mean_sc(v) -> float | None:  # Table 1's SC from the per-dim values: 100 x mean over the finite ones
        v = None if v is None else np.asarray(v, dtype=float)
        return None if v is None or not np.isfinite(v).any() else 100.0 * float(np.nanmean(v))

    return {"dynamics": {"epochs": [int(e) for e in epochs],
                         **{k: [row[k] for row in rows] for k in ("af_gv", "gv_sc", "af_sc")},
                         "sc": [mean_sc(dyn[e].get("sc_feature")) for e in epochs],
                         "sc_zplus": [mean_sc(dyn[e]["sc"]) for e in epochs]}}


# ---------------------------------------------------------------------------------------------------------- cost
# FLOPs are counted, not timed; time and peak memory come from the training log
@section("cost", model=lambda cfg: True, reads=("model",), cpus=2, mem_mb=16000, runtime=15)
def cost(ctx) -> dict:
    """GFLOPs per image of the training forward and parameters (counted), time and peak memory (training log)."""
    import copy

    import torch

    from ..runs.files import read_log
    from ..measures import cost as c

    size = crop_size(ctx.cfg)
    model = copy.deepcopy(ctx.cpu_model).train()  # the training forward (Gumbel noise and all); BN stats change
    flops = c.count_flops_per_image(model, torch.randn(2, 3, size, size))
    return {"cost": {"gflops": flops / 1e9, "params_m": c.count_params(model) / 1e6,
                     **c.training_time(read_log(ctx.run_dir, ("epoch_seconds", "img_per_s")))}}


def check_applies(name: str, cfg: dict) -> None:
    why = SECTIONS[name].skip(cfg)
    if why is not None:
        raise ConfigError(f"evaluate --only {name}: {why}")
