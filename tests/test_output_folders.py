"""No command overwrites a run it did not make: `bayesncl import`, `export`, `pretrain` and
`evaluate` given a folder that holds another run refuse in one line naming what is there and leave every file as it
was; their own run (a resumed pretraining, the workflow's eval/ folder, the same import or export again) is theirs
to write; with --replace the other run is replaced whole, atomically, nothing of it kept (bayesncl.runs.ownership)."""

from __future__ import annotations

import hashlib
import re
import io
import json
import os
import shutil
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
import torch

from bayesncl.runs import ownership as outdir
from bayesncl.cli.main import main
from bayesncl.core.errors import OutputError


def _sets(items):
    return sum((["--set", s] for s in items), [])


def _run(argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def _digests(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): "folder" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*"))}


def _released(model_pt: Path, path: Path) -> Path:
    """A checkpoint in the released code's layout (bayesncl.runs.released) of a model.pt's weights."""
    state = torch.load(model_pt, weights_only=True)
    sd = {f"{'gating_head' if k.startswith('gate_head.') else k.split('.')[0]}.{k.split('.', 1)[1]}": v
          for k, v in state["model"].items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"epoch": 0, "state_dict": sd}, path)
    return path


@pytest.fixture(scope="module")
def made(tmp_path_factory, tiny_sets_module):
    """Two finished runs of the tiny config (seeds 0 and 1; run a evaluated: eval/features.json), a released
    checkpoint of run b's weights, an export of run b."""
    root = tmp_path_factory.mktemp("made")
    for name, seed in (("a", 0), ("b", 1)):
        code, _, err = _run(["pretrain", "--out", str(root / name), "--quiet", "--set", f"seed={seed}",
                             *_sets(tiny_sets_module)])
        assert code == 0, err
    code, _, err = _run(["evaluate", "--checkpoint", str(root / "a" / "model.pt"), "--out", str(root / "a" / "eval"),
                         "--only", "features", "--quiet"])
    assert code == 0, err
    _released(root / "b" / "model.pt", root / "rel" / "b.ckpt")
    code, _, err = _run(["export", "--checkpoint", str(root / "b" / "model.pt"), "--format", "safetensors",
                         "--out", str(root / "exp")])
    assert code == 0, err
    return root


@pytest.fixture(scope="module")
def tiny_sets_module():
    from helpers import TINY

    return [s for s in TINY if not s.startswith("train.epochs")] + ["train.epochs=1", "method.name=ncl"]


@pytest.fixture
def runs(made, tmp_path):
    shutil.copytree(made, tmp_path / "w")
    return tmp_path / "w"


def _commands(w: Path, tiny: list[str]) -> dict[str, list[str]]:
    """Each command writing into run a's folder (a finished, evaluated run) something of another run."""
    return {
        "import": ["import", "--checkpoint", str(w / "rel" / "b.ckpt"), "--out", str(w / "a"),
                   "--set", "method.name=ncl", *_sets(t for t in tiny if t.startswith(("data.", "eval.")))],
        "export": ["export", "--checkpoint", str(w / "b" / "model.pt"), "--format", "safetensors", "--out", str(w / "a")],
        "pretrain": ["pretrain", "--out", str(w / "a"), "--quiet", "--set", "seed=1", *_sets(tiny)],
        "evaluate": ["evaluate", "--checkpoint", str(w / "b" / "model.pt"), "--out", str(w / "a"), "--only",
                     "features", "--quiet"],
        "evaluate into its eval/": ["evaluate", "--checkpoint", str(w / "b" / "model.pt"), "--out",
                                    str(w / "a" / "eval"), "--only", "features", "--quiet"],
    }


WHAT = {
    "import": "holds a trained run (checkpoint.pt, model.pt trained, not imported, log.jsonl of its epochs)",
    "export": "holds a run (config.resolved.yaml, checkpoint.pt, model.pt, log.jsonl, eval)",
    "pretrain": "holds a run of another config (config.resolved.yaml: seed: 0 != 1)",
    "evaluate": "holds a run (config.resolved.yaml, checkpoint.pt, model.pt, log.jsonl); its evaluation goes to",
    "evaluate into its eval/": "holds the evaluation of other weights (features.json: weights ",
}


