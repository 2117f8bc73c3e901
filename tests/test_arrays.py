"""The NumPy measures (evaluation/arrays.py) give the torch measures' numbers (metrics.py, retrieval.py, whose
own tests compare them with naive loops), and a section job that reads the features cache imports no torch."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from bayesncl.evaluation import arrays, metrics, retrieval

ROOT = Path(__file__).resolve().parents[1]


def _features(N, D, C, seed, dead=(), sign=False):
    g = torch.Generator().manual_seed(seed)
    F = torch.relu(torch.randn(N, D, generator=g) - 0.8)
    F[:, list(dead)] = 0
    if sign:
        F = F * (torch.randint(0, 2, (N, D), generator=g) * 2 - 1)
    y = torch.randint(0, C, (N,), generator=g)
    return F, y


def _close(a, b):
    np.testing.assert_allclose(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64),
                               rtol=1e-6, atol=1e-9, equal_nan=True)


@pytest.mark.parametrize("N,D,C,seed,dead,sign", [(60, 12, 4, 0, (), False), (80, 20, 5, 1, (0, 7), False),
                                                 (45, 9, 3, 2, (4,), True), (0, 5, 3, 3, (), False)])
def test_interpretability_matches_torch(N, D, C, seed, dead, sign):
    F, y = _features(N, D, C, seed, dead, sign)
    want, got = metrics.interpretability(F, y, C), arrays.interpretability(F.numpy(), y.numpy(), C)
    for k in ("sc", "se_sum", "se_mean", "se_freq", "act", "alive", "alive_frac"):
        assert (math.isnan(want[k]) and math.isnan(got[k])) or got[k] == pytest.approx(want[k], rel=1e-6, abs=1e-9), k
    for k, v in want["per_dim"].items():
        _close(got["per_dim"][k], v.numpy())


def test_background_gate_and_mask_measures_match_torch():
    F, y = _features(120, 24, 6, 5, dead=(3,))
    bg = torch.randint(0, 4, (120,), generator=torch.Generator().manual_seed(1))
    bg[:40] = 0
    want, got = metrics.background_dominance(F, y, bg, 6, 4), arrays.background_dominance(F.numpy(), y.numpy(),
                                                                                         bg.numpy(), 6, 4)
    assert got["share"] == pytest.approx(want["share"]) and got["n_active"] == want["n_active"]
    for k in ("bg_dom", "cls_dom", "lift_bg", "lift_cls", "bg_sc", "cls_sc"):
        _close(got[k], want[k].numpy())
    gate = (torch.rand(120, 24, generator=torch.Generator().manual_seed(2)) < 0.6).float()
    _close(arrays.closed_gate_rate(F.numpy(), gate.numpy()), metrics.closed_gate_rate(F, gate).numpy())
    assert arrays.topk_binding(F.numpy(), gate.numpy()) == pytest.approx(metrics.topk_binding(F, gate))
    none = arrays.background_dominance(np.zeros((30, 2)), y[:30].numpy(), bg[:30].numpy(), 6, 4)
    assert math.isnan(none["share"])


@pytest.mark.parametrize("K", [None, 3, 7])
def test_retrieval_matches_torch(K):
    g = torch.Generator().manual_seed(2)
    F = torch.rand(90, 12, generator=g) ** 2  # dense: no similarity ties
    y = torch.randint(0, 4, (90,), generator=g)
    want = retrieval.retrieval_precision(F, y, (1, 3, 5, 10, 200), K=K)
    for chunk in (7, 1024):
        assert arrays.retrieval_precision(F.numpy(), y.numpy(), (1, 3, 5, 10, 200), K=K,
                                          chunk_size=chunk) == pytest.approx(want, abs=1e-12)
    assert arrays.retrieval_curve(F.numpy(), y.numpy(), [2, 5, 12]) == \
        pytest.approx(retrieval.retrieval_curve(F, y, [2, 5, 12]), abs=1e-12)
    X, idx = arrays.select_dims(F.numpy(), 4)
    Xt, idxt = retrieval.select_dims(F, 4)
    assert idx.tolist() == idxt.tolist()
    _close(X, Xt.numpy())


def test_cache_reading_sections_import_no_torch(tmp_path):
    """interpretability and retrieval on a features cache: the job never imports torch (nor reads model.pt)."""
    from conftest import TINY

    from bayesncl import config as C
    from bayesncl.evaluation.runner import evaluate
    from bayesncl.train import pretrain

    run = tmp_path / "run"
    cfg = C.resolve(sets=TINY + ["method.name=topk_ncl", "train.epochs=1"])
    pretrain(cfg, run, progress=False)
    out = tmp_path / "eval"
    evaluate(run / "model.pt", out, only=["features"], progress=False)
    recorded = json.loads((out / "features.json").read_text())
    (run / "model.pt").write_bytes(b"not read")  # the cache-reading sections take the run from features.json
    probe = ("import sys; from bayesncl.cli import main; "
             f"rc = main(['evaluate', '--checkpoint', {str(run / 'model.pt')!r}, '--out', {str(out)!r}, "
             "'--only', 'interpretability', 'retrieval', '--quiet']); "
             "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH'); sys.exit(rc)")
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "NO-TORCH", r.stdout
    for name in ("interpretability", "retrieval"):  # the run block the features section read from the checkpoint
        body = json.loads((out / f"{name}.json").read_text())
        assert body["run"] == recorded["run"] and body[name], name
    # A section that needs torch runs it on train.threads threads (1 here), not on every core
    probe = ("import sys; from bayesncl.cli import main; "
             f"rc = main(['evaluate', '--checkpoint', {str(run / 'model.pt')!r}, '--out', {str(out)!r}, "
             "'--only', 'linear_probe', '--quiet']); import torch; print(torch.get_num_threads()); sys.exit(rc)")
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "OMP_NUM_THREADS": ""})
    assert r.returncode == 0 and r.stdout.split()[-1] == "1", r.stdout + r.stderr
