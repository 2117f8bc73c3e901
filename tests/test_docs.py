"""The README and docs/ tell the truth about the repository: the README stays a newcomer's page, every
path they name exists, docs/DESIGN.md's Layout names every module, and every `bayesncl` command they
show parses."""

import re
import shlex
from pathlib import Path

from bayesncl.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
TRACKED_TOPS = ("src/", "workflow/", "config/", "docs/", "benchmarks/", "tests/", "slurm/", ".ci/")


def _code_spans(text: str) -> list[str]:
    """Inline `code` and the lines of fenced blocks."""
    fenced = re.findall(r"```[a-z]*\n(.*?)```", text, re.S)
    inline = re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text, flags=re.S))
    return inline + [line for block in fenced for line in block.splitlines()]


def _named_paths(text: str) -> set[str]:
    """Repository paths a page names: in code spans or Markdown links, under a tracked top folder."""
    found = {link for link in re.findall(r"\]\(([^)#\s]+)\)", text) if "://" not in link}  # web links are no paths
    for span in _code_spans(text):
        found |= {tok for tok in re.split(r"[\s,;()]+", span) if tok.startswith(TRACKED_TOPS)}
    # placeholders (<run>, DIR, a brace list) name no single file
    return {p.rstrip(".:") for p in found if not re.search(r"[<>{}*~]|DIR|RUN_DIR", p)}


def test_readme_is_a_newcomers_page():
    text = README.read_text()
    assert len(text.splitlines()) <= 200
    assert text.count("<!-- claims:begin -->") == 1 and text.count("<!-- claims:end -->") == 1
    claims = text.split("<!-- claims:begin -->")[1].split("<!-- claims:end -->")[0]
    rows = [line for line in claims.splitlines() if line.startswith("|")]
    assert len(rows) > 10 and "Verdict" in rows[0]
    assert "pip install" in text and "snakemake --cores 2" in text and "python -m pytest" in text


def test_every_path_the_docs_name_exists():
    missing = {}
    for page in [README, *DOCS]:
        bad = sorted(p for p in _named_paths(page.read_text()) if not (ROOT / p).exists())
        if bad:
            missing[page.name] = bad
    assert not missing


def test_design_layout_names_every_module():
    """docs/DESIGN.md's "## Layout" section (up to the next "## " heading) names every module, rule file and
    workflow folder; the README points there."""
    assert "docs/DESIGN.md" in README.read_text().split("## Layout", 1)[1]
    text = (ROOT / "docs" / "DESIGN.md").read_text()
    assert text.count("\n## Layout\n") == 1
    layout = re.split(r"\n## ", text.split("\n## Layout\n", 1)[1], maxsplit=1)[0]
    named = set(re.findall(r"`([^`]+)`", layout))
    words = {w for n in named for w in re.split(r"[/ ]", n) if w}
    pkg = ROOT / "src" / "bayesncl"
    modules = {p.stem for p in pkg.rglob("*.py") if p.stem != "__init__"}
    modules |= {p.name for p in pkg.iterdir() if p.is_dir() and not p.name.startswith("__")}
    rules = {p.name for p in (ROOT / "workflow" / "rules").glob("*.smk")}
    folders = {p.name for p in (ROOT / "workflow").iterdir() if p.is_dir()}
    unnamed = sorted((modules | rules | folders) - words - {w.rstrip("/") for w in words})
    assert not unnamed, f"docs/DESIGN.md's Layout does not name: {unnamed}"


def test_every_bayesncl_command_shown_parses():
    """Each `bayesncl <command> --flag ...` in the README and docs/ names a real subcommand and real flags."""
    sub = next(a for a in build_parser()._actions if a.choices and "pretrain" in a.choices).choices
    seen = 0
    for page in [README, *DOCS]:
        text = re.sub(r"\\\n\s*", " ", page.read_text())  # shell line continuations
        for span in _code_spans(text):
            for m in re.finditer(r"\bbayesncl ([a-z][a-z-]+)((?: [^`|;]*)?)", span):
                name, rest = m.group(1), m.group(2)
                if rest.lstrip().startswith("<-"):  # DESIGN's "bayesncl defaults <- ..." is a chain, not a command
                    continue
                if span[max(0, m.start() - 5):m.start()] == "from ":  # a Python import (docs/EXTENDING.md)
                    continue
                assert name in sub, f"{page.name}: `bayesncl {name}` is no command"
                seen += 1
                flags = {t.split("=")[0] for t in shlex.split(rest, posix=False) if t.startswith("--")}
                unknown = flags - set(sub[name]._option_string_actions)
                assert not unknown, f"{page.name}: `bayesncl {name}` has no {sorted(unknown)}"
    assert seen >= 8
    readme = README.read_text() + (ROOT / "docs" / "USAGE.md").read_text()
    for name in ("pretrain", "evaluate", "summarize", "report", "atlas", "document", "pdf"):
        assert f"bayesncl {name}" in readme


def _between(text: str, name: str) -> str:
    assert text.count(f"<!-- {name}:begin -->") == 1 and text.count(f"<!-- {name}:end -->") == 1, name
    return text.split(f"<!-- {name}:begin -->")[1].split(f"<!-- {name}:end -->")[0]


VERDICT_WORDS = re.compile(r"\b(holds?|held|beats?|beaten|reverses?|reversed|fails?|failed|decided|decisive|"
                           r"survives?|confirm(?:s|ed)?|wins?)\b", re.I)
CLAIM_ID = re.compile(r"\b(?:1[0-2]|[1-9])[a-d]\b|\bclaims? (?:1[0-2]|[1-9])\b|\((?:1[0-2]|[1-9])\)")


def test_the_readmes_reading_is_its_tables_verdicts():
    """The README's reading of the demo's claims table is generated from the table's verdicts (report/reading.py):
    regenerated from the README's own table it is the same text, and no other README sentence names a claim
    beside a verdict word (a hand-written "X holds" drifts from the table)."""
    from bayesncl.report.reading import read_markdown, reading

    text = README.read_text()
    table, words = _between(text, "claims"), _between(text, "reading")
    rows = read_markdown(table)
    assert len(rows) > 20 and all(r.verdict for r in rows)
    assert words.strip("\n").splitlines() == reading(rows)
    prose = text.replace(table, "").replace(words, "")
    prose = re.sub(r"```.*?```", "", prose, flags=re.S)
    sentences = re.split(r"(?<=[.;:])\s+", re.sub(r"\s*\n\s*", " ", prose))
    bad = [s for s in sentences if CLAIM_ID.search(s) and VERDICT_WORDS.search(s)]
    assert not bad, bad


def test_the_prose_check_catches_an_overclaim():
    for sentence in ("STE beats the Gumbel gate (4).", "training reverses that (1b's Training verdict holds).",
                     "12b does not hold because BayesNCL was faster"):
        assert CLAIM_ID.search(sentence) and VERDICT_WORDS.search(sentence), sentence
    assert not (CLAIM_ID.search("16 epochs are the start of training.") and VERDICT_WORDS.search("16 epochs"))
