"""The multi-tensor LARS against timm's Lars, its state, and the lr schedule as a device table."""

import copy
import math

import pytest
import torch
from timm.optim import Lars as TimmLars
from torch.utils._python_dispatch import TorchDispatchMode

from bayesncl import config as C
from bayesncl.methods import build_method
from bayesncl.optim import Lars, build_optimizer, lr_at, lr_schedule, set_lr

SHAPES = [(16, 8), (16,), (4, 3, 3, 3), (4,), (4,), (32, 16), (32,), (8, 32), (8,)]


def params(seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g).requires_grad_(True) for s in SHAPES]


def groups(ps, head_group: bool, mult=0.25):
    """The trainer's layout: weights with weight decay (LARS-scaled), 1-D without; optionally a gating-head
    pair of groups with its own lr multiplier."""
    body, head = (ps[:5], ps[5:]) if head_group else (ps, [])
    out = [{"params": [p for p in body if p.ndim > 1], "weight_decay": 1e-4, "lr_mult": 1.0},
           {"params": [p for p in body if p.ndim <= 1], "weight_decay": 0.0, "lr_mult": 1.0}]
    if head:
        out += [{"params": [p for p in head if p.ndim > 1], "weight_decay": 1e-4, "lr_mult": mult},
                {"params": [p for p in head if p.ndim <= 1], "weight_decay": 0.0, "lr_mult": mult}]
    return out


KW = dict(momentum=0.9, trust_coeff=0.02, trust_clip=True)


@pytest.mark.parametrize("head_group", [False, True], ids=["one lr", "gate head lr"])
@pytest.mark.parametrize("foreach", [False, True], ids=["timm per-parameter", "timm foreach"])
def test_lars_equals_timm_over_many_steps(head_group, foreach):
    a, b = params(), params()
    ref = TimmLars(groups(a, head_group), lr=0.3, foreach=foreach, **KW)
    ours = Lars(groups(b, head_group), lr=0.3, **KW)
    g = torch.Generator().manual_seed(1)
    worst = 0.0
    for step in range(300):
        lr = 0.4 * (0.5 + 0.5 * torch.rand((), generator=g).item())
        for p, q in zip(a, b):
            grad = torch.randn(p.shape, generator=g) * (0.1 if step % 5 == 0 else 0.01)
            if step == 7:
                grad = torch.zeros_like(grad)  # a zero gradient: trust ratio 1, as in timm
            p.grad, q.grad = grad.clone(), grad.clone()
        set_lr(ref, lr)
        ref.step()
        ours.step(lr=torch.tensor(lr))
        worst = max(worst, max(float((p - q).detach().abs().max()) for p, q in zip(a, b)))
    assert max(float(p.abs().max()) for p in a) > 1.0  # the parameters moved at their own scale
    assert worst <= 1e-6, worst


def test_group_lrs_and_lr_tensor_agree():
    a, b = params(), params()
    by_group, by_tensor = Lars(groups(a, True), lr=0.3, **KW), Lars(groups(b, True), lr=0.3, **KW)
    for _ in range(5):
        for p, q in zip(a, b):
            p.grad = torch.randn(p.shape)
            q.grad = p.grad.clone()
        set_lr(by_group, 0.2)
        by_group.step()
        by_tensor.update([q.grad for q in by_tensor.params], torch.tensor(0.2))
    assert all(torch.equal(p, q) for p, q in zip(a, b))


def test_the_head_multiplier_reaches_the_head_only():
    """At an lr below the trust ratio (clipping at 1) every step is lr x d: the head's is 0.25 x the same
    group's at multiplier 1; the other groups' are unchanged."""
    a, b = params(), params()
    one, quarter = Lars(groups(a, True, mult=1.0), lr=0.3, **KW), Lars(groups(b, True, mult=0.25), lr=0.3, **KW)
    for p, q in zip(a, b):
        p.grad = torch.randn(p.shape)
        q.grad = p.grad.clone()
    before = [p.detach().clone() for p in a]
    one.step(lr=torch.tensor(0.005))
    quarter.step(lr=torch.tensor(0.005))
    for i, (p, q, p0) in enumerate(zip(a, b, before)):
        if i < 5:
            assert torch.equal(p, q)
        else:
            torch.testing.assert_close(q - p0, 0.25 * (p - p0), rtol=1e-3, atol=1e-6)


