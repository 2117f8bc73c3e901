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

__all__ = ["COLLAPSE_MIN_GAIN", "SATURATION", "TAIL", "collapse", "learning_slope", "saturated_budget",
           "saturation_rule"]

TAIL = 0.2  # the share of the epochs, at the end, that the slope is fitted on
# The saturation criterion, fixed on NCL alone before any BayesNCL result was read: a budget is saturated when
# its NCL means over seeds are within these of the largest budget's (final InfoNCE, SC points, top-1 points).
SATURATION = {"infonce": 0.02, "sc": 1.0, "top1": 1.0}
# A rise only counts as a collapse once the run had gained this much below chance (nats), so that half the gain
# is twice the largest epoch-to-epoch rise of the runs without a spike (0.13, 30,000 epochs of the miniature's
# studies; docs/METHOD.md section 10).
COLLAPSE_MIN_GAIN = 0.5


def saturation_rule() -> str:
    """The criterion in words, as the figure, its caption and the study print it."""
    return (f"within {SATURATION['infonce']:g} InfoNCE, {SATURATION['sc']:g} SC and {SATURATION['top1']:g} top-1 "
            f"points of the largest budget's NCL means")


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


def saturated_budget(means: dict[int, dict[str, float]], tolerance: dict[str, float] | None = None) -> int | None:
    """The smallest budget (epochs > 0) whose means are within `tolerance` (default SATURATION) of the largest
    budget's on every measure; None when only the largest budget qualifies, so none is known to be saturated
    (the largest is the reference, never its own evidence). `means`: {epochs: {"infonce", "sc", "top1"}}."""
    tolerance = SATURATION if tolerance is None else tolerance
    budgets = sorted(e for e in means if e > 0)
    if len(budgets) < 2:
        return None
    top = means[budgets[-1]]
    for e in budgets[:-1]:
        if all(math.isfinite(means[e][k]) and math.isfinite(top[k]) and abs(means[e][k] - top[k]) <= tol
               for k, tol in tolerance.items()):
            return e
    return None
