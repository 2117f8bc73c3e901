"""Losses and gates against naive transcriptions of METHOD.md section 1."""

import math

import pytest
import torch
import torch.nn.functional as F

from bayesncl.model import losses


def naive_info_nce(f1, f2, T):
    """Per-pair loop: -log exp(s(i, pos)/T) / sum_{k != i} exp(s(i, k)/T), averaged over 2N views."""
    views = [F.normalize(v, dim=0) for v in torch.cat([f1, f2]).double()]
    n2 = len(views)
    n = n2 // 2
    total = 0.0
    for i in range(n2):
        pos = (i + n) % n2
        num = math.exp(float(views[i] @ views[pos]) / T)
        den = sum(math.exp(float(views[i] @ views[k]) / T) for k in range(n2) if k != i)
        total += -math.log(num / den)
    return total / n2


@pytest.mark.parametrize("n,d,t", [(2, 3, 0.2), (5, 8, 0.5), (8, 16, 0.1), (3, 64, 1.0)])
def test_info_nce_matches_naive_loop(n, d, t):
    g = torch.Generator().manual_seed(n * 100 + d)
    f1, f2 = torch.randn(n, d, generator=g), torch.randn(n, d, generator=g)
    assert losses.info_nce(f1, f2, t).item() == pytest.approx(naive_info_nce(f1, f2, t), rel=1e-5, abs=1e-6)


def test_info_nce_is_stable_at_low_temperature():
    f = torch.randn(4, 8)
    assert torch.isfinite(losses.info_nce(f, f + 1e-3, 1e-3))


def test_ste_gate_forward_binary_backward_alpha():
    logits = torch.randn(6, 10, requires_grad=True)
    m, alpha = losses.gate_mask(logits, "ste", 1.0, training=True)
    assert set(m.detach().unique().tolist()) <= {0.0, 1.0}
    assert torch.equal(m.detach(), (alpha > 0.5).float())
    w = torch.randn(6, 10)
    (g_m,) = torch.autograd.grad((m * w).sum(), logits)
    logits2 = logits.detach().clone().requires_grad_(True)
    (g_a,) = torch.autograd.grad((torch.sigmoid(logits2) * w).sum(), logits2)
    assert torch.allclose(g_m, g_a)


def test_gumbel_gate_uses_noise_in_training_only():
    logits = torch.randn(4, 12, requires_grad=True)
    noise = losses.gumbel_noise(logits.shape, generator=torch.Generator().manual_seed(0))
    m, alpha = losses.gate_mask(logits, "gumbel", 0.7, training=True, noise=noise)
    noisy = torch.sigmoid((logits + noise) / 0.7)
    assert torch.equal(m.detach(), (noisy > 0.5).float())
    assert torch.allclose(alpha, torch.sigmoid(logits / 0.7))
    w = torch.randn(4, 12)
    (g,) = torch.autograd.grad((m * w).sum(), logits)
    l2 = logits.detach().clone().requires_grad_(True)
    (g_ref,) = torch.autograd.grad((torch.sigmoid((l2 + noise) / 0.7) * w).sum(), l2)
    assert torch.allclose(g, g_ref)
    m_eval, _ = losses.gate_mask(logits, "gumbel", 0.7, training=False)
    assert torch.equal(m_eval, (torch.sigmoid(logits / 0.7) > 0.5).float())


def test_gumbel_noise_is_standard_gumbel():
    g = losses.gumbel_noise((200_000,), generator=torch.Generator().manual_seed(3)).double()
    assert g.mean().item() == pytest.approx(0.5772, abs=0.01)  # Euler's gamma
    assert g.var().item() == pytest.approx(math.pi**2 / 6, abs=0.03)
    for x in (-1.0, 0.0, 1.0, 2.5):
        assert (g <= x).double().mean().item() == pytest.approx(math.exp(-math.exp(-x)), abs=0.005), x


@pytest.mark.parametrize("tau", [0.05, 1.0])
def test_gumbel_gate_open_rate_is_the_gumbel_tail(tau):
    # The gate opens when logit + G > 0, so over many draws its open rate is P(G > -logit) =
    # 1 - exp(-exp(logit)) at any tau (not sigmoid(logit): G is one Gumbel draw, not a logistic one).
    logits = torch.tensor([-2.0, -0.5, 0.0, 0.5, 1.5]).repeat(100_000, 1)
    torch.manual_seed(0)
    m, _ = losses.gate_mask(logits, "gumbel", tau, training=True)
    rate = m.mean(0).double()
    want = 1 - torch.exp(-torch.exp(logits[0].double()))
    assert torch.allclose(rate, want, atol=0.006), (rate, want)


