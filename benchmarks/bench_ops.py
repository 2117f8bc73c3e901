"""Operators dispatched per training step on CPU, NCL and BayesNCL, before and after the fused step.

    python benchmarks/bench_ops.py            # the demo sizes (config/config.yaml: width 8, 16 px, batch 128)
    python benchmarks/bench_ops.py --tiny     # width 4, batch 16 (the counts do not depend on sizes)

Counts every ATen operator of one training step (augmentation, forward + loss, backward, optimizer, the
logged sums) with a TorchDispatchMode, after a warm-up step, and prints per phase:
- "before": the step as the trainer ran it until the fused step: two augmentation calls; the gating head spelled
  out op by op under autograd (rep_relu as gelu - sg[gelu] + sg[relu], normalize as F.normalize plus a
  dead-row where, the STE as sg[hard - alpha] + alpha, the KL formula, lambda * KL); InfoNCE normalizing its
  input again; timm's Lars (on CPU its per-parameter path); the logged values summed one by one.
- "after": bayesncl.training.step.TrainStep.body in eager mode (the same phases, as the trainer runs them).
"kernels" leaves out the view operators (view, expand, detach, select, ...), which launch no kernel.
BayesNCL's extra = BayesNCL's count - NCL's, per phase and in total. The "after" total is checked against one
whole TrainStep call.
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

try:
    import bayesncl  # noqa: F401
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from bayesncl.model import losses  # noqa: E402
from bayesncl.settings.config import resolve  # noqa: E402
from bayesncl.data import SimCLRAugment  # noqa: E402
from bayesncl.model.methods import build_method  # noqa: E402
from bayesncl.training.optim import build_optimizer, lr_at, peak_lr  # noqa: E402
from bayesncl.training.step import TrainStep  # noqa: E402

DEMO = ["model.width=8", "model.proj_hidden=256", "model.proj_dim=64", "train.batch_size=128",
        "data.synthetic.image_size=16"]
TINY = ["model.width=4", "model.proj_hidden=32", "model.proj_dim=16", "train.batch_size=16",
        "data.synthetic.image_size=16"]
PHASES = ("augment", "forward", "backward", "optimizer", "sums")
VIEWS = {"view", "_unsafe_view", "expand", "detach", "select", "slice", "unsqueeze", "squeeze", "t", "transpose",
         "permute", "as_strided", "alias", "reshape", "unbind", "split", "chunk", "narrow", "split_with_sizes",
         "lift_fresh", "_reshape_alias"}


class OpCounter(TorchDispatchMode):
    """Counts ATen operator calls under a phase label."""

    def __init__(self):
        super().__init__()
        self.phase = None
        self.ops: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[self.phase][func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))

    def counts(self) -> dict[str, tuple[int, int]]:
        out = {}
        for phase in PHASES:
            c = self.ops.get(phase, collections.Counter())
            out[phase] = (sum(c.values()), sum(v for k, v in c.items() if k not in VIEWS))
        out["total"] = tuple(sum(out[p][i] for p in PHASES) for i in (0, 1))
        return out


# ---------------------------------------------------------------- "before": the step as it was


def old_rep_relu(z):
    g = F.gelu(z)
    return g - g.detach() + F.relu(z).detach()


def old_normalize(x, eps=1e-12):
    y = F.normalize(x, dim=1, eps=eps)
    dead = torch.linalg.vector_norm(x.detach(), dim=1, keepdim=True) <= eps
    return torch.where(dead, y.detach(), y)


def old_ste(alpha):
    hard = (alpha > 0.5).to(alpha.dtype)
    return (hard - alpha).detach() + alpha


def old_kl(alpha, rho):
    a = alpha.float().clamp(*losses.KL_CLAMP)
    r = min(max(float(rho), losses.KL_CLAMP[0]), losses.KL_CLAMP[1])
    kl = a * torch.log(a / r) + (1 - a) * torch.log((1 - a) / (1 - r))
    return kl.sum(dim=1).mean()


def old_info_nce(f1, f2, temperature):
    n = f1.shape[0]
    f = F.normalize(torch.cat([f1, f2], dim=0).float(), dim=1)
    logits = f @ f.t() / temperature
    logits = logits.masked_fill(torch.eye(2 * n, dtype=torch.bool, device=f.device), float("-inf"))
    targets = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)]).to(f.device)
    return F.cross_entropy(logits, targets)


def old_loss(model, x1, x2):
    """Method.training_loss and BayesNCL.head as they were (STE gate, the demo's rep_relu)."""
    n = x1.shape[0]
    h = model.backbone(torch.cat([x1, x2]))
    z = model.projector(h)
    zp = old_rep_relu(z)
    out = {"zplus": zp}
    if model.name == "bayesncl":
        logits = model.gate_head(h.detach()).float()
        alpha = torch.sigmoid(logits / model.tau)
        m = old_ste(alpha)
        out.update(gate=m, alpha=alpha, feature=old_normalize(old_normalize(zp.float()) * m))
        parts = {"infonce": old_info_nce(out["feature"][:n], out["feature"][n:], model.temperature),
                 "kl": model.lam * old_kl(alpha, model.rho)}
    else:
        out["feature"] = old_normalize(zp.float())
        parts = {"infonce": old_info_nce(out["feature"][:n], out["feature"][n:], model.temperature)}
    return sum(parts.values()), parts, out


def timm_optimizer(model, cfg):
    from timm.optim import Lars

    t = cfg["train"]
    groups = []
    peaks = {"main": peak_lr(t), "gate_head": cfg["method"]["head_lr"]}
    for name, params in model.param_groups().items():
        for ps, wd in (([p for p in params if p.ndim > 1], t["weight_decay"]), ([p for p in params if p.ndim <= 1], 0)):
            if ps:
                groups.append({"params": ps, "weight_decay": wd, "peak_lr": peaks[name]})
    return Lars(groups, lr=0.1, momentum=t["momentum"], trust_coeff=t["trust_coeff"], trust_clip=True)


def set_group_lrs(opt, i: int, train_cfg: dict) -> None:
    """The trainer's per-step lr as it was: host floats into every group (each on its own schedule)."""
    for g in opt.param_groups:
        g["lr"] = lr_at(i, 10, train_cfg, g["peak_lr"])


def count_before(cfg, x, counter: OpCounter, reps: int = 2) -> None:
    torch.manual_seed(0)
    model = build_method(cfg).train()
    opt = timm_optimizer(model, cfg)
    aug = SimCLRAugment(x.shape[-1], (0.5,) * 3, (0.25,) * 3)
    gen = torch.Generator().manual_seed(0)
    sums: dict = {}
    for i in range(reps):  # the last repetition is counted
        c = counter if i == reps - 1 else None

        def phase(name):
            if c is not None:
                c.phase = name

        with counter if c is not None else _null():
            phase("augment")
            v1, v2 = aug(x, gen), aug(x, gen)
            phase("forward")
            loss, parts, out = old_loss(model, v1, v2)
            phase("backward")
            opt.zero_grad(set_to_none=True)
            loss.backward()
            phase("optimizer")
            set_group_lrs(opt, i, cfg["train"])
            opt.step()
            phase("sums")
            vals = {"loss": loss, **parts}
            if "gate" in out:
                vals["open_gates"] = (out["gate"] > 0.5).float().mean()
            for k, v in vals.items():
                v = v.detach().double()
                sums[k] = sums[k] + v if k in sums else v


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


# ---------------------------------------------------------------- "after": TrainStep


def make_step(cfg, size: int) -> TrainStep:
    torch.manual_seed(0)
    model = build_method(cfg).train()
    aug = SimCLRAugment(size, (0.5,) * 3, (0.25,) * 3)
    step = TrainStep(model, build_optimizer(model, cfg), aug, cfg, torch.device("cpu"), 10)
    step.start(0)
    return step


def count_after(cfg, x, counter: OpCounter) -> None:
    """TrainStep.body's phases, called one by one."""
    step = make_step(cfg, x.shape[-1])
    gen = torch.Generator().manual_seed(0)
    step(x, gen)  # warm-up
    with counter:
        counter.phase = "augment"
        views, gate_u = step.draws(x.shape[0], gen)
        lr, v = step.inputs(x, views)
        counter.phase = "forward"
        loss, parts, out = step.forward(v, gate_u)
        counter.phase = "backward"
        grads = step.backward(loss, [])
        counter.phase = "optimizer"
        step.update(grads, lr)
        counter.phase = "sums"
        step.log(loss, parts, out)


def count_whole_step(cfg, x) -> int:
    step = make_step(cfg, x.shape[-1])
    gen = torch.Generator().manual_seed(0)
    step(x, gen)
    counter = OpCounter()
    with counter:
        step(x, gen)
    return sum(sum(c.values()) for c in counter.ops.values())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tiny", action="store_true", help="a tiny model (same counts, faster)")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    base = TINY if args.tiny else DEMO
    rows = {}
    for method in ("ncl", "bayesncl"):
        cfg = resolve(sets=base + [f"method.name={method}", "method.nonneg=rep_relu", "method.gate=ste"])
        size, bs = cfg["data"]["synthetic"]["image_size"], cfg["train"]["batch_size"]
        x = torch.randint(0, 256, (bs, 3, size, size), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
        before, after = OpCounter(), OpCounter()
        count_before(cfg, x, before)
        count_after(cfg, x, after)
        rows[method] = {"before": before.counts(), "after": after.counts()}
        whole = count_whole_step(cfg, x)
        if whole != rows[method]["after"]["total"][0]:
            print(f"warning: {method}: TrainStep dispatched {whole} ops, its phases {rows[method]['after']['total'][0]}")
    print(f"ATen operators per training step on CPU ({'tiny' if args.tiny else 'demo'} sizes), all / kernels "
          "(kernels: without view ops)\n")
    print(f"{'phase':10s} | {'NCL before':>12s} {'NCL after':>12s} | {'BayesNCL before':>16s} {'BayesNCL after':>15s} | "
          f"{'extra before':>13s} {'extra after':>12s}")
    for phase in (*PHASES, "total"):
        n, b = rows["ncl"], rows["bayesncl"]

        def f(r, when):
            return "%d / %d" % r[when][phase]

        def extra(when):
            return "%+d / %+d" % tuple(b[when][phase][i] - n[when][phase][i] for i in (0, 1))

        print(f"{phase:10s} | {f(n, 'before'):>12s} {f(n, 'after'):>12s} | {f(b, 'before'):>16s} {f(b, 'after'):>15s} | "
              f"{extra('before'):>13s} {extra('after'):>12s}")
    e0 = rows["bayesncl"]["before"]["total"][1] - rows["ncl"]["before"]["total"][1]
    e1 = rows["bayesncl"]["after"]["total"][1] - rows["ncl"]["after"]["total"][1]
    print(f"\nBayesNCL's extra kernel ops per step: {e0} before, {e1} after")
    return 0


if __name__ == "__main__":
    sys.exit(main())
