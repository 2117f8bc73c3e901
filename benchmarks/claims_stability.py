"""The stability check: do two runs of the same grid on different seed lists reach the same verdicts?

    snakemake --cores 2                                                  # seeds 0-4 (the grid's own)
    snakemake --cores 2 --config "seeds=[5,6,7,8,9]" results=results-b     # the same grid, other seeds
    python benchmarks/claims_stability.py results/tables/claims.md results-b/tables/claims.md

Reads the two claims tables (Markdown, as `bayesncl report` writes them), pairs their rows by dataset,
claim id and statement, and prints each row's two verdicts side by side with a count of the rows that
agree, the decisive verdicts that stayed decisive, and the reversals (holds in one, does not hold in the
other: the rule or the seed count would be wrong). Exit status 1 when a decisive verdict reversed.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

DECISIVE = ("holds", "does not hold")


def read_claims(path: Path) -> dict[tuple[str, str, str], dict[str, str]]:
    """{(dataset, claim id, statement): {column: cell}} of a claims.md table (columns found by header name)."""
    rows, header, dataset = {}, None, ""
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("|"):
            continue
        cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        if header is None:
            header = cells
            continue
        if set(line) <= set("|:- "):
            continue
        row = dict(zip(header, cells))
        first = cells[0]
        if first.startswith("*") and first.endswith("*"):  # a dataset's heading row
            dataset = first.strip("*")
            continue
        # claim 11 names the end it shows, which may differ between runs: not part of the row's identity
        rows[(dataset, first, re.sub(r" \(right: [^)]*\)$", "", row.get("Claim", "")))] = row
    if header is None or "Verdict" not in header:
        raise SystemExit(f"{path}: no claims table with a Verdict column")
    return rows


def compare(a: dict, b: dict) -> tuple[list[tuple], dict[str, int]]:
    keys = [k for k in a if k in b]
    out, n = [], {"rows": len(keys), "agree": 0, "decisive_kept": 0, "decisive_a": 0, "decisive_b": 0,
                  "reversed": 0, "only_one": len(set(a) ^ set(b))}
    for k in keys:
        va, vb = a[k]["Verdict"], b[k]["Verdict"]
        n["agree"] += va == vb
        n["decisive_a"] += va in DECISIVE
        n["decisive_b"] += vb in DECISIVE
        n["decisive_kept"] += va in DECISIVE and va == vb
        rev = {va, vb} == set(DECISIVE)
        n["reversed"] += rev
        out.append((k, va, vb, a[k].get("Δ [95% CI]", ""), b[k].get("Δ [95% CI]", ""), rev))
    return out, n


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("a", type=Path, help="claims.md of the first seed list")
    p.add_argument("b", type=Path, help="claims.md of the second seed list")
    args = p.parse_args()
    rows, n = compare(read_claims(args.a), read_claims(args.b))
    print(f"| claim | A: Δ [95% CI] | A: verdict | B: Δ [95% CI] | B: verdict | |")
    print("|---|---|---|---|---|---|")
    for (ds, cid, stmt), va, vb, da, db, rev in rows:
        mark = "REVERSED" if rev else ("=" if va == vb else "")
        print(f"| {cid} {stmt} | {da} | {va} | {db} | {vb} | {mark} |")
    print()
    print(f"{n['agree']} of {n['rows']} verdicts agree; decisive: {n['decisive_a']} in A, {n['decisive_b']} in B, "
          f"{n['decisive_kept']} the same in both; reversals (holds <-> does not hold): {n['reversed']}"
          + (f"; {n['only_one']} rows in one table only" if n["only_one"] else ""))
    return 1 if n["reversed"] else 0


if __name__ == "__main__":
    sys.exit(main())
