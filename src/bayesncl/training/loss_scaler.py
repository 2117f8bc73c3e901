"""The fp16 loss scaler's step skipping as device tensors, which the fused training step reads and updates
without a host sync (docs/METHOD.md section 2)."""

from __future__ import annotations

import torch

__all__ = ["LossScaler"]


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