class _Count(TorchDispatchMode):
    n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.n += 1
        return func(*args, **(kwargs or {}))


def test_one_step_dispatches_the_same_ops_for_any_number_of_parameters():
    """Multi-tensor: no per-parameter op (timm's per-parameter path dispatches ~10 per parameter)."""
    counts = []
    for n in (3, 30):
        ps = [torch.randn(5, 4).requires_grad_(True) for _ in range(n)] + [torch.randn(4).requires_grad_(True)]
        opt = Lars([{"params": ps[:-1], "weight_decay": 1e-4}, {"params": ps[-1:], "weight_decay": 0.0}], lr=0.1, **KW)
        for p in ps:
            p.grad = torch.randn(p.shape)
        opt.step(lr=torch.tensor(0.1))  # warm-up
        with _Count() as c:
            opt.update([p.grad for p in opt.params], torch.tensor(0.1))
        counts.append(c.n)
    assert counts[0] == counts[1] < 40, counts


def test_state_dict_resumes_exactly():
    a, b = params(), params()
    first = Lars(groups(a, True), lr=0.3, **KW)
    g = torch.Generator().manual_seed(0)
    grads = [[torch.randn(s, generator=g) for s in SHAPES] for _ in range(6)]
    for step in range(3):
        for p, gr in zip(a, grads[step]):
            p.grad = gr.clone()
        first.step(lr=torch.tensor(0.1))
    resumed = Lars(groups(b, True), lr=0.3, **KW)
    with torch.no_grad():
        for p, q in zip(a, b):
            q.copy_(p)
    resumed.load_state_dict(copy.deepcopy(first.state_dict()))  # as through a checkpoint file
    for step in range(3, 6):
        for opt, ps in ((first, a), (resumed, b)):
            for p, gr in zip(ps, grads[step]):
                p.grad = gr.clone()
            opt.step(lr=torch.tensor(0.1))
    assert all(torch.equal(p, q) for p, q in zip(a, b))


def test_loads_a_timm_lars_state_dict():
    """A checkpoint written with timm's Lars (the trainer's optimizer before) resumes with this one."""
    a, b = params(), params()
    ref = TimmLars(groups(a, False), lr=0.3, **KW)
    for p in a:
        p.grad = torch.randn(p.shape)
    ref.step()
    ours = Lars(groups(b, False), lr=0.3, **KW)
    ours.load_state_dict(ref.state_dict())
    for p, q in zip(a, b):
        torch.testing.assert_close(ours.state[q]["momentum_buffer"], ref.state[p]["momentum_buffer"])


def test_build_optimizer_groups_and_lr_schedule_table():
    cfg = C.resolve(sets=["model.width=4", "model.proj_hidden=16", "model.proj_dim=8", "method.name=bayesncl",
                          "train.epochs=3", "train.warmup_epochs=1"])
    model = build_method(cfg)
    opt = build_optimizer(model, cfg)
    head = {id(p) for p in model.gate_head.parameters()}
    for g in opt.param_groups:
        assert g["weight_decay"] == (cfg["train"]["weight_decay"] if g["params"][0].ndim > 1 else 0.0)
        assert g["lr_mult"] == (cfg["method"]["head_lr_mult"] if id(g["params"][0]) in head else 1.0)
    assert len(opt.params) == len(list(model.parameters()))
    table = lr_schedule(7, cfg["train"])
    assert table.dtype == torch.float32 and table.shape == (21,)
    assert table.tolist() == pytest.approx([lr_at(s, 7, cfg["train"]) for s in range(21)], rel=1e-6)


def test_every_parameter_needs_a_gradient():
    ps = params()
    opt = Lars(groups(ps, False), lr=0.1, **KW)
    for p in ps[1:]:
        p.grad = torch.randn(p.shape)
    with pytest.raises((TypeError, RuntimeError)):
        opt.step()


