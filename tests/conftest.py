import os

import pytest

# One cache for the synthetic datasets of the whole test session (generated once per parameter set).
os.environ.setdefault("BAYESNCL_CACHE", os.path.join(os.path.dirname(__file__), "..", ".pytest_cache", "bayesncl"))

TINY = [
    "data.synthetic.train_size=256",
    "data.synthetic.test_size=120",
    "data.synthetic.image_size=16",
    "model.width=4",
    "model.proj_hidden=32",
    "model.proj_dim=16",
    "train.batch_size=32",
    "train.epochs=2",
    "train.warmup_epochs=0",
    "train.threads=1",
    "eval.batch_size=128",
]


@pytest.fixture
def tiny_sets():
    """`--set` items for a CPU run of a few seconds."""
    return list(TINY)
