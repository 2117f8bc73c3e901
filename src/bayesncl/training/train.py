"""Resumable pretraining (docs/METHOD.md section 2).

Determinism: the data order and the step's generator (augmentation and Gumbel draws) are re-seeded from
(seed, epoch) at every epoch start, so resuming from an epoch checkpoint replays exactly what an
uninterrupted run does. A SIGTERM (SLURM time limit or preemption) saves a mid-epoch checkpoint with the
generator states, the running sums and the epoch's seconds so far, and raises Preempted (the CLI exits with
REQUEUE_EXIT); the rerun continues from that step.

Timing: `epoch_seconds` in log.jsonl is training time only. With `train.graph` compile or cudagraph, the
step is compiled or captured before the first timed step of each process (`TrainStep.warm_up`); that time
is logged apart, as `compile_seconds` of the epoch in which it happened.

The step (`TrainStep`, bayesncl.training.step) is a function of device tensors only, so `train.graph` can run it
eagerly, compile it whole or capture it in a CUDA graph.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import signal
import sys
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ..runs import files
from ..core.atomic import atomic_write_text
from ..settings.config import RUNTIME_KEYS
from ..core.errors import ConfigError
from ..data import SimCLRAugment, iter_batches, load_split
from ..measures.dynamics import GradientStats
from ..runs.events import TrainingEvents
from ..measures.arrays import consistency_per_dim
from ..core.startup import mark_ready
from ..model.methods import Method, build_method
from ..settings.registry import METHODS
from .optim import build_optimizer, lr_at
from ..runs.files import CHECKPOINT, DYNAMICS, FINAL, LOG, record_config
from .device import channels_last, peak_memory_mb, reset_peak_memory, resolve_device, set_deterministic
from .embed import embed
from .step import TrainStep, check_graph

CHECK_EVERY = 50  # steps between finiteness checks (read one check late, so they never stall the device queue)
_clock = time.perf_counter  # what epoch_seconds is measured with (tests inject their own)


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite; the last good checkpoint is kept (the CLI exits 1)."""


class Preempted(Exception):
    """SIGTERM arrived; a checkpoint to resume from is saved (the CLI exits REQUEUE_EXIT)."""


def host_contact(where: str) -> contextlib.AbstractContextManager:
    """Marks where the training loop meets the host by design: an epoch's start (seeding, the epoch's order copied
    over), the lagged check's read, an epoch's end (its sums, the log, a checkpoint), a preemption, the run's end.
    Does nothing; tests/test_fake_cuda.py permits exactly these regions and refuses a host sync anywhere else."""
    return contextlib.nullcontext(where)


def epoch_seed(seed: int, epoch: int) -> int:
    return seed * 1_000_003 + epoch


def training_augment(train_set, cfg: dict) -> SimCLRAugment:
    """The two-view augmentation a run trains with (its split's crop size and normalisation)."""
    return SimCLRAugment(train_set.crop_size, train_set.mean, train_set.std,
                         crop_scale=(cfg["train"]["crop_min_scale"], 1.0))


def start_epoch(train_set, cfg: dict, epoch: int, gen: torch.Generator, device, start: int = 0):
    """Seed epoch `epoch`'s draws (the augmentation generator `gen`, the global generator) and return its
    batches from step `start`: every epoch of a run, resumed or replayed, draws the same."""
    seed = epoch_seed(cfg["seed"], epoch)
    gen.manual_seed(seed)
    torch.manual_seed(seed + 1)
    return iter_batches(train_set, cfg["train"]["batch_size"], shuffle=True, seed=seed, drop_last=True,
                        device=device, num_workers=cfg["data"]["num_workers"], start=start)


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
    # "aug": the step's generator (on CUDA too), the only one a step draws from (tests/test_fake_cuda.py refuses
    # a draw from a default generator); "cuda" is the default CUDA generator, kept for what runs outside steps.
    state = {"aug": gen.get_state(), "global": torch.get_rng_state()}
    if gen.device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(gen.device)
    return state


class _LaggedCheck:
    """The running mean loss, read one check late: the copy of check k is started at check k and read at
    check k + 1, by when the device has long finished it (no stall of its queue)."""

    def __init__(self, device: torch.device):
        self.device = device
        self.pending = None

    def push(self, sums: torch.Tensor, steps: int, at_step: int) -> None:
        """Start reading sums[0] / steps (asynchronously on CUDA); `pop` returns it at the next check."""
        if self.device.type == "cuda":
            host = torch.empty((), dtype=sums.dtype, pin_memory=True)
            host.copy_(sums[0], non_blocking=True)
            event = torch.cuda.Event()
            event.record()
            self.pending = (host, event, steps, at_step)
        else:
            self.pending = (sums[0].clone(), None, steps, at_step)

    def pop(self) -> tuple[float, int] | None:
        """The reading started at the previous check (mean loss, its step), if any."""
        if self.pending is None:
            return None
        host, event, steps, at_step = self.pending
        self.pending = None
        if event is not None:
            event.synchronize()
        return float(host) / steps, at_step


