"""What a run folder holds, by name: what `bayesncl pretrain` writes and `bayesncl evaluate` reads.

    <run>/config.resolved.yaml   the validated run config
    <run>/checkpoint.pt          latest state (epoch end, or mid-epoch after SIGTERM); resumed on rerun
    <run>/model.pt               final weights + config: what evaluation reads
    <run>/log.jsonl              one JSON object per finished epoch (rewritten whole, atomically)
    <run>/dynamics.pt            per-dimension AF / GV / SC every train.dynamics_every epochs
    <run>/eval/                  one <section>.json per evaluation section (bayesncl.evaluation.sections)
"""

from __future__ import annotations

import json
from pathlib import Path

from .errors import MissingInputError

CONFIG = "config.resolved.yaml"
CHECKPOINT = "checkpoint.pt"
FINAL = "model.pt"
LOG = "log.jsonl"
DYNAMICS = "dynamics.pt"
EVAL = "eval"


def read_log(run_dir: str | Path) -> list[dict]:
    """The training log's epochs, in order. The trainer rewrites the whole file atomically from its checkpointed
    state, so it holds each finished epoch once and never a partial line."""
    path = Path(run_dir) / LOG
    if not path.is_file():
        raise MissingInputError(f"{path} does not exist; it is written by `bayesncl pretrain --out {Path(run_dir)}`")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
