"""A pretraining run on the one-node SLURM cluster that outlives its allocation, or is preempted.

- Time limits: the profile's `runtime` for pretrain is one minute; the run needs several. Before each allocation
  ends the job stops with a checkpoint and requeues itself (workflow/scripts/allocation.py); Snakemake submits it
  once and never sees it fail. The cluster's job log shows at least three allocations of that one job.
- Preemption: the cluster has a low- and a high-priority partition (PreemptMode=REQUEUE); a job of the high one
  preempts the running pretraining job, which SLURM requeues and which resumes from its checkpoint.

Both end with weights identical to an uninterrupted run of the same config (resumption is bit-identical on the
CPU). Selected with `pytest -m slurm`; needs root, as tests/test_slurm.py.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
import yaml

from helpers.slurm import CLUSTER, REPO, cluster_state, run_workflow, slurm_requirements, tail  # noqa: F401 - fixtures

pytestmark = pytest.mark.slurm

# One run, on the CPU, single-threaded (so the cluster's run and the reference agree bit for bit).
GRID = """\
results: results-allocations
seeds: [0]
defaults:
  data:
    num_workers: 0
    synthetic: {{train_size: 1024, test_size: 120, image_size: 16}}
  model: {{arch: resnet18, width: 4, stem: cifar, proj_hidden: 32, proj_dim: 16}}
  method: {{rho: 0.8, lambda: 3.0e-5}}
  train: {{epochs: {epochs}, batch_size: 64, warmup_epochs: 0, threads: 1, device: cpu}}
  eval: {{probe: fast, batch_size: 256}}
datasets:
  synthetic:
    data: {{dataset: synthetic, cache_dir: {cache}}}
variants:
  NCL: {{method: {{name: ncl}}}}
sets:
  figure3: {{variants: [NCL]}}  # a set without untrained twins: one run
"""


def _grid(tmp_path: Path, epochs: int) -> tuple[Path, str, dict]:
    from bayesncl.grid.expand import expand_grid

    path = tmp_path / "grid.yaml"
    path.write_text(GRID.format(epochs=epochs, cache=tmp_path / "cache"))
    (rid, run), = expand_grid(yaml.safe_load(path.read_text())).items()
    return path, rid, {k: v for k, v in run.config.items() if k != "eval"}


def _profile(tmp_path: Path, **pretrain) -> Path:
    """The repository's SLURM profile with pretrain's time request (and margin) changed, as a user would."""
    conf = yaml.safe_load((REPO / "slurm" / "config.yaml").read_text())
    conf.pop("configfile")
    conf["set-resources"]["pretrain"].update(pretrain)
    path = tmp_path / "profile"
    path.mkdir()
    (path / "config.yaml").write_text(yaml.safe_dump(conf))
    return path


def _epoch_seconds(tmp_path: Path) -> float:
    """One epoch of the test's run, timed here and now (the machine may be shared)."""
    _, _, cfg = _grid(tmp_path, epochs=1)
    subprocess.run([sys.executable, "-m", "bayesncl", "pretrain", "--config-json", json.dumps(cfg), "--out",
                    str(tmp_path / "timing"), "--quiet"], check=True, capture_output=True,
                   env=dict(os.environ, PYTHONPATH=str(REPO / "src")))
    return json.loads((tmp_path / "timing" / "log.jsonl").read_text().splitlines()[0])["epoch_seconds"]


