"""Where and how a model runs: device choice, bf16 autocast and the fp16 loss scaler, channels_last, peak
memory, and `embed`, the evaluation-mode pass over a split. Pretraining and every evaluation section use
these; nothing here knows about either."""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Callable

import torch

from .errors import ConfigError
from .data import eval_transform, iter_batches

__all__ = ["LossScaler", "autocast", "bn_mode", "channels_last", "embed", "embed_batch", "peak_memory_mb",
           "reset_peak_memory", "resolve_device", "set_deterministic"]

# cuBLAS is deterministic only with a fixed workspace, read when its first handle is made (train.deterministic)
CUBLAS_WORKSPACE = ":4096:8"


def resolve_device(cfg: dict) -> torch.device:
    want = cfg["train"]["device"]
    if want == "cuda" and not torch.cuda.is_available():
        raise ConfigError("train.device: 'cuda' was asked for but no CUDA device is available")
    if want == "auto":
        want = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(want)


def set_deterministic(on: bool) -> Callable[[], None]:
    """train.deterministic: deterministic algorithms, deterministic cuDNN kernels, no cuDNN autotuning and cuBLAS's
    fixed workspace for what runs next; returns what puts the previous settings back. An operator without a
    deterministic kernel warns, naming itself, instead of stopping a long run. Off: nothing changes."""
    import torch.utils.deterministic as det

    prev = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
            torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark,
            os.environ.get("CUBLAS_WORKSPACE_CONFIG"), det.fill_uninitialized_memory)
    if not on:
        return lambda: None
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    # a debugging aid of deterministic mode, a pass over every new tensor: nothing here reads memory it did not write
    det.fill_uninitialized_memory = False

    def restore() -> None:
        torch.use_deterministic_algorithms(prev[0], warn_only=prev[1])
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = prev[2], prev[3]
        det.fill_uninitialized_memory = prev[5]
        if prev[4] is None:  # a workspace given before is kept as it was (setdefault)
            os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
    return restore


def autocast(device: torch.device, precision: str, *, cache: bool = True):
    """bf16 (or fp16) autocast where `precision` asks for it. cache=False for a step captured in a CUDA graph
    (autocast's weight-cast cache would otherwise hold tensors of the capture)."""
    if precision == "fp16":
        return torch.autocast(device.type, dtype=torch.float16, cache_enabled=cache)
    if precision == "bf16" or (precision == "auto" and device.type == "cuda"):
        return torch.autocast(device.type, dtype=torch.bfloat16, cache_enabled=cache)
    return contextlib.nullcontext()


FP16_MAX = 65504.0  # fp16's largest finite value


class LossScaler:
    """The step skipping of the released code's fp16 loss scaler (torch's GradScaler with its defaults: scale
    2^16; at a step whose gradients overflow, the step is skipped and the scale halved; after 2,000 steps in a
    row without one, the scale doubles), as device tensors that the fused training step reads and updates
    without a host sync (docs/METHOD.md section 2).

    real (fp16 autocast): the loss is multiplied by the scale and the gradients divided by it and checked for
    inf/NaN, as GradScaler does. Emulated (fp32, bf16): the gradients are not scaled; a step counts as an
    overflow when the scale times its largest gradient entry passes FP16_MAX (or a gradient is not finite).
    The scale's arithmetic is torch's own (`torch._amp_update_scale_`)."""

    INIT, GROWTH, BACKOFF, INTERVAL = 2.0 ** 16, 2.0, 0.5, 2000

    def __init__(self, device: torch.device, real: bool):
        self.real = real
        self.scale = torch.full((1,), self.INIT, dtype=torch.float32, device=device)
        self.tracker = torch.zeros(1, dtype=torch.int32, device=device)  # steps since the last overflow
        self.found = torch.zeros(1, dtype=torch.float32, device=device)  # 1.0: this step overflowed

    def scaled(self, loss: torch.Tensor) -> torch.Tensor:
        return loss * self.scale[0] if self.real else loss

    def check(self, grads: list[torch.Tensor], extra: list[torch.Tensor] = ()) -> tuple[list, list]:
        """Unscale (real) and check `grads`, the parameters' gradients: returns them with every entry 0 when the
        step overflowed (so the update leaves weights and momentum as they were), and `extra` (gradients read
        but not applied, e.g. dL/dz+) unscaled."""
        grads, extra = list(grads), list(extra)
        self.found.zero_()
        if self.real:
            torch._amp_foreach_non_finite_check_and_unscale_(grads, self.found, self.scale.reciprocal())
            extra = [g / self.scale[0] for g in extra]
        else:
            top = torch.stack(torch._foreach_norm(grads, float("inf"))).max()
            self.found.copy_((~(top * self.scale[0] <= FP16_MAX)).float().reshape(1))  # NaN counts
        overflow = self.found[0] > 0
        return [torch.where(overflow, 0.0, g) for g in grads], extra

    def update(self) -> None:
        """The scale after this step: halved after an overflow, doubled after INTERVAL steps without one."""
        torch._amp_update_scale_(self.scale, self.tracker, self.found, self.GROWTH, self.BACKOFF, self.INTERVAL)

    def state_tensors(self) -> list[torch.Tensor]:
        return [self.scale, self.tracker, self.found]

    def state_dict(self) -> dict:
        return {"scale": self.scale.cpu().clone(), "tracker": self.tracker.cpu().clone()}

    def load_state_dict(self, state: dict) -> None:
        self.scale.copy_(state["scale"])
        self.tracker.copy_(state["tracker"])


