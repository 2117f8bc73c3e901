"""Whether a run had finished learning, from its own log, and which training budget saturates (docs/METHOD.md
section 10).

The slope of the InfoNCE loss (the epoch means of log.jsonl) over the last 20% of the epochs, by least
squares, with its 95% t-interval (n - 2 degrees of freedom). A run is "still learning" when the whole
interval lies below 0: its loss was still falling when it stopped. Fewer than 3 epochs in the window leave
it undecided (None). NumPy/SciPy only: the features job records it without importing more.

A run "collapsed" when its InfoNCE, after falling, climbed back more than half the way to the chance level
ln(2N - 1) (N images per batch: features that no longer tell the 2N views apart). The cause seen in the
miniature (docs/METHOD.md section 10): one step's gradient spike through the feature's normalisation.
"""

from __future__ import annotations

import math

__all__ = ["COLLAPSE_MIN_GAIN", "MEASURES", "SATURATION_SHARE", "TAIL", "collapse", "gain_shares", "learning_slope",
           "saturated_budget", "saturation_rule"]

TAIL = 0.2  # the share of the epochs, at the end, that the slope is fitted on
# The saturation criterion (docs/METHOD.md section 10), on NCL alone: a budget is saturated when it and every
# larger budget below the largest have covered this share of the way from the start (SC and top-1: the
# random-init network's means; InfoNCE: chance, ln(2N - 1)) to the largest budget's means, on every measure.
# Fixed on 2026-12-02, before the curve under the loss scaler was run; it replaced absolute tolerances
# (0.02 InfoNCE, 1 SC and 1 top-1 point), which 3 seeds cannot meet: their SC part needed means within 1 point
# where the seed sd is about 6. The remaining 5% is smaller than a seed's spread on every measure, so more
# training moves a mean by less than the spread that a verdict's interval already carries.
SATURATION_SHARE = 0.95
# A rise only counts as a collapse once the run had gained this much below chance (nats), so that half the gain
# is twice the largest epoch-to-epoch rise of the runs without a spike (0.13, 30,000 epochs of the miniature's
# studies; docs/METHOD.md section 10).
COLLAPSE_MIN_GAIN = 0.5


def saturation_rule() -> str:
    """The criterion in words, as the figure, its caption and the study print it."""
    return (f"the smallest budget from which NCL's means of final InfoNCE, SC and top-1 have covered "
            f"{SATURATION_SHARE:.0%} of the way from the start (chance; the random-init network) to the largest "
            f"budget's")


def learning_slope(losses: list[float], tail: float = TAIL) -> dict:
    """{"slope", "lo", "hi": loss change per epoch and its 95% interval, "epochs": points fitted,
    "still_learning": True / False / None (undecided)} over the last `tail` of `losses`."""
    from scipy import stats

    n = max(3, math.ceil(tail * len(losses)))
    ys = [float(v) for v in losses[-n:]]
    if len(losses) < 3 or not all(math.isfinite(v) for v in ys):
        return {"slope": None, "lo": None, "hi": None, "epochs": min(n, len(losses)), "still_learning": None}
    xs = list(range(len(losses) - n + 1, len(losses) + 1))
    fit = stats.linregress(xs, ys)
    hw = float(stats.t.ppf(0.975, n - 2)) * float(fit.stderr) if n > 2 else math.inf
    slope = float(fit.slope)
    return {"slope": slope, "lo": slope - hw, "hi": slope + hw, "epochs": n, "still_learning": slope + hw < 0}


def collapse(losses: list[float], batch: int) -> dict:
    """{"collapsed": True / False / None (no finite epoch), "epoch": the first collapsed epoch (1-based) or None,
    "chance": ln(2 * batch - 1)} for the epoch means `losses` of a run trained on batches of `batch` images.
    Epoch e collapsed when, with `best` the lowest loss before it, best <= chance - COLLAPSE_MIN_GAIN and
    losses[e] - best > (chance - best) / 2."""
    chance = math.log(2 * batch - 1)
    if not any(math.isfinite(v) for v in losses):
        return {"collapsed": None, "epoch": None, "chance": chance}
    best = math.inf
    for e, v in enumerate(losses, start=1):
        if math.isfinite(v):
            if best <= chance - COLLAPSE_MIN_GAIN and v - best > (chance - best) / 2:
                return {"collapsed": True, "epoch": e, "chance": chance}
            best = min(best, v)
    return {"collapsed": False, "epoch": None, "chance": chance}


MEASURES = ("infonce", "sc", "top1")


def gain_shares(means: dict[int, dict[str, float]], start: dict[str, float]) -> dict[int, dict[str, float]]:
    """Per budget (epochs > 0) and measure, the share of the way from `start` to the largest budget's mean:
    (mean - start) / (largest - start); NaN where a mean is missing or the largest budget did not improve on
    the start (InfoNCE must fall, SC and top-1 rise). `means`: {epochs: {"infonce", "sc", "top1"}}."""
    budgets = sorted(e for e in means if e > 0)
    top = means[budgets[-1]] if budgets else {}
    out = {}
    for e in budgets:
        out[e] = {}
        for k in MEASURES:
            span = top[k] - start[k]
            improved = math.isfinite(span) and (span < 0 if k == "infonce" else span > 0)
            out[e][k] = (means[e][k] - start[k]) / span if improved else math.nan
    return out


def saturated_budget(means: dict[int, dict[str, float]], start: dict[str, float]) -> int | None:
    """The smallest budget (epochs > 0) that, with every larger budget below the largest, has covered
    SATURATION_SHARE of the way from `start` (SC, top-1: the random-init network; InfoNCE: chance) to the
    largest budget's means on every measure (NaN never qualifies); None when no budget below the largest
    does (the largest is the reference, never its own evidence)."""
    shares = gain_shares(means, start)
    budgets = sorted(shares)[:-1]
    found = None
    for e in reversed(budgets):  # from the largest down: the first that falls short ends the run
        if not all(shares[e][k] >= SATURATION_SHARE for k in MEASURES):  # NaN compares False
            break
        found = e
    return found