@pytest.mark.parametrize("method", ["ncl", "bayesncl"])
def test_every_1d_parameter_gets_no_weight_decay(method):
    """Each parameter of the model is in exactly one group; every 1-D one (bias, norm) in a group without weight
    decay, every other one with the configured weight decay (not just each group's first parameter)."""
    cfg = C.resolve(sets=["model.width=4", "model.proj_hidden=16", "model.proj_dim=8", f"method.name={method}"])
    model = build_method(cfg)
    wd_of: dict[int, list[float]] = {}
    for g in build_optimizer(model, cfg).param_groups:
        for p in g["params"]:
            wd_of.setdefault(id(p), []).append(g["weight_decay"])
    named = list(model.named_parameters())
    assert set(wd_of) == {id(p) for _, p in named} and all(len(v) == 1 for v in wd_of.values())
    assert sum(p.ndim == 1 for _, p in named) > 2 and sum(p.ndim > 1 for _, p in named) > 2
    assert cfg["train"]["weight_decay"] > 0
    for name, p in named:
        assert wd_of[id(p)] == [0.0 if p.ndim <= 1 else cfg["train"]["weight_decay"]], name


def test_peak_lr_scales_base_lr_with_the_batch():
    """docs/METHOD.md section 2: peak = base_lr x batch / 256."""
    from bayesncl.optim import peak_lr

    assert peak_lr({"base_lr": 0.4, "batch_size": 512}) == pytest.approx(0.8)
    assert peak_lr({"base_lr": 0.3, "batch_size": 128}) == pytest.approx(0.15)


def _step_both(ours, ref, a, b, grads, lr):
    for ga in grads:
        for p, q, g in zip(a, b, ga):
            p.grad, q.grad = g.clone(), g.clone()
        if lr is None:
            ref.step()
            ours.step()
        else:
            set_lr(ref, lr)
            ref.step()
            ours.step(lr=torch.tensor(lr))


@pytest.mark.parametrize("lr", [None, 0.5], ids=["groups' lr", "lr tensor"])
def test_default_hyperparameters_are_timms(lr):
    """Constructed with the parameters alone (timm's defaults: lr 1, no momentum, no weight decay), and with only
    a weight decay (trust coefficient 0.001, eps 1e-8, no clipping): the same steps as timm's Lars. Gradients
    small against the weights (trust ratio above 1, where clipping would bind), and weights small enough for eps
    to count."""
    g = torch.Generator().manual_seed(3)
    # (settings, weight scale, gradient scale); the last: weights of norm ~1e-3, so eps is ~10% of the denominator
    for kw, w, scale in (({}, 1.0, 1e-2), ({"weight_decay": 1e-4}, 1.0, 1e-5), ({"weight_decay": 1e-4}, 1e-4, 1e-10)):
        a, b = params(), params()
        with torch.no_grad():
            for p, q in zip(a, b):
                p.mul_(w)
                q.mul_(w)
        ours, ref = Lars(b, **kw), TimmLars(a, **kw)
        before = [q.detach().clone() for q in b]
        grads = [[torch.randn(s, generator=g) * scale for s in SHAPES] for _ in range(3)]
        _step_both(ours, ref, a, b, grads, lr)
        for p, q, q0 in zip(a, b, before):  # the updates, relative: some are far below the weights' rounding
            torch.testing.assert_close(q - q0, p.detach() - q0, rtol=1e-4, atol=0.0)
            assert not torch.equal(q, q0)


def test_zero_lr_momentum_and_weight_decay_are_allowed_and_negative_ones_are_not():
    Lars(params(), lr=0.0, momentum=0.0, weight_decay=0.0)
    for key in ("lr", "momentum", "weight_decay"):
        with pytest.raises(ValueError, match=key.replace("_", "[_ ]").replace("lr", "learning rate")):
            Lars(params(), **{key: -0.1})


