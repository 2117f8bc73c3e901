"""Whose run an output folder holds, and replacing it whole (no command overwrites a run it did not make).

`bayesncl pretrain` and `import` write a run folder, `evaluate` an evaluation folder, `export` an export folder.
Each first asks what the folder already holds: nothing of another run (empty, missing, or its own run: the same
config, the same imported checkpoint, the same weights), and it writes there as before (pretraining resumes, the
workflow's evaluation jobs write into their run's eval/); or another run, and it refuses in one line naming what
is there, unless given `--replace`. A replacement is written into a new folder beside the old one, which then
takes the old one's place in one rename (`renameat2(RENAME_EXCHANGE)` where the file system has it), and the old
folder is removed: nothing of it is kept, and no reader ever sees the two mixed.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Iterator

from ..core.errors import BayesNCLError, OutputError
from .files import CHECKPOINT, CONFIG, DYNAMICS, EVAL, EVENTS, FINAL, LOG

__all__ = ["EXPORT_FILES", "into", "other_evaluation", "other_export", "other_run", "replace_help", "trained_as"]

EXPORT_FILES = ("config.json", "backbone.pth", "backbone.safetensors", "heads.pth", "heads.safetensors")
TRAINING_FILES = (CONFIG, CHECKPOINT, FINAL, LOG, DYNAMICS)
# What a run, evaluation or export folder may hold beside its files: Snakemake's logs, temp files, the retry
# links of evaluate.smk, TensorBoard's event files (named by EVENTS); a folder holding anything else is not replaced
# (it is not only a run's).
_OURS_SUFFIXES = (".json", ".npz", ".log", ".pdf", ".png", ".pt", ".pth", ".safetensors", ".yaml", ".jsonl")


def replace_help(what: str) -> str:
    return (f"replace {what} in DIR if it holds another run: written beside it, then swapped in whole (nothing of "
            "the old one kept); without it such a folder is refused")


def _diff(recorded, cfg: dict) -> list[str]:
    """What differs between a recorded config and `cfg` on what was trained (not locations, not eval.*)."""
    from .files import config_diff
    from ..settings.config import RUNTIME_KEYS, as_recorded

    if not isinstance(recorded, dict):
        return [f"{json.dumps(recorded)[:40]} is no config"]
    return config_diff(as_recorded(recorded), cfg, ignore=RUNTIME_KEYS)


def _differs(diff: list[str]) -> str:
    return f"{diff[0]}{f' and {len(diff) - 1} more' if len(diff) > 1 else ''}"


def _yaml_config(path: Path):
    import yaml

    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None


def _load(path: Path) -> dict | None:
    """A checkpoint's dict, None where it is no bayesncl file."""
    from .files import load

    try:
        return load(path)
    except (BayesNCLError, OSError):
        return None


def _export_record(folder: Path) -> dict | None:
    try:
        data = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("export"), dict) else None


def _exported(folder: Path) -> str | None:
    """What export files the folder holds, in words; None where it holds none."""
    files = [f for f in EXPORT_FILES if (folder / f).exists()]
    if not files:
        return None
    record = _export_record(folder)
    if record is None:
        return f"files this command does not write and no export wrote ({', '.join(files)})"
    return f"an export of the weights {record['export'].get('weights_sha')} ({', '.join(files)})"


def trained_as(out, cfg: dict) -> bool:
    """Whether the run folder `out` records (its config.resolved.yaml) a run of `cfg`, on what was trained."""
    recorded = _yaml_config(Path(out) / CONFIG)
    return recorded is not None and not _diff(recorded, cfg)


def other_run(out, cfg: dict, imported: str | None = None) -> str | None:
    """What in the run folder `out` belongs to another run than the one a command is about to write there: the
    run config `cfg`, trained (`imported` None) or imported from the checkpoint whose SHA-256 is `imported`. None
    where it holds nothing of another run."""
    try:
        return _other_run(out, cfg, imported)
    except OSError as e:  # a folder or file this user may not read: what it holds is not known
        return f"files this user cannot read ({e.filename}: {e.strerror})"


