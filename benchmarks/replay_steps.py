"""Replay a run step by step and print what each step did: how a collapse starts (docs/METHOD.md section 10).

    PYTHONPATH=src python benchmarks/replay_steps.py RUN/config.resolved.yaml --from-epoch 161 --epochs 2
    PYTHONPATH=src python benchmarks/replay_steps.py RUN/config.resolved.yaml --from-epoch 161 --epochs 95 \\
        --skip 162:4 --spikes 1.0

The run's config is trained as `bayesncl pretrain` trains it (same seeds, draws and order, so the replay is
bit-identical on the machine that ran it) up to `--from-epoch`, then each step of the next `--epochs` epochs
prints: its InfoNCE, the smallest norm over the step's views of the feature before its last normalisation
(z+ * m for BayesNCL, z+ otherwise; the gradient of normalize(v) grows as 1 / |v|), the norm of dL/dz+ and its
largest entry (an fp16 loss scaler at scale S overflows once S times it passes 65,504), and
the parameter tensor that moved most relative to its own norm. `--spikes G` prints only the steps with
|dL/dz+| >= G (and one line per epoch); `--skip E:S` leaves the weights and optimizer state as they were in
step S (0-based) of epoch E (1-based), the draws still made, to test whether that step alone caused what
followed.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def replay(config: str, from_epoch: int, epochs: int, skip: set[tuple[int, int]] = frozenset(),
           spikes: float | None = None, out=print, fp16: bool = False) -> list[dict]:
    """Train `config` to `from_epoch`, then replay `epochs` epochs step by step; returns one dict per replayed
    step (epoch 1-based, step 0-based, infonce, min_norm, grad_norm, grad_max, moved, moved_by, skipped)."""
    import torch

    from bayesncl.settings.config import resolve
    from bayesncl.data import load_split
    from bayesncl.model.methods import build_method
    from bayesncl.training.optim import build_optimizer
    from bayesncl.training.device import resolve_device
    from bayesncl.training.step import TrainStep
    from bayesncl.training.train import start_epoch, steps_per_epoch, training_augment

    from bayesncl.core.errors import ConfigError

    cfg = resolve(file=config, recorded=True)  # a run's record: a key it lacks is what that run did
    total = cfg["train"]["epochs"]
    # Past the run's last epoch there is no learning rate (an IndexError deep in the step); 0 epochs does nothing.
    if from_epoch < 0 or epochs < 1 or from_epoch + epochs > total:
        raise ConfigError(f"--from-epoch {from_epoch} --epochs {epochs}: {config} trains {total} epochs; give "
                          f"--from-epoch 0 to {max(total - 1, 0)} and --epochs 1 to {total} - --from-epoch")
    outside = sorted((e, s) for e, s in skip if not from_epoch < e <= from_epoch + epochs)
    if outside:
        e, s = outside[0]
        raise ConfigError(f"--skip {e}:{s}: epoch {e} is not replayed (epochs {from_epoch + 1} to "
                          f"{from_epoch + epochs}); skip a step of a replayed epoch")
    if cfg["train"]["threads"]:
        torch.set_num_threads(cfg["train"]["threads"])
    device = resolve_device(cfg)
    train_set = load_split(cfg["data"], "train")
    steps, seed = steps_per_epoch(len(train_set.labels), cfg), cfg["seed"]
    for e, s in sorted(skip):
        if not 0 <= s < steps:
            raise ConfigError(f"--skip {e}:{s}: an epoch has steps 0 to {steps - 1}; skip one of them")
    torch.manual_seed(seed)
    model = build_method(cfg).to(device)
    opt = build_optimizer(model, cfg)
    train_step = TrainStep(model, opt, training_augment(train_set, cfg), cfg, device, steps)
    names = [n for n, _ in model.named_parameters()]
    gen = torch.Generator(device=device)
    model.train()
    records = []
    for epoch in range(from_epoch + epochs):
        batches = start_epoch(train_set, cfg, epoch, gen, device)
        train_step.start(epoch * steps)
        for step, (x, _, _) in enumerate(itertools.islice(batches, steps)):
            if epoch < from_epoch:
                train_step(x, gen)
                continue
            r = {"epoch": epoch + 1, "step": step,
                 **_diagnosed_step(model, opt, train_step, x, gen, names, (epoch + 1, step) in skip, fp16)}
            records.append(r)
            if spikes is None or r["grad_norm"] >= spikes or r["skipped"] or r["overflow"]:
                tag = " (skipped)" if r["skipped"] else " (loss scaler overflow, skipped)" if r["overflow"] else ""
                out(f"epoch {r['epoch']} step {r['step']}{tag}: InfoNCE "
                    f"{r['infonce']:.4f}, min |v| {r['min_norm']:.3g}, |dL/dz+| {r['grad_norm']:.3g} "
                    f"(largest entry {r['grad_max']:.3g}), "
                    f"largest move {r['moved']} x{r['moved_by']:.3g}"
                    + (f"; finite up to loss scale 2^{r['emulated_log2_scale']:.1f} (its fp16 forward: 2^"
                       f"{r['fp16_log2_scale']:.0f})" if fp16 else ""))
        if epoch >= from_epoch:
            out(f"epoch {epoch + 1}: InfoNCE {train_step.read_epoch()[0][1] / steps:.4f}")
    return records


def fp16_headroom(model, train_step, x, views, gate_u) -> tuple[float, float]:
    """log2 of the largest loss scale at which this step's gradients stay finite when its forward runs under
    fp16 autocast (the released precision), searched over powers of 2 from 2^0 to 2^30; and log2 of 65,504 /
    the largest gradient entry of any parameter in the step as trained (what `train.loss_scaler: fp16`
    checks under fp32). The two differ where the fp16 forward changes the step itself (a feature near zero).
    The step's BatchNorm statistics are put back."""
    import math

    import torch

    from bayesncl.training.loss_scaler import FP16_MAX
    from bayesncl.training.step import snapshot

    put_back = snapshot(list(model.buffers()))
    params = list(model.parameters())
    v = train_step.augment.views(x, views)
    loss, _ = model.views_loss(v, gate_u)
    grads = torch.autograd.grad(loss, params)
    emulated = math.log2(FP16_MAX / max(float(g.abs().max()) for g in grads))
    put_back()
    with torch.autocast(x.device.type, dtype=torch.float16):
        loss, _ = model.views_loss(v, gate_u)

    def finite(k: int) -> bool:
        scaled = torch.autograd.grad(loss.float() * 2.0 ** k, params, retain_graph=True)
        return all(bool(torch.isfinite(g).all()) for g in scaled)

    lo, hi = -1, 31  # finite at lo (2^-1 never overflows here), not finite at hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if finite(mid) else (lo, mid)
    put_back()
    return float(lo), emulated


