"""One training step (`TrainStep`, docs/METHOD.md section 2) as bayesncl.training.train runs it.

The step is a function of device tensors only: the lr comes from a device table indexed by a device step
counter, the logged values are summed on the device and read at epoch ends, every batch has the same shape (the
last partial batch is dropped), and all its random numbers come from one generator. So `train.graph` can run it
eagerly, compile it whole (torch.compile, fullgraph) or capture it in a CUDA graph.
"""

from __future__ import annotations

import torch

from ..core.errors import ConfigError
from ..data import SimCLRAugment
from ..model.methods import Method
from .optim import Lars, group_peaks, lr_schedule
from .loss_scaler import LossScaler
from .device import autocast, channels_last

COMPILE_BACKEND = "inductor"  # torch.compile's backend for train.graph=compile


def snapshot(tensors: list[torch.Tensor]):
    """Copies of `tensors`; the returned function writes them back in place (a step undone)."""
    saved = [t.detach().clone() for t in tensors]

    def restore() -> None:
        with torch.no_grad():
            for t, v in zip(tensors, saved):
                t.copy_(v)
    return restore


def compile_mode(device: torch.device) -> str | None:
    """torch.compile's mode for the step: CUDA graphs around inductor's code on a GPU ("reduce-overhead"), none
    elsewhere (the CPU has no graphs; other backends take no mode)."""
    return "reduce-overhead" if device.type == "cuda" and COMPILE_BACKEND == "inductor" else None


def check_graph(cfg: dict, device: torch.device) -> None:
    """train.graph=cudagraph on the device train.device resolved to (auto: CPU on a machine without CUDA)."""
    if cfg["train"]["graph"] == "cudagraph" and device.type != "cuda":
        raise ConfigError("train.graph: 'cudagraph' needs a CUDA device; use 'compile' or 'eager' on CPU")


