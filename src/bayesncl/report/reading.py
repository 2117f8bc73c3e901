"""The claims table read out in words, generated from its verdicts alone: the README's reading of the demo's table
and the reproduction report's, so that no sentence states a verdict the table does not give
(tests/test_docs.py regenerates the README's from the README's own table).

``rows_of`` takes the judged comparisons (judge.judge), ``read_markdown`` a claims.md as `bayesncl report` writes
it (and as the README quotes it); ``reading`` turns either into Markdown bullets.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .cells import strip_marks
from .claims import PRIMARY, SAME_INIT
from .verdicts import FAILS, HOLDS, NOT_RUN, UNCONTROLLED, decision

__all__ = ["Row", "read_markdown", "reading", "rows_of"]


@dataclass(frozen=True)
class Row:
    dataset: str   # the block title ("Synthetic"; "" for the claims no dataset ran)
    claim: str     # its id, marks stripped
    verdict: str
    training: str  # "-" where the claim has no control
    family: str
    declared: bool = False  # a claim that is not the paper's (its Paper cell "declared"): never primary
    seeds: int = 0          # the fewest seeds on a side of its test (0: not run)


# The fewest seeds whose 95% interval has 2 degrees of freedom (the paper's tables are means of three): a row on fewer
# is read out as such, its interval (t = 12.7 at 1 degree of freedom) deciding only a very large difference.
FEW_SEEDS = 3


def rows_of(blocks, title=lambda d: d) -> list[Row]:
    """The rows of judge.judge(...).blocks; ``title`` names a dataset as the table's block titles do."""
    def training(c) -> str:  # the Training cell as the table shows it
        return SAME_INIT if c.same_init else c.change.verdict if c.change is not None else "-"

    return [Row(title(d) if d else "", c.claim, c.verdict, training(c), c.family, c.paper == "declared",
                min(c.result.n, default=0)) for d, comps in blocks for c in comps]


def read_markdown(text: str) -> list[Row]:
    """The rows of a claims table in Markdown (columns found by header name; block titles in italics)."""
    rows, header, dataset = [], None, ""
    for line in text.splitlines():
        if not line.startswith("|"):
            continue
        cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        if header is None:
            header = cells
            continue
        if set(line) <= set("|:- "):
            continue
        if cells[0].startswith("*") and cells[0].endswith("*"):
            dataset = cells[0].strip("*")
            continue
        cell = dict(zip(header, cells))
        family = next((v for k, v in cell.items() if k.split(" ")[0] == "Family"), "")  # "Family (graph)", "(Holm)"
        n = re.match(r"[^(]*\(([\d, ]+)\)", cell.get("Test (n)", ""))  # "paired (5)", "Welch (3, 4)"
        rows.append(Row("" if dataset == "Not run on any dataset" else dataset, strip_marks(cells[0]),
                        cell.get("Verdict", ""), cell.get("Training", "-"), family, cell.get("Paper") == "declared",
                        min(int(k) for k in n.group(1).split(",")) if n else 0))
    return rows


def _ids(rows: list[Row], many: bool) -> str:
    if not rows:
        return "none"
    return ", ".join(f"{r.claim} ({r.dataset})" if many and r.dataset else r.claim for r in rows)


def reading(rows: list[Row]) -> list[str]:
    """Markdown bullets: the primary claims and the gate, the plain and familywise decisions, the leans, the
    initialisation control, the rows on fewer than FEW_SEEDS seeds, what did not run."""
    ran = [r for r in rows if r.verdict != NOT_RUN]
    many = len({r.dataset for r in ran}) > 1
    primary = [r for r in ran if r.claim.split("-")[0] in PRIMARY and not r.declared]
    secondary = [r for r in ran if r not in primary]
    if any(UNCONTROLLED in r.family for r in secondary):
        gate = "not controlled: a primary claim does not hold familywise"
    elif not primary:
        gate = "tested as one family"
    elif all(decision(r.family) == HOLDS for r in primary):
        gate = "tested familywise: every primary claim holds"
    else:
        gate = "tested familywise at the level the decided primary claims passed on"
    heads = "; ".join(f"{_ids([r], many)} {r.verdict}, familywise {r.family.split(' (')[0]}" for r in primary)
    out = [f"**Primary** ({', '.join(PRIMARY)} on each dataset): {heads or 'not run'}. "
           f"The secondary claims are {gate}."]
    controlled = [r for r in ran if "(family" in r.family]
    out.append(f"**Hold** on their 95% interval (unadjusted): {_ids([r for r in ran if r.verdict == HOLDS], many)}; "
               f"**do not hold**: {_ids([r for r in ran if r.verdict == FAILS], many)}. "
               f"**Familywise** (the Family column, controlled): hold "
               f"{_ids([r for r in controlled if decision(r.family) == HOLDS], many)}; do not hold "
               f"{_ids([r for r in controlled if decision(r.family) == FAILS], many)}.")
    open_ = [r for r in ran if decision(r.verdict) is None]
    against = [r for r in open_ if "against" in r.verdict]
    out.append(f"**Inconclusive**: {len(open_)} of the {len(ran)} comparisons that ran, leaning against the claim: "
               f"{_ids(against, many)}.")
    trained = [r for r in ran if r.training not in ("-", "")]
    same = [r for r in trained if r.training == SAME_INIT]
    judged = [r for r in trained if r not in same]
    out.append(f"**Training** (Δ − Δ at init, where the claim has a control): holds "
               f"{_ids([r for r in judged if r.training == HOLDS], many)}; does not hold "
               f"{_ids([r for r in judged if r.training == FAILS], many)}; inconclusive "
               f"{sum(decision(r.training) is None for r in judged)} of {len(judged)}; {SAME_INIT} (Δ at init 0 by "
               f"construction): {_ids(same, many)}.")
    few = [r for r in ran if 0 < r.seeds < FEW_SEEDS]
    if few:
        out.append(f"**Fewer than {FEW_SEEDS} seeds**: {_ids(few, many)}: an interval with at most "
                   f"{FEW_SEEDS - 2} degree of freedom decides only a very large difference, and a lean says little.")
    missing = [r for r in rows if r.verdict == NOT_RUN]
    if missing:
        out.append(f"**Not run**: {_ids(missing, many)}.")
    return [f"- {line}" for line in out]
