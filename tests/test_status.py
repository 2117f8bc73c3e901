"""`bayesncl status`: a grid interrupted part-way, its folder state written by hand (runs done, one mid-way with a
checkpoint and a log, one failed, one stopped by SIGTERM, some not started), read as the command reads it; and,
with `-m grid`, a real grid stopped part-way."""

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from bayesncl.cli import main
from bayesncl.grid import evaluation_sections, expand_grid
from bayesncl.status import grid_status, render, run_status, totals

ROOT = Path(__file__).resolve().parents[1]
NOW = 1_800_000_000.0
GRID = {
    "results": "results", "seeds": [0, 1],
    "defaults": {"data": {"synthetic": {"train_size": 192, "test_size": 120, "image_size": 16}},
                 "model": {"arch": "resnet18", "width": 4, "proj_hidden": 32, "proj_dim": 16},
                 "train": {"epochs": 10, "batch_size": 64, "device": "cpu"}, "eval": {"probe": "fast"}},
    "datasets": {"synthetic": {"data": {"dataset": "synthetic"}}},
    "variants": {"NCL": {"method": {"name": "ncl"}}, "BayesNCL (STE)": {"method": {"name": "bayesncl"}}},
    # figure3, not table1: a grid without untrained twins (test_untrained_twins_wait_with_no_epochs has them)
    "sets": {"figure3": {"variants": ["NCL", "BayesNCL (STE)"]}, "table3": {"variants": ["NCL"], "dynamics_every": 5}},
}


def write_log(d: Path, losses, seconds=10.0, mtime=NOW):
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.resolved.yaml").write_text("seed: 0\n")
    secs = seconds if isinstance(seconds, list) else [seconds] * len(losses)
    (d / "log.jsonl").write_text("".join(json.dumps({"epoch": i + 1, "loss": v, "infonce": v, "epoch_seconds": s})
                                         + "\n" for i, (v, s) in enumerate(zip(losses, secs))))
    (d / "checkpoint.pt").write_bytes(b"x")
    for f in ("config.resolved.yaml", "log.jsonl", "checkpoint.pt"):
        os.utime(d / f, (mtime, mtime))


def finish(d: Path, sections, missing=()):
    (d / "model.pt").write_bytes(b"x")
    (d / "eval").mkdir(exist_ok=True)
    for s in sections:
        if s not in missing:
            (d / "eval" / f"{s}.json").write_text("{}")


@pytest.fixture
def interrupted(tmp_path):
    """The GRID's four runs: NCL seed 0 done; BayesNCL seed 0 epoch 4 of 10; NCL seed 1 failed; BayesNCL seed 1
    waiting."""
    runs = expand_grid(GRID)
    ids = {(r.config["method"]["name"], r.config["seed"]): rid for rid, r in runs.items()}
    res = tmp_path / "results"
    done = res / "runs" / ids["ncl", 0]
    write_log(done, [4.8 - 0.1 * e for e in range(10)])  # falling to the end: still learning
    finish(done, evaluation_sections(runs[ids["ncl", 0]]))
    write_log(res / "runs" / ids["bayesncl", 0], [4.7, 4.5, 4.4, 4.3], seconds=[10.0, 12.0, 11.0, 30.0],
              mtime=NOW - 5)
    fail = res / "runs" / ids["ncl", 1]
    write_log(fail, [4.7, 4.6])
    (fail / "pretrain.log").write_text("warning: something\nbayesncl pretrain: training diverged: loss is nan in "
                                       "epoch 3 (seen by step 2); stopped.\n")
    os.utime(fail / "pretrain.log", (NOW, NOW))  # written as the job ended, after its last checkpoint
    return res, runs, ids


