"""Linear probe on cached frozen features: the "fast" protocol of docs/METHOD.md section 5.

No augmentation: features are extracted once (eval mode), standardised with the training split's
mean and std, and one Linear(F, C) is trained with AdamW on minibatches, cosine-decayed lr. Softmax
regression is convex, so the layer starts at zero (no init randomness); the seed only drives the
minibatch order, which makes a run exactly repeatable on a given device. Numbers from this mode must
be labelled protocol="fast". The paper protocol (augmented crops, LARS/SGD) is built on top of
train_linear / topk_accuracy elsewhere.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

__all__ = ["topk_accuracy", "standardize", "train_linear", "predict_logits", "linear_probe_fast", "linear_probe_paper"]


def topk_accuracy(logits: Tensor, y: Tensor, ks=(1, 5)) -> dict:
    """{"top1": %, "top5": %}: percentage of rows whose label is among the k highest logits.
    k is capped at the number of classes (top-5 with 3 classes is top-3, i.e. 100%)."""
    y = torch.as_tensor(y, device=logits.device).long().reshape(-1)
    if logits.shape[0] == 0:
        return {f"top{k}": math.nan for k in ks}
    kmax = min(max(ks), logits.shape[1])
    pred = logits.topk(kmax, dim=1).indices
    hit = pred == y[:, None]
    return {f"top{k}": 100.0 * float(hit[:, : min(k, kmax)].any(1).double().mean()) for k in ks}


def standardize(train_x: Tensor, *others: Tensor, eps: float = 1e-6) -> tuple[Tensor, ...]:
    """Z-score every tensor with the per-feature mean and std of train_x (constant features -> 0)."""
    train_x = train_x.float()
    mean = train_x.mean(0, keepdim=True)
    std = train_x.std(0, unbiased=False, keepdim=True).clamp_min(eps)
    return tuple((x.float() - mean) / std for x in (train_x, *others))


def train_linear(
    x: Tensor,
    y: Tensor,
    num_classes: int,
    *,
    epochs: int = 100,
    batch_size: int = 256,
    lr: float = 1e-3,
    weight_decay: float = 1e-4,
    seed: int = 0,
    device: str | torch.device = "cpu",
) -> nn.Linear:
    """Fit Linear(x.shape[1], num_classes) with cross-entropy, AdamW and per-step cosine decay."""
    x = x.to(device, torch.float32)
    y = torch.as_tensor(y).to(device).long()
    N = x.shape[0]
    layer = nn.Linear(x.shape[1], num_classes).to(device)
    nn.init.zeros_(layer.weight)
    nn.init.zeros_(layer.bias)
    opt = torch.optim.AdamW(layer.parameters(), lr=lr, weight_decay=weight_decay)
    steps_per_epoch = max(1, math.ceil(N / batch_size))
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs * steps_per_epoch)
    gen = torch.Generator().manual_seed(seed)  # CPU generator: same order on any device
    loss_fn = nn.CrossEntropyLoss()
    for _ in range(epochs):
        order = torch.randperm(N, generator=gen).to(device)
        for s in range(0, N, batch_size):
            idx = order[s : s + batch_size]
            loss = loss_fn(layer(x[idx]), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
    return layer


@torch.no_grad()
def predict_logits(layer: nn.Module, x: Tensor, batch_size: int = 4096) -> Tensor:
    dev = next(layer.parameters()).device
    return torch.cat([layer(x[s : s + batch_size].to(dev, torch.float32)) for s in range(0, x.shape[0], batch_size)])


def linear_probe_fast(
    train_x: Tensor,
    train_y: Tensor,
    test_x: Tensor,
    test_y: Tensor,
    num_classes: int,
    *,
    epochs: int = 100,
    batch_size: int = 256,
    lr: float = 1e-3,
    weight_decay: float = 1e-4,
    seed: int = 0,
    device: str | torch.device | None = None,
) -> dict:
    """Top-1 / top-5 test accuracy (percent) of a linear classifier on standardised frozen features.

    device None trains where train_x lives (cached GPU features stay on the GPU).
    Returns dict(top1, top5, protocol="fast", train_top1).
    """
    device = train_x.device if device is None else torch.device(device)
    xtr, xte = standardize(train_x.to(device), test_x.to(device))
    layer = train_linear(
        xtr, train_y, num_classes, epochs=epochs, batch_size=batch_size, lr=lr,
        weight_decay=weight_decay, seed=seed, device=device,
    )
    test = topk_accuracy(predict_logits(layer, xte), torch.as_tensor(test_y).to(device))
    train = topk_accuracy(predict_logits(layer, xtr), torch.as_tensor(train_y).to(device), ks=(1,))
    return {"top1": test["top1"], "top5": test["top5"], "protocol": "fast", "train_top1": train["top1"]}


def linear_probe_paper(model, train, test, cfg: dict, device, *, progress: bool = True) -> dict:
    """The paper protocol (docs/METHOD.md section 5): frozen backbone h in eval mode, one Linear(F, C), 50
    epochs (eval.probe_epochs), batch 256, RandomResizedCrop(0.08-1) + flip on the device; LARS lr 0.4
    (eta 0.02, clip, no wd on the bias), wd 1e-4, warm-up + cosine for CIFAR-style sets; SGD lr 1.0,
    momentum 0.9, wd 0 for ImageNet-100."""
    from timm.optim import Lars
    from tqdm.auto import tqdm

    from ..data import SimCLRAugment, iter_batches
    from ..optim import lr_at
    from ..runtime import autocast, embed

    imagenet = cfg["data"]["dataset"] == "imagenet100"
    bs, epochs, seed = 256, cfg["eval"]["probe_epochs"], cfg["seed"]
    torch.manual_seed(seed)
    layer = nn.Linear(model.backbone.out_dim, train.num_classes).to(device)
    if imagenet:
        opt = torch.optim.SGD(layer.parameters(), lr=1.0, momentum=0.9, weight_decay=0.0)
        sched = {"base_lr": 1.0, "batch_size": 256, "warmup_epochs": 0, "warmup_start_lr": 0.0, "epochs": epochs}
    else:
        opt = Lars([{"params": [layer.weight], "weight_decay": 1e-4}, {"params": [layer.bias], "weight_decay": 0.0}],
                   lr=0.4, momentum=0.9, trust_coeff=0.02, trust_clip=True)
        sched = {"base_lr": 0.4, "batch_size": 256, "warmup_epochs": min(10, epochs // 5),
                 "warmup_start_lr": 3e-5, "epochs": epochs}
    aug = SimCLRAugment(train.crop_size, train.mean, train.std, jitter_p=0.0, gray_p=0.0, blur_p=0.0)
    steps = max(len(train.labels) // bs, 1)
    model.eval()
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    for epoch in tqdm(range(epochs), desc="linear probe (paper)", disable=not progress):
        batches = iter_batches(train, bs, shuffle=True, seed=seed * 1_000_003 + epoch,
                               drop_last=len(train.labels) >= bs, device=device,
                               num_workers=cfg["data"]["num_workers"])
        for step, (x, y, _) in enumerate(batches):
            for g in opt.param_groups:
                g["lr"] = lr_at(epoch * steps + min(step, steps - 1), steps, sched)
            with torch.no_grad(), autocast(device, cfg["train"]["precision"]):
                h = model.backbone(aug(x, gen)).float()
            loss = nn.functional.cross_entropy(layer(h), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    h_test, = embed(model, test, cfg, device, key="h")
    with torch.no_grad():
        logits = layer(h_test.to(device)).cpu()
    return {**topk_accuracy(logits, test.labels), "protocol": "paper", "epochs": epochs}