def test_soft_gate_is_alpha():
    logits = torch.randn(3, 5, requires_grad=True)
    m, alpha = losses.gate_mask(logits, "soft", 2.0, training=True)
    assert torch.equal(m, alpha) and torch.allclose(alpha, torch.sigmoid(logits / 2.0))


def test_unknown_gate():
    with pytest.raises(ValueError, match="allowed"):
        losses.gate_mask(torch.zeros(1, 1), "hard", training=True)


@pytest.mark.parametrize("rho", [0.005, 0.3, 0.8, 0.999])
def test_kl_closed_form(rho):
    alpha = torch.rand(7, 9)
    alpha[0, 0], alpha[0, 1] = 0.0, 1.0  # exercise the clamp
    total = 0.0
    r = min(max(rho, 0.01), 0.99)
    for row in alpha.tolist():
        for a in row:
            a = min(max(a, 0.01), 0.99)
            total += a * math.log(a / r) + (1 - a) * math.log((1 - a) / (1 - r))
    assert losses.bernoulli_kl(alpha, rho).item() == pytest.approx(total / 7, rel=1e-5)
    assert losses.bernoulli_kl(torch.full((2, 3), r), rho).item() == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("k", [1, 3, 10])
def test_topk_keeps_exactly_k_per_row(k):
    x = torch.rand(20, 10)
    mask = losses.topk_mask(x, k)
    assert torch.all(mask.sum(1) == k)
    kept = (x * mask).masked_fill(mask == 0, float("inf")).min(1).values
    dropped = (x * (1 - mask)).masked_fill(mask == 1, float("-inf")).max(1).values
    assert torch.all(kept >= dropped)


def test_topk_mask_has_no_gradient():
    x = torch.rand(4, 6, requires_grad=True)
    assert not losses.topk_mask(x, 2).requires_grad


def test_rep_relu_forward_relu_backward_gelu():
    z = torch.randn(50, requires_grad=True)
    y = losses.rep_relu(z)
    assert torch.allclose(y, F.relu(z))
    (g,) = torch.autograd.grad(y.sum(), z)
    z2 = z.detach().clone().requires_grad_(True)
    (g_ref,) = torch.autograd.grad(F.gelu(z2).sum(), z2)
    assert torch.allclose(g, g_ref)


def test_normalize_matches_f_normalize_and_stops_gradient_of_zero_rows():
    z = torch.tensor([[-1.0, -2.0, -0.5, -3.0], [0.3, -1.0, 2.0, 0.1]], requires_grad=True)
    zp = losses.rep_relu(z)  # row 0 is all zero: its direction is undefined
    f = losses.normalize(zp)
    torch.testing.assert_close(f, torch.nn.functional.normalize(zp.detach(), dim=1))
    (f * torch.tensor([[1.0, 2.0, 3.0, 4.0]])).sum().backward()
    assert torch.isfinite(z.grad).all()
    assert torch.equal(z.grad[0], torch.zeros(4))  # plain F.normalize gives ~1e11 here
    assert z.grad[1].abs().sum() > 0


# ---- the single-node functions against their formulas under autograd (float64: rounding out of the way)


def _ref_normalize(x, eps=1e-12):
    y = F.normalize(x, dim=1, eps=eps)
    dead = torch.linalg.vector_norm(x.detach(), dim=1, keepdim=True) <= eps
    return torch.where(dead, y.detach(), y)


def _grads(fn, inputs, weight):
    xs = [x.detach().clone().requires_grad_(True) for x in inputs]
    out = fn(*xs)
    gs = torch.autograd.grad((out * weight).sum(), xs, allow_unused=True)
    return out.detach(), [torch.zeros_like(x) if g is None else g for x, g in zip(xs, gs)]


def _assert_same(fast, ref, inputs, weight, tol):
    (y, g), (y_ref, g_ref) = _grads(fast, inputs, weight), _grads(ref, inputs, weight)
    torch.testing.assert_close(y, y_ref, rtol=tol, atol=tol)
    for a, b in zip(g, g_ref):
        torch.testing.assert_close(a, b, rtol=tol, atol=tol)


