"""The stability check: do two runs of the same grid on different seed lists reach the same verdicts?

    snakemake --cores 2                                                  # seeds 0-4 (the grid's own)
    snakemake --cores 2 --config "seeds=[5,6,7,8,9]" results=results-b     # the same grid, other seeds
    python benchmarks/claims_stability.py results/tables/claims.md results-b/tables/claims.md

Reads the two claims tables (Markdown, as `bayesncl report` writes them), pairs their rows by dataset,
claim id (without the report's marks: bayesncl.report.cells.strip_marks) and statement, and prints each
row's two verdicts side by side with a count of the rows that agree, the decisive verdicts that stayed
decisive, and the reversals (holds in one, does not hold in the other: the rule or the seed count would be
wrong), and names the rows found in one table only. Exit status 1 when a decisive verdict reversed; 2 with one
line on stderr when a file is missing, not a claims table, or the two tables share no claim.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

DECISIVE = ("holds", "does not hold")


FIX = "give the claims.md that `bayesncl report` writes (results/tables/claims.md)"


def read_claims(path: Path) -> dict[tuple[str, str, str], dict[str, str]]:
    """{(dataset, claim id, statement): {column: cell}} of a claims.md table (columns found by header name).
    DataError naming the file when it is missing, not text, or has no claims table with a Verdict column."""
    from bayesncl.core.errors import DataError
    from bayesncl.report.cells import strip_marks

    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path} {'is a folder, not a file' if path.is_dir() else 'does not exist'}; {FIX}")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise DataError(f"{path}: not a text file; {FIX}") from None
    except OSError as exc:
        raise DataError(f"{path}: cannot be read ({exc.strerror}); {FIX}") from None
    rows, header, dataset = {}, None, ""
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.startswith("|"):
            continue
        cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        if header is None:
            header = cells
            if "Verdict" not in header:
                break
            continue
        if set(line) <= set("|:- "):
            continue
        first = cells[0]
        if first.startswith("*") and first.endswith("*"):  # a dataset's heading row
            dataset = first.strip("*")
            continue
        if len(cells) != len(header):
            raise DataError(f"{path}, line {number}: {len(cells)} cells, the header has {len(header)}; {FIX}")
        row = dict(zip(header, cells))
        # claim 11 names the end it shows, and the marks (§ still learning, ¶ collapsed, ...) what the runs did:
        # both may differ between seed lists and are no part of the row's identity
        rows[(dataset, strip_marks(first), re.sub(r" \(right: [^)]*\)$", "", row.get("Claim", "")))] = row
    if header is None or "Verdict" not in header:
        raise DataError(f"{path}: no claims table with a Verdict column; {FIX}")
    if not rows:
        raise DataError(f"{path}: the claims table has no claim rows; {FIX}")
    return rows


def compare(a: dict, b: dict) -> tuple[list[tuple], dict[str, int]]:
    """Each shared row's two verdicts and the counts; DataError when the tables share no claim (they are not
    the same grid's, and "0 of 0 agree" would pass the check)."""
    from bayesncl.core.errors import DataError

    keys = [k for k in a if k in b]
    if not keys:
        raise DataError(f"the two tables share no claim ({len(a)} rows in A, {len(b)} in B; rows pair by dataset, "
                        "claim id and statement); give the claims tables of the same grid on two seed lists")
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


def _name(key: tuple[str, str, str]) -> str:
    dataset, cid, stmt = key
    return f"{cid} {stmt}" + (f" ({dataset})" if dataset else "")


def main(argv: list[str] | None = None) -> int:
    """0: no decisive verdict reversed; 1: one did; 2: an input it cannot use (one line on stderr)."""
    from bayesncl.core.errors import BayesNCLError

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("a", type=Path, help="claims.md of the first seed list")
    p.add_argument("b", type=Path, help="claims.md of the second seed list")
    args = p.parse_args(argv)
    try:
        a, b = read_claims(args.a), read_claims(args.b)
        rows, n = compare(a, b)
    except BayesNCLError as e:
        print(f"claims_stability.py: error: {e}", file=sys.stderr)
        return 2
    print(f"| claim | A: Δ [95% CI] | A: verdict | B: Δ [95% CI] | B: verdict | |")
    print("|---|---|---|---|---|---|")
    for (ds, cid, stmt), va, vb, da, db, rev in rows:
        mark = "REVERSED" if rev else ("=" if va == vb else "")
        print(f"| {cid} {stmt} | {da} | {va} | {db} | {vb} | {mark} |")
    print()
    print(f"{n['agree']} of {n['rows']} verdicts agree; decisive: {n['decisive_a']} in A, {n['decisive_b']} in B, "
          f"{n['decisive_kept']} the same in both; reversals (holds <-> does not hold): {n['reversed']}"
          + (f"; {n['only_one']} rows in one table only (not compared)" if n["only_one"] else ""))
    for side, mine, other in (("A", a, b), ("B", b, a)):
        for key in mine:
            if key not in other:
                print(f"only in {side} ({args.a if side == 'A' else args.b}): {_name(key)}")
    return 1 if n["reversed"] else 0


if __name__ == "__main__":
    sys.exit(main())