def test_loads_a_timm_state_dict_saved_before_its_first_step():
    """timm creates momentum buffers on the first step: a state saved before has none, and resuming from it
    starts them at zero (the first step then sets them to d, as timm's clone)."""
    a, b = params(), params()
    ref = TimmLars(groups(a, True), lr=0.3, **KW)
    ours = Lars(groups(b, True), lr=0.3, **KW)
    ours.load_state_dict(copy.deepcopy(ref.state_dict()))
    g = torch.Generator().manual_seed(5)
    _step_both(ours, ref, a, b, [[torch.randn(s, generator=g) * 0.01 for s in SHAPES] for _ in range(3)], 0.2)
    for p, q in zip(a, b):
        torch.testing.assert_close(q, p.detach(), rtol=1e-6, atol=1e-7)


def test_runs_of_distinct_weight_decays_and_a_single_parameter_equal_timm():
    """Adapted groups with different weight decays (runs of one and of two parameters), and an optimizer over
    one parameter: each parameter gets its own group's weight decay, as in timm."""
    g = torch.Generator().manual_seed(7)
    for layout in ("runs", "single"):
        a, b = params(), params()
        if layout == "runs":
            make = lambda ps: [{"params": [ps[0]], "weight_decay": 1e-4},  # noqa: E731
                               {"params": [ps[2], ps[5]], "weight_decay": 5e-3},
                               {"params": [ps[7]], "weight_decay": 1e-3},
                               {"params": [ps[1], ps[3]], "weight_decay": 0.0}]
        else:
            make = lambda ps: [ps[0]]  # noqa: E731
        ours, ref = Lars(make(b), lr=0.3, **KW), TimmLars(make(a), lr=0.3, **KW)
        grads = [[torch.randn(s, generator=g) * 0.05 for s in SHAPES] for _ in range(4)]
        _step_both(ours, ref, a, b, grads, 0.2)
        for p, q in zip(a, b):
            torch.testing.assert_close(q, p.detach(), rtol=1e-6, atol=1e-7)
        assert not torch.equal(b[0], params()[0])


def test_step_returns_the_closures_loss():
    ps = params()
    opt = Lars(groups(ps, False), lr=0.1, **KW)
    for p in ps:
        p.grad = torch.randn(p.shape)
    assert opt.step() is None
    assert opt.step(lambda: torch.is_grad_enabled() and 1.5) == 1.5  # called with gradients enabled


def test_build_optimizer_settings_come_from_the_config():
    """LARS with trust clipping (docs/METHOD.md section 2), the config's momentum and trust coefficient, peak lr."""
    cfg = C.resolve(sets=["model.width=4", "model.proj_hidden=16", "model.proj_dim=8", "method.name=ncl",
                          "train.batch_size=512", "train.momentum=0.8", "train.trust_coeff=0.005"])
    opt = build_optimizer(build_method(cfg), cfg)
    for group in opt.param_groups:
        assert group["trust_clip"] is True and not group["always_adapt"]
        assert (group["momentum"], group["trust_coeff"]) == (0.8, 0.005)
        assert group["lr"] == pytest.approx(cfg["train"]["base_lr"] * 2)


def spec_lr(t: int, W: int, S: int, peak: float, s0: float) -> float:
    """docs/METHOD.md section 2, written out: linear warm-up from s0 over W iterations, then cosine to 0."""
    if t < W:
        return s0 + (peak - s0) * t / W
    return 0.5 * peak * (1 + math.cos(math.pi * (t - W) / (S - W)))


@pytest.mark.parametrize("warmup", [0, 2])
def test_lr_schedule_is_the_spec(warmup):
    train = {"base_lr": 0.4, "batch_size": 128, "epochs": 5, "warmup_epochs": warmup, "warmup_start_lr": 3e-5}
    steps = 7
    W, S, peak = warmup * steps, 5 * steps, 0.4 * 128 / 256
    want = [spec_lr(t, W, S, peak, 3e-5) for t in range(S)]
    assert [lr_at(t, steps, train) for t in range(S)] == pytest.approx(want, rel=1e-12, abs=1e-15)
    assert lr_schedule(steps, train).tolist() == pytest.approx(want, rel=1e-6)
    assert max(want) == pytest.approx(peak) and 0 < want[-1] < 0.01 * peak  # reaches the peak, decays to ~0
