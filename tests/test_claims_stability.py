"""benchmarks/claims_stability.py: the stability check's comparison of two claims tables."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("claims_stability", ROOT / "benchmarks" / "claims_stability.py")
cs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cs)

HEAD = "| | Claim | Left | Right | Δ [95% CI] | Test (n) | Paper | Verdict |\n|:--|:--|--:|--:|:--|:--|:--|:--|\n"


def table(tmp_path, name, verdicts):
    rows = "| *Synthetic* | | | | | | | |\n" + "".join(
        f"| {cid} | SC: X > Y | 1 | 2 | +1 [0, 2] | paired (5) | - | {v} |\n" for cid, v in verdicts.items())
    path = tmp_path / name
    path.write_text("<!-- generated -->\n**Claims.** caption\n\n" + HEAD + rows)
    return path


def test_counts_agreement_and_reversals(tmp_path):
    a = cs.read_claims(table(tmp_path, "a.md", {"1a": "holds", "1b": "does not hold", "2a": "holds",
                                                "3": "inconclusive (leans for)"}))
    b = cs.read_claims(table(tmp_path, "b.md", {"1a": "holds", "1b": "holds", "2a": "inconclusive (leans for)",
                                                "3": "inconclusive (leans for)"}))
    assert set(a) == {("Synthetic", c, "SC: X > Y") for c in ("1a", "1b", "2a", "3")}
    rows, n = cs.compare(a, b)
    assert n["rows"] == 4 and n["agree"] == 2 and n["reversed"] == 1
    assert n["decisive_a"] == 3 and n["decisive_b"] == 2 and n["decisive_kept"] == 1
    assert [r[5] for r in rows] == [False, True, False, False]


def test_exit_status_says_whether_a_decisive_verdict_reversed(tmp_path, monkeypatch, capsys):
    a = table(tmp_path, "a.md", {"1a": "holds"})
    for other, code in (("does not hold", 1), ("inconclusive (leans against)", 0)):
        b = table(tmp_path, "b.md", {"1a": other})
        monkeypatch.setattr("sys.argv", ["claims_stability.py", str(a), str(b)])
        assert cs.main() == code
        assert ("REVERSED" in capsys.readouterr().out) == bool(code)


def test_rows_keep_escaped_pipes_and_ignore_claim_11s_shown_end(tmp_path):
    def one(name, stmt):
        path = tmp_path / name
        path.write_text(HEAD + f"| *Synthetic* | | | | | | | |\n| 7c | {stmt} | 1 | 2 | +1 [0, 2] | paired (5) | - | holds |\n")
        return cs.read_claims(path)

    a = one("a.md", r"\|ρ(AF, GV)\|: X < Y")
    assert list(a) == [("Synthetic", "7c", "|ρ(AF, GV)|: X < Y")] and a[next(iter(a))]["Verdict"] == "holds"
    b, c = one("b.md", "SC: λ = 3e-05 > ends 0, 0.0001 (right: 0)"), one("c.md", "SC: λ = 3e-05 > ends 0, 0.0001 (right: 0.0001)")
    assert list(b) == list(c)


def test_only_holds_against_does_not_hold_is_a_reversal(tmp_path):
    """Every ordered pair of verdicts: a reversal is exactly one table's 'holds' against the other's 'does not hold'."""
    verdicts = ["holds", "does not hold", "inconclusive (leans for)", "inconclusive (leans against)"]
    pairs = [(va, vb) for va in verdicts for vb in verdicts]
    ids = [f"c{i}" for i in range(len(pairs))]
    a = cs.read_claims(table(tmp_path, "a.md", {c: va for c, (va, _) in zip(ids, pairs)}))
    b = cs.read_claims(table(tmp_path, "b.md", {c: vb for c, (_, vb) in zip(ids, pairs)}))
    rows, n = cs.compare(a, b)
    got = {(va, vb): rev for _, va, vb, _, _, rev in rows}
    assert got == {p: set(p) == {"holds", "does not hold"} for p in pairs}
    assert n["reversed"] == 2 and n["agree"] == len(verdicts)


def test_the_still_learning_mark_is_not_part_of_a_rows_identity(tmp_path):
    """§ marks rows whose runs were still learning; which rows carry it changes with the seeds."""
    a = cs.read_claims(table(tmp_path, "a.md", {"1a§": "holds", "2a": "inconclusive (leans for)"}))
    b = cs.read_claims(table(tmp_path, "b.md", {"1a": "does not hold", "2a§": "inconclusive (leans for)"}))
    assert set(a) == set(b) == {("Synthetic", c, "SC: X > Y") for c in ("1a", "2a")}
    rows, n = cs.compare(a, b)
    assert n["rows"] == 2 and n["reversed"] == 1