@pytest.mark.parametrize("command", list(WHAT))
def test_a_finished_run_folder_is_refused_and_left_as_it_was(runs, tiny_sets_module, command):
    before = _digests(runs)
    code, out, err = _run(_commands(runs, tiny_sets_module)[command])
    assert code == 2 and out == "" and err.count("\n") == 1, err
    target = runs / "a" / ("eval" if command.endswith("eval/") else "")
    assert err.startswith(f"bayesncl {command.split()[0]}: error: --out {str(target).rstrip('/')} {WHAT[command]}")
    assert err.rstrip().endswith("; give another folder, or add --replace to replace it whole")
    assert _digests(runs) == before


@pytest.mark.parametrize("command", list(WHAT))
def test_replace_puts_the_other_run_in_its_place_whole(runs, tiny_sets_module, command):
    (runs / "a" / ".eval-features.events.partial").write_bytes(b"")  # left by a writer killed before its rename
    code, _, err = _run([*_commands(runs, tiny_sets_module)[command], "--replace"])
    assert code == 0, err
    a = runs / "a"
    left = sorted(re.sub(r"^events\.out\.tfevents\..*\.", "events.*.", p.name)  # its time and host
                  for p in (a / "eval" if command.endswith("eval/") else a).iterdir())
    assert left == {
        "import": ["config.resolved.yaml", "log.jsonl", "model.pt"],  # no checkpoint.pt, no eval/ of run a
        "export": ["backbone.safetensors", "config.json"],
        "pretrain": ["checkpoint.pt", "config.resolved.yaml", "events.*.pretrain", "log.jsonl", "model.pt"],
        "evaluate": ["features.json", "features.npz", "features_train.npz"],
        "evaluate into its eval/": ["features.json", "features.npz", "features_train.npz"],
    }[command], left
    assert sorted(p.name for p in runs.iterdir()) == ["a", "b", "exp", "rel"]  # no staging folder left
    if command == "pretrain":
        assert torch.equal(*(torch.load(r / "model.pt", weights_only=True)["model"]["projector.0.weight"]
                             for r in (a, runs / "b")))  # the same config as b: the same weights


def test_each_command_writes_its_own_run_again(runs, tiny_sets_module):
    """Pretraining a finished run again is done at once; its own eval/ is rewritten (the workflow's layout, even
    beside sections of earlier weights); the same import and the same weights' export again are theirs."""
    a, b = runs / "a", runs / "b"
    before = _digests(a)
    assert _run(["pretrain", "--out", str(a), "--quiet", *_sets(tiny_sets_module)])[0] == 0
    assert _digests(a) == before
    features = json.loads((a / "eval" / "features.json").read_text())
    features["run"]["weights_sha"] = "0" * 16  # as if run a had been trained again since
    (a / "eval" / "features.json").write_text(json.dumps(features))
    (a / "eval" / "retrieval.json").write_text(json.dumps({"run": {"weights_sha": "1" * 16}}))
    code, _, err = _run(["evaluate", "--checkpoint", str(a / "model.pt"), "--out", str(a / "eval"), "--only",
                         "features", "--quiet"])
    assert code == 0, err
    tiny = _sets(t for t in tiny_sets_module if t.startswith(("data.", "eval.")))
    imp = ["import", "--checkpoint", str(runs / "rel" / "b.ckpt"), "--out", str(runs / "imp"), "--set",
           "method.name=ncl", *tiny]
    assert _run(imp)[0] == 0 and _run(imp)[0] == 0
    exp = ["export", "--checkpoint", str(b / "model.pt"), "--out", str(runs / "exp")]
    assert _run([*exp, "--format", "safetensors", "--heads"])[0] == 0
    code, _, err = _run([*exp, "--format", "torchvision"])  # the same weights in another format: beside them
    assert code == 2 and "model.width is 4" in err  # (torchvision takes width 64 only: refused for that, not this)
    code, _, err = _run(["export", "--checkpoint", str(a / "model.pt"), "--format", "safetensors", "--out",
                         str(runs / "exp")])
    assert code == 2 and f"--out {runs / 'exp'} holds an export of the weights " in err


