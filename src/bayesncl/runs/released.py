"""A checkpoint of the authors' released code (a solo-learn fork) read into a model.pt of this package.

The released code saves a Lightning checkpoint: a dict whose `state_dict` holds `backbone.*` (a torchvision
ResNet without `fc`), `projector.*` (Linear, ReLU, Linear), `gating_head.*` for BayesNCL and `classifier.*` (the
online linear classifier, not part of the method), beside Lightning's own entries. Its hyper-parameters are in
the checkpoint's `hyper_parameters` where Lightning saved them, else in the `args.json` solo-learn writes beside
it. What they do not say is read from the keys and shapes (the released `main_eval.py` reads the projector's and
the gating head's sizes the same way); what neither says keeps this package's default and is listed as a flag.
Lightning is never imported: the file is read with `torch.load(weights_only=True)`, Lightning's AttributeDict
read as a plain dict; any other pickled object is refused.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import pickle
import re
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..settings import registry
from ..settings.config import flatten, resolve
from ..core.errors import CheckpointError, ConfigError

# The layout of one released checkpoint's state dict: our module name for each released prefix.
PREFIXES = {"backbone": "backbone", "projector": "projector", "gating_head": "gate_head"}
DROPPED = ("classifier",)  # the online linear classifier: trained beside the method, not part of it
# Lightning's hyper-parameter dict, under the names its versions pickled it: read as a plain dict.
ATTRIBUTE_DICTS = ("pytorch_lightning.utilities.parsing.AttributeDict",
                   "lightning.pytorch.utilities.parsing.AttributeDict",
                   "lightning_fabric.utilities.data.AttributeDict",
                   "lightning.fabric.utilities.data.AttributeDict")
# The released gate types (method_kwargs.gate_type) and this package's method.gate.
GATES = {"STE": "ste", "gumbel_sigmoid": "gumbel"}
NONNEG = ("relu", "rep_relu")
RELEASED_CIFAR_PADDING = 2  # the released CIFAR stem's conv1 padding (model.cifar_padding)
# solo/methods/base.py gives the CIFAR stem to these data.dataset names of its own (solo-learn's vocabulary, which
# args.json writes; not bayesncl.settings.registry's) and torchvision's stem to every other
SOLO_CIFAR = "cifar10 cifar100".split()
RELEASED_THRESHOLD = 0.5  # the gate's threshold, method_kwargs.gate_threshold: this package's, fixed
# Every setting the released SimCLR/BayesNCL reads (solo/methods/simclr.py, solo/methods/base.py) and what an
# import does with it: carried to a key of this package, checked against the weights' shapes, or refused in one
# line where this package cannot take it (tests/test_weights.py changes each one and sees it carried or refused).
READS = {
    "method_kwargs.proj_hidden_dim": "model.proj_hidden, checked against the projector's shapes",
    "method_kwargs.proj_output_dim": "model.proj_dim, checked against the projector's shapes",
    "method_kwargs.temperature": "method.temperature",
    "method_kwargs.non_neg": "method.nonneg, and the method (null: SimCLR)",
    "method_kwargs.use_bayes": "the method, checked against the gating head",
    "method_kwargs.use_topk": "the method",
    "method_kwargs.topk_k": "method.topk_k",
    "method_kwargs.gate_type": "method.gate",
    "method_kwargs.bayesian_prior_prob": "method.rho",
    "method_kwargs.bayesian_kl_lambda": "method.lambda",
    "method_kwargs.sigmoid_temperature": "method.tau_g",
    "method_kwargs.gate_threshold": f"refused unless {RELEASED_THRESHOLD} (this package's gate threshold)",
    "optimizer.gating_head_lr": "method.head_lr (absent: optimizer.lr, as released)",
    "backbone.name": "model.arch, checked against the backbone's shapes",
    "data.dataset": "the stem it picks, checked against conv1; noted where it differs from the evaluated dataset",
}
KEEP = "re-save its state dict alone: torch.save({'state_dict': ckpt['state_dict']}, path)"


@dataclass
class Imported:
    config: dict                                    # the validated run config
    state: dict                                     # this package's state dict (Method.state_dict() keys)
    sha256: str                                     # of the checkpoint file
    flags: list[str] = field(default_factory=list)  # what could not be inferred, or differs from the released run
    epoch: int | None = None


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read(path: str | Path) -> dict:
    """The checkpoint's dict, read without Lightning and without running pickled code."""
    path = Path(path)
    if not path.is_file():
        state = "is a folder, not a file" if path.is_dir() else "does not exist"
        raise CheckpointError(f"checkpoint {path} {state}; give the .ckpt the released code saved")
    try:
        return _as_dict(torch.load(path, map_location="cpu", weights_only=True), path)
    except pickle.UnpicklingError:
        pass
    except Exception as e:  # a truncated or foreign file
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError(f"checkpoint {path} could not be read ({reason}); give the .ckpt the released code "
                              "saved") from None
    try:
        needed = torch.serialization.get_unsafe_globals_in_checkpoint(path)
    except Exception:  # noqa: BLE001 - an old-format pickle: nothing to list
        needed = ["(unknown)"]
    other = [g for g in needed if g not in ATTRIBUTE_DICTS]
    if other:
        raise CheckpointError(f"checkpoint {path} pickles Python objects that are not read without running their "
                              f"code ({', '.join(other[:3])}); {KEEP}")
    with torch.serialization.safe_globals([(dict, g) for g in needed]):  # AttributeDict read as a plain dict
        try:
            obj = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:  # noqa: BLE001 - a malformed pickle (e.g. the dict called with wrong arguments)
            reason = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise CheckpointError(f"checkpoint {path} could not be read ({type(e).__name__}: {reason}); {KEEP}") \
                from None
    return _as_dict(obj, path)