def dynamics_record(model: Method, test_set, cfg: dict, device: torch.device, stats: GradientStats) -> dict:
    """A dynamics epoch's record: AF and GV over its steps, SC of z+ and of the evaluation feature (Table 1's,
    gated for BayesNCL) on the test split."""
    zp_test, f_test = embed(model, test_set, cfg, device, key=("zplus", "feature"))
    sc = consistency_per_dim(zp_test.numpy(), test_set.labels, test_set.num_classes)
    sc_feature = consistency_per_dim(f_test.numpy(), test_set.labels, test_set.num_classes)
    r = stats.result()
    return {"af": r["af"].cpu(), "gv": r["gv"].cpu(), "sc": torch.from_numpy(sc),
            "sc_feature": torch.from_numpy(sc_feature)}


def pretrain(cfg: dict, out_dir: str | Path, *, progress: bool = True, replace: bool = False) -> Path:
    """Pretrain `cfg` into `out_dir`, resuming from its checkpoint. Returns the path of model.pt. A folder holding
    another run is refused, or with `replace` replaced whole once this run is trained (bayesncl.runs.ownership)."""
    from ..runs.ownership import into, other_run

    out = Path(out_dir)
    with into(out, other_run(out, cfg), replace, stage=f".{out.name}.replacing",
              stage_other=lambda folder: other_run(folder, cfg)) as where:
        _pretrain(cfg, where, progress)  # a preempted replacement resumes in its stage folder when rerun
    return out / FINAL


