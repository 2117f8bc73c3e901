"""A grid is read one way (bayesncl.cli.workflow.load_workflow): Snakemake and every command that takes --grid see the
same config, defaults included, and refuse the same grids with the same line."""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from bayesncl.cli.main import main
from bayesncl.core.errors import ConfigError
from bayesncl.cli.workflow import SCHEMA, load_workflow

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "config" / "tiny.yaml"
SNAKEMAKE = shutil.which("snakemake")


def _write(tmp_path, edit, name="bad.yaml") -> Path:
    cfg = yaml.safe_load(TINY.read_text())
    cfg["results"] = str(tmp_path / "results")
    edit(cfg)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_the_schema_s_defaults_are_the_ones_snakemake_sets():
    from snakemake.utils import validate

    raw = yaml.safe_load(TINY.read_text())
    want = copy.deepcopy(raw)
    validate(want, str(SCHEMA))  # Snakemake's own: sets each absent key's default
    got = load_workflow([TINY]).config
    assert got == want
    assert set(want) - set(raw), "the tiny grid leaves some keys to their defaults"


def test_a_config_is_filled_only_once_it_passes(tmp_path):
    path = _write(tmp_path, lambda c: c.update(seeds="x"))
    with pytest.raises(ConfigError, match="seeds: 'x' is not a list"):
        load_workflow([path])


def test_the_workflow_s_runs_claims_and_notes(tmp_path):
    def edit(c):
        c["variants"]["Also NCL"] = copy.deepcopy(c["variants"]["NCL"])
        c["sets"]["table1"]["variants"].append("Also NCL")
        c["claims"] = [{"id": "D1", "metric": "sc", "left": "NCL", "right": "BayesNCL (STE)", "relation": ">"}]

    wf = load_workflow([_write(tmp_path, edit)])
    assert wf.runs and all(r.run_id == rid for rid, r in wf.runs.items())
    assert [c.number for c in wf.claims] == ["D1"]
    assert len(wf.notes) == len(set(wf.notes)) >= 1 and "'Also NCL'" in wf.notes[0]


def test_a_smoke_run_is_read_with_its_own_results_folder(tmp_path):
    wf = load_workflow([_write(tmp_path, lambda c: None)], overrides={"smoke": "true"})
    assert wf.config["smoke"] is True and wf.config["results"].endswith("results-smoke")
    assert all(r.config["train"]["epochs"] <= 1 for r in wf.runs.values())


BAD = [
    (lambda c: c["sets"]["table1"]["variants"].append("MoCo"), "sets.table1.variants: unknown variant 'MoCo'"),
    (lambda c: c["defaults"].update(train=5), "train: expected a mapping of epochs"),
    (lambda c: c["defaults"]["train"].update(epochs=-3), "train.epochs"),
    (lambda c: c.update(plugins=["no_such_plugin"]), "plugins: no plugin module 'no_such_plugin'"),
    (lambda c: c.update(claims=[{"metric": "nope", "left": "NCL", "right": "NCL", "relation": ">"}]),
     "claims[0].metric: unknown metric 'nope'"),
]


@pytest.mark.parametrize("edit,message", BAD)
def test_every_grid_command_refuses_what_the_workflow_refuses(tmp_path, capsys, edit, message):
    path = _write(tmp_path, edit)
    with pytest.raises(ConfigError) as err:
        load_workflow([path])
    assert message in str(err.value)
    (tmp_path / "results").mkdir()
    for args in (["stale", "--grid", str(path)], ["status", str(tmp_path / "results"), "--grid", str(path)],
                 ["estimate", "--grid", str(path), "--gpu", "h200"],
                 ["summarize", "--grid", str(path), "--out", str(tmp_path / "runs.csv")],
                 ["plan", "--grid", str(path), "--pilot", str(tmp_path / "runs.csv"), "--out", str(tmp_path / "p.yaml")]):
        assert main(args) == 2, args
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and str(err.value) in lines[0], (args, lines)
    assert not (tmp_path / "runs.csv").exists() and not (tmp_path / "p.yaml").exists()


@pytest.mark.skipif(SNAKEMAKE is None, reason="snakemake not installed (pip install -e '.[workflow]')")
@pytest.mark.parametrize("edit,message", [BAD[0], BAD[4]])
def test_snakemake_refuses_with_the_same_line(tmp_path, edit, message):
    path = _write(tmp_path, edit)
    with pytest.raises(ConfigError) as err:
        load_workflow([path], where=str(path))
    r = subprocess.run([SNAKEMAKE, "-n", "--configfile", str(path)], cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 2
    assert f"invalid workflow config: {err.value}" in r.stderr.splitlines()
