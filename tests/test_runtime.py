"""bayesncl.training.device's choices, each against what it must pick (mutation survivors of training/device.py,
docs/DESIGN.md): the autocast for each precision, the device `auto` resolves to, peak memory on a CPU."""

import pytest
import torch

from bayesncl.core.errors import ConfigError
from bayesncl.training.device import autocast, peak_memory_mb, resolve_device


@pytest.mark.parametrize("precision,dtype", [("fp32", None), ("auto", None), ("bf16", torch.bfloat16),
                                             ("fp16", torch.float16)])
def test_autocast_on_a_cpu_is_what_the_precision_asks(precision, dtype):
    """On a CPU, `auto` and fp32 leave the step in fp32; bf16 and fp16 cast a matmul to their dtype."""
    a = torch.ones(4, 4)
    with autocast(torch.device("cpu"), precision):
        out = a @ a
        assert torch.is_autocast_enabled("cpu") is (dtype is not None)
    assert out.dtype == (dtype or torch.float32)


def test_auto_is_cuda_where_a_gpu_is_seen(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device({"train": {"device": "auto"}}) == torch.device("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device({"train": {"device": "auto"}}) == torch.device("cpu")
    assert resolve_device({"train": {"device": "cpu"}}) == torch.device("cpu")
    with pytest.raises(ConfigError, match="train.device: 'cuda' was asked for but no CUDA device is available"):
        resolve_device({"train": {"device": "cuda"}})


def test_peak_memory_on_a_cpu_is_none_unless_the_rss_is_asked_for():
    assert peak_memory_mb("cpu") is None
    assert peak_memory_mb(torch.device("cpu"), cpu_rss=True) > 10  # MiB: this process has torch loaded
