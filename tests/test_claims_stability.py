"""benchmarks/claims_stability.py: the stability check's comparison of two claims tables."""

import importlib.util
from pathlib import Path

import pytest

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


@pytest.mark.parametrize("mark", ["¶", "§", "§¶", "¶§"])
@pytest.mark.parametrize("marked", ["a", "b"])
def test_a_mark_on_one_side_only_still_pairs_the_row_and_counts_its_reversal(tmp_path, mark, marked):
    """§ (still learning) and ¶ (collapsed) mark what the runs did on one seed list, not which claim the row is."""
    ids = {"a": "1a" + mark if marked == "a" else "1a", "b": "1a" + mark if marked == "b" else "1a"}
    a = cs.read_claims(table(tmp_path, "a.md", {ids["a"]: "holds"}))
    b = cs.read_claims(table(tmp_path, "b.md", {ids["b"]: "does not hold"}))
    rows, n = cs.compare(a, b)
    assert (n["rows"], n["reversed"], n["only_one"]) == (1, 1, 0)
    assert rows[0][0] == ("Synthetic", "1a", "SC: X > Y")


def test_every_mark_the_report_can_write_is_stripped(tmp_path):
    """The marks come from the report's one list (cells.MARKS), so a mark added there is no part of an id either."""
    from bayesncl.report.cells import MARKS

    a = cs.read_claims(table(tmp_path, "a.md", {f"{i}{m}": "holds" for i, m in enumerate(MARKS)}))
    b = cs.read_claims(table(tmp_path, "b.md", {str(i): "does not hold" for i in range(len(MARKS))}))
    assert set(a) == set(b)
    assert cs.compare(a, b)[1]["reversed"] == len(MARKS)


def test_claims_tables_the_report_writes_pair_whatever_their_runs_did(tmp_path):
    """The report's own claims.md, once with runs still learning (§) and collapsed (¶), once without: every row
    pairs with its twin (the marks the report writes are the ones the check strips)."""
    import pandas as pd

    from bayesncl.report import summary as summ
    from bayesncl.report.claims_table import render_claims

    df = summ.prepare(pd.read_csv(ROOT / "tests" / "golden" / "runs.csv"))
    df["still_learning"], df["collapsed"] = 0.0, 0.0
    plain = render_claims(df, "md")
    df.loc[df["variant"] == "NCL", "still_learning"] = 1.0
    df.loc[df["variant"] == "BayesNCL", "collapsed"] = 1.0
    marked = render_claims(df, "md")
    ids = [line.split("|")[1].strip() for line in marked.splitlines() if line.startswith("| ")]
    assert any(i.endswith("§¶") for i in ids) and any(i.endswith("¶") and "§" not in i for i in ids)
    (tmp_path / "a.md").write_text(marked)
    (tmp_path / "b.md").write_text(plain)
    a, b = cs.read_claims(tmp_path / "a.md"), cs.read_claims(tmp_path / "b.md")
    rows, n = cs.compare(a, b)
    assert set(a) == set(b) and n["only_one"] == 0 and n["rows"] == len(a) > 10


@pytest.mark.parametrize("kind", ["md", "txt", "tex"])
def test_the_report_writes_no_mark_that_strip_marks_does_not_know(kind):
    from bayesncl.report.cells import Fmt

    with pytest.raises(KeyError):
        Fmt(kind).mark("※")
