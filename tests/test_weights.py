"""Weights in and out (bayesncl.weights): a checkpoint in the released code's layout, written here from a model of
this package, imported and evaluated gives the numbers of the original model.pt; an exported backbone loads with
strict=True into torchvision's and timm's ResNets and computes the same features."""

from __future__ import annotations

import json
import math
import re
import sys
import types
from collections import OrderedDict
from pathlib import Path

import pytest
import torch
import yaml

from bayesncl import checkpoint as ckpt_io
from bayesncl import config as C
from bayesncl.cli import main
from bayesncl.errors import CheckpointError
from bayesncl.evaluation.runner import evaluate
from bayesncl.methods import build_method
from bayesncl.registry import METHODS
from bayesncl.train import pretrain
from bayesncl.weights import released
from bayesncl.weights.export import BUILD, export

RELEASED_GATES = {v: k for k, v in released.GATES.items()}


# ------------------------------------------------------------------------------ the released layout, written here
def released_state(model_state: dict, classes: int = 10) -> OrderedDict:
    """Our state dict under the released code's names (BaseMethod: backbone, classifier; SimCLR: projector,
    gating_head), the online classifier included as the released checkpoints hold it."""
    out = OrderedDict()
    for k, v in model_state.items():
        prefix, _, rest = k.partition(".")
        out[f"{'gating_head' if prefix == 'gate_head' else prefix}.{rest}"] = v.clone()
    feats = model_state["projector.0.weight"].shape[1]
    out["classifier.weight"], out["classifier.bias"] = torch.randn(classes, feats), torch.zeros(classes)
    return out


def released_args(cfg: dict) -> dict:
    """The released run's cfg (solo-learn's args.json) for one of our run configs."""
    spec, m, mc = METHODS[cfg["method"]["name"]], cfg["model"], cfg["method"]
    mk = {"proj_hidden_dim": m["proj_hidden"], "proj_output_dim": m["proj_dim"], "temperature": mc["temperature"],
          "non_neg": mc["nonneg"] if spec.nonnegative else None, "use_bayes": spec.gated, "use_topk": spec.masked,
          "topk_k": mc["topk_k"] or 0, "gate_type": RELEASED_GATES.get(mc["gate"], "STE"),
          "bayesian_prior_prob": mc["rho"], "bayesian_kl_lambda": mc["lambda"], "sigmoid_temperature": mc["tau_g"],
          "gate_threshold": 0.5}
    return {"name": "released", "method": "simclr", "backbone": {"name": m["arch"], "kwargs": {}},
            "data": {"dataset": "cifar100", "num_classes": 10}, "optimizer": {"name": "lars", "lr": 0.4,
                                                                               "gating_head_lr": mc["head_lr"]},
            "method_kwargs": mk, "max_epochs": 2, "seed": cfg["seed"]}


def lightning_checkpoint(state: OrderedDict, **extra) -> dict:
    """The dict Lightning's Trainer.save_checkpoint writes (no hyper_parameters: the released BaseMethod never
    calls save_hyperparameters; solo-learn's Checkpointer writes args.json beside the file instead)."""
    return {"epoch": 1, "global_step": 16, "pytorch-lightning_version": "2.0.2", "state_dict": state,
            "loops": {"fit_loop": {"state_dict": {}, "epoch_progress": {"current": {"completed": 2}}}},
            "callbacks": {"Checkpointer": {}}, "optimizer_states": [{"state": {}, "param_groups": []}],
            "lr_schedulers": [{"last_epoch": 16}], **extra}


def write_released(model_pt: Path, where: Path, args: bool = True) -> Path:
    state = ckpt_io.load(model_pt)
    where.mkdir(parents=True, exist_ok=True)
    path = where / "released-ep=1.ckpt"
    torch.save(lightning_checkpoint(released_state(state["model"])), path)
    if args:
        (where / "args.json").write_text(json.dumps(released_args(state["config"])))
    return path


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from conftest import TINY

    out = tmp_path_factory.mktemp("run")
    cfg = C.resolve(sets=TINY + ["method.name=bayesncl", "method.gate=gumbel", "method.rho=0.7",
                                 "method.lambda=1.0e-3", "method.nonneg=relu"])
    pretrain(cfg, out, progress=False)
    return out, cfg