def _other_run(out, cfg: dict, imported: str | None = None) -> str | None:
    out = Path(out)
    if not out.is_dir():
        return None
    exported = _exported(out)
    if exported:
        return exported
    present = [f for f in TRAINING_FILES if (out / f).exists()]
    states = {name: _load(out / name) for name in (CHECKPOINT, FINAL) if name in present}
    for name, state in states.items():
        if state is None or "config" not in state:
            return f"a {name} that is no bayesncl checkpoint"
    # where the weights came from: trained here, or imported from which checkpoint
    source = states.get(FINAL, {}).get("imported")
    source = source if isinstance(source, dict) else None
    if imported is None and source is not None:
        return f"weights imported from {source.get('source')} ({FINAL})"
    if imported is not None:
        trained = [f for f in (CHECKPOINT, DYNAMICS) if f in present]
        if FINAL in states and source is None:
            trained.append(f"{FINAL} trained, not imported")
        if LOG in present and (out / LOG).read_bytes().strip():
            trained.append(f"{LOG} of its epochs")
        if trained:
            return f"a trained run ({', '.join(trained)})"
        if source is not None and source.get("sha256") != imported:
            return (f"weights imported from another checkpoint ({FINAL}: {source.get('source')}, sha256 "
                    f"{str(source.get('sha256'))[:16]})")
    # what was trained: each recorded config against this one
    recorded = {CONFIG: _yaml_config(out / CONFIG)} if CONFIG in present else {}
    if CONFIG in recorded and recorded[CONFIG] is None:
        return f"a {CONFIG} that is no run config"
    recorded.update((name, state["config"]) for name, state in states.items())
    for name, config in recorded.items():
        diff = _diff(config, cfg)
        if diff:
            return f"a run of another config ({name}: {_differs(diff)})"
    if present and not recorded:
        return f"files of a run whose config is not recorded ({', '.join(present)})"
    if present and imported is None:  # trained with other plugin code: a resume would keep the old code's weights
        other = _other_code(out, cfg)
        if other:
            return other
    features = out / EVAL / "features.json"
    if features.exists():
        try:
            config = json.loads(features.read_text(encoding="utf-8")).get("config")
        except (OSError, ValueError, AttributeError):
            config = None
        if config is None or _diff(config, cfg):
            return f"the evaluation of another run ({EVAL}/features.json)"
    return None


def _other_code(out: Path, cfg: dict) -> str | None:
    """What differs between the plugin code the run in `out` recorded (runs.files.CODE) and the code `cfg` runs
    today."""
    from ..settings.registry import plugin_code
    from .files import CODE, read_code

    try:
        was = read_code(out)
    except BayesNCLError:
        return f"a {CODE} that is no record of plugin code"
    now = plugin_code(cfg)
    diff = [f"{k}: {was.get(k, 'absent')} != {now.get(k, 'absent')}" for k in sorted(set(was) | set(now))
            if was.get(k) != now.get(k)]
    return f"a run of other plugin code ({CODE}: {_differs(diff)})" if diff else None


def other_evaluation(out, checkpoint, digest: Callable[[], str]) -> str | None:
    """What in the evaluation folder `out` belongs to another run than `checkpoint`'s; `digest()` gives the
    checkpoint's weights digest (loading it: asked only where the folder is not the checkpoint's run's eval/ and a
    section file there was computed from another file), so a job that reads only the cache loads no model."""
    try:
        return _other_evaluation(out, checkpoint, digest)
    except OSError as e:  # a folder or file this user may not read: what it holds is not known
        return f"files this user cannot read ({e.filename}: {e.strerror})"


