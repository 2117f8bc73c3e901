"""LARS (multi-tensor), its parameter groups, and the warm-up + cosine schedule (docs/METHOD.md section 2)."""

from __future__ import annotations

import math

import torch

from ..model.methods import Method


def peak_lr(train_cfg: dict) -> float:
    return train_cfg["base_lr"] * train_cfg["batch_size"] / 256


class Lars(torch.optim.Optimizer):
    """timm's `Lars` (SGD momentum with LARC trust-ratio scaling and clipping) over every parameter group at
    once with `torch._foreach_*` ops: no per-parameter or per-group Python loop in `step`, no host sync, and
    the momentum buffers exist from construction (zero), so that a step can be captured in a graph.

    Per parameter p with gradient g in a group with weight decay wd, trust coefficient eta and lr:
        adapt (wd != 0 or always_adapt) and |p| > 0 and |g| > 0:
                 r = eta |p| / (|g| + wd |p| + eps); with trust_clip r = min(r / lr, 1); d = (g + wd p) r
        otherwise d = g  (as the released LARS: a zero weight or gradient norm gets neither weight decay nor
                 the trust ratio; timm's would still add wd p)
        buf = momentum buf + d (buf = d on the first step: a zero buffer gives exactly that)
        p -= lr buf
    `step(lr=...)`/`update(grads, lr)` take the lr as a device tensor: 0-d, each group's lr being lr x its
    `lr_mult` (default 1); or 1-D with one lr per parameter group (the trainer's per-group schedule, x lr_mult).
    The groups' "lr" entries are then not read. Without it, each group's "lr" entry is used, as in timm.
    Differences to timm: no dampening or Nesterov (the method uses neither); every parameter must have a
    gradient when `step` runs; hyperparameters other than lr are read at construction and after
    `load_state_dict` (call `refresh()` after changing them in `param_groups`).
    """

    def __init__(self, params, lr: float = 1.0, momentum: float = 0.0, weight_decay: float = 0.0,
                 trust_coeff: float = 0.001, eps: float = 1e-8, trust_clip: bool = False,
                 always_adapt: bool = False):
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if momentum < 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        defaults = dict(lr=lr, momentum=momentum, weight_decay=weight_decay, trust_coeff=trust_coeff, eps=eps,
                        trust_clip=trust_clip, always_adapt=always_adapt, lr_mult=1.0)
        super().__init__(params, defaults)
        for group in self.param_groups:
            for p in group["params"]:
                self.state[p]["momentum_buffer"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        self.refresh()

    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict(state_dict)
        for group in self.param_groups:  # a state saved before its first step has no buffers yet
            for p in group["params"]:
                self.state[p].setdefault("momentum_buffer", torch.zeros_like(p, memory_format=torch.preserve_format))
        self.refresh()

    def refresh(self) -> None:
        """Flatten the groups into per-parameter lists and vectors (read by every step). The LARS-adapted
        parameters come first, then the others."""
        flat = [(g, p, i) for i, g in enumerate(self.param_groups) for p in g["params"]]
        adapted = lambda g: g["weight_decay"] != 0 or g["always_adapt"]  # noqa: E731
        flat.sort(key=lambda gp: not adapted(gp[0]))  # stable: group order kept
        self._group_of = [i for _, _, i in flat]
        flat = [(g, p) for g, p, _ in flat]
        self._params = [p for _, p in flat]
        self._bufs = [self.state[p]["momentum_buffer"] for p in self._params]
        self._n_adapt = sum(adapted(g) for g, _ in flat)
        dev = self._params[0].device if self._params else torch.device("cpu")

        def vec(key, items):
            return torch.tensor([float(g.get(key, 1.0)) for g, _ in items], dtype=torch.float32, device=dev)

        ad = flat[: self._n_adapt]
        self._wd_vec, self._eta, self._eps = vec("weight_decay", ad), vec("trust_coeff", ad), vec("eps", ad)
        self._clip = torch.tensor([bool(g["trust_clip"]) for g, _ in ad], dtype=torch.bool, device=dev)
        self._mult = vec("lr_mult", flat)
        self._gidx = torch.tensor(self._group_of, dtype=torch.long, device=dev)
        self._momentum = [float(g["momentum"]) for g, _ in flat]
        self._mom_vec = vec("momentum", flat)  # the skip path's: built here, not per step (a host copy)

    def state_tensors(self) -> list[torch.Tensor]:
        """The tensors a step reads or writes besides the parameters (momentum buffers, per-parameter settings)."""
        return [*self._bufs, self._wd_vec, self._eta, self._eps, self._clip, self._mult, self._gidx, self._mom_vec]

    @property
    def params(self) -> list[torch.Tensor]:
        """Every parameter, in the order `update` takes their gradients."""
        return self._params

    @torch.no_grad()
    def step(self, closure=None, lr: torch.Tensor | None = None):
        """Update from each parameter's .grad (the torch.optim interface); see `update`."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if self._params:
            self.update([p.grad for p in self._params], lr)
        return loss

    @torch.no_grad()
    def update(self, grads: list[torch.Tensor] | tuple, lr: torch.Tensor | None = None,
               skip: torch.Tensor | None = None) -> None:
        """One LARS step with `grads` (one per parameter of `params`, in that order). `lr`: a 0-d tensor, each
        group's lr being lr x its lr_mult; a 1-D tensor: one lr per parameter group (x its lr_mult); None: the
        groups' "lr" entries. `skip`: a 0-d bool tensor; where true, weights and momentum stay exactly as they
        were (a step the loss scaler skips; `grads` must then be finite, e.g. zeros)."""
        params, na = self._params, self._n_adapt
        if lr is None:  # the groups' own lr entries (timm's interface; not the trainer's path)
            lrs = torch.tensor([float(self.param_groups[i]["lr"]) for i in self._group_of], dtype=torch.float32,
                               device=self._mult.device)
        elif lr.ndim == 0:
            lrs = lr.to(torch.float32) * self._mult
        else:
            lrs = lr.to(torch.float32).index_select(0, self._gidx) * self._mult
        grads = list(grads)

        # LARS-adapted parameters: d = (g + wd p) r, the trust ratios of all of them as one vector.
        d = []
        if na:
            pa, ga = params[:na], grads[:na]
            w = torch.stack(torch._foreach_norm(pa))
            g = torch.stack(torch._foreach_norm(ga))
            ok = (w > 0) & (g > 0)  # the released rule: otherwise d = g (no weight decay, no trust ratio)
            ratio = self._eta * w / (g + w * self._wd_vec + self._eps)
            ratio = torch.where(self._clip, torch.clamp(ratio / lrs[:na], max=1.0), ratio)
            ratio = torch.where(ok, ratio, 1.0)
            wd = torch.where(ok, self._wd_vec, 0.0)
            d += torch._foreach_add(ga, torch._foreach_mul(pa, wd.unbind(0)))  # g + wd p, wd per parameter
            torch._foreach_mul_(d, ratio.unbind(0))
        d += grads[na:]  # the others: d = g

        bufs = self._bufs
        if skip is None:
            torch._foreach_mul_(bufs, self._momentum)  # a zero buffer (first step) becomes d, as timm's clone
            torch._foreach_add_(bufs, d)
            torch._foreach_addcmul_(params, bufs, lrs.neg().unbind(0))
            return
        # A skipped step multiplies the buffers by 1, adds 0 and moves the weights by 0 x lr: all exact.
        momentum = torch.where(skip, 1.0, self._mom_vec)
        torch._foreach_mul_(bufs, momentum.unbind(0))
        torch._foreach_add_(bufs, torch._foreach_mul(d, torch.where(skip, 0.0, 1.0)))
        torch._foreach_addcmul_(params, bufs, torch.where(skip, 0.0, lrs).neg().unbind(0))


def build_optimizer(model: Method, cfg: dict) -> Lars:
    """LARS with trust_clip; 1-D parameters (biases, norms) get no weight decay, which (as in the released LARS
    with exclude_bias_n_norm) also means no trust-ratio scaling. Each group records its peak lr ("peak_lr"):
    the scaled base lr for the model, `method.head_lr` (absolute, as released) for the gating head."""
    t = cfg["train"]
    groups = []
    peaks = {"main": peak_lr(t), "gate_head": cfg["method"]["head_lr"]}
    for name, params in model.param_groups().items():
        decay = [p for p in params if p.ndim > 1]
        no_decay = [p for p in params if p.ndim <= 1]
        for suffix, ps, wd in (("", decay, t["weight_decay"]), ("_no_decay", no_decay, 0.0)):
            if ps:
                groups.append({"params": ps, "weight_decay": wd, "lr": peaks[name], "peak_lr": peaks[name],
                               "name": name + suffix})
    return Lars(groups, lr=peak_lr(t), momentum=t["momentum"], trust_coeff=t["trust_coeff"], trust_clip=True)


def lr_at(step: int, steps_per_epoch: int, train_cfg: dict, peak: float | None = None) -> float:
    """The released schedule (pl_bolts LinearWarmupCosineAnnealingLR stepped per iteration) for a group whose
    peak lr is `peak` (default: the scaled base lr): over W = warmup_epochs x steps_per_epoch steps,
    s0 + t (peak - s0) / (W - 1) from s0 = warmup_start_lr (every group starts there), reaching the peak at
    step W - 1; then a cosine from the peak at step W to 0 at the last step + 1."""
    peak = peak_lr(train_cfg) if peak is None else peak
    warm = train_cfg["warmup_epochs"] * steps_per_epoch
    total = train_cfg["epochs"] * steps_per_epoch
    if step < warm:
        start = train_cfg["warmup_start_lr"]
        return start + (peak - start) * step / max(1, warm - 1)
    if total <= warm:
        return peak
    progress = (step - warm) / (total - warm)
    return 0.5 * peak * (1 + math.cos(math.pi * progress))


def group_peaks(opt: torch.optim.Optimizer) -> list[float]:
    """Each parameter group's peak lr (build_optimizer's "peak_lr"; the group's "lr" where absent)."""
    return [float(g.get("peak_lr", g["lr"])) for g in opt.param_groups]


def lr_schedule(steps_per_epoch: int, train_cfg: dict, device: torch.device | str = "cpu",
                peaks: list[float] | None = None) -> torch.Tensor:
    """lr_at for every step of the run as a float32 tensor on `device` (a step indexes it on the device): shape
    (steps,) for the scaled base lr, or (steps, groups) with one column per peak in `peaks`."""
    total = train_cfg["epochs"] * steps_per_epoch
    if peaks is None:
        rows = [lr_at(s, steps_per_epoch, train_cfg) for s in range(total)]
    else:
        rows = [[lr_at(s, steps_per_epoch, train_cfg, p) for p in peaks] for s in range(total)]
    return torch.tensor(rows, dtype=torch.float32, device=device)


def set_lr(opt: torch.optim.Optimizer, lr: float) -> None:
    for g in opt.param_groups:
        g["lr"] = lr * g.get("lr_mult", 1.0)