def _pretrain(cfg: dict, out_dir: str | Path, progress: bool) -> Path:
    out = Path(out_dir)
    final = out / FINAL
    if cfg["train"]["dynamics_every"] and not METHODS[cfg["method"]["name"]].nonnegative:
        raise ConfigError("train.dynamics_every: gradient dynamics need z+ and are defined for "
                          + "/".join(METHODS.names(lambda s: s.nonnegative)))
    if cfg["train"]["threads"]:
        torch.set_num_threads(cfg["train"]["threads"])
    device = resolve_device(cfg)
    check_graph(cfg, device)  # before the data is cached or the run folder written
    reset_peak_memory(device)  # this run's peak (a process may run several, e.g. a resume or the GPU check)
    train_set = load_split(cfg["data"], "train")
    test_set = load_split(cfg["data"], "test") if cfg["train"]["dynamics_every"] else None
    steps = steps_per_epoch(len(train_set.labels), cfg)
    epochs, bs, seed = cfg["train"]["epochs"], cfg["train"]["batch_size"], cfg["seed"]

    torch.manual_seed(seed)
    model = build_method(cfg).to(device)
    if channels_last(cfg, device):
        model = model.to(memory_format=torch.channels_last)
    opt = build_optimizer(model, cfg)
    state = {"epoch": 0, "step": 0, "log": [], "dynamics": {}, "rng": None, "partial": None, "scaler": None}

    ckpt_path = out / CHECKPOINT
    if ckpt_path.exists():
        saved = files.load(ckpt_path, map_location="cpu")
        diff = files.config_diff(saved["config"], cfg, ignore=RUNTIME_KEYS)
        if diff:
            raise ConfigError(f"{ckpt_path} was written with a different config; remove the folder or restore "
                              "the config. Differences: " + "; ".join(diff))
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["optimizer"])
        state.update({k: saved[k] for k in ("epoch", "step", "log", "dynamics", "rng", "partial", "scaler")})
    if state["epoch"] >= epochs and final.exists():
        return final

    out.mkdir(parents=True, exist_ok=True)
    record_config(out, cfg)  # config.resolved.yaml, and the plugin code the run uses
    train_step = TrainStep(model, opt, training_augment(train_set, cfg), cfg, device, steps)
    if state["scaler"] is not None:
        train_step.scaler.load_state_dict(state["scaler"])
    names = train_step.names
    # TensorBoard's view of the log: brought to the checkpoint's, then appended at each epoch's end
    events = TrainingEvents(out, state["log"], state["dynamics"])
    stop = {"signal": None}
    previous = signal.signal(signal.SIGTERM, lambda s, f: stop.update(signal=s))

    def save(epoch: int, step: int, rng=None, partial=None):
        files.save({"config": cfg, "model": model.state_dict(), "optimizer": opt.state_dict(),
                    "epoch": epoch, "step": step, "log": state["log"], "dynamics": state["dynamics"],
                    "rng": rng, "partial": partial,
                    "scaler": train_step.scaler.state_dict() if train_step.scaler else None}, ckpt_path)

    def finite(mean_loss: float, epoch: int, step: int) -> None:
        if not math.isfinite(mean_loss):  # before any save: NaN weights are never checkpointed
            raise TrainingDiverged(
                f"loss is {mean_loss} in epoch {epoch + 1} (seen by step {step}); stopped. The last good "
                f"checkpoint is kept at {ckpt_path} (lower train.base_lr or check the data)")

    bar = tqdm(total=epochs * steps, initial=state["epoch"] * steps + state["step"], disable=not progress,
               desc=f"{cfg['method']['name']} {cfg['data']['dataset']}", unit="step", dynamic_ncols=True,
               mininterval=1.0 if sys.stderr.isatty() else 30.0)
    model.train()
    mark_ready()  # imports, data, model and checkpoint loaded: the work begins (bayesncl.core.startup)
    # One generator for the whole run, re-seeded each epoch (a CUDA graph keeps the generator it captured).
    gen = torch.Generator(device=device)
    deterministic_off = set_deterministic(cfg["train"]["deterministic"])  # put back when the loop ends
    try:
        for epoch in range(state["epoch"], epochs):
            start_step = state["step"] if state["rng"] is not None else 0
            with host_contact("epoch start"):
                batches = start_epoch(train_set, cfg, epoch, gen, device, start=start_step)
                sums0, carried, compile_s = None, 0.0, 0.0
                if state["rng"] is not None:  # resuming a preempted epoch mid-way: its draws go on where they stopped
                    gen.set_state(state["rng"]["aug"])
                    torch.set_rng_state(state["rng"]["global"])
                    if "cuda" in state["rng"]:
                        torch.cuda.set_rng_state(state["rng"]["cuda"], device)
                    sums0, carried = state["partial"]["sums"], state["partial"]["seconds"]
                    compile_s = state["partial"].get("compile_seconds", 0.0)
                    state["rng"] = state["partial"] = None
                train_step.start(epoch * steps + start_step, sums0)
            # Dynamics epochs are never checkpointed mid-way (below), so their stats cover the whole epoch.
            stats = GradientStats(cfg["model"]["proj_dim"]) if dynamics_epoch(cfg, epoch) else None
            # The epoch's seconds include those spent in it before a preemption.
            t0 = _clock() - carried
            check = _LaggedCheck(device)
            for step, (x, _, _) in enumerate(itertools.islice(batches, steps - start_step), start=start_step):
                if not train_step.warm and stats is None:  # compile / capture: timed apart, not training time
                    c0 = _clock()
                    with host_contact("compile"):
                        train_step.warm_up(x, gen)
                    spent = _clock() - c0
                    compile_s += spent
                    t0 += spent
                r = train_step(x, gen, want_zplus=stats is not None)
                if stats is not None:
                    stats.update(*r)
                bar.update(1)
                last = step + 1 == steps
                preempt = stop["signal"] is not None and not last and stats is None
                if preempt:
                    with host_contact("preemption"):
                        sums = train_step.read_epoch()[0]
                        finite(sums[0] / (step + 1), epoch, step + 1)
                        save(epoch, step + 1, _rng_state(gen), {"sums": sums, "seconds": _clock() - t0,
                                                                 "compile_seconds": compile_s})
                    raise Preempted(f"SIGTERM: checkpoint saved in {ckpt_path}; rerun the same command to resume")
                if not last and (step + 1) % CHECK_EVERY == 0:
                    with host_contact("lagged check"):  # the copy started a check ago: long finished
                        seen = check.pop()
                    check.push(train_step.sums, step + 1, step + 1)  # an asynchronous copy: no wait
                    if seen is not None:
                        finite(seen[0], epoch, seen[1])
                        bar.set_postfix(epoch=epoch + 1, loss=f"{seen[0]:.4f}")
            with host_contact("epoch end"):
                sums, scale = train_step.read_epoch()  # waits for the device: then the clock
                finite(sums[0] / steps, epoch, steps)
                seconds = _clock() - t0
                lr = lr_at(epoch * steps + steps - 1, steps, cfg["train"])
                bar.set_postfix(epoch=epoch + 1, loss=f"{sums[0] / steps:.4f}", lr=f"{lr:.3g}")
                line = {"epoch": epoch + 1, **{k: v / steps for k, v in zip(names, sums)}, "lr": lr,
                        "epoch_seconds": seconds, "img_per_s": steps * bs / max(seconds, 1e-9), "steps": steps,
                        "peak_mem_mb": peak_memory_mb(device)}
                if scale is not None:  # the scale at the epoch's end ("skipped": the share of its steps skipped)
                    line["loss_scale"] = scale
                if train_step.mode != "eager":  # compile and graph-capture time: not in epoch_seconds
                    line["compile_seconds"] = compile_s
                if stats is not None:
                    state["dynamics"][str(epoch + 1)] = dynamics_record(model, test_set, cfg, device, stats)
                state["log"].append(line)
                save(epoch + 1, 0)
                atomic_write_text(out / LOG, "".join(json.dumps(r) + "\n" for r in state["log"]))
                events.epoch(line)  # after the checkpoint: never an epoch the log does not hold
            if stop["signal"] is not None:
                raise Preempted(f"SIGTERM: checkpoint saved in {ckpt_path}; rerun the same command to resume")
    finally:
        signal.signal(signal.SIGTERM, previous)
        deterministic_off()
        bar.close()
        events.close()

    with host_contact("run end"):
        if state["dynamics"]:
            files.save(state["dynamics"], out / DYNAMICS)
        if not epochs:  # the random-init reference: its (empty) log, which evaluation reads like any run's
            atomic_write_text(out / LOG, "")
        files.save({"config": cfg, "model": model.state_dict(), "epoch": epochs, "log": state["log"]}, final)
    return final
