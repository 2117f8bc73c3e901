"""Weights in and out (bayesncl.runs): a checkpoint in the released code's layout, written here from a model of
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

from bayesncl.runs import files
from bayesncl.settings import config as C
from bayesncl.cli.main import main
from bayesncl.core.errors import CheckpointError, ConfigError
from bayesncl.evaluation.runner import evaluate
from bayesncl.model.methods import build_method
from bayesncl.settings.registry import METHODS
from bayesncl.training.train import pretrain
from bayesncl.runs import released
from bayesncl.runs.export import BUILD, export
from helpers.processes import current

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
    dataset = "cifar100" if m["stem"] == "cifar" else "imagenet100"  # what picks the released stem
    return {"name": "released", "method": "simclr", "backbone": {"name": m["arch"], "kwargs": {}},
            "data": {"dataset": dataset, "num_classes": 10}, "optimizer": {"name": "lars", "lr": 0.4,
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
    state = files.load(model_pt)
    where.mkdir(parents=True, exist_ok=True)
    path = where / "released-ep=1.ckpt"
    torch.save(lightning_checkpoint(released_state(state["model"])), path)
    if args:
        (where / "args.json").write_text(json.dumps(released_args(state["config"])))
    return path


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from helpers import TINY

    out = tmp_path_factory.mktemp("run")
    # the released CIFAR stem (padding 2): what an import of a released checkpoint builds
    cfg = C.resolve(sets=TINY + ["method.name=bayesncl", "method.gate=gumbel", "method.rho=0.7",
                                 "method.lambda=1.0e-3", "method.nonneg=relu", "model.cifar_padding=2"])
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
    from helpers import TINY

    settings = [a for s in TINY if not s.startswith("model.") for a in ("--set", s)]  # data, train, eval
    assert main(["import", "--checkpoint", str(ckpt), "--out", str(tmp_path / "imported"), *settings]) == 0
    model_pt = tmp_path / "imported" / "model.pt"
    state = files.load(model_pt)
    got = state["config"]
    # every model and method setting the released run fixed came over from its args.json and shapes
    assert got["model"] == cfg["model"]
    assert got["method"] == cfg["method"]
    assert state["imported"]["sha256"] == released.sha256_file(ckpt)
    assert any("classifier" in f for f in state["imported"]["flags"])
    assert files.weights_digest(state["model"]) == files.weights_digest(files.load(run / "model.pt")["model"])
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
    assert imp.config["model"]["cifar_padding"] == 2 and not any(f.startswith("model.") for f in imp.flags)


def test_lightning_s_attribute_dict_is_read_without_lightning_and_other_objects_are_refused(trained, tmp_path):
    run, cfg = trained
    state = released_state(files.load(run / "model.pt")["model"])
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
                                 sigmoid_temperature=0.5, temperature=0.3)
    args["optimizer"]["gating_head_lr"] = 0.05
    (tmp_path / "args.json").write_text(json.dumps(args))
    imp = released.import_checkpoint(ckpt)
    mc = imp.config["method"]
    assert (mc["gate"], mc["rho"], mc["lambda"], mc["tau_g"], mc["temperature"], mc["head_lr"]) == (
        ours, 0.55, 0.02, 0.5, 0.3, 0.05)
    assert any("cifar100" in f for f in imp.flags)  # trained on another dataset than evaluated on
    del args["optimizer"]["gating_head_lr"]  # absent: optimizer.lr, the released default
    (tmp_path / "args.json").write_text(json.dumps(args))
    assert released.import_checkpoint(ckpt).config["method"]["head_lr"] == args["optimizer"]["lr"] == 0.4


def test_a_set_that_contradicts_the_shapes_is_refused(trained, tmp_path):
    run, _ = trained
    ckpt = write_released(run / "model.pt", tmp_path)
    with pytest.raises(CheckpointError, match="model.proj_dim"):
        released.import_checkpoint(ckpt, sets=["model.proj_dim=8"])


# ---------------------------------------------------------------- the import's rules, on checkpoints written here
# An untrained model of this package written in the released layout: no training, a fraction of a second each.
SMALL = ["model.width=4", "model.proj_hidden=8", "model.proj_dim=4"]
_MADE: dict = {}  # (method, sets): (config, state dict), each model built once


def _released(tmp_path: Path, name: str = "bayesncl", sets=(), args: bool = True, edit=None, mk=None, **extra):
    """(checkpoint path, the config it was written from); `edit` changes the released state dict in place, `mk`
    the args.json's method_kwargs; `extra` goes to the checkpoint's top level."""
    key = (name, tuple(sets))
    if key not in _MADE:  # a CIFAR stem padded as released (what an import builds) unless `sets` says otherwise
        pad = [] if "model.stem=imagenet" in sets else ["model.cifar_padding=2"]
        cfg = C.resolve(sets=[*SMALL, *pad, f"method.name={name}", *sets])
        torch.manual_seed(0)
        _MADE[key] = cfg, build_method(cfg).state_dict()
    cfg, ours = _MADE[key]
    state = released_state(ours)  # copies
    if edit is not None:
        edit(state)
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "released.ckpt"
    torch.save(lightning_checkpoint(state, **extra), path)
    if args:
        a = released_args(cfg)
        a["method_kwargs"].update(mk or {})
        (tmp_path / "args.json").write_text(json.dumps(a))
    return path, cfg


def test_a_file_that_is_no_released_checkpoint_is_refused_in_one_line_that_names_it(tmp_path):
    cases = {tmp_path: "is a folder, not a file", tmp_path / "none.ckpt": "does not exist"}
    torch.save(torch.zeros(3), tmp_path / "tensor.ckpt")
    cases[tmp_path / "tensor.ckpt"] = "holds a Tensor, not a dict"
    torch.save({"state_dict": {"backbone.w": torch.zeros(64)}}, tmp_path / "full.ckpt")
    (tmp_path / "cut.ckpt").write_bytes((tmp_path / "full.ckpt").read_bytes()[:100])
    cases[tmp_path / "cut.ckpt"] = "could not be read ("
    for path, phrase in cases.items():
        with pytest.raises(CheckpointError) as e:
            released.read(path)
        msg = str(e.value)
        assert f"checkpoint {path} " in msg and phrase in msg and "\n" not in msg, msg


# The qualified names under which Lightning's versions pickled their hyper-parameter dict (AttributeDict).
LIGHTNING_NAMES = ("pytorch_lightning.utilities.parsing.AttributeDict",
                   "lightning.pytorch.utilities.parsing.AttributeDict",
                   "lightning_fabric.utilities.data.AttributeDict",
                   "lightning.fabric.utilities.data.AttributeDict")


@pytest.mark.parametrize("qualname", ["evil.AttributeDict", "evil.pytorch_lightning.utilities.parsing.AttributeDict",
                                      "pytorch_lightning.utilities.parsing.AttributeDictX",
                                      "pytorch_lightning.AttributeDict"])
def test_the_allow_list_matches_lightning_s_attribute_dict_by_its_full_name_only(tmp_path, qualname):
    """A class named AttributeDict elsewhere (or ending as Lightning's full name does) is refused, never read as a
    plain dict: its module is never imported, so none of its code runs."""
    module, _, cls = qualname.rpartition(".")
    parts = module.split(".")
    fake = types.ModuleType(module)
    attribute_dict = type(cls, (dict,), {"__module__": module, "__qualname__": cls})
    setattr(fake, cls, attribute_dict)
    names = [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
    saved = {p: sys.modules.get(p) for p in names}
    sys.modules.update({p: fake for p in names})
    try:
        torch.save({"state_dict": {}, "hyper_parameters": attribute_dict(cfg=attribute_dict(seed=3))}, tmp_path / "a")
    finally:
        for p, m in saved.items():
            sys.modules.pop(p) if m is None else sys.modules.__setitem__(p, m)
    with pytest.raises(CheckpointError, match=rf"pickles Python objects that are not read without running their "
                                              rf"code \({re.escape(qualname)}\)"):
        released.read(tmp_path / "a")
    assert not any(n in sys.modules for n in names if n not in saved or saved[n] is None)


@pytest.mark.parametrize("qualname", LIGHTNING_NAMES)
def test_every_name_lightning_pickled_its_attribute_dict_under_is_read_as_a_plain_dict(tmp_path, qualname):
    module, _, cls = qualname.rpartition(".")
    parts = module.split(".")
    fake = types.ModuleType(module)
    attribute_dict = type(cls, (dict,), {"__module__": module, "__qualname__": cls})
    setattr(fake, cls, attribute_dict)
    names = [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
    saved = {p: sys.modules.get(p) for p in names}
    sys.modules.update({p: fake for p in names})
    try:
        torch.save({"state_dict": {}, "hyper_parameters": attribute_dict(cfg=attribute_dict(seed=3))}, tmp_path / "a")
    finally:
        for p, m in saved.items():
            sys.modules.pop(p) if m is None else sys.modules.__setitem__(p, m)
    got = released.read(tmp_path / "a")
    assert got["hyper_parameters"] == {"cfg": {"seed": 3}}


def test_keys_of_no_module_of_this_package_and_a_missing_projector_are_refused_by_name(tmp_path):
    def momentum(sd):  # a BYOL/MoCo checkpoint: momentum copies of backbone and projector
        for k in [k for k in sd if k.startswith(("backbone.conv1", "projector."))]:
            sd[f"momentum_{k}"] = sd[k]

    path, _ = _released(tmp_path, edit=momentum)
    with pytest.raises(CheckpointError) as e:
        released.import_checkpoint(path)
    assert "momentum_backbone.conv1.weight, momentum_projector.0.weight, momentum_projector.0.bias, ...)" \
        in str(e.value)

    def headless(sd):
        for k in [k for k in sd if k.startswith("projector.")]:
            del sd[k]

    path, _ = _released(tmp_path, edit=headless)
    with pytest.raises(CheckpointError, match=r"no projector\.\* keys"):
        released.import_checkpoint(path)


def _bb(blocks, bottleneck=False, kernel=3, width=4) -> dict:
    """The keys of a ResNet backbone's state dict with `blocks` blocks per stage (only conv weights)."""
    bb = {"conv1.weight": torch.zeros(width, 3, kernel, kernel)}
    for i, n in enumerate(blocks, 1):
        for b in range(n):
            for c in (1, 2, 3) if bottleneck else (1, 2):
                bb[f"layer{i}.{b}.conv{c}.weight"] = torch.zeros(1)
    return bb


def test_the_backbone_s_arch_width_and_stem_are_read_from_its_keys_and_shapes(tmp_path):
    shape = released.backbone_shape
    assert shape(_bb([2, 2, 2, 2]), tmp_path) == {"arch": "resnet18", "width": 4, "stem": "cifar"}
    assert shape(_bb([3, 4, 6, 3], True, 7, 8), tmp_path) == {"arch": "resnet50", "width": 8, "stem": "imagenet"}
    for bb, phrase in ((_bb([3, 4, 6, 3]), "[3, 4, 6, 3] Basic blocks"),  # ResNet-34
                       (_bb([2, 2, 2, 2], True), "[2, 2, 2, 2] Bottleneck blocks"),
                       (_bb([2, 2, 2, 2], kernel=5), "backbone.conv1.weight has shape (4, 3, 5, 5)"),
                       ({"cls_token": torch.zeros(1), "pos_embed": torch.zeros(1), "blocks.0.w": torch.zeros(1)},
                        "not a ResNet (backbone.cls_token, backbone.pos_embed, ...)")):
        with pytest.raises(CheckpointError, match=re.escape(phrase)):
            shape(bb, tmp_path)


def test_an_imagenet_stem_imports_as_such_and_the_cifar_stem_with_the_released_padding(tmp_path):
    path, cfg = _released(tmp_path, sets=["model.stem=imagenet"])
    imp = released.import_checkpoint(path)
    assert imp.config["model"] == cfg["model"] and imp.config["model"]["stem"] == "imagenet"
    assert imp.config["model"]["cifar_padding"] == 1  # the key's default: the ImageNet stem reads none
    assert not any(f.startswith("model.") for f in imp.flags)
    path, cfg = _released(tmp_path / "cifar", sets=["model.cifar_padding=1"])  # nothing in the file says so
    imp = released.import_checkpoint(path)
    assert imp.config["model"] == {**cfg["model"], "cifar_padding": 2}  # solo/methods/base.py's, always
    assert released.import_checkpoint(path, sets=["model.cifar_padding=1"]).config["model"]["cifar_padding"] == 1


def _released_resnet18(padding: int) -> torch.nn.Module:
    """A ResNet-18 built the way the released code builds its CIFAR backbone (solo/methods/base.py): torchvision's
    resnet18, fc removed, conv1 replaced by a 3x3 stride-1 conv with padding `padding`, no max-pool."""
    import torchvision

    net = torchvision.models.resnet18()
    net.fc = torch.nn.Identity()
    net.conv1 = torch.nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=padding, bias=False)
    net.maxpool = torch.nn.Identity()
    return net