def test_an_interrupted_grid_reads_as_done_running_failed_and_waiting(interrupted):
    res, runs, ids = interrupted
    rows = {r.run_id: r for r in grid_status(res, GRID, now=NOW)}
    assert set(rows) == set(runs)
    done, mid, fail, wait = (rows[ids[k]] for k in (("ncl", 0), ("bayesncl", 0), ("ncl", 1), ("bayesncl", 1)))
    assert done.state == "done" and done.sections == (len(evaluation_sections(runs[ids["ncl", 0]])),) * 2
    assert "still learning" in done.flags
    assert (mid.state, mid.epoch, mid.epochs, mid.loss) == ("running", 4, 10, 4.3)
    # median epoch 11.5 s; the fifth epoch has run 5 s of it, five more after it
    assert mid.eta_s == pytest.approx(5 * 11.5 + (11.5 - 5))
    assert mid.train_s == pytest.approx(63.0) and not mid.flags
    assert fail.state == "failed" and fail.note.startswith("bayesncl pretrain: training diverged: loss is nan")
    assert (wait.state, wait.epoch, wait.epochs, wait.eta_s) == ("waiting", 0, 10, None)
    t = totals(list(rows.values()))
    assert (t["done"], t["running"], t["failed"], t["waiting"], t["runs"]) == (1, 1, 1, 1, 4)
    assert (t["epochs_done"], t["epochs_planned"]) == (16, 40)


