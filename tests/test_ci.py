""".ci/run ends only the fork servers it started: those whose socket lies in its own folder
(.ci/end-forkservers), never another workflow's of the same user; every test marker is one that a run selects."""

import os
import re
import signal
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="reads /proc")


def _fake_server(socket_path: str) -> subprocess.Popen:
    """A process whose argv is a fork server's (python ... -m bayesncl.cli.forkserver SOCKET); it only sleeps."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "-m", "bayesncl.cli.forkserver",
                             socket_path], start_new_session=True)


def _gone(proc: subprocess.Popen) -> bool:
    try:
        proc.wait(timeout=120)
        return True
    except subprocess.TimeoutExpired:
        return False


def test_ci_ends_its_own_fork_servers_only():
    ours, theirs = tempfile.mkdtemp(prefix="bci-", dir="/tmp"), tempfile.mkdtemp(prefix="bci-", dir="/tmp")
    mine = _fake_server(os.path.join(ours, "bayesncl-1-x.sock"))
    other = _fake_server(os.path.join(theirs, "bayesncl-1-x.sock"))  # another workflow's server
    nested = _fake_server(os.path.join(ours + "-more", "s.sock"))  # a folder whose name only starts the same
    try:
        r = subprocess.run([str(ROOT / ".ci" / "end-forkservers"), ours], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0, r.stderr
        assert _gone(mine) and mine.returncode == -signal.SIGTERM
        assert other.poll() is None and nested.poll() is None  # left running
        assert not Path(ours).exists() and Path(theirs).is_dir()
    finally:
        for p in (mine, other, nested):
            if p.poll() is None:
                p.kill()
                p.wait()
        os.rmdir(theirs)


def test_ci_run_gives_its_servers_their_own_folder():
    text = (ROOT / ".ci" / "run").read_text()
    assert "pkill" not in text  # a name match ends every workflow's servers
    trap = next(line for line in text.splitlines() if line.startswith("trap "))
    assert ".ci/end-forkservers" in trap and "BAYESNCL_FORKSERVER_DIR" in trap
    assert text.index("export BAYESNCL_FORKSERVER_DIR") < text.index("pytest")


def test_every_marker_is_one_a_run_selects():
    """The default run leaves out each registered marker and one of CI's later runs selects it; an unregistered
    marker is an error (--strict-markers), so none is decoration."""
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    names = {m.split(":")[0] for m in cfg["markers"]}
    assert names and "--strict-markers" in cfg["addopts"].split()
    default = re.search(r"-m '([^']*)'", cfg["addopts"]).group(1)
    later = [a or b for a, b in re.findall(r"pytest -m (?:'([^']*)'|(\w+))", (ROOT / ".ci" / "run").read_text())]
    for name in names:
        assert f"not {name}" in default, name
        assert any(re.search(rf"\b{name}\b", sel) and f"not {name}" not in sel for sel in later), name
