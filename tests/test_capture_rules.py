"""What capturing the step in a CUDA graph (train.graph=cudagraph) needs of the trainer, tested on the CPU where
it can be (what cannot be is in docs/DESIGN.md, "The GPU path without a GPU"):

- every random number of the step comes from one generator (tests/test_fake_cuda.py's guard refuses a draw
  from a default generator), the same object for the whole run (a graph replays the generator it captured),
  re-seeded at each epoch start and its state saved at a preemption and restored on resume;
- each run reports its own peak memory;
- no host allocation or copy inside the step (tests/test_fake_cuda.py).
"""

import os
import signal

import pytest
import torch

import bayesncl.training.device as R
import bayesncl.training.train as T
from bayesncl.settings import config as C


def run(cfg, out, preempt_at=None):
    """pretrain, recording (generator object, its state) before every step; SIGTERM before step `preempt_at`."""
    seen = []
    real = T.TrainStep.__call__

    def step(self, x, gen, want_zplus=False):
        seen.append((gen, gen.get_state()))
        if len(seen) == preempt_at:
            os.kill(os.getpid(), signal.SIGTERM)
        return real(self, x, gen, want_zplus)

    mp = pytest.MonkeyPatch()
    mp.setattr(T.TrainStep, "__call__", step)
    try:
        T.pretrain(cfg, out, progress=False)
    finally:
        mp.undo()
    return seen


def test_the_steps_generator_is_reseeded_per_epoch_and_resumed_with_its_state(tmp_path, tiny_sets):
    """One generator object for all steps of a process; at each epoch start its state is a fresh generator's
    seeded with epoch_seed(seed, epoch); a run preempted mid-epoch resumes with the state the uninterrupted run
    had at that step (the state the step draws from, not a default generator's)."""
    cfg = C.resolve(sets=tiny_sets + ["method.name=bayesncl", "method.gate=gumbel", "train.max_steps_per_epoch=3",
                                      "train.epochs=2"])
    full = run(cfg, tmp_path / "full")
    assert len(full) == 6 and len({id(g) for g, _ in full}) == 1
    for epoch in (0, 1):
        fresh = torch.Generator().manual_seed(T.epoch_seed(cfg["seed"], epoch))
        assert torch.equal(full[3 * epoch][1], fresh.get_state())
    assert not torch.equal(full[1][1], full[0][1])  # the steps draw from it
    with pytest.raises(T.Preempted):
        run(cfg, tmp_path / "resumed", preempt_at=5)  # epoch 2, before its 2nd step: saved after step 5
    saved = torch.load(tmp_path / "resumed" / "checkpoint.pt", weights_only=True)
    assert saved["step"] == 2 and torch.equal(saved["rng"]["aug"], full[5][1])
    resumed = run(cfg, tmp_path / "resumed")
    assert len(resumed) == 1 and torch.equal(resumed[0][1], full[5][1])


def test_each_run_reports_its_own_peak_memory(tmp_path, tiny_sets, monkeypatch):
    """pretrain resets the peak-memory count before its first step (a process that runs several, the GPU check
    or a test session, else logs the highest peak so far); on CUDA that is torch's reset_peak_memory_stats."""
    resets = []
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device=None: resets.append(device))
    R.reset_peak_memory("cuda:0")
    R.reset_peak_memory("cpu")
    assert resets == [torch.device("cuda", 0)]

    events = []
    real_reset, real_step = T.reset_peak_memory, T.TrainStep.__call__
    monkeypatch.setattr(T, "reset_peak_memory", lambda device: (events.append(("reset", str(device))),
                                                                real_reset(device)))
    monkeypatch.setattr(T.TrainStep, "__call__",
                        lambda self, *a, **k: (events.append("step"), real_step(self, *a, **k))[1])
    cfg = C.resolve(sets=tiny_sets + ["method.name=ncl", "train.max_steps_per_epoch=1", "train.epochs=1"])
    T.pretrain(cfg, tmp_path / "a", progress=False)
    T.pretrain(cfg, tmp_path / "b", progress=False)
    assert events == [("reset", "cpu"), "step"] * 2


def test_lars_lists_every_device_tensor_it_holds_as_state():
    """Lars.state_tensors is what compile marks as static addresses on CUDA and what warm-up and capture put
    back: every tensor the optimizer holds besides the parameters must be in it (a tensor missing would be
    copied into the graph, or a changed one not restored)."""
    from bayesncl.model.methods import build_method
    from bayesncl.training.optim import build_optimizer

    cfg = C.resolve(sets=["model.width=4", "model.proj_hidden=32", "model.proj_dim=16", "method.name=bayesncl"])
    opt = build_optimizer(build_method(cfg), cfg)
    held = [v for v in vars(opt).values() if isinstance(v, torch.Tensor)]
    held += [t for v in vars(opt).values() if isinstance(v, list) and v and isinstance(v[0], torch.Tensor)
             and v is not opt._params for t in v]
    state = {id(t) for t in opt.state_tensors()}
    assert len(held) > len(opt._bufs) and all(id(t) in state for t in held)
