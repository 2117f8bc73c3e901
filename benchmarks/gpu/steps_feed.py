"""Steps that time the input paths: the released code's PIL feed of CIFAR, and ImageNet-100's JPEGs against
their prepared copy."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

import numpy as np
import torch

from .common import StepFailed, sync
from .inputs import PILCifar, TwoViews, official_transform, repeated, write_jpeg_tree

if TYPE_CHECKING:
    from .check import Check


def official_feed(check: Check) -> dict:
    from torch.utils.data import DataLoader, RandomSampler

    from bayesncl.data import load_split
    from bayesncl.training.optim import lr_at, set_lr
    from bayesncl.training.device import autocast

    bs, dev = check.s.batch, check.device
    cfg = check.step_config("ncl")
    train = load_split(cfg["data"], "train")
    ds = PILCifar(np.ascontiguousarray(train.images.permute(0, 2, 3, 1).numpy()), train.labels.tolist(),
                  TwoViews(official_transform(32, train.mean, train.std)))
    sampler = RandomSampler(ds, num_samples=10**7)  # no epoch ends (and worker restarts) inside the window
    loader = DataLoader(ds, batch_size=bs, sampler=sampler, num_workers=check.workers, drop_last=True,
                        pin_memory=dev.type == "cuda")
    model, opt, cl = check.step_model(cfg)
    skip = check.workers + 2  # the first batches arrive together (every worker starts at once)
    t0, n, i = None, 0, 0
    for i, ((v1, v2), _) in enumerate(loader):
        if i == skip:
            sync(dev)
            t0, n = time.perf_counter(), 0
        v1, v2 = (v.to(dev, non_blocking=True) for v in (v1, v2))
        if cl:
            v1, v2 = (v.contiguous(memory_format=torch.channels_last) for v in (v1, v2))
        set_lr(opt, lr_at(i, 200, cfg["train"]))
        with autocast(dev, cfg["train"]["precision"]):
            loss, _ = model.training_loss(v1, v2)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if t0 is not None:
            n += bs
            if time.perf_counter() - t0 >= check.s.feed_seconds:
                break
    sync(dev)
    if t0 is None:
        raise StepFailed(f"only {i + 1} batches arrived")
    rate = n / (time.perf_counter() - t0)
    del loader
    res = {"workers": check.workers, "img_per_s": rate, "batches_timed": n // bs}
    ours = check.step_result("throughput")
    if ours:
        res["ours_img_per_s"] = ours["ncl"]["img_per_s"]
        res["ratio"] = ours["ncl"]["img_per_s"] / rate
    print(f"official-style feed: {rate:.1f} images/s with {check.workers} workers", flush=True)
    return res


def imagenet_input(check: Check) -> dict:
    from bayesncl.data import IMAGENET_MEAN, IMAGENET_STD, SimCLRAugment, iter_batches
    from bayesncl.data.imagenet import PreparedImages, decode_image, load_imagenet100, prepare_imagenet100

    root, cache = check.work / "jpeg", check.work / "jpeg_cache"
    wnids = write_jpeg_tree(root, check.s.jpeg_files)
    ds = load_imagenet100(root, "train", classes=wnids, prepared=False)
    files = ds.dataset.paths
    mean_kb = sum(os.path.getsize(p) for p in files) / len(files) / 1024
    cuda = check.device.type == "cuda"

    def per_core(fn) -> float:  # in process, one core
        t0, n = time.perf_counter(), 0
        while time.perf_counter() - t0 < check.s.jpeg_seconds / 2:
            n += fn(n)
        return n / (time.perf_counter() - t0)

    decode_rate = per_core(lambda i: (decode_image(files[i % len(files)], ds.stored_size), 1)[1])
    # The prepared copy (bayesncl prepare-imagenet): decoded once, then read through a memory map.
    t0 = time.perf_counter()
    prepare_imagenet100(root, "train", classes=wnids, cache_dir=cache, workers=check.workers)
    prepare_s = time.perf_counter() - t0
    prep = load_imagenet100(root, "train", classes=wnids, cache_dir=cache)
    if not isinstance(prep.dataset, PreparedImages):
        raise StepFailed("the loader did not read the prepared copy it was just given")
    same = all(torch.equal(prep.dataset[i][0], ds.dataset[i][0]) for i in range(len(files)))
    if not same:
        raise StepFailed("the prepared images differ from the decoded JPEGs")
    gidx = torch.Generator().manual_seed(0)
    # Reading a batch into page-locked memory (on CUDA), the CPU's whole share of a prepared batch.
    fetch_rate = per_core(lambda i: prep.dataset.fetch(
        torch.randint(len(files), (check.s.jpeg_batch,), generator=gidx), pin=cuda)[0].shape[0])

    # Through iter_batches, feeding the on-device 224 px crops of two views.
    reps = 100_000 // len(files) + 1
    big, big_prep = repeated(ds, reps), repeated(prep, reps)
    aug = SimCLRAugment(ds.crop_size, IMAGENET_MEAN, IMAGENET_STD)
    gen = torch.Generator(device=check.device).manual_seed(0)

    def fed(source, workers: int) -> float:
        t0, n = None, 0
        batches = iter_batches(source, check.s.jpeg_batch, shuffle=True, seed=0, drop_last=True,
                               device=check.device, num_workers=workers)
        for i, (x, _, _) in enumerate(batches):
            aug(x, gen), aug(x, gen)  # the two views training makes
            if i == workers + 1:  # after the first batch of every worker
                sync(check.device)
                t0, n = time.perf_counter(), 0
            elif t0 is not None:
                n += x.shape[0]
                if time.perf_counter() - t0 >= check.s.jpeg_seconds:
                    break
        sync(check.device)
        batches.close()
        return n / (time.perf_counter() - t0)

    rates, prep_rates = {}, {}
    for workers in sorted({1, check.workers}):
        rates[workers] = fed(big, workers)
        prep_rates[workers] = fed(big_prep, workers)
        print(f"ImageNet-100 feed, {workers:2d} workers: JPEG {rates[workers]:8.1f}, prepared "
              f"{prep_rates[workers]:8.1f} images/s", flush=True)
    return {"files": len(files), "size": "500x375", "mean_kb": mean_kb, "stored_size": ds.stored_size,
            "crop": ds.crop_size, "decode_img_per_s_1core": decode_rate,
            "img_per_s_1_worker": rates[1], "workers": check.workers,
            "img_per_s_all_workers": rates[check.workers],
            "img_per_s_per_worker_all": rates[check.workers] / check.workers,
            "prepare_img_per_s": len(files) / prepare_s, "prepared_identical": same,
            "prepared_fetch_img_per_s_1core": fetch_rate,
            "prepared_img_per_s_1_worker": prep_rates[1],
            "prepared_img_per_s_all_workers": prep_rates[check.workers]}
