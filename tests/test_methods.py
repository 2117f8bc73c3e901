"""Methods: registry, backbone, features of METHOD.md section 1, gradient isolation of the gating head."""

import pytest
import torch
import torch.nn.functional as F
import torchvision

from bayesncl.settings import config as C
from bayesncl.model import losses
from bayesncl.model.backbones import ScaledResNet
from bayesncl.model.methods import build_method
from bayesncl.settings.registry import METHODS


def tiny(method="bayesncl", **over):
    sets = [f"method.name={method}", "model.width=4", "model.proj_hidden=16", "model.proj_dim=8"]
    return C.resolve(sets=sets + [f"{k}={v}" for k, v in over.items()])


def test_registry_names():
    assert set(METHODS) == {"cl", "ncl", "topk_ncl", "bayesncl"}


@pytest.mark.parametrize("arch,stem,size,dim", [("resnet18", "cifar", 16, 32), ("resnet18", "imagenet", 32, 32),
                                                 ("resnet50", "cifar", 16, 128)])
def test_backbone_shapes(arch, stem, size, dim):
    m = build_method(tiny("ncl", **{"model.arch": arch, "model.stem": stem}))
    out = m.eval()(torch.randn(2, 3, size, size))
    assert out["h"].shape == (2, dim) and out["z"].shape == (2, 8)


@pytest.mark.parametrize("arch", ["resnet18", "resnet50"])
def test_width_64_is_torchvision_network_and_width_scales_every_stage(arch):
    ref = getattr(torchvision.models, arch)()
    want = {k: v.shape for k, v in ref.state_dict().items() if not k.startswith("fc.")}
    got = {k: v.shape for k, v in ScaledResNet(arch, 64, "imagenet").state_dict().items()}
    assert got == want
    half = ScaledResNet(arch, 32, "imagenet").state_dict()
    for k, shape in want.items():
        if len(shape) == 4:  # conv: out channels halve, in channels too except the RGB input's
            assert half[k].shape[:2] == (shape[0] // 2, 3 if k == "conv1.weight" else shape[1] // 2), k
        elif len(shape) == 1:  # batch norm
            assert half[k].shape == (shape[0] // 2,), k
    with pytest.raises(ValueError, match="model.arch"):
        ScaledResNet("resnet34")


def test_cifar_stem_is_3x3_no_maxpool():
    m = build_method(tiny("ncl"))
    assert m.backbone.conv1.kernel_size == (3, 3) and m.backbone.conv1.stride == (1, 1)
    assert isinstance(m.backbone.maxpool, torch.nn.Identity)


def test_eval_features_follow_the_spec():
    x = torch.randn(3, 3, 16, 16)
    assert build_method(tiny("topk_ncl")).k == 1
    for name in METHODS:
        m = build_method(tiny(name)).eval()
        out = m.features(x)
        z = out["z"]
        if name == "cl":
            ref = F.normalize(z, dim=1)
        elif name == "ncl":
            ref = F.normalize(F.relu(z), dim=1)
        elif name == "topk_ncl":
            zp = F.relu(z)
            k = max(1, round(8 / 10))  # method.topk_k unset: round(D / 10), D = 8
            mask = torch.zeros_like(zp).scatter_(1, zp.topk(k, 1).indices, 1.0)
            ref = F.normalize(zp * mask, dim=1)
        else:
            alpha = torch.sigmoid(m.gate_head(out["h"]))
            ref = F.normalize(F.normalize(F.relu(z), dim=1) * (alpha > 0.5).float(), dim=1)
        assert torch.allclose(out["feature"], ref, atol=1e-6), name


@pytest.mark.parametrize("depth,n_linear", [(1, 1), (2, 2), (3, 3)])
def test_gating_head_depth(depth, n_linear):
    m = build_method(tiny(**{"method.head_depth": depth}))
    linears = [l for l in m.gate_head if isinstance(l, torch.nn.Linear)]
    assert len(linears) == n_linear and linears[-1].out_features == 8
    if depth == 3:
        assert linears[1].out_features == 8  # H/2 with H=16


@pytest.mark.parametrize("detach", [True, False])
def test_detach_controls_whether_kl_reaches_backbone(detach):
    m = build_method(tiny(**{"method.detach": detach, "method.lambda": 1.0}))
    m.train()
    _, parts = m.training_loss(torch.randn(4, 3, 16, 16), torch.randn(4, 3, 16, 16))
    parts["kl"].backward()
    g = m.backbone.conv1.weight.grad
    reached = g is not None and bool(g.abs().sum() > 0)
    assert reached is (not detach)
    assert m.gate_head[0].weight.grad.abs().sum() > 0  # the head itself always learns from the KL


def test_bayesncl_param_groups_split_gate_head():
    m = build_method(tiny())
    groups = m.param_groups()
    assert {id(p) for p in groups["gate_head"]} == {id(p) for p in m.gate_head.parameters()}
    assert len(groups["main"]) + len(groups["gate_head"]) == len(list(m.parameters()))


def test_topk_k_is_explicit_or_a_tenth_of_d():
    from bayesncl.settings.config import resolve
    from bayesncl.core.errors import ConfigError

    assert build_method(resolve(sets=["method.name=topk_ncl", "model.proj_dim=256"])).k == 26
    assert build_method(resolve(sets=["method.name=topk_ncl", "model.proj_dim=2048"])).k == 205
    assert build_method(resolve(sets=["method.name=topk_ncl", "model.proj_dim=64", "method.topk_k=6"])).k == 6
    with pytest.raises(ConfigError, match="method.topk_k"):
        resolve(sets=["method.name=topk_ncl", "model.proj_dim=64", "method.topk_k=65"])


@pytest.mark.parametrize("name", sorted(METHODS))
def test_views_loss_is_training_loss_and_logged_names_are_its_parts(name):
    m = build_method(tiny(name)).train()
    x1, x2 = torch.randn(4, 3, 16, 16), torch.randn(4, 3, 16, 16)
    torch.manual_seed(0)
    loss, parts = m.training_loss(x1, x2)
    torch.manual_seed(0)
    loss2, parts2 = m.views_loss(torch.cat([x1, x2]))
    assert torch.equal(loss, loss2)
    out = parts.pop("out")
    assert tuple(parts) == ("infonce", *m.extra_names)
    assert tuple(m.stats(out)) == m.stat_names
    torch.testing.assert_close(loss, sum(parts.values()))


@pytest.mark.parametrize("gate", ["ste", "gumbel", "soft"])
def test_gate_draws_feed_the_gumbel_gate_and_open_gates_is_the_open_fraction(gate):
    m = build_method(tiny(**{"method.gate": gate})).train()
    x = torch.randn(6, 3, 16, 16)
    shape = m.gate_draws(6)
    assert shape == ((6, 8) if gate == "gumbel" else None)
    u = torch.rand(6, 8) if shape else None
    out = m(x, u)
    alpha = torch.sigmoid(m.gate_head(out["h"]))
    if gate == "gumbel":
        noisy = torch.sigmoid(m.gate_head(out["h"]) + losses.gumbel_from_uniform(u))
        assert torch.equal(out["gate"], (noisy > 0.5).float())
    elif gate == "ste":
        assert torch.equal(out["gate"], (alpha > 0.5).float())
    assert m.stats(out)["open_gates"].item() == pytest.approx(float((out["gate"] > 0.5).float().mean()))
