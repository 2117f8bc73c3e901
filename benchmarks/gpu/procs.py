"""Helpers around subprocesses and files: which tests need CUDA, pytest's JUnit counts, a training log that
grows, two checkpoints' weights compared, one `pretrain` in process."""

from __future__ import annotations

import json
import re
import subprocess
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import torch

from .common import StepFailed

def cuda_test_ids(tests: Path) -> list[str]:
    """Node ids of the tests that skip without CUDA: functions under a skipif naming cuda, or whole files
    with such a module-level pytestmark."""
    deco = re.compile(r"@pytest\.mark\.skipif\([^\n]*cuda[^\n]*\n(?:[ \t]*@[^\n]*\n)*[ \t]*def (test_\w+)")
    ids = []
    for path in sorted(tests.glob("test_*.py")):
        text = path.read_text()
        rel = path.relative_to(tests.parent).as_posix()
        if re.search(r"^pytestmark\s*=.*skipif\([^\n]*cuda", text, re.M):
            ids.append(rel)
            continue
        ids += [f"{rel}::{name}" for name in deco.findall(text)]
    return ids


def junit_counts(xml: Path) -> dict:
    root = ET.parse(xml).getroot()
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    c = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    c["passed"] = c["tests"] - c["failures"] - c["errors"] - c["skipped"]
    return c


def wait_for_log(path: Path, epochs: int, proc: subprocess.Popen, timeout: float) -> list[dict]:
    """Poll a training log.jsonl (written atomically) until it has `epochs` lines."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        if path.exists():
            lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            if len(lines) >= epochs:
                return lines
        if proc.poll() is not None:
            raise StepFailed(f"training exited ({proc.returncode}) before epoch {epochs} was logged")
        time.sleep(0.005)
    proc.kill()
    raise StepFailed(f"epoch {epochs} was not logged within {timeout:.0f} s")


def compare_weights(a: Path, b: Path) -> dict:
    sa = torch.load(a, map_location="cpu", weights_only=True)["model"]
    sb = torch.load(b, map_location="cpu", weights_only=True)["model"]
    if sa.keys() != sb.keys():
        return {"identical": False, "max_abs_diff": None, "differing_tensors": sorted(set(sa) ^ set(sb))}
    diff = [k for k in sa if not torch.equal(sa[k], sb[k])]
    mx = max((float((sa[k].double() - sb[k].double()).abs().max()) for k in diff), default=0.0)
    return {"identical": not diff, "max_abs_diff": mx, "differing_tensors": len(diff), "tensors": len(sa)}


def run_pretrain(pretrain, cfg: dict, out: Path) -> list[dict]:
    pretrain(cfg, out, progress=False)
    return [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines() if line.strip()]
