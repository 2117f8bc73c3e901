"""Expand the workflow config (config/*.yaml) into distinct runs, each with its resolved bayesncl config.

Snakemake (workflow/rules/common.smk) calls `expand_grid`; nothing else knows the grid. A run that several
tables use is one run: runs are keyed by their resolved training config. Run ids are readable paths:
`<dataset>/<method>/<key~value>/.../seed~N`, listing the settings that tell the run apart.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from .config import RUNTIME_KEYS, ConfigError, flatten, nest, resolve, topk_k

# Always named in the id of these methods, so a reader sees the operating point.
ALWAYS_NAMED = {"bayesncl": ("method.rho", "method.lambda"), "topk_ncl": ("method.topk_k",)}
# Order of the path components after the method.
ID_ORDER = ("model.arch", "model.width", "model.proj_dim", "method.gate", "method.detach", "method.head_depth",
            "method.nonneg", "method.rho", "method.lambda", "method.topk_k")
SHORT = {"model.proj_dim": "D", "method.head_depth": "depth", "method.topk_k": "k"}


@dataclass
class Run:
    run_id: str
    config: dict
    variant: str
    sets: list[str] = field(default_factory=list)
    sweeps: list[str] = field(default_factory=list)


def _merged(*parts: dict) -> dict:
    out: dict = {}
    for p in parts:
        out = _deep_update(out, copy.deepcopy(p or {}))
    return out


def _deep_update(a: dict, b: dict) -> dict:
    for k, v in b.items():
        a[k] = _deep_update(a.get(k, {}), v) if isinstance(v, dict) and isinstance(a.get(k), dict) else v
    return a


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def _identity(cfg: dict) -> tuple:
    return tuple(sorted((k, repr(v)) for k, v in flatten(cfg).items() if not k.startswith(RUNTIME_KEYS)))


def run_id(cfg: dict, base: dict) -> str:
    """Readable id: dataset/method, then every identity setting that differs from the dataset's base."""
    flat, flat_base = flatten(cfg), flatten(base)
    method = cfg["method"]["name"]
    named = [k for k in flat if not k.startswith(RUNTIME_KEYS) and k not in ("seed", "method.name", "data.dataset")
             and (flat[k] != flat_base.get(k) or k in ALWAYS_NAMED.get(method, ()))]
    # Method settings that the method ignores are not part of what tells it apart.
    if method != "bayesncl":
        named = [k for k in named if k not in ("method.gate", "method.detach", "method.head_depth", "method.tau_g",
                                               "method.head_lr_mult", "method.lambda", "method.rho")]
    if method != "topk_ncl":
        named = [k for k in named if k != "method.topk_k"]
    if method == "cl":
        named = [k for k in named if k != "method.nonneg"]
    named.sort(key=lambda k: (ID_ORDER.index(k) if k in ID_ORDER else len(ID_ORDER), k))
    flat["method.topk_k"] = topk_k(cfg)  # the k in use, also when left to its default
    parts = [f"{SHORT.get(k, k.split('.')[-1])}~{_fmt(flat[k])}" for k in named]
    return "/".join([cfg["data"]["dataset"], method, *parts, f"seed~{cfg['seed']}"])


def expand_grid(wf: dict) -> dict[str, Run]:
    """Workflow config -> {run_id: Run}. Raises ConfigError naming the offending key."""
    runs: dict[str, Run] = {}
    idents: dict[str, tuple] = {}
    for set_name, spec in wf["sets"].items():
        datasets = spec.get("datasets", list(wf["datasets"]))
        seeds = spec.get("seeds", wf["seeds"])
        if not seeds:
            raise ConfigError(f"sets.{set_name}.seeds: empty seed list; give at least one seed")
        # Each swept key alone, the others at their defaults; no sweep is one point.
        sweeps = [(k, v) for k, vs in (spec.get("sweep") or {}).items() for v in vs] or [(None, None)]
        for ds in datasets:
            if ds not in wf["datasets"]:
                raise ConfigError(f"sets.{set_name}.datasets: unknown dataset {ds!r}; defined: "
                                  f"{', '.join(wf['datasets'])}")
            for variant in spec["variants"]:
                if variant not in wf["variants"]:
                    raise ConfigError(f"sets.{set_name}.variants: unknown variant {variant!r}; defined: "
                                      f"{', '.join(wf['variants'])}")
                for key, value in sweeps:
                    for seed in seeds:
                        raw = _merged(wf["defaults"], wf["datasets"][ds], wf["variants"][variant],
                                      spec.get("overrides"), nest({key: value}) if key else None, {"seed": seed})
                        if spec.get("dynamics_every"):
                            raw = _merged(raw, {"train": {"dynamics_every": spec["dynamics_every"]}})
                        where = f"datasets.{ds} / variants.{variant} / sets.{set_name}"
                        try:
                            cfg = resolve(base=raw)
                        except ConfigError as e:
                            raise ConfigError(f"{where}: {e}") from None
                        base = resolve(base=_merged(wf["defaults"], wf["datasets"][ds], {"method": {"name": cfg["method"]["name"]}}))
                        rid = run_id(cfg, base)
                        if idents.setdefault(rid, _identity(cfg)) != _identity(cfg):
                            raise ConfigError(f"{where}: two different configs map to run {rid!r}")
                        if rid in runs:
                            run = runs[rid]
                            # Recording options are the union over the sets that use the run.
                            e = cfg["train"]["dynamics_every"]
                            if e and not run.config["train"]["dynamics_every"]:
                                run.config["train"]["dynamics_every"] = e
                        else:
                            run = runs[rid] = Run(rid, cfg, variant)
                        if set_name not in run.sets:
                            run.sets.append(set_name)
                        if key and key.split(".")[-1] not in run.sweeps:
                            run.sweeps.append(key.split(".")[-1])
    return runs


def check_workflow_config(wf: dict) -> None:
    """What a JSON schema cannot say: real datasets need a root."""
    for ds, over in wf["datasets"].items():
        data = over.get("data", {})
        if data.get("dataset", "synthetic") != "synthetic" and not data.get("root"):
            raise ConfigError(f"datasets.{ds}.data.root: dataset {data.get('dataset')!r} needs a root path")


def evaluation_sections(run: Run) -> list[str]:
    sections = ["interpretability", "linear_probe", "cost"]
    if run.config["method"]["name"] != "cl":
        sections.append("retrieval")
    if "table6" in run.sets:
        sections.append("background")
    if run.config["train"]["dynamics_every"]:
        sections.append("dynamics")
    return sections
