import math

import pytest
import torch
from torch import nn

from bayesncl.measures.cost import count_flops_per_image, count_params, training_time
from bayesncl.training.device import peak_memory_mb


def test_linear_flops_per_image():
    lin = nn.Linear(10, 20)
    assert count_flops_per_image(lin, torch.randn(4, 10)) == 2 * 10 * 20


def test_flops_of_a_small_mlp_and_a_conv():
    mlp = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    flops = count_flops_per_image(lambda x: mlp(x) + mlp(x.flip(0)), torch.randn(3, 8))
    assert flops == 2 * 2 * (8 * 16 + 16 * 4)  # two views per image
    conv = nn.Conv2d(3, 5, 3, padding=1, bias=False)
    assert count_flops_per_image(conv, torch.randn(2, 3, 6, 6)) == 2 * 3 * 5 * 9 * 36


def test_count_params():
    m = nn.Sequential(nn.Linear(10, 20), nn.Linear(20, 3, bias=False))
    assert count_params(m) == 10 * 20 + 20 + 20 * 3
    m[0].weight.requires_grad_(False)
    assert count_params(m, trainable_only=True) == 20 + 20 * 3
    tied = nn.Sequential(m[1], m[1])
    assert count_params(tied) == 60


def test_peak_memory_cpu():
    assert peak_memory_mb("cpu") is None
    rss = peak_memory_mb("cpu", cpu_rss=True)
    assert rss is not None and rss > 10  # a python process with torch loaded


def test_training_time_from_log_records():
    log = [
        {"epoch": 1, "epoch_seconds": 10.0, "img_per_s": 100.0, "peak_mem_mb": None},
        {"epoch": 2, "epoch_seconds": 12.0, "img_per_s": 90.0, "peak_mem_mb": 700.0},
        {"epoch": 3, "epoch_seconds": 14.0, "img_per_s": 80.0, "peak_mem_mb": 650.0},
    ]
    out = training_time(log)
    assert out["train_minutes"] == pytest.approx(36.0 / 60)
    assert out["sec_per_epoch"] == pytest.approx(12.0)
    assert out["img_per_s"] == pytest.approx(90.0)
    assert out["peak_mem_mb"] == 700.0


def test_training_time_of_an_empty_log():
    out = training_time([])
    assert math.isnan(out["train_minutes"]) and math.isnan(out["img_per_s"]) and out["peak_mem_mb"] is None
