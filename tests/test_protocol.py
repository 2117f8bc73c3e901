"""The released protocol around the losses (docs/METHOD.md sections 2 and 4): BatchNorm once per view in
training, BatchNorm at evaluation as a recorded setting, and the paper grid pinned to the released configs."""

import copy
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from bayesncl.settings import config as C
from bayesncl.model import losses
from bayesncl.grid.expand import expand_grid
from bayesncl.model.methods import build_method
from bayesncl.training.embed import bn_mode, embed
from bayesncl.core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def tiny(method="bayesncl", **over):
    sets = [f"method.name={method}", "model.width=4", "model.proj_hidden=16", "model.proj_dim=8",
            "train.batch_size=6", "eval.batch_size=5"]
    return C.resolve(sets=sets + [f"{k}={v}" for k, v in over.items()])


def norms(model):
    return [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]


def buffers(model):
    return [b.detach().clone() for b in model.buffers()]


# ------------------------------------------------------------------------------------------ per-view BatchNorm
@pytest.mark.parametrize("method", ["cl", "ncl", "topk_ncl", "bayesncl"])
def test_training_batchnorm_is_per_view_as_two_backbone_passes(method):
    """views_loss on [view 1; view 2] equals the released step written out: the backbone run on each view
    alone (BatchNorm over that view's N images, running statistics updated once per view), then the heads on
    both: loss, every gradient and the running statistics within 1e-6. A joint pass differs."""
    cfg = tiny(method)
    torch.manual_seed(0)
    model = build_method(cfg).train()
    ref = copy.deepcopy(model)
    joint = copy.deepcopy(model)
    x = torch.randn(12, 3, 16, 16)  # 6 images, two views
    n = 6

    loss, _ = model.views_loss(x)
    loss.backward()

    # the released step: one backbone pass per view, the heads on the concatenation
    h = torch.cat([ref.backbone(x[:n]), ref.backbone(x[n:])])
    out = {"h": h, "z": ref.projector(h)}
    out.update(ref.head(h, out["z"]))
    f = out["feature"]
    want = losses.info_nce(f[:n], f[n:], ref.temperature, normalized=True)
    want = want + sum(ref.extra_loss(out).values(), torch.zeros(()))
    want.backward()

    torch.testing.assert_close(loss, want, rtol=0, atol=1e-6)
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=0, atol=1e-6, msg=name)
    for a, b in zip(buffers(model), buffers(ref)):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    assert int(norms(model)[0].num_batches_tracked) == 2  # two updates per step, as two passes

    joint.cfg = {**joint.cfg, "train": {**joint.cfg["train"], "bn": "joint"}}  # the measured alternative
    joint_loss, _ = joint.views_loss(x)
    assert int(norms(joint)[0].num_batches_tracked) == 1
    assert abs(float(joint_loss) - float(loss)) > 1e-4  # one pass over both views: other statistics


# --------------------------------------------------------------------------------------- evaluation BatchNorm
def _dataset(n=13, size=16, seed=0):
    from bayesncl.data import ImageSet

    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (n, 3, size, size), dtype=torch.uint8, generator=g)
    return ImageSet(images=x, dataset=None, labels=torch.arange(n) % 3, backgrounds=None, num_classes=3,
                    num_backgrounds=0, mean=(0.5,) * 3, std=(0.25,) * 3, crop_size=size, name="toy")


def _trained_a_little(cfg):
    torch.manual_seed(0)
    model = build_method(cfg).train()
    with torch.no_grad():  # running statistics far from any batch's, so the two modes differ
        for m in norms(model):
            m.running_mean.fill_(0.3)
            m.running_var.fill_(2.0)
    return model


def test_eval_bn_batch_uses_each_batch_statistics_and_keeps_the_saved_state():
    """eval.bn=batch: every batch of train.batch_size images (dataset order, last one partial) is normalised
    with its own statistics, as the released evaluation script (never in eval mode); the running statistics,
    the weights and the model's mode are as before. eval.bn=running: eval mode."""
    from bayesncl.data import eval_transform

    cfg = tiny("bayesncl")
    model = _trained_a_little(cfg).eval()
    ds = _dataset()
    before = buffers(model) + [p.detach().clone() for p in model.parameters()]

    got, = embed(model, ds, cfg, torch.device("cpu"), key="feature", bn="batch")
    after = buffers(model) + [p.detach().clone() for p in model.parameters()]
    assert all(torch.equal(a, b) for a, b in zip(before, after))
    assert not model.training

    # the reference: a copy whose BatchNorm layers alone are in train mode, batch by batch of 6 (6, 6, 1)
    ref = copy.deepcopy(model).eval()
    for m in norms(ref):
        m.train()
    x = eval_transform(ds.images, ds.mean, ds.std, ds.crop_size)
    with torch.no_grad():
        want = torch.cat([ref(x[i:i + 6])["feature"] for i in range(0, 13, 6)])
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6)

    running, = embed(model, ds, cfg, torch.device("cpu"), key="feature", bn="running")
    with torch.no_grad():
        torch.testing.assert_close(running, model.eval()(x)["feature"], rtol=0, atol=1e-6)
    assert not torch.allclose(running, got, atol=1e-3)  # the mode matters here
    # the batch is the training batch, not eval.batch_size: another eval.batch_size changes nothing
    other_cfg = {**cfg, "eval": {**cfg["eval"], "batch_size": 2}}
    other, = embed(model, ds, other_cfg, torch.device("cpu"), key="feature", bn="batch")
    torch.testing.assert_close(other, got, rtol=0, atol=0)


