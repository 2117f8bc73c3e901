"""The claims table read out from its verdicts (bayesncl.report.reading): from the claim objects and from a
claims.md alike, several datasets named, arch-suffixed primary ids, a table without a Training column."""

from __future__ import annotations

import pandas as pd

from bayesncl.report import claims_table, judge
from bayesncl.report.reading import Row, read_markdown, reading, rows_of
from helpers.claims import B, MAIN, N, frame, row


def two_datasets() -> pd.DataFrame:
    rows = []
    for d in ("synthetic", "cifar100"):
        for s in range(3):
            for v, sc in ((B, 30.0 + s), (N, 20.0 + 2 * s % 3)):
                rows.append(row(v, s, MAIN, dataset=d, sc=sc, probe_top1=50.0 + s))
    return frame(rows)


def test_the_reading_names_datasets_and_reads_its_own_markdown():
    df = two_datasets()
    blocks = judge.claims_rows(df)
    rows = rows_of(blocks, claims_table.dataset_title)
    md = claims_table.render_claims(df, "md")
    assert read_markdown(md) == rows  # the same rows from the table as written and from the objects
    assert {r.dataset for r in rows} == {"Synthetic", "CIFAR-100", ""}
    words = reading(rows)
    assert words[0].startswith("- **Primary** (1a, 2a on each dataset): 1a (Synthetic) holds, familywise ")
    assert "; 1a (CIFAR-100) holds" in words[0]
    assert "**Hold** on their 95% interval (unadjusted): 1a (Synthetic), 2a (Synthetic), 1a (CIFAR-100)" in words[1]
    assert words[-1].startswith("- **Not run**: 1b (Synthetic), 1c (Synthetic)") and ", 5, 6a," in words[-1]


def test_primary_ids_with_an_architecture_and_a_table_without_training():
    rows = [Row("Synthetic", "1a-r50", "holds", "-", "holds (family)"),
            Row("Synthetic", "2a-r50", "holds", "-", "holds (family)"),
            Row("Synthetic", "4", "holds", "-", "holds (family)")]
    words = reading(rows)
    assert words[0] == ("- **Primary** (1a, 2a on each dataset): 1a-r50 holds, familywise holds; 2a-r50 holds, "
                        "familywise holds. The secondary claims are tested familywise: every primary claim holds.")
    table = ("| | Claim | Verdict | Family (Holm) |\n|:--|:--|:--|:--|\n| *Synthetic* | | | |\n"
             "| 1a§ | SC | holds | holds (family) |\n")
    assert read_markdown(table) == [Row("Synthetic", "1a", "holds", "-", "holds (family)")]


def test_the_terminal_prints_the_reading_and_the_tally():
    df = two_datasets()
    out = claims_table.outcome(df)
    assert "\n\nReading (generated from the verdicts):\n- **Primary** (1a, 2a on each dataset): " in out
    head = out.splitlines()[0]
    assert head.startswith("Claims (docs/METHOD.md section 9; mean ± std (seeds), left vs right; Δ with its 95% "
                           "interval, in the claim's direction): holds: ")
    md = claims_table.render_claims(df, "md")
    assert "comparisons without an interval are not counted. Family: " in md  # no declared note in between
    one = frame([row("SimCLR", s, MAIN, sc=1.0 + s) for s in range(2)] + [row(N, s, MAIN, sc=2.0) for s in range(2)])
    judged = judge.judge(one)
    assert claims_table.gate_sentence(judged) == ("no primary claim (1a, 2a) ran: every comparison in one family, "
                                                  "tested at 0.05")


def test_the_captions_family_rule_is_whole():
    caption = claims_table.render_claims(two_datasets(), "md").splitlines()[1]
    assert ("A verdict holds or does not hold (family) only where its p is below its share of the level; comparisons "
            "without an interval are not counted. Family: ") in caption


def test_the_reading_says_at_which_level_the_secondary_claims_were_tested():
    """The graph: one primary claim holds, the other is stuck, and the secondary claims are tested at the level it
    passed on; a declared claim whose id is a paper's primary one is read as secondary (its Paper cell)."""
    rows = [Row("Synthetic", "1a", "holds", "-", "holds (family)"),
            Row("Synthetic", "2a", "inconclusive (leans for)", "-", "inconclusive (family)"),
            Row("Synthetic", "4", "holds", "-", "holds (family)"),
            Row("Synthetic", "2a", "holds", "-", "holds (family)", declared=True)]
    words = reading(rows)
    assert words[0] == ("- **Primary** (1a, 2a on each dataset): 1a holds, familywise holds; 2a inconclusive (leans "
                        "for), familywise inconclusive. The secondary claims are tested familywise at the level the "
                        "decided primary claims passed on.")
    table = ("| | Claim | Paper | Verdict | Family (graph) |\n|:--|:--|:--|:--|:--|\n| *Synthetic* | | | | |\n"
             "| 2a | Top-1 | declared | holds | holds (family) |\n")
    assert read_markdown(table) == [Row("Synthetic", "2a", "holds", "-", "holds (family)", declared=True)]


def test_rows_on_fewer_than_three_seeds_are_named_from_the_objects_and_the_markdown_alike():
    """A side on 2 seeds (Welch: its smaller side) makes the row one on fewer than 3 seeds; 3 seeds or a row that did
    not run is not named; without such a row (or without a Test column) the reading has no such line."""
    rows = []
    for s in range(3):
        rows.append(row(B, s, MAIN + ";table4", sc=30.0 + s, probe_top1=50.0))
        rows.append(row(N, s, MAIN, sc=20.0 + s, probe_top1=50.0))
        if s < 2:
            rows.append(row("Soft gate", s + 10, "table4", sc=10.0 + s))  # no seed shared: Welch (3, 2)
    df = frame(rows)
    read = rows_of(judge.claims_rows(df), claims_table.dataset_title)
    assert read_markdown(claims_table.render_claims(df, "md")) == read
    seeds = {r.claim: r.seeds for r in read}
    assert seeds["1a"] == 3 and seeds["5"] == 2 and seeds["1b"] == 0
    assert next(c for _, cs in judge.claims_rows(df) for c in cs if c.claim == "5").result.n == (3, 2)
    words = reading(read)
    few = [w for w in words if w.startswith("- **Fewer than 3 seeds**")]
    assert few == ["- **Fewer than 3 seeds**: 5: an interval with at most 1 degree of freedom decides only a very "
                   "large difference, and a lean says little."]
    assert words.index(few[0]) == len(words) - 2 and words[-1].startswith("- **Not run**")
    table = ("| | Claim | Test (n) | Verdict | Family (graph) |\n|:--|:--|:--|:--|:--|\n| *Synthetic* | | | | |\n"
             "| 5 | SC | Welch (4, 2) | holds | holds (family) |\n| 6b | SC | paired (3), right - left | holds | - |\n")
    assert [r.seeds for r in read_markdown(table)] == [2, 3]
    assert not [w for w in reading(read_markdown(table.replace("(4, 2)", "(4, 3)"))) if "Fewer than" in w]
    untested = table.replace("| Test (n) ", "").replace("|:--|:--|:--|:--|:--|", "|:--|:--|:--|:--|")
    untested = untested.replace(" Welch (4, 2) |", "").replace(" paired (3), right - left |", "")
    assert [r.seeds for r in read_markdown(untested)] == [0, 0]
    assert not [w for w in reading(read_markdown(untested)) if "Fewer than" in w]
