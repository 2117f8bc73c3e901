"""Steps that time training on the device: the matmul ceiling, `pretrain` eager and captured, the step's
phases, and the step compiled whole."""

from __future__ import annotations

import math
import statistics
import sys
import time
from typing import TYPE_CHECKING

import torch

from .common import BENCHMARKS, CAPTURED, GRID_METHODS, GRID_MODE, sync
from .estimate import forward_flops
from .procs import run_pretrain

if TYPE_CHECKING:
    from .check import Check


def matmul_peak(check: Check) -> dict:
    n, dev = check.s.matmul_n, check.device
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    sync(dev)
    reps, t0 = 50, time.perf_counter()
    for _ in range(reps):
        a @ b
    sync(dev)
    dt = time.perf_counter() - t0
    return {"n": n, "dtype": "bfloat16", "tflops": 2 * n**3 * reps / dt / 1e12}


def throughput(check: Check) -> dict:
    """`pretrain` itself in the mode the paper grid trains in (eager), each of its methods (SimCLR, NCL, Top-k NCL,
    BayesNCL): images/s, BayesNCL's overhead over NCL, peak memory."""
    res = _rates(check, GRID_METHODS, GRID_MODE)
    res["overhead_pct"] = 100 * (res["ncl"]["img_per_s"] / res["bayesncl"]["img_per_s"] - 1)
    return res


def captured_step(check: Check) -> dict:
    """An option the grid does not use: the same with the step captured in a CUDA graph (train.graph=cudagraph),
    NCL and BayesNCL; CUDA only."""
    if check.device.type != "cuda":
        return {"note": "train.graph=cudagraph needs CUDA"}
    res = _rates(check, ("ncl", "bayesncl"), CAPTURED)
    res["overhead_pct"] = 100 * (res["ncl"]["img_per_s"] / res["bayesncl"]["img_per_s"] - 1)
    return res


def _rates(check: Check, methods, mode: str) -> dict:
    """`bayesncl.training.train.pretrain` on the generated CIFAR-100 set, each method in train.graph `mode`: a warm-up
    run sizes the timed run; the rate is the median of its epochs after the first (which holds a capture)."""
    from bayesncl.settings.config import resolve
    from bayesncl.training.train import pretrain

    bs = check.s.batch
    data = ["data.dataset=cifar100", f"data.root={check.cifar_root}", f"train.batch_size={bs}",
            "train.warmup_epochs=1"]
    steps_in_data = check.s.cifar_train // bs
    # The model as resolved (its stem and padding with it), beside each method's GFLOPs per view: what
    # `bayesncl estimate --measured` scales the rates by.
    res: dict = {"batch": bs, "model": resolve(sets=check.s.tput_model)["model"], "precision": check.precision(),
                 "graph": mode, "channels_last": check.device.type == "cuda", "methods": list(methods)}
    for method in methods:
        sets = check.s.tput_model + data + check.device_sets() + [
            f"method.name={method}", f"train.precision={check.precision()}", f"train.graph={mode}"]
        # Warm-up run (kernels, allocator, autotuning), whose second epoch gives a rough rate to size the timed run.
        warm_steps = min(check.s.warm_steps, steps_in_data)
        log = run_pretrain(pretrain, resolve(sets=sets + ["train.epochs=2", f"train.max_steps_per_epoch={warm_steps}"]),
                           check.work / "tput" / f"{method}_{mode}_warm")
        rough = log[-1]["img_per_s"]
        epoch_steps = max(3, min(steps_in_data, int(rough * check.s.tput_seconds / 3 / bs)))
        epochs = max(3, min(8, math.ceil(rough * check.s.tput_seconds / (epoch_steps * bs))))
        if check.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(check.device)
        log = run_pretrain(pretrain, resolve(sets=sets + [f"train.epochs={epochs}",
                                                         f"train.max_steps_per_epoch={epoch_steps}"]),
                           check.work / "tput" / f"{method}_{mode}")
        rates = [r["img_per_s"] for r in log]
        m = res[method] = {"img_per_s": statistics.median(rates[1:]), "epoch_rates": rates, "epochs": epochs,
                           "steps_per_epoch": epoch_steps, "graph": mode,
                           "peak_mem_mb": max((r["peak_mem_mb"] or 0) for r in log) or None,
                           "gflops_fwd_per_view": forward_flops(resolve(sets=sets)) / 1e9, "model": res["model"]}
        # Per source image: two views, each forward + backward (~3x the forward).
        m["achieved_tflops"] = m["img_per_s"] * 2 * 3 * m["gflops_fwd_per_view"] / 1e3
        m["ms_per_step"] = 1e3 * bs / m["img_per_s"]
        print(f"{method:9s} {mode:9s} {m['img_per_s']:10.1f} images/s, {m['ms_per_step']:.2f} ms/step, "
              f"{m['achieved_tflops']:.1f} TFLOP/s, peak {m['peak_mem_mb']} MiB", flush=True)
    return res


def _train_step(check: Check, method: str, graph: str = "eager"):
    """(a started TrainStep of the throughput model, its train split), as `pretrain` builds them."""
    from bayesncl.data import SimCLRAugment, load_split
    from bayesncl.training.step import TrainStep

    cfg = check.step_config(method, graph)
    train = load_split(cfg["data"], "train")
    aug = SimCLRAugment(train.crop_size, train.mean, train.std, crop_scale=(cfg["train"]["crop_min_scale"], 1.0))
    model, opt, _ = check.step_model(cfg)
    step = TrainStep(model, opt, aug, cfg, check.device, 1000)
    step.start(0)
    return step, train


