"""docs/EXTENDING.md, done as the page says: its files, written into a temporary folder (the package untouched), a
folder dataset of generated images, and its command, to rows in Tables 1 and 2 and a verdict for its claim."""

import os
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image
from helpers.grids import dry_jobs, pretrained
from helpers.processes import current

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "EXTENDING.md"
SNAKEMAKE = shutil.which("snakemake", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")


def page_files() -> dict[str, str]:
    """{file name: text} of the page's code blocks that start with `# file: NAME`."""
    return {m.group(2): m.group(3) for m in
            re.finditer(r"```(\w+)\n# file: (\S+)\n(.*?)```", PAGE.read_text(), re.S)}


def page_command() -> list[str]:
    (cmd,) = re.findall(r"```bash\n(snakemake [^\n]*)\n```", PAGE.read_text())
    return cmd.split()


def write_images(root: Path, classes=("circle", "square", "stripes"), train=12, val=6, size=20) -> None:
    """A folder dataset whose class decides the picture: train/ and val/ with one folder per class."""
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[:size, :size]
    shapes = {"circle": (yy - size / 2) ** 2 + (xx - size / 2) ** 2 < (size / 3) ** 2,
              "square": (abs(yy - size / 2) < size / 4) & (abs(xx - size / 2) < size / 4),
              "stripes": (xx // 3) % 2 == 0}
    for split, n in (("train", train), ("val", val)):
        for c in classes:
            (root / split / c).mkdir(parents=True)
            for i in range(n):
                img = rng.integers(0, 80, (size, size, 3), dtype=np.uint8)
                img[shapes[c]] = rng.integers(150, 256, 3, dtype=np.uint8)
                Image.fromarray(img).save(root / split / c / f"{i:03d}.png")


def page_imports() -> dict[str, list[str]]:
    """{module: names} of the page's table "What a plugin imports"."""
    table = PAGE.read_text().split("### What a plugin imports", 1)[1].split("\n## ", 1)[0]
    return {first.split()[1]: [n.split(".")[-1] for n in re.findall(r"`([\w.]+)`", names)]
            for first, names in re.findall(r"^\| `(from [^`]+)` \| (.*) \|$", table, re.M)}


def test_each_name_a_plugin_imports_has_one_home_the_page_names():
    """The table's names are the public API's, all of them (bayesncl.api), each the object of the module that
    defines it; the page's own files import nothing else of the package."""
    import ast
    import importlib
    import inspect

    from bayesncl import api

    table = page_imports()
    assert set(table) == {"bayesncl.api"} and sorted(table["bayesncl.api"]) == sorted(api.NAMES)
    for name, module in api.NAMES.items():
        home = importlib.import_module(module)
        assert getattr(api, name) is getattr(home, name), name
        obj = getattr(home, name)  # a class or function: where it is defined; a registry (METRICS): where it is made
        where = obj.__module__ if inspect.isclass(obj) or inspect.isfunction(obj) else module
        assert where == module or where.startswith(module + "."), (module, name, where)
        assert name in inspect.getsource(importlib.import_module(where)), (module, name)
    for text in page_files().values():
        if text.lstrip().startswith(("#", '"""')) and "import" in text:
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("bayesncl"):
                    assert node.module == "bayesncl.api" and all(a.name in api.NAMES for a in node.names), \
                        ast.unparse(node)


def test_the_page_has_the_files_and_the_command_this_test_runs():
    files = page_files()
    assert set(files) == {"my_method.py", "my_measure.py", "my_grid.yaml"}
    grid = yaml.safe_load(files["my_grid.yaml"])
    assert grid["plugins"] == ["my_method", "my_measure"] and grid["datasets"]["my_images"]["data"]["dataset"] == "imagefolder"
    assert page_command()[:2] == ["snakemake", "--cores"]
    # the method's weight is a declared setting, swept over two values by two variants of Tables 1 and 2
    assert 'settings={"l1_weight": setting(1e-3,' in files["my_method.py"]
    mine = {v: s["method"].get("l1_weight") for v, s in grid["variants"].items() if s["method"]["name"] == "ncl_l1"}
    assert mine == {"NCL + L1": None, "NCL + L1 (x10)": 1.0e-2}
    assert all(set(mine) <= set(grid["sets"][t]["variants"]) for t in ("table1", "table2"))
    # ... and swept over three values in Figure 4b's set, with a declared inverted U over that sweep
    assert grid["sets"]["figure4b"] == {"variants": ["NCL + L1"], "sweep": {"method.l1_weight": [0.0, 1.0e-2, 0.1]}}
    assert {"id": "U", "metric": "sc", "left": "NCL + L1", "relation": "inverted U", "sweep": "l1_weight"} in grid["claims"]


def _snakemake_and_stale(cmd: list[str], env: dict, grid_path: Path) -> tuple[list[str], list[str]]:
    """(the runs `snakemake -n` would pretrain, the runs `bayesncl stale` lists) with the page's command, once
    both are checked to plan the same jobs, one by one (their evaluation and the report's after them)."""
    r = current().run([SNAKEMAKE, *cmd[1:], "-n", "--nolock"], cwd=ROOT, env=env, capture_output=True, text=True,
                      timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    s = current().run([sys.executable, "-m", "bayesncl", "stale", "--grid", str(grid_path)], cwd=ROOT, env=env,
                      capture_output=True, text=True, timeout=600)
    assert s.returncode == 0, s.stderr[-3000:]
    listed = sorted(line.split(": ")[0] for line in s.stdout.splitlines())
    assert dry_jobs(r.stdout) == listed, (r.stdout[-3000:], s.stdout)
    return pretrained(dry_jobs(r.stdout)), pretrained(listed)


@pytest.mark.grid  # a whole grid end to end (about 2 minutes): CI runs it with `-m grid`
@pytest.mark.skipif(SNAKEMAKE is None, reason="snakemake not installed (pip install -e '.[workflow]')")
def test_a_plugin_method_and_a_folder_dataset_reach_the_tables_and_the_claims(tmp_path):
    work = tmp_path / "mine"
    work.mkdir()
    for name, text in page_files().items():
        (work / name).write_text(text)
    write_images(tmp_path / "my_images")
    grid_path = work / "my_grid.yaml"
    grid = yaml.safe_load(grid_path.read_text())
    # the page's placeholders: where the images are, where the results go
    grid["datasets"]["my_images"]["data"]["root"] = str(tmp_path / "my_images")
    grid["results"] = str(tmp_path / "results-mine")
    grid_path.write_text(yaml.safe_dump(grid, sort_keys=False))
    cmd = page_command()
    cmd[cmd.index("my_grid.yaml")] = str(grid_path)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1", BAYESNCL_CACHE=str(tmp_path / "cache"))
    env.pop("BAYESNCL_PLUGINS", None)
    r = current().run([SNAKEMAKE, *cmd[1:]], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, (r.stdout + r.stderr)[-6000:]
    out = tmp_path / "results-mine"
    assert "rule prepare_data" in r.stdout + r.stderr  # the folder's prepared copy, before the runs read it
    for table in ("table1", "table2"):
        text = (out / "tables" / f"{table}.md").read_text()
        assert "| *Image folder" in text
        for variant in ("NCL + L1 ", "NCL + L1 (x10) "):  # the setting's two values, a row each
            row = next(line for line in text.splitlines() if line.startswith(f"| {variant}"))
            assert re.search(r"\d+\.\d+", row), row  # numbers, not dashes
    claims = (out / "tables" / "claims.md").read_text()
    row = next(line for line in claims.splitlines() if line.startswith("| D1"))
    assert "SC: NCL + L1 > BayesNCL (STE)" in row and "declared" in row
    # the verdict, then the training verdict (Δ at init: the runs' untrained twins) and the familywise one: a
    # declared claim is secondary, tested at the level the primary claims 1a and 2a pass on (the caption says "not
    # controlled" where they passed none; with no primary interval, on one seed, the others are one family)
    family = [line.rstrip(" |").rsplit("| ", 1)[1].strip() for line in claims.splitlines()
              if line.startswith(("| 1a ", "| 2a "))]
    gate = "not controlled" if "Family: secondary not controlled" in claims else "family"
    assert re.search(r"\| (holds|does not hold|inconclusive \(leans (for|against)\)) +\| [^|]+ \| "
                     rf"(holds|does not hold|inconclusive) \({gate}\) +\|$", row), (row, family)
    row = next(line for line in claims.splitlines() if line.startswith("| D2"))
    assert "Zeros (%): NCL + L1 > NCL" in row and "declared" in row
    # the sweep's claim, as claim 11 (one seed: no interval, a lean at best), and its figure's panels
    row = next(line for line in claims.splitlines() if line.startswith("| U "))
    assert "SC of NCL + L1: l1_weight = 0.01 > ends 0, 0.1" in row and "n/a: a sweep of training settings" in row, row
    assert re.search(r"\| (holds|does not hold|inconclusive \(leans (for|against)\)) +\|", row), row
    import pandas as pd

    from bayesncl.report import figures, summary

    table = pd.read_csv(out / "summary" / "runs.csv")
    points = table[(table["sweep"] == "figure4b:l1_weight") & (table["variant"] == "NCL + L1")]  # the setting's column
    assert sorted(points["l1_weight"]) == [0.0, 0.01, 0.1] and set(points["sets"]) == {"figure4b"}
    assert (out / "figures" / "figure4b.png").is_file()
    panel = figures._figure4b(summary.prepare(pd.read_csv(out / "summary" / "runs.csv"))).axes[2]
    assert panel.get_title().endswith("SC vs l1_weight") and list(panel.lines[0].get_xdata()) == [0.0, 0.01, 0.1]

    runs = pd.read_csv(out / "summary" / "runs.csv")
    assert runs["zero_share"].between(0, 100).all()  # the plugin section's number, for every run
    swept = {"imagefolder/ncl_l1/seed~0": 1e-3, "imagefolder/ncl_l1/l1_weight~0.01/seed~0": 1e-2}
    assert set(swept) <= set(runs["run_id"])  # two runs with distinct ids
    for rid, weight in swept.items():
        assert '"l1"' in (out / "runs" / rid / "log.jsonl").read_text()  # the plugin's loss term, trained and logged
        assert yaml.safe_load((out / "runs" / rid / "config.resolved.yaml").read_text())["method"]["l1_weight"] == weight
        assert "prepared copy is not used" not in (out / "runs" / rid / "pretrain.log").read_text()
    assert [p.name[:5] for p in (tmp_path / "cache" / "imagefolder").iterdir()] == ["16px-"]  # its stored_size
    import json

    plugins = json.loads((out / "report" / "provenance.json").read_text())["plugins"]
    assert [(p["module"], p["file"]) for p in plugins] == [(m, str(work / f"{m}.py")) for m in ("my_method", "my_measure")]
    assert plugins[0]["entries"][0]["settings"] == {"method.l1_weight": 1e-3}
    assert "my\\_method" in (out / "report" / "provenance.rst").read_text()  # on the report's page

    # What reruns (section 6): nothing as it stands; a changed default, exactly the run that takes it; an edit of the
    # plugin's code, exactly the runs that use it, never their untrained twin: NCL's (init_as="ncl"), shared by the
    # three variants; `bayesncl stale` lists the same runs.
    runs = pd.read_csv(out / "summary" / "runs.csv").set_index("run_id")
    twins = {t for r in ("imagefolder/ncl/seed~0", *swept) for t in runs.loc[[r], "twin"]}  # a row per set's name
    assert twins == {"imagefolder/ncl/epochs~0/seed~0"}
    d2 = next(line for line in claims.splitlines() if line.startswith("| D2")).split("|")
    header = next(line for line in claims.splitlines() if line.startswith("|") and "Δ at init" in line).split("|")
    assert dict(zip([h.strip() for h in header], [c.strip() for c in d2]))["Δ at init [95% CI]"] == "+0.00 (no CI)"
    assert _snakemake_and_stale(cmd, env, grid_path) == ([], [])
    method = work / "my_method.py"
    page = method.read_text()
    method.write_text(page.replace("setting(1e-3,", "setting(2e-3,"))
    at_default = ["imagefolder/ncl_l1/seed~0"]
    assert _snakemake_and_stale(cmd, env, grid_path) == (at_default, at_default)
    method.write_text(page.replace("sum(dim=1).mean()", "sum(dim=1).mean() * 1.0"))
    every = sorted(at_default + [f"imagefolder/ncl_l1/l1_weight~{w}/seed~0" for w in ("0", "0.01", "0.1")])
    assert _snakemake_and_stale(cmd, env, grid_path) == (every, every)
    # ... and runs.csv's stale column (what every table's caption reads) names the code of those runs
    csv = tmp_path / "stale-runs.csv"
    r = current().run([sys.executable, "-m", "bayesncl", "summarize", "--grid", str(grid_path), "--out", str(csv)],
                      cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    stale = pd.read_csv(csv, keep_default_na=False).set_index("run_id")["stale"]
    assert sorted({rid for rid, s in stale.items() if s}) == every  # a run two sets name differently: a row each
    assert all(list(json.loads(s)) == ["code of method ncl_l1"] for rid, s in stale.items() if rid in every)
    # the page's command again: those runs are trained anew (and evaluated, reported); then nothing is stale
    r = current().run([SNAKEMAKE, *cmd[1:]], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, (r.stdout + r.stderr)[-6000:]
    assert _snakemake_and_stale(cmd, env, grid_path) == ([], [])
