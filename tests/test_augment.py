"""Batched on-device SimCLR augmentation: per-image independence, reproducibility, torchvision parity."""

from __future__ import annotations

import math

import pytest
import torch
import torchvision.transforms.v2.functional as TF

from bayesncl.data import SimCLRAugment, eval_transform
from bayesncl.data.augment import _shift_hue, blur_kernel_size

MEAN, STD = (0.5, 0.4, 0.3), (0.25, 0.2, 0.3)
OFF = dict(jitter_p=0.0, gray_p=0.0, blur_p=0.0, flip_p=0.0)  # every random op disabled


def batch(n=8, size=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, 3, size, size), dtype=torch.uint8, generator=g)


def gen(seed):
    return torch.Generator().manual_seed(seed)


def unnorm(y):
    return y * torch.tensor(STD).view(1, 3, 1, 1) + torch.tensor(MEAN).view(1, 3, 1, 1)


def test_shape_dtype_finite():
    x = batch(6, 40)
    for size in (32, 24, 48):
        y = SimCLRAugment(size, MEAN, STD)(x, gen(0))
        assert y.shape == (6, 3, size, size) and y.dtype == torch.float32 and torch.isfinite(y).all()
    y = SimCLRAugment(32, MEAN, STD, channels_last=True)(x, gen(0))
    assert y.is_contiguous(memory_format=torch.channels_last)


def test_float32_under_autocast():
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = SimCLRAugment(32, MEAN, STD)(batch(), gen(0))
    assert y.dtype == torch.float32 and torch.equal(y, SimCLRAugment(32, MEAN, STD)(batch(), gen(0)))


def test_reproducible_and_generator_driven():
    aug, x = SimCLRAugment(32, MEAN, STD), batch()
    assert torch.equal(aug(x, gen(1)), aug(x, gen(1)))
    g = gen(1)
    v1, v2 = aug(x, g), aug(x, g)  # two views: the generator advances
    assert not torch.allclose(v1, v2)
    assert not torch.allclose(aug(x, gen(1)), aug(x, gen(2)))


def test_identical_images_get_independent_params():
    x = batch(1).expand(16, -1, -1, -1).contiguous()
    aug = SimCLRAugment(32, MEAN, STD, **OFF)  # crop only
    p = aug.sample_params(16, 32, 32, "cpu", gen(0))
    boxes = torch.stack([p["top"], p["left"], p["height"], p["width"]], 1)
    assert len(torch.unique(boxes, dim=0)) == 16
    y = aug(x, gen(0))
    flat = y.flatten(1)
    assert (torch.cdist(flat, flat) + torch.eye(16) * 1e9).min() > 1e-3  # all 16 views differ
    # Full pipeline: per-image flags differ within the batch too.
    q = SimCLRAugment(32, MEAN, STD).sample_params(256, 32, 32, "cpu", gen(0))
    for key in ("flip", "jitter", "gray", "blur"):
        assert 0 < q[key].float().mean() < 1, key
    assert q["sigma"].std() > 0.3 and q["brightness"].std() > 0.3


def test_crop_sampling_matches_torchvision_ranges():
    aug = SimCLRAugment(32, MEAN, STD)
    p = aug.sample_params(4000, 32, 32, "cpu", gen(3))
    top, left, h, w = p["top"], p["left"], p["height"], p["width"]
    assert (top >= 0).all() and (left >= 0).all() and (top + h <= 32).all() and (left + w <= 32).all()
    assert (h >= 1).all() and (w >= 1).all()
    area = h * w / 1024
    ratio = w / h
    # Rounding of w, h to pixels loosens the bounds slightly.
    assert area.min() > 0.05 and area.max() <= 1.0 and area.mean().item() == pytest.approx(0.45, abs=0.05)
    assert ratio.min() > 0.7 and ratio.max() < 1.45
    # The crop origin is uniform over the free range: centred on average.
    assert ((top + h / 2) / 32).mean().item() == pytest.approx(0.5, abs=0.02)


def test_identity_config_equals_eval_transform():
    x = batch(8, 32)
    aug = SimCLRAugment(32, MEAN, STD, crop_scale=(1.0, 1.0), **OFF)
    assert torch.allclose(aug(x, gen(0)), eval_transform(x, MEAN, STD, 32), atol=1e-4)


