"""`dvc repro` as a new user runs it: in a fresh `git clone` of this repository (its last commit).

The clone's dvc.yaml is pointed at the tiny grid (its `vars`: config/tiny.yaml, results-tiny) so the run
takes about a minute; everything else is the committed pipeline.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers.processes import current

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
DVC = shutil.which("dvc", path=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
SNAKEMAKE = shutil.which("snakemake", path=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")

pytestmark = [
    pytest.mark.grid,
    pytest.mark.skipif(DVC is None or SNAKEMAKE is None, reason="needs dvc and snakemake (pip install -e '.[workflow]')"),
    pytest.mark.skipif(not (ROOT / ".git").exists(), reason="needs the git repository"),
]


def run(args, cwd, env, timeout=600):
    r = current().run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    return r.returncode, r.stdout + r.stderr


def flat(d, prefix=""):
    for k, v in d.items():
        if isinstance(v, dict):
            yield from flat(v, f"{prefix}{k}.")
        else:
            yield prefix + k, v


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    """A clone of HEAD whose dvc.yaml runs the tiny grid, and the environment to run it with its code."""
    path = tmp_path_factory.mktemp("dvc") / "bayesncl"
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(ROOT), str(path)], check=True, timeout=120)
    dvc_yaml = path / "dvc.yaml"
    spec = yaml.safe_load(dvc_yaml.read_text())
    assert spec["vars"] == [{"grid": "config/config.yaml", "results": "results"}], "dvc.yaml runs the demo grid"
    spec["vars"] = [{"grid": "config/tiny.yaml", "results": "results-tiny"}]
    dvc_yaml.write_text(yaml.safe_dump(spec, sort_keys=False))
    env = dict(os.environ, PYTHONPATH=str(path / "src"), OMP_NUM_THREADS="1",
               PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", DVC_NO_ANALYTICS="1")
    return path, env


def test_dvc_repro_in_a_fresh_clone(clone):
    path, env = clone
    rc, out = run([DVC, "repro"], path, env, timeout=900)
    assert rc == 0, out[-5000:]
    assert "Running stage 'grid'" in out, out[-3000:]
    assert (path / "results-tiny" / "tables" / "table1.tex").stat().st_size > 0

    # dvc.lock is the record of what was reproduced: git must be able to track it.
    ignored = subprocess.run(["git", "check-ignore", "-q", "dvc.lock"], cwd=path)
    assert (path / "dvc.lock").exists() and ignored.returncode == 1, "dvc.lock is git-ignored"

    # Cached: final models and metrics; not the per-epoch checkpoints.
    lock = yaml.safe_load((path / "dvc.lock").read_text())
    runs_out = next(o for o in lock["stages"]["grid"]["outs"] if o["path"] == "results-tiny/runs")
    md5 = runs_out["md5"]
    listing = json.loads((path / ".dvc" / "cache" / "files" / "md5" / md5[:2] / md5[2:]).read_text())
    files = [e["relpath"] for e in listing]
    assert any(f.endswith("/model.pt") for f in files) and any(f.endswith("eval/features.json") for f in files)
    assert not any(f.endswith("checkpoint.pt") for f in files), [f for f in files if "checkpoint" in f]

    rc, out = run([DVC, "repro"], path, env)
    assert rc == 0, out[-3000:]
    assert "Running stage" not in out and "didn't change, skipping" in out, out

    rc, out = run([DVC, "status"], path, env)
    assert rc == 0 and "Data and pipelines are up to date" in out, out

    rc, out = run([DVC, "metrics", "show"], path, env)
    headline = dict(flat(json.loads((path / "results-tiny" / "summary" / "metrics.json").read_text())))
    assert rc == 0 and headline, out
    assert "results-tiny/summary/metrics.json" in out, out
    for key, value in headline.items():
        assert key in out and str(round(value, 5)) in out, (key, value, out)

    # The open-gate curves and the Figure 4 sweeps as DVC plots: every CSV the report wrote, with its rows.
    rc, out = run([DVC, "plots", "show", "--json"], path, env)
    assert rc == 0, out
    shown = json.loads(out[out.index("{"):])["data"]
    written = sorted((path / "results-tiny" / "plots").rglob("*.csv"))
    assert {f.parent.name for f in written} == {"gates", "figure4a", "figure4b_rho", "figure4b_lambda"}, written
    for f in written:
        rows = [v for plot in shown[f.relative_to(path).as_posix()] for v in plot["content"]["data"]["values"]]
        assert len(rows) >= len(f.read_text().splitlines()) - 1, f

    # Committed (dvc.yaml, as pointed at the tiny grid, and dvc.lock), `dvc plots diff` reads that commit's
    # plots from the DVC cache beside the workspace's.
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "add", "dvc.yaml", "dvc.lock"], cwd=path, check=True)
    subprocess.run([*git, "commit", "-qm", "reproduced"], cwd=path, check=True)
    rc, out = run([DVC, "plots", "diff", "HEAD", "--json"], path, env)
    diff = json.loads(out[out.index("{"):])
    assert rc == 0 and not diff.get("errors"), out[:3000]
    line = diff["data"][written[0].relative_to(path).as_posix()]
    assert {r for plot in line for r in plot["revisions"]} == {"HEAD", "workspace"}, out[:3000]
