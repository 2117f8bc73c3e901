import math

import numpy as np
import pytest
import torch

from bayesncl.measures.dynamics import GradientStats, spearman_table


def test_gradient_stats_vs_numpy():
    g = torch.Generator().manual_seed(0)
    D = 7
    st = GradientStats(D)
    zs, means = [], []
    for B in (8, 8, 6, 8, 4):  # a ragged last batch is allowed
        z = torch.relu(torch.randn(B, D, generator=g))
        gr = torch.randn(B, D, generator=g) * 1e-4 + 3e-3  # small, offset: stresses cancellation
        st.update(z, gr)
        zs.append(z.numpy())
        means.append(gr.double().numpy().mean(0))
    out = st.result()
    Z = np.concatenate(zs)
    assert out["n_iters"] == 5 and out["n_views"] == len(Z)
    np.testing.assert_allclose(out["af"].numpy(), (Z > 1e-5).mean(0), atol=1e-15)
    np.testing.assert_allclose(out["gv"].numpy(), np.var(np.stack(means), axis=0), rtol=1e-9, atol=0)


def test_gradient_stats_reset_empty_and_shape():
    st = GradientStats(3)
    assert all(math.isnan(v) for v in st.result()["gv"])
    st.update(torch.ones(2, 3), torch.ones(2, 3))
    assert st.result()["gv"].tolist() == [0.0, 0.0, 0.0]  # one iteration: zero variance
    assert st.result()["af"].tolist() == [1.0, 1.0, 1.0]
    st.reset()
    assert st.n_iters == 0 and st.n_views == 0
    with pytest.raises(ValueError):
        st.update(torch.ones(2, 4), torch.ones(2, 4))


def test_spearman_signs_and_nan():
    x = np.arange(10.0)
    t = spearman_table(af=x, gv=x**2, sc=-x)
    assert t["af_gv"] == pytest.approx(1.0)
    assert t["gv_sc"] == pytest.approx(-1.0)
    assert t["af_sc"] == pytest.approx(-1.0)
    assert t["n_dims"] == 10
    # NaN SC (dead dims) are dropped; the rest are still perfectly monotone
    sc = torch.tensor(-x)
    sc[[0, 4]] = float("nan")
    t = spearman_table(torch.tensor(x), torch.tensor(np.exp(x)), sc)
    assert t["n_dims"] == 8 and t["gv_sc"] == pytest.approx(-1.0) and t["af_gv"] == pytest.approx(1.0)
    # fewer than 3 finite dims -> NaN everywhere
    sc = torch.full((10,), float("nan"))
    sc[:2] = 1.0
    assert all(math.isnan(v) for k, v in spearman_table(x, x, sc).items() if k != "n_dims")
    # constant input -> NaN, no warning escaping
    assert math.isnan(spearman_table(x, np.ones(10), x)["af_gv"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gradient_stats_cuda():
    g = torch.Generator().manual_seed(5)
    zs = [torch.relu(torch.randn(6, 4, generator=g)) for _ in range(4)]
    gs = [torch.randn(6, 4, generator=g) for _ in range(4)]
    a, b = GradientStats(4), GradientStats(4)
    for z, gr in zip(zs, gs):
        a.update(z, gr)
        b.update(z.cuda(), gr.cuda())
    ra, rb = a.result(), b.result()
    torch.testing.assert_close(rb["af"], ra["af"])
    torch.testing.assert_close(rb["gv"], ra["gv"])