def _as_dict(obj, path: Path) -> dict:
    if not isinstance(obj, dict):
        raise CheckpointError(f"checkpoint {path} holds a {type(obj).__name__}, not a dict; give the .ckpt the "
                              "released code saved")
    return obj


def _number(v) -> bool:
    """A real number a float holds (not a bool), NaN excluded; infinities are for the caller's bounds to refuse."""
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return False
    try:
        return float(v) == float(v)
    except OverflowError:  # an integer beyond floats
        return False


def _mapping(v) -> dict:
    return v if isinstance(v, dict) else {}


def _plain(obj):
    """Hyper-parameters as plain dicts and lists."""
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    return obj


def hyper_parameters(ckpt: dict, path: Path, args: str | Path | None = None) -> tuple[dict, str]:
    """The released run's config (solo-learn's cfg: method_kwargs, backbone, data, ...) and where it came from:
    the checkpoint's hyper_parameters, else --args, else args.json beside the checkpoint; ({}, "") if none."""
    hp = _plain(ckpt.get("hyper_parameters") or {})
    hp = hp.get("cfg", hp) if isinstance(hp.get("cfg"), dict) else hp
    if isinstance(hp, dict) and "method_kwargs" in hp:
        return hp, "the checkpoint's hyper_parameters"
    file = Path(args) if args else path.parent / "args.json"
    if args and not file.is_file():
        raise CheckpointError(f"--args {file} does not exist; give the args.json the released code wrote beside "
                              "the checkpoint")
    if file.is_file():
        try:
            hp = json.loads(file.read_text())
        except (ValueError, UnicodeDecodeError) as e:
            raise CheckpointError(f"{file}: not a JSON file ({e}); give the args.json the released code wrote") \
                from None
        if not isinstance(hp, dict) or not isinstance(hp.get("method_kwargs"), dict):
            raise CheckpointError(f"{file}: no method_kwargs object; give the args.json the released code wrote")
        return hp, str(file)
    return {}, ""


def split_state(sd: dict, path: Path) -> tuple[dict[str, dict], list[str]]:
    """{released prefix: {rest of key: tensor}} and the dropped prefixes; keys of no known module are refused."""
    groups: dict[str, dict] = {}
    dropped, unknown = set(), []
    for key, value in sd.items():
        prefix, _, rest = str(key).partition(".")
        if prefix in PREFIXES and torch.is_tensor(value):
            groups.setdefault(prefix, {})[rest] = value
        elif prefix in DROPPED:
            dropped.add(prefix)
        else:
            unknown.append(str(key))
    if unknown:
        raise CheckpointError(f"checkpoint {path}: keys of no module this package has ({', '.join(unknown[:3])}"
                              f"{', ...' if len(unknown) > 3 else ''}); it reads backbone.*, projector.* and "
                              "gating_head.* (a SimCLR, NCL or BayesNCL checkpoint of the released code)")
    for prefix in ("backbone", "projector"):
        if prefix not in groups:
            raise CheckpointError(f"checkpoint {path}: no {prefix}.* keys; is this a checkpoint of the released code?")
    return groups, sorted(dropped)