def _other_evaluation(out, checkpoint, digest: Callable[[], str]) -> str | None:
    out, checkpoint = Path(out), Path(checkpoint)
    if not out.is_dir():
        return None
    if out.resolve() == checkpoint.resolve().parent / EVAL:  # the workflow's layout: the run's own evaluation
        return None
    held = [f for f in TRAINING_FILES if (out / f).exists()]
    if held:
        return f"a run ({', '.join(held)}); its evaluation goes to {out / EVAL}"
    exported = _exported(out)
    if exported:
        return exported
    mine = None
    for path in sorted(out.glob("*.json")):
        try:
            run = json.loads(path.read_text(encoding="utf-8")).get("run")
        except (OSError, ValueError, AttributeError):
            continue
        sha = run.get("weights_sha") if isinstance(run, dict) else None
        if sha is None or _same_file(run.get("checkpoint"), checkpoint):  # of this very file: no need to load it
            continue
        mine = digest() if mine is None else mine
        if sha != mine:
            return f"the evaluation of other weights ({path.name}: weights {sha}, {checkpoint}'s {mine})"
    return None


def _same_file(recorded, checkpoint: Path) -> bool:
    try:
        return isinstance(recorded, str) and os.path.samefile(recorded, checkpoint)
    except OSError:  # gone, or a path from another folder
        return False


def other_export(out, weights_sha: str) -> str | None:
    """What in the export folder `out` is not an export of the weights `weights_sha` (a run, other weights' export,
    files no export wrote)."""
    try:
        return _other_export(out, weights_sha)
    except OSError as e:  # a folder or file this user may not read: what it holds is not known
        return f"files this user cannot read ({e.filename}: {e.strerror})"


def _other_export(out, weights_sha: str) -> str | None:
    out = Path(out)
    if not out.is_dir():
        return None
    held = [f for f in TRAINING_FILES if (out / f).exists()] + ([EVAL] if (out / EVAL).is_dir() else [])
    if held:
        return f"a run ({', '.join(held)})"
    if not any((out / f).exists() for f in EXPORT_FILES):
        return None
    record = _export_record(out)
    if record is None or record["export"].get("weights_sha") != weights_sha:
        return _exported(out)
    return None


def _check_replaceable(out: Path) -> None:
    """A folder is replaced whole only when all it holds is what a run, evaluation or export writes."""
    for entry in sorted(os.listdir(out)):
        path = out / entry
        if entry in (EVAL, ".attempt") or entry.startswith(".") \
                or path.is_file() and (entry.endswith(_OURS_SUFFIXES) or entry.startswith(EVENTS)):
            continue
        raise OutputError(f"--out {out} holds {entry}, which no bayesncl command writes; --replace removes the folder "
                          "whole, so move that out first or give another folder")


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one step (Linux renameat2 RENAME_EXCHANGE); False where the system cannot."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    return renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0


def _swap_in(new: Path, out: Path) -> None:
    """`new` takes `out`'s place; the old folder ends up at `new` (then removed)."""
    if not _exchange(new, out):  # two renames: between them `out` is missing, never mixed
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
        os.replace(out, old / out.name)
        os.replace(new, out)
        os.replace(old / out.name, new)
        old.rmdir()
    shutil.rmtree(new)


@contextlib.contextmanager
def into(out, other: str | None, replace: bool, *, stage: str | None = None,
         stage_other: Callable[[Path], str | None] | None = None) -> Iterator[Path]:
    """The folder a command writes into: `out` where `other` (what other_run / other_evaluation / other_export
    found) is None; else, with `replace`, a new folder beside it, swapped in whole when the block ends without an
    error; else OutputError naming what is there. `stage`: the new folder's fixed name, so a command stopped
    part-way (pretraining, preempted) finds it again when rerun; it is kept on an error, and cleared first where
    `stage_other` finds another run in it. Without one, a temp folder, removed on an error."""
    out = Path(out)
    if other is None:
        yield out
        return
    if not replace:
        raise OutputError(f"--out {out} holds {other}; give another folder, or add --replace to replace it whole")
    _check_replaceable(out)
    if stage is not None:
        new = out.parent / stage
        if new.is_dir() and stage_other is not None and stage_other(new) is not None:
            shutil.rmtree(new)  # an earlier replacement's, of another run
        new.mkdir(exist_ok=True)
    else:
        new = Path(tempfile.mkdtemp(prefix=f".{out.name}.replace-", dir=out.parent))
    try:
        yield new
    except BaseException:
        if stage is None:
            shutil.rmtree(new, ignore_errors=True)
        raise
    _swap_in(new, out)
