"""Batched SimCLR augmentation on the training device, independent random parameters per image.

One call of :class:`SimCLRAugment` maps a uint8 batch [B,3,S,S] to one float32 view [B,3,size,size];
the trainer calls it twice for the two views.  All randomness comes from the explicit
``torch.Generator`` passed in (on the batch's device), so a view is reproducible from the generator
state.  The ops follow docs/METHOD.md section 2 and torchvision's semantics:

1. RandomResizedCrop(size, scale, ratio=(3/4, 4/3)), torchvision's sampling (area uniform in scale,
   log-ratio uniform, 10 tries, then the whole image clipped to the ratio range), done as one affine
   grid per image and ``grid_sample(mode="bicubic")``; the horizontal flip (p=0.5) is folded into the
   same grid.  [choice] No antialiasing when a crop is downscaled (grid_sample has none); at 32x32
   crops are only upscaled, at 224-of-256 the downscale factor is small.  At the crop border the
   bicubic taps read the real neighbouring pixels (torchvision's crop-then-resize replicates the
   crop's edge instead); inside, the result equals torchvision's ``resized_crop``.
2. ColorJitter(brightness, contrast, saturation, hue) with probability ``jitter_p``.  [choice] The
   four ops run in the fixed order brightness, contrast, saturation, hue (torchvision shuffles the order
   per image); factors are drawn per image.  Hue is torchvision's adjust_hue (RGB->HSV, shift,
   ->RGB) fused into one pass.
3. RandomGrayscale(p=gray_p) (ITU-R 601 luma, as torchvision).
4. GaussianBlur with probability ``blur_p``, sigma ~ U(blur_sigma) per image, kernel size about 10% of
   the output size (odd, >= 3: 3 at 32, 23 at 224), reflect padding, as one grouped separable conv.
5. Normalisation with ``mean``/``std``.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["SimCLRAugment", "eval_transform", "blur_kernel_size", "to_float"]

_LUMA = (0.2989, 0.587, 0.114)  # torchvision's rgb_to_grayscale weights
_CROP_TRIES = 10


def to_float(x: torch.Tensor) -> torch.Tensor:
    """uint8 [0,255] -> float32 [0,1]; float input is taken to be in [0,1] already."""
    if x.dtype == torch.uint8:
        return x.to(torch.float32).div_(255.0)
    return x.to(torch.float32)


def _channels(x: torch.Tensor, values: Sequence[float]) -> torch.Tensor:
    # filled on x's device: a tensor built on the host would be copied over (a host sync) every batch
    return torch.cat([x.new_full((1,), float(v)) for v in values]).view(1, -1, 1, 1)


def _normalize(x: torch.Tensor, mean: Sequence[float], std: Sequence[float]) -> torch.Tensor:
    return (x - _channels(x, mean)) / _channels(x, std)


def blur_kernel_size(size: int) -> int:
    k = int(0.1 * size)
    k += 1 - k % 2  # odd
    return max(k, 3)


def _gray(x: torch.Tensor) -> torch.Tensor:
    r, g, b = x.unbind(1)
    return (_LUMA[0] * r + _LUMA[1] * g + _LUMA[2] * b).unsqueeze(1)


def _shift_hue(x: torch.Tensor, hue: torch.Tensor) -> torch.Tensor:
    """torchvision's adjust_hue (RGB -> HSV, h += hue mod 1, -> RGB) fused: only the hue changes, so
    v = max and v*s = max - min are reused and the 1/6 scalings cancel (fewer full-size ops)."""
    r, g, b = x.unbind(1)
    maxc = torch.maximum(torch.maximum(r, g), b)
    chroma = maxc - torch.minimum(torch.minimum(r, g), b)
    inv = 1.0 / torch.where(chroma == 0, torch.ones_like(chroma), chroma)
    h6 = torch.where(maxc == r, (g - b) * inv, torch.where(maxc == g, 2.0 + (b - r) * inv, 4.0 + (r - g) * inv))
    h6 = h6 + 6.0 * hue.view(-1, 1, 1)
    n = torch.arange(5.0, 0.0, -2.0, dtype=x.dtype, device=x.device).view(1, 3, 1, 1)  # (5, 3, 1), no host copy
    k = torch.remainder(n + h6.unsqueeze(1), 6.0)
    w = torch.minimum(k, 4.0 - k).clamp_(0.0, 1.0)
    return maxc.unsqueeze(1) - chroma.unsqueeze(1) * w


def _blend(a: torch.Tensor, b: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
    # torchvision's _blend for float images: f*a + (1-f)*b, clamped to [0,1]; f is per image [B].
    f = f.view(-1, 1, 1, 1)
    return (f * a + (1.0 - f) * b).clamp_(0.0, 1.0)


def _gaussian_blur(x: torch.Tensor, sigma: torch.Tensor, ksize: int) -> torch.Tensor:
    """Per-image sigma [B]; separable, reflect padding, one grouped conv per direction."""
    B, C, H, W = x.shape
    half = ksize // 2
    t = torch.arange(ksize, dtype=x.dtype, device=x.device) - half
    k = torch.exp(-(t.view(1, -1) ** 2) / (2.0 * sigma.view(-1, 1) ** 2))
    k = (k / k.sum(1, keepdim=True)).unsqueeze(1).expand(B, C, ksize).reshape(B * C, ksize)  # [B*C, k]
    y = x.reshape(1, B * C, H, W)
    y = F.conv2d(F.pad(y, (half, half, 0, 0), mode="reflect"), k.view(B * C, 1, 1, ksize), groups=B * C)
    y = F.conv2d(F.pad(y, (0, 0, half, half), mode="reflect"), k.view(B * C, 1, ksize, 1), groups=B * C)
    return y.view(B, C, H, W)


class SimCLRAugment(nn.Module):
    """``aug(x_uint8 [B,3,S,S], generator) -> float32 [B,3,size,size]``, one independent view per image.

    ``sample_params`` draws every random number of a call (a fixed number of draws, whatever the
    probabilities, so the generator advances the same way for any config) and ``apply`` is
    deterministic given them; ``forward`` is ``apply(x, sample_params(...))``.
    """

    def __init__(
        self,
        size: int,
        mean: Sequence[float],
        std: Sequence[float],
        *,
        crop_scale: tuple[float, float] = (0.08, 1.0),
        crop_ratio: tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0),
        jitter: tuple[float, float, float, float] = (0.8, 0.8, 0.8, 0.2),
        jitter_p: float = 0.8,
        gray_p: float = 0.2,
        blur_p: float = 0.5,
        blur_sigma: tuple[float, float] = (0.1, 2.0),
        flip_p: float = 0.5,
        blur_kernel: int | None = None,
        channels_last: bool = False,
    ) -> None:
        super().__init__()
        if not 0 < crop_scale[0] <= crop_scale[1] <= 1:
            raise ValueError(f"crop_scale must satisfy 0 < lo <= hi <= 1, got {crop_scale}")
        if not 0 < crop_ratio[0] <= crop_ratio[1]:
            raise ValueError(f"crop_ratio must satisfy 0 < lo <= hi, got {crop_ratio}")
        if not 0 < blur_sigma[0] <= blur_sigma[1]:
            raise ValueError(f"blur_sigma must satisfy 0 < lo <= hi, got {blur_sigma}")
        for name, p in (("jitter_p", jitter_p), ("gray_p", gray_p), ("blur_p", blur_p), ("flip_p", flip_p)):
            if not 0 <= p <= 1:
                raise ValueError(f"{name} must be in [0, 1], got {p}")
        self.size = int(size)
        self.mean = tuple(float(m) for m in mean)
        self.std = tuple(float(s) for s in std)
        self.crop_scale = tuple(float(v) for v in crop_scale)
        self.crop_ratio = tuple(float(v) for v in crop_ratio)
        b, c, s, h = (float(v) for v in jitter)
        if not 0 <= h <= 0.5:
            raise ValueError(f"hue jitter must be in [0, 0.5], got {h}")
        # torchvision's ranges: [max(0, 1-f), 1+f] for b/c/s, [-h, h] for hue.
        self.jitter_ranges = ((max(0.0, 1 - b), 1 + b), (max(0.0, 1 - c), 1 + c), (max(0.0, 1 - s), 1 + s), (-h, h))
        self.jitter_p = float(jitter_p)
        self.gray_p = float(gray_p)
        self.blur_p = float(blur_p)
        self.blur_sigma = tuple(float(v) for v in blur_sigma)
        self.flip_p = float(flip_p)
        self.blur_kernel = int(blur_kernel) if blur_kernel else blur_kernel_size(self.size)
        if self.blur_kernel % 2 == 0:
            raise ValueError(f"blur_kernel must be odd, got {self.blur_kernel}")
        self.channels_last = channels_last
        # Buffers (moved with the module): a step captured in a CUDA graph must not copy them from the host.
        self.register_buffer("_mean", torch.tensor(self.mean).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("_std", torch.tensor(self.std).view(1, 3, 1, 1), persistent=False)

    def extra_repr(self) -> str:
        return (
            f"size={self.size}, crop_scale={self.crop_scale}, jitter_p={self.jitter_p}, gray_p={self.gray_p}, "
            f"blur_p={self.blur_p}, blur_kernel={self.blur_kernel}, flip_p={self.flip_p}"
        )

    # -- parameters ---------------------------------------------------------------------------------

    def draw(self, batch: int, device: torch.device | str, generator: torch.Generator | None) -> tuple:
        """Every random number one view of `batch` images needs, from `generator` (the same draws, in the same
        order, as `sample_params`): (u_crop float64 [4, batch, 10], u float32 [9, batch])."""
        device = torch.device(device)
        if generator is not None and torch.device(generator.device).type != device.type:
            raise ValueError(f"generator is on {generator.device}, the batch on {device}: they must match")
        u_crop = torch.rand(4, batch, _CROP_TRIES, generator=generator, device=device, dtype=torch.float64)
        u = torch.rand(9, batch, generator=generator, device=device)
        return u_crop, u

    def sample_params(
        self, batch: int, height: int, width: int, device: torch.device | str, generator: torch.Generator | None
    ) -> dict[str, torch.Tensor]:
        """Per-image crop box (top, left, h, w in input pixels), flip/jitter/gray/blur flags and factors."""
        return self.params_from_draws(self.draw(batch, device, generator), height, width)

    def params_from_draws(self, draws: tuple, height: int, width: int) -> dict[str, torch.Tensor]:
        """`sample_params` from the draws of `draw`: no randomness and no host sync, so it can be captured."""
        u_crop, u = draws
        # RandomResizedCrop.get_params, vectorised over images and tries.
        area = height * width
        lo, hi = self.crop_scale
        target = area * (lo + (hi - lo) * u_crop[0])
        lr0, lr1 = math.log(self.crop_ratio[0]), math.log(self.crop_ratio[1])
        ar = torch.exp(lr0 + (lr1 - lr0) * u_crop[1])
        w = torch.round(torch.sqrt(target * ar))
        h = torch.round(torch.sqrt(target / ar))
        ok = (w > 0) & (w <= width) & (h > 0) & (h <= height)
        top = torch.floor(u_crop[2] * (height - h + 1))
        left = torch.floor(u_crop[3] * (width - w + 1))
        first = ok.to(torch.int8).argmax(1, keepdim=True)  # first successful try
        pick = lambda t: t.gather(1, first).squeeze(1)  # noqa: E731
        h, w, top, left = pick(h), pick(w), pick(top), pick(left)
        # Fallback (no try fits): whole image, clipped to the ratio range, centred.
        in_ratio = width / height
        if in_ratio < self.crop_ratio[0]:
            fw, fh = width, round(width / self.crop_ratio[0])
        elif in_ratio > self.crop_ratio[1]:
            fh, fw = height, round(height * self.crop_ratio[1])
        else:
            fw, fh = width, height
        any_ok = ok.any(1)
        h = torch.where(any_ok, h, torch.full_like(h, fh))
        w = torch.where(any_ok, w, torch.full_like(w, fw))
        top = torch.where(any_ok, top, torch.full_like(top, (height - fh) // 2))
        left = torch.where(any_ok, left, torch.full_like(left, (width - fw) // 2))

        def uniform(x, rng):
            return rng[0] + (rng[1] - rng[0]) * x

        (b, c, s, hue) = self.jitter_ranges
        return {
            "top": top.float(),
            "left": left.float(),
            "height": h.float(),
            "width": w.float(),
            "flip": u[0] < self.flip_p,
            "jitter": u[1] < self.jitter_p,
            "brightness": uniform(u[2], b),
            "contrast": uniform(u[3], c),
            "saturation": uniform(u[4], s),
            "hue": uniform(u[5], hue),
            "gray": u[6] < self.gray_p,
            "blur": u[7] < self.blur_p,
            "sigma": uniform(u[8], self.blur_sigma),
        }

    # -- application --------------------------------------------------------------------------------

    def apply(self, x: torch.Tensor, p: dict[str, torch.Tensor]) -> torch.Tensor:
        if x.dim() != 4 or x.shape[1] != 3:
            raise ValueError(f"expected a [B,3,H,W] batch, got {list(x.shape)}")
        x = to_float(x)
        B, _, H, W = x.shape

        # Crop + resize + flip as one affine grid per image (align_corners=False pixel-edge mapping).
        sx = p["width"] / W
        sy = p["height"] / H
        tx = (2 * p["left"] + p["width"]) / W - 1
        ty = (2 * p["top"] + p["height"]) / H - 1
        sx = torch.where(p["flip"], -sx, sx)
        # The affine map is axis-aligned, so the grid is an outer broadcast (what affine_grid computes
        # with a batched matmul).
        base = (torch.arange(self.size, dtype=x.dtype, device=x.device) * 2 + 1) / self.size - 1
        gx = (sx.view(B, 1, 1) * base.view(1, 1, -1) + tx.view(B, 1, 1)).to(x.dtype)
        gy = (sy.view(B, 1, 1) * base.view(1, -1, 1) + ty.view(B, 1, 1)).to(x.dtype)
        grid = torch.stack(torch.broadcast_tensors(gx, gy), -1)  # [B, size, size, (x, y)]
        x = F.grid_sample(x, grid, mode="bicubic", padding_mode="border", align_corners=False).clamp_(0.0, 1.0)

        # Colour jitter (fixed order), only kept for the images that drew it.
        y = (x * p["brightness"].view(-1, 1, 1, 1)).clamp_(0.0, 1.0)  # blend with black
        y = _blend(y, _gray(y).mean((1, 2, 3), keepdim=True), p["contrast"])
        y = _blend(y, _gray(y), p["saturation"])
        y = _shift_hue(y, p["hue"])
        x = torch.where(p["jitter"].view(-1, 1, 1, 1), y, x)

        x = torch.where(p["gray"].view(-1, 1, 1, 1), _gray(x).expand(-1, 3, -1, -1), x)

        x = torch.where(p["blur"].view(-1, 1, 1, 1), _gaussian_blur(x, p["sigma"].to(x.dtype), self.blur_kernel), x)

        x = (x - self._mean.to(x.device)) / self._std.to(x.device)
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return x

    def forward(self, x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        p = self.sample_params(x.shape[0], x.shape[-2], x.shape[-1], x.device, generator)
        # float32 whatever autocast the caller runs under (the blur conv would otherwise go bf16).
        with torch.autocast(device_type=x.device.type, enabled=False):
            return self.apply(x, p)

    def views(self, x: torch.Tensor, draws: list[tuple]) -> torch.Tensor:
        """Several views of the batch `x` in one pass, stacked ([view 1 of every image; view 2; ...]), from one
        `draw` each: the same images as calling `forward` once per view with those draws (per-image ops)."""
        H, W = x.shape[-2:]
        # Parameters are per image, so the views' draws are joined first and turned into parameters once.
        p = self.params_from_draws(tuple(torch.cat(d, dim=1) for d in zip(*draws)), H, W)
        with torch.autocast(device_type=x.device.type, enabled=False):
            return self.apply(x.repeat(len(draws), 1, 1, 1), p)

    def two_views(self, x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """[view 1; view 2] of `x`, equal to torch.cat([self(x, generator), self(x, generator)])."""
        return self.views(x, [self.draw(x.shape[0], x.device, generator) for _ in range(2)])


def eval_transform(x: torch.Tensor, mean: Sequence[float], std: Sequence[float], size: int) -> torch.Tensor:
    """Deterministic evaluation input: float32 [B,3,size,size], normalised.

    Stored size S == size: normalise only.  S > size: centre crop (for ImageNet-100/Waterbirds stored
    at 256 this is the standard Resize(256)+CenterCrop(224)); if S is beyond the 0.875 crop ratio the
    image is first resized (bicubic, antialiased) to round(size / 0.875).  S < size: bicubic upsampling.
    """
    x = to_float(x)
    H, W = x.shape[-2:]
    if min(H, W) > math.ceil(size / 0.875):
        short = round(size / 0.875)
        scale = short / min(H, W)
        x = F.interpolate(
            x, size=(round(H * scale), round(W * scale)), mode="bicubic", align_corners=False, antialias=True
        ).clamp_(0.0, 1.0)
        H, W = x.shape[-2:]
    if H >= size and W >= size:
        top, left = int(round((H - size) / 2.0)), int(round((W - size) / 2.0))
        x = x[..., top : top + size, left : left + size]
    else:
        x = F.interpolate(x, size=(size, size), mode="bicubic", align_corners=False).clamp_(0.0, 1.0)
    return _normalize(x, mean, std).contiguous()
