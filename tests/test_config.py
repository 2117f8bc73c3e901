"""The run config: one typed definition, its derived defaults and checks, and the synthetic generator's limits."""

from __future__ import annotations

import copy
import re

import numpy as np
import pytest
import torch

import bayesncl.data.synthetic as S
from bayesncl.settings import config as C
from bayesncl.settings import registry
from bayesncl.settings.config import DEFAULTS, RULES, resolve, validate
from bayesncl.data import load_split
from bayesncl.core.errors import ConfigError, DataError
from bayesncl.core.yamlio import nest


def _with(key: str, value) -> dict:
    cfg = copy.deepcopy(DEFAULTS)
    *path, last = key.split(".")
    node = cfg
    for p in path:
        node = node[p]
    node[last] = value
    return cfg


def _accepts(key: str, value) -> bool:
    """Whether a run config with `key` = `value` resolves (the path a YAML file or `--set` takes)."""
    try:
        resolve(base=nest({key: value}))
    except ConfigError:
        return False
    return True


# ------------------------------------------------------------------------------------------ defaults
def test_defaults_round_trip_and_validate():
    assert resolve() == DEFAULTS
    assert C.as_dict(C.Config()) == DEFAULTS
    assert validate(copy.deepcopy(DEFAULTS)) == DEFAULTS
    # Config keys, not Python names: `lambda` is a keyword in Python.
    assert DEFAULTS["method"]["lambda"] == 3.0e-5 and "lambda_" not in DEFAULTS["method"]
    # One check per key of the defaults, and no check for a key that has no default.
    assert list(RULES) == list(C.flatten(DEFAULTS))


def test_choices_come_from_the_definition():
    for name in registry.training_datasets():
        assert resolve(sets=[f"data.dataset={name}", "data.root=/data"])["data"]["dataset"] == name
    for name in registry.METHODS:
        assert resolve(sets=[f"method.name={name}"])["method"]["name"] == name
    # Waterbirds is read (background probe), never trained on.
    assert "waterbirds" in registry.DATASETS and "waterbirds" not in registry.training_datasets()
    with pytest.raises(ConfigError) as err:
        resolve(sets=["data.dataset=waterbirds", "data.root=/data"])
    assert str(err.value) == ("data.dataset: got 'waterbirds', expected one of "
                              "synthetic, cifar10, cifar100, imagenet100, imagefolder; a plugin's dataset: name its "
                              "module with --plugin FILE.py (or $BAYESNCL_PLUGINS) by hand, or in the workflow "
                              "config's plugins: list; `bayesncl list` shows what is loaded")


# ------------------------------------------------------------------------------------------ per-key checks
@pytest.mark.parametrize("key", list(RULES))
def test_every_key_rejects_a_wrong_type_naming_the_key(key):
    wrong = 12 if RULES[key][0]("a string") else "a string"
    with pytest.raises(ConfigError, match=rf"^{re.escape(key)}: got {re.escape(repr(wrong))}, expected "):
        validate(_with(key, wrong))
    # The same through `--set`, where the value is YAML.
    with pytest.raises(ConfigError, match=rf"^{re.escape(key)}: got "):
        resolve(sets=[f"{key}={wrong!r}" if isinstance(wrong, str) else f"{key}={wrong}"])


def test_error_says_what_is_allowed():
    with pytest.raises(ConfigError) as err:
        resolve(sets=["method.rho=1.5"])
    assert str(err.value) == "method.rho: got 1.5, expected a number strictly between 0 and 1"
    with pytest.raises(ConfigError) as err:
        resolve(sets=["method.topk_k=0"])
    assert str(err.value) == "method.topk_k: got 0, expected a positive integer or null (round(D / 10))"


RANGES = [  # key, accepted, rejected
    ("method.rho", [1e-6, 0.5, 1 - 1e-6], [0, 1, 1.5, -0.1]),
    ("method.lambda", [0, 3e-5], [-1e-9, float("nan"), float("inf")]),
    ("method.tau_g", [1e-3, 1], [0, float("inf")]),
    ("method.head_depth", [1, 2, 3], [0, 4, 2.0, True]),
    ("method.topk_k", [None, 1], [0, -3, 1.5]),
    ("train.momentum", [0, 0.99], [1, -0.1]),
    ("train.crop_min_scale", [1, 0.01], [0, 1.01]),
    ("train.batch_size", [2], [1, 0]),
    ("train.warmup_epochs", [0], [-1]),
    ("train.epochs", [0, 1], [-1, 1.0, True]),  # 0: the random-init reference
    ("model.width", [1], [0]),
    ("eval.retrieval_k", [None, 1], [0]),
    ("seed", [0], [-1]),
    ("data.classes", [None, "classes.txt", ["n01440764"]], [[], [1], 3]),
    ("data.synthetic.num_classes", [2, C.SYNTHETIC_SHAPES], [1, C.SYNTHETIC_SHAPES + 1]),
    ("data.synthetic.num_backgrounds", [2, C.SYNTHETIC_TEXTURES], [0, C.SYNTHETIC_TEXTURES + 1]),
    ("data.synthetic.num_common", [0, 1], [-1]),
    ("data.synthetic.prevalence", [0, 1, 0.5], [-0.01, 1.01]),
    ("data.synthetic.image_size", [8], [7]),
    ("data.synthetic.train_size", [1], [0]),
]


