"""The claims table's judgement: every claim of claims.py (the paper's, a plugin's, the workflow config's)
built on the grid's runs per dataset and architecture (``claims_rows``, ``judge``), with its initialisation
control (the same comparisons on the untrained twins, and the change training brought) and its familywise
verdicts, in one look or, for a grid grown by `bayesncl plan`, two (docs/METHOD.md section 9)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import pandas as pd

from .claims import CLAIMS, NO_TWINS, PRIMARY, Claim, Comparison, Runs, Side, twin_records
from .names import ARCH_NAMES
from .summary import prepare
from .verdicts import ALPHA, NOT_RUN, Family, Kind, Outcome, compare, family_verdicts, finite, label, make_family, \
    stage_p, two_looks

__all__ = ["Judged", "claims_rows", "judge", "parse_sets", "training_change"]


def _arch_name(arch: str) -> str:
    return ARCH_NAMES.get(arch, arch) if arch else "ResNet-50"


def claims_rows(df: pd.DataFrame, declared: Sequence[Claim] = ()) -> list[tuple[str, list[Comparison]]]:
    """[(dataset, comparisons), ...]: per dataset, the claims whose sets it has runs in, each judged within
    one architecture (a claim whose sets hold runs of several architectures gets one row per architecture,
    which its text and id name); a last block ("") holds the claims no dataset ran, as "not run"."""
    return judge(df, declared).blocks


@dataclass
class Judged:
    """The claims table's comparisons (``blocks``, as claims_rows) and their familywise tests: one Family per
    look (one look, or two for a grid grown by `bayesncl plan`)."""
    blocks: list[tuple[str, list[Comparison]]]
    families: list[Family]
    pilot: bool = False  # two looks: the runs record the pilot's seeds (runs.csv's pilot_of)

    @property
    def comparisons(self) -> list[Comparison]:
        return [c for _, comps in self.blocks for c in comps]


def judge(df: pd.DataFrame, declared: Sequence[Claim] = ()) -> Judged:
    """Every comparison of the claims table, judged plainly (all seeds), against its initialisation control
    and familywise (claims_rows): the registered claims (CLAIMS: the paper's, a plugin's), then ``declared``
    (a workflow config's own: claims.declared_claims)."""
    every_claim = [*CLAIMS.values(), *declared]
    df = prepare(df)
    records = df.to_dict("records")
    pilot = any(str(r.get("pilot_of") or "") for r in records)
    if pilot:  # the runs each set added after the pilot: the second look's evidence
        for r in records:
            own = set(parse_sets(r.get("pilot_of")))
            r["added_of"] = ";".join(s for s in parse_sets(r["sets"]) if s not in own)
    datasets = list(dict.fromkeys(r["dataset"] for r in records))
    blocks, ran = [], set()
    for d in datasets:
        mine = [r for r in records if r["dataset"] == d]
        parts = [Runs([r for r in mine if r["arch"] == a], a) for a in dict.fromkeys(r["arch"] for r in mine)]
        comps = []
        for claim in every_claim:
            where = [runs for runs in parts
                     if runs.has(*claim.sets) and (claim.applies is None or claim.applies(runs))]
            for runs in where:
                ran.add(claim.number)
                built = _controlled(claim, runs)
                if pilot:
                    _looked(claim, runs, built)
                for c in built:
                    c.sets = claim.sets
                    c.primary = not claim.module and c.claim in PRIMARY
                    c.text = c.text.replace("@arch", _arch_name(runs.arch))
                    if len(where) > 1 and claim.number != 9:
                        c.text += f" ({_arch_name(runs.arch)})"
                        c.claim += "-" + runs.arch.replace("resnet", "r")  # ids unique within the dataset
                    comps.append(c)
        if comps:
            blocks.append((d, comps))
    empty = Runs([])
    missing = []
    for claim in every_claim:
        if claim.number not in ran:
            for c in claim.build(empty):
                c.sets, c.init_note = claim.sets, claim.at_init
                c.primary = not claim.module and c.claim in PRIMARY
                c.text = c.text.replace("@arch", _arch_name(""))
                missing.append(c)
    if missing:
        blocks.append(("", missing))
    every = [c for _, comps in blocks for c in comps]
    if not pilot:
        family = family_verdicts([(c.result, c.kind) for c in every], [c.primary for c in every], ALPHA)
        for c, v in zip(every, family.verdicts):
            c.family = v
        return Judged(blocks, [family])
    return Judged(blocks, _two_looks(every), pilot=True)


def parse_sets(value) -> list[str]:
    return [s for s in str(value or "").split(";") if s] if value == value else []  # NaN: none


def _looked(claim: Claim, runs: Runs, comps: list[Comparison]) -> None:
    """A grown grid's two stages of each comparison: the claim built on the pilot's runs alone, then on the added
    runs alone (comparisons paired by position and id, as the initialisation control); look 2 combines them."""
    out = []
    for column in ("pilot_of", "added_of"):
        part = Runs(runs.records, runs.arch, column=column)
        built = claim.build(part) if part.has(*claim.sets) else []
        out.append(built if len(built) == len(comps) else [])
    for i, c in enumerate(comps):
        c.looks = tuple(look[i].result if look and look[i].claim == c.claim else Outcome(NOT_RUN) for look in out)


def _two_looks(every: list[Comparison]) -> list[Family]:
    """The familywise verdicts of a grown grid (verdicts.two_looks): look 1 on the pilot's seeds, look 2 combining the
    pilot's with the added seeds; each comparison's Family label names the look that gave it."""
    import numpy as np

    for c in every:
        c.looks = c.looks or (Outcome(NOT_RUN), Outcome(NOT_RUN))  # a claim no dataset ran
    primary = [c.primary for c in every]
    one, two = (np.stack([stage_p(c.looks[k], c.kind) for c in every], axis=-1) for k in (0, 1))
    codes, controlled, look = two_looks(one, two, primary)
    for i, c in enumerate(every):
        c.family = label(codes[i], controlled[i], c.verdict, int(look[i]))
    node = np.isfinite(one[0, 0]) | np.isfinite(two[0, 0])
    return [make_family([c.family for c in every], codes, node, primary, [c.verdict != NOT_RUN for c in every])]


def _controlled(claim: Claim, runs: Runs) -> list[Comparison]:
    """The claim's comparisons on ``runs`` with their initialisation control: the same comparisons on the runs'
    untrained twins, and the change training brought, judged by the same rule."""
    comps = claim.build(runs)
    if claim.at_init:
        for c in comps:
            c.init_note = claim.at_init
        return comps
    twins = Runs(twin_records(runs.records), runs.arch)
    init = claim.build(twins) if twins.has(*claim.sets) else []
    for i, c in enumerate(comps):
        c0 = init[i] if len(init) == len(comps) and init[i].claim == c.claim else None
        if c0 is None or c0.result.verdict == NOT_RUN:
            c.init_note = NO_TWINS if c.result.verdict != NOT_RUN else ""  # not run: nothing to control
            continue
        c.init, c.change = c0.result, training_change(c, c0)
        # both sides read the same network before training (one backbone for the probe, a gate that differs only
        # once trained): every seed's Delta at init is exactly 0 and Training would repeat the verdict
        r0 = c0.result
        c.same_init = r0.test == "paired" and len(r0.left) > 0 and r0.left == r0.right
    return comps


def training_change(c: Comparison, c0: Comparison) -> Outcome:
    """What training changed: each side's gain over its own initialisation (a seed's value minus its untrained
    twin's), compared as the claim compares its sides. Paired by seed this is Delta_s - Delta_init,s; the margins
    are the trained comparison's (a relative tolerance in the trained right side's unit, never the gains')."""
    def gain(side: Side, init: Side) -> list[tuple[float, float]]:
        at = dict(finite(init.values))
        return [(s, v - at[s]) for s, v in finite(side.values) if s in at]

    kind = Kind(c.kind.name, c.result.tol) if c.kind.relative else c.kind
    right = 0.0 if c.right_text is not None else gain(c.right, c0.right)  # a constant gains nothing
    return compare(gain(c.left, c0.left), right, kind, c.better)