def _numbers(a, b, where=""):
    """Every number of two evaluation records, side by side (recursing through dicts and lists)."""
    if isinstance(a, dict):
        assert set(a) == set(b), where
        for k in a:
            yield from _numbers(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            yield from _numbers(x, y, f"{where}[{i}]")
    elif isinstance(a, (int, float)) and not isinstance(a, bool):
        assert isinstance(b, (int, float)), f"{where}: {a!r} != {b!r}"
        yield where, a, b
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


# What an imported run cannot share with the run it came from: where its files are, its training log (it was
# trained elsewhere: no epochs here), the training time of the cost section (read from that log).
NOT_COMPARED = {"checkpoint", "training", "config", "imported", "train_minutes", "sec_per_epoch", "img_per_s",
                "peak_mem_mb", "compile_seconds"}


def _comparable(record):
    if isinstance(record, dict):
        return {k: _comparable(v) for k, v in record.items() if k not in NOT_COMPARED}
    if isinstance(record, list):
        return [_comparable(v) for v in record]
    return record


def test_a_released_checkpoint_imports_to_the_same_model_and_every_section_gives_the_same_numbers(trained, tmp_path):
    run, cfg = trained
    ckpt = write_released(run / "model.pt", tmp_path / "released")
    from conftest import TINY

    settings = [a for s in TINY if not s.startswith("model.") for a in ("--set", s)]  # data, train, eval
    assert main(["import", "--checkpoint", str(ckpt), "--out", str(tmp_path / "imported"), *settings]) == 0
    model_pt = tmp_path / "imported" / "model.pt"
    state = ckpt_io.load(model_pt)
    got = state["config"]
    # every model and method setting the released run fixed came over from its args.json and shapes
    assert got["model"] == cfg["model"]
    assert got["method"] == cfg["method"]
    assert state["imported"]["sha256"] == released.sha256_file(ckpt)
    assert any("classifier" in f for f in state["imported"]["flags"])
    assert ckpt_io.weights_digest(state["model"]) == ckpt_io.weights_digest(ckpt_io.load(run / "model.pt")["model"])
    assert yaml.safe_load((tmp_path / "imported" / "config.resolved.yaml").read_text()) == got

    a = evaluate(run / "model.pt", tmp_path / "eval_a", progress=False)
    b = evaluate(model_pt, tmp_path / "eval_b", progress=False)
    assert [p.name for p in a] == [p.name for p in b] and len(a) >= 5
    for pa, pb in zip(a, b):
        ra, rb = json.loads(pa.read_text()), json.loads(pb.read_text())
        n = 0
        for where, x, y in _numbers(_comparable(ra), _comparable(rb), pa.stem):
            n += 1
            assert (math.isnan(x) and math.isnan(y)) or math.isclose(x, y, rel_tol=1e-5, abs_tol=1e-6), where
        assert n > 0, pa.name
    rec = json.loads((tmp_path / "eval_b" / "features.json").read_text())
    assert rec["run"]["imported"]["sha256"] == released.sha256_file(ckpt)


def test_without_hyper_parameters_the_keys_give_the_model_and_the_rest_is_flagged(trained, tmp_path):
    run, cfg = trained
    ckpt = write_released(run / "model.pt", tmp_path, args=False)
    imp = released.import_checkpoint(ckpt)
    assert imp.config["model"] == cfg["model"]
    assert METHODS[imp.config["method"]["name"]].gated
    assert imp.config["method"]["head_depth"] == cfg["method"]["head_depth"]
    assert any("no hyper-parameters" in f for f in imp.flags)
    assert any(f.startswith("model.stem") for f in imp.flags)  # the CIFAR stem's padding differs


def test_lightning_s_attribute_dict_is_read_without_lightning_and_other_objects_are_refused(trained, tmp_path):
    run, cfg = trained
    state = released_state(ckpt_io.load(run / "model.pt")["model"])
    # A stand-in for Lightning's AttributeDict, pickled under its real name; Lightning is never imported.
    name = "pytorch_lightning.utilities.parsing"
    fake = types.ModuleType(name)

    class AttributeDict(dict):
        pass

    AttributeDict.__module__, AttributeDict.__qualname__ = name, "AttributeDict"
    fake.AttributeDict = AttributeDict
    parents = {p: sys.modules.get(p) for p in ("pytorch_lightning", "pytorch_lightning.utilities", name)}
    for p in parents:
        sys.modules[p] = fake
    try:
        hp = AttributeDict(cfg=AttributeDict(released_args(cfg)))
        torch.save(lightning_checkpoint(state, hyper_parameters=hp), tmp_path / "hp.ckpt")

        class Other:
            pass

        Other.__module__, Other.__qualname__ = name, "Other"
        fake.Other = Other
        torch.save(lightning_checkpoint(state, hyper_parameters={"x": Other()}), tmp_path / "obj.ckpt")
    finally:
        for p, m in parents.items():
            if m is None:
                sys.modules.pop(p, None)
            else:
                sys.modules[p] = m
    imp = released.import_checkpoint(tmp_path / "hp.ckpt")
    assert imp.config["method"] == cfg["method"]
    assert not any("no hyper-parameters" in f for f in imp.flags)
    with pytest.raises(CheckpointError, match=r"pickles Python objects .*Other"):
        released.read(tmp_path / "obj.ckpt")


@pytest.mark.parametrize("gate,ours", [("STE", "ste"), ("gumbel_sigmoid", "gumbel")])
def test_the_released_hyper_parameters_map_to_this_package_s(trained, tmp_path, gate, ours):
    run, cfg = trained
    ckpt = write_released(run / "model.pt", tmp_path)
    args = json.loads((tmp_path / "args.json").read_text())
    args["method_kwargs"].update(gate_type=gate, bayesian_prior_prob=0.55, bayesian_kl_lambda=0.02,
                                 sigmoid_temperature=0.0, temperature=0.3)
    (tmp_path / "args.json").write_text(json.dumps(args))
    imp = released.import_checkpoint(ckpt)
    mc = imp.config["method"]
    assert (mc["gate"], mc["rho"], mc["lambda"], mc["temperature"]) == (ours, 0.55, 0.02, 0.3)
    assert mc["tau_g"] == C.DEFAULTS["method"]["tau_g"]  # the released 0.0 is no temperature: flagged
    assert any(f.startswith("method.tau_g") for f in imp.flags)
    assert any("cifar100" in f for f in imp.flags)  # trained on another dataset than evaluated on


def test_a_set_that_contradicts_the_shapes_is_refused(trained, tmp_path):
    run, _ = trained
    ckpt = write_released(run / "model.pt", tmp_path)
    with pytest.raises(CheckpointError, match="model.proj_dim"):
        released.import_checkpoint(ckpt, sets=["model.proj_dim=8"])


# ------------------------------------------------------------------------------------------------ export
def _model_pt(tmp_path: Path, arch: str, stem: str) -> tuple[Path, torch.nn.Module]:
    cfg = C.resolve(sets=[f"model.arch={arch}", f"model.stem={stem}", "model.width=64", "model.proj_hidden=32",
                          "model.proj_dim=16", "method.name=bayesncl"])
    torch.manual_seed(0)
    model = build_method(cfg)
    for m in model.modules():  # running statistics other than the initial ones: eval mode must use them
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.normal_(0, 0.1)
            m.running_var.uniform_(0.5, 2.0)
            m.bias.data.normal_(0, 0.1)
    path = tmp_path / "model.pt"
    ckpt_io.save({"config": cfg, "model": model.state_dict()}, path)
    return path, model.eval()


def _build(lib: str, arch: str, stem: str) -> torch.nn.Module:
    """The network as config.json's `build` line says (the documented recipe), run as written."""
    timm = pytest.importorskip("timm") if lib == "timm" else None
    import torchvision

    scope = {"torch": torch, "torchvision": torchvision, "timm": timm}
    exec(BUILD[lib, stem].format(arch=arch), scope)
    return scope["m"]


@pytest.mark.parametrize("fmt,lib,arch,stem", [
    ("torchvision", "torchvision", "resnet18", "cifar"),
    ("torchvision", "torchvision", "resnet50", "imagenet"),
    ("timm", "timm", "resnet18", "imagenet"),
    ("timm", "timm", "resnet50", "cifar"),
    ("safetensors", "torchvision", "resnet18", "imagenet"),
    ("safetensors", "timm", "resnet18", "cifar"),
])
def test_an_exported_backbone_loads_strictly_and_gives_the_same_features(tmp_path, fmt, lib, arch, stem):
    if fmt == "safetensors":
        pytest.importorskip("safetensors")
    path, model = _model_pt(tmp_path, arch, stem)
    assert main(["export", "--checkpoint", str(path), "--format", fmt, "--out", str(tmp_path / "x"), "--heads"]) == 0
    info = json.loads((tmp_path / "x" / "config.json").read_text())
    assert info["config"] == ckpt_io.load(path)["config"]
    assert info["export"]["build"][lib] == BUILD[lib, stem].format(arch=arch)
    if fmt == "safetensors":
        from safetensors.torch import load_file

        weights = load_file(tmp_path / "x" / info["export"]["backbone"])
        heads = load_file(tmp_path / "x" / info["export"]["heads"])
    else:
        weights = torch.load(tmp_path / "x" / info["export"]["backbone"], weights_only=True)
        heads = torch.load(tmp_path / "x" / info["export"]["heads"], weights_only=True)
    net = _build(lib, arch, stem)
    net.load_state_dict(weights, strict=True)
    net.eval()
    size = 32 if stem == "cifar" else 64
    x = torch.randn(3, 3, size, size, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ours, theirs = model.backbone(x), net(x)
    assert ours.shape == theirs.shape
    torch.testing.assert_close(theirs, ours, rtol=1e-5, atol=1e-5)
    # the heads beside it are the model's own (projector and gating head)
    assert set(heads) == {k for k in model.state_dict() if not k.startswith("backbone.")}
    for k, v in heads.items():
        assert torch.equal(v, model.state_dict()[k])


def test_an_export_of_an_other_width_is_safetensors_only(tmp_path):
    cfg = C.resolve(sets=["model.width=4", "model.proj_hidden=8", "model.proj_dim=8"])
    ckpt_io.save({"config": cfg, "model": build_method(cfg).state_dict()}, tmp_path / "model.pt")
    with pytest.raises(CheckpointError, match="model.width is 4"):
        export(tmp_path / "model.pt", tmp_path / "x", "timm")
    assert not (tmp_path / "x").exists()


# ------------------------------------------------------------------------------------------- in the workflow
ROOT = Path(__file__).resolve().parents[1]


def _grid_with_import(tmp_path: Path, model_pt: Path, sets=("table1", "table2")) -> dict:
    """config/tiny.yaml cut to two tables, with one released checkpoint (written from `model_pt`) imported."""
    wf = yaml.safe_load((ROOT / "config" / "tiny.yaml").read_text())
    keep = ["NCL", "BayesNCL (STE)"]
    wf["variants"] = {k: wf["variants"][k] for k in keep}
    wf["sets"] = {s: {"variants": keep} for s in sets}
    ckpt = write_released(model_pt, tmp_path / "released")
    wf["imported"] = [{"checkpoint": str(ckpt), "args": str(ckpt.parent / "args.json"), "name": "BayesNCL (released)",
                       "dataset": "synthetic", "sets": list(sets)}]
    wf["results"] = str(tmp_path / "results")
    return wf


def test_an_imported_checkpoint_is_a_run_of_the_grid_that_is_never_trained(trained, tmp_path):
    from bayesncl.errors import ConfigError
    from bayesncl.grid import expand_grid, trigger_config

    run, cfg = trained
    wf = _grid_with_import(tmp_path, run / "model.pt")
    runs = expand_grid(wf)
    (imp,) = [r for r in runs.values() if r.imported]
    assert imp.variant == "BayesNCL (released)" and imp.sets == ["table1", "table2"]
    assert imp.run_id == f"synthetic/{cfg['method']['name']}/imported~BayesNCL_released/seed~0"
    assert imp.imported["sha256"] == released.sha256_file(wf["imported"][0]["checkpoint"])
    assert imp.config["model"] == cfg["model"] and imp.config["method"] == cfg["method"]
    assert imp.config["data"] == C.resolve(base={"data": yaml.safe_load(
        (ROOT / "config" / "tiny.yaml").read_text())["defaults"]["data"]})["data"]  # the grid's data settings
    assert trigger_config(imp.config, "evaluate")["eval"]["probe"] == "fast"
    assert len([r for r in runs.values() if not r.imported and not r.init_of]) == 2  # the grid's own two
    assert not any(r.init_of and r.imported for r in runs.values())  # imported weights get no untrained twin
    from bayesncl.grid import variant_names
    from bayesncl.report.claims import parse_claims

    claim = {"metric": "sc", "left": "BayesNCL (released)", "right": "NCL", "relation": ">"}
    assert parse_claims([claim], variant_names(wf))  # a workflow claim may name the imported weights
    with pytest.raises(ConfigError, match="no variant 'BayesNCL"):
        parse_claims([claim], list(wf["variants"]))
    for edit, phrase in ((lambda e: e.update(dataset="cifar10"), "imported[0].dataset: unknown dataset"),
                         (lambda e: e.update(name="NCL"), "imported[0].name: 'NCL' is a variant of the grid"),
                         (lambda e: e.update(sets=["table9"]), "imported[0].sets: unknown set 'table9'"),
                         (lambda e: e.update(overrides={"model": {"proj_dim": 3}}), "imported[0]: model.proj_dim=3")):
        bad = yaml.safe_load(yaml.safe_dump(wf))
        edit(bad["imported"][0])
        with pytest.raises(ConfigError, match=re.escape(phrase)):
            expand_grid(bad)


@pytest.mark.grid
def test_the_tiny_grid_with_an_imported_checkpoint_evaluates_and_reports_it(trained, tmp_path):
    import shutil
    import subprocess

    import pandas as pd

    exe = shutil.which("snakemake")
    if exe is None:
        pytest.skip("snakemake not installed (pip install -e '.[workflow]')")
    run, cfg = trained
    wf = _grid_with_import(tmp_path, run / "model.pt")
    (tmp_path / "grid.yaml").write_text(yaml.safe_dump(wf, sort_keys=False))
    out = Path(wf["results"])
    env = dict(__import__("os").environ, PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1")
    targets = [str(out / "tables" / f"{t}.md") for t in ("table1", "table2")]
    r = subprocess.run([exe, "--cores", "2", *targets, "--configfile", str(tmp_path / "grid.yaml")], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, (r.stdout + r.stderr)[-5000:]
    runs = pd.read_csv(out / "summary" / "runs.csv")
    imp = runs[runs["variant"] == "BayesNCL (released)"]
    sha = released.sha256_file(wf["imported"][0]["checkpoint"])
    assert len(imp) == 1 and imp["imported"].iloc[0] == sha and imp["sc"].notna().all()
    assert imp["stale"].isna().all()  # the job imported it with the config the grid gives it
    assert (runs[runs["variant"] != "BayesNCL (released)"]["imported"].isna()).all()
    rid = imp["run_id"].iloc[0]
    assert not (out / "runs" / rid / "checkpoint.pt").exists()  # imported, never trained
    assert "imported" in (out / "runs" / rid / "import.log").read_text()  # made by rule import_weights
    for t in ("table1", "table2"):
        md = (out / "tables" / f"{t}.md").read_text()
        assert "BayesNCL (released) (imported)" in md and sha[:16] in md, t
    rec = json.loads((out / "runs" / rid / "eval" / "features.json").read_text())
    assert rec["run"]["imported"]["sha256"] == sha
    again = subprocess.run([exe, "-n", "--cores", "2", *targets, "--configfile", str(tmp_path / "grid.yaml")],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr


def test_rows_of_imported_weights_say_so_and_the_caption_names_the_file_and_its_hash():
    import pandas as pd

    from bayesncl.report import provenance, summary, tables

    sha = "ab" * 32
    rows = [{"run_id": f"synthetic/x/seed~{s}", "dataset": "synthetic", "arch": "resnet18", "method": m,
             "variant": v, "sets": "table1", "seed": s, "sc": 10.0 + s, "imported": imp, "imported_from": frm}
            for s in (0, 1) for m, v, imp, frm in (("ncl", "NCL", "", ""),
                                                    ("bayesncl", "BayesNCL (released)", sha, "r/x.ckpt"))]
    df = summary.prepare(pd.DataFrame(rows))
    for kind in ("md", "tex"):
        text = tables.render_table(df, "table1", kind)
        labels = [line.strip("| ").split(" & ")[0].split(" |")[0].strip() for line in text.splitlines()]
        assert "BayesNCL (released) (imported)" in labels and "NCL" in labels, (kind, labels)
        assert f"r/x.ckpt (sha256 {sha[:16]})" in text.replace("\\_", "_"), kind
    plain = summary.prepare(pd.DataFrame([r for r in rows if not r["imported"]]))
    assert "imported" not in tables.render_table(plain, "table1", "md").lower()
    assert provenance.imported_runs(df) == [
        {"run_id": "synthetic/x/seed~0", "variant": "BayesNCL (released)", "checkpoint": "r/x.ckpt", "sha256": sha},
        {"run_id": "synthetic/x/seed~1", "variant": "BayesNCL (released)", "checkpoint": "r/x.ckpt", "sha256": sha}]
