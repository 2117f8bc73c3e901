"""Training throughput (images/s) and BayesNCL's overhead over NCL.

    python benchmarks/bench_train.py                      # CPU: the demo model (config/config.yaml)
    python benchmarks/bench_train.py --preset cifar       # ResNet-18 CIFAR, batch 256 (use a GPU)

Times the real training step (on-device augmentation of two views, forward, InfoNCE (+ KL), backward,
LARS step) on random uint8 images held on the device, after a warm-up. Target: BayesNCL costs at most 3%
more time per step than NCL (the paper measured 5.9%).
"""

from __future__ import annotations

import argparse
import time

import torch
import yaml

from bayesncl.config import resolve
from bayesncl.data import SimCLRAugment
from bayesncl.methods import build_method
from bayesncl.optim import build_optimizer
from bayesncl.runtime import autocast, channels_last

PRESETS = {
    "cifar": ["model.width=64", "model.proj_hidden=2048", "model.proj_dim=256", "train.batch_size=256"],
}


def demo_sets() -> list[str]:
    with open("config/config.yaml") as fh:
        d = yaml.safe_load(fh)["defaults"]
    flat = []
    for section in ("model", "train"):
        flat += [f"{section}.{k}={v}" for k, v in d[section].items() if k not in ("device", "threads")]
    return flat


def bench(method: str, sets: list[str], size: int, device: torch.device, steps: int, warmup: int) -> float:
    cfg = resolve(sets=sets + [f"method.name={method}"])
    bs = cfg["train"]["batch_size"]
    torch.manual_seed(0)
    model = build_method(cfg).to(device)
    if channels_last(cfg, device):
        model = model.to(memory_format=torch.channels_last)
    opt = build_optimizer(model, cfg)
    aug = SimCLRAugment(size, (0.5,) * 3, (0.25,) * 3, crop_scale=(cfg["train"]["crop_min_scale"], 1.0))
    x = torch.randint(0, 256, (bs, 3, size, size), dtype=torch.uint8, device=device)
    gen = torch.Generator(device=device).manual_seed(0)

    def step():
        v1, v2 = aug(x, gen), aug(x, gen)
        if channels_last(cfg, device):
            v1, v2 = (v.contiguous(memory_format=torch.channels_last) for v in (v1, v2))
        with autocast(device, cfg["train"]["precision"]):
            loss, _ = model.training_loss(v1, v2)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for _ in range(warmup):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return steps * bs / (time.perf_counter() - t0)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", choices=["demo", "cifar"], default="demo")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    sets = demo_sets() if args.preset == "demo" else PRESETS[args.preset]
    with open("config/config.yaml") as fh:
        size = yaml.safe_load(fh)["defaults"]["data"]["synthetic"]["image_size"] if args.preset == "demo" else 32
    steps = args.steps or (50 if device.type == "cuda" else 5)
    print(f"device {device}, preset {args.preset}, {steps} timed steps after {args.warmup} warm-up")
    rates = {}
    for method in ("ncl", "bayesncl"):
        rates[method] = bench(method, sets, size, device, steps, args.warmup)
        print(f"{method:9s} {rates[method]:10.1f} images/s")
    overhead = 100 * (rates["ncl"] / rates["bayesncl"] - 1)
    print(f"BayesNCL time overhead over NCL: {overhead:+.2f}% (target <= 3%)")


if __name__ == "__main__":
    main()
