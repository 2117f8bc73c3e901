"""The one implementation of the measures (measures/arrays.py; tests/test_metrics.py and test_retrieval.py
compare it with naive loops): its edge cases, its users, and a section job that reads the features cache
imports no torch."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bayesncl.measures import arrays

ROOT = Path(__file__).resolve().parents[1]


def _close(a, b):
    np.testing.assert_allclose(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64),
                               rtol=1e-6, atol=1e-9, equal_nan=True)


def test_no_images_gives_nan_not_a_crash():
    out = arrays.interpretability(np.zeros((0, 5), dtype=np.float32), np.zeros(0, dtype=np.int64), 3)
    assert out["alive"] == 0 and out["alive_frac"] == 0
    assert all(math.isnan(out[k]) for k in ("sc", "se_sum", "se_mean", "se_freq", "act"))
    assert np.isnan(out["per_dim"]["freq"]).all() and not out["per_dim"]["active"].any()


def test_pretraining_dynamics_use_these_measures():
    """training/train.py records SC with this module's consistency_per_dim (no second implementation)."""
    from bayesncl.training import train

    assert train.consistency_per_dim is arrays.consistency_per_dim


def test_cache_reading_sections_import_no_torch(tmp_path):
    """interpretability and retrieval on a features cache: the job never imports torch (nor reads model.pt)."""
    from helpers import TINY

    from bayesncl.settings import config as C
    from bayesncl.evaluation.runner import evaluate
    from bayesncl.training.train import pretrain

    run = tmp_path / "run"
    cfg = C.resolve(sets=TINY + ["method.name=topk_ncl", "train.epochs=1"])
    pretrain(cfg, run, progress=False)
    out = tmp_path / "eval"
    evaluate(run / "model.pt", out, only=["features"], progress=False)
    recorded = json.loads((out / "features.json").read_text())
    (run / "model.pt").write_bytes(b"not read")  # the cache-reading sections take the run from features.json
    probe = ("import sys; from bayesncl.cli.main import main; "
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
    probe = ("import sys; from bayesncl.cli.main import main; "
             f"rc = main(['evaluate', '--checkpoint', {str(run / 'model.pt')!r}, '--out', {str(out)!r}, "
             "'--only', 'linear_probe', '--quiet']); import torch; print(torch.get_num_threads()); sys.exit(rc)")
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "OMP_NUM_THREADS": ""})
    assert r.returncode == 0 and r.stdout.split()[-1] == "1", r.stdout + r.stderr


# ------------------------------------------------------------- naive references written from docs/METHOD.md 4-5
EPS = 1e-5


def _entropy_of(weights) -> float:
    tot = sum(weights)
    return -sum(p * math.log(p) for p in (w / tot for w in weights) if p > EPS)


def naive_interpretability(F, y, C) -> dict:
    """Section 4 loop by loop: per dim its firing set, SC_j, the three entropies; Act. over all entries."""
    N, D = F.shape
    n_c = [int((y == c).sum()) for c in range(C)]
    per = {"sc": [], "h_sum": [], "h_mean": [], "h_freq": []}
    for j in range(D):
        col = [abs(float(F[i, j])) for i in range(N)]
        active = sum(col) > EPS
        fires = [i for i in range(N) if col[i] > EPS]
        sums = [sum(col[i] for i in range(N) if y[i] == c) for c in range(C)]
        counts = [sum(1 for i in fires if y[i] == c) for c in range(C)]
        per["sc"].append(max(counts) / len(fires) if active and fires else math.nan)
        per["h_sum"].append(_entropy_of(sums) if active else math.nan)
        per["h_mean"].append(_entropy_of([sums[c] / n_c[c] for c in range(C) if n_c[c]]) if active else math.nan)
        per["h_freq"].append(_entropy_of(counts) if active and fires else math.nan)
    fired = sum(abs(float(F[i, j])) > EPS for i in range(N) for j in range(D))
    alive = sum(sum(abs(float(F[i, j])) for i in range(N)) > EPS for j in range(D))
    return {"per_dim": per, "act": 100.0 * fired / (N * D), "alive": alive}


