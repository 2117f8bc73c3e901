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

from bayesncl.cli import main
from bayesncl.errors import ConfigError
from bayesncl.grid import merged
from bayesncl.report import declare_from, document, provenance
from bayesncl.report.claims import DECLARED
from bayesncl.wfconfig import read_grid_files

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
    assert {"figure4a", "figure4b"} <= set(both["sets"]) and not {"figure4a", "figure4b"} & set(
        yaml.safe_load(DEMO.read_text())["sets"])
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
        assert ("D~256" in out) == (len(files) == 2)
    assert counts == [92, 116]


@pytest.mark.parametrize("bad,message", [
    (None, "--grid {path} does not exist; give the workflow config"),
    ("- a\n- b\n", "--grid {path}: expected a mapping (results, seeds, defaults, datasets, ...)"),
    ("sets: {table1: {n_seeds: x}}\n", "sets.table1.n_seeds"),
])
def test_a_bad_overlay_is_named(tmp_path, capsys, bad, message):
    path = tmp_path / "overlay.yaml"
    if bad is not None:
        path.write_text(bad)
    assert main(["stale", "--grid", str(DEMO), str(path), "--results", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and message.format(path=path) in err, err
    if bad is not None and "n_seeds" in bad:
        assert f"--grid {DEMO} {path}" in err  # the merged config's error names both files


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
    try:
        declare_from([grid, extra])
        assert [c.number for c in DECLARED] == ["x1"]
        declare_from([grid])
        assert DECLARED == []
    finally:
        declare_from(None)
