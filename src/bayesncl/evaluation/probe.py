"""The paper protocol of the linear probe (docs/METHOD.md section 5): augmented crops through the frozen
backbone, LARS/SGD. The "fast" protocol on cached features is bayesncl.measures.linear (NumPy, no torch).
"""

from __future__ import annotations

import torch
from torch import nn

from ..measures.linear import topk_accuracy

__all__ = ["linear_probe_paper"]


def linear_probe_paper(model, train, test, cfg: dict, device, *, progress: bool = True) -> dict:
    """The paper protocol (docs/METHOD.md section 5): frozen backbone h in eval mode, one Linear(F, C), 50
    epochs (eval.probe_epochs), batch 256, RandomResizedCrop(0.08-1) + flip on the device; LARS lr 0.4
    (eta 0.02, clip, no wd on the bias), wd 1e-4, warm-up + cosine for CIFAR-style sets; SGD lr 1.0,
    momentum 0.9, wd 0 for ImageNet-100."""
    from timm.optim import Lars
    from tqdm.auto import tqdm

    from ..data import SimCLRAugment, iter_batches
    from ..training.optim import lr_at
    from ..training.device import channels_last
    from ..training.embed import embed

    from ..settings.registry import DATASETS

    imagenet = DATASETS[cfg["data"]["dataset"]].probe == "imagenet"
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
    # crops in the model's memory format (channels-last on CUDA, as its weights): no layout copy per convolution
    aug = SimCLRAugment(train.crop_size, train.mean, train.std, jitter_p=0.0, gray_p=0.0, blur_p=0.0,
                        channels_last=channels_last(cfg, device)).to(device)
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
            probe_step(model, layer, opt, aug, x, y, gen, cfg, device)
    h_test, = embed(model, test, cfg, device, key="h", bn="running")
    with torch.no_grad():
        logits = layer(h_test.to(device)).float().cpu()
    return {**topk_accuracy(logits.numpy(), test.labels.cpu().numpy()), "protocol": "paper", "epochs": epochs}


def probe_step(model, layer: nn.Linear, opt, aug, x: torch.Tensor, y: torch.Tensor, gen: torch.Generator, cfg: dict,
               device) -> None:
    """One probe step on a batch on the device: augmented crops, h of the frozen backbone (the model in eval
    mode: BatchNorm's running statistics), the linear layer's update."""
    from ..training.device import autocast

    with torch.no_grad(), autocast(device, cfg["train"]["precision"]):
        h = model.backbone(aug(x, gen)).float()
    loss = nn.functional.cross_entropy(layer(h), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