def test_bn_mode_restores_a_training_model_and_rejects_unknown_modes():
    model = _trained_a_little(tiny("ncl")).train()
    with bn_mode(model, "batch"):
        assert not model.training and all(m.training for m in norms(model))
    assert model.training and all(m.training for m in norms(model))
    with pytest.raises(ConfigError, match="eval.bn"):
        with bn_mode(model, "train"):
            pass


def test_evaluation_files_record_the_batchnorm_mode(tmp_path, tiny_sets):
    """features.json, interpretability.json and retrieval.json say which mode made their features, and a cache
    made with one mode is not read as the other."""
    import json

    from bayesncl.evaluation.runner import evaluate
    from bayesncl.training.train import pretrain

    cfg = C.resolve(sets=tiny_sets + ["method.name=bayesncl", "train.epochs=1"])
    run = tmp_path / "run"
    ckpt = pretrain(cfg, run, progress=False)
    out = run / "eval"
    evaluate(ckpt, out, only=["features", "interpretability", "retrieval"], progress=False)
    for name in ("features", "interpretability", "retrieval"):
        data = json.loads((out / f"{name}.json").read_text())
        assert data["run"]["eval_bn"] == "batch", name
    assert json.loads((out / "features.json").read_text())["features"]["bn"] == "batch"
    assert json.loads((out / "interpretability.json").read_text())["interpretability"]["bn"] == "batch"
    assert json.loads((out / "retrieval.json").read_text())["retrieval"]["bn"] == "batch"
    with pytest.raises(ConfigError, match="eval.bn=batch"):
        evaluate(ckpt, out, only=["interpretability"], sets=["eval.bn=running"], progress=False)


# ----------------------------------------------------------------------------------- the paper grid, pinned
# The released values (Cui-Peng-624/BayesNCL), each with the file it comes from. lr is the peak lr after the
# released batch scaling (solo/args/pretrain.py: lr x batch / 256); the gating head's is not scaled.
RELEASED = {
    "cifar": {  # scripts/pretrain/cifar/ncl.yaml (+ augmentations/symmetric.yaml), solo/methods/base.py defaults
        "model.proj_hidden": 2048,               # method_kwargs.proj_hidden_dim
        "model.proj_dim": 256,                   # method_kwargs.proj_output_dim
        "model.cifar_padding": 2,                # solo/methods/base.py: conv1 = Conv2d(3, 64, 3, 1, padding=2)
        "method.temperature": 0.2,               # method_kwargs.temperature
        "method.nonneg": "rep_relu",             # method_kwargs.non_neg
        "method.head_lr": 0.1,                   # optimizer.gating_head_lr
        "train.base_lr": 0.4,                    # optimizer.lr
        "train.batch_size": 256,                 # optimizer.batch_size
        "train.epochs": 200,                     # max_epochs
        "train.weight_decay": 1.0e-4,            # optimizer.weight_decay
        "train.trust_coeff": 0.02,               # optimizer.kwargs.eta
        "train.warmup_epochs": 10,               # solo/methods/base.py: scheduler.warmup_epochs default
        "train.warmup_start_lr": 3.0e-5,         # solo/methods/base.py: scheduler.warmup_start_lr default
        "train.momentum": 0.9,                   # solo/args/pretrain.py: lars momentum default
        "train.crop_min_scale": 0.08,            # augmentations/symmetric.yaml: rrc.crop_min_scale
        "peak_lr": 0.4,                          # 0.4 x 256 / 256
    },
    "imagenet100": {  # scripts/pretrain/imagenet-100/ncl.yaml
        "model.proj_hidden": 16384,
        "model.proj_dim": 2048,
        "method.temperature": 0.2,
        "method.nonneg": "relu",                 # method_kwargs.non_neg: relu (not rep_relu)
        "method.head_lr": 0.1,                   # optimizer.gating_head_lr
        "train.base_lr": 0.3,
        "train.epochs": 100,
        "train.weight_decay": 1.0e-4,
        "train.trust_coeff": 0.02,
        "train.warmup_epochs": 10,
        "train.warmup_start_lr": 3.0e-5,
        "train.momentum": 0.9,
        "train.crop_min_scale": 0.08,
    },
    # the BayesNCL settings (the paper's defaults, docs/METHOD.md section 1: rho 0.8, lambda 3e-5, tau_g 1,
    # gate_threshold 0.5, STE, detach, 2-layer head)
    "bayesncl": {"method.rho": 0.8, "method.lambda": 3.0e-5, "method.tau_g": 1.0, "method.gate": "ste",
                 "method.detach": True, "method.head_depth": 2},
}
# Where the paper grid departs from the released configs on purpose (docs/METHOD.md, [choice] entries).
DEPARTURES = {
    "imagenet100": {
        # released: batch 128 on one GPU (lr 0.3 x 128 / 256 = 0.15); the paper grid trains at 256 (lr 0.3)
        "train.batch_size": (128, 256),
        "peak_lr": (0.15, 0.3),
    },
    # released precision 16 (fp16 autocast); here bf16 on GPUs that support it ("auto")
    "all": {"train.precision": ("fp16", "auto")},
}


