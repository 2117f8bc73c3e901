import numpy as np
import pytest
import torch

from bayesncl.measures.arrays import default_Ks, retrieval_curve, retrieval_precision, select_dims


def naive_precision(F, y, ks, K=None):
    """METHOD.md section 5 literally, in numpy, one query at a time."""
    F = np.asarray(F, dtype=np.float64)
    F = F / np.maximum(np.linalg.norm(F, axis=1, keepdims=True), 1e-12)
    if K is not None and K < F.shape[1]:
        keep = np.argsort(-F.sum(0), kind="stable")[:K]
        F = F[:, keep]
        F = F / np.maximum(np.linalg.norm(F, axis=1, keepdims=True), 1e-12)
    N = len(F)
    out = {k: 0.0 for k in ks}
    for i in range(N):
        sims = [(F[i] @ F[j], j) for j in range(N) if j != i]
        order = [j for _, j in sorted(sims, key=lambda t: -t[0])]
        for k in ks:
            out[k] += np.mean([y[j] == y[i] for j in order[:k]])
    return {f"p@{k}": v / N for k, v in out.items()}


def test_tight_clusters_are_perfect():
    g = torch.Generator().manual_seed(0)
    C, per, D = 5, 12, 16
    centers = torch.rand(C, D, generator=g) * 5
    y = torch.arange(C).repeat_interleave(per)
    F = centers[y] + 0.01 * torch.rand(C * per, D, generator=g)
    out = retrieval_precision(F, y)
    assert out == {"p@1": 1.0, "p@3": 1.0, "p@5": 1.0, "p@10": 1.0}


def test_query_is_excluded():
    # Each sample's only exact duplicate carries a different label; without the exclusion the query
    # itself would be its nearest neighbour and P@1 would be 1.
    g = torch.Generator().manual_seed(1)
    base = torch.randn(20, 8, generator=g).abs()
    F = torch.cat([base, base])
    y = torch.cat([torch.zeros(20), torch.ones(20)]).long()
    assert retrieval_precision(F, y, ks=(1,))["p@1"] == 0.0


def test_known_neighbours():
    # 1-D directions on the quarter circle: the neighbours are the adjacent angles.
    ang = torch.tensor([0.0, 0.1, 0.2, 1.0, 1.1, 1.2])
    F = torch.stack([ang.cos(), ang.sin()], 1)
    y = torch.tensor([0, 0, 1, 1, 1, 0])
    # P@1: 0->1 (same), 1->0 or 2 (0.1 each; sim tie), 2->1 (diff), 3->4 (same), 4->3/5 tie, 5->4 (diff)
    out = retrieval_precision(F, y, ks=(2,))
    # top-2: 0:{1,2} 1/2; 1:{0,2} 1/2; 2:{1,0} 0; 3:{4,5} 1/2; 4:{3,5} 1/2; 5:{4,3} 0
    assert out["p@2"] == pytest.approx((0.5 + 0.5 + 0 + 0.5 + 0.5 + 0) / 6)


@pytest.mark.parametrize("K", [None, 3, 7])
def test_matches_naive_and_chunking(K):
    g = torch.Generator().manual_seed(2)
    F = (torch.rand(90, 12, generator=g) ** 2).numpy()  # dense, so no exact similarity ties
    y = torch.randint(0, 4, (90,), generator=g).numpy()
    ks = (1, 3, 5, 10)
    ref = naive_precision(F, y, ks, K)
    full = retrieval_precision(F, y, ks, K=K, chunk_size=10_000)
    for c in (1, 7, 32):
        assert retrieval_precision(F, y, ks, K=K, chunk_size=c) == pytest.approx(full, abs=1e-12)
    assert full == pytest.approx(ref, abs=1e-9)


def test_select_dims_keeps_largest_mass():
    F = np.zeros((4, 5), dtype=np.float32)
    F[:, 3] = 10.0  # largest normalised mass
    F[:, 1] = 5.0
    F[:, 4] = 1.0
    F[0, 0] = 0.1
    X, idx = select_dims(F, 2)
    assert idx.tolist() == [3, 1]
    np.testing.assert_allclose(np.linalg.norm(X, axis=1), np.ones(4), rtol=1e-6)
    kept = F[:, [3, 1]]
    np.testing.assert_allclose(X, kept / np.linalg.norm(kept, axis=1, keepdims=True), rtol=1e-6)
    Xall, idxall = select_dims(F, None)
    assert idxall.tolist() == list(range(5)) and Xall.shape == (4, 5)
    assert select_dims(F, 99)[0].shape == (4, 5)


def test_select_dims_ranks_after_normalising():
    # Raw column sums favour dim 0 (one huge sample), normalised sums favour dim 1.
    F = np.array([[100.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
    assert select_dims(F, 1)[1].tolist() == [1]


def test_k_capped_and_zero_rows():
    F = np.array([[1.0, 0.0], [0.0, 0.0], [1.0, 0.1]])
    out = retrieval_precision(F, np.array([0, 1, 0]), ks=(1, 10))
    assert out["p@10"] == pytest.approx((1 / 2 + 0 + 1 / 2) / 3)
    assert all(np.isfinite(v) for v in out.values())


def test_curve_and_default_Ks():
    assert default_Ks(2048) == [32, 64, 128, 256, 512]
    assert default_Ks(256) == [32, 64, 128, 256]
    assert default_Ks(100) == [32, 64, 100]
    assert default_Ks(16) == [16]
    g = torch.Generator().manual_seed(3)
    F = torch.relu(torch.randn(40, 64, generator=g))
    y = torch.randint(0, 3, (40,), generator=g)
    curve = retrieval_curve(F, y, [32, 64], k=5)
    assert set(curve) == {32, 64}
    assert curve[64] == pytest.approx(retrieval_precision(F, y, ks=(5,))["p@5"])
