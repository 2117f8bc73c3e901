"""The one implementation of the measures (evaluation/arrays.py; tests/test_metrics.py and test_retrieval.py
compare it with naive loops): its edge cases, its users, and a section job that reads the features cache
imports no torch."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from bayesncl.evaluation import arrays

ROOT = Path(__file__).resolve().parents[1]


def test_no_images_gives_nan_not_a_crash():
    out = arrays.interpretability(np.zeros((0, 5), dtype=np.float32), np.zeros(0, dtype=np.int64), 3)
    assert out["alive"] == 0 and out["alive_frac"] == 0
    assert all(math.isnan(out[k]) for k in ("sc", "se_sum", "se_mean", "se_freq", "act"))
    assert np.isnan(out["per_dim"]["freq"]).all() and not out["per_dim"]["active"].any()


def test_pretraining_dynamics_use_these_measures():
    """train.py records SC with this module's consistency_per_dim (no second implementation)."""
    from bayesncl import train

    assert train.consistency_per_dim is arrays.consistency_per_dim


def test_cache_reading_sections_import_no_torch(tmp_path):
    """interpretability and retrieval on a features cache: the job never imports torch (nor reads model.pt)."""
    from conftest import TINY

    from bayesncl import config as C
    from bayesncl.evaluation.runner import evaluate
    from bayesncl.train import pretrain

    run = tmp_path / "run"
    cfg = C.resolve(sets=TINY + ["method.name=topk_ncl", "train.epochs=1"])
    pretrain(cfg, run, progress=False)
    out = tmp_path / "eval"
    evaluate(run / "model.pt", out, only=["features"], progress=False)
    recorded = json.loads((out / "features.json").read_text())
    (run / "model.pt").write_bytes(b"not read")  # the cache-reading sections take the run from features.json
    probe = ("import sys; from bayesncl.cli import main; "
             f"rc = main(['evaluate', '--checkpoint', {str(run / 'model.pt')!r}, '--out', {str(out)!r}, "
             "'--only', 'interpretability', 'retrieval', '--quiet']); "
             "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH'); sys.exit(rc)")
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "NO-TORCH", r.stdout
    for name in ("interpretability", "retrieval"):  # the run block the features section read from the checkpoint
        body = json.loads((out / f"{name}.json").read_text())
        assert body["run"] == recorded["run"] and body[name], name
    # A section that needs torch runs it on train.threads threads (1 here), not on every core
    probe = ("import sys; from bayesncl.cli import main; "
             f"rc = main(['evaluate', '--checkpoint', {str(run / 'model.pt')!r}, '--out', {str(out)!r}, "
             "'--only', 'linear_probe', '--quiet']); import torch; print(torch.get_num_threads()); sys.exit(rc)")
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "OMP_NUM_THREADS": ""})
    assert r.returncode == 0 and r.stdout.split()[-1] == "1", r.stdout + r.stderr
