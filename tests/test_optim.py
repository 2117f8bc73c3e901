"""The multi-tensor LARS against timm's Lars and against the released LARS transcribed from docs/METHOD.md
section 2, its state, and the released warm-up + cosine schedule per parameter group as a device table."""

import copy
import math

import pytest
import torch
from timm.optim import Lars as TimmLars
from torch.utils._python_dispatch import TorchDispatchMode

from bayesncl.settings import config as C
from bayesncl.model.methods import build_method
from bayesncl.training.optim import Lars, build_optimizer, group_peaks, lr_at, lr_schedule, peak_lr, set_lr

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
    """Where no norm is zero, the released LARS and timm's agree (zero norms: the next test)."""
    a, b = params(), params()
    ref = TimmLars(groups(a, head_group), lr=0.3, foreach=foreach, **KW)
    ours = Lars(groups(b, head_group), lr=0.3, **KW)
    g = torch.Generator().manual_seed(1)
    worst = 0.0
    for step in range(300):
        lr = 0.4 * (0.5 + 0.5 * torch.rand((), generator=g).item())
        for p, q in zip(a, b):
            grad = torch.randn(p.shape, generator=g) * (0.1 if step % 5 == 0 else 0.01)
            p.grad, q.grad = grad.clone(), grad.clone()
        set_lr(ref, lr)
        ref.step()
        ours.step(lr=torch.tensor(lr))
        worst = max(worst, max(float((p - q).detach().abs().max()) for p, q in zip(a, b)))
    assert max(float(p.abs().max()) for p in a) > 1.0  # the parameters moved at their own scale
    assert worst <= 1e-6, worst


def released_lars_step(ps, grads, bufs, group_of, groups_, lrs, eta=0.02, momentum=0.9, eps=1e-8):
    """The released LARS (clip_lr, exclude_bias_n_norm), one parameter at a time, transcribed from
    docs/METHOD.md section 2: a tensor whose weight or gradient norm is 0 gets neither weight decay nor the trust
    ratio; a 1-D tensor neither. `lrs[i]` is group i's lr."""
    with torch.no_grad():
        for p, g, i in zip(ps, grads, group_of):
            wd, lr = groups_[i]["weight_decay"], lrs[i]
            d = g.clone()
            pn, gn = float(p.norm()), float(g.norm())
            if p.ndim > 1 and pn != 0 and gn != 0:
                r = min(eta * pn / (gn + pn * wd + eps) / lr, 1.0)
                d = (g + wd * p) * r
            if id(p) not in bufs:
                bufs[id(p)] = d.clone()
            else:
                bufs[id(p)] = momentum * bufs[id(p)] + d
            p -= lr * bufs[id(p)]


def test_lars_follows_the_released_zero_norm_rule():
    """A zero gradient and a zero weight: the update is the plain gradient step (timm would add wd p)."""
    a, b = params(), params()
    with torch.no_grad():
        a[5].zero_()  # a zero weight tensor (its gradient is not zero)
        b[5].zero_()
    gs = groups(a, True, mult=1.0)
    ours = Lars(groups(b, True, mult=1.0), lr=0.3, **KW)
    group_of = [next(i for i, g in enumerate(gs) if any(p is q for q in g["params"])) for p in a]
    bufs, lrs = {}, [0.3, 0.3, 0.1, 0.1]
    g = torch.Generator().manual_seed(3)
    for step in range(6):
        grads = [torch.randn(p.shape, generator=g) * 0.05 for p in a]
        if step in (1, 4):
            grads[0] = torch.zeros_like(grads[0])  # a zero gradient of a weight-decayed tensor
        released_lars_step(a, grads, bufs, group_of, gs, lrs)
        order = [next(i for i, p in enumerate(b) if p is q) for q in ours.params]  # update's parameter order
        ours.update([grads[i].clone() for i in order], torch.tensor(lrs))
        for p, q in zip(a, b):
            torch.testing.assert_close(q, p, rtol=0, atol=1e-6)
    # the rule matters: weight decay on the zero-gradient tensor would have moved it differently
    timm_like = params()
    ref = TimmLars(groups(timm_like, True), lr=0.3, **KW)
    for p in timm_like:
        p.grad = torch.zeros_like(p) if p is timm_like[0] else torch.randn(p.shape) * 0.05
    ref.step()
    fresh = params()
    mine = Lars(groups(fresh, True), lr=0.3, **KW)
    grads = [torch.zeros_like(fresh[0])] + [q.grad.clone() for q in timm_like[1:]]
    mine.update([grads[next(i for i, p in enumerate(fresh) if p is q)] for q in mine.params], torch.tensor(0.3))
    assert torch.equal(fresh[0], params()[0])  # released: no gradient, no weight decay: unchanged
    assert not torch.equal(timm_like[0], params()[0])  # timm: moved by its weight decay


