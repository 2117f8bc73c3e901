import json
import math

import pytest
import torch
from torch import nn

from bayesncl.evaluation.cost import count_flops_per_image, count_params, peak_memory_mb, training_time_from_log


def test_linear_flops_per_image():
    lin = nn.Linear(10, 20)
    assert count_flops_per_image(lin, torch.randn(4, 10)) == 2 * 10 * 20


def test_flops_of_a_small_mlp_with_tuple_input():
    mlp = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    flops = count_flops_per_image(lambda xs: mlp(xs[0]) + mlp(xs[1]), (torch.randn(3, 8), torch.randn(3, 8)))
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


def test_log_parser_with_resumed_epoch(tmp_path):
    lines = [
        {"epoch": 0, "epoch_seconds": 10.0, "img_per_s": 100.0, "loss": 5.0},
        {"epoch": 1, "epoch_seconds": 99.0, "img_per_s": 1.0},  # interrupted, redone after resume
        {"epoch": 1, "epoch_seconds": 12.0, "img_per_s": 90.0},
        {"epoch": 2, "epoch_seconds": 14.0, "img_per_s": 80.0},
    ]
    p = tmp_path / "log.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in lines) + "\n\n" + '{"epoch": 3, "epoch_sec')
    out = training_time_from_log(p)
    assert set(out) == {"train_minutes", "sec_per_epoch", "img_per_s"}
    assert out["train_minutes"] == pytest.approx(36.0 / 60)
    assert out["sec_per_epoch"] == pytest.approx(12.0)
    assert out["img_per_s"] == pytest.approx(90.0)


def test_log_parser_empty(tmp_path):
    p = tmp_path / "log.jsonl"
    p.write_text("")
    out = training_time_from_log(p)
    assert math.isnan(out["train_minutes"]) and math.isnan(out["img_per_s"])