def channels_last(cfg: dict, device: torch.device) -> bool:
    """channels_last speeds up convolutions on GPUs; on CPU it crashes some oneDNN kernels for tiny widths."""
    return cfg["train"]["channels_last"] and device.type == "cuda"


def peak_memory_mb(device: str | torch.device, cpu_rss: bool = False) -> float | None:
    """Peak accelerator memory in MiB (torch.cuda.max_memory_allocated). On CPU: None, or with cpu_rss=True
    the process's peak resident set size (ru_maxrss, whole process lifetime)."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    if not cpu_rss:
        return None
    import resource

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 2**20 if sys.platform == "darwin" else rss / 2**10  # bytes on macOS, KiB on Linux


def reset_peak_memory(device: str | torch.device) -> None:
    """Start peak_memory_mb's count afresh (each run reports its own peak, not the process's highest so far)."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


@contextlib.contextmanager
def bn_mode(model: torch.nn.Module, mode: str):
    """The model in eval mode, except with mode "batch" its BatchNorm layers, which then normalise with each
    batch's statistics (the released evaluation script never calls model.eval()). Running statistics are put
    back afterwards, so the saved state is unchanged; the model's own training flag is restored."""
    if mode not in ("batch", "running"):
        raise ConfigError(f"eval.bn: {mode!r} is not a BatchNorm mode; use 'batch' or 'running'")
    was_training = model.training
    model.eval()
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)] \
        if mode == "batch" else []
    saved = [{k: v.clone() for k, v in m.named_buffers(recurse=False)} for m in norms]
    for m in norms:
        m.train()
    try:
        yield model
    finally:
        with torch.no_grad():
            for m, bufs in zip(norms, saved):
                for k, v in m.named_buffers(recurse=False):
                    v.copy_(bufs[k])
        model.train(was_training)


@torch.no_grad()
def embed(model, ds, cfg: dict, device, key: str | tuple[str, ...] = "feature",
          bn: str | None = None) -> tuple[torch.Tensor, ...]:
    """Evaluation outputs `key` (a tuple of keys allowed) over a whole split, in dataset order, on the CPU.
    `bn`: the BatchNorm mode (bn_mode; default eval.bn). Batches of eval.batch_size images, or with "batch"
    statistics of train.batch_size (the released evaluation's batch), the last one partial either way."""
    keys = (key,) if isinstance(key, str) else tuple(key)
    outs: dict[str, list] = {k: [] for k in keys}
    bn = bn or cfg["eval"]["bn"]
    batch = cfg["train"]["batch_size"] if bn == "batch" else cfg["eval"]["batch_size"]
    with bn_mode(model, bn):
        for x, _, _ in iter_batches(ds, batch, shuffle=False, seed=0, drop_last=False,
                                    device=device, num_workers=cfg["data"]["num_workers"]):
            out = embed_batch(model, x, ds, cfg, device)
            for k in keys:  # the results to the host: the one copy (and wait) per batch
                outs[k].append(out[k].float().cpu())
    return tuple(torch.cat(outs[k]) for k in keys)


def embed_batch(model, x: torch.Tensor, ds, cfg: dict, device) -> dict[str, torch.Tensor]:
    """`embed`'s device work on one batch (uint8 images already on the device): no host sync."""
    x = eval_transform(x, ds.mean, ds.std, ds.crop_size)
    if channels_last(cfg, device):
        x = x.contiguous(memory_format=torch.channels_last)
    with autocast(device, cfg["train"]["precision"]):
        return model(x)