def test_per_group_lr_vector_equals_group_lr_entries():
    """update(grads, lr) with one lr per group (the trainer's path) equals each group's "lr" entry (timm's)."""
    a, b = params(), params()
    by_entry, by_vector = Lars(groups(a, True, mult=1.0), lr=0.3, **KW), Lars(groups(b, True, mult=1.0), lr=0.3, **KW)
    lrs = [0.2, 0.2, 0.05, 0.05]
    for _ in range(4):
        for p, q in zip(a, b):
            p.grad = torch.randn(p.shape)
            q.grad = p.grad.clone()
        for grp, lr in zip(by_entry.param_groups, lrs):
            grp["lr"] = lr
        by_entry.step()
        by_vector.update([q.grad for q in by_vector.params], torch.tensor(lrs))
    assert all(torch.equal(p, q) for p, q in zip(a, b))


def test_a_step_not_skipped_on_the_skip_path_is_the_plain_step():
    """update(..., skip=False) (the fp16 scaler's path) moves weights and momentum exactly as update(...) does,
    also once the momentum buffers are non-zero."""
    a, b = params(), params()
    plain, scaled = Lars(groups(a, True), lr=0.3, **KW), Lars(groups(b, True), lr=0.3, **KW)
    lrs = torch.tensor([0.2, 0.2, 0.05, 0.05])
    for _ in range(3):
        for p, q in zip(a, b):
            p.grad = torch.randn(p.shape)
            q.grad = p.grad.clone()
        plain.update([p.grad for p in plain.params], lrs)
        scaled.update([q.grad for q in scaled.params], lrs, skip=torch.tensor(False))
    for p, q in zip(a, b):
        torch.testing.assert_close(q, p, rtol=1e-6, atol=0.0)
    for x, y in zip(plain._bufs, scaled._bufs):
        torch.testing.assert_close(y, x, rtol=1e-6, atol=0.0)


def test_a_groups_lr_mult_scales_the_per_group_lr_vector():
    """lr_mult 0.25 on the head groups with one lr per group is the same step as lr_mult 1 and the head's lr
    already multiplied (the mult multiplies, never divides)."""
    a, b = params(), params()
    mult, ones = Lars(groups(a, True, mult=0.25), lr=0.3, **KW), Lars(groups(b, True, mult=1.0), lr=0.3, **KW)
    lrs = torch.tensor([0.2, 0.2, 0.08, 0.08])
    for _ in range(2):
        for p, q in zip(a, b):
            p.grad = torch.randn(p.shape)
            q.grad = p.grad.clone()
        mult.update([p.grad for p in mult.params], lrs)
        ones.update([q.grad for q in ones.params], lrs * torch.tensor([1.0, 1.0, 0.25, 0.25]))
    for p, q in zip(a, b):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=0.0)


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
                          "train.epochs=3", "train.warmup_epochs=1", "train.batch_size=128"])
    model = build_method(cfg)
    opt = build_optimizer(model, cfg)
    head = {id(p) for p in model.gate_head.parameters()}
    for g in opt.param_groups:
        for p in g["params"]:  # every parameter, not only each group's first
            assert g["weight_decay"] == (cfg["train"]["weight_decay"] if p.ndim > 1 else 0.0)
            assert (id(p) in head) == (id(g["params"][0]) in head)
        # the gating head's peak is absolute (0.1, as released), the rest scaled by batch / 256
        assert g["peak_lr"] == (0.1 if id(g["params"][0]) in head else 0.4 * 128 / 256)
    assert len(opt.params) == len(list(model.parameters()))
    table = lr_schedule(7, cfg["train"])
    assert table.dtype == torch.float32 and table.shape == (21,)
    assert table.tolist() == pytest.approx([lr_at(s, 7, cfg["train"]) for s in range(21)], rel=1e-6)
    per_group = lr_schedule(7, cfg["train"], peaks=group_peaks(opt))
    assert per_group.shape == (21, len(opt.param_groups))
    for j, g in enumerate(opt.param_groups):
        assert per_group[:, j].tolist() == pytest.approx([lr_at(s, 7, cfg["train"], g["peak_lr"]) for s in range(21)],
                                                         rel=1e-6)


