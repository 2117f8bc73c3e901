"""Synthetic compositional dataset: object SHAPE = class, background TEXTURE = nuisance.

Every image is one shape (circle, square, triangle, ...) of random colour, size, position and a small
rotation, drawn on a procedural background texture (sky, grass, water, ...).  The class is the shape
only. Backgrounds are shared by all classes: with probability ``prevalence`` an image's background is
one of the first ``num_common`` textures, otherwise it is uniform over the remaining ones.  So a few
backgrounds appear in most images of every class (``num_common`` 0: uniform over all; equal to
``num_backgrounds``: always common): a feature dimension that fires on "sky" is active
for many samples but is semantically useless, which is the conflict BayesNCL's gates target.

The nuisance ranges are sized so that a few seconds of CPU self-supervised pretraining (the demo:
16 px, ~1000 images, ~70 steps) learns the shape; with the version-1 ranges (small objects anywhere in
the frame, full-contrast textures, hexagon among the first ten classes) the InfoNCE loss stayed at
chance and a linear probe on the trained backbone matched a random-init one.  So (version 2):
objects are large (radius 36-46% of the side: random crops of scale >= ~0.3 keep most of the shape)
and their centres stay in the middle 40% of the range that keeps them inside the frame; rotation jitter
is +-10 degrees; the texture *detail* is at 30% contrast around each image's mean background colour
(the background stays easy to predict from its colour, as the gates' target phenomenon needs, but its
high-frequency pattern no longer swamps the object's edges at 16 px); and the first ten classes are the
ten most distinct shapes at 16 px (hexagon, near-identical to a circle there, is last).

Generation is pure numpy, vectorised over images (masks from coordinate grids), and deterministic in
the params (a ``numpy.random.Generator`` seeded from ``seed``; train and test use independent child
streams so the test set does not change when ``train_size`` does).  The result is cached on disk as a
``.pt`` of uint8 tensors keyed by a hash of the params (written atomically).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from ..settings.config import DEFAULTS, SYNTHETIC_SHAPES, SYNTHETIC_TEXTURES, synthetic_params
from ..core.errors import ConfigError, DataError
from .imageset import ImageSet

NAME = "synthetic"  # its name in bayesncl.settings.registry

__all__ = [
    "SHAPES",
    "TEXTURES",
    "DEFAULT_SYNTHETIC",
    "GENERATOR_VERSION",
    "resolve_params",
    "make_synthetic",
    "synthetic_cache_path",
    "get_synthetic",
    "load_synthetic",
    "default_cache_dir",
]

# Bump when the drawing code changes: the cache key includes it, so stale caches are not reused.
GENERATOR_VERSION = 2

# One set of defaults: the run config's (bayesncl.settings.config imports no torch, so this costs nothing).
DEFAULT_SYNTHETIC: dict[str, Any] = DEFAULTS["data"]["synthetic"]

_CHUNK = 256  # images drawn per vectorised step (fixed: the rng stream must not depend on machine)
_SUPERSAMPLE = 2  # shape masks are drawn at 2x and averaged: anti-aliased edges at 32x32

# Nuisance ranges (see the module docstring for why they are this narrow; version 1 used radius
# 0.22-0.36, centre jitter 1.0, rotation pi/12 and texture contrast 1.0).
_RADIUS = (0.36, 0.46)  # object radius, fraction of the image side
_CENTRE_JITTER = 0.4  # centre uniform in this fraction of the range that keeps the object inside
_ROTATION = np.pi / 18  # rotation jitter, +- radians
_TEXTURE_CONTRAST = 0.3  # texture detail scaled by this around each image's mean background colour


# ---------------------------------------------------------------------------------------------------
# Shapes: each maps rotated, radius-normalised local coords (u, v) [n, H, W] to a bool mask.
# The shape fits (roughly) in the unit disc, so radius r bounds its extent.


def _regular_polygon(u: np.ndarray, v: np.ndarray, sides: int, apothem: float, phase: float) -> np.ndarray:
    ang = phase + 2 * np.pi * np.arange(sides) / sides
    inside = np.ones(u.shape, dtype=bool)
    for a in ang:  # intersection of half-planes, one per edge
        inside &= u * np.cos(a) + v * np.sin(a) <= apothem
    return inside


def _circle(u, v):
    return u * u + v * v <= 0.85**2


def _square(u, v):
    return np.maximum(np.abs(u), np.abs(v)) <= 0.68


def _triangle(u, v):
    # apex up (v grows downwards in image coordinates, so the apex is at -v)
    return _regular_polygon(u, v, 3, 0.5, np.pi / 2)


def _cross(u, v):
    au, av = np.abs(u), np.abs(v)
    return ((au <= 0.28) & (av <= 0.95)) | ((av <= 0.28) & (au <= 0.95))


def _ring(u, v):
    d2 = u * u + v * v
    return (d2 <= 0.95**2) & (d2 >= 0.55**2)


def _diamond(u, v):
    return np.abs(u) / 0.65 + np.abs(v) / 0.98 <= 1.0


def _star(u, v):
    rho = np.sqrt(u * u + v * v)
    phi = np.arctan2(v, u) + np.pi / 2  # a point straight up
    return rho <= 0.42 + 0.55 * np.clip(np.cos(5 * phi), 0, None) ** 2


def _hbar(u, v):
    return (np.abs(u) <= 0.95) & (np.abs(v) <= 0.25)


def _vbar(u, v):
    return (np.abs(v) <= 0.95) & (np.abs(u) <= 0.25)


def _hexagon(u, v):
    return _regular_polygon(u, v, 6, 0.8, 0.0)


def _crescent(u, v):
    return (u * u + v * v <= 0.9**2) & ((u - 0.45) ** 2 + v * v > 0.72**2)


def _saltire(u, v):  # an "X"; 45 degrees from the cross, well beyond the +-15 degree rotation jitter
    a = (u + v) / np.sqrt(2)
    b = (u - v) / np.sqrt(2)
    return _cross(a, b)


def _semicircle(u, v):
    return (u * u + v * v <= 0.95**2) & (v >= -0.15) & (v <= 0.95)


SHAPES: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "circle": _circle,
    "square": _square,
    "triangle": _triangle,
    "cross": _cross,
    "ring": _ring,
    "diamond": _diamond,
    "star": _star,
    "horizontal_bar": _hbar,
    # hexagon used to be 9th; at 16 px it is almost a circle, so it moved to the end (classes are the
    # first num_classes shapes)
    "crescent": _crescent,
    "saltire": _saltire,
    "semicircle": _semicircle,
    "vertical_bar": _vbar,
    "hexagon": _hexagon,
}

# ---------------------------------------------------------------------------------------------------
# Textures: each returns float32 [n, H, W, 3] in [0, 1]; Y, X are [H, W] pixel-centre coords in [0, 1).
# Per-image jitter (base colour, frequencies, phases, noise) keeps them from being constant templates.


def _jitter_colour(rng, n, base, amount=0.06):
    return np.clip(np.asarray(base, np.float32) + rng.normal(0, amount, (n, 3)).astype(np.float32), 0, 1)


def _col(c):  # [n, 3] -> [n, 1, 1, 3] for broadcasting against [n, H, W, 1]
    return c[:, None, None, :]


def _p(a):  # [n] -> [n, 1, 1] for broadcasting against [H, W]
    return np.asarray(a, np.float32)[:, None, None]


def _lerp(a, b, t):
    return a + (b - a) * t[..., None]


def _sky(rng, n, Y, X):
    top = _jitter_colour(rng, n, (0.30, 0.55, 0.92))
    bottom = _jitter_colour(rng, n, (0.78, 0.88, 1.00), 0.04)
    img = _lerp(_col(top), _col(bottom), np.broadcast_to(Y, (n,) + Y.shape))
    f1, f2 = _p(rng.uniform(1.0, 2.5, n)), _p(rng.uniform(1.0, 2.5, n))
    p1, p2 = _p(rng.uniform(0, 1, n)), _p(rng.uniform(0, 1, n))
    cloud = np.sin(2 * np.pi * (f1 * X + p1)) * np.sin(2 * np.pi * (f2 * Y + p2))
    return img + 0.35 * np.clip(cloud - 0.4, 0, None)[..., None]


def _grass(rng, n, Y, X):
    base = _jitter_colour(rng, n, (0.22, 0.55, 0.16))
    fx, p = _p(rng.uniform(6, 11, n)), _p(rng.uniform(0, 1, n))
    sway = 0.08 * np.sin(2 * np.pi * (2 * Y + p))
    blades = 0.5 + 0.5 * np.sin(2 * np.pi * (fx * (X + sway) + p))
    img = _col(base) * (0.75 + 0.4 * blades[..., None])
    return img + rng.normal(0, 0.04, (n,) + Y.shape + (1,))


def _water(rng, n, Y, X):
    base = _jitter_colour(rng, n, (0.10, 0.32, 0.62))
    fy, fx = _p(rng.uniform(4, 8, n)), _p(rng.uniform(0.5, 2.0, n))
    amp, p = _p(rng.uniform(0.2, 0.6, n)), _p(rng.uniform(0, 1, n))
    wave = np.sin(2 * np.pi * (fy * Y + amp * np.sin(2 * np.pi * (fx * X + p)) + p))
    img = _col(base) * (1.05 - 0.3 * Y[..., None])
    return img + 0.12 * wave[..., None] + 0.2 * np.clip(wave - 0.8, 0, None)[..., None]


def _sand(rng, n, Y, X):
    base = _jitter_colour(rng, n, (0.86, 0.74, 0.50), 0.04)
    th = _p(rng.uniform(0.2, 1.2, n))
    f, p = _p(rng.uniform(5, 9, n)), _p(rng.uniform(0, 1, n))
    ripple = np.sin(2 * np.pi * (f * (X * np.cos(th) + Y * np.sin(th)) + p))
    return _col(base) + 0.06 * ripple[..., None] + rng.normal(0, 0.05, (n,) + Y.shape + (1,))


def _brick(rng, n, Y, X):
    base = _jitter_colour(rng, n, (0.66, 0.26, 0.15))
    mortar = _jitter_colour(rng, n, (0.82, 0.80, 0.74), 0.03)
    rows = _p(rng.integers(4, 7, n))
    cols = rows / 2
    py, px = _p(rng.uniform(0, 1, n)), _p(rng.uniform(0, 1, n))
    ry = Y * rows + py
    row_idx = np.floor(ry)
    rx = X * cols + px + 0.5 * (row_idx % 2)  # running bond: odd rows offset by half a brick
    is_mortar = ((ry % 1.0) < 0.14) | ((rx % 1.0) < 0.08)
    img = np.where(is_mortar[..., None], _col(mortar), _col(base))
    return img + rng.normal(0, 0.04, (n,) + Y.shape + (1,))


def _snow(rng, n, Y, X):
    base = _jitter_colour(rng, n, (0.93, 0.95, 0.98), 0.02)
    img = _lerp(_col(base), _col(base * np.float32([0.85, 0.9, 1.0])), np.broadcast_to(Y, (n,) + Y.shape))
    speck = rng.random((n,) + Y.shape) < 0.06
    return img - 0.2 * speck[..., None] + rng.normal(0, 0.02, (n,) + Y.shape + (1,))


def _night(rng, n, Y, X):
    top = _jitter_colour(rng, n, (0.02, 0.03, 0.15), 0.02)
    bottom = _jitter_colour(rng, n, (0.10, 0.10, 0.30), 0.03)
    img = _lerp(_col(top), _col(bottom), np.broadcast_to(Y, (n,) + Y.shape))
    stars = rng.random((n,) + Y.shape) > 0.97
    return img + 0.8 * stars[..., None]


def _forest(rng, n, Y, X):
    base = _jitter_colour(rng, n, (0.10, 0.30, 0.12))
    trunk = _jitter_colour(rng, n, (0.36, 0.22, 0.10), 0.03)
    k, p = _p(rng.uniform(3, 6, n)), _p(rng.uniform(0, 1, n))
    is_trunk = ((X * k + p) % 1.0) < 0.18
    img = np.where(np.broadcast_to(is_trunk, (n,) + Y.shape)[..., None], _col(trunk), _col(base))
    return img + rng.normal(0, 0.05, (n,) + Y.shape + (1,))


TEXTURES: dict[str, Callable[..., np.ndarray]] = {
    "sky": _sky,
    "grass": _grass,
    "water": _water,
    "sand": _sand,
    "brick": _brick,
    "snow": _snow,
    "night": _night,
    "forest": _forest,
}

# The config's limits on num_classes / num_backgrounds are these counts.
assert (len(SHAPES), len(TEXTURES)) == (SYNTHETIC_SHAPES, SYNTHETIC_TEXTURES), \
    "bayesncl.settings.config.SYNTHETIC_SHAPES / SYNTHETIC_TEXTURES must count SHAPES / TEXTURES"


# ---------------------------------------------------------------------------------------------------
# Params


def resolve_params(params: dict | None) -> dict[str, Any]:
    """Fill defaults, coerce types and validate, by the run config's definition of ``data.synthetic``
    (bayesncl.settings.config: the one set of limits); errors are :class:`DataError` naming ``data.synthetic.<key>``."""
    try:
        return synthetic_params(params)
    except ConfigError as e:
        raise DataError(str(e)) from None


# ---------------------------------------------------------------------------------------------------
# Drawing


def _hsv_to_rgb(h, s, v):
    i = np.floor(h * 6).astype(int) % 6
    f = h * 6 - np.floor(h * 6)
    p, q, t = v * (1 - s), v * (1 - s * f), v * (1 - s * (1 - f))
    table = np.stack(
        [np.stack([v, t, p], -1), np.stack([q, v, p], -1), np.stack([p, v, t], -1),
         np.stack([p, q, v], -1), np.stack([t, p, v], -1), np.stack([v, p, q], -1)], 0
    )  # [6, n, 3]
    return table[i, np.arange(len(h))].astype(np.float32)


def _sample_backgrounds(rng, n, p):
    common, nb = p["num_common"], p["num_backgrounds"]
    u = rng.random(n)
    c = rng.integers(0, max(common, 1), n)
    r = common + rng.integers(0, max(nb - common, 1), n)
    if common == 0:
        return r
    if common == nb:
        return c
    return np.where(u < p["prevalence"], c, r)


def _draw_chunk(rng, labels, backgrounds, size):
    n = len(labels)
    shape_fns = list(SHAPES.values())
    tex_fns = list(TEXTURES.values())

    # Background: every texture is drawn for the images that use it.
    grid = (np.arange(size, dtype=np.float32) + 0.5) / size
    Y, X = np.meshgrid(grid, grid, indexing="ij")
    img = np.empty((n, size, size, 3), np.float32)
    for b in range(len(tex_fns)):
        idx = np.flatnonzero(backgrounds == b)
        if idx.size:
            img[idx] = tex_fns[b](rng, idx.size, Y, X)
    # Keep each background's colour (the predictable nuisance) but flatten its pattern.
    mean = img.mean(axis=(1, 2), keepdims=True)
    img = mean + np.float32(_TEXTURE_CONTRAST) * (img - mean)

    # Object: radius, centre (kept inside the image), rotation jitter, colour; drawn at 2x and averaged.
    r = rng.uniform(*_RADIUS, n).astype(np.float32)
    cx = (0.5 + _CENTRE_JITTER * rng.uniform(r - 0.5, 0.5 - r)).astype(np.float32)
    cy = (0.5 + _CENTRE_JITTER * rng.uniform(r - 0.5, 0.5 - r)).astype(np.float32)
    rot = rng.uniform(-_ROTATION, _ROTATION, n).astype(np.float32)
    colour = _hsv_to_rgb(rng.random(n), rng.uniform(0.55, 1.0, n), rng.uniform(0.45, 1.0, n))
    shade = rng.uniform(-0.15, 0.15, n).astype(np.float32)

    ss = size * _SUPERSAMPLE
    g2 = (np.arange(ss, dtype=np.float32) + 0.5) / ss
    Y2, X2 = np.meshgrid(g2, g2, indexing="ij")
    cos, sin = np.cos(rot), np.sin(rot)
    mask = np.zeros((n, ss, ss), np.float32)
    for c in range(len(shape_fns)):
        idx = np.flatnonzero(labels == c)
        if idx.size:  # local coords only for this class's images: rotate, then scale by the radius
            dx = (X2[None] - _p(cx[idx])) / _p(r[idx])
            dy = (Y2[None] - _p(cy[idx])) / _p(r[idx])
            u = _p(cos[idx]) * dx + _p(sin[idx]) * dy
            v = _p(cos[idx]) * dy - _p(sin[idx]) * dx
            mask[idx] = shape_fns[c](u, v)
    alpha = mask.reshape(n, size, _SUPERSAMPLE, size, _SUPERSAMPLE).mean(axis=(2, 4))[..., None]
    # A light shading gradient so objects are not perfectly flat.
    obj = _col(colour) * (1 + _p(shade)[..., None] * (Y[None, ..., None] - 0.5) * 2)
    img = img * (1 - alpha) + obj * alpha
    img = np.clip(np.rint(img * 255), 0, 255).astype(np.uint8)
    return img.transpose(0, 3, 1, 2)  # NCHW


def _draw_split(rng, n, p):
    labels = np.arange(n) % p["num_classes"]  # class-balanced, then shuffled
    rng.shuffle(labels)
    backgrounds = _sample_backgrounds(rng, n, p)
    images = np.empty((n, 3, p["image_size"], p["image_size"]), np.uint8)
    for s in range(0, n, _CHUNK):
        e = min(s + _CHUNK, n)
        images[s:e] = _draw_chunk(rng, labels[s:e], backgrounds[s:e], p["image_size"])
    return (
        torch.from_numpy(images),
        torch.from_numpy(labels.astype(np.int64)),
        torch.from_numpy(backgrounds.astype(np.int64)),
    )


def make_synthetic(params: dict | None = None) -> dict[str, torch.Tensor]:
    """Generate the dataset (pure: same params, same tensors).

    Returns ``train_images``/``test_images`` (uint8 [N,3,S,S]), ``train_labels``/``test_labels`` and
    ``train_backgrounds``/``test_backgrounds`` (int64 [N]), and ``mean``/``std`` (float64 [3], per
    channel in [0, 1] units, computed from the train split).
    """
    p = resolve_params(params)
    train_seq, test_seq = np.random.SeedSequence(p["seed"]).spawn(2)
    out: dict[str, torch.Tensor] = {}
    for split, seq, n in (("train", train_seq, p["train_size"]), ("test", test_seq, p["test_size"])):
        x, y, bg = _draw_split(np.random.default_rng(seq), n, p)
        out[f"{split}_images"], out[f"{split}_labels"], out[f"{split}_backgrounds"] = x, y, bg
    x = out["train_images"].to(torch.float64).div_(255)
    out["mean"] = x.mean(dim=(0, 2, 3))
    out["std"] = x.std(dim=(0, 2, 3), unbiased=False)
    return out


# ---------------------------------------------------------------------------------------------------
# Cache


def default_cache_dir() -> Path:
    """``$BAYESNCL_CACHE`` if set, else ``~/.cache/bayesncl``."""
    env = os.environ.get("BAYESNCL_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "bayesncl"


def _params_key(p: dict) -> str:
    blob = json.dumps({"version": GENERATOR_VERSION, **p}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def synthetic_cache_path(params: dict | None = None, cache_dir: str | os.PathLike | None = None) -> Path:
    p = resolve_params(params)
    root = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    return root / f"synthetic-{_params_key(p)}.pt"


_REQUIRED_KEYS = tuple(f"{s}_{k}" for s in ("train", "test") for k in ("images", "labels", "backgrounds")) + (
    "mean",
    "std",
)


def get_synthetic(params: dict | None = None, cache_dir: str | os.PathLike | None = None) -> dict[str, torch.Tensor]:
    """The dataset tensors, from the on-disk cache when present, else generated and cached."""
    from ..core.atomic import atomic_path

    path = synthetic_cache_path(params, cache_dir)
    if path.is_file():
        try:
            data = torch.load(path, map_location="cpu", weights_only=True)
            if all(k in data for k in _REQUIRED_KEYS):
                return data
        except Exception:  # truncated/foreign file: regenerate below (the rename makes this rare)
            pass
    data = make_synthetic(params)
    try:
        with atomic_path(path) as tmp:
            torch.save(data, tmp)
    except OSError as exc:  # a read-only cache dir should not stop a run: the data is already in memory
        import warnings

        warnings.warn(f"could not write synthetic cache {path}: {exc}", RuntimeWarning, stacklevel=2)
    return data


def load_synthetic(params: dict | None, split: str, cache_dir: str | os.PathLike | None = None) -> ImageSet:
    if split not in ("train", "test"):
        raise DataError(f"synthetic dataset: split must be 'train' or 'test', got {split!r}")
    p = resolve_params(params)
    data = get_synthetic(p, cache_dir)
    return ImageSet(
        images=data[f"{split}_images"],
        dataset=None,
        labels=data[f"{split}_labels"],
        backgrounds=data[f"{split}_backgrounds"],
        num_classes=p["num_classes"],
        num_backgrounds=p["num_backgrounds"],
        mean=tuple(float(m) for m in data["mean"]),
        std=tuple(float(s) for s in data["std"]),
        crop_size=p["image_size"],
        name=NAME,
        class_names=list(SHAPES)[: p["num_classes"]],
        background_names=list(TEXTURES)[: p["num_backgrounds"]],
    )