def test_an_import_refuses_another_checkpoint_s_import_and_another_config(runs, tiny_sets_module):
    tiny = _sets(t for t in tiny_sets_module if t.startswith(("data.", "eval.")))
    imp = ["import", "--checkpoint", str(runs / "rel" / "b.ckpt"), "--out", str(runs / "imp"), *tiny]
    assert _run([*imp, "--set", "method.name=ncl"])[0] == 0
    code, _, err = _run([*imp, "--set", "method.name=cl"])
    assert code == 2 and "holds a run of another config (config.resolved.yaml: method.name: 'ncl' != 'cl'" in err, err
    shutil.copy(runs / "rel" / "b.ckpt", runs / "rel" / "c.ckpt")
    with open(runs / "rel" / "c.ckpt", "ab") as fh:
        fh.write(b"\0")  # another file (another SHA-256), the same weights
    code, _, err = _run([*imp, "--set", "method.name=ncl", "--checkpoint", str(runs / "rel" / "c.ckpt")])
    assert code == 2 and f"holds weights imported from another checkpoint (model.pt: {runs / 'rel' / 'b.ckpt'}" in err


def test_pretrain_refuses_imported_weights_and_resumes_its_own_replacement(runs, tiny_sets_module, monkeypatch):
    from bayesncl.training import train
    from bayesncl.training.train import Preempted

    tiny = _sets(t for t in tiny_sets_module if t.startswith(("data.", "eval.")))
    assert _run(["import", "--checkpoint", str(runs / "rel" / "b.ckpt"), "--out", str(runs / "imp"), "--set",
                 "method.name=ncl", *tiny])[0] == 0
    code, _, err = _run(["pretrain", "--out", str(runs / "imp"), "--quiet", *_sets(tiny_sets_module)])
    assert code == 2 and f"holds weights imported from {runs / 'rel' / 'b.ckpt'} (model.pt)" in err, err
    # --replace stopped part-way (SIGTERM): the old run stays whole; the rerun resumes in the same staging folder
    real, seen = train._pretrain, []

    def stopped(cfg, where, progress):
        (Path(where) / "partial.log").write_text("stopped at epoch 0")
        seen.append(where)
        raise Preempted("stopped")

    monkeypatch.setattr(train, "_pretrain", stopped)
    before = _digests(runs / "a")
    argv = ["pretrain", "--out", str(runs / "a"), "--quiet", "--set", "seed=1", *_sets(tiny_sets_module), "--replace"]
    assert _run(argv)[0] == 75 and _digests(runs / "a") == before
    assert seen[0] == runs / ".a.replacing" and (runs / ".a.replacing" / "partial.log").exists()

    def resumed(cfg, where, progress):
        assert Path(where) == seen[0] and (Path(where) / "partial.log").exists()
        (Path(where) / "partial.log").unlink()
        return real(cfg, where, progress)

    monkeypatch.setattr(train, "_pretrain", resumed)
    assert _run(argv)[0] == 0
    assert not (runs / ".a.replacing").exists() and not (runs / "a" / "eval").exists()
    assert torch.load(runs / "a" / "model.pt", weights_only=True)["config"]["seed"] == 1


def test_replace_refuses_a_folder_holding_what_no_command_writes(runs, tiny_sets_module):
    (runs / "a" / "notes.txt").write_text("mine")
    before = _digests(runs)
    code, _, err = _run([*_commands(runs, tiny_sets_module)["export"], "--replace"])
    assert code == 2 and err.count("\n") == 1
    assert f"--out {runs / 'a'} holds notes.txt, which no bayesncl command writes; --replace removes the folder" in err
    assert _digests(runs) == before


def test_a_replacement_that_fails_leaves_the_old_folder_whole(tmp_path):
    old = tmp_path / "run"
    old.mkdir()
    (old / "model.pt").write_bytes(b"old")
    with pytest.raises(RuntimeError):
        with outdir.into(old, "another run", True) as new:
            (new / "model.pt").write_bytes(b"new")
            raise RuntimeError("stopped")
    assert os.listdir(tmp_path) == ["run"] and (old / "model.pt").read_bytes() == b"old"
    with outdir.into(old, "another run", True) as new:
        assert new.parent == tmp_path and new != old
        (new / "model.pt").write_bytes(b"new")
    assert os.listdir(tmp_path) == ["run"] and os.listdir(old) == ["model.pt"] and (old / "model.pt").read_bytes() == b"new"


