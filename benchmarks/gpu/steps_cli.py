"""Steps that run the project as a user does, in subprocesses: the CUDA tests, SIGTERM and resume, a real run."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from .common import CAPTURED, E2E_SECTIONS, ROOT, StepFailed, tail
from .procs import compare_weights, cuda_test_ids, junit_counts, wait_for_log

if TYPE_CHECKING:
    from .check import Check


def cuda_tests(check: Check) -> dict:
    nodes = cuda_test_ids(ROOT / "tests")
    if not nodes:
        raise StepFailed("no test in tests/ is marked to skip without CUDA; the discovery pattern is stale")
    xml = check.work / "cuda_tests.xml"
    log = check.work / "cuda_tests.log"
    with open(log, "wb") as fh:
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                            f"--junitxml={xml}", *nodes], cwd=ROOT, env=check.env, stdout=fh,
                           stderr=subprocess.STDOUT, timeout=check.s.subprocess_timeout)
    counts = junit_counts(xml)
    res = {"tests": nodes, **counts, "pytest_exit": r.returncode}
    if counts["failures"] or counts["errors"]:
        raise StepFailed(f"{counts['failures']} failed, {counts['errors']} errors: {tail(log)}")
    if check.device.type == "cuda":
        if counts["skipped"] or counts["passed"] == 0:
            raise StepFailed(f"{counts['skipped']} of {counts['tests']} CUDA tests skipped on a CUDA "
                             f"device: {tail(log)}")
    else:
        res["note"] = f"no CUDA here: {counts['skipped']} of {counts['tests']} CUDA tests skipped"
    return res


# The resume checks run with deterministic kernels (train.deterministic): without them a GPU's atomics and cuDNN's
# algorithm choice can make two uninterrupted runs differ, which is no resume bug (docs/REPRODUCIBILITY.md).
RESUME_SETS = ["train.deterministic=true"]


def sigterm_resume(check: Check) -> dict:
    """The grid's mode (eager): the bit-identical resume the trainer promises, with deterministic kernels."""
    res = _sigterm_resume_once(check, check.s.sig_sets + check.device_sets() + RESUME_SETS, check.work / "sigterm")
    return {**res, "sets": RESUME_SETS}


def captured_resume(check: Check) -> dict:
    """An option: the same with the step captured in a CUDA graph (train.graph=cudagraph; a resumed process
    captures its own graph), recorded; CUDA only."""
    if check.device.type != "cuda":
        return {"note": "train.graph=cudagraph needs CUDA"}
    sets = check.s.sig_sets + check.device_sets() + RESUME_SETS + [f"train.graph={CAPTURED}"]
    try:
        return _sigterm_resume_once(check, sets, check.work / f"sigterm_{CAPTURED}")
    except StepFailed as e:
        return {"identical": False, "error": str(e)[:1000]}


def _sigterm_resume_once(check: Check, sets: list[str], base: Path) -> dict:
    from bayesncl.core.errors import REQUEUE_EXIT

    base.mkdir()
    t0 = time.perf_counter()
    ref = check.cli("pretrain", "--out", str(base / "ref"), sets=sets, log=base / "ref.log")
    if ref.returncode != 0:
        raise StepFailed(f"uninterrupted run exited {ref.returncode}: {tail(base / 'ref.log')}")
    ref_seconds = time.perf_counter() - t0
    attempts = []
    for i, frac in enumerate((0.4, 0.2, 0.6)):
        run = base / f"run{i}"
        log = base / f"run{i}.log"
        proc = check.cli("pretrain", "--out", str(run), sets=sets, log=log, wait=False)
        # Epochs 1-2 logged (warm-up over), then SIGTERM at `frac` of epoch 2's duration into epoch 3.
        lines = wait_for_log(run / "log.jsonl", 2, proc, timeout=check.s.subprocess_timeout)
        time.sleep(frac * lines[-1]["epoch_seconds"])
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=check.s.subprocess_timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise StepFailed(f"no exit within {check.s.subprocess_timeout} s of SIGTERM: {tail(log)}")
        if code == 0:  # the run ended before the signal: try again, earlier
            attempts.append({"exit": code})
            continue
        state = torch.load(run / "checkpoint.pt", map_location="cpu", weights_only=True)
        attempts.append({"exit": code, "epoch": state["epoch"], "step": state["step"]})
        if code != REQUEUE_EXIT:
            raise StepFailed(f"SIGTERM gave exit {code}, expected {REQUEUE_EXIT}: {tail(log)}")
        if state["step"] > 0:
            break
    else:
        raise StepFailed(f"SIGTERM never landed mid-epoch in {len(attempts)} tries: {attempts}")
    if (run / "model.pt").exists():
        raise StepFailed("model.pt exists after the interrupted run")
    again = check.cli("pretrain", "--out", str(run), sets=sets, log=log)
    if again.returncode != 0:
        raise StepFailed(f"resumed run exited {again.returncode}: {tail(log)}")
    res = {"interrupted_at": attempts[-1], "attempts": len(attempts), "ref_run_seconds": round(ref_seconds, 1)}
    res.update(compare_weights(run / "model.pt", base / "ref" / "model.pt"))
    if not res["identical"]:
        # Tell a resume bug from run-to-run nondeterminism: a second uninterrupted run.
        ref2 = check.cli("pretrain", "--out", str(base / "ref2"), sets=sets, log=base / "ref2.log")
        if ref2.returncode == 0:
            res["uninterrupted_runs_identical"] = compare_weights(base / "ref2" / "model.pt",
                                                                  base / "ref" / "model.pt")["identical"]
        raise StepFailed(f"resumed weights differ from the uninterrupted run's: {res}")
    return res


def cli_end_to_end(check: Check) -> dict:
    base = check.work / "e2e"
    base.mkdir()
    run = base / "run"
    sets = check.s.e2e_sets + check.device_sets()
    t0 = time.perf_counter()
    p = check.cli("pretrain", "--out", str(run), sets=sets, log=base / "pretrain.log")
    if p.returncode != 0:
        raise StepFailed(f"pretrain exited {p.returncode}: {tail(base / 'pretrain.log')}")
    t1 = time.perf_counter()
    e = check.cli("evaluate", "--checkpoint", str(run / "model.pt"), "--out", str(run / "eval"), "--only",
                 *E2E_SECTIONS, sets=["eval.probe=fast"], log=base / "evaluate.log")
    if e.returncode != 0:
        raise StepFailed(f"evaluate exited {e.returncode}: {tail(base / 'evaluate.log')}")
    missing = [name for name in E2E_SECTIONS if not (run / "eval" / f"{name}.json").is_file()]
    if missing:
        raise StepFailed(f"evaluate exited 0 but wrote no {', '.join(f'eval/{n}.json' for n in missing)}")
    m = {}
    for name in E2E_SECTIONS:
        m.update(json.loads((run / "eval" / f"{name}.json").read_text()))
    log = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines() if line.strip()]
    return {"pretrain_seconds": round(t1 - t0, 1), "evaluate_seconds": round(time.perf_counter() - t1, 1),
            "epochs": len(log), "loss": [round(r["loss"], 4) for r in log],
            "sc": m["interpretability"].get("sc"), "probe_top1": m["linear_probe"].get("top1"),
            "cost": m["cost"], "sections": sorted(m)}
