"""benchmarks/replay_steps.py: the step-by-step replay of a run (how a collapse starts, docs/METHOD.md section
10) is the run itself, and a skipped step is left out."""

import importlib.util
import json
from pathlib import Path

from bayesncl import config as C
from bayesncl.config import dump_yaml
from bayesncl.train import pretrain

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("replay_steps", ROOT / "benchmarks" / "replay_steps.py")
rs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rs)


def _run(tmp_path, tiny_sets):
    cfg = C.resolve(sets=tiny_sets + ["train.epochs=3", "train.max_steps_per_epoch=2", "method.name=bayesncl"])
    pretrain(cfg, tmp_path / "run", progress=False)
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    path = tmp_path / "config.yaml"
    path.write_text(dump_yaml(cfg))
    return path, log


def test_the_replay_is_the_run_and_a_skipped_step_changes_what_follows(tmp_path, tiny_sets):
    path, log = _run(tmp_path, tiny_sets)
    lines = []
    steps = rs.replay(str(path), from_epoch=1, epochs=2, out=lines.append)
    assert [(r["epoch"], r["step"]) for r in steps] == [(2, 0), (2, 1), (3, 0), (3, 1)]
    for epoch in (2, 3):  # the same seeds, draws and order as pretrain: the same losses
        mean = sum(r["infonce"] for r in steps if r["epoch"] == epoch) / 2
        assert abs(mean - log[epoch - 1]["infonce"]) < 1e-9, epoch
    assert all(r["min_norm"] > 0 and r["grad_norm"] >= r["grad_max"] > 0 and r["moved_by"] > 0 for r in steps)
    assert sum(line.startswith("epoch 3 step") for line in lines) == 2

    quiet = []
    skipped = rs.replay(str(path), from_epoch=1, epochs=2, skip={(2, 1)}, spikes=1e9, out=quiet.append)
    assert skipped[:2] == [{**steps[0]}, {**steps[1], "skipped": True}]  # the step itself is as before
    assert skipped[2]["infonce"] != steps[2]["infonce"]  # what follows starts from the weights before it
    assert [q for q in quiet if "step" in q] == ["epoch 2 step 1 (skipped): " + quiet[0].split(": ", 1)[1]]


def test_a_bad_config_is_one_line(tmp_path):
    import subprocess
    import sys

    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"\xff\xfe\x00binary")
    for path in (tmp_path / "missing.yaml", bad):
        r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "replay_steps.py"), str(path)],
                           capture_output=True, text=True, env={"PYTHONPATH": str(ROOT / "src")})
        assert r.returncode == 1 and r.stderr.count("\n") == 1 and str(path) in r.stderr, r.stderr
