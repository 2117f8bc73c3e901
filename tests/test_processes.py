"""The tests' process owner (tests/helpers/processes.py, conftest.py's `procs`): what a test starts is gone when
the test ends, passed, failed or timed out, and nothing a test starts outlives the run."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import processes

HERE = Path(__file__).resolve().parent
# A child that leaves a grandchild in a process group of its own (a script's `set -m` job) and waits.
SPAWN = "set -m; sleep 600 & echo $!; sleep 600 & wait"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_end_kills_every_process_of_the_sessions_it_started():
    owner = processes.Processes()
    proc = owner.popen(["bash", "-c", SPAWN], stdout=subprocess.PIPE, text=True)
    grandchild = int(proc.stdout.readline())
    assert os.getpgid(grandchild) != proc.pid and os.getsid(grandchild) == proc.pid  # its own group, our session
    assert grandchild in processes.session_members(proc.pid)
    owner.end()
    assert not _alive(proc.pid) and not _alive(grandchild) and processes.session_members(proc.pid) == []


def test_a_run_past_its_limit_leaves_nothing_of_its_session():
    owner = processes.Processes()
    with pytest.raises(subprocess.TimeoutExpired):
        owner.run(["bash", "-c", SPAWN], timeout=1, capture_output=True, text=True)
    (proc,) = owner.popens
    assert processes.session_members(proc.pid) == []


@pytest.mark.parametrize("outcome", ["passes", "fails"])
def test_what_a_test_starts_is_gone_when_it_ends(tmp_path, outcome):
    """A test run in a pytest of its own, with this suite's conftest.py: the processes its test started (through
    `procs` and through a helper's `current()`) are gone when it ends, whether it passed or failed."""
    shutil.copy(HERE / "conftest.py", tmp_path / "conftest.py")
    shutil.copytree(HERE / "helpers", tmp_path / "helpers", ignore=shutil.ignore_patterns("__pycache__"))
    pids = tmp_path / "pids"
    (tmp_path / "test_inner.py").write_text(f'''
import subprocess
from helpers.processes import current

def test_inner(procs):
    a = procs.popen(["bash", "-c", {SPAWN!r}], stdout=subprocess.PIPE, text=True)
    b = current().popen(["sleep", "600"])
    with open({str(pids)!r}, "w") as fh:
        fh.write(f"{{a.pid}} {{a.stdout.readline().strip()}} {{b.pid}}")
    assert {outcome == "passes"!r}
''')
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_inner.py"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=processes.PATIENCE,
                       env=dict(os.environ, PYTHONPATH=str(tmp_path)))
    assert r.returncode == (0 if outcome == "passes" else 1), r.stdout[-2000:]
    started = [int(p) for p in pids.read_text().split()]
    assert len(started) == 3 and not any(_alive(p) for p in started), started
