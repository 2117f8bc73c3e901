import math

import numpy as np
import pytest
import torch

from bayesncl.measures.arrays import (background_dominance, closed_gate_rate, topk_binding, class_dim_matrices,
                                      consistency_per_dim, interpretability)

EPS = 1e-5


def naive(F, y, C, eps=EPS):
    """METHOD.md section 4 transcribed literally: one Python loop per dimension, float64."""
    F = np.asarray(F, dtype=np.float64)
    y = np.asarray(y)
    N, D = F.shape
    n = [int((y == c).sum()) for c in range(C)]
    A = [j for j in range(D) if np.abs(F[:, j]).sum() > eps]

    def H(w):
        p = np.array(w, dtype=np.float64)
        p = p / p.sum()
        return -sum(pc * math.log(pc) for pc in p if pc > eps)

    sc, hs, hm, hf = {}, {}, {}, {}
    for j in A:
        S = [i for i in range(N) if abs(F[i, j]) > eps]
        sc[j] = max(sum(1 for i in S if y[i] == c) for c in range(C)) / len(S)
        s = [sum(abs(F[i, j]) for i in range(N) if y[i] == c) for c in range(C)]
        hs[j] = H(s)
        hm[j] = H([s[c] / n[c] for c in range(C) if n[c] > 0])
        hf[j] = H([sum(1 for i in S if y[i] == c) for c in range(C)])
    act = 100 * np.mean([[abs(F[i, j]) > eps for j in range(D)] for i in range(N)])
    freq = [sum(1 for i in range(N) if abs(F[i, j]) > eps) / N for j in range(D)]
    mean = lambda d: float(np.mean(list(d.values()))) if d else math.nan  # noqa: E731
    return dict(sc=100 * mean(sc), se_sum=mean(hs), se_mean=mean(hm), se_freq=mean(hf), act=act,
                alive=len(A), per=dict(sc=sc, h_sum=hs, h_mean=hm, h_freq=hf), freq=freq)


def sparse_features(N, D, C, seed, dead=(), absent=None, sign=False):
    g = torch.Generator().manual_seed(seed)
    F = torch.relu(torch.randn(N, D, generator=g) - 0.8)
    F[:, list(dead)] = 0
    if sign:  # |F| must be used, not F
        F = F * (torch.randint(0, 2, (N, D), generator=g) * 2 - 1)
    y = torch.randint(0, C, (N,), generator=g)
    if absent is not None:
        y[y == absent] = (absent + 1) % C
    return F.numpy(), y.numpy()


@pytest.mark.parametrize(
    "N,D,C,seed,dead,absent,sign",
    [(60, 12, 4, 0, (), None, False), (80, 20, 5, 1, (0, 7, 19), 2, False),
     (45, 9, 3, 2, (4,), 0, True), (120, 16, 7, 3, (1, 2), 6, False)],
)
def test_against_naive_loop(N, D, C, seed, dead, absent, sign):
    F, y = sparse_features(N, D, C, seed, dead, absent, sign)
    out = interpretability(F, y, C)
    ref = naive(F, y, C)
    for k in ("sc", "se_sum", "se_mean", "se_freq", "act"):
        assert out[k] == pytest.approx(ref[k], abs=1e-6), k
    assert out["alive"] == ref["alive"] == D - len(dead)
    assert out["alive_frac"] == pytest.approx(ref["alive"] / D)
    pd = out["per_dim"]
    assert pd["active"].tolist() == [j not in dead for j in range(D)]
    np.testing.assert_allclose(pd["freq"], ref["freq"], atol=1e-12)
    for key in ("sc", "h_sum", "h_mean", "h_freq"):
        for j in range(D):
            if j in dead:
                assert math.isnan(pd[key][j])
            else:
                assert float(pd[key][j]) == pytest.approx(ref["per"][key][j], abs=1e-6), (key, j)


def test_class_dim_matrices_against_naive_loop():
    F, y = sparse_features(300, 30, 6, 5, sign=True)
    sums, counts = class_dim_matrices(F, y, 6)
    for c in range(6):
        rows = F[y == c].astype(np.float64)
        np.testing.assert_allclose(sums[c], np.abs(rows).sum(0), rtol=1e-12, atol=1e-12)
        assert counts[c].tolist() == (np.abs(rows) > EPS).sum(0).tolist()


