"""Tests for bayesncl.atomic and bayesncl.report (fast; no torch)."""

from __future__ import annotations

import os
import stat

import pytest

from bayesncl.atomic import atomic_path, atomic_write_bytes, atomic_write_text


# --------------------------------------------------------------------------- atomic writes
def test_atomic_write_text_creates_parents_and_replaces(tmp_path):
    target = tmp_path / "a" / "b" / "metrics.json"
    atomic_write_text(target, "one\n")
    assert target.read_text() == "one\n"
    atomic_write_text(target, "two\n")
    assert target.read_text() == "two\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["metrics.json"]
    # Same permissions as a plain open() would give, not mkstemp's 0600.
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~mask


def test_atomic_write_bytes(tmp_path):
    target = tmp_path / "x.bin"
    atomic_write_bytes(target, b"\x00\x01")
    assert target.read_bytes() == b"\x00\x01"


def test_atomic_path_failure_leaves_no_file_and_no_temp(tmp_path):
    target = tmp_path / "out" / "table.tex"
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("partial")
            raise RuntimeError("boom")
    assert not target.exists()
    assert list(target.parent.iterdir()) == []


def test_atomic_path_failure_keeps_previous_content(tmp_path):
    target = tmp_path / "table.tex"
    target.write_text("old")
    with pytest.raises(KeyboardInterrupt):
        with atomic_path(target) as tmp:
            tmp.write_text("new")
            raise KeyboardInterrupt
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["table.tex"]


def test_atomic_path_temp_is_sibling_with_same_suffix(tmp_path):
    target = tmp_path / "vectors.npz"
    with atomic_path(target) as tmp:
        assert tmp.parent == target.parent and tmp.suffix == ".npz" and tmp != target
        assert not target.exists()  # invisible until the block succeeds
        tmp.write_bytes(b"data")
    assert target.read_bytes() == b"data"
