"""The fast linear probe (bayesncl.measures.linear, NumPy): torch's AdamW + CosineAnnealingLR step for step,
its accuracies, and the evaluation jobs that run it without importing torch."""

import json
import math
import subprocess
import sys

import numpy as np
import pytest
import torch

from bayesncl.measures.linear import (batch_orders, linear_probe_fast, predict_logits, standardize, topk_accuracy,
                                      train_linear)


def blobs(n_per, C, D, seed, scale=1.0, offset=5.0):
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((C, D)) * 3
    y = np.repeat(np.arange(C), n_per)
    x = centers[y] + scale * rng.standard_normal((len(y), D)) + offset  # offset: tests standardisation
    return x.astype(np.float32), y


def torch_reference(x, y, C, orders, *, batch_size, lr, weight_decay):
    """The protocol written with torch's own optimiser and scheduler, fed the given batch order."""
    x, y = torch.from_numpy(x), torch.from_numpy(y).long()
    N = x.shape[0]
    layer = torch.nn.Linear(x.shape[1], C)
    torch.nn.init.zeros_(layer.weight)
    torch.nn.init.zeros_(layer.bias)
    opt = torch.optim.AdamW(layer.parameters(), lr=lr, weight_decay=weight_decay)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=len(orders) * math.ceil(N / batch_size))
    for order in orders:
        order = torch.from_numpy(order)
        for s in range(0, N, batch_size):
            idx = order[s : s + batch_size]
            loss = torch.nn.functional.cross_entropy(layer(x[idx]), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
    return layer.weight.detach().numpy(), layer.bias.detach().numpy()


@pytest.mark.parametrize("lr, wd", [(5e-2, 0.5), (1e-3, 1e-4)])
def test_matches_torch_adamw_with_cosine_on_the_same_batch_order(lr, wd):
    rng = np.random.default_rng(0)
    x = standardize(rng.standard_normal((100, 20)) * 2 + 1)[0]
    y = rng.integers(0, 5, 100)
    orders = batch_orders(100, 4, seed=3)  # 4 epochs of 4 batches, the last of 4 rows
    W, b = train_linear(x, y, 5, batch_size=32, lr=lr, weight_decay=wd, orders=orders)
    W_ref, b_ref = torch_reference(x, y, 5, orders, batch_size=32, lr=lr, weight_decay=wd)
    assert np.abs(W).max() > 1e-3 and np.abs(b).max() > 1e-4  # it moved
    np.testing.assert_allclose(W, W_ref, atol=1e-4, rtol=0)
    np.testing.assert_allclose(b, b_ref, atol=1e-4, rtol=0)
    # the default order is the seed's
    W2, b2 = train_linear(x, y, 5, epochs=4, batch_size=32, lr=lr, weight_decay=wd, seed=3)
    np.testing.assert_array_equal(W2, W)
    np.testing.assert_array_equal(b2, b)


def test_topk_hand_case():
    logits = np.array(
        [[0.9, 0.5, 0.1, 0.0, -1, -2, -3],  # label 0: top1
         [0.9, 0.5, 0.1, 0.0, -1, -2, -3],  # label 4: rank 5 -> top5 only
         [0.9, 0.5, 0.1, 0.0, -1, -2, -3],  # label 6: rank 7 -> neither
         [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6]]  # label 2: rank 5
    )
    y = np.array([0, 4, 6, 2])
    assert topk_accuracy(logits, y) == {"top1": 25.0, "top5": 75.0}
    # fewer than 5 classes: top-5 is capped and always 100%
    assert topk_accuracy(logits[:, :3], np.array([0, 2, 1, 1])) == {"top1": 25.0, "top5": 100.0}
    # torch tensors are accepted too (the paper probe's logits)
    assert topk_accuracy(torch.from_numpy(logits), torch.from_numpy(y)) == {"top1": 25.0, "top5": 75.0}


def test_empty_test_set_is_nan():
    r = topk_accuracy(np.zeros((0, 4)), np.zeros(0, np.int64))
    assert math.isnan(r["top1"]) and math.isnan(r["top5"])
    x, y = blobs(10, 3, 4, 0)
    out = linear_probe_fast(x, y, x[:0], y[:0], 3, epochs=2)
    assert math.isnan(out["top1"]) and math.isnan(out["top5"]) and out["train_top1"] > 0
    out = linear_probe_fast(x, y, x, y, 3, epochs=2)  # 3 classes: top-5 capped at 3, i.e. 100%
    assert out["top5"] == 100.0


def test_standardize_uses_train_stats():
    a = np.array([[1.0, 5.0], [3.0, 5.0]])
    b = np.array([[2.0, 6.0]])
    sa, sb = standardize(a, b)
    assert sa.dtype == np.float32 and sb.dtype == np.float32
    np.testing.assert_allclose(sa, [[-1.0, 0.0], [1.0, 0.0]])  # population std; the constant feature -> 0
    assert sb[0, 0] == 0.0 and np.isfinite(sb).all()


def test_separable_reaches_100():
    x, y = blobs(40, 10, 32, 0)
    xt, yt = blobs(20, 10, 32, 0)  # same centers (same seed)
    xt = xt + 0.1 * np.random.default_rng(1).standard_normal(xt.shape).astype(np.float32)
    out = linear_probe_fast(x, y, xt, yt, 10, epochs=10, batch_size=100)
    assert out["protocol"] == "fast"
    assert out["top1"] == 100.0 and out["top5"] == 100.0 and out["train_top1"] == 100.0


def test_learns_a_noisy_separable_problem():
    # two classes split by a hyperplane in 20 dims, a last batch smaller than the others (300 = 256 + 44)
    rng = np.random.default_rng(4)
    w = rng.standard_normal(20)
    x = rng.standard_normal((300, 20)).astype(np.float32)
    y = (x @ w > 0).astype(np.int64)
    xt = rng.standard_normal((1000, 20)).astype(np.float32)
    yt = (xt @ w > 0).astype(np.int64)
    out = linear_probe_fast(x, y, xt, yt, 2, epochs=30, lr=1e-2)
    assert out["top1"] > 90.0 and out["train_top1"] > 95.0, out


def test_accuracy_does_not_depend_on_each_features_offset_and_unit():
    """The probe standardises with the train split's statistics: a per-feature shift and scale (units from
    1e-3 to 1e3, offsets up to 1e3) leaves what it learns unchanged; unstandardised, AdamW would not cope."""
    rng = np.random.default_rng(4)
    w = rng.standard_normal(20)
    x = rng.standard_normal((300, 20))
    y = (x @ w > 0).astype(np.int64)
    xt = rng.standard_normal((1000, 20))
    yt = (xt @ w > 0).astype(np.int64)
    scale, shift = 10.0 ** rng.uniform(-3, 3, 20), rng.uniform(-1e3, 1e3, 20)
    a = linear_probe_fast(x, y, xt, yt, 2, epochs=30, lr=1e-2)
    b = linear_probe_fast(x * scale + shift, y, xt * scale + shift, yt, 2, epochs=30, lr=1e-2)
    assert a["top1"] > 90.0, a
    for k in ("top1", "train_top1"):  # float32 rounding of the standardised inputs may move a point or two
        assert abs(a[k] - b[k]) <= 0.2, (a, b)


def test_fits_random_labels_when_separable_but_test_is_chance():
    # N < D: any labelling is linearly separable, so the optimiser must reach ~100% train accuracy;
    # on held-out random labels it must stay near chance (20% for 5 classes).
    rng = np.random.default_rng(2)
    x = rng.standard_normal((200, 256)).astype(np.float32)
    y = rng.integers(0, 5, 200)
    xt = rng.standard_normal((2000, 256)).astype(np.float32)
    yt = rng.integers(0, 5, 2000)
    out = linear_probe_fast(x, y, xt, yt, 5, epochs=30, batch_size=100, lr=1e-2, weight_decay=0.0)
    assert out["train_top1"] >= 99.0
    assert 15.0 <= out["top1"] <= 25.0


def test_deterministic_for_a_seed_and_another_seed_another_order():
    x, y = blobs(30, 4, 8, 3, scale=4.0)
    a = linear_probe_fast(x, y, x, y, 4, epochs=5, batch_size=16, seed=7)
    assert a == linear_probe_fast(x, y, x, y, 4, epochs=5, batch_size=16, seed=7)
    assert 25.0 < a["top1"] <= 100.0
    xs = standardize(x)[0]
    W7, _ = train_linear(xs, y, 4, epochs=5, batch_size=16, seed=7)
    np.testing.assert_array_equal(W7, train_linear(xs, y, 4, epochs=5, batch_size=16, seed=7)[0])
    W8, _ = train_linear(xs, y, 4, epochs=5, batch_size=16, seed=8)
    assert not np.array_equal(W7, W8)
    o7, o8 = batch_orders(120, 2, 7), batch_orders(120, 2, 8)
    assert not np.array_equal(o7[0], o8[0]) and not np.array_equal(o7[0], o7[1])  # per seed, per epoch
    assert sorted(o7[0]) == list(range(120))


def test_predict_logits_in_chunks():
    rng = np.random.default_rng(5)
    W, b, x = (rng.standard_normal(s).astype(np.float32) for s in ((3, 6), (3,), (10, 6)))
    np.testing.assert_allclose(predict_logits(W, b, x, batch_size=4), x @ W.T + b, rtol=1e-6)
    assert predict_logits(W, b, x[:0]).shape == (0, 3)


# ------------------------------------------------------------------------------------ the jobs import no torch
@pytest.fixture(scope="module")
def cached_run(tmp_path_factory):
    """A tiny synthetic run with its features cache (test and train h)."""
    from helpers import TINY

    from bayesncl.settings import config as C
    from bayesncl.evaluation.runner import evaluate
    from bayesncl.training.train import pretrain

    run = tmp_path_factory.mktemp("run")
    pretrain(C.resolve(sets=TINY + ["train.epochs=1"]), run, progress=False)
    evaluate(run / "model.pt", run / "eval", only=["features"], progress=False)
    return run


def test_fast_probe_jobs_import_no_torch(cached_run):
    run, out = cached_run, cached_run / "eval"
    recorded = json.loads((out / "features.json").read_text())
    assert (out / "features_train.npz").is_file()
    weights = (run / "model.pt").read_bytes()
    (run / "model.pt").write_bytes(b"not read")  # the jobs take the run from features.json
    try:
        probe = ("import sys; from bayesncl.cli.main import main; "
                 f"rc = main(['evaluate', '--checkpoint', {str(run / 'model.pt')!r}, '--out', {str(out)!r}, "
                 "'--only', 'linear_probe', 'background_probe', '--quiet']); "
                 "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH'); sys.exit(rc)")
        r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    finally:
        (run / "model.pt").write_bytes(weights)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "NO-TORCH", r.stdout
    lp = json.loads((out / "linear_probe.json").read_text())
    bg = json.loads((out / "background_probe.json").read_text())
    assert lp["run"] == recorded["run"] and bg["run"] == recorded["run"]
    assert lp["linear_probe"]["protocol"] == "fast" and 0 <= lp["linear_probe"]["top1"] <= lp["linear_probe"]["top5"]
    assert bg["background_probe"]["target"] == "synthetic_background" and bg["background_probe"]["protocol"] == "fast"
    # the job's numbers are the probe's on the cached arrays
    with np.load(out / "features_train.npz") as tr, np.load(out / "features.npz") as te:
        want = linear_probe_fast(tr["h"], tr["labels"], te["h"], te["labels"], int(te["num_classes"]),
                                 seed=recorded["run"]["seed"])
    assert lp["linear_probe"] == pytest.approx(want)
