"""A grid and its overlays (`--grid config/config.yaml config/sweeps.yaml`, as `snakemake --configfile A B`):
merged by Snakemake's own rule, read by every command that takes --grid, and named file by file in what the
report writes."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from snakemake.utils import update_config

from bayesncl.cli.main import main
from bayesncl.core.errors import ConfigError
from bayesncl.grid.expand import merged
from bayesncl.report import document, grid_claims, provenance
from bayesncl.grid.expand import read_grid_files

ROOT = Path(__file__).resolve().parents[1]
DEMO, SWEEPS = ROOT / "config" / "config.yaml", ROOT / "config" / "sweeps.yaml"

# Nested configs over a few keys, so that mappings meet mappings, lists and scalars at the same key.
leaves = st.one_of(st.integers(-3, 3), st.text("ab", max_size=2), st.lists(st.integers(0, 3), max_size=2),
                   st.none())
configs = st.recursive(leaves, lambda inner: st.dictionaries(st.sampled_from("abcd"), inner, max_size=4),
                       max_leaves=12).filter(lambda v: isinstance(v, dict))


@settings(max_examples=300, deadline=None)
@given(st.lists(configs, min_size=1, max_size=4))
def test_files_merge_as_snakemake_merges_configfiles(parts):
    want: dict = {}
    for part in parts:
        update_config(want, json.loads(json.dumps(part)))  # Snakemake's --configfile A B, on copies
    before = json.dumps(parts)
    assert merged(*parts) == want
    assert json.dumps(parts) == before  # the parts are not changed


def test_the_demo_and_its_overlay_are_read_as_snakemake_reads_them():
    both = read_grid_files([DEMO, SWEEPS])
    want = yaml.safe_load(DEMO.read_text())
    update_config(want, yaml.safe_load(SWEEPS.read_text()))
    assert both == want
    demo = yaml.safe_load(DEMO.read_text())["sets"]
    assert demo["figure4b"]["sweep"] == {"method.lambda": [0.0, 3e-5, 1e-4], "method.rho": [0.5, 0.8, 0.9]}
    assert demo["figure4a"]["n_seeds"] == demo["figure4b"]["n_seeds"] == 2
    assert both["sets"]["figure4b"]["sweep"] == {"method.lambda": [0.0, 3e-5, 1e-4], "method.rho": [0.5, 0.8, 0.9]}
    assert both["sets"]["figure4a"]["n_seeds"] == both["sets"]["figure4b"]["n_seeds"] == 5
    assert both["sets"]["saturation"]["variants"] == ["NCL", "BayesNCL (STE)"]
    assert both["sets"]["saturation"]["sweep"] == {"train.epochs": [0, 4, 8, 16]}  # kept from the demo


def test_status_plans_the_overlay_s_runs_too(tmp_path, capsys):
    res = tmp_path / "results"
    res.mkdir()
    counts = []
    for files in ([DEMO], [DEMO, SWEEPS]):
        assert main(["status", str(res), "--grid", *map(str, files), "--only", "waiting"]) == 0
        out = capsys.readouterr().out
        counts.append(sum(1 for line in out.splitlines() if "seed~" in line))
        rho = [line for line in out.splitlines() if "rho~0.5/" in line]
        assert len(rho) == (5 if len(files) == 2 else 2)  # the demo's 2 seeds, the overlay's 5
    assert counts == [100, 130]


FIX = "give the workflow config, e.g. config/config.yaml"
WHAT = ("expected the workflow config, a YAML text file (results, seeds, defaults, datasets, variants, sets), e.g. "
        "config/config.yaml")


@pytest.mark.parametrize("bad,message", [
    (None, "--grid {path} does not exist; " + FIX),
    ("- a\n- b\n", "--grid {path}: expected a mapping (results, seeds, defaults, datasets, ...)"),
    ("a: [\n", "--grid {path}: not valid YAML at line 2 (expected the node content, but found '<stream end>'); "
     + WHAT),
    ("sets: {table1: {n_seeds: x}}\n",
     "sets.table1.n_seeds: 'x' is not an integer or null; fix it in --grid {demo} {path}"),
])
def test_a_bad_overlay_is_named(tmp_path, capsys, bad, message):
    """One line, the whole of it: the file (or, for the merged config, every file) and what to do."""
    path = tmp_path / "overlay.yaml"
    if bad is not None:
        path.write_text(bad)
    assert main(["stale", "--grid", str(DEMO), str(path), "--results", str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"bayesncl stale: error: {message.format(path=path, demo=DEMO)}\n"


def test_every_generated_file_names_the_grid_and_its_overlays(tmp_path):
    grid, extra = tmp_path / "grid.yaml", tmp_path / "more.yaml"
    grid.write_text("seeds: [0]\n")
    extra.write_text("seeds: [0, 1]\n")
    text = provenance.stamp([grid, extra])
    digest = lambda p: hashlib.sha256(p.read_bytes()).hexdigest()  # noqa: E731
    assert text.endswith(f"from grid {grid} (sha256 {digest(grid)[:12]}) + {extra} (sha256 {digest(extra)[:12]})")
    assert provenance.stamp([grid]) == provenance.stamp(grid) and provenance.stamp([]) == provenance.stamp(None)
    df = pd.DataFrame({"seed": [0], "dataset": ["synthetic"], "run_id": ["r"]})
    prov = provenance.collect(df, tmp_path, [grid, extra])
    assert prov.grid == [str(grid), str(extra)] and prov.grid_sha256 == [digest(grid), digest(extra)]
    items = dict(document.provenance_items(prov, tex=False))
    page = " ".join(items.values())
    assert page.index(str(grid)) < page.index(digest(grid)[:12]) < page.index(str(extra)) < page.index(
        digest(extra)[:12])
    assert str(grid) in document.provenance_rst(prov, "", tmp_path) and str(extra) in document.provenance_rst(
        prov, "", tmp_path)


def test_a_claim_declared_in_an_overlay_is_judged(tmp_path):
    grid, extra = tmp_path / "grid.yaml", tmp_path / "more.yaml"
    grid.write_text("seeds: [0]\n")
    extra.write_text(yaml.safe_dump({"claims": [{"id": "x1", "metric": "sc", "relation": ">", "left": "NCL",
                                                 "right": "SimCLR"}]}))
    assert [c.number for c in grid_claims([grid, extra])] == ["x1"]
    assert grid_claims([grid]) == [] and grid_claims(None) == []


@pytest.mark.parametrize("command", [["report", "--out", "{out}"], ["document", "--out", "{out}"],
                                     ["atlas", "--run", "{out}"]])
def test_a_missing_overlay_of_the_report_s_grid_is_named_before_anything_is_read(tmp_path, capsys, command):
    summary, missing = tmp_path / "runs.csv", tmp_path / "more.yaml"
    summary.write_text("run_id\n")  # never read: the grid's files are checked first
    args = [a.format(out=tmp_path) for a in command] + ["--grid", str(DEMO), str(missing)]
    if command[0] != "atlas":
        args += ["--summary", str(summary)]
    assert main(args) == 2
    assert capsys.readouterr().err == (f"bayesncl {command[0]}: error: --grid {missing} does not exist; give the "
                                       "workflow config the runs came from, e.g. config/config.yaml\n")


@pytest.mark.parametrize("command", ["summarize", "stale", "report", "document", "atlas", "status", "estimate",
                                     "plan"])
def test_every_grid_option_takes_overlays_and_says_so(command, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--grid YAML [YAML ...]" in text
    assert "with overlays, each after the file it changes, merged in order as in snakemake --configfile A B (e.g. " \
           "config/config.yaml config/sweeps.yaml)" in text


@pytest.fixture
def overlay_plugin(tmp_path, monkeypatch):
    """An overlay in a folder of its own that names a plugin module lying beside it (not beside the grid)."""
    from bayesncl.settings import plugins

    monkeypatch.delenv(plugins.ENV, raising=False)
    monkeypatch.delenv(plugins.PATH_ENV, raising=False)
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "plug_overlay.py").write_text("LOADED = True\n")
    (folder / "more.yaml").write_text("plugins: [plug_overlay]\n")
    try:
        yield folder / "more.yaml"
    finally:
        import sys

        plugins._LOADED.pop("plug_overlay", None)
        sys.modules.pop("plug_overlay", None)
        while str(folder.resolve()) in sys.path:
            sys.path.remove(str(folder.resolve()))


def test_a_plugin_named_in_an_overlay_is_found_beside_it_and_passed_to_the_jobs(tmp_path, overlay_plugin, capsys):
    import os

    from bayesncl.settings import plugins

    assert main(["stale", "--grid", str(DEMO), str(overlay_plugin), "--results", str(tmp_path)]) == 0
    assert capsys.readouterr().err.startswith(f"0 job(s) to run under {tmp_path}; ")
    assert [p["module"] for p in plugins.loaded()] == ["plug_overlay"]
    assert os.environ[plugins.ENV] == "plug_overlay"  # every job Snakemake starts imports it too
    assert os.environ[plugins.PATH_ENV].split(os.pathsep) == [str(DEMO.parent), str(overlay_plugin.parent.resolve())]


def test_the_report_reads_a_plugin_named_in_an_overlay(tmp_path, overlay_plugin):
    from bayesncl.settings import plugins
    from bayesncl.cli.commands import _read_grid

    _read_grid([str(DEMO), str(overlay_plugin)])
    assert [p["module"] for p in plugins.loaded()] == ["plug_overlay"]


def test_the_stale_runs_hint_names_every_file(tmp_path, capsys):
    from bayesncl.grid.expand import expand_grid

    wf = read_grid_files([DEMO, SWEEPS])
    rid, run = next((r, run) for r, run in expand_grid(wf).items() if "figure4b" in run.sets and "rho~0.5" in r
                    and run.config["seed"] >= 2)  # the overlay's seeds: the demo has the first 2
    old = json.loads(json.dumps(run.config))
    old["train"]["epochs"] = 3
    (tmp_path / "runs" / rid).mkdir(parents=True)
    (tmp_path / "runs" / rid / "config.resolved.yaml").write_text(yaml.safe_dump(old))
    (tmp_path / "runs" / rid / "model.pt").write_bytes(b"trained")
    assert main(["stale", "--grid", str(DEMO), str(SWEEPS), "--results", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert f"pretrain {rid}: train.epochs 3 (today 16)" in out.splitlines()
    assert f" job(s) to run under {tmp_path}; make them: snakemake --cores N --configfile {DEMO} {SWEEPS} (exactly " \
           f"these, made before: --forcerun $(bayesncl stale --grid {DEMO} {SWEEPS} --targets))" in err
    assert main(["stale", "--grid", str(DEMO), "--results", str(tmp_path)]) == 0  # the demo alone has no such run
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("command", ["plan", "summarize", "estimate"])
def test_a_merged_grid_s_error_names_every_file(tmp_path, capsys, command):
    path = tmp_path / "overlay.yaml"
    path.write_text("sets: {table1: {n_seeds: x}}\n")
    extra = {"plan": ["--pilot", str(tmp_path / "runs.csv")], "summarize": ["--out", str(tmp_path / "runs.csv")],
             "estimate": ["--gpu", "h200"]}[command]
    assert main([command, "--grid", str(DEMO), str(path), *extra]) == 2
    assert capsys.readouterr().err == (f"bayesncl {command}: error: sets.table1.n_seeds: 'x' is not an integer or "
                                       f"null; fix it in --grid {DEMO} {path}\n")


def test_the_report_s_pages_name_the_grid_and_its_overlays(tmp_path, monkeypatch):
    """The LaTeX page (title line, footer, provenance rows with the full hashes) and the HTML front page."""
    monkeypatch.chdir(tmp_path)
    Path("grid.yaml").write_text("seeds: [0]\n")
    Path("more.yaml").write_text("seeds: [0, 1]\n")
    digest = {f: hashlib.sha256(Path(f).read_bytes()).hexdigest() for f in ("grid.yaml", "more.yaml")}
    df = pd.DataFrame({"seed": [0], "dataset": ["synthetic"], "run_id": ["r"]})
    prov = provenance.collect(df, tmp_path, ["grid.yaml", "more.yaml"])
    alone = provenance.collect(df, tmp_path, None)
    tex = document._latex_context(df, prov, [], tmp_path, [])
    assert tex["subtitle"].startswith(r"Grid grid.yaml + more.yaml \textperiodcentered{} commit ")
    assert tex["footer"].startswith(r"grid.yaml + more.yaml \textperiodcentered{} commit ")
    assert document._latex_context(df, alone, [], tmp_path, [])["subtitle"].startswith("Grid no grid config ")
    rows = dict(tex["provenance"])
    (key,) = [k for k, v in rows.items() if "grid.yaml" in v]
    assert rows[key] == (r"\texttt{grid.yaml}, SHA-256 {\footnotesize\texttt{" + digest["grid.yaml"] + "}}; then "
                         r"\texttt{more.yaml}, SHA-256 {\footnotesize\texttt{" + digest["more.yaml"] + "}}")
    plain = dict(document.provenance_items(prov, tex=False))[key]
    assert plain == (f"grid.yaml, SHA-256 {digest['grid.yaml'][:12]}...; then more.yaml, SHA-256 "
                     f"{digest['more.yaml'][:12]}...")
    assert dict(document.provenance_items(alone, tex=False))[key] == "none (made by hand)"
    assert r"on the grid grid\.yaml \+ more\.yaml: every table" in document.provenance_rst(prov, "", tmp_path)
    assert "on the grid given by hand: every table" in document.provenance_rst(alone, "", tmp_path)
    Path("more.yaml").unlink()
    assert provenance.stamp(["grid.yaml", "more.yaml"]).endswith(
        f"from grid grid.yaml (sha256 {digest['grid.yaml'][:12]}) + more.yaml (not readable)")