@pytest.mark.parametrize("key,good,bad", RANGES, ids=[r[0] for r in RANGES])
def test_range_ends(key, good, bad):
    for v in good:
        assert _accepts(key, v), (key, v)
    for v in bad:
        assert not _accepts(key, v), (key, v)


def test_unknown_key_names_it_and_lists_the_known_ones(tmp_path):
    with pytest.raises(ConfigError) as err:
        resolve(sets=["method.rhoo=0.5"])
    msg = str(err.value)
    assert msg.startswith("method.rhoo: unknown key; known keys here: ")
    assert set(msg.split(": ")[-1].split(", ")) == set(DEFAULTS["method"])
    path = tmp_path / "c.yaml"
    path.write_text("data:\n  synthetic:\n    colours: 3\n")
    with pytest.raises(ConfigError, match=r"^data\.synthetic\.colours: unknown key; known keys here: .*num_common"):
        resolve(file=path)
    with pytest.raises(ConfigError, match=r"^train: expected a mapping of epochs, "):
        resolve(base={"train": 3})


def test_yaml_string_float_is_read_as_a_number(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("method: {lambda: 3e-5, rho: 5e-1}\ntrain: {weight_decay: 1e-4}\n")  # YAML 1.1: strings
    cfg = resolve(file=path)
    assert cfg["method"]["lambda"] == 3e-5 and cfg["method"]["rho"] == 0.5 and cfg["train"]["weight_decay"] == 1e-4
    assert resolve(sets=["method.lambda=4e-5"])["method"]["lambda"] == 4e-5
    # Only where a number is expected: a string stays a string elsewhere, and the check names the key.
    assert resolve(sets=["data.dataset=cifar10", "data.root=1e3"])["data"]["root"] == "1e3"
    with pytest.raises(ConfigError, match=r"^train\.epochs: got '3e2', expected an integer >= 0$"):
        resolve(base={"train": {"epochs": "3e2"}})
    with pytest.raises(ConfigError, match=r"^method\.rho: got 'high', expected "):
        resolve(base={"method": {"rho": "high"}})


# ------------------------------------------------------------------------------------------ cross-key rules
def test_cross_key_rules():
    with pytest.raises(ConfigError, match=r"^data\.root: dataset 'cifar10' needs a root path"):
        resolve(sets=["data.dataset=cifar10"])
    with pytest.raises(ConfigError) as err:
        resolve(sets=["data.synthetic.num_backgrounds=3", "data.synthetic.num_common=4"])
    assert str(err.value) == ("data.synthetic.num_common: got 4, expected an integer in "
                              "[0, data.synthetic.num_backgrounds = 3]")
    # All backgrounds common is what the generator draws (uniform over all of them).
    assert resolve(sets=["data.synthetic.num_backgrounds=3", "data.synthetic.num_common=3"])
    assert resolve(sets=["data.synthetic.num_backgrounds=1", "data.synthetic.num_common=0"])
    with pytest.raises(ConfigError, match=r"^method\.topk_k: k = 65 must lie in \[1, model\.proj_dim = 64\]"):
        resolve(sets=["method.name=topk_ncl", "model.proj_dim=64", "method.topk_k=65"])
    assert resolve(sets=["method.name=ncl", "model.proj_dim=64", "method.topk_k=65"])  # k is Top-k NCL's only


# ------------------------------------------------------------------------------------------ the generator agrees
SYN_VALUES = [-1, 0, 1, 2, 6, 7, 8, 9, 13, 14, 0.5, 1.0, "0.5", "8", True, None, float("nan")]


@pytest.mark.parametrize("key", list(DEFAULTS["data"]["synthetic"]))
def test_config_and_generator_accept_the_same_synthetic_values(key):
    def error(fn):
        try:
            fn()
        except (ConfigError, DataError) as e:
            return str(e)
        return None

    for v in SYN_VALUES:
        by_config = error(lambda: resolve(base={"data": {"synthetic": {key: v}}}))
        by_generator = error(lambda: S.resolve_params({key: v}))
        assert by_config == by_generator, (key, v)  # both accept, or both reject with one message
        assert by_config is None or by_config.startswith("data.synthetic."), by_config


def test_num_common_zero_draws_every_background_at_the_smallest_size(tmp_path):
    cfg = resolve(sets=["data.synthetic.num_common=0", "data.synthetic.image_size=8", "data.synthetic.num_classes=2",
                        "data.synthetic.num_backgrounds=3", "data.synthetic.train_size=300",
                        "data.synthetic.test_size=4", f"data.cache_dir={tmp_path}"])
    tr = load_split(cfg["data"], "train")
    assert tr.images.shape == (300, 3, 8, 8) and tr.num_classes == 2
    counts = torch.bincount(tr.backgrounds, minlength=3)
    assert counts.min() > 70  # uniform over all three (100 each expected), not only the first num_common


def test_generator_params_are_coerced_so_the_cache_key_is_stable(tmp_path):
    a = S.synthetic_cache_path({"seed": np.int64(3), "prevalence": 1}, tmp_path)
    assert a == S.synthetic_cache_path({"seed": 3, "prevalence": 1.0}, tmp_path)
    p = S.resolve_params({"seed": np.int64(3), "prevalence": 1})
    assert type(p["seed"]) is int and type(p["prevalence"]) is float
    assert p == {**DEFAULTS["data"]["synthetic"], "seed": 3, "prevalence": 1.0}


def test_the_cifar_padding_is_the_cifar_stem_s_only():
    """model.cifar_padding pads the CIFAR stem's conv1; with the ImageNet stem only its default is taken (a
    padding read by no network must not tell two runs apart)."""
    assert resolve(sets=["model.cifar_padding=2"])["model"]["cifar_padding"] == 2
    assert resolve(sets=["model.cifar_padding=0"])["model"]["cifar_padding"] == 0
    assert resolve(sets=["model.stem=imagenet"])["model"]["cifar_padding"] == 1
    with pytest.raises(ConfigError) as e:
        resolve(sets=["model.stem=imagenet", "model.cifar_padding=2"])
    assert str(e.value) == ("model.cifar_padding: 2 pads the CIFAR stem, and model.stem is 'imagenet' (torchvision's "
                            "7x7 conv1); leave it at 1 or set model.stem=cifar")
    for bad in (-1, 4, 1.5):
        with pytest.raises(ConfigError, match="model.cifar_padding"):
            resolve(sets=[f"model.cifar_padding={bad}"])


def test_the_runtime_keys_tell_no_runs_apart():
    """Where things run and how they are evaluated (config.RUNTIME_KEYS) never retrain a run: another data.root,
    cache folder, thread count, device or train.deterministic leaves the pretraining trigger as it was."""
    from bayesncl.grid.expand import trigger_config

    base = resolve(sets=["data.root=/a"])
    for key, value in (("data.root", "/b"), ("data.cache_dir", "/c"), ("train.threads", 3), ("train.device", "cpu"),
                       ("data.num_workers", 1), ("train.deterministic", True)):
        assert key.startswith(C.RUNTIME_KEYS), key
        other = resolve(sets=["data.root=/a", f"{key}={value}"])
        assert trigger_config(other) == trigger_config(base), key


# ------------------------------------------------------------------------------------------ YAML in (yamlio)
EXPECTED = "expected a YAML text file of config keys (data:, model:, method:, train:, eval:)"


def test_a_yaml_file_that_is_not_one_is_one_whole_line(tmp_path):
    from bayesncl.core.yamlio import load_yaml_file

    bad = tmp_path / "bad.yaml"
    bad.write_text("a: 1\nb: [1, 2\nc: 3\n")  # the list's bracket never closed: YAML finds it on line 3
    cases = {tmp_path / "absent.yaml": f"config file {tmp_path / 'absent.yaml'} does not exist; {EXPECTED}",
             tmp_path: f"config file {tmp_path} is a folder; {EXPECTED}",
             bad: f"config file {bad}: not valid YAML at line 3 (expected ',' or ']', but got ':'); {EXPECTED}"}
    for path, line in cases.items():
        with pytest.raises(ConfigError) as e:
            load_yaml_file(path, "config file")
        assert str(e.value) == line


def test_a_set_value_that_is_not_yaml_is_one_whole_line_with_its_quoted_form():
    from bayesncl.core.yamlio import parse_set

    with pytest.raises(ConfigError) as e:
        parse_set("a.b=x: y: z")
    assert str(e.value) == ("--set a.b: value 'x: y: z' is not valid YAML (mapping values are not allowed here); give "
                            "a number, true/false, a closed [list], or quote a string: --set 'a.b=\"x: y: z\"'")
    assert parse_set('a.b="x: y: z"') == ("a.b", "x: y: z")  # the quoted form it offers is read as the string


def test_a_value_is_shown_whole_up_to_its_width_and_cut_to_it_beyond():
    from bayesncl.core.yamlio import shown

    exact, longer = "x" * 38, "x" * 39  # repr adds the two quotes: 40 and 41 characters
    assert shown(exact) == repr(exact) and len(shown(exact)) == 40
    assert shown(longer) == repr(longer)[:37] + "..." and len(shown(longer)) == 40
    assert shown("y" * 70, 60) == repr("y" * 70)[:57] + "..."
