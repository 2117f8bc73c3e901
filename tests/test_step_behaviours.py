"""The training step's newest behaviours, each with a test that fails when it is broken (every one
of these bugs, planted alone, once passed the whole default suite):

- the real fp16 scaler unscales the extra gradient it checks (dL/dz+, read by the gradient dynamics);
- a resumed scaler gets its growth tracker back, not only its scale;
- the trainer passes an overflowed step's skip to LARS (no momentum applied);
- the trainer's lr table has each group's own peak (the gating head at its absolute 0.1);
- evaluation BatchNorm's running statistics are put back when the pass raises, not only on a clean exit;
- the probes' h is computed with running statistics whatever eval.bn says.
"""

import pytest
import torch

import bayesncl.training.train as T
from bayesncl.settings import config as C
from bayesncl.data import SimCLRAugment
from bayesncl.model.methods import build_method
from bayesncl.training.optim import build_optimizer, lr_at
from bayesncl.training.loss_scaler import LossScaler
from bayesncl.training.embed import bn_mode

CPU = torch.device("cpu")
SETS = ["data.synthetic.image_size=16", "model.width=4", "model.proj_hidden=32", "model.proj_dim=16",
        "train.batch_size=16", "train.epochs=2", "train.threads=1", "method.name=bayesncl", "method.gate=gumbel"]


def make_step(extra=()):
    cfg = C.resolve(sets=SETS + list(extra))
    torch.manual_seed(0)
    model = build_method(cfg).train()
    step = T.TrainStep(model, build_optimizer(model, cfg), SimCLRAugment(16, (0.5,) * 3, (0.25,) * 3), cfg, CPU, 4)
    step.start(0)
    return step, cfg


def batch():
    return torch.randint(0, 256, (16, 3, 16, 16), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))


def test_the_real_scaler_unscales_the_extra_gradient_it_checks():
    """Under fp16 the loss is multiplied by the scale; the parameters' gradients and dL/dz+ come back divided
    by it (dL/dz+ x 2^16 would be the gradient dynamics' GV scaled by 2^32)."""
    s = LossScaler(CPU, real=True)
    scale = LossScaler.INIT
    grads, extra = s.check([torch.full((3,), 3.0 * scale)], [torch.full((2,), 5.0 * scale), torch.full((1,), scale)])
    assert torch.equal(grads[0], torch.full((3,), 3.0))
    assert torch.equal(extra[0], torch.full((2,), 5.0)) and torch.equal(extra[1], torch.ones(1))
    emulated = LossScaler(CPU, real=False)  # nothing scaled: the extra gradient as it came
    _, extra = emulated.check([torch.ones(3)], [torch.full((2,), 5.0)])
    assert torch.equal(extra[0], torch.full((2,), 5.0))


def test_the_dynamics_gradient_is_the_same_with_the_real_scaler_as_without():
    """End to end: the fp16 step's dL/dz+ with the real scaler (loss x 2^4, gradients / 2^4) equals the same
    step's with the loss not scaled (the emulated scaler), up to fp16 rounding."""
    x = batch()
    got = []
    for real in (True, False):
        step, _ = make_step(["train.precision=fp16", "train.loss_scaler=fp16"])
        step.scaler.real = real
        step.scaler.scale.fill_(16.0)  # this tiny model's fp16 backward overflows at 2^16
        _, grad = step(x, torch.Generator().manual_seed(1), want_zplus=True)
        got.append(grad)
    assert got[1].abs().max() > 0 and torch.isfinite(got[0]).all()
    torch.testing.assert_close(got[0], got[1], rtol=1e-2, atol=1e-2 * float(got[1].abs().max()))


def test_a_resumed_scaler_keeps_its_growth_tracker():
    """The scale doubles after INTERVAL steps in a row without an overflow, counted across a resume: a scaler
    saved 2 steps into a 3-step interval and loaded grows at the same step as one never saved."""
    a = LossScaler(CPU, real=False)
    for _ in range(2):
        a.update()
    b = LossScaler(CPU, real=False)
    b.load_state_dict(a.state_dict())
    assert int(b.tracker[0]) == 2 and float(b.scale[0]) == LossScaler.INIT
    for s in (a, b):
        torch._amp_update_scale_(s.scale, s.tracker, s.found, s.GROWTH, s.BACKOFF, 3)  # the 3rd step of 3
    assert float(a.scale[0]) == float(b.scale[0]) == 2 * LossScaler.INIT