def test_the_swap_is_one_exchange_where_the_system_has_it(tmp_path, monkeypatch):
    """renameat2(RENAME_EXCHANGE): no moment without the folder; elsewhere two renames, never a mix."""
    a, b = tmp_path / "a", tmp_path / "b"
    for d, f in ((a, "x"), (b, "y")):
        d.mkdir()
        (d / f).write_text(f)
    assert outdir._exchange(a, b) and os.listdir(a) == ["y"] and os.listdir(b) == ["x"]
    monkeypatch.chdir(tmp_path)
    assert outdir._exchange(Path("a"), Path("b")) and os.listdir(a) == ["x"]  # relative to this folder
    monkeypatch.setattr(outdir, "_exchange", lambda x, y: False)
    outdir._swap_in(a, b)  # a's content takes b's place; b's old content is removed
    assert os.listdir(tmp_path) == ["b"] and os.listdir(b) == ["x"]


def test_what_another_run_is(tmp_path):
    """other_run's cases, each in words."""
    from bayesncl.settings.config import resolve

    cfg = resolve(sets=["model.width=4", "seed=0"])
    d = tmp_path / "r"
    assert outdir.other_run(tmp_path / "missing", cfg) is None
    d.mkdir()
    assert outdir.other_run(d, cfg) is None
    (d / "pretrain.log").write_text("the job's log\n")
    assert outdir.other_run(d, cfg) is None  # a log of Snakemake's is no run
    (d / "config.resolved.yaml").write_text("seed: [\n")
    assert outdir.other_run(d, cfg) == "a config.resolved.yaml that is no run config"
    import yaml

    (d / "config.resolved.yaml").write_text(yaml.safe_dump({**cfg, "train": {**cfg["train"], "device": "cuda"}}))
    assert outdir.other_run(d, cfg) is None  # where it runs is no part of what it is
    (d / "log.jsonl").write_text('{"loss": 1}\n')
    assert outdir.other_run(d, cfg) is None
    assert outdir.other_run(d, cfg, imported="abc") == "a trained run (log.jsonl of its epochs)"
    (d / "model.pt").write_bytes(b"not torch")
    assert outdir.other_run(d, cfg) == "a model.pt that is no bayesncl checkpoint"
    (d / "model.pt").unlink()
    (d / "config.resolved.yaml").unlink()
    assert outdir.other_run(d, cfg) == "files of a run whose config is not recorded (log.jsonl)"
    (d / "config.json").write_text("{}")
    assert outdir.other_run(d, cfg) == "files this command does not write and no export wrote (config.json)"
    (d / "backbone.pth").write_bytes(b"x")
    assert outdir.other_run(d, cfg) == ("files this command does not write and no export wrote (config.json, "
                                        "backbone.pth)")
    e = tmp_path / "e"
    e.mkdir()
    (e / "heads.pth").write_bytes(b"x")
    assert outdir.other_export(e, "abc") == "files this command does not write and no export wrote (heads.pth)"
    with pytest.raises(OutputError, match="holds x; give another folder, or add --replace"):
        with outdir.into(d, "x", False):
            pass


def test_an_export_folder_is_replaced_by_an_import_and_an_evaluation_folder_of_its_own_is_written_again(
        runs, tiny_sets_module, capsys):
    tiny = _sets(t for t in tiny_sets_module if t.startswith(("data.", "eval.")))
    code, _, err = _run(["import", "--checkpoint", str(runs / "rel" / "b.ckpt"), "--out", str(runs / "exp"), "--set",
                         "method.name=ncl", *tiny, "--replace"])  # a folder of backbone.safetensors and config.json
    assert code == 0, err
    assert sorted(os.listdir(runs / "exp")) == ["config.resolved.yaml", "log.jsonl", "model.pt"]
    ev = ["evaluate", "--checkpoint", str(runs / "b" / "model.pt"), "--out", str(runs / "b-eval"), "--only",
          "features", "--quiet"]
    assert _run(ev)[0] == 0
    code, _, err = _run(ev)  # not its run's eval/, but its sections name this file: they are its own
    assert code == 0, err
    shutil.copytree(runs / "b", runs / "b2")  # another file, the same weights: read and compared
    code, _, err = _run([*ev[:2], str(runs / "b2" / "model.pt"), *ev[3:]])
    assert code == 0, err
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["import", "--help"])
    assert ("--replace replace the run in DIR if it holds another run: written beside it, then swapped in whole "
            "(nothing of the old one kept); without it such a folder is refused") in " ".join(capsys.readouterr().out.split())