def test_known_values():
    C, per = 4, 5
    y = np.repeat(np.arange(C), per)  # balanced, 20 samples
    N = len(y)
    F = np.zeros((N, 3), dtype=np.float32)
    F[y == 3, 0] = np.random.default_rng(0).random(per) + 0.5  # dim 0: only class 3
    F[:, 1] = 2.0  # dim 1: every sample, equal values
    # dim 2: dead
    out = interpretability(F, y, C)
    pd = out["per_dim"]
    assert pd["sc"][0] == 1.0 and pd["h_sum"][0] == 0 and pd["h_mean"][0] == 0 and pd["h_freq"][0] == 0
    assert pd["sc"][1] == pytest.approx(1 / C)
    for k in ("h_sum", "h_mean", "h_freq"):
        assert float(pd[k][1]) == pytest.approx(math.log(C), abs=1e-12)
        assert math.isnan(pd[k][2])
    assert out["alive"] == 2 and out["alive_frac"] == pytest.approx(2 / 3)
    assert out["sc"] == pytest.approx(100 * (1 + 1 / C) / 2)
    assert out["se_sum"] == pytest.approx(math.log(C) / 2)
    # Act: dim0 fires on 5/20 samples, dim1 on 20/20, dim2 on 0 -> 25 of 60 entries
    assert out["act"] == pytest.approx(100 * 25 / 60)
    assert pd["freq"].tolist() == pytest.approx([0.25, 1.0, 0.0])


def test_se_mean_reweights_by_class_size():
    # Dim fires with equal value on all 6 samples of class 0 and the 2 of class 1: SE-Sum sees 6:2,
    # SE-Mean sees 1:1 (ln 2); class 2 is absent and must not break the division.
    y = np.array([0] * 6 + [1] * 2)
    F = np.ones((8, 1), dtype=np.float32)
    out = interpretability(F, y, 3)
    assert out["se_mean"] == pytest.approx(math.log(2))
    assert out["se_sum"] == pytest.approx(-(0.75 * math.log(0.75) + 0.25 * math.log(0.25)))
    assert out["se_freq"] == pytest.approx(out["se_sum"])
    assert out["sc"] == pytest.approx(75.0)


def test_no_active_dim_is_nan_not_crash():
    out = interpretability(np.zeros((10, 4), dtype=np.float32), np.arange(10) % 2, 2)
    assert out["alive"] == 0 and out["alive_frac"] == 0 and out["act"] == 0
    for k in ("sc", "se_sum", "se_mean", "se_freq"):
        assert math.isnan(out[k])
    assert not out["per_dim"]["active"].any()


def test_eps_threshold_and_bad_labels():
    F = np.array([[1e-6, 1.0], [1e-6, 0.0]], dtype=np.float32)
    out = interpretability(F, np.array([0, 1]), 2)
    assert out["per_dim"]["active"].tolist() == [False, True]
    assert out["act"] == pytest.approx(25.0)
    with pytest.raises(ValueError):
        interpretability(F, np.array([0, 2]), 2)
    with pytest.raises(ValueError):
        interpretability(F, np.array([0]), 2)


def test_half_precision_input():
    F, y = sparse_features(50, 8, 3, 9)
    a = interpretability(F.astype(np.float16), y, 3)
    b = naive(F.astype(np.float16), y, 3)
    assert a["sc"] == pytest.approx(b["sc"], abs=1e-6)
    assert a["se_mean"] == pytest.approx(b["se_mean"], abs=1e-6)


def test_consistency_per_dim_matches_interpretability():
    F, y = sparse_features(70, 10, 4, 11, dead=(3,))
    v = consistency_per_dim(F, y, 4)
    ref = interpretability(F, y, 4)["per_dim"]["sc"]
    assert np.isnan(v).tolist() == np.isnan(ref).tolist() and np.isnan(v).sum() == 1
    np.testing.assert_array_equal(v[~np.isnan(v)], ref[~np.isnan(ref)])


def _naive_lift(F, labels, num_labels, eps=1e-5):
    """Lift of METHOD.md section 4, one dim and one label at a time."""
    n = len(labels)
    b = max(sum(1 for l in labels if l == c) for c in range(num_labels)) / n
    out = []
    for j in range(F.shape[1]):
        fired = [labels[i] for i in range(n) if abs(float(F[i, j])) > eps]
        if not fired:
            out.append(math.nan)
            continue
        sc = max(fired.count(c) for c in range(num_labels)) / len(fired)
        out.append((sc - b) / (1 - b))
    return out


