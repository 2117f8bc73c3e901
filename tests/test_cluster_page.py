"""docs/CLUSTER.md is one walkthrough that works as written: every command of its shell blocks is one a new user has
(each `bayesncl` command parses with the CLI's own parser, each Snakemake command with Snakemake's, its profile,
config files and targets exist, the controller script exists), the outputs it shows are the commands' own, and the
pointers in config/*.yaml name files, tests and headings that exist."""

import fnmatch
import re
import shlex
import tomllib
from pathlib import Path

import pytest
import yaml

from bayesncl.cli.main import build_parser
from bayesncl.evaluation.sections import SECTIONS

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "CLUSTER.md"
CONTROLLER = ROOT / "workflow" / "scripts" / "controller.sbatch"
# What a walkthrough command may start with besides bayesncl, snakemake and sbatch: the shell and the cluster's tools.
TOOLS = {"cd", "git", "python3", "source", "pip", "export", "df", "tail", "sinfo", "squeue", "scancel", "tmux"}


def blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", PAGE.read_text(), re.S)


def commands() -> list[list[str]]:
    """Every simple command of the page's bash blocks, as words (comments dropped, && ; | split)."""
    out = []
    for block in blocks("bash"):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            line = re.sub(r"(^|\s)#\s.*$", "", line).strip()
            for part in re.split(r"&&|;|\|", line):
                if part.strip():
                    out.append(shlex.split(part))
    return out


def written() -> set[str]:
    """The files an earlier command of the page writes (`bayesncl plan --out FILE`)."""
    return {w[w.index("--out") + 1] for w in commands() if w[:2] == ["bayesncl", "plan"] and "--out" in w}


def rule_names() -> set[str]:
    text = "".join(p.read_text() for p in [ROOT / "workflow" / "Snakefile", *(ROOT / "workflow" / "rules").glob("*.smk")])
    return set(re.findall(r"^rule (\w+):", text, re.M)) | set(SECTIONS)


def check_snakemake(args: list[str]) -> None:
    from snakemake.cli import get_argument_parser

    try:
        ns = get_argument_parser().parse_args(args)
    except SystemExit:
        pytest.fail(f"snakemake {' '.join(args)}: Snakemake's parser refuses it")
    for profile in ns.profile or []:
        assert (ROOT / profile / "config.yaml").is_file(), f"no profile {profile}/"
    for f in ns.configfile or []:
        assert (ROOT / f).is_file() or str(f) in written(), f
    for target in ns.targets or []:
        assert target in rule_names() or (ROOT / target).exists(), f"snakemake target {target} is no rule"
    for rule in ns.forcerun or []:
        assert rule in rule_names(), rule
    schema = yaml.safe_load((ROOT / "workflow" / "schemas" / "config.schema.yaml").read_text())
    for item in ns.config or []:  # the workflow's own switches, as its schema names them
        assert item.split("=")[0] in schema["properties"], item


def test_every_command_of_the_walkthrough_exists():
    parser = build_parser()
    seen = set()
    for words in commands():
        head, args = words[0], words[1:]
        seen.add(head)
        if head == "bayesncl":
            try:
                parser.parse_args(args)
            except SystemExit:
                pytest.fail(f"bayesncl {' '.join(args)}: the CLI's parser refuses it")
        elif head == "snakemake":
            check_snakemake(args)
        elif head == "sbatch":
            script = next(a for a in args if not a.startswith("-"))
            assert (ROOT / script).resolve() == CONTROLLER.resolve()
            check_snakemake(["--profile", "slurm", *args[args.index(script) + 1:]])  # what the script runs
        elif head == "pip":
            extra = re.search(r"\.\[(\w+)\]", " ".join(args)).group(1)
            assert extra in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
        elif head == "export":
            name = args[0].split("=")[0]
            assert name in CONTROLLER.read_text(), f"the controller reads no ${name}"
        elif head == "tail":
            pattern = next(a for a in args if not a.startswith("-"))
            out = re.search(r"#SBATCH --output=(\S+)", CONTROLLER.read_text()).group(1).replace("%j", "123")
            assert fnmatch.fnmatch(out, pattern)
        else:
            assert head in TOOLS, f"docs/CLUSTER.md runs {head!r}, which a new user may not have"
    assert {"bayesncl", "snakemake", "sbatch", "scancel", "squeue"} <= seen
    names = {" ".join(w[:2]) for w in commands()}
    for cmd in ("bayesncl arrange-val", "bayesncl estimate", "bayesncl status", "bayesncl plan"):
        assert cmd in names