def test_flip_only_flips_expected_images():
    x = batch(32, 32)
    aug = SimCLRAugment(32, MEAN, STD, crop_scale=(1.0, 1.0), **{**OFF, "flip_p": 0.5})
    flips = aug.sample_params(32, 32, 32, "cpu", gen(7))["flip"]
    assert 0 < flips.sum() < 32
    y = aug(x, gen(7))
    ref = eval_transform(x, MEAN, STD, 32)
    assert torch.allclose(y[flips], ref[flips].flip(-1), atol=1e-4)
    assert torch.allclose(y[~flips], ref[~flips], atol=1e-4)


def test_crop_matches_torchvision_resized_crop():
    x = batch(4, 32)
    aug = SimCLRAugment(32, MEAN, STD, **OFF)
    p = aug.sample_params(4, 32, 32, "cpu", gen(11))
    y = unnorm(aug.apply(x, p))
    for i in range(4):
        t, l, h, w = (int(p[k][i]) for k in ("top", "left", "height", "width"))
        ref = TF.resized_crop(x[i].float() / 255, t, l, h, w, [32, 32],
                              interpolation=TF.InterpolationMode.BICUBIC, antialias=False).clamp(0, 1)
        # Same bicubic kernel; only near the crop border do our taps read the real neighbouring
        # pixels where torchvision's crop-then-resize replicates the crop edge.
        m = math.ceil(2 * 32 / min(h, w)) + 1
        assert (y[i] - ref)[:, m:-m, m:-m].abs().max() < 1e-4


def _params(aug, n, **over):
    p = aug.sample_params(n, 32, 32, "cpu", gen(0))
    p.update({k: (v if torch.is_tensor(v) else torch.full((n,), v)) for k, v in over.items()})
    return p


def test_color_jitter_matches_torchvision():
    x = batch(6, 32)
    aug = SimCLRAugment(32, MEAN, STD, crop_scale=(1.0, 1.0), **OFF)
    b = torch.tensor([0.3, 1.7, 1.0, 0.9, 1.2, 1.5])
    c = torch.tensor([1.5, 0.4, 1.0, 1.1, 0.2, 1.8])
    s = torch.tensor([0.2, 1.8, 1.0, 0.5, 1.3, 0.0])
    h = torch.tensor([0.1, -0.2, 0.0, 0.05, -0.15, 0.2])
    jit = torch.tensor([True, True, True, True, True, False])
    y = unnorm(aug.apply(x, _params(aug, 6, brightness=b, contrast=c, saturation=s, hue=h, jitter=jit)))
    for i in range(6):
        r = x[i].float() / 255
        if jit[i]:
            r = TF.adjust_brightness(r, float(b[i]))
            r = TF.adjust_contrast(r, float(c[i]))
            r = TF.adjust_saturation(r, float(s[i]))
            r = TF.adjust_hue(r, float(h[i]))
        assert (y[i] - r).abs().max() < 1e-4, i


def test_fused_hue_shift_matches_torchvision_adjust_hue():
    g = gen(5)
    x = torch.rand(8, 3, 12, 12, generator=g)
    x[1] = torch.randint(0, 4, (3, 12, 12), generator=g) / 3.0  # coarse levels: many tied channels
    x[2] = 0.5  # grey: zero chroma, hue undefined
    x[3, :, 0, :6] = torch.eye(3).repeat(1, 2)  # primaries
    x[3, :, 1, :3] = 1 - torch.eye(3)  # secondaries
    x[3, :, 2, :2] = torch.tensor([[0.0, 1.0]] * 3)  # black, white
    hues = torch.tensor([-0.5, -0.3, -0.1, 0.0, 0.05, 0.25, 1 / 3, 0.5])  # incl. both wrap-around ends
    for shift in (hues, hues.flip(0)):
        y = _shift_hue(x, shift)
        for i in range(len(x)):
            ref = TF.adjust_hue(x[i], float(shift[i]))
            assert (y[i] - ref).abs().max() < 1e-5, (i, float(shift[i]))