def _nonneg_rows():
    g = torch.Generator().manual_seed(0)
    z = torch.randn(12, 9, generator=g, dtype=torch.float64)
    z[0] = -1.0  # a row with nothing active
    return torch.relu(z), g


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
def test_rep_relu_node_matches_its_formula(dtype, tol):
    z = torch.randn(40, 7, dtype=dtype)
    z[0, 0] = 0.0
    w = torch.randn(40, 7, dtype=dtype)
    _assert_same(losses.rep_relu, lambda v: (lambda g: g - g.detach() + F.relu(v).detach())(F.gelu(v)), [z], w, tol)


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
def test_normalize_node_matches_f_normalize_with_dead_rows(dtype, tol):
    x, g = _nonneg_rows()
    x = x.to(dtype)
    w = torch.randn(x.shape, generator=g).to(dtype)
    _assert_same(losses.normalize, _ref_normalize, [x], w, tol)


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
def test_gated_normalize_is_the_two_normalizations(dtype, tol):
    x, g = _nonneg_rows()
    m = (torch.rand(x.shape, generator=g, dtype=torch.float64) > 0.4).double()
    m[1] = 0.0  # every dim gated off: the outer normalization sees a zero row
    m[2] = (x[2] == 0).double()  # only inactive dims open: zero row again
    x, m = x.to(dtype), m.to(dtype)
    w = torch.randn(x.shape, generator=g).to(dtype)
    _assert_same(losses.gated_normalize, lambda a, b: _ref_normalize(_ref_normalize(a) * b), [x, m], w, tol)


def test_ste_node_matches_sg_hard_minus_alpha_plus_alpha():
    alpha = torch.rand(30, 8, dtype=torch.float64)
    alpha[0, :3] = torch.tensor([0.5, 0.5 + 1e-12, 0.0])
    w = torch.randn(30, 8, dtype=torch.float64)
    _assert_same(losses.ste_gate, lambda a: ((a > 0.5).to(a.dtype) - a).detach() + a, [alpha], w, 0.0)
    a32 = torch.rand(1000, dtype=torch.float32)  # sg[hard - a] + a is exactly the hard value in float32 too
    assert torch.equal(((a32 > 0.5).float() - a32) + a32, losses.ste_gate(a32))


@pytest.mark.parametrize("rho,weight", [(0.8, 1.0), (0.3, 3e-5), (0.999, 2.0)])
def test_kl_node_matches_the_formula_and_the_clamps_gradient(rho, weight):
    alpha = 0.02 + 0.96 * torch.rand(9, 11, dtype=torch.float64)  # inside the clamp range but for:
    alpha[0, :4] = torch.tensor([0.0, 0.01, 0.99, 1.0])  # outside and on the clamp's bounds
    alpha[1, :2] = torch.tensor([0.005, 0.995])

    def ref(a):
        c = a.clamp(0.01, 0.99)
        r = min(max(rho, 0.01), 0.99)
        return weight * (c * torch.log(c / r) + (1 - c) * torch.log((1 - c) / (1 - r))).sum(1).mean()

    def fast(a):
        return losses.bernoulli_kl(a, rho, weight=weight).double()

    # bernoulli_kl computes in float32 (alpha.float()), so compare at float32 rounding
    _assert_same(fast, ref, [alpha], torch.tensor(1.0, dtype=torch.float64), 1e-5)
    a = alpha.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(losses.bernoulli_kl(a, rho, weight), a)
    # clamped (outside or on the bounds, as torch.clamp): no gradient; inside: the slope logit(a) - logit(rho)
    assert (g[0, :4] == 0).all() and (g[1, :2] == 0).all()
    r = min(max(rho, 0.01), 0.99)
    inside = alpha[2:]
    slope = weight / 9 * (torch.log(inside / (1 - inside)) - math.log(r / (1 - r)))
    torch.testing.assert_close(g[2:], slope, rtol=1e-5, atol=1e-7)


def test_gumbel_from_uniform_is_the_spec_formula():
    u = torch.rand(1000, dtype=torch.float64)
    ref = -torch.log(-torch.log(u + losses.GUMBEL_EPS) + losses.GUMBEL_EPS)
    torch.testing.assert_close(losses.gumbel_from_uniform(u), ref, rtol=0, atol=1e-15)