def _paper_runs():
    import yaml

    grid = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())
    return list(expand_grid(grid).values())


def _get(cfg, key):
    from bayesncl.training.optim import peak_lr

    if key == "peak_lr":
        return peak_lr(cfg["train"])
    section, _, name = key.partition(".")
    node = cfg[section]
    for part in name.split("."):
        node = node[part]
    return node


@pytest.mark.parametrize("dataset", ["cifar10", "cifar100", "imagenet100"])
def test_paper_grid_uses_the_released_values(dataset):
    """Every run of config/paper.yaml's main comparison on `dataset` resolves to the released values, and the
    BayesNCL runs to the paper's method settings; what differs is listed in DEPARTURES."""
    runs = [r for r in _paper_runs() if r.config["data"]["dataset"] == dataset and "table1" in r.sets]
    assert runs, dataset
    want = dict(RELEASED["imagenet100" if dataset == "imagenet100" else "cifar"])
    for key, (released, ours) in DEPARTURES.get(dataset, {}).items():
        assert want.pop(key, released) == released
        want[key] = ours
    for run in runs:
        cfg = run.config
        for key, value in want.items():
            if key.startswith("method.") and cfg["method"]["name"] == "cl" and key == "method.nonneg":
                continue
            assert _get(cfg, key) == pytest.approx(value) if isinstance(value, float) else _get(cfg, key) == value, \
                (run.run_id, key)
        if cfg["method"]["name"] == "bayesncl" and "BayesNCL (STE)" in run.labels.values():
            for key, value in RELEASED["bayesncl"].items():
                assert _get(cfg, key) == value, (run.run_id, key)
        assert cfg["train"]["precision"] == DEPARTURES["all"]["train.precision"][1]
        assert cfg["eval"]["bn"] == "batch"  # Tables 1, 4, 5 as the released evaluation computed them
    # the exclusions from weight decay and LARS (optimizer.kwargs.exclude_bias_n_norm: True): every 1-D tensor
    from bayesncl.training.optim import build_optimizer

    small = copy.deepcopy(runs[-1].config)
    small["model"].update(width=4, proj_hidden=16, proj_dim=8)
    opt = build_optimizer(build_method(small), small)
    for g in opt.param_groups:
        assert all((p.ndim <= 1) == (g["weight_decay"] == 0.0) for p in g["params"])


def test_every_cifar_run_of_the_paper_grid_has_the_released_stem_and_the_demo_keeps_its_own():
    """config/paper.yaml: every CIFAR run (Table 5's ResNet-50 too) pads conv1 by 2 as released, ImageNet-100's stem
    reads no padding; the demo grid keeps 1 (docs/METHOD.md section 2, [choice]), so its run ids and rerun
    triggers are those of before the key (config.KEYS_ADDED)."""
    import yaml

    from bayesncl.grid.expand import trigger_config

    pads = {(r.config["data"]["dataset"], r.config["model"]["arch"], r.config["model"]["cifar_padding"])
            for r in _paper_runs()}
    assert pads == {("cifar10", "resnet18", 2), ("cifar100", "resnet18", 2), ("cifar100", "resnet50", 2),
                    ("imagenet100", "resnet18", 1)}
    assert C.KEYS_ADDED["model.cifar_padding"] == 1
    demo = expand_grid(yaml.safe_load((ROOT / "config" / "config.yaml").read_text()))
    for run in demo.values():
        assert run.config["model"]["cifar_padding"] == 1 and "cifar_padding" not in run.run_id
        assert "cifar_padding" not in trigger_config(run.config)["model"]
    paper = next(r for r in _paper_runs() if r.config["data"]["dataset"] == "cifar10")
    assert trigger_config(paper.config)["model"]["cifar_padding"] == 2  # the released network: another run
