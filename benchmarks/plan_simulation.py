"""The planning rules checked by simulation (docs/METHOD.md section 9, "Planning"; figures in docs/METHOD.md).

    python benchmarks/plan_simulation.py            # full size: 200,000 grids per check (about a minute)
    python benchmarks/plan_simulation.py --sims 20000

Each check draws whole grids of per-seed paired differences (normal, the t-test's own model) and judges them with
the package's own decision code (verdicts.p_arrays, verdicts.gatekeep, verdicts.two_looks) and planner
(plan.seeds_needed), never a reimplementation of either:

1. power: the seeds the planner asks for decide ("holds") in at least 80% of grids drawn with the pilot's mean
   and sd, at the level the second look uses; one seed fewer does not (for one-sided claims);
2. two looks under the null (the claim's bound true): the share of false "holds" over both looks, the second
   look always taken (the worst case: any rule for the added seeds), stays at the rule's level, alpha / 2
   one-sided (p-values are doubled: p < 0.05 is the 95% interval's side);
3. gatekeeping: with one true and one false primary claim and four false secondary claims, the familywise error
   (any false "holds (family)") stays at alpha / 2.

`tests/test_plan.py` runs each at a small seeded size in the default suite.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from bayesncl import plan  # noqa: E402
from bayesncl.report import verdicts as V  # noqa: E402

# Pilots of the shapes the demo's table shows: (name, kind, true mean of d, sd of d, family size m).
PILOTS = [
    ("better, large", V.BETTER, 6.8, 6.5, 2),
    ("better, small", V.BETTER, 0.75, 0.14, 20),
    ("not worse", V.NOT_WORSE, 0.0, 1.2, 2),
    ("at most 6%", V.at_most(4.3), 0.0, 2.0, 20),
    ("within 1 point", V.within(1.0), 0.0, 0.8, 2),
]
ALPHA_ONE_SIDED = V.ALPHA / 2  # the doubled p-values' one-sided level


def _bound(kind: V.Kind) -> float:
    """Where the claim's bound lies in d (the null): 0 for >, -margin for >=, +tol for "at most"."""
    return {"better": 0.0, "not worse": -kind.margin, "at most": kind.margin}.get(kind.name, kind.margin)


def holds(d: np.ndarray, kind: V.Kind, level: float) -> np.ndarray:
    """Per grid (row of ``d``, per-seed differences): does the t-test of the verdict rule hold at the doubled-p
    ``level``? The package's p-values (verdicts.p_arrays)."""
    n = d.shape[1]
    se = d.std(axis=1, ddof=1) / math.sqrt(n)
    p_for, _ = V.p_arrays(d.mean(axis=1), se, n - 1, kind.margin, kind)
    return p_for < level


def power_check(kind: V.Kind, mean: float, sd: float, m: int, sims: int, rng) -> dict:
    """The planner's n for this pilot, and the simulated share of grids of n (and n - 1) seeds that hold at the
    second look's level for a family of m."""
    level = V.LOOK_ALPHAS[1] / m  # doubled-p level; the planner's one-sided alpha is half of it
    effect = mean if kind.name == "better" else kind.margin
    n = plan.seeds_needed(effect, sd, level / 2, kind.name == "within")
    out = {"n": n, "level": level}
    for k in (n, n - 1):
        if k >= 2:
            out[k] = float(holds(rng.normal(mean, sd, (sims, k)), kind, level).mean())
    return out