def _diagnosed_step(model, opt, train_step, x, gen, names, skip: bool, fp16: bool = False) -> dict:
    import torch

    from bayesncl.training.step import snapshot

    views, gate_u = train_step.draws(x.shape[0], gen)
    headroom = fp16_headroom(model, train_step, x, views, gate_u) if fp16 else None
    params = list(model.parameters())
    saved = [p.detach().clone() for p in params]
    undo_step = snapshot([*params, *model.buffers(), *opt.state_tensors()]) if skip else None
    put_back_statistics = snapshot(list(model.buffers()))
    with torch.no_grad():  # the step's own views
        out = model(train_step.augment.views(x, views), gate_u, views=2)
        v = out["zplus"].float() * (out["gate"].float() if "gate" in out else 1.0)
        min_norm = float(v.norm(dim=1).min())
    put_back_statistics()
    before = train_step.read_epoch()[0][1]
    _, grad = train_step.body(x, views, gate_u, want_zplus=True)
    moved = [float((p.detach() - s).norm() / s.norm().clamp_min(1e-12)) for p, s in zip(model.parameters(), saved)]
    i = max(range(len(moved)), key=moved.__getitem__)
    record = {"infonce": train_step.read_epoch()[0][1] - before, "min_norm": min_norm, "grad_norm": float(grad.norm()),
              "grad_max": float(grad.abs().max()),
              "moved": names[i], "moved_by": moved[i], "skipped": skip,
              "overflow": bool(train_step.scaler.found[0]) if train_step.scaler else False}
    if headroom:
        record["fp16_log2_scale"], record["emulated_log2_scale"] = headroom
    if undo_step:
        undo_step()
    return record


def main(argv: list[str] | None = None) -> int:
    """0: replayed; 2: an input it cannot use (one line on stderr)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("config", help="the run's config.resolved.yaml")
    p.add_argument("--from-epoch", type=int, default=0, help="epochs trained before the replay starts")
    p.add_argument("--epochs", type=int, default=1, help="epochs replayed step by step")
    p.add_argument("--skip", nargs="*", default=[], metavar="E:S", help="leave step S of epoch E out")
    p.add_argument("--fp16", action="store_true",
                   help="also the largest fp16 loss scale each step stands (slow on CPU: about 30 s a step)")
    p.add_argument("--spikes", type=float, default=None, metavar="G", help="print only steps with |dL/dz+| >= G")
    a = p.parse_args(argv)
    try:
        skip = {tuple(int(v) for v in s.split(":")) for s in a.skip}
        if any(len(s) != 2 for s in skip):
            raise ValueError
    except ValueError:
        p.error("--skip: EPOCH:STEP, e.g. 162:4")
    from bayesncl.core.errors import BayesNCLError

    try:
        replay(a.config, a.from_epoch, a.epochs, skip, a.spikes, fp16=a.fp16)
    except BayesNCLError as exc:  # a bad config or range: one line, not a traceback
        print(f"replay_steps.py: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