def test_an_overflowed_step_moves_no_weight_and_no_momentum():
    """A taken step (momentum buffers no longer zero), then a step forced to overflow: the skip reaches LARS,
    so weights and momentum stay exactly as they were (momentum x 0.9 with zero gradients would move both)."""
    step, _ = make_step(["train.loss_scaler=fp16", "train.warmup_epochs=0"])
    x, gen = batch(), torch.Generator().manual_seed(1)
    step.scaler.scale.fill_(1.0)  # this step is taken
    step(x, gen)
    assert float(step.sums[-1]) == 0  # taken
    assert any(b.abs().sum() > 0 for b in step.opt._bufs)
    params = [p.detach().clone() for p in step.opt.params]
    bufs = [b.clone() for b in step.opt._bufs]
    step.scaler.scale.fill_(2.0 ** 60)  # any gradient times this passes fp16's largest value
    step(x, gen)
    assert float(step.sums[-1]) == 1  # skipped
    assert all(torch.equal(a, b) for a, b in zip(params, step.opt.params))
    assert all(torch.equal(a, b) for a, b in zip(bufs, step.opt._bufs))


def test_the_step_gives_each_group_its_own_peak_lr():
    """The lr LARS gets at each step: the scaled base lr for the model's groups, the gating head's absolute
    method.head_lr (0.1 as released) for its groups, both on the same warm-up and cosine."""
    step, cfg = make_step(["train.warmup_epochs=1", "train.base_lr=4"])  # main peak 4 x 16 / 256 = 0.25; 4 steps
    step.scaler.scale.fill_(1.0)  # no step skipped (a skip leaves the lr it gets unchanged anyway)
    seen = []
    real = step.opt.update
    step.opt.update = lambda grads, lr, skip=None: (seen.append(lr.clone()), real(grads, lr, skip))
    x, gen = batch(), torch.Generator().manual_seed(1)
    for _ in range(4):
        step(x, gen)
    names = [g["name"] for g in step.opt.param_groups]
    assert {n.split("_no")[0] for n in names} == {"main", "gate_head"}
    for t, lr in enumerate(seen):
        assert lr.shape == (len(names),)
        for name, got in zip(names, lr.tolist()):
            peak = 0.1 if name.startswith("gate_head") else 0.25
            assert got == pytest.approx(lr_at(t, 4, cfg["train"], peak), rel=1e-6), (t, name)
    assert seen[3][names.index("gate_head")] == pytest.approx(0.1)  # the warm-up's last step: the peaks
    assert seen[3][names.index("main")] == pytest.approx(0.25)


def test_bn_mode_restores_running_statistics_when_the_pass_raises():
    """An evaluation pass that fails half-way (out of memory, a bad file) leaves the model's saved BatchNorm
    statistics and its training flag as they were."""
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4)).train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(RuntimeError, match="half-way"):
        with bn_mode(model, "batch"):
            model(torch.randn(8, 3, 6, 6) * 5 + 3)  # batch statistics: the running ones move
            assert not torch.equal(model[1].running_mean, before["1.running_mean"])
            raise RuntimeError("half-way")
    assert model.training
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())


@pytest.mark.parametrize("bn", ["batch", "running"])
def test_the_probes_h_uses_running_statistics_whatever_eval_bn_says(tmp_path, monkeypatch, bn):
    """The features section's cached h (the fast linear and background probes read it) and the paper probe's
    test h: BatchNorm in eval mode (the released linear probe), even with eval.bn=batch; the other cached
    arrays with eval.bn."""
    import bayesncl.evaluation.probe as P
    import bayesncl.training.embed as R
    from bayesncl.data import load_split
    from bayesncl.evaluation import sections

    cfg = C.resolve(sets=SETS + ["data.synthetic.train_size=40", "data.synthetic.test_size=24", f"eval.bn={bn}",
                                 "eval.probe_epochs=1", "eval.batch_size=16"])
    model = build_method(cfg)
    test, train = load_split(cfg["data"], "test"), load_split(cfg["data"], "train")
    real_embed, calls = R.embed, []

    def embed(model, ds, cfg, device, key="feature", bn=None):
        calls.append(((key,) if isinstance(key, str) else tuple(key), bn or cfg["eval"]["bn"]))
        return real_embed(model, ds, cfg, device, key=key, bn=bn)

    class Ctx:  # what the features section reads of an EvaluationContext
        def __init__(self):
            self.cfg, self.run_dir, self.stored_config, self.saved = cfg, tmp_path, {}, {}

        def split(self, name):
            return {"test": test, "train": train}[name]

        def embed(self, ds, keys, bn):
            return embed(model, ds, cfg, CPU, key=keys, bn=bn)

        labels = staticmethod(lambda ds: {"labels": ds.labels.numpy()})

        def save_arrays(self, name, arrays):
            self.saved[name] = arrays

    (tmp_path / "log.jsonl").write_text("")
    ctx = Ctx()
    sections.features(ctx)
    monkeypatch.setattr(R, "embed", embed)
    P.linear_probe_paper(model, train, test, cfg, CPU, progress=False)
    with_h = [mode for keys, mode in calls if "h" in keys]
    assert len(with_h) == 2 + sections._needs_train_h(cfg) and set(with_h) == {"running"}
    assert {mode for keys, mode in calls if "h" not in keys} <= {bn}
    # and the cached h is the model's h in eval mode
    ref = real_embed(model, test, cfg, CPU, key="h", bn="running")[0].numpy()
    assert (ctx.saved["features"]["h"] == ref).all()