def edge_features():
    """Dims at the edges of the definitions: firing once; only sub-ε entries adding up past ε; entries at
    exactly ε and just above; one entry of exactly ε (not active); dense ones. Class 3 has a single image."""
    rng = np.random.default_rng(0)
    y = np.array([0, 1, 2] * 10 + [3])
    N = len(y)
    F = np.zeros((N, 8))
    F[4, 0] = 1.0
    F[:20, 1] = 0.8 * EPS
    F[:10, 2], F[10:14, 2] = EPS, 1.5 * EPS
    F[7, 3] = EPS
    F[:, 4:] = np.abs(rng.standard_normal((N, 4))) * (rng.random((N, 4)) < 0.6)
    F[30, 4] = 5.0  # the single image of class 3
    return F, y


def test_interpretability_matches_a_naive_loop_at_the_edges():
    F, y = edge_features()
    want, got = naive_interpretability(F, y, 4), arrays.interpretability(F, y, 4)
    for k, v in want["per_dim"].items():
        _close(got["per_dim"][k], v)
    assert got["act"] == pytest.approx(want["act"]) and got["alive"] == want["alive"] == 7  # not dim 3
    assert got["sc"] == pytest.approx(100 * np.nanmean(want["per_dim"]["sc"]))


def test_gate_and_mask_measures_match_a_naive_loop_at_the_edges():
    F, _ = edge_features()
    gate = (np.random.default_rng(1).random(F.shape) < 0.5).astype(np.uint8)
    N, D = F.shape
    fires = np.abs(F) > EPS
    want = [sum(fires[i, j] and gate[i, j] <= 0.5 for i in range(N)) / fires[:, j].sum() if fires[:, j].any()
            else math.nan for j in range(D)]
    _close(arrays.closed_gate_rate(F, gate), want)
    rows = [(fires[i].sum(), sum(fires[i, j] and gate[i, j] <= 0.5 for j in range(D))) for i in range(N)]
    bound = np.mean([removed > 0 for _, removed in rows])
    removed = np.mean([r / n for n, r in rows if n])
    assert any(n == 1 for n, _ in rows)  # a row with a single positive entry
    assert arrays.topk_binding(F, gate) == pytest.approx({"bound": bound, "removed": removed})


def test_a_background_of_one_value_has_no_lift():
    F, y = edge_features()
    d = arrays.background_dominance(F, y, np.zeros(len(y), dtype=int), 4, 2)
    assert np.isnan(d["lift_bg"]).all() and d["n_active"] == 0 and math.isnan(d["share"])


def test_labels_outside_their_range_and_a_row_count_mismatch_are_refused():
    F, y = edge_features()
    for bad in (np.where(y == 3, -1, y), np.where(y == 3, 4, y)):
        with pytest.raises(ValueError, match=r"labels must lie in \[0, 4\)"):
            arrays.interpretability(F, bad, 4)
    with pytest.raises(ValueError, match="30 labels for 31 feature rows"):
        arrays.interpretability(F, y[:30], 4)


def naive_precision(F, y, ks, K=None) -> dict:
    """Section 5: cosine similarity on the top-K dims by total mass of the L2-normalised features (renormalised),
    each query against all other images, P@k = the share of same-label images among its k nearest."""
    X = F / np.linalg.norm(F, axis=1, keepdims=True)
    if K is not None and K < X.shape[1]:
        X = X[:, np.argsort(-X.sum(0), kind="stable")[:K]]
        X = X / np.linalg.norm(X, axis=1, keepdims=True)
    N = len(y)
    out = {}
    for k in ks:
        k_ = min(k, N - 1)
        hits = 0
        for i in range(N):
            others = sorted((j for j in range(N) if j != i), key=lambda j: -float(X[i] @ X[j]))
            hits += sum(y[j] == y[i] for j in others[:k_])
        out[f"p@{k}"] = hits / (N * k_)
    return out


@pytest.mark.parametrize("N,K", [(2, None), (5, 1), (40, 3), (70, None)])
def test_retrieval_matches_a_naive_loop(N, K):
    rng = np.random.default_rng(N)
    F = rng.random((N, 6)) ** 2
    y = rng.integers(0, 3, N)
    got = arrays.retrieval_precision(F, y, K=K)  # the default ks
    assert got == pytest.approx(naive_precision(F, y, (1, 3, 5, 10), K), abs=1e-12)


@pytest.mark.parametrize("D,Ks", [(16, [16]), (32, [32]), (48, [32, 48]), (64, [32, 64]), (100, [32, 64, 100]),
                                  (512, [32, 64, 128, 256, 512]), (2048, [32, 64, 128, 256, 512])])
def test_default_Ks_doubles_from_32_to_512_with_the_end_point(D, Ks):
    assert arrays.default_Ks(D) == Ks