def test_the_walkthrough_runs_from_a_fresh_clone_to_the_tables_in_order():
    text = PAGE.read_text()
    steps = re.findall(r"^### (\d+)\. (.+)$", text.split("\n## The walkthrough\n", 1)[1].split("\n## ", 1)[0], re.M)
    assert [int(n) for n, _ in steps] == list(range(1, len(steps) + 1))
    order = [next(i for i, (_, t) in enumerate(steps) if word in t.lower())
             for word in ("clone", "data", "cost", "controller", "watch", "died", "tables", "plan")]
    assert order == sorted(order)
    assert "--unlock" in text and "scancel" in text and "filesystem that every compute node" in text


def test_the_outputs_shown_are_the_commands_own():
    from bayesncl.grid.status import render

    status = next(b for b in blocks("text") if b.startswith("state "))
    assert status.splitlines()[0] == render([]).splitlines()[0]
    assert re.match(r"\d+ runs: ", status.splitlines()[-1])
    estimate = next(b for b in blocks("text") if b.startswith("GPU-hours on one "))
    assert estimate.splitlines()[2].split()[:3] == ["dataset", "runs", "pretrain"]
    # the paper grid's estimate itself is checked, line by line, in tests/test_estimate.py (-m grid: a minute)
    planned = next(b for b in blocks("text") if b.startswith("Seeds each claim needs"))
    lines = planned.splitlines()
    assert lines[1].split()[:4] == ["dataset", "claim", "family", "n"] and lines[-1].startswith("The primary claims")
    from bayesncl.planning.plan import Plan, render

    assert lines[0] == render(Plan([], {})).splitlines()[0]  # the planner's own header


def test_the_data_setup_matches_what_the_code_reads():
    from bayesncl.data import waterbirds

    text = PAGE.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| Waterbirds |"))
    assert "the root is the `waterbird_complete95_forest2water2/` folder itself" in row
    assert "root being the waterbird_complete95_forest2water2/ folder" in waterbirds._LAYOUT
    paper = (ROOT / "config" / "paper.yaml").read_text()
    assert re.search(r"waterbirds_root: \S+/waterbird_complete95_forest2water2\}", paper)
    cache = next(line for line in paper.splitlines() if "SET cache_dir" in line)
    assert "24 GiB" in cache + paper.split(cache, 1)[1].splitlines()[0]
    assert re.search(r"cache_dir: null\}", paper)


def test_the_pointers_in_the_grid_configs_name_what_exists():
    headings = {}
    for page in (ROOT / "docs").glob("*.md"):
        headings[f"docs/{page.name}"] = set(re.findall(r"^#+ (.+)$", page.read_text(), re.M))
    found = 0
    for config in (ROOT / "config").glob("*.yaml"):
        text = re.sub(r"\n\s*#\s*", " ", config.read_text())  # comments that go on over lines
        for doc, heading in re.findall(r"(docs/\w+\.md), \"([^\"]+)\"", text):
            assert heading in headings[doc], f"{config.name}: {doc} has no section {heading!r}"
            found += 1
        for test, name in re.findall(r"(tests/\w+\.py)(?:, (test_\w+))?", text):
            assert (ROOT / test).is_file(), f"{config.name}: {test} does not exist"
            if name:
                assert f"def {name}(" in (ROOT / test).read_text(), f"{config.name}: {test} has no {name}"
            found += 1
    assert found >= 2