def _reference(tmp_path: Path, cfg: dict) -> subprocess.Popen:
    """The same run, uninterrupted, here (started beside the cluster's)."""
    return subprocess.Popen(
        [sys.executable, "-m", "bayesncl", "pretrain", "--config-json", json.dumps(cfg, sort_keys=True),
         "--out", str(tmp_path / "reference"), "--quiet"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env=dict(os.environ, PYTHONPATH=str(REPO / "src")),
    )


def _same_weights(reference: subprocess.Popen, tmp_path: Path, model: Path) -> None:
    _, err = reference.communicate(timeout=600)
    assert reference.returncode == 0, err
    a = torch.load(tmp_path / "reference" / "model.pt", map_location="cpu", weights_only=False)["model"]
    b = torch.load(model, map_location="cpu", weights_only=False)["model"]
    assert a.keys() == b.keys()
    differ = [k for k in a if not torch.equal(a[k], b[k])]
    assert not differ, f"weights differ from the uninterrupted run: {differ[:5]}"


def _jobs(state: Path) -> list[tuple[str, str, str]]:
    """The cluster's job completion log: (job id, partition, state), one per allocation that ended."""
    text = (state / "log" / "jobcomp.txt").read_text()
    return [(m["id"], m["part"], m["state"]) for m in re.finditer(
        r"JobId=(?P<id>\d+) .*?JobState=(?P<state>\S+) Partition=(?P<part>\S+)", text)]


def _submitted(out: str) -> list[str]:
    return re.findall(r"has been submitted with SLURM jobid (\d+)", out)


def test_run_longer_than_its_allocation(tmp_path, cluster_state):
    # An allocation trains for less than its 60 s minus the 20 s margin: 90 s of training needs three or more.
    epochs = math.ceil(90 / _epoch_seconds(tmp_path))
    grid, rid, cfg = _grid(tmp_path, epochs=epochs)
    profile = _profile(tmp_path, runtime=1, stop_margin_s=20)
    results = tmp_path / "results"
    model = results / "runs" / rid / "model.pt"
    reference = _reference(tmp_path, cfg)  # beside it: it can only slow the run, i.e. add allocations
    rc, out = run_workflow(cluster_state, "--profile", str(profile), str(model), "--configfile", str(grid),
                           "--config", f"results={results}", directory=REPO, limit=900, timeout=960)
    assert rc == 0, tail(out)
    (job,) = _submitted(out)  # one submission: Snakemake never saw it fail
    runs = [s for j, _, s in _jobs(cluster_state) if j == job]  # one record per allocation of that job
    assert runs[-1] == "COMPLETED" and len(runs) >= 3, runs
    assert set(runs[:-1]) == {"PENDING"}, runs  # requeued: back in the queue when its allocation ended
    limit = re.search(rf"JobId={job} .*?TimeLimit=(\S+)", (cluster_state / "log" / "jobcomp.txt").read_text())[1]
    assert limit in ("1", "00:01:00"), limit  # the profile's request
    _same_weights(reference, tmp_path, model)


class Preempt(threading.Thread):
    """Once the run has saved a checkpoint, submits a job to the high-priority partition that needs the whole node;
    records the epochs logged by then."""

    def __init__(self, state: Path, run_dir: Path):
        super().__init__(daemon=True)
        self.state, self.run_dir = state, run_dir
        self.stop, self.logged, self.error = threading.Event(), None, None

    def run(self):
        ckpt, log = self.run_dir / "checkpoint.pt", self.run_dir / "log.jsonl"
        while not self.stop.is_set():
            if ckpt.exists() and log.exists() and log.read_text():
                self.logged = log.read_text().splitlines()
                env = subprocess.run(["bash", str(CLUSTER), "env", str(self.state)], capture_output=True,
                                     text=True, check=True).stdout
                cmd = (f"{env}\nsbatch --parsable -p debug-high --exclusive -t 1 -J preemptor -o /dev/null "
                       "--wrap 'sleep 2'")
                r = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True)
                self.error = None if r.returncode == 0 else r.stderr
                return
            time.sleep(0.2)


def test_preempted_run_resumes(tmp_path, cluster_state, monkeypatch):
    monkeypatch.setenv("SLURM_LOCAL_PREEMPT", "1")  # local_cluster.sh: partitions debug and debug-high
    grid, rid, cfg = _grid(tmp_path, epochs=12)
    profile = _profile(tmp_path)  # the profile as shipped: a day's limit
    results = tmp_path / "results"
    run_dir = results / "runs" / rid
    reference = _reference(tmp_path, cfg)
    preempt = Preempt(cluster_state, run_dir)
    preempt.start()
    try:
        rc, out = run_workflow(cluster_state, "--profile", str(profile), str(run_dir / "model.pt"),
                               "--configfile", str(grid), "--config", f"results={results}", directory=REPO,
                               limit=600, timeout=660)
    finally:
        preempt.stop.set()
    assert rc == 0, tail(out)
    assert preempt.logged is not None and preempt.error is None, (preempt.logged, preempt.error)
    (job,) = _submitted(out)
    jobs = _jobs(cluster_state)
    runs = [s for j, _, s in jobs if j == job]
    assert runs == ["PREEMPTED", "COMPLETED"], jobs
    assert [s for _, p, s in jobs if p == "debug-high"] == ["COMPLETED"], jobs
    # Resumed, not restarted: the epochs logged before the preemption are kept as they were.
    final = (run_dir / "log.jsonl").read_text().splitlines()
    assert len(final) == 12 and final[: len(preempt.logged)] == preempt.logged
    _same_weights(reference, tmp_path, run_dir / "model.pt")