def _hand_built():
    # 5 classes, 3 backgrounds with unequal base rates: background 0 is the majority (12 of 30 = 0.4),
    # as on the demo set, so raw background purity of an always-on dim is 0.4 > class purity 0.2.
    g = torch.Generator().manual_seed(0)
    y = torch.arange(30) % 5
    bg = torch.tensor([0] * 12 + [1] * 9 + [2] * 9)
    F = torch.zeros(30, 5)
    F[bg == 1, 0] = 1.0  # pure background: fires on background 1 only, every class
    F[y == 3, 1] = 2.0  # pure class: class 3 only, on every background
    F[:, 2] = 0.5  # always on
    F[:, 3] = (torch.rand(30, generator=g) < 0.5).float() * torch.rand(30, generator=g)  # random
    return F.numpy(), y.numpy(), bg.numpy()


def test_background_dominance_hand_built_dims():
    F, y, bg = _hand_built()
    out = background_dominance(F, y, bg, 5, 3)
    # dim 4 never fires: not active, counted as neither
    assert out["n_active"] == 4
    assert out["bg_dom"].tolist() == [True, False, False, False, False]
    assert out["cls_dom"].tolist()[:3] == [False, True, False] and not out["cls_dom"][4]
    # the always-on dim has lift 0 for both labels although its raw background purity (0.4) beats its class
    # purity (0.2): raw purity would have called it background-dominated
    assert out["bg_sc"][2] == pytest.approx(0.4) and out["cls_sc"][2] == pytest.approx(0.2)
    assert out["lift_bg"][2] == pytest.approx(0) and out["lift_cls"][2] == pytest.approx(0)
    assert out["lift_bg"][0] == pytest.approx(1) and out["lift_cls"][1] == pytest.approx(1)
    assert out["share"] == pytest.approx(1 / 4)
    assert math.isnan(background_dominance(np.zeros((30, 2)), y, bg, 5, 3)["share"])


def test_background_lift_matches_naive_loop():
    F, y = sparse_features(120, 24, 6, 5, dead=(3,), absent=None)
    bg = torch.randint(0, 4, (120,), generator=torch.Generator().manual_seed(1)).numpy()
    bg[:40] = 0  # an unequal base rate
    out = background_dominance(F, y, bg, 6, 4)
    for name, labels, k in (("lift_cls", y, 6), ("lift_bg", bg, 4)):
        ref = np.array(_naive_lift(F, labels.tolist(), k), dtype=np.float64)
        np.testing.assert_allclose(out[name], ref, rtol=1e-12, atol=1e-12, equal_nan=True)
    ok = np.isfinite(out["lift_cls"])
    naive_bg = [bool(ok[j]) and out["lift_bg"][j] > out["lift_cls"][j] and out["lift_bg"][j] > 0 for j in range(24)]
    assert out["bg_dom"].tolist() == naive_bg


def test_closed_gate_rate_matches_naive_loop():
    g = torch.Generator().manual_seed(2)
    zp = torch.relu(torch.randn(50, 7, generator=g))
    zp[:, 6] = 0  # never fires
    gate = (torch.rand(50, 7, generator=g) < 0.6).float()
    got = closed_gate_rate(zp.numpy(), gate.numpy())
    for j in range(6):
        fired = [i for i in range(50) if zp[i, j] > 1e-5]
        assert got[j] == pytest.approx(sum(1 for i in fired if gate[i, j] == 0) / len(fired))
    assert math.isnan(got[6])


def test_topk_binding_counts_removed_positive_entries():
    zp = torch.tensor([[3.0, 2.0, 1.0, 0.0], [0.0, 0.0, 5.0, 0.0], [1.0, 1.0, 0.0, 0.0]])
    from bayesncl.model.losses import topk_mask

    mask = topk_mask(zp, 2)
    r = topk_binding(zp.numpy(), mask.numpy())
    # row 0 loses one of three positive entries; rows 1 and 2 keep all theirs
    assert r["bound"] == pytest.approx(1 / 3) and r["removed"] == pytest.approx((1 / 3) / 3)
    never = topk_binding(zp.numpy(), topk_mask(zp, 3).numpy())
    assert never["bound"] == 0 and never["removed"] == 0
