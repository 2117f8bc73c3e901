"""`bayesncl status`: a grid interrupted part-way, its folder state written by hand (runs done, one mid-way with a
checkpoint and a log, one failed, one stopped by SIGTERM, some not started), read as the command reads it; and,
with `-m grid`, a real grid stopped part-way."""

import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from bayesncl.cli.main import main
from bayesncl.grid.expand import evaluation_sections, expand_grid
from bayesncl.grid.stale import NOT_COMPARED, trigger_change
from bayesncl.grid.status import grid_status, render, run_status, totals
from helpers.processes import current

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


def write_log(d: Path, losses, seconds=10.0, mtime=NOW, infonce=None):
    """A run's folder mid-way: its config, a log of `losses` (InfoNCE the same unless `infonce` gives it; False:
    an older log without the column) and a checkpoint, all written at `mtime`."""
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.resolved.yaml").write_text("seed: 0\n")
    secs = seconds if isinstance(seconds, list) else [seconds] * len(losses)
    nce = losses if infonce is None else infonce or [None] * len(losses)
    (d / "log.jsonl").write_text("".join(
        json.dumps({"epoch": i + 1, "loss": v, **({} if c is None else {"infonce": c}), "epoch_seconds": s}) + "\n"
        for i, (v, c, s) in enumerate(zip(losses, nce, secs))))
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
    # the run's one evaluation job (a machine without a GPU) failed in a section: its log says so
    from bayesncl.grid.status import EVALUATE_LOG

    (d / "eval" / EVALUATE_LOG).write_text("wrote x/features.json\nbayesncl evaluate: error: no memory\n")
    r = run_status(d, "r", {"train": {"epochs": 5, "batch_size": 64}}, ["features", "retrieval"], now=NOW)
    assert (r.state, r.note) == ("failed", "retrieval: bayesncl evaluate: error: no memory")
    (d / "eval" / EVALUATE_LOG).write_text("wrote x/features.json\n")
    assert run_status(d, "r", {"train": {"epochs": 5, "batch_size": 64}}, ["features", "retrieval"],
                      now=NOW).state == "evaluating"


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
    out = current().run(status, cwd=ROOT, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    states = [line.split()[0] for line in out.stdout.splitlines()[1:-1]]
    assert len(states) == len(expand_grid(grid)) == 2
    assert set(states) <= {"requeued", "running", "waiting", "evaluating", "done"} and "waiting" in states, out.stdout
    assert set(states) & {"requeued", "running", "evaluating"}, out.stdout
    current().run([exe, "--unlock", *cmd[1:]], cwd=ROOT, env=env, capture_output=True)
    r = current().run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    out = current().run(status, cwd=ROOT, env=env, capture_output=True, text=True)
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


def read_table(text: str):
    """`render`'s text read back: the header's labels; per run a dict of its columns, each right-aligned value
    ending where its label ends and the run id starting where `run` starts (then its flags and note); the
    totals line."""
    lines = text.splitlines()
    labels = {m.group(): m.span() for m in re.finditer(r"\S+", lines[0])}
    rows = []
    for line in lines[1:-1]:
        row = {"state": line.split()[0]}
        for name in ("epoch", "loss", "ETA", "eval"):
            end = labels[name][1]
            assert line[end] == " ", (name, line)
            row[name] = line[:end].split()[-1]
        start = labels["run"][0]
        assert line[start - 1] == " " != line[start], line
        row["run"], _, row["extra"] = line[start:].partition("  ")
        rows.append(row)
    return list(labels), rows, lines[-1]


def minutes(shown: str) -> int:
    """A duration as the table shows it ("34m", "1h08") in minutes."""
    h, _, m = shown.rpartition("h")
    return int(h or 0) * 60 + int(m.rstrip("m"))


def test_the_table_read_back_column_by_column(tmp_path):
    """A run in each state, printed, then read back field by field against what its folder holds."""
    runs, now = tmp_path / "runs", NOW + 60
    plan = {"a-failed": 10, "b-running": 10, "b0-started": 10, "c-stalled": 5, "d-requeued": 10, "e-evaluating": 5,
            "f-waiting": 10, "g-done": 7}
    seconds = {}

    def log(rid, losses, secs, **kw):
        write_log(runs / rid, losses, seconds=secs, **kw)
        seconds[rid] = sum(secs) if isinstance(secs, list) else secs * len(losses)

    def last_words(rid, line):
        (runs / rid / "pretrain.log").write_text(line + "\n")
        os.utime(runs / rid / "pretrain.log", (NOW, NOW))
        return line

    # InfoNCE down to 3.0, then back up past half the way to chance (ln 127 = 4.84) at epoch 4; then a failure
    log("a-failed", [4.8, 3.0, 3.5, 4.0], 100.0)
    died = last_words("a-failed", "bayesncl pretrain: training diverged: loss is nan in epoch 5; stopped.")
    # epochs of 600, 720, 660 and 1800 s (median 690); the fifth began 60 s ago: 5 x 690 + 630 = 4080 s = 68 min
    log("b-running", [4.7, 4.5, 4.4, 4.3], [600.0, 720.0, 660.0, 1800.0])
    # its first epoch under way: no loss, no epoch time, no ETA yet
    (runs / "b0-started").mkdir(parents=True)
    (runs / "b0-started" / "config.resolved.yaml").write_text("seed: 0\n")
    # epochs of 400 s, nothing written for 2060 s (over 3 x 400 s and 900 s); its last epoch is overdue: ETA 0
    log("c-stalled", [4.6, 4.5, 4.4, 4.35], 400.0, mtime=NOW - 2000)
    log("d-requeued", [4.7, 4.6], 100.0)
    stopped = last_words("d-requeued", "bayesncl pretrain: SIGTERM: checkpoint saved; rerun to resume (exit 75)")
    log("e-evaluating", [4.0, 3.9, 4.0, 3.9, 4.0], 100.0)  # not falling at the end
    finish(runs / "e-evaluating", ["features", "retrieval"], missing=("retrieval",))
    log("g-done", [4.8, 3.0, 4.5, 4.4, 4.3, 4.2, 4.1], 100.0)  # up past half the way at 3, then falling to the end
    finish(runs / "g-done", ["features"])
    sections = {"e-evaluating": ["features", "retrieval"], "g-done": ["features"]}
    rows = [run_status(runs / rid, rid, {"train": {"epochs": e, "batch_size": 64}}, sections.get(rid), now=now)
            for rid, e in reversed(plan.items())]

    labels, table, total = read_table(render(rows))
    assert labels == ["state", "epoch", "loss", "ETA", "eval", "run"]
    assert [tuple(r.values()) for r in table] == [
        ("failed", "4/10", "4.000", "-", "-", "a-failed", f"[collapse@4]  {died}"),
        ("running", "4/10", "4.300", "1h08", "-", "b-running", ""),
        ("running", "0/10", "-", "-", "-", "b0-started", ""),
        ("running", "4/5", "4.350", "0m", "-", "c-stalled", "[stalled 34m]"),
        ("requeued", "2/10", "4.600", "-", "-", "d-requeued", stopped),
        ("evaluating", "5/5", "4.000", "-", "1/2", "e-evaluating", ""),
        ("waiting", "0/10", "-", "-", "-", "f-waiting", ""),
        ("done", "7/7", "4.100", "-", "1/1", "g-done", "[collapse@3, still learning]"),
    ]
    # the totals line against the rows above and the epoch seconds written
    m = re.fullmatch(r"(\d+) runs: (.+); (\d+) of (\d+) epochs trained \((\d+\.\d) GPU-hours of training so far\); "
                     r"(\d+) flagged(?:; the longest ETA (\S+))?", total)
    assert m, total
    states = [r["state"] for r in table]
    assert int(m[1]) == len(plan) and m[2] == ", ".join(f"{states.count(s)} {s}" for s in dict.fromkeys(states))
    assert int(m[3]) == sum(int(r["epoch"].split("/")[0]) for r in table)
    assert int(m[4]) == sum(plan.values()) == sum(int(r["epoch"].split("/")[1]) for r in table)
    assert m[5] == f"{sum(seconds.values()) / 3600:.1f}" == "2.0"  # 7180 s
    assert int(m[6]) == sum(r["extra"].startswith("[") for r in table) == 3
    assert m[7] is not None and minutes(m[7]) == max(minutes(r["ETA"]) for r in table if r["ETA"] != "-") == 68
    # no run with an ETA (1800 s trained): no longest ETA
    assert read_table(render([r for r in rows if r.state != "running"]))[2].endswith(" epochs trained (0.5 GPU-hours "
                                                                                    "of training so far); 2 flagged")


def test_the_stall_rule_and_the_eta_at_their_boundaries(tmp_path):
    """Stalled: nothing written for more than max(3 epoch times, 900 s). The ETA: the epochs after the one under
    way at the median epoch time, and what is left of that one."""
    d = tmp_path / "run"
    write_log(d, [4.7, 4.5, 4.4, 4.3], seconds=400.0)  # epoch 4 of 5 ended at NOW: the fifth under way

    def at(since):
        return run_status(d, "r", {"train": {"epochs": 5, "batch_size": 64}}, now=NOW + since)

    assert [at(s).eta_s for s in (0, 100, 399, 400, 1000)] == [400.0, 300.0, 1.0, 0.0, 0.0]
    assert (at(1200).flags, at(1201).flags) == ([], ["stalled 20m"])  # 3 x 400 s, over 900 s
    assert run_status(d, "r", {"train": {"epochs": 8, "batch_size": 64}}, now=NOW + 100).eta_s == 3 * 400 + 300
    write_log(d, [4.7, 4.5, 4.4, 4.3], seconds=100.0)
    assert (at(900).flags, at(901).flags) == ([], ["stalled 15m"])  # 3 x 100 s: at least 900 s


def test_the_flags_read_infonce_not_the_loss(tmp_path):
    """BayesNCL's logged loss adds its KL term: collapse and still-learning read the log's infonce column (a log
    older than that column: its loss)."""
    d = tmp_path / "run"
    cfg = {"train": {"epochs": 5, "batch_size": 64}}
    write_log(d, [4.8, 2.9, 2.8, 2.7, 2.6], infonce=[4.8, 3.0, 3.5, 4.0, 3.9])
    r = run_status(d, "r", cfg, now=NOW)
    assert (r.flags, r.loss) == (["collapse@4"], 2.6)
    write_log(d, [4.8, 3.0, 3.5, 4.0, 3.9], infonce=[4.8, 2.9, 2.8, 2.7, 2.6])
    assert run_status(d, "r", cfg, now=NOW).flags == []
    write_log(d, [4.8, 3.0, 3.5, 4.0, 3.9], infonce=False)
    assert run_status(d, "r", cfg, now=NOW).flags == ["collapse@4"]
    finish(d, ["features"])
    write_log(d, [4.0, 4.0, 4.0, 4.0, 4.0], infonce=[4.5, 4.4, 4.3, 4.2, 4.1])  # InfoNCE still falling
    assert run_status(d, "r", cfg, ["features"], now=NOW).flags == ["still learning"]
    write_log(d, [4.5, 4.4, 4.3, 4.2, 4.1], infonce=[4.0, 4.1, 4.0, 4.1, 4.0])
    assert run_status(d, "r", cfg, ["features"], now=NOW).flags == []


def test_the_runs_found_leave_out_dot_folders_and_eval_folders(tmp_path):
    """Without the grid, a run is a folder under results/runs holding its config, log or model; hidden folders
    (a sync tool's, a trash) and eval/ folders are not searched, nor a run's own subfolders."""
    runs = tmp_path / "results" / "runs"
    write_log(runs / "cifar10" / "ncl" / "seed~0", [4.0])
    write_log(runs / "cifar10" / "ncl" / "seed~0" / "old" / "seed~9", [4.0])  # inside a run
    write_log(runs / ".trash" / "cifar10" / "ncl" / "seed~1", [4.0])
    write_log(runs / "cifar10" / ".sync" / "seed~2", [4.0])
    write_log(runs / "cifar10" / "eval" / "seed~3", [4.0])
    (runs / "cifar10" / "bayesncl" / "seed~0").mkdir(parents=True)
    (runs / "cifar10" / "bayesncl" / "seed~0" / "model.pt").write_bytes(b"x")
    (runs / "cifar10" / "bayesncl" / "seed~1").mkdir(parents=True)  # empty: not a run yet
    assert [r.run_id for r in grid_status(tmp_path / "results", now=NOW)] == [
        "cifar10/bayesncl/seed~0", "cifar10/ncl/seed~0"]


def test_without_the_grid_a_run_reads_its_recorded_config(tmp_path):
    """Without the plan, a run's epochs (and so its ETA) come from the config it recorded; a config that cannot be
    read is a row saying so, the run still listed (never in silence)."""
    runs = tmp_path / "results" / "runs"
    for rid, text in (("a", "train: {epochs: 10, batch_size: 64}\n"), ("b", "train: [\n")):
        write_log(runs / rid, [4.7, 4.5, 4.4, 4.3])  # epochs of 10 s, the last ended at NOW
        (runs / rid / "config.resolved.yaml").write_text(text)
        os.utime(runs / rid / "config.resolved.yaml", (NOW, NOW))
    a, b = grid_status(tmp_path / "results", now=NOW + 4)
    assert (a.run_id, a.state, a.epoch, a.epochs, a.eta_s) == ("a", "running", 4, 10, 5 * 10 + 6)
    assert (b.run_id, b.state, b.epoch, b.epochs, b.eta_s) == ("b", "unreadable", 0, None, None)
    assert b.note.startswith("config.resolved.yaml: not valid YAML at line 2; fix or remove it")
    assert [line.split()[1] for line in render([a, b]).splitlines()[1:3]] == ["0", "4/10"]


# ------------------------------------------------------------------------------ read what it can, say what it cannot
BAD_FOLDERS = [  # (case, {file: content, None: a folder}, the row's note)
    ("a binary log", {"log.jsonl": b"\x89PNG\r\n\x1a\n\xff\xfe\x00"}, "log.jsonl: not a text file (not UTF-8)"),
    ("a log line that is a list", {"log.jsonl": '{"epoch": 1, "loss": 4.0}\n[1, 2]\n'},
     "log.jsonl line 2: [1, 2] is not a JSON object"),
    ("a log line that is a string", {"log.jsonl": '"epoch"\n'}, "log.jsonl line 1: 'epoch' is not a JSON object"),
    ("a log line that is a number", {"log.jsonl": "3\n"}, "log.jsonl line 1: 3 is not a JSON object"),
    ("a log line that is not JSON", {"log.jsonl": "{loss: 4}\n"}, "log.jsonl line 1: not JSON"),
    ("a string epoch_seconds", {"log.jsonl": '{"loss": 4.0, "epoch_seconds": "12"}\n'},
     "log.jsonl line 1: epoch_seconds '12' is not a number of seconds"),
    ("an infinite epoch_seconds", {"log.jsonl": '{"loss": 4.0, "epoch_seconds": Infinity}\n'},
     "log.jsonl line 1: epoch_seconds inf is not a number of seconds"),
    ("a loss beyond floats", {"log.jsonl": '{"loss": 1' + "0" * 400 + "}\n"}, "log.jsonl line 1: loss 1000"),
    ("a list loss", {"log.jsonl": '{"loss": [4.0]}\n'}, "log.jsonl line 1: loss [4.0] is not a number"),
    ("train a list", {"config.resolved.yaml": "train: [1, 2]\n"}, "config.resolved.yaml: train is [1, 2], not a mapping"),
    ("non-numeric epochs", {"config.resolved.yaml": "train: {epochs: ten}\n"},
     "config.resolved.yaml: train.epochs 'ten' is not a whole number"),
    ("a zero batch", {"config.resolved.yaml": "train: {epochs: 4, batch_size: 0}\n"},
     "config.resolved.yaml: train.batch_size 0 is not a whole number above 0"),
    ("a config that is a list", {"config.resolved.yaml": "[1, 2]\n"}, "config.resolved.yaml: [1, 2] is not a mapping"),
    ("a binary config", {"config.resolved.yaml": b"\xff\xfe\x00"}, "config.resolved.yaml: not a text file (not UTF-8)"),
    ("a log that is a folder", {"log.jsonl": None}, "log.jsonl: cannot be read (Is a directory)"),
]


@pytest.mark.parametrize("files,note", [c[1:] for c in BAD_FOLDERS], ids=[c[0] for c in BAD_FOLDERS])
def test_a_bad_run_folder_is_a_row_saying_what_is_wrong(tmp_path, capsys, files, note):
    """Without the plan: the bad run is a row in state `unreadable` naming the file and what is wrong; the good run
    beside it is read as before; no traceback, nothing on stderr."""
    runs = tmp_path / "results" / "runs"
    write_log(runs / "good", [4.7, 4.5], seconds=10.0, mtime=time.time())
    write_log(runs / "bad", [4.7, 4.5])
    for name, body in files.items():
        path = runs / "bad" / name
        path.unlink()
        if body is None:
            path.mkdir()
        else:
            path.write_bytes(body if isinstance(body, bytes) else body.encode())
    assert main(["status", str(tmp_path / "results")]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    _, table, total = read_table(out)
    bad, good = table
    assert (bad["state"], bad["run"], bad["epoch"]) == ("unreadable", "bad", "0") and bad["extra"].startswith(note), bad
    assert bad["extra"].endswith("; fix or remove it, then look again")
    assert (good["state"], good["run"], good["epoch"]) == ("running", "good", "2")
    assert total.startswith("2 runs: 1 unreadable, 1 running; 2 of 0 epochs trained")


@pytest.mark.parametrize("line", ['{"epoch": 1, "loss": null}', '{"epoch": "1", "loss": 4.0}', '{"loss": 4.0, "kl": "x"}',
                                  '{"loss": 4.0, "epoch_seconds": -1}', '{"loss": true}', '[4.0]', '{"lr": [1]}'])
def test_status_refuses_a_log_as_its_evaluation_does(tmp_path, line):
    """One reader of the training log (bayesncl.runs.files.read_log): what the evaluation refuses is the row's note,
    in the same words; what it takes, status takes."""
    from bayesncl.runs.files import LogError, read_log

    write_log(tmp_path / "r", [4.7])
    (tmp_path / "r" / "log.jsonl").write_text(line + "\n")
    with pytest.raises(LogError) as e:
        read_log(tmp_path / "r")
    row = run_status(tmp_path / "r", "r", now=NOW)
    assert (row.state, row.note) == ("unreadable", f"log.jsonl{e.value.fault}; fix or remove it, then look again")
    (tmp_path / "r" / "log.jsonl").write_text('{"epoch": 1, "loss": 4, "peak_mem_mb": null, "kl": 0}\n')
    assert read_log(tmp_path / "r")[0]["loss"] == 4.0 and run_status(tmp_path / "r", "r", now=NOW).loss == 4.0


def test_a_bad_log_in_the_plan_is_a_row_and_the_totals_still_count_it(interrupted, capsys):
    res, runs, ids = interrupted
    (res / "runs" / ids["bayesncl", 0] / "log.jsonl").write_text('{"loss": 4.0}\n"oops"\n')
    grid_file = res.parent / "grid.yaml"
    grid_file.write_text(yaml.safe_dump(GRID))
    assert main(["status", str(res), "--grid", str(grid_file), "--only", "unreadable"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 3 and out[1].split()[:2] == ["unreadable", "0/10"] and ids["bayesncl", 0] in out[1]
    assert "log.jsonl line 2: 'oops' is not a JSON object" in out[1]
    assert out[2].startswith("4 runs: 1 unreadable, 1 failed, 1 waiting, 1 done; 12 of 40 epochs trained")


def _as_another_user(argv: list[str], cwd: Path) -> tuple[int, str, str]:
    """`bayesncl ARGV` in a forked child that runs as nobody where this process is root (root reads any file), so
    a mode of 000 means what it means for a user; (exit code, stdout, stderr)."""
    import io
    import pickle
    from contextlib import redirect_stderr, redirect_stdout

    import scipy.stats  # noqa: F401 - imported before the child drops root: it cannot read root's site-packages

    import bayesncl.grid.stale  # noqa: F401
    r, w = os.pipe()
    sys.stdout.flush(), sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        result = (99, "", "child failed")
        try:
            os.close(r)
            if os.geteuid() == 0:
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
            os.chdir(cwd)
            out, err = io.StringIO(), io.StringIO()
            with redirect_stdout(out), redirect_stderr(err):
                code = main(argv)
            result = (code, out.getvalue(), err.getvalue())
        except BaseException as e:  # noqa: BLE001 - reported to the parent, which fails the test with it
            result = (98, "", f"{type(e).__name__}: {e}")
        finally:
            os.write(w, pickle.dumps(result))
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as fh:
        data = fh.read()
    os.waitpid(pid, 0)
    return pickle.loads(data)


@pytest.fixture
def shared_results():
    """A results folder another user may read (the tests' tmp_path is root's alone)."""
    import tempfile

    top = Path(tempfile.mkdtemp(prefix="bst-", dir="/tmp"))
    os.chmod(top, 0o755)
    yield top
    for p in [top, *top.rglob("*")]:
        if not p.is_symlink():
            os.chmod(p, 0o755)
    shutil.rmtree(top)


@pytest.mark.parametrize("where,note", [
    ("runs", "cannot read the folder {res}/runs (Permission denied); the runs in it are not counted"),
    ("run", "cannot read the folder {res}/runs/x/ncl/seed~0 (Permission denied)"),
    ("log", "log.jsonl: cannot be read (Permission denied)"),
    ("eval", "eval/ cannot be read (Permission denied)"),
])
def test_an_unreadable_folder_or_file_is_a_line_naming_it(shared_results, where, note):
    res = shared_results / "results"
    run = res / "runs" / "x" / "ncl" / "seed~0"
    write_log(run, [4.7, 4.5])
    finish(run, ["features"])
    write_log(res / "runs" / "y", [4.0])
    for p in [shared_results, *shared_results.rglob("*")]:
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    os.chmod({"runs": res / "runs", "run": run, "log": run / "log.jsonl", "eval": run / "eval"}[where], 0)
    code, out, err = _as_another_user(["status", str(res)], shared_results)
    assert (code, err) == (0, ""), err
    _, table, total = read_table(out)
    rows = {r["run"]: r for r in table}
    unreadable = [r for r in table if r["state"] == "unreadable"]
    assert len(unreadable) == 1 and unreadable[0]["extra"].startswith(note.format(res=res)), out
    if where != "runs":
        assert set(rows) == {"x/ncl/seed~0", "y"} and rows["y"]["state"] == "running"
    assert "unreadable" in total


def trained_otherwise(out: str) -> list[str]:
    """`bayesncl stale`'s lines of runs trained under other settings (the rest follows from them, or is new)."""
    return [line for line in out.splitlines() if line.startswith("pretrain ") and not line.endswith("not made yet")]


STALE_BAD = [
    ("binary", b"\xff\xfe\x00", "not a text file"),
    ("train a list", "train: [1]\n", "train: expected a mapping"),
    ("a list", "[1, 2]\n", "expected a mapping at the top level"),
    ("epochs text", "train: {epochs: ten}\n", "train.epochs: got 'ten'"),
]


@pytest.mark.parametrize("body,why", [c[1:] for c in STALE_BAD], ids=[c[0] for c in STALE_BAD])
def test_stale_names_a_run_whose_config_it_cannot_read_and_compares_the_rest(tmp_path, capsys, body, why):
    runs = expand_grid(GRID)
    res = tmp_path / "results"
    (bad, run_bad), (stale, run_stale) = list(runs.items())[:2]
    (res / "runs" / bad).mkdir(parents=True)
    (res / "runs" / bad / "config.resolved.yaml").write_bytes(body if isinstance(body, bytes) else body.encode())
    (res / "runs" / stale).mkdir(parents=True)
    old = json.loads(json.dumps(run_stale.config))
    old["train"]["epochs"] = 3
    (res / "runs" / stale / "config.resolved.yaml").write_text(yaml.safe_dump(old))
    (res / "runs" / stale / "model.pt").write_bytes(b"trained")
    grid_file = tmp_path / "grid.yaml"
    grid_file.write_text(yaml.safe_dump({**GRID, "results": str(res)}))
    assert main(["stale", "--grid", str(grid_file)]) == 0
    out, err = capsys.readouterr()
    assert trained_otherwise(out) == [f"pretrain {stale}: train.epochs 3 (today 10)"]
    first, count, last = err.splitlines()
    assert first.startswith(f"{bad}: not compared: ") and why in first and "Traceback" not in err
    assert count.startswith(f"{len(out.splitlines())} job(s) to run under {res}; make them: snakemake --cores N "
                            f"--configfile {grid_file} (exactly these, made before: --forcerun $(bayesncl stale --grid "
                            f"{grid_file} --targets))")
    assert last == NOT_COMPARED[0].upper() + NOT_COMPARED[1:]
    assert main(["stale", "--grid", str(grid_file), "--targets"]) == 0
    out, err = capsys.readouterr()
    assert out == f"{res}/runs/{stale}/model.pt\n" and err.startswith(f"{bad}: not compared: ")


def test_stale_names_a_run_folder_it_may_not_read(shared_results):
    runs = expand_grid(GRID)
    res = shared_results / "results"
    (rid, run), (later, run_later) = list(runs.items())[:2]
    for r, cfg in ((rid, run.config), (later, {**run_later.config, "seed": 7})):
        (res / "runs" / r).mkdir(parents=True)
        (res / "runs" / r / "config.resolved.yaml").write_text(yaml.safe_dump(cfg))
        (res / "runs" / r / "model.pt").write_bytes(b"trained")
    (shared_results / "grid.yaml").write_text(yaml.safe_dump({**GRID, "results": str(res)}))
    for p in [shared_results, *shared_results.rglob("*")]:
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    os.chmod(res / "runs" / rid, 0)
    code, out, err = _as_another_user(["stale", "--grid", str(shared_results / "grid.yaml")], shared_results)
    assert code == 0 and trained_otherwise(out) == [f"pretrain {later}: seed 7 (today {run_later.config['seed']})"]
    assert err.splitlines()[0] == (f"{rid}: not compared: {res / 'runs' / rid / 'config.resolved.yaml'}: cannot be "
                                   "read (Permission denied)")


def test_a_results_folder_without_runs_is_no_run_and_an_epoch_of_no_seconds_is_one(tmp_path, capsys):
    (tmp_path / "results").mkdir()
    assert main(["status", str(tmp_path / "results")]) == 0
    assert capsys.readouterr().out.splitlines()[1].startswith("0 runs: none")
    write_log(tmp_path / "run", [4.0], seconds=0.0)
    assert run_status(tmp_path / "run", "r", now=NOW).state == "running"  # 0 s (a tiny epoch) is a number of seconds
    r = run_status(tmp_path / "run", "r", {"train": {"epochs": "ten"}}, now=NOW)  # a caller's plan, named as such
    assert (r.state, r.epochs, r.note) == ("unreadable", None, "the plan: train.epochs 'ten' is not a whole number; "
                                                               "fix or remove it, then look again")


def test_stale_lists_every_stale_run_after_runs_not_started_and_reads_old_records_as_recorded(tmp_path, capsys):
    from bayesncl.grid.stale import REPORT_JOBS, planned_jobs, print_stale

    runs = list(expand_grid(GRID).items())
    res = tmp_path / "results"
    (_, _), (b, run_b), (c, run_c) = runs[:3]  # the first run has no folder: not started
    for rid, run in ((b, run_b), (c, run_c)):
        old = json.loads(json.dumps(run.config))
        del old["train"]["loss_scaler"]  # recorded before the key existed: it did what `added` says (none)
        (res / "runs" / rid).mkdir(parents=True)
        (res / "runs" / rid / "config.resolved.yaml").write_text(yaml.safe_dump(old))
        (res / "runs" / rid / "model.pt").write_bytes(b"trained")
    print_stale(GRID, res, "g.yaml")  # the differences by default
    out, err = capsys.readouterr()
    assert trained_otherwise(out) == [f"pretrain {b}: train.loss_scaler none (today fp16)",
                                      f"pretrain {c}: train.loss_scaler none (today fp16)"]
    # after them their evaluation and the report's jobs, and summarize reads every run's: all made first
    jobs = planned_jobs(GRID, res)
    assert all(j.planned for j in jobs) and len(jobs) == len(runs) + sum(
        len(evaluation_sections(r)) for _, r in runs) + len(REPORT_JOBS) - 1  # no pdf
    assert err == (f"{len(jobs)} job(s) to run under {res}; make them: snakemake --cores N --configfile g.yaml "
                   "(exactly these, made before: --forcerun $(bayesncl stale --grid g.yaml --targets))\n"
                   + NOT_COMPARED[0].upper() + NOT_COMPARED[1:] + "\n")
    print_stale(GRID, res, "g.yaml", targets_only=True)
    assert capsys.readouterr() == (f"{res}/runs/{b}/model.pt\n{res}/runs/{c}/model.pt\n", "")
    for rid in (b, c):
        (res / "runs" / rid / "config.resolved.yaml").write_text(yaml.safe_dump(dict(runs)[rid].config))
    print_stale(GRID, res, "g.yaml")
    out, err = capsys.readouterr()
    new = len(jobs) - 2 - len(REPORT_JOBS) + 1  # nothing to run: every job not made yet but b's and c's training
    assert out == "" and err.startswith(f"0 job(s) to run under {res}; {new} job(s) whose output is missing and that "
                                        "none of them reads (snakemake makes them where a target of the workflow "
                                        "needs them; --all lists them)\n")
    (res / "runs" / b / "model.pt").unlink()  # begun under other settings: what --all says of it
    (res / "runs" / b / "config.resolved.yaml").write_text(yaml.safe_dump(dict(runs)[b].config | {"seed": 9}))
    print_stale(GRID, res, "g.yaml", all_jobs=True)
    assert f"pretrain {b}: not made yet; its folder holds a run of other settings, replaced: seed 9 (today " \
           f"{dict(runs)[b].config['seed']})" in capsys.readouterr().out.splitlines()


def test_an_evaluation_trigger_s_change_names_keys_either_side_lacks():
    """A key only the recorded trigger has, or only today's, reads "absent" on the other side; plugin code compared
    entry by entry, an entry only the record names included."""
    was = {"eval": {"k": 1, "gone": 2}, "plugin_code": {"m": "sha256 " + "a" * 64, "old": "v1"}}
    today = {"eval": {"k": 1, "new": 3}, "plugin_code": {"m": "sha256 " + "a" * 64}}
    assert trigger_change(was, today) == {"eval.gone": [2, "absent"], "eval.new": ["absent", 3],
                                          "code of old": ["v1", "absent"]}
    assert trigger_change(was, was) == {}