@pytest.mark.parametrize("peak", [0.2, 0.1], ids=["main", "gating head"])
def test_warmup_and_cosine_as_released(peak):
    """pl_bolts LinearWarmupCosineAnnealingLR, stepped per iteration, written out: s0 + t (peak - s0) / (W - 1)
    over the W warm-up steps (every group starts at s0 = 3e-5), then peak/2 (1 + cos(pi (t - W) / (T - W)))."""
    t = {"epochs": 5, "warmup_epochs": 2, "warmup_start_lr": 3e-5, "base_lr": 0.4, "batch_size": 128}
    spe, W, T, s0 = 4, 8, 20, 3e-5
    assert lr_at(0, spe, t, peak) == pytest.approx(s0, rel=1e-12)  # first warm-up step
    assert lr_at(1, spe, t, peak) == pytest.approx(s0 + (peak - s0) / (W - 1), rel=1e-12)
    assert lr_at(W - 1, spe, t, peak) == pytest.approx(peak, rel=1e-12)  # last warm-up step: the peak
    assert lr_at(W, spe, t, peak) == pytest.approx(peak, rel=1e-12)  # the cosine's first step
    assert lr_at(W + 3, spe, t, peak) == pytest.approx(0.5 * peak * (1 + math.cos(math.pi * 3 / (T - W))), rel=1e-12)
    assert lr_at(T - 1, spe, t, peak) == pytest.approx(0.5 * peak * (1 + math.cos(math.pi * (T - 1 - W) / (T - W))))
    assert peak_lr(t) == pytest.approx(0.2)
    # one warm-up step: W - 1 = 0, pl_bolts' max(1, W - 1) keeps s0 at step 0
    assert lr_at(0, 1, {**t, "warmup_epochs": 1}, peak) == pytest.approx(s0)


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
    from bayesncl.training.optim import peak_lr

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
    """docs/METHOD.md section 2, written out: linear warm-up from s0 reaching the peak at iteration W - 1
    (pl_bolts' max(1, W - 1)), then cosine to 0."""
    if t < W:
        return s0 + (peak - s0) * t / max(1, W - 1)
    return 0.5 * peak * (1 + math.cos(math.pi * (t - W) / (S - W)))


@pytest.mark.parametrize("warmup,steps", [(0, 7), (2, 7), (1, 2), (1, 1)])  # W = 2: the peak at its step 1
def test_lr_schedule_is_the_spec(warmup, steps):
    train = {"base_lr": 0.4, "batch_size": 128, "epochs": 5, "warmup_epochs": warmup, "warmup_start_lr": 3e-5}
    W, S, peak = warmup * steps, 5 * steps, 0.4 * 128 / 256
    want = [spec_lr(t, W, S, peak, 3e-5) for t in range(S)]
    assert [lr_at(t, steps, train) for t in range(S)] == pytest.approx(want, rel=1e-12, abs=1e-15)
    assert lr_schedule(steps, train).tolist() == pytest.approx(want, rel=1e-6)
    assert max(want) == pytest.approx(peak) and 0 < want[-1]  # reaches the peak
    assert steps < 7 or want[-1] < 0.01 * peak  # and decays to about 0 (a long enough schedule)
