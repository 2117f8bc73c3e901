"""Linear probe on cached frozen features in NumPy: the "fast" protocol of docs/METHOD.md section 5.

No augmentation: features are extracted once (eval mode), standardised with the training split's
mean and population std, and one Linear(F, C) is trained with AdamW on minibatches, cosine-decayed lr.
Softmax regression is convex, so the layer starts at zero (no init randomness); the seed only drives the
minibatch order (NumPy's default_rng), which makes a run exactly repeatable. Numbers from this mode must
be labelled protocol="fast".

This module imports no torch: the linear_probe and background_probe jobs that read the features cache
spend their time on the probe, not on importing torch (about 5 s of a 5 s job). The update is torch's
AdamW over a Linear layer's parameters (weight and bias both decayed, bias-corrected moments) with
CosineAnnealingLR stepped once per minibatch; tests/test_probe.py checks it against torch's optimiser fed
the same batch order. Arithmetic: the standardisation statistics in float64, everything else (inputs,
weights, Adam moments, matmuls) in float32, as torch does.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["topk_accuracy", "standardize", "batch_orders", "train_linear", "predict_logits", "linear_probe_fast"]


def topk_accuracy(logits, y, ks=(1, 5)) -> dict:
    """{"top1": %, "top5": %}: percentage of rows whose label is among the k highest logits (a tie with the
    label's logit counts for the label). k is capped at the number of classes (top-5 with 3 classes is
    top-3, i.e. 100%); every entry is NaN for an empty set."""
    logits = np.asarray(logits)
    y = np.asarray(y).astype(np.int64).reshape(-1)
    if logits.shape[0] == 0:
        return {f"top{k}": math.nan for k in ks}
    rank = (logits > logits[np.arange(len(y)), y][:, None]).sum(1)  # classes scored above the label
    C = logits.shape[1]
    return {f"top{k}": 100.0 * float((rank < min(k, C)).mean()) for k in ks}


def standardize(train_x, *others, eps: float = 1e-6) -> tuple[np.ndarray, ...]:
    """Z-score every array with the per-feature mean and population std of train_x (std clamped at eps:
    constant features -> 0). Float32 out."""
    train_x = np.asarray(train_x)
    t = train_x.astype(np.float64)
    mean = t.mean(0, keepdims=True)
    std = np.maximum(t.std(0, keepdims=True), eps)
    return tuple(((np.asarray(x, dtype=np.float64) - mean) / std).astype(np.float32) for x in (train_x, *others))


def batch_orders(n: int, epochs: int, seed: int) -> list[np.ndarray]:
    """One shuffled order of range(n) per epoch, from np.random.default_rng(seed)."""
    rng = np.random.default_rng(seed)
    return [rng.permutation(n) for _ in range(epochs)]


def train_linear(x, y, num_classes: int, *, epochs: int = 100, batch_size: int = 256, lr: float = 1e-3,
                 weight_decay: float = 1e-4, seed: int = 0, orders=None,
                 betas=(0.9, 0.999), eps: float = 1e-8) -> tuple[np.ndarray, np.ndarray]:
    """Fit Linear(x.shape[1], num_classes) (weight [C, F], bias [C], both from zero) with mean cross-entropy,
    AdamW and per-step cosine decay of lr to 0 over epochs * ceil(N / batch_size) steps; minibatches in
    `orders` (one index order per epoch; default batch_orders(N, epochs, seed)), the last one of an epoch
    smaller when batch_size does not divide N. Returns (weight, bias), float32."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    y = np.asarray(y).astype(np.int64).reshape(-1)
    N, F = x.shape
    if orders is None:
        orders = batch_orders(N, epochs, seed)
    W, b = np.zeros((num_classes, F), np.float32), np.zeros(num_classes, np.float32)
    params = (W, b)
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    b1, b2 = betas
    total = len(orders) * max(1, math.ceil(N / batch_size))
    t = 0
    for order in orders:
        for s in range(0, N, batch_size):
            idx = order[s : s + batch_size]
            xb, yb = x[idx], y[idx]
            logits = xb @ W.T + b
            logits -= logits.max(1, keepdims=True)
            p = np.exp(logits)
            p /= p.sum(1, keepdims=True)
            p[np.arange(len(yb)), yb] -= 1.0
            p /= np.float32(len(yb))                    # d(mean CE)/d logits
            grads = (p.T @ xb, p.sum(0))
            lr_t = lr * (1.0 + math.cos(math.pi * t / total)) / 2.0  # CosineAnnealingLR, eta_min 0
            t += 1
            bc1, bc2 = 1.0 - b1 ** t, 1.0 - b2 ** t
            for param, g, m_, v_ in zip(params, grads, m, v):
                param *= np.float32(1.0 - lr_t * weight_decay)  # decoupled decay, weight and bias alike
                m_ *= np.float32(b1)
                m_ += np.float32(1.0 - b1) * g
                v_ *= np.float32(b2)
                v_ += np.float32(1.0 - b2) * g * g
                denom = np.sqrt(v_) / np.float32(math.sqrt(bc2)) + np.float32(eps)
                param -= np.float32(lr_t / bc1) * m_ / denom
    return W, b


def predict_logits(W: np.ndarray, b: np.ndarray, x, batch_size: int = 4096) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    if x.shape[0] == 0:
        return np.zeros((0, W.shape[0]), np.float32)
    return np.concatenate([x[s : s + batch_size] @ W.T + b for s in range(0, x.shape[0], batch_size)])


def linear_probe_fast(train_x, train_y, test_x, test_y, num_classes: int, *, epochs: int = 100,
                      batch_size: int = 256, lr: float = 1e-3, weight_decay: float = 1e-4, seed: int = 0) -> dict:
    """Top-1 / top-5 test accuracy (percent) of a linear classifier on standardised frozen features.

    Returns dict(top1, top5, protocol="fast", train_top1)."""
    xtr, xte = standardize(train_x, test_x)
    W, b = train_linear(xtr, train_y, num_classes, epochs=epochs, batch_size=batch_size, lr=lr,
                        weight_decay=weight_decay, seed=seed)
    test = topk_accuracy(predict_logits(W, b, xte), test_y)
    train = topk_accuracy(predict_logits(W, b, xtr), train_y, ks=(1,))
    return {"top1": test["top1"], "top5": test["top5"], "protocol": "fast", "train_top1": train["top1"]}