def two_looks_null(kind: V.Kind, sd: float, n1: int, sims: int, rng, primary: bool = False) -> dict:
    """False "holds" over both looks with the true mean on the claim's bound. The second look is always taken,
    with the planner's n where it plans one (clipped to 2-30) and n1 otherwise: the worst case for the rule."""
    bound = _bound(kind)
    d1 = rng.normal(bound, sd, (sims, n1))
    se1 = d1.std(axis=1, ddof=1) / math.sqrt(n1)
    p1 = V.p_arrays(d1.mean(axis=1), se1, n1 - 1, kind.margin, kind)
    effect = d1.mean(axis=1) - bound if kind.name == "better" else np.full(sims, kind.margin)
    # the planner's n depends on effect / sd alone: asked once per ratio rounded to 2 digits (time, not validity)
    ratio = np.round(effect / d1.std(axis=1, ddof=1), 2)
    want = {r: plan.seeds_needed(r, 1.0, V.LOOK_ALPHAS[1] / 2, kind.name == "within") for r in np.unique(ratio)}
    n2 = np.array([min(30, max(2, want[r])) if want[r] else n1 for r in ratio])
    p2f, p2a = np.empty(sims), np.empty(sims)
    for k in np.unique(n2):  # one draw per planned size
        rows = np.flatnonzero(n2 == k)
        d2 = rng.normal(bound, sd, (rows.size, k))
        f, a = V.p_arrays(d2.mean(axis=1), d2.std(axis=1, ddof=1) / math.sqrt(k), k - 1, kind.margin, kind)
        p2f[rows], p2a[rows] = f, a
    ran = np.ones((sims, 1), dtype=bool)
    codes, controlled, look = V.two_looks((p1[0][:, None], p1[1][:, None]), ran, (p2f[:, None], p2a[:, None]), ran,
                                          np.array([primary]))
    false = (codes[:, 0] == V.HOLD) & controlled[:, 0]
    a1, a2 = (a / 2 for a in V.LOOK_ALPHAS)
    return {"rate": float(false.mean()), "at_look_1": float((false & (look[:, 0] == 1)).mean()),
            "designed": a1 + (1 - a1) * a2, "bound": ALPHA_ONE_SIDED}


def gatekeeping_fwer(sims: int, rng, n: int = 5, sd: float = 1.0) -> dict:
    """One true primary claim (mean 3 sd), one false (on its bound), four false secondary claims: the share of
    grids with any false "holds (family)", and how often the gate opened."""
    means = np.array([3.0 * sd, 0.0, 0.0, 0.0, 0.0, 0.0])
    primary = np.array([True, True, False, False, False, False])
    d = rng.normal(means[None, :, None], sd, (sims, means.size, n))
    se = d.std(axis=2, ddof=1) / math.sqrt(n)
    pf, pa = V.p_arrays(d.mean(axis=2), se, n - 1, 0.0, V.BETTER)
    codes, controlled = V.gatekeep(pf, pa, primary, np.ones(means.size, dtype=bool), V.ALPHA)
    false = (codes == V.HOLD) & controlled & (means == 0.0)[None, :]
    return {"fwer": float(false.any(axis=1).mean()), "gate_open": float(controlled[:, 2].mean()),
            "bound": ALPHA_ONE_SIDED}


def sigma(p: float, sims: int) -> float:
    return math.sqrt(p * (1 - p) / sims)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=200_000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    print(f"# {args.sims:,} simulated grids per check, seed {args.seed}\n")
    print("1. Power of the planned seeds (target 80%)\n")
    print("| pilot | m | planned n | power at n | power at n - 1 |\n|---|---:|---:|---:|---:|")
    for name, kind, mean, sd, m in PILOTS:
        r = power_check(kind, mean, sd, m, args.sims, rng)
        fewer = f"{r[r['n'] - 1]:.3f}" if r["n"] - 1 >= 2 else "-"
        print(f"| {name} (Δ {mean:g}, sd {sd:g}) | {m} | {r['n']} | {r[r['n']]:.3f} | {fewer} |")
    print("\n2. False holds over two looks, the claim's bound true (rule: at most 0.025)\n")
    print("| claim | sd | pilot n | false holds | at look 1 | designed |\n|---|---:|---:|---:|---:|---:|")
    for name, kind, _, sd, _ in PILOTS:
        for n1 in (3, 5):
            r = two_looks_null(kind, sd, n1, args.sims, rng)
            print(f"| {name} | {sd:g} | {n1} | {r['rate']:.4f} ± {sigma(r['rate'], args.sims):.4f} | "
                  f"{r['at_look_1']:.4f} | {r['designed']:.4f} |")
    r = gatekeeping_fwer(args.sims, rng)
    print(f"\n3. Gatekeeping, one true and one false primary claim, four false secondary claims: familywise error "
          f"{r['fwer']:.4f} ± {sigma(r['fwer'], args.sims):.4f} (rule: at most 0.025); the gate opened in "
          f"{r['gate_open']:.1%} of grids")
    print(f"\n({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