def backbone_shape(bb: dict, path: Path) -> dict:
    """arch, width and stem of a released ResNet backbone, from its keys and shapes."""
    from ..model.backbones import ARCHS

    if "conv1.weight" not in bb or "layer1.0.conv1.weight" not in bb:
        some = ", ".join(f"backbone.{k}" for k in list(bb)[:2])
        raise CheckpointError(f"checkpoint {path}: the backbone is not a ResNet ({some}, ...); only ResNet-18 and "
                              "ResNet-50 map to this package's backbones")
    blocks = [len({int(m.group(1)) for k in bb if (m := re.match(rf"layer{i}\.(\d+)\.", k))}) for i in range(1, 5)]
    bottleneck = "layer1.0.conv3.weight" in bb
    arch = next((a for a, (block, layers) in ARCHS.items()
                 if layers == blocks and (block.expansion == 4) == bottleneck), None)
    if arch is None:
        raise CheckpointError(f"checkpoint {path}: a ResNet with {blocks} {'Bottleneck' if bottleneck else 'Basic'} "
                              f"blocks per stage; only ResNet-18 and ResNet-50 map ({', '.join(ARCHS)})")
    conv1 = bb["conv1.weight"]
    kernel = tuple(conv1.shape[-2:])
    stems = {(3, 3): "cifar", (7, 7): "imagenet"}
    if conv1.ndim != 4 or kernel not in stems:
        raise CheckpointError(f"checkpoint {path}: backbone.conv1.weight has shape {tuple(conv1.shape)}; the CIFAR "
                              "stem has a 3x3 kernel, the ImageNet stem a 7x7 one")
    return {"arch": arch, "width": int(conv1.shape[0]), "stem": stems[kernel]}


def _linears(group: dict, name: str, path: Path) -> list[tuple[int, int]]:
    """(out, in) of each Linear of a Linear/ReLU stack saved as <i>.weight, <i>.bias at i = 0, 2, 4, ..."""
    idx = sorted({int(k.split(".")[0]) for k in group if k.split(".")[0].isdigit()})
    expected = {f"{i}.{p}" for i in idx for p in ("weight", "bias")}
    if not idx or idx != list(range(0, 2 * len(idx), 2)) or set(group) != expected \
            or any(group[f"{i}.weight"].ndim != 2 for i in idx):
        raise CheckpointError(f"checkpoint {path}: {name}.* is not a stack of Linear layers with ReLU between them "
                              f"(keys {', '.join(sorted(group)[:4])}); this package's {name} is Linear, ReLU, Linear")
    return [tuple(group[f"{i}.weight"].shape) for i in idx]


def _carried(key: str, theirs: str, v, path: Path, sets: dict):
    """The released value of `theirs` for our `key`: carried where this package takes it, None where `--set key`
    gives the value instead, else refused in one line."""
    from ..settings.config import RULES

    check, allowed = RULES[key]
    if key in sets:
        return None
    if isinstance(v, (int, float)) and not isinstance(v, bool) and check(float(v)):
        return float(v)
    raise CheckpointError(f"checkpoint {path}: {theirs} is {v!r}, not a value of {key} ({allowed}); give "
                          f"--set {key}=VALUE to record another")