def step_profile(check: Check) -> dict:
    """TrainStep's phases, NCL and BayesNCL, one batch reused: augmentation of the two views (with their
    random draws), forward + loss, backward, LARS update, the logged sums (device events between them,
    eager); and, on CUDA, the whole step replayed from its CUDA graph (one span: no phases inside a graph).
    The methods alternate step by step; medians."""
    from bayesncl.data import iter_batches

    sys.path.insert(0, str(BENCHMARKS))
    from bench_train import after_phases

    bs, dev = check.s.batch, check.device
    warm, timed = check.s.profile_steps
    names = ("augment", "forward", "backward", "optimizer", "sums")
    res: dict = {"batch": bs, "warm_steps": warm, "timed_steps": timed, "phases": list(names)}
    steps, x = {}, None
    for method in ("ncl", "bayesncl"):
        steps[method], train = _train_step(check, method)
        if x is None:
            x = next(iter_batches(train, bs, shuffle=True, seed=0, drop_last=True, device=dev, num_workers=0))[0]
    gens = {m: torch.Generator(device=dev).manual_seed(0) for m in steps}
    rows = {m: [] for m in steps}
    for i in range(warm + timed):
        for m, st in steps.items():
            r = after_phases(st, x, gens[m])
            if i >= warm:
                rows[m].append(r)
    for m in steps:
        per = {n: statistics.median(c) for n, c in zip(names, zip(*rows[m]))}
        per["total"] = statistics.median(sum(r) for r in rows[m])
        res[m] = {k: round(v, 3) for k, v in per.items()}
    res["bayesncl_minus_ncl_ms"] = {k: round(res["bayesncl"][k] - res["ncl"][k], 3) for k in (*names, "total")}
    if dev.type == "cuda":  # the captured step: replay time per step
        for m in ("ncl", "bayesncl"):
            res[f"{m}_{CAPTURED}_ms"] = _captured_ms(check, m, x)
        res[f"overhead_pct_{CAPTURED}"] = 100 * (res[f"bayesncl_{CAPTURED}_ms"] / res[f"ncl_{CAPTURED}_ms"] - 1)
    print("step profile (ms): " + "; ".join(f"{m} " + ", ".join(f"{k} {res[m][k]:.2f}" for k in (*names, "total"))
                                             for m in ("ncl", "bayesncl"))
          + "".join(f"; {m} captured {res[f'{m}_{CAPTURED}_ms']:.2f}" for m in ("ncl", "bayesncl")
                    if f"{m}_{CAPTURED}_ms" in res), flush=True)
    return res


def _captured_ms(check: Check, method: str, x: torch.Tensor) -> float:
    """Median milliseconds per replay of the step captured in a CUDA graph, on one batch reused."""
    warm, timed = check.s.profile_steps
    st, _ = _train_step(check, method, graph=CAPTURED)
    gen = torch.Generator(device=check.device).manual_seed(0)
    for _ in range(warm):
        st(x, gen)
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(timed + 1)]
    ev[0].record()
    for k in range(timed):
        st(x, gen)
        ev[k + 1].record()
    torch.cuda.synchronize(check.device)
    return round(statistics.median(a.elapsed_time(b) for a, b in zip(ev, ev[1:])), 3)


def compiled_step(check: Check) -> dict:
    """`pretrain` with train.graph=compile (torch.compile of the whole step, CUDA graphs on CUDA), NCL and
    BayesNCL, 3 epochs: epoch 1 holds the compile (its seconds are recorded), the rate is epochs 2-3's."""
    if check.device.type != "cuda":
        return {"note": "measured on CUDA only (on CPU the compile takes minutes; tests/test_step_compile.py "
                        "checks the compiled step against eager)"}
    from bayesncl.settings.config import resolve
    from bayesncl.training.train import pretrain

    bs = check.s.batch
    tput = check.step_result("throughput") or {}
    steps = tput.get("ncl", {}).get("steps_per_epoch", max(3, check.s.cifar_train // bs // 4))
    res: dict = {"batch": bs, "steps_per_epoch": steps}
    for method in ("ncl", "bayesncl"):
        sets = check.s.tput_model + check.device_sets() + [
            "data.dataset=cifar100", f"data.root={check.cifar_root}", f"train.batch_size={bs}",
            "train.warmup_epochs=1", f"method.name={method}", f"train.precision={check.precision()}",
            "train.graph=compile", "train.epochs=3", f"train.max_steps_per_epoch={steps}"]
        log = run_pretrain(pretrain, resolve(sets=sets), check.work / "tput" / f"{method}_compile")
        rate = statistics.median([r["img_per_s"] for r in log[1:]])
        res[method] = {"img_per_s": rate, "first_epoch_s": log[0]["epoch_seconds"],
                       "compile_s": log[0].get("compile_seconds"), "ms_per_step": 1e3 * bs / rate}
        if method in tput and "gflops_fwd_per_view" in tput[method]:
            res[method]["achieved_tflops"] = rate * 2 * 3 * tput[method]["gflops_fwd_per_view"] / 1e3
            peak = check.step_result("matmul_peak")
            if peak:
                res[method]["peak_frac"] = res[method]["achieved_tflops"] / peak["tflops"]
        print(f"{method:9s} {rate:10.1f} images/s with train.graph=compile (compile: "
              f"{log[0].get('compile_seconds', float('nan')):.1f} s; epoch 1: {log[0]['epoch_seconds']:.1f} s)",
              flush=True)
    res["overhead_pct"] = 100 * (res["ncl"]["img_per_s"] / res["bayesncl"]["img_per_s"] - 1)
    return res
