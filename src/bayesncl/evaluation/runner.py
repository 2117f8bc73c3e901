"""`bayesncl evaluate`: run evaluation sections (bayesncl.evaluation.sections) on one pretrained checkpoint.

Each section writes `<out>/<section>.json` = {"run": <who made it>, <its keys>: ...} atomically (format in
docs/DESIGN.md). The config is the one stored in the checkpoint; only eval.* and data.* keys may be changed
here (where the data lives, how to evaluate), never what was trained. Sections that read only the features
cache take that config and the weights' identity from features.json, which the features section wrote from
the checkpoint: they never load it (nor torch).
"""

from __future__ import annotations

import copy
import json
import os
import sys
from pathlib import Path

from ..core.atomic import atomic_write_text
from ..settings.config import RUNTIME_KEYS, merge, resolve, validate
from ..core.errors import ConfigError
from ..runs.events import write_section
from ..runs.files import EVAL
from ..core.startup import mark_ready
from ..core.yamlio import nest, parse_set
from .context import Context, clean, run_info
from .sections import SECTIONS, applicable, check_applies

__all__ = ["evaluate"]


def _config(stored: dict, checkpoint: Path, sets, overrides: dict | None, expect_config) -> dict:
    """The stored training config with this call's eval.* and data.* settings."""
    cfg = copy.deepcopy(stored)
    if expect_config is not None:
        from ..runs.checkpoint import config_diff

        want = resolve(file=expect_config)
        diff = config_diff(cfg, want, ignore=RUNTIME_KEYS)
        if diff:
            raise ConfigError(f"{checkpoint} does not match {expect_config}: " + "; ".join(diff))
        cfg["eval"] = want["eval"]
    for over in (overrides or {}, nest(dict(parse_set(s) for s in sets))):
        bad = [k for k in over if k not in ("eval", "data")]
        if bad:
            raise ConfigError(f"{bad[0]}.*: only eval.* and data.* keys can be changed at evaluation")
        cfg = merge(cfg, copy.deepcopy(over))
    return validate(cfg)


def _recorded(out: Path) -> dict | None:
    """What the features section recorded of the checkpoint in out/features.json (its stored config and the
    run block with weights_sha), or None where that file is missing or older than this record."""
    try:
        data = json.loads((out / "features.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("config"), dict) \
            or not isinstance(data.get("run"), dict) or "weights_sha" not in data["run"]:
        return None
    return data


def _torch_threads(cfg: dict) -> None:
    """train.threads bounds evaluation's torch threads too (0: torch's default): jobs run side by side, and two
    of them each spinning two threads on two cores cost three times the CPU time (measured on the probes)."""
    n = cfg["train"]["threads"]
    if not n:
        return
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(n)
    else:
        os.environ["OMP_NUM_THREADS"] = str(n)  # read when a section first imports torch


def evaluate(checkpoint: str | Path, out_dir: str | Path, *, only=None, sets=(), overrides: dict | None = None,
             expect_config=None, progress: bool = True, replace: bool = False, trigger: dict | None = None) -> list[Path]:
    """Run the sections `only` (default: every section that applies to the run, features first) and return
    the JSON files written. `sets` are `key=value` overrides and `overrides` a nested dict of eval.* and
    data.* keys. A folder holding a run or another run's evaluation is refused, or with `replace` replaced
    whole (bayesncl.runs.ownership); the run's own eval/ folder is always its own. `trigger`: the rerun trigger the
    workflow gave the job of the one section in `only` (bayesncl.grid.expand.job_trigger), recorded in its file's run
    block, where `bayesncl stale` compares it with today's."""
    if trigger is not None and len(only or ()) != 1:
        raise ConfigError("--trigger-json: a job's trigger is one section's; give exactly one section with --only")
    from ..runs.ownership import into, other_evaluation

    out = Path(out_dir)
    # the run's own evaluation: its numbers go to the run's TensorBoard curves too (bayesncl.runs.events)
    own = out.resolve() == (Path(checkpoint).parent / EVAL).resolve()
    with into(out, other_evaluation(out, checkpoint, lambda: _digest(checkpoint)), replace) as where:
        written = _evaluate(Path(checkpoint), where, only, sets, overrides, expect_config, progress, own, trigger)
    return [out / p.name for p in written]


def _digest(checkpoint) -> str:
    from ..runs import checkpoint as ckpt_io

    return ckpt_io.weights_digest(ckpt_io.load(checkpoint)["model"])


def _evaluate(checkpoint: Path, out: Path, only, sets, overrides, expect_config, progress, own: bool,
              trigger) -> list[Path]:
    for name in only or ():
        SECTIONS[name]  # an unknown name: the registry's one line, naming the sections allowed
    state, cfg = None, None
    recorded = _recorded(out) if only and "features" not in only else None
    if recorded is not None:
        stored = recorded["config"]
        cfg = _config(stored, checkpoint, sets, overrides, expect_config)
        if any(SECTIONS[n].model(cfg) for n in only):
            cfg = None  # a section that runs the model reads the checkpoint itself
    if cfg is None:
        from ..runs import checkpoint as ckpt_io

        state = ckpt_io.load(checkpoint)
        stored = ckpt_io.stored_config(state, checkpoint)
        cfg = _config(stored, checkpoint, sets, overrides, expect_config)
        weights_sha = ckpt_io.weights_digest(state["model"])
        imported = state.get("imported")  # weights of the released code (bayesncl.runs.released)
    else:
        weights_sha = recorded["run"]["weights_sha"]
        imported = recorded["run"].get("imported")
    _torch_threads(cfg)
    names = list(only) if only else applicable(cfg)
    for name in names:
        check_applies(name, cfg)
    names = [n for n in SECTIONS if n in names]  # features before the sections that read it
    ctx = Context(checkpoint, out, cfg, progress, state=state, weights_sha=weights_sha, stored_config=stored)
    run = {**run_info(cfg), "checkpoint": str(checkpoint), "weights_sha": weights_sha,
           **({"imported": imported} if imported else {}), **({"trigger": trigger} if trigger is not None else {})}
    written = []
    mark_ready()  # imports, config and checkpoint loaded: the work begins (bayesncl.core.startup)
    for name in names:
        result = SECTIONS[name].compute(ctx)
        path = out / f"{name}.json"
        record = clean({"run": run, **result})
        atomic_write_text(path, json.dumps(record, indent=2) + "\n")
        if own:
            write_section(ctx.run_dir, name, record)
        written.append(path)
    return written