def check_shapes_against_hp(model: dict, hp: dict, path: Path) -> None:
    """The released settings the weights' shapes also say (sizes, backbone, the stem the dataset picks) must
    agree with them: a disagreement is an args.json of another run."""
    mk = hp.get("method_kwargs") or {}
    dataset = (hp.get("data") or {}).get("dataset")
    stem = ("cifar" if dataset in SOLO_CIFAR else "imagenet") if dataset else None
    said = {"method_kwargs.proj_hidden_dim": ("proj_hidden", mk.get("proj_hidden_dim"), ""),
            "method_kwargs.proj_output_dim": ("proj_dim", mk.get("proj_output_dim"), ""),
            "backbone.name": ("arch", (hp.get("backbone") or {}).get("name"), ""),
            "data.dataset": ("stem", stem, f" (the released code gives it the {stem} stem)")}
    for theirs, (ours, v, why) in said.items():
        if v is not None and v != model[ours]:
            shown = dataset if theirs == "data.dataset" else v
            raise CheckpointError(f"checkpoint {path}: {theirs} is {shown!r}{why}, but its weights' shapes give "
                                  f"model.{ours} = {model[ours]!r}; give the args.json of the run that saved these "
                                  "weights")


def _builtin(trait) -> str:
    """The built-in method with a trait (the registry's one list of names)."""
    return registry.METHODS.names(lambda s: not s.module and trait(s))[0]


