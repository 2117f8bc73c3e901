"""The workflow's rule files (workflow/rules/*.smk) each import or define what they use: a name another file
defines comes from common.smk only, declared on the file's `from_common(...)` line (checked at include time
too); the Snakefile states its minimum Snakemake; `snakemake --lint` finds nothing on the tiny grid."""

import re
import shutil
from pathlib import Path

import pytest
from helpers.processes import current

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "workflow" / "rules"
SNAKEFILE = ROOT / "workflow" / "Snakefile"
MODULES = ("hashlib", "json", "os", "shlex", "shutil", "subprocess", "sys")


def _code(path: Path) -> str:
    """The file without comments and docstrings' prose (names there are not uses)."""
    text = re.sub(r'"""(.|\n)*?"""', '""', path.read_text())
    return "\n".join(line.split("#", 1)[0] if not line.lstrip().startswith("#") else "" for line in text.splitlines())


def defined(path: Path) -> set[str]:
    """Top-level names a file defines: assignments, functions, imports."""
    code = _code(path)
    names = set(re.findall(r"^([A-Za-z_][A-Za-z0-9_]*)\s*(?::[^=\n]*)?=(?!=)", code, re.M))
    names |= set(re.findall(r"^def ([A-Za-z_][A-Za-z0-9_]*)", code, re.M))
    names |= set(re.findall(r"^import ([A-Za-z_][A-Za-z0-9_]*)", code, re.M))
    for items in re.findall(r"^from \S+ import ([^\n(]+|\([^)]*\))", code, re.M):
        names |= {n.split(" as ")[-1].strip() for n in items.strip("()").split(",") if n.strip()}
    return names


def declared(path: Path) -> list[str]:
    m = re.search(r"^from_common\(([^)]*)\)", path.read_text(), re.M)
    return re.findall(r'"([^"]+)"', m.group(1)) if m else []


def used(path: Path, names: set[str]) -> set[str]:
    code = _code(path)
    code = re.sub(r"^from_common\([^)]*\)", "", code, flags=re.M)
    return {n for n in names if re.search(rf"(?<![\w.]){re.escape(n)}\b", code)}


RULE_FILES = sorted(p for p in RULES.glob("*.smk") if p.name != "common.smk")


def test_common_is_included_first_and_every_rule_file_once():
    includes = re.findall(r'^include: "rules/([^"]+)"', SNAKEFILE.read_text(), re.M)
    assert includes[0] == "common.smk"
    assert sorted(includes) == sorted(p.name for p in RULES.glob("*.smk"))


@pytest.mark.parametrize("path", RULE_FILES, ids=lambda p: p.name)
def test_a_rule_file_takes_from_common_exactly_what_it_declares(path):
    common = defined(RULES / "common.smk") - set(MODULES) - {"from_common"}
    mine = defined(path)
    want = sorted(used(path, common) - mine)
    assert declared(path) == want, f"{path.name}: from_common({', '.join(map(repr, want))})"
    first = next((ln for ln in _code(path).splitlines() if ln.strip() and not ln.startswith("import ")), "")
    assert first.startswith("from_common(") or not want, f"{path.name}: declare it after the imports, first"


@pytest.mark.parametrize("path", RULE_FILES, ids=lambda p: p.name)
def test_no_rule_file_reads_another_rule_files_globals(path):
    for other in RULE_FILES:
        if other != path:
            theirs = {n for n in defined(other) - defined(path) - set(MODULES) if not n.startswith("__")}
            assert not used(path, theirs), f"{path.name} uses {sorted(used(path, theirs))} from {other.name}"


@pytest.mark.parametrize("path", [*RULE_FILES, RULES / "common.smk"], ids=lambda p: p.name)
def test_each_file_imports_the_modules_it_uses(path):
    code = _code(path)
    for module in MODULES:
        if re.search(rf"(?<![\w.]){module}\.", code):
            assert re.search(rf"^import {module}$", code, re.M), f"{path.name} uses {module} without importing it"


def test_the_declaration_is_checked_when_the_file_is_included():
    common = (RULES / "common.smk").read_text()
    namespace = {"WorkflowError": RuntimeError}
    exec(re.search(r"^def from_common\(.*?(?=^\S)", common, re.S | re.M).group(0), namespace)
    namespace["RESULTS"] = "results"
    namespace["from_common"]("RESULTS")
    with pytest.raises(RuntimeError, match="defines no BENCHMARKS"):
        namespace["from_common"]("RESULTS", "BENCHMARKS")


def test_snakefile_states_its_minimum_snakemake():
    text = SNAKEFILE.read_text()
    m = re.search(r'^min_version\("(\d+)\.(\d+)', text, re.M)
    assert m and int(m.group(1)) >= 8, "the Snakefile starts with min_version(...)"
    assert text.index("min_version(") < text.index("include:")


@pytest.mark.skipif(shutil.which("snakemake") is None, reason="snakemake not installed (pip install -e '.[workflow]')")
def test_lint_finds_nothing_on_the_tiny_grid(tmp_path):
    r = current().run([shutil.which("snakemake"), "--lint", "--configfile", "config/tiny.yaml", "--config",
                       f"results={tmp_path}"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "Lints for" not in out and "Congratulations, your workflow is in a good condition" in out, out
