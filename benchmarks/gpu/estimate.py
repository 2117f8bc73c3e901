"""The paper grid's GPU-hours from the measured rate, scaled by counted FLOPs, and the CPUs a GPU needs."""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING

from bayesncl.settings import config, registry
from bayesncl.planning.estimate import forward_flops  # noqa: F401 - the one count, also steps_train's (via this module)

from .common import CAPTURED, PAPER_MINUTES, ROOT, TRAIN_IMAGES, StepFailed

if TYPE_CHECKING:
    from .check import Check


def cpus_per_gpu(need_img_per_s: float, per_core_img_per_s: float) -> int:
    """CPUs to ask for per GPU: enough feeding cores for the GPU's images/s, plus one for the training process."""
    return math.ceil(need_img_per_s / per_core_img_per_s) + 1


def estimate_grid(configs: list[dict], tput: dict) -> dict:
    """GPU-hours of pretraining every config, each at the measured rate of its method family scaled by
    counted FLOPs: rate(run) = rate(measured model) x F(measured) / F(run). (Assumes the same achieved
    FLOP/s; 224 px convolutions usually run more efficiently than 32 px ones, so ImageNet-100 is likely
    overestimated.) The linear probe (paper protocol: forward of one view per image per epoch) is added at
    1/6 of a training image's cost."""
    flops: dict = {}
    per_ds: dict = {}
    total_s = probe_s = 0.0
    for cfg in configs:
        spec = registry.METHODS[cfg["method"]["name"]]
        gated = spec.gated  # only the gating head adds FLOPs to backbone + projector
        key = json.dumps([cfg["model"], gated and cfg["method"]["head_depth"], config.crop_size(cfg)],
                         sort_keys=True)
        if key not in flops:
            flops[key] = forward_flops(cfg)
        # its own method's rate where measured (throughput times each method of the grid), else its family's
        ref = tput.get(spec.name) or _family_rate(tput, gated)
        rate = ref["img_per_s"] * ref["gflops_fwd_per_view"] * 1e9 / flops[key]
        ds = cfg["data"]["dataset"]
        n = TRAIN_IMAGES[ds]
        bs = cfg["train"]["batch_size"]
        seconds = cfg["train"]["epochs"] * (n // bs) * bs / rate
        probe = cfg["eval"]["probe_epochs"] * n / (6 * rate) if cfg["eval"]["probe"] == "paper" else 0.0
        d = per_ds.setdefault(ds, {"jobs": 0, "gpu_hours": 0.0, "probe_gpu_hours": 0.0})
        d["jobs"] += 1
        d["gpu_hours"] += seconds / 3600
        d["probe_gpu_hours"] += probe / 3600
        total_s += seconds
        probe_s += probe
        plain = cfg["model"]["arch"] == "resnet18" and (spec.reference or spec.gated) and \
            cfg["method"]["head_depth"] == 2 and cfg["model"]["proj_dim"] in (256, 2048)
        if plain and cfg["method"]["gate"] == "ste" and cfg["method"]["detach"]:
            d.setdefault("minutes_per_run", {})[cfg["method"]["name"]] = seconds / 60
            if ds == "imagenet100":
                d["img_per_s_resnet18"] = max(rate, d.get("img_per_s_resnet18", 0.0))
    return {"jobs": len(configs), "pretrain_gpu_hours": total_s / 3600, "probe_gpu_hours": probe_s / 3600,
            "per_dataset": per_ds, "paper_minutes_cifar100": PAPER_MINUTES}


def _family_rate(tput: dict, gated: bool) -> dict:
    """The measured rate of a method's family (bayesncl.settings.registry's traits): a gated method's, else the
    reference's."""
    family = [m for m in tput if m in registry.METHODS and (registry.METHODS[m].gated if gated
                                                            else registry.METHODS[m].reference)]
    if not family:
        raise StepFailed(f"no measured rate of a {'gated' if gated else 'reference'} method among {sorted(tput)}")
    return tput[family[0]]


def grid_estimate(check: Check) -> dict:
    import yaml

    from bayesncl.grid.expand import expand_grid

    tput = check.step_result("throughput")
    if not tput:
        raise StepFailed("needs the throughput step's measured rates")
    # The rates of the mode the grid trains in (the throughput step's eager ones; the captured step's where the
    # grid captures its step and that was measured).
    wf = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())
    runs = expand_grid(wf)
    modes = {r.config["train"]["graph"] for r in runs.values()}
    captured = check.step_result("captured_step") or {}
    measured = any(m in registry.METHODS and registry.METHODS[m].reference for m in captured)
    mode = CAPTURED if modes == {CAPTURED} and measured else "eager"
    rates = {m: v for m, v in (captured if mode == CAPTURED else tput).items() if isinstance(v, dict)}
    est = estimate_grid([r.config for r in runs.values()], rates)
    est["rates_from"] = f"train.graph={mode}"
    if check.device.type != "cuda":  # the grid priced to prove the path; a CPU's rate would read as GPU-hours
        return {"jobs": est["jobs"], "rates_from": est["rates_from"],
                "note": "no GPU-hours or CPUs per GPU from a CPU's rates"}
    feed = check.step_result("imagenet_input")
    if feed and "imagenet100" in est["per_dataset"]:
        need = est["per_dataset"]["imagenet100"]["img_per_s_resnet18"]
        est["imagenet_img_per_s_needed"] = need
        est["imagenet_cpus_per_gpu_jpeg"] = cpus_per_gpu(need, feed["img_per_s_per_worker_all"])
        if "prepared_fetch_img_per_s_1core" in feed:  # a run from before the prepared copy has none
            est["imagenet_cpus_per_gpu"] = cpus_per_gpu(need, feed["prepared_fetch_img_per_s_1core"])
        else:
            est["imagenet_cpus_per_gpu"] = est["imagenet_cpus_per_gpu_jpeg"]
    return est