def infer(groups: dict, hp: dict, path: Path, sets: dict) -> tuple[dict, list[str], set[str]]:
    """The run config the checkpoint describes (nested, partial), the flags, and the keys read from shapes."""
    flags: list[str] = []
    model = backbone_shape(groups["backbone"], path)
    from ..model.backbones import build_backbone

    out_dim = build_backbone(**model).out_dim
    proj = _linears(groups["projector"], "projector", path)
    if len(proj) != 2 or proj[0][1] != out_dim or proj[1][1] != proj[0][0]:
        raise CheckpointError(f"checkpoint {path}: the projector's layers are (out, in) {proj}; a "
                              f"{model['arch']} of width {model['width']} gives {out_dim} features, so this "
                              f"package's projector is ({out_dim} -> hidden -> D)")
    model.update(proj_hidden=proj[0][0], proj_dim=proj[1][0])
    method: dict = {}
    mk = hp.get("method_kwargs", {}) if hp else {}
    if not isinstance(mk, dict):
        raise CheckpointError(f"checkpoint {path}: method_kwargs is {str(mk)[:40]!r}, not a mapping; give the args.json "
                              "the released code wrote")
    gated = "gating_head" in groups
    if hp:
        check_shapes_against_hp(model, hp, path)
        if mk.get("use_bayes") and mk.get("use_topk"):
            raise CheckpointError(f"checkpoint {path}: method_kwargs use_bayes and use_topk both set; this package "
                                  "has no gated Top-k method")
        if bool(mk.get("use_bayes")) != gated:
            raise CheckpointError(f"checkpoint {path}: method_kwargs.use_bayes is {mk.get('use_bayes')!r} but the "
                                  f"state dict has {'a' if gated else 'no'} gating_head; the two must agree")
        nn = mk.get("non_neg")
        if nn is None:
            if mk.get("use_bayes") or mk.get("use_topk"):
                raise CheckpointError(f"checkpoint {path}: method_kwargs.non_neg is null with a gate or a top-k "
                                      f"mask; this package builds those on z+ ({' or '.join(NONNEG)})")
            method["name"] = _builtin(lambda s: not s.nonnegative)
        elif nn not in NONNEG:
            raise CheckpointError(f"checkpoint {path}: method_kwargs.non_neg {nn!r}; this package's "
                                  f"method.nonneg is {' or '.join(NONNEG)}")
        else:
            method["nonneg"] = nn
            method["name"] = _builtin(lambda s: s.gated) if gated else (
                _builtin(lambda s: s.masked) if mk.get("use_topk") else _builtin(lambda s: s.reference))
        if mk.get("use_topk"):
            k = mk.get("topk_k")
            if not isinstance(k, int) or isinstance(k, bool) or k < 1:
                raise CheckpointError(f"checkpoint {path}: method_kwargs.topk_k {str(k)[:20]!r} is not a positive whole "
                                      "number; the released top-k mask needs one")
            method["topk_k"] = k
        if "temperature" in mk:
            t = mk["temperature"]
            if _number(t) and 0 < t < math.inf:
                method["temperature"] = float(t)
            else:
                flags.append(f"method.temperature: the released temperature is {str(t)[:20]!r}, not a value this "
                             "package takes; the config's value is kept")
        if gated:
            gate = mk.get("gate_type", "STE")
            if not isinstance(gate, str) or gate not in GATES:
                raise CheckpointError(f"checkpoint {path}: method_kwargs.gate_type {gate!r}; the released gates "
                                      f"are {', '.join(GATES)}")
            method["gate"] = GATES[gate]
            threshold = mk.get("gate_threshold", RELEASED_THRESHOLD)
            if threshold != RELEASED_THRESHOLD or isinstance(threshold, bool):
                raise CheckpointError(f"checkpoint {path}: method_kwargs.gate_threshold {threshold!r}; this package's "
                                      f"gate opens at {RELEASED_THRESHOLD} (docs/METHOD.md section 1) and has no "
                                      "setting for another, so its features would not be the released run's")
            opt = _mapping(hp.get("optimizer"))
            # the released default of gating_head_lr is optimizer.lr (solo/methods/simclr.py)
            lr_key = "optimizer.gating_head_lr" if "gating_head_lr" in opt else "optimizer.lr"
            # absent: the released defaults (solo/methods/simclr.py, add_and_assert_specific_cfg), all 0.0
            for ours, theirs, v in (("rho", "method_kwargs.bayesian_prior_prob", mk.get("bayesian_prior_prob", 0.0)),
                                    ("lambda", "method_kwargs.bayesian_kl_lambda", mk.get("bayesian_kl_lambda", 0.0)),
                                    ("tau_g", "method_kwargs.sigmoid_temperature", mk.get("sigmoid_temperature", 0.0)),
                                    ("head_lr", lr_key, opt.get(lr_key.split(".")[1]))):
                method[ours] = _carried(f"method.{ours}", theirs, v, path, sets)
            method = {k: v for k, v in method.items() if v is not None}
            method["detach"] = True  # the released gating head always reads h with its gradient stopped
    else:
        if gated:
            method["name"] = _builtin(lambda s: s.gated)
            method["detach"] = True
            flags.append("method.gate, method.rho, method.lambda, method.nonneg: no hyper-parameters (neither in "
                         "the checkpoint nor an args.json beside it); this package's defaults are recorded")
        elif "method.name" not in sets:
            names = " | ".join(registry.METHODS.names(lambda s: not s.module and not s.gated))
            raise CheckpointError(f"checkpoint {path}: no hyper-parameters and no gating head, so the method is "
                                  f"not known; give --args args.json or --set method.name=<{names}>")
        else:
            flags.append("method.nonneg: no hyper-parameters; this package's default is recorded")
    if gated:
        head = _linears(groups["gating_head"], "gating_head", path)
        depth = len(head)
        if depth not in (1, 2, 3) or head[0][1] != out_dim or head[-1][0] != model["proj_dim"]:
            raise CheckpointError(f"checkpoint {path}: the gating head's layers are (out, in) {head}; it must map the "
                                  f"{out_dim} backbone features to D = {model['proj_dim']} in 1 to 3 layers")
        hid = model["proj_hidden"]
        want = {1: [], 2: [hid], 3: [hid, max(hid // 2, 1)]}[depth]
        if [o for o, _ in head[:-1]] != want:
            raise CheckpointError(f"checkpoint {path}: the gating head's hidden widths are "
                                  f"{[o for o, _ in head[:-1]]}; this package's head of depth {depth} has {want} "
                                  f"(the projector's hidden width {hid})")
        method["head_depth"] = depth
    shaped = {f"model.{k}" for k in model} | ({"method.head_depth"} if gated else set())
    if model["stem"] == "cifar":  # solo/methods/base.py: every released CIFAR backbone pads conv1 by 2
        model["cifar_padding"] = RELEASED_CIFAR_PADDING
    partial = {"model": model, "method": method}
    return partial, flags, shaped


def import_checkpoint(path: str | Path, file: str | Path | None = None, sets: list[str] | tuple = (),
                      args: str | Path | None = None, base: dict | None = None,
                      overrides: dict | None = None) -> Imported:
    """A released checkpoint as a validated run config and this package's state dict. The config is laid in
    layers: defaults <- `file` <- `base` (the data, training and evaluation settings a workflow gives every run)
    <- what the checkpoint says <- `overrides` <- `sets` (--set). An override that contradicts the checkpoint's
    shapes is refused."""
    from ..settings.config import DEFAULTS, merge, validate
    from ..core.yamlio import parse_set
    from ..model.methods import build_method

    path = Path(path)
    ckpt = read(path)
    sd = ckpt.get("state_dict", ckpt)
    if not isinstance(sd, dict):
        raise CheckpointError(f"checkpoint {path}: its state_dict is a {type(sd).__name__}, not a dict")
    groups, dropped = split_state(sd, path)
    hp, source = hyper_parameters(ckpt, path, args)
    given = {**flatten(overrides or {}), **dict(parse_set(s) for s in sets)}
    partial, flags, shaped = infer(groups, hp, path, given)
    want_shape = flatten(partial)
    for key in sorted(shaped & set(given)):
        if given[key] != want_shape[key]:
            raise CheckpointError(f"{key}={given[key]}: the checkpoint {path} has {key} = {want_shape[key]} (its "
                                  "shapes); leave the key out")
    try:
        layers = resolve(file=file) if file is not None else copy.deepcopy(DEFAULTS)
        for layer in (base, partial, overrides):
            merge(layers, copy.deepcopy(layer or {}))
        cfg = resolve(base=layers, sets=sets) if sets else validate(layers)
    except ConfigError as e:
        raise ConfigError(f"checkpoint {path}: {e}") from None
    state = {f"{PREFIXES[p]}.{k}": v for p, g in groups.items() for k, v in g.items()}
    model = build_method(cfg)
    want = model.state_dict()
    missing = [k for k in want if k not in state]
    extra = [k for k in state if k not in want]
    bad = [k for k in want if k in state and tuple(state[k].shape) != tuple(want[k].shape)]
    if missing or extra or bad:
        what = (f"missing {', '.join(missing[:3])}" if missing else
                f"unexpected {', '.join(extra[:3])}" if extra else
                f"{bad[0]} has shape {tuple(state[bad[0]].shape)}, the model expects {tuple(want[bad[0]].shape)}")
        raise CheckpointError(f"checkpoint {path}: its weights do not fit the {cfg['method']['name']} model its "
                              f"config describes ({what})")
    trained_on = _mapping(hp.get("data")).get("dataset") if hp else None
    if trained_on and trained_on != cfg["data"]["dataset"]:
        flags.append(f"data.dataset: the released run trained on {trained_on}; evaluated here on "
                     f"{cfg['data']['dataset']}")
    if not source:
        flags.append("no hyper-parameters: temperature, dataset and training settings are this package's defaults")
    if dropped:
        flags.append(f"dropped {', '.join(p + '.*' for p in dropped)}: the online linear classifier, not part of "
                     "the method (the evaluation trains its own probe)")
    epoch = ckpt.get("epoch")
    return Imported(config=cfg, state={k: state[k] for k in want}, sha256=sha256_file(path), flags=flags,
                    epoch=int(epoch) + 1 if isinstance(epoch, int) else None)


def imported_record(imp: Imported, path: str | Path) -> dict:
    """What a model.pt says about where its weights came from (provenance)."""
    return {"source": str(path), "sha256": imp.sha256, "flags": list(imp.flags), "epochs": imp.epoch}


def write_run(imp: Imported, path: str | Path, out: str | Path, replace: bool = False) -> Path:
    """The run folder an import makes: model.pt (weights, config, the import record), config.resolved.yaml and
    an empty training log (an imported run has no epochs here); each file written atomically. A folder holding
    another run (trained, or imported from another checkpoint or with another config) is refused, or with
    `replace` replaced whole (bayesncl.runs.ownership)."""
    import yaml

    from ..core.atomic import atomic_write_text
    from .ownership import into, other_run
    from .files import CONFIG, FINAL, LOG, save

    out = Path(out)
    with into(out, other_run(out, imp.config, imported=imp.sha256), replace) as where:
        atomic_write_text(where / CONFIG, yaml.safe_dump(copy.deepcopy(imp.config), sort_keys=False))
        atomic_write_text(where / LOG, "")
        save({"config": imp.config, "model": imp.state, "epoch": imp.epoch or 0, "log": [],
              "imported": imported_record(imp, path)}, where / FINAL)
    return out / FINAL


__all__ = ["Imported", "import_checkpoint", "imported_record", "read", "sha256_file", "write_run"]