def test_the_table_lists_failed_runs_first_with_their_last_line_and_totals(interrupted, capsys):
    res, runs, ids = interrupted
    grid_file = res.parent / "grid.yaml"
    grid_file.write_text(yaml.safe_dump(GRID))
    os.utime(res / "runs" / ids["bayesncl", 0] / "log.jsonl", (time.time() - 5,) * 2)
    assert main(["status", str(res), "--grid", str(grid_file)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:2] == ["state", "epoch"]
    assert [line.split()[0] for line in out[1:5]] == ["failed", "running", "waiting", "done"]
    assert out[1].endswith("stopped.") and ids["ncl", 1] in out[1]
    assert out[2].split()[1:3] == ["4/10", "4.300"]
    assert out[-1].startswith("4 runs: 1 failed, 1 running, 1 waiting, 1 done; 16 of 40 epochs trained")
    assert main(["status", str(res), "--grid", str(grid_file), "--only", "waiting"]) == 0
    only = capsys.readouterr().out.splitlines()
    assert len(only) == 3 and only[1].startswith("waiting") and only[2].startswith("4 runs:")


def test_without_the_grid_it_lists_the_runs_it_finds(interrupted):
    res, runs, ids = interrupted
    rows = {r.run_id: r for r in grid_status(res)}
    assert set(rows) == {ids["ncl", 0], ids["bayesncl", 0], ids["ncl", 1]}
    assert rows[ids["ncl", 0]].state == "done"


def test_requeued_stalled_collapsed_and_a_failed_section(tmp_path):
    d = tmp_path / "run"
    write_log(d, [4.0, 4.1])
    (d / "pretrain.log").write_text("bayesncl pretrain: SIGTERM: checkpoint saved in x; rerun the same command to "
                                    "resume (exit 75)\n")
    os.utime(d / "pretrain.log", (NOW, NOW))
    assert run_status(d, "r", {"train": {"epochs": 5, "batch_size": 64}}, now=NOW).state == "requeued"
    # the same line before the run's last checkpoint: an earlier job's words, since resumed
    os.utime(d / "pretrain.log", (NOW - 1, NOW - 1))
    assert run_status(d, "r", {"train": {"epochs": 5, "batch_size": 64}}, now=NOW).state == "running"
    (d / "pretrain.log").write_text("")
    stalled = run_status(d, "r", {"train": {"epochs": 5, "batch_size": 64}}, now=NOW + 3600)
    assert stalled.state == "running" and stalled.flags == ["stalled 1h00"] and stalled.eta_s == pytest.approx(20.0)  # two epochs after the current one
    fresh = run_status(d, "r", {"train": {"epochs": 5, "batch_size": 64}}, now=NOW + 899)
    assert fresh.flags == []  # not before STALL_MIN_S
    # ln(127) = 4.84: down to 3.0, then back up past half the way (3.92) at epoch 4
    write_log(d, [4.8, 3.0, 3.5, 4.0, 3.9])
    r = run_status(d, "r", {"train": {"epochs": 5, "batch_size": 64}}, ["features", "retrieval"], now=NOW)
    assert r.flags[0] == "collapse@4" and r.state == "running"
    finish(d, ["features", "retrieval"], missing=("retrieval",))
    (d / "eval" / "retrieval.log").write_text("bayesncl evaluate: error: something is wrong\n")
    r = run_status(d, "r", {"train": {"epochs": 5, "batch_size": 64}}, ["features", "retrieval"], now=NOW)
    assert (r.state, r.sections, r.note) == ("failed", (1, 2), "retrieval: bayesncl evaluate: error: something is wrong")
    (d / "eval" / "retrieval.log").write_text("")
    r = run_status(d, "r", {"train": {"epochs": 5, "batch_size": 64}}, ["features", "retrieval"], now=NOW)
    assert r.state == "evaluating" and "still learning" not in r.flags


def test_the_smoke_results_folder_reads_the_smoke_plan(tmp_path):
    res = tmp_path / "results-smoke"
    (res / "runs").mkdir(parents=True)
    rows = grid_status(res, GRID, now=NOW)
    assert {r.epochs for r in rows} == {1} and all(r.state == "waiting" for r in rows)


def test_a_missing_results_folder_is_one_line(tmp_path, capsys):
    assert main(["status", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no such folder" in err


@pytest.mark.grid  # a real grid (two runs), stopped by SIGTERM part-way, then finished: a few minutes
@pytest.mark.skipif(shutil.which("snakemake", path=f"{Path(sys.executable).parent}{os.pathsep}"
                                 f"{os.environ.get('PATH', '')}") is None, reason="snakemake not installed")
def test_a_real_grid_stopped_part_way(tmp_path):
    exe = shutil.which("snakemake", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    grid = json.loads(json.dumps(GRID))
    grid["seeds"] = [0]
    grid["sets"] = {"figure3": grid["sets"]["figure3"]}  # two runs, no untrained twins
    grid["defaults"]["train"].update(epochs=3, threads=1, warmup_epochs=0)
    grid["defaults"]["data"]["num_workers"] = 0
    grid["results"] = str(tmp_path / "results")
    grid_file = tmp_path / "grid.yaml"
    grid_file.write_text(yaml.safe_dump(grid))
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1")
    targets = [f"{grid['results']}/runs/{rid}/eval/{s}.json" for rid, run in expand_grid(grid).items()
               for s in evaluation_sections(run)]  # the runs, not the report
    cmd = [exe, "--cores", "1", "--configfile", str(grid_file), "--config", "forkserver=false", "--", *targets]
    p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    runs = tmp_path / "results" / "runs"
    deadline = time.time() + 600
    while not any(runs.glob("**/log.jsonl")) and time.time() < deadline and p.poll() is None:
        time.sleep(0.5)
    os.killpg(p.pid, signal.SIGTERM)  # as a controller's allocation ending: Snakemake and its job
    p.wait(timeout=120)
    status = [sys.executable, "-m", "bayesncl", "status", str(tmp_path / "results"), "--grid", str(grid_file)]
    out = subprocess.run(status, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    states = [line.split()[0] for line in out.stdout.splitlines()[1:-1]]
    assert len(states) == len(expand_grid(grid)) == 2
    assert set(states) <= {"requeued", "running", "waiting", "evaluating", "done"} and "waiting" in states, out.stdout
    assert set(states) & {"requeued", "running", "evaluating"}, out.stdout
    subprocess.run([exe, "--unlock", *cmd[1:]], cwd=ROOT, env=env, capture_output=True, timeout=300)
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    out = subprocess.run(status, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.stdout.splitlines()[-1].startswith("2 runs: 2 done; 6 of 6 epochs trained"), out.stdout
    assert not math.isnan(float(out.stdout.splitlines()[1].split()[2]))


def test_untrained_twins_wait_with_no_epochs(tmp_path):
    """A table1 grid's runs each have an untrained twin (docs/METHOD.md section 9): listed as runs of 0 epochs."""
    grid = {**GRID, "sets": {"table1": {"variants": ["NCL"]}}}
    rows = grid_status(tmp_path / "results", grid, now=NOW)
    twins = [r for r in rows if r.epochs == 0]
    assert len(rows) == 4 and len(twins) == 2 and all(r.state == "waiting" for r in rows)
    t = totals(rows)
    assert (t["runs"], t["waiting"], t["epochs_planned"]) == (4, 4, 20)
