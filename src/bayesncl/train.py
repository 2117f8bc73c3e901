"""Resumable pretraining (docs/METHOD.md section 2).

Determinism: the data order, the augmentation generator and the global RNG (Gumbel noise) are re-seeded
from (seed, epoch) at every epoch start, so resuming from an epoch checkpoint replays exactly what an
uninterrupted run does. A SIGTERM (SLURM time limit or preemption) saves a mid-epoch checkpoint with the
RNG states and raises Preempted (the CLI exits with REQUEUE_EXIT); the rerun continues from that step.
"""

from __future__ import annotations

import itertools
import json
import math
import signal
import sys
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm

from . import checkpoint as ckpt_io
from .atomic import atomic_write_text
from .config import RUNTIME_KEYS, ConfigError, dump_yaml
from .data import SimCLRAugment, iter_batches, load_split
from .evaluation.dynamics import GradientStats
from .evaluation.metrics import consistency_per_dim
from .methods import build_method
from .optim import build_optimizer, lr_at, set_lr
from .rundir import CHECKPOINT, CONFIG, DYNAMICS, FINAL, LOG
from .runtime import autocast, channels_last, embed, peak_memory_mb, resolve_device

REQUEUE_EXIT = 75  # EX_TEMPFAIL: "try again"; the SLURM profile retries, and the rerun resumes
CHECK_EVERY = 50  # steps between finiteness checks (each one waits for the device)


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite; the last good checkpoint is kept (the CLI exits 1)."""


class Preempted(Exception):
    """SIGTERM arrived; a checkpoint to resume from is saved (the CLI exits REQUEUE_EXIT)."""


def epoch_seed(seed: int, epoch: int) -> int:
    return seed * 1_000_003 + epoch


def steps_per_epoch(n: int, cfg: dict) -> int:
    steps = n // cfg["train"]["batch_size"]
    if steps == 0:
        raise ConfigError(
            f"train.batch_size: {cfg['train']['batch_size']} is larger than the training set ({n} images)"
        )
    cap = cfg["train"]["max_steps_per_epoch"]
    return min(steps, cap) if cap else steps


def dynamics_epoch(cfg: dict, epoch: int) -> bool:
    e = cfg["train"]["dynamics_every"]
    return bool(e) and (epoch + 1) % e == 0


def _rng_state(gen: torch.Generator) -> dict:
    state = {"aug": gen.get_state(), "global": torch.get_rng_state()}
    if gen.device.type == "cuda":  # Gumbel noise on the GPU comes from its own global generator
        state["cuda"] = torch.cuda.get_rng_state(gen.device)
    return state


def pretrain(cfg: dict, out_dir: str | Path, *, progress: bool = True) -> Path:
    """Pretrain `cfg` into `out_dir`, resuming from its checkpoint. Returns the path of model.pt."""
    out = Path(out_dir)
    final = out / FINAL
    if cfg["train"]["dynamics_every"] and cfg["method"]["name"] == "cl":
        raise ConfigError("train.dynamics_every: gradient dynamics need z+ and are defined for ncl/topk_ncl/bayesncl")
    if cfg["train"]["threads"]:
        torch.set_num_threads(cfg["train"]["threads"])
    device = resolve_device(cfg)
    train_set = load_split(cfg["data"], "train")
    test_set = load_split(cfg["data"], "test") if cfg["train"]["dynamics_every"] else None
    steps = steps_per_epoch(len(train_set.labels), cfg)
    epochs, bs, seed = cfg["train"]["epochs"], cfg["train"]["batch_size"], cfg["seed"]

    torch.manual_seed(seed)
    model = build_method(cfg).to(device)
    if channels_last(cfg, device):
        model = model.to(memory_format=torch.channels_last)
    opt = build_optimizer(model, cfg)
    state = {"epoch": 0, "step": 0, "log": [], "dynamics": {}, "rng": None, "partial": None}

    ckpt_path = out / CHECKPOINT
    if ckpt_path.exists():
        saved = ckpt_io.load(ckpt_path, map_location="cpu")
        diff = ckpt_io.config_diff(saved["config"], cfg, ignore=RUNTIME_KEYS)
        if diff:
            raise ConfigError(f"{ckpt_path} was written with a different config; remove the folder or restore "
                              "the config. Differences: " + "; ".join(diff))
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["optimizer"])
        state.update({k: saved[k] for k in ("epoch", "step", "log", "dynamics", "rng", "partial")})
    if state["epoch"] >= epochs and final.exists():
        return final

    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / CONFIG, dump_yaml(cfg))
    augment = SimCLRAugment(train_set.crop_size, train_set.mean, train_set.std,
                            crop_scale=(cfg["train"]["crop_min_scale"], 1.0))
    loss_fn = torch.compile(model.training_loss) if cfg["train"]["compile"] else model.training_loss
    stop = {"signal": None}
    previous = signal.signal(signal.SIGTERM, lambda s, f: stop.update(signal=s))

    def save(epoch: int, step: int, rng=None, partial=None):
        ckpt_io.save({"config": cfg, "model": model.state_dict(), "optimizer": opt.state_dict(),
                      "epoch": epoch, "step": step, "log": state["log"], "dynamics": state["dynamics"],
                      "rng": rng, "partial": partial}, ckpt_path)

    bar = tqdm(total=epochs * steps, initial=state["epoch"] * steps + state["step"], disable=not progress,
               desc=f"{cfg['method']['name']} {cfg['data']['dataset']}", unit="step", dynamic_ncols=True,
               mininterval=1.0 if sys.stderr.isatty() else 30.0)
    model.train()
    try:
        for epoch in range(state["epoch"], epochs):
            gen = torch.Generator(device=device)
            gen.manual_seed(epoch_seed(seed, epoch))
            torch.manual_seed(epoch_seed(seed, epoch) + 1)
            start_step, sums = 0, {}
            if state["rng"] is not None:  # resuming a preempted epoch mid-way
                gen.set_state(state["rng"]["aug"])
                torch.set_rng_state(state["rng"]["global"])
                if "cuda" in state["rng"]:
                    torch.cuda.set_rng_state(state["rng"]["cuda"], device)
                start_step = state["step"]
                sums = {k: v if k == "n" else torch.tensor(v, dtype=torch.float64, device=device)
                        for k, v in (state["partial"] or {}).items()}
                state["rng"] = state["partial"] = None
            # Dynamics epochs are never checkpointed mid-way (below), so their stats cover the whole epoch.
            stats = GradientStats(cfg["model"]["proj_dim"]) if dynamics_epoch(cfg, epoch) else None
            t0, n_img = time.perf_counter(), 0
            batches = iter_batches(train_set, bs, shuffle=True, seed=epoch_seed(seed, epoch), drop_last=True,
                                   device=device, num_workers=cfg["data"]["num_workers"], start=start_step)
            for step, (x, _, _) in enumerate(itertools.islice(batches, steps - start_step), start=start_step):
                lr = lr_at(epoch * steps + step, steps, cfg["train"])
                set_lr(opt, lr)
                v1, v2 = augment(x, gen), augment(x, gen)
                if channels_last(cfg, device):
                    v1 = v1.contiguous(memory_format=torch.channels_last)
                    v2 = v2.contiguous(memory_format=torch.channels_last)
                with autocast(device, cfg["train"]["precision"]):
                    loss, parts = loss_fn(v1, v2)
                o = parts.pop("out")
                zp = o.get("zplus")
                if stats is not None:
                    zp.retain_grad()
                opt.zero_grad(set_to_none=True)
                loss.backward()
                if stats is not None:
                    stats.update(zp.detach().float(), zp.grad.float())
                opt.step()
                n_img += x.shape[0]
                # Running sums stay on the device: a per-step .item() would stall the GPU queue every step.
                vals = {"loss": loss, **parts}
                if "gate" in o:
                    vals["open_gates"] = (o["gate"] > 0.5).float().mean()
                for k, v in vals.items():
                    v = v.detach().double()
                    sums[k] = sums[k] + v if k in sums else v
                sums["n"] = sums.get("n", 0) + 1
                bar.update(1)
                last = step + 1 == steps
                preempt = stop["signal"] is not None and not last and stats is None
                if last or preempt or (step + 1) % CHECK_EVERY == 0:
                    mean_loss = sums["loss"].item() / sums["n"]
                    if not math.isfinite(mean_loss):  # before any save: NaN weights are never checkpointed
                        raise TrainingDiverged(
                            f"loss is {mean_loss} in epoch {epoch + 1} (seen by step {step + 1}); stopped. The "
                            f"last good checkpoint is kept at {ckpt_path} (lower train.base_lr or check the data)")
                    bar.set_postfix(epoch=epoch + 1, loss=f"{mean_loss:.4f}", lr=f"{lr:.3g}")
                if preempt:
                    save(epoch, step + 1, _rng_state(gen), {k: float(v) for k, v in sums.items()})
                    raise Preempted(f"SIGTERM: checkpoint saved in {ckpt_path}; rerun the same command to resume")
            seconds = time.perf_counter() - t0
            n = sums.pop("n")
            line = {"epoch": epoch + 1, **{k: float(v) / n for k, v in sums.items()}, "lr": lr,
                    "epoch_seconds": seconds, "img_per_s": n_img / max(seconds, 1e-9), "steps": steps,
                    "peak_mem_mb": peak_memory_mb(device)}
            if stats is not None:
                zp_test, f_test = embed(model, test_set, cfg, device, key=("zplus", "feature"))
                sc = consistency_per_dim(zp_test, test_set.labels, test_set.num_classes)
                # SC of the evaluation feature too (Table 1's, gated for BayesNCL): SC over training
                sc_feature = consistency_per_dim(f_test, test_set.labels, test_set.num_classes)
                r = stats.result()
                state["dynamics"][str(epoch + 1)] = {"af": r["af"].cpu(), "gv": r["gv"].cpu(), "sc": sc.cpu(),
                                                     "sc_feature": sc_feature.cpu()}
            state["log"].append(line)
            save(epoch + 1, 0)
            atomic_write_text(out / LOG, "".join(json.dumps(r) + "\n" for r in state["log"]))
            if stop["signal"] is not None:
                raise Preempted(f"SIGTERM: checkpoint saved in {ckpt_path}; rerun the same command to resume")
    finally:
        signal.signal(signal.SIGTERM, previous)
        bar.close()

    if state["dynamics"]:
        ckpt_io.save(state["dynamics"], out / DYNAMICS)
    ckpt_io.save({"config": cfg, "model": model.state_dict(), "epoch": epochs, "log": state["log"]}, final)
    return final