@pytest.mark.parametrize("padding", [1, 2])
def test_a_released_backbone_imports_to_the_released_network_s_features(tmp_path, padding):
    """A network built as the released code builds it, with random weights and running statistics, saved in the
    released layout and imported: this package's backbone gives its features within float rounding, with the
    released padding 2 (what an import builds) and with 1 (--set model.cifar_padding=1); the other padding
    does not."""
    from bayesncl.model.backbones import build_backbone

    torch.manual_seed(padding)
    net = _released_resnet18(padding)
    for m in net.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.normal_(0, 0.1)
            m.running_var.uniform_(0.5, 2.0)
            m.bias.data.normal_(0, 0.1)
    state = OrderedDict((f"backbone.{k}", v.clone()) for k, v in net.state_dict().items())
    for i, (o, n) in enumerate(((32, 512), (16, 32))):
        state[f"projector.{2 * i}.weight"], state[f"projector.{2 * i}.bias"] = torch.randn(o, n), torch.zeros(o)
    path = tmp_path / "released.ckpt"
    torch.save(lightning_checkpoint(state), path)
    cfg = released_args(C.resolve(sets=["method.name=ncl", "model.proj_hidden=32", "model.proj_dim=16"]))
    (tmp_path / "args.json").write_text(json.dumps(cfg))
    imp = released.import_checkpoint(path, sets=[] if padding == 2 else ["model.cifar_padding=1"])
    assert imp.config["model"]["cifar_padding"] == padding
    model = build_method(imp.config)
    model.load_state_dict(imp.state)
    x = torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want, got = net.eval()(x), model.eval().backbone(x)
        other = build_backbone("resnet18", 64, "cifar", 3 - padding)
        other.load_state_dict(model.backbone.state_dict())
        wrong = other.eval()(x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert (wrong - want).abs().max() > 1e-2  # the padding is not a detail: features differ at every border


@pytest.mark.parametrize("name,sets", [("cl", []), ("ncl", ["method.nonneg=relu", "method.temperature=0.3"]),
                                       ("topk_ncl", ["method.topk_k=3"])])
def test_the_released_method_kwargs_name_the_method_and_its_settings(tmp_path, name, sets):
    path, cfg = _released(tmp_path, name, sets)
    assert released.import_checkpoint(path).config["method"] == cfg["method"]


@pytest.mark.parametrize("sets", [["method.head_depth=1", "method.lambda=0", "method.head_lr=0.05"],
                                  ["method.head_depth=3", "method.gate=gumbel", "method.tau_g=0.5"]])
def test_a_gating_head_of_one_or_three_layers_and_its_settings_come_over(tmp_path, sets):
    path, cfg = _released(tmp_path, sets=sets)
    imp = released.import_checkpoint(path)
    assert imp.config["method"] == cfg["method"]
    assert not any(f.startswith("method.") for f in imp.flags)


@pytest.mark.parametrize("theirs,ours,bad", [("bayesian_prior_prob", "rho", 1.0), ("bayesian_prior_prob", "rho", True),
                                             ("bayesian_kl_lambda", "lambda", -0.1),
                                             ("sigmoid_temperature", "tau_g", "2"),
                                             ("sigmoid_temperature", "tau_g", 0.0)])
def test_a_released_gate_setting_this_package_does_not_take_is_refused_unless_set(tmp_path, theirs, ours, bad):
    """The released value is carried or refused in one line naming it and the key; `--set` gives the value."""
    path, _ = _released(tmp_path, mk={theirs: bad})
    with pytest.raises(CheckpointError) as e:
        released.import_checkpoint(path)
    msg = str(e.value)
    assert msg.startswith(f"checkpoint {path}: method_kwargs.{theirs} is {bad!r}, not a value of method.{ours} (")
    assert msg.endswith(f"give --set method.{ours}=VALUE to record another") and "\n" not in msg
    value = {"rho": 0.6, "lambda": 0.001, "tau_g": 2.0}[ours]
    imp = released.import_checkpoint(path, sets=[f"method.{ours}={value}"])
    assert imp.config["method"][ours] == value
    path, _ = _released(tmp_path, mk={"bayesian_kl_lambda": 0})  # 0 is a lambda this package takes
    assert released.import_checkpoint(path).config["method"]["lambda"] == 0.0


@pytest.mark.parametrize("value", [None, "0.2", [0.2], 10 ** 400, float("inf"), -0.5])
def test_a_released_temperature_of_the_wrong_type_is_flagged_and_the_default_kept(tmp_path, value):
    path, _ = _released(tmp_path, mk={"temperature": value})
    imp = released.import_checkpoint(path)
    assert imp.config["method"]["temperature"] == C.resolve()["method"]["temperature"]
    assert any(f.startswith("method.temperature: the released temperature is ") for f in imp.flags), imp.flags


@pytest.mark.parametrize("name,mk,phrase", [
    ("bayesncl", {"use_topk": True}, "use_bayes and use_topk both set"),
    ("bayesncl", {"use_bayes": False}, "use_bayes is False but the state dict has a gating_head"),
    ("ncl", {"use_bayes": True}, "use_bayes is True but the state dict has no gating_head"),
    ("bayesncl", {"non_neg": None}, "non_neg is null with a gate or a top-k mask"),
    ("topk_ncl", {"non_neg": None}, "non_neg is null with a gate or a top-k mask"),
    ("ncl", {"non_neg": "softplus"}, "non_neg 'softplus'; this package's method.nonneg is relu or rep_relu"),
    ("bayesncl", {"gate_type": "hard"}, "gate_type 'hard'; the released gates are STE, gumbel_sigmoid"),
])
def test_released_method_kwargs_this_package_has_no_method_for_are_refused_by_name(tmp_path, name, mk, phrase):
    path, _ = _released(tmp_path, name, ["method.topk_k=2"] if name == "topk_ncl" else [], mk=mk)
    with pytest.raises(CheckpointError, match=re.escape(f"checkpoint {path}: method_kwargs")) as e:
        released.import_checkpoint(path)
    assert phrase in str(e.value)


def _rename(sd: dict, old: str, new: str):
    sd[new] = sd.pop(old)


@pytest.mark.parametrize("sets,edit,phrase", [
    ([], lambda sd: sd.update({"projector.4.weight": torch.zeros(2, 4), "projector.4.bias": torch.zeros(2)}),
     "the projector's layers are (out, in) [(8, 32), (4, 8), (2, 4)]"),
    ([], lambda sd: (_rename(sd, "projector.2.weight", "projector.1.weight"),
                     _rename(sd, "projector.2.bias", "projector.1.bias")),
     "projector.* is not a stack of Linear layers with ReLU between them (keys 0.bias, 0.weight, 1.bias, 1.weight)"),
    ([], lambda sd: sd.update({"gating_head.2.weight": torch.zeros(5, 8), "gating_head.2.bias": torch.zeros(5)}),
     "the gating head's layers are (out, in) [(8, 32), (5, 8)]; it must map the 32 backbone features to D = 4"),
    (["method.head_depth=3"], lambda sd: sd.update({"gating_head.2.weight": torch.zeros(8, 8),
                                                    "gating_head.2.bias": torch.zeros(8),
                                                    "gating_head.4.weight": torch.zeros(4, 8)}),
     "the gating head's hidden widths are [8, 8]; this package's head of depth 3 has [8, 4]"),
])
def test_a_projector_or_gating_head_of_another_shape_is_refused_with_its_layers(tmp_path, sets, edit, phrase):
    path, _ = _released(tmp_path, sets=sets, edit=edit)
    with pytest.raises(CheckpointError, match=re.escape(f"checkpoint {path}: ")) as e:
        released.import_checkpoint(path)
    assert phrase in str(e.value)


def test_without_hyper_parameters_or_a_gate_the_method_must_be_given(tmp_path):
    path, cfg = _released(tmp_path, "ncl", args=False)
    with pytest.raises(CheckpointError, match=re.escape("give --args args.json or --set method.name=<cl | ncl | "
                                                        "topk_ncl>")):
        released.import_checkpoint(path)
    imp = released.import_checkpoint(path, sets=["method.name=ncl"])
    assert imp.config["method"] == cfg["method"] and imp.config["model"] == cfg["model"]
    assert any(f.startswith("method.nonneg: no hyper-parameters") for f in imp.flags)
    assert any(f.startswith("no hyper-parameters: temperature") for f in imp.flags)


def test_the_hyper_parameters_are_read_from_the_checkpoint_else_args_and_a_bad_args_file_is_refused(tmp_path):
    path, cfg = _released(tmp_path, sets=["method.rho=0.6"])
    args = json.loads((tmp_path / "args.json").read_text())
    (tmp_path / "args.json").unlink()
    for hp in ({"cfg": args}, args):  # under cfg (solo-learn's save_hyperparameters) or at the top
        torch.save(lightning_checkpoint(torch.load(path)["state_dict"], hyper_parameters=hp), tmp_path / "hp.ckpt")
        imp = released.import_checkpoint(tmp_path / "hp.ckpt")
        assert imp.config["method"] == cfg["method"] and not any("no hyper-parameters" in f for f in imp.flags)
    (tmp_path / "elsewhere.json").write_text(json.dumps(args))
    assert released.import_checkpoint(path, args=tmp_path / "elsewhere.json").config["method"]["rho"] == 0.6
    (tmp_path / "text.json").write_text("rho: 0.6")
    (tmp_path / "list.json").write_text("[]")
    for file, phrase in ((tmp_path / "absent.json", f"--args {tmp_path / 'absent.json'} does not exist"),
                         (tmp_path / "text.json", f"{tmp_path / 'text.json'}: not a JSON file"),
                         (tmp_path / "list.json", f"{tmp_path / 'list.json'}: no method_kwargs object")):
        with pytest.raises(CheckpointError, match=re.escape(phrase)):
            released.import_checkpoint(path, args=file)


def _drop(key):
    return lambda sd: sd.pop(key)


def test_the_import_s_layers_are_the_workflow_s_then_the_checkpoint_s_then_the_user_s(tmp_path):
    """defaults <- base (the grid's dataset settings) <- what the checkpoint says <- overrides (imported[].overrides)
    <- --set: the checkpoint's temperature beats the grid's, and the user's overrides and --set beat it."""
    path, _ = _released(tmp_path, mk={"temperature": 0.7})
    base = {"method": {"temperature": 0.1}, "train": {"epochs": 3}}
    got = lambda **kw: released.import_checkpoint(path, base=base, **kw).config  # noqa: E731
    assert got()["method"]["temperature"] == 0.7 and got()["train"]["epochs"] == 3
    over = {"method": {"temperature": 0.3}}
    assert got(overrides=over)["method"]["temperature"] == 0.3
    assert got(overrides=over, sets=["method.temperature=0.4"])["method"]["temperature"] == 0.4


@pytest.mark.parametrize("edit,phrase", [
    (_drop("backbone.layer1.0.bn1.running_var"), "(missing backbone.layer1.0.bn1.running_var)"),
    (lambda sd: sd.update({"backbone.fc.weight": torch.zeros(10, 32)}), "(unexpected backbone.fc.weight)"),
    (lambda sd: sd.update({"backbone.bn1.weight": torch.ones(5)}),
     "(backbone.bn1.weight has shape (5,), the model expects (4,))"),
])
def test_weights_that_do_not_fit_the_model_the_config_describes_are_refused_by_key_and_shape(tmp_path, edit, phrase):
    path, _ = _released(tmp_path, edit=edit)
    with pytest.raises(CheckpointError, match=re.escape(f"checkpoint {path}: its weights do not fit the bayesncl "
                                                        f"model its config describes {phrase}")):
        released.import_checkpoint(path)


def test_a_head_depth_or_model_setting_that_contradicts_the_shapes_is_refused_with_both_values(tmp_path):
    path, _ = _released(tmp_path)  # a gating head of 2 layers on a ResNet-18 of width 4
    with pytest.raises(CheckpointError, match=re.escape(f"method.head_depth=3: the checkpoint {path} has "
                                                        "method.head_depth = 2 (its shapes); leave the key out")):
        released.import_checkpoint(path, sets=["method.head_depth=3"])
    with pytest.raises(CheckpointError, match=re.escape(f"model.width=8: the checkpoint {path} has model.width = 4")):
        released.import_checkpoint(path, overrides={"model": {"width": 8}})  # a workflow's overrides: the same rule


def test_an_import_written_as_a_run_records_its_source_epochs_and_config(tmp_path):
    defaults = C.resolve()
    path, cfg = _released(tmp_path / "r", sets=["method.head_depth=1"])
    imp = released.import_checkpoint(path, sets=["model.proj_dim=4", "eval.probe=paper"])  # agrees with the shapes
    assert imp.config["eval"]["probe"] == "paper" and imp.config["model"] == cfg["model"]
    assert imp.epoch == 2  # Lightning's epoch counts from 0: a checkpoint at epoch 1 has 2 epochs behind it
    final = released.write_run(imp, path, tmp_path / "run")
    state = files.load(final)
    assert state["epoch"] == 2 and state["config"] == imp.config
    assert state["imported"] == {"source": str(path), "sha256": released.sha256_file(path), "flags": imp.flags,
                                 "epochs": 2}
    assert files.weights_digest(state["model"]) == files.weights_digest(imp.state)
    assert (tmp_path / "run" / "config.resolved.yaml").read_text() == C.dump_yaml(imp.config)  # as pretrain's
    assert (tmp_path / "run" / "log.jsonl").read_text() == ""
    bare = {k: v for k, v in torch.load(path)["state_dict"].items()}  # a bare state dict: no epoch, no Lightning
    torch.save(bare, tmp_path / "r" / "bare.ckpt")
    imp = released.import_checkpoint(tmp_path / "r" / "bare.ckpt")
    assert imp.epoch is None and files.weights_digest(imp.state) == files.weights_digest(state["model"])
    torch.save({"state_dict": [1, 2]}, tmp_path / "list.ckpt")
    with pytest.raises(CheckpointError, match="its state_dict is a list, not a dict"):
        released.import_checkpoint(tmp_path / "list.ckpt")
    with pytest.raises(ConfigError, match=re.escape(f"checkpoint {path}: ") + ".*method.temperature"):
        released.import_checkpoint(path, sets=["method.temperature=-1"])
    assert C.resolve() == defaults  # the imports laid their layers on a copy of the defaults, not on them


# ------------------------------------------------------------------------------------------------ export
def _model_pt(tmp_path: Path, arch: str, stem: str, padding: int = 1) -> tuple[Path, torch.nn.Module]:
    cfg = C.resolve(sets=[f"model.arch={arch}", f"model.stem={stem}", "model.width=64", "model.proj_hidden=32",
                          "model.proj_dim=16", "method.name=bayesncl", f"model.cifar_padding={padding}"])
    torch.manual_seed(0)
    model = build_method(cfg)
    for m in model.modules():  # running statistics other than the initial ones: eval mode must use them
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.normal_(0, 0.1)
            m.running_var.uniform_(0.5, 2.0)
            m.bias.data.normal_(0, 0.1)
    path = tmp_path / "model.pt"
    files.save({"config": cfg, "model": model.state_dict()}, path)
    return path, model.eval()


def _build(lib: str, arch: str, stem: str, padding: int = 1) -> torch.nn.Module:
    """The network as config.json's `build` line says (the documented recipe), run as written."""
    timm = pytest.importorskip("timm") if lib == "timm" else None
    import torchvision

    scope = {"torch": torch, "torchvision": torchvision, "timm": timm}
    exec(BUILD[lib, stem].format(arch=arch, padding=padding), scope)
    return scope["m"]


@pytest.mark.parametrize("fmt,lib,arch,stem,padding", [
    ("torchvision", "torchvision", "resnet18", "cifar", 1),
    ("torchvision", "torchvision", "resnet18", "cifar", 2),
    ("torchvision", "torchvision", "resnet50", "imagenet", 1),
    ("timm", "timm", "resnet18", "imagenet", 1),
    ("timm", "timm", "resnet50", "cifar", 2),
    ("safetensors", "torchvision", "resnet18", "imagenet", 1),
    ("safetensors", "timm", "resnet18", "cifar", 1),
])
def test_an_exported_backbone_loads_strictly_and_gives_the_same_features(tmp_path, fmt, lib, arch, stem, padding):
    if fmt == "safetensors":
        pytest.importorskip("safetensors")
    path, model = _model_pt(tmp_path, arch, stem, padding)
    assert main(["export", "--checkpoint", str(path), "--format", fmt, "--out", str(tmp_path / "x"), "--heads"]) == 0
    info = json.loads((tmp_path / "x" / "config.json").read_text())
    assert info["config"] == files.load(path)["config"]
    assert info["export"]["build"][lib] == BUILD[lib, stem].format(arch=arch, padding=padding)
    assert f"padding={padding}," in info["export"]["build"][lib] or stem == "imagenet"
    assert info["export"]["cifar_padding"] == (padding if stem == "cifar" else None)
    if fmt == "safetensors":
        from safetensors.torch import load_file

        weights = load_file(tmp_path / "x" / info["export"]["backbone"])
        heads = load_file(tmp_path / "x" / info["export"]["heads"])
    else:
        weights = torch.load(tmp_path / "x" / info["export"]["backbone"], weights_only=True)
        heads = torch.load(tmp_path / "x" / info["export"]["heads"], weights_only=True)
    net = _build(lib, arch, stem, padding)
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
    files.save({"config": cfg, "model": build_method(cfg).state_dict()}, tmp_path / "model.pt")
    with pytest.raises(CheckpointError, match="model.width is 4"):
        export(tmp_path / "model.pt", tmp_path / "x", "timm")
    assert not (tmp_path / "x").exists()


def test_an_export_s_config_json_and_safetensors_metadata_say_what_was_exported_and_from_what(tmp_path):
    pytest.importorskip("safetensors")
    from safetensors import safe_open

    cfg = C.resolve(sets=[*SMALL, "method.name=ncl"])
    torch.manual_seed(0)
    model = build_method(cfg)
    files.save({"config": cfg, "model": model.state_dict()}, tmp_path / "model.pt")
    with pytest.raises(CheckpointError, match=re.escape("--format 'onnx': allowed torchvision, timm, safetensors")):
        export(tmp_path / "model.pt", tmp_path / "x", "onnx")
    written = export(tmp_path / "model.pt", tmp_path / "x", "safetensors")  # the heads only when asked for
    assert written == [tmp_path / "x" / "backbone.safetensors", tmp_path / "x" / "config.json"]
    info = {"format": "safetensors", "arch": "resnet18", "width": 4, "stem": "cifar", "cifar_padding": 1,
            "source": str(tmp_path / "model.pt"), "weights_sha": files.weights_digest(model),
            "backbone": "backbone.safetensors", "heads": None,
            "build": None}  # width 4: no network of torchvision's or timm's loads it
    assert json.loads((tmp_path / "x" / "config.json").read_text()) == {"config": cfg, "export": info}
    ours = {k.partition(".")[2]: v for k, v in model.state_dict().items() if k.startswith("backbone.")}
    with safe_open(written[0], "pt") as f:
        assert json.loads(f.metadata()["config"]) == cfg and json.loads(f.metadata()["export"]) == info
        assert set(f.keys()) == set(ours) and all(torch.equal(f.get_tensor(k), v) for k, v in ours.items())


def test_an_export_without_the_safetensors_package_refuses_only_that_format(tmp_path, monkeypatch):
    path, _ = _model_pt(tmp_path, "resnet18", "imagenet")
    monkeypatch.setitem(sys.modules, "safetensors.torch", None)  # `import safetensors.torch` raises ImportError
    with pytest.raises(CheckpointError, match=re.escape("--format safetensors needs the safetensors package")):
        export(path, tmp_path / "s", "safetensors")
    assert [p.name for p in export(path, tmp_path / "t", "torchvision")] == ["backbone.pth", "config.json"]


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
    from bayesncl.core.errors import ConfigError
    from bayesncl.grid.expand import expand_grid, trigger_config

    run, cfg = trained
    wf = _grid_with_import(tmp_path, run / "model.pt")
    runs = expand_grid(wf)
    (imp,) = [r for r in runs.values() if r.imported]
    assert imp.labels == {"table1": "BayesNCL (released)", "table2": "BayesNCL (released)"}
    assert imp.sets == ["table1", "table2"]
    assert imp.run_id == f"synthetic/{cfg['method']['name']}/imported~BayesNCL_released/seed~0"
    assert imp.imported["sha256"] == released.sha256_file(wf["imported"][0]["checkpoint"])
    assert imp.config["model"] == cfg["model"] and imp.config["method"] == cfg["method"]
    assert imp.config["data"] == C.resolve(base={"data": yaml.safe_load(
        (ROOT / "config" / "tiny.yaml").read_text())["defaults"]["data"]})["data"]  # the grid's data settings
    assert trigger_config(imp.config, "evaluate")["eval"]["probe"] == "fast"
    assert len([r for r in runs.values() if not r.imported and not r.init_of]) == 2  # the grid's own two
    assert not any(r.init_of and r.imported for r in runs.values())  # imported weights get no untrained twin
    from bayesncl.grid.expand import variant_names
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
    r = current().run([exe, "--cores", "2", "--nolock", *targets, "--configfile", str(tmp_path / "grid.yaml")], cwd=ROOT,
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
    again = current().run([exe, "-n", "--cores", "2", *targets, "--configfile", str(tmp_path / "grid.yaml")],
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


# Each setting the released code reads (released.READS), changed in an args.json: (method, sets the checkpoint was
# written from, the released key, its new value, the config key it lands in with its value, or None: refused).
READ_CASES = {
    "method_kwargs.proj_hidden_dim": ("bayesncl", (), 999, None),
    "method_kwargs.proj_output_dim": ("bayesncl", (), 999, None),
    "method_kwargs.temperature": ("ncl", (), 0.7, ("method.temperature", 0.7)),
    "method_kwargs.non_neg": ("ncl", (), "relu", ("method.nonneg", "relu")),
    "method_kwargs.use_bayes": ("bayesncl", (), False, None),
    "method_kwargs.use_topk": ("ncl", (), True, ("method.name", "topk_ncl")),
    "method_kwargs.topk_k": ("topk_ncl", ("method.topk_k=2",), 3, ("method.topk_k", 3)),
    "method_kwargs.gate_type": ("bayesncl", (), "gumbel_sigmoid", ("method.gate", "gumbel")),
    "method_kwargs.bayesian_prior_prob": ("bayesncl", (), 0.6, ("method.rho", 0.6)),
    "method_kwargs.bayesian_kl_lambda": ("bayesncl", (), 0.01, ("method.lambda", 0.01)),
    "method_kwargs.sigmoid_temperature": ("bayesncl", (), 0.5, ("method.tau_g", 0.5)),
    "method_kwargs.gate_threshold": ("bayesncl", (), 0.7, None),
    "optimizer.gating_head_lr": ("bayesncl", (), 0.03, ("method.head_lr", 0.03)),
    "backbone.name": ("bayesncl", (), "resnet50", None),
    "data.dataset": ("bayesncl", (), "imagenet100", None),  # the released ImageNet stem: a 7x7 conv1
}


@pytest.mark.parametrize("key", list(READ_CASES))
def test_every_setting_the_released_code_reads_is_carried_or_refused(tmp_path, key):
    """No released setting is dropped in silence: changed in args.json, it changes the imported config, or the
    import stops in one line that names it (gate_threshold once was dropped)."""
    assert set(READ_CASES) == set(released.READS)  # a new read needs its case
    name, sets, value, lands = READ_CASES[key]
    path, cfg = _released(tmp_path, name, list(sets), mk={"topk_k": 2} if key == "method_kwargs.use_topk" else None)
    args = json.loads((tmp_path / "args.json").read_text())
    section, _, leaf = key.partition(".")
    args[section][leaf] = value
    (tmp_path / "args.json").write_text(json.dumps(args))
    if lands is None:
        with pytest.raises(CheckpointError) as e:
            released.import_checkpoint(path)
        assert f": {key} " in str(e.value) and "\n" not in str(e.value)
    else:
        got = C.flatten(released.import_checkpoint(path).config)
        assert got[lands[0]] == lands[1] != C.flatten(cfg)[lands[0]]


def test_the_released_dataset_picks_the_stem_as_the_released_code_does(tmp_path):
    """solo/methods/base.py: cifar10 and cifar100 get the CIFAR stem, every other dataset torchvision's; an
    args.json whose dataset says the other stem than conv1's shape is another run's."""
    for stem, dataset, ok in (("cifar", "cifar10", True), ("cifar", "cifar100", True), ("cifar", "stl10", False),
                              ("imagenet", "imagenet100", True), ("imagenet", "cifar10", False)):
        path, _ = _released(tmp_path / f"{stem}-{dataset}", sets=["model.stem=imagenet"] if stem == "imagenet" else ())
        args = json.loads((path.parent / "args.json").read_text())
        args["data"]["dataset"] = dataset
        (path.parent / "args.json").write_text(json.dumps(args))
        if ok:
            assert released.import_checkpoint(path).config["model"]["stem"] == stem, dataset
        else:
            with pytest.raises(CheckpointError, match=re.escape(f"data.dataset is {dataset!r}")):
                released.import_checkpoint(path)


def test_the_gate_threshold_is_the_released_default_or_refused(tmp_path):
    """gate_threshold 0.5 (the released default, also when absent) imports; any other value is refused in one
    line: this package's gate opens at 0.5 and has no key for another."""
    for mk in ({"gate_threshold": 0.5}, {"gate_threshold": 0.5000001}, {"gate_threshold": 0.4999999},
               {"gate_threshold": 0.3}, {"gate_threshold": True}):
        path, _ = _released(tmp_path, mk=mk)
        if mk["gate_threshold"] == 0.5 and mk["gate_threshold"] is not True:
            assert released.import_checkpoint(path).config["method"]["gate"] == "ste"
        else:
            with pytest.raises(CheckpointError, match=re.escape("method_kwargs.gate_threshold")):
                released.import_checkpoint(path)
    path, _ = _released(tmp_path)
    args = json.loads((tmp_path / "args.json").read_text())
    del args["method_kwargs"]["gate_threshold"]
    (tmp_path / "args.json").write_text(json.dumps(args))
    assert released.import_checkpoint(path).config["method"]["gate"] == "ste"


def _pickled_attribute_dict(tmp_path: Path, reduce_args) -> Path:
    """A checkpoint whose pickle calls the allow-listed AttributeDict (under Lightning's name) with `reduce_args`."""
    name = "pytorch_lightning.utilities.parsing"
    fake = types.ModuleType(name)

    class AttributeDict(dict):
        def __reduce__(self):
            return AttributeDict, reduce_args

    AttributeDict.__module__, AttributeDict.__qualname__ = name, "AttributeDict"
    fake.AttributeDict = AttributeDict
    parents = {p: sys.modules.get(p) for p in ("pytorch_lightning", "pytorch_lightning.utilities", name)}
    for p in parents:
        sys.modules[p] = fake
    try:
        path = tmp_path / f"bad{len(list(tmp_path.glob('bad*')))}.ckpt"
        torch.save({"state_dict": {}, "hyper_parameters": AttributeDict()}, path)
    finally:
        for p, m in parents.items():
            if m is None:
                sys.modules.pop(p, None)
            else:
                sys.modules[p] = m
    return path


@pytest.mark.parametrize("reduce_args,reason", [
    ((1, 2), "TypeError: dict expected at most 1 argument, got 2"), ((5,), "TypeError: 'int' object is not iterable"),
    (("not pairs",), "ValueError: dictionary update sequence element #0 has length 1; 2 is required"),
    (([("a", 1, 2)],), "ValueError: dictionary update sequence element #0 has length 3; 2 is required")],
    ids=["two arguments", "an int", "a string", "a triple"])
def test_a_malformed_pickle_of_the_allowed_dict_is_one_line(tmp_path, capsys, reduce_args, reason):
    """The allow-listed AttributeDict called with arguments a dict does not take: one line naming the file,
    through the API and through `bayesncl import` (exit 2), never a TypeError traceback."""
    path = _pickled_attribute_dict(tmp_path, reduce_args)
    with pytest.raises(CheckpointError) as e:
        released.read(path)
    msg = str(e.value)
    assert msg == f"checkpoint {path} could not be read ({reason}); {released.KEEP}"
    assert main(["import", "--checkpoint", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(path) in err and "Traceback" not in err


def test_an_absent_gate_setting_is_the_released_default(tmp_path):
    """args.json without bayesian_* or sigmoid_temperature: the released code took 0.0 for each; a prior or a gate
    temperature of 0 is no value of this package (refused), a KL weight of 0 is (carried)."""
    path, _ = _released(tmp_path)
    args = json.loads((tmp_path / "args.json").read_text())
    for key in ("bayesian_prior_prob", "sigmoid_temperature", "bayesian_kl_lambda"):
        del args["method_kwargs"][key]
    (tmp_path / "args.json").write_text(json.dumps(args))
    with pytest.raises(CheckpointError, match=re.escape("method_kwargs.bayesian_prior_prob is 0.0")):
        released.import_checkpoint(path)
    with pytest.raises(CheckpointError, match=re.escape("method_kwargs.sigmoid_temperature is 0.0")):
        released.import_checkpoint(path, sets=["method.rho=0.8"])
    imp = released.import_checkpoint(path, sets=["method.rho=0.8", "method.tau_g=1.0"])
    assert imp.config["method"]["lambda"] == 0.0


def test_an_import_s_set_wins_over_the_checkpoint_s_settings(tmp_path):
    """`bayesncl import --set` overrides what the hyper-parameters say (not the shapes): the run config records
    the --set value."""
    path, cfg = _released(tmp_path, mk={"temperature": 0.3, "bayesian_prior_prob": 0.6})
    out = tmp_path / "run"
    assert main(["import", "--checkpoint", str(path), "--out", str(out), "--set", "method.temperature=0.5",
                 "--set", "method.rho=0.7"]) == 0
    got = files.load(out / "model.pt")["config"]["method"]
    assert (got["temperature"], got["rho"]) == (0.5, 0.7)
    assert released.import_checkpoint(path).config["method"]["temperature"] == 0.3  # without the --set: carried