class TrainStep:
    """One training step on device tensors: two augmented views, forward, loss, backward, LARS update, and the
    running sums of the logged values; no host sync and the same shapes every step.

    `train.graph` decides how it runs: "eager"; "compile" the step without its random draws as one
    torch.compile graph (fullgraph; CUDA graphs too on CUDA), the draws (a few generator calls) made eagerly
    and passed in; "cudagraph" draws and step captured together in one CUDA graph (the generator registered
    with it) and replayed. The global step counter `t` and the sums are device tensors; the lr of step t is
    `lr_table[t]`.
    """

    def __init__(self, model: Method, opt: Lars, augment: SimCLRAugment, cfg: dict, device: torch.device,
                 steps: int):
        self.model, self.opt, self.augment, self.device = model, opt, augment.to(device), device
        self.mode = cfg["train"]["graph"]
        check_graph(cfg, device)
        self.precision = cfg["train"]["precision"]
        self.channels_last = channels_last(cfg, device)
        # The released fp16 loss scaler: real under fp16, emulated otherwise; "skipped" logs its skips.
        self.scaler = (LossScaler(device, real=self.precision == "fp16")
                       if cfg["train"]["loss_scaler"] == "fp16" else None)
        self.names = ("loss", "infonce", *model.extra_names, *model.stat_names,
                      *(("skipped",) if self.scaler else ()))
        self.lr_table = lr_schedule(steps, cfg["train"], device, peaks=group_peaks(opt))  # (steps, groups)
        self.t = torch.zeros(1, dtype=torch.long, device=device)
        self.sums = torch.zeros(len(self.names), dtype=torch.float64, device=device)
        self._compiled = self._graph = None
        self.warm = self.mode == "eager"  # compiled or captured yet (warm_up); eager has nothing to prepare
        if self.mode == "compile":
            static = [self.t, self.sums, self.lr_table, *opt.state_tensors(), *self._scaler_tensors()]
            if device.type == "cuda":
                for x in static:  # state the step mutates or reads: fixed addresses for CUDA graphs
                    torch._dynamo.mark_static_address(x)
            compiled = torch.compile(self.body, fullgraph=True, dynamic=False, backend=COMPILE_BACKEND,
                                     mode=compile_mode(device))
            # torch.autograd.grad inside the compiled step: traced into the graph instead of a graph break.
            self._compiled = torch._dynamo.config.patch(trace_autograd_ops=True)(compiled)

    def _scaler_tensors(self) -> list[torch.Tensor]:
        return self.scaler.state_tensors() if self.scaler else []

    def state_tensors(self) -> list[torch.Tensor]:
        """Every tensor a step changes: weights, BatchNorm statistics, optimizer and loss-scaler state, the step
        counter and the running sums (what warm-up and capture put back)."""
        return [*self.model.parameters(), *self.model.buffers(), *self.opt.state_tensors(), *self._scaler_tensors(),
                self.t, self.sums]

    def start(self, t: int, sums: list[float] | None = None) -> None:
        """Set the global step counter and the epoch's running sums (zero, or those of a resumed epoch)."""
        self.t.fill_(t)
        if sums is None:
            self.sums.zero_()
        else:
            self.sums.copy_(torch.tensor(sums, dtype=torch.float64))

    def read_epoch(self) -> tuple[list[float], float | None]:
        """The running sums and the loss scale (None without the scaler) on the host: one copy, one wait for
        the device, at an epoch's end or a preemption."""
        vals = self.sums if self.scaler is None else torch.cat([self.sums, self.scaler.scale.double()])
        out = vals.tolist()
        return (out, None) if self.scaler is None else (out[:-1], out[-1])

    def draws(self, batch: int, gen: torch.Generator) -> tuple[list, torch.Tensor | None]:
        """Every random number of a step, from `gen`: each view's augmentation draws, the gate's uniforms."""
        views = [self.augment.draw(batch, self.device, gen) for _ in range(2)]
        shape = self.model.gate_draws(2 * batch)
        return views, (torch.rand(shape, generator=gen, device=self.device) if shape else None)

    def body(self, x: torch.Tensor, views: list, gate_u: torch.Tensor | None, want_zplus: bool = False):
        """The step given its draws. Returns (z+, dL/dz+) when `want_zplus` (gradient dynamics), else None.
        Its phases are methods so that the benchmarks time and count the very same calls."""
        lr, v = self.inputs(x, views)
        loss, parts, out = self.forward(v, gate_u)
        grads = self.backward(loss, [out["zplus"]] if want_zplus else [])
        extra = self.update(grads, lr)
        self.log(loss, parts, out)
        return (out["zplus"].detach().float(), extra[0].float()) if want_zplus else None

    def inputs(self, x: torch.Tensor, views: list) -> tuple[torch.Tensor, torch.Tensor]:
        """This step's lr (one per parameter group) and the two augmented views."""
        lr = self.lr_table.index_select(0, self.t)[0]
        v = self.augment.views(x, views)
        if self.channels_last:
            v = v.contiguous(memory_format=torch.channels_last)
        return lr, v

    def forward(self, v: torch.Tensor, gate_u: torch.Tensor | None):
        with autocast(self.device, self.precision, cache=self.mode != "cudagraph"):
            loss, parts = self.model.views_loss(v, gate_u)
        return loss, parts, parts.pop("out")

    def backward(self, loss: torch.Tensor, extra: list[torch.Tensor]) -> tuple:
        """Gradients of the (scaled) loss for every parameter, then for each tensor of `extra`."""
        return torch.autograd.grad(self.scaler.scaled(loss) if self.scaler else loss, [*self.opt.params, *extra])

    def update(self, grads: tuple, lr: torch.Tensor) -> list[torch.Tensor]:
        """The LARS update (skipped where the loss scaler finds an overflow); returns the extra gradients."""
        n = len(self.opt.params)
        grads, extra = grads[:n], list(grads[n:])
        if self.scaler:
            grads, extra = self.scaler.check(grads, extra)
            self.opt.update(grads, lr, skip=self.scaler.found[0] > 0)
        else:
            self.opt.update(grads, lr)
        return extra

    def log(self, loss: torch.Tensor, parts: dict, out: dict) -> None:
        """Add the step's logged values to the epoch's sums; the loss scaler's next scale; the step counter."""
        stats = self.model.stats(out)
        vals = [loss, parts["infonce"], *(parts[k] for k in self.model.extra_names),
                *(stats[k] for k in self.model.stat_names), *((self.scaler.found[0],) if self.scaler else ())]
        self.sums.add_(torch.stack(vals).detach().double())
        if self.scaler:
            self.scaler.update()
        self.t.add_(1)

    def __call__(self, x: torch.Tensor, gen: torch.Generator, want_zplus: bool = False):
        if self.mode == "cudagraph" and not want_zplus:
            if self._graph is None:
                self._capture(x, gen)
            elif gen is not self._gen:
                raise ValueError("a captured step replays the draws of the generator it was captured with")
            self._static_x.copy_(x)
            self._graph.replay()
            return None
        views, gate_u = self.draws(x.shape[0], gen)
        if self._compiled is not None and not want_zplus:
            return self._compiled(x, views, gate_u)
        return self.body(x, views, gate_u, want_zplus)

    def warm_up(self, x: torch.Tensor, gen: torch.Generator) -> None:
        """Compile (train.graph=compile) or capture (cudagraph) the step before the first timed step, so that
        the trainer can keep that time out of `epoch_seconds`: steps on the batch `x`, then every tensor they
        changed and the generators put back, so the run's steps are unchanged."""
        if self.warm:
            return
        self.warm = True
        if self.mode == "cudagraph":
            self._capture(x, gen)
            return
        restore = snapshot(self.state_tensors())
        gen_state, global_state = gen.get_state(), torch.get_rng_state()
        for _ in range(3 if self.device.type == "cuda" else 1):  # CUDA graphs (reduce-overhead) record on call 2
            views, gate_u = self.draws(x.shape[0], gen)
            self._compiled(x, views, gate_u)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        restore()
        gen.set_state(gen_state)
        torch.set_rng_state(global_state)

    def _eager(self, x: torch.Tensor, gen: torch.Generator) -> None:
        views, gate_u = self.draws(x.shape[0], gen)
        self.body(x, views, gate_u)

    def _capture(self, x: torch.Tensor, gen: torch.Generator) -> None:
        """Capture draws + step in a CUDA graph. Two warm-up steps first (lazy initialisation, autotuning) on a
        side stream; everything they changed is put back, so the run's steps are unchanged."""
        restore = snapshot(self.state_tensors())
        gen_state = gen.get_state()
        self._static_x = x.clone()
        graph = torch.cuda.CUDAGraph()
        graph.register_generator_state(gen)
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(2):
                self._eager(self._static_x, gen)
        torch.cuda.current_stream(self.device).wait_stream(side)
        # thread_local: a DataLoader's pin-memory thread may call CUDA while this thread captures
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            self._eager(self._static_x, gen)
        restore()
        gen.set_state(gen_state)
        self._graph, self._gen = graph, gen