def test_grayscale_and_blur_match_torchvision():
    x = batch(4, 32)
    aug = SimCLRAugment(32, MEAN, STD, crop_scale=(1.0, 1.0), **OFF)
    gray = torch.tensor([True, False, True, False])
    y = unnorm(aug.apply(x, _params(aug, 4, gray=gray)))
    for i in range(4):
        r = x[i].float() / 255
        ref = TF.rgb_to_grayscale(r, num_output_channels=3) if gray[i] else r
        assert (y[i] - ref).abs().max() < 1e-4
    sigma = torch.tensor([0.1, 0.7, 1.3, 2.0])
    blur = torch.tensor([True, True, True, False])
    y = unnorm(aug.apply(x, _params(aug, 4, blur=blur, sigma=sigma)))
    k = blur_kernel_size(32)
    for i in range(4):
        r = x[i].float() / 255
        ref = TF.gaussian_blur(r, [k, k], [float(sigma[i])] * 2) if blur[i] else r
        assert (y[i] - ref).abs().max() < 1e-4


def test_blur_kernel_size():
    assert blur_kernel_size(32) == 3 and blur_kernel_size(224) == 23 and blur_kernel_size(96) == 9


def test_eval_transform_center_crop_and_resize():
    x = batch(2, 36)  # within the 0.875 crop ratio: a pure centre crop
    y = eval_transform(x, MEAN, STD, 32)
    assert torch.allclose(unnorm(y), x[..., 2:34, 2:34].float() / 255, atol=1e-6)
    x40 = batch(2, 40)  # beyond it: resized to 37 first, then cropped
    ref = TF.center_crop(TF.resize(x40.float() / 255, [37], interpolation=TF.InterpolationMode.BICUBIC), [32, 32])
    assert torch.allclose(unnorm(eval_transform(x40, MEAN, STD, 32)), ref.clamp(0, 1), atol=1e-4)
    x256 = batch(1, 256)
    assert torch.allclose(unnorm(eval_transform(x256, MEAN, STD, 224)), x256[..., 16:240, 16:240].float() / 255, atol=1e-6)
    assert eval_transform(batch(2, 16), MEAN, STD, 32).shape == (2, 3, 32, 32)
    assert eval_transform(batch(2, 128), MEAN, STD, 32).shape == (2, 3, 32, 32)


def test_invalid_arguments():
    with pytest.raises(ValueError):
        SimCLRAugment(32, MEAN, STD, crop_scale=(0.5, 0.1))
    with pytest.raises(ValueError):
        SimCLRAugment(32, MEAN, STD, blur_p=1.5)
    with pytest.raises(ValueError):
        SimCLRAugment(32, MEAN, STD)(torch.zeros(2, 1, 32, 32, dtype=torch.uint8), gen(0))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_shape_and_reproduces():
    x = batch(16, 32).cuda()
    aug = SimCLRAugment(32, MEAN, STD)
    g1 = torch.Generator(device="cuda").manual_seed(0)
    g2 = torch.Generator(device="cuda").manual_seed(0)
    y1, y2 = aug(x, g1), aug(x, g2)
    assert y1.is_cuda and torch.equal(y1, y2) and torch.isfinite(y1).all()
    with pytest.raises(ValueError, match="generator"):
        aug(x, gen(0))
    ident = SimCLRAugment(32, MEAN, STD, crop_scale=(1.0, 1.0), **OFF)
    assert torch.allclose(ident(x, g1), eval_transform(x, MEAN, STD, 32), atol=1e-4)
    assert math.isfinite(float(aug(batch(4, 256).cuda(), g1).sum()))


def test_two_views_in_one_pass_equal_two_calls():
    """The trainer's path: both views of a batch in one pass, from the same generator draws as two calls."""
    for size, stored in ((16, 16), (32, 32), (24, 40)):
        aug, x = SimCLRAugment(size, MEAN, STD), batch(12, stored)
        g = gen(5)
        ref = torch.cat([aug(x, g), aug(x, g)])
        assert torch.equal(aug.two_views(x, gen(5)), ref)
        g = gen(5)
        draws = [aug.draw(12, "cpu", g) for _ in range(2)]
        assert torch.equal(aug.views(x, draws), ref)


def test_sample_params_are_params_from_draws():
    aug = SimCLRAugment(32, MEAN, STD)
    p, q = aug.sample_params(9, 32, 32, "cpu", gen(2)), aug.params_from_draws(aug.draw(9, "cpu", gen(2)), 32, 32)
    assert p.keys() == q.keys() and all(torch.equal(p[k], q[k]) for k in p)
