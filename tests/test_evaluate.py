"""`bayesncl evaluate`, section by section, on checkpoints trained here."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from bayesncl.runs import files
from bayesncl.settings import config as C
from bayesncl.cli.main import main
from bayesncl.core.errors import BayesNCLError, ConfigError, DataError, MissingInputError
from bayesncl.evaluation.runner import evaluate
from bayesncl.evaluation.sections import SECTIONS
from bayesncl.evaluation.sections import applicable
from bayesncl.grid.expand import expand_grid
from bayesncl.model.methods import build_method
from bayesncl.training.train import pretrain

ROOT = Path(__file__).resolve().parents[1]


def _read(path: Path) -> dict:
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from helpers import TINY

    out = tmp_path_factory.mktemp("run")
    cfg = C.resolve(sets=TINY + ["train.dynamics_every=1", "method.name=bayesncl"])
    pretrain(cfg, out, progress=False)
    return out, cfg


@pytest.fixture(scope="module")
def evaluated(trained, tmp_path_factory):
    run, _ = trained
    out = tmp_path_factory.mktemp("eval")
    return out, evaluate(run / "model.pt", out, progress=False)


def test_every_section_writes_its_own_file(trained, evaluated):
    run, cfg = trained
    out, written = evaluated
    assert [p.name for p in written] == [f"{name}.json" for name in SECTIONS]  # all apply to this run
    m = {p.stem: _read(p) for p in written}
    for name, body in m.items():  # each file says which run it measured
        assert body["run"]["method"] == "bayesncl" and body["run"]["rho"] == 0.8, name
        assert body["run"]["checkpoint"].endswith("model.pt")
    assert m["features"]["run"]["weights_sha"] == files.weights_digest(files.load_model(run / "model.pt")[0])
    it = m["interpretability"]["interpretability"]
    assert 0 < it["sc"] <= 100 and 0 <= it["act"] <= 100 and it["alive"] <= 16
    assert 0 <= it["bg_dominated_zplus"] <= 1 and "zplus" in it
    lp = m["linear_probe"]["linear_probe"]
    assert lp["protocol"] == "fast" and 0 <= lp["top1"] <= lp["top5"]
    assert m["retrieval"]["retrieval"]["K"] == 16 and set(m["retrieval"]["retrieval"]["curve"]) == {"16"}
    assert m["background_probe"]["background_probe"]["target"] == "synthetic_background"
    assert m["dynamics"]["dynamics"]["epochs"] == [1, 2] and len(m["dynamics"]["dynamics"]["af_gv"]) == 2
    # SC over training ends where Table 1's SC is: the last record is the final model on the same test split
    # (the gated feature for BayesNCL, and z+ before the gate).
    dyn = m["dynamics"]["dynamics"]
    assert dyn["sc"][-1] == pytest.approx(it["sc"]) and dyn["sc_zplus"][-1] == pytest.approx(it["zplus"]["sc"])
    assert dyn["sc"][-1] != pytest.approx(dyn["sc_zplus"][-1])  # the gate changes it: the two are told apart
    c = m["cost"]["cost"]
    assert c["gflops"] > 0 and c["params_m"] > 0 and c["sec_per_epoch"] > 0
    log = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    assert c["train_minutes"] == pytest.approx(sum(x["epoch_seconds"] for x in log) / 60)
    assert m["features"]["training"]["open_gates"] == [x["open_gates"] for x in log]
    assert m["features"]["training"]["epochs"] == [1, 2]
    assert not [p for p in out.iterdir() if ".tmp" in p.name]


def test_a_loaded_model_is_the_saved_one_built_without_drawing_an_initialisation(trained, monkeypatch):
    """load_model builds the network on the meta device and takes the checkpoint's tensors: every parameter and
    buffer equal to the trained model's, the global generator untouched; a tensor the model needs that the state
    does not hold (a buffer kept out of it) is a CheckpointError naming it, not a model left unset."""
    from bayesncl.core.errors import CheckpointError
    from bayesncl.model import methods

    run, cfg = trained
    state = files.load(run / "model.pt")
    before = torch.get_rng_state()
    model, _ = files.load_model(run / "model.pt")
    assert torch.equal(torch.get_rng_state(), before)
    saved = state["model"]
    assert model.state_dict().keys() == saved.keys() and not model.training
    assert all(torch.equal(t, saved[k]) for k, t in model.state_dict().items())
    assert not any(t.is_meta for t in (*model.parameters(), *model.buffers()))
    build = methods.build_method

    def with_a_buffer(c):
        m = build(c)
        m.register_buffer("scale", torch.ones(3), persistent=False)
        return m

    for changed in ({k: v for k, v in saved.items() if k != "backbone.conv1.weight"},
                    {**saved, "backbone.extra": torch.ones(1)}):  # a key missing, a key too many
        monkeypatch.setattr(files, "load", lambda path, map_location="cpu", s=dict(state, model=changed): s)
        with pytest.raises(CheckpointError, match="weights do not match the model its config describes"):
            files.load_model(run / "model.pt")
    monkeypatch.undo()
    monkeypatch.setattr(methods, "build_method", with_a_buffer)
    with pytest.raises(CheckpointError, match="model.pt: holds no 'scale', which the model its config describes needs"):
        files.load_model(run / "model.pt")


def test_cached_features_are_what_the_model_computes(trained, evaluated):
    from bayesncl.data import load_split
    from bayesncl.training.embed import embed

    run, cfg = trained
    out, _ = evaluated
    model, _ = files.load_model(run / "model.pt")
    test = load_split(cfg["data"], "test")
    feature, zplus, gate = embed(model, test, cfg, torch.device("cpu"), key=("feature", "zplus", "gate"))
    with np.load(out / "features.npz") as f:
        np.testing.assert_array_equal(f["labels"], test.labels.numpy())
        np.testing.assert_array_equal(f["backgrounds"], test.backgrounds.numpy())
        np.testing.assert_allclose(f["feature"], feature.numpy())
        np.testing.assert_allclose(f["zplus"], zplus.numpy())
        np.testing.assert_array_equal(f["gate"], (gate.numpy() > 0.5).astype(np.uint8))
        assert int(f["num_classes"]) == test.num_classes
    with np.load(out / "features_train.npz") as f:  # the fast probe and the background probe read the train h
        assert f["h"].shape[0] == len(load_split(cfg["data"], "train").labels)


def test_closed_gate_rates_follow_from_the_cached_gates(evaluated):
    out, _ = evaluated
    it = _read(out / "interpretability.json")["interpretability"]
    vec, feats = np.load(out / "vectors.npz"), np.load(out / "features.npz")
    assert vec["feature_sc"].shape == (16,) and vec["zplus_bg_sc"].shape == (16,)
    fires = feats["zplus"] > 1e-5
    with np.errstate(invalid="ignore"):
        closed = (fires & (feats["gate"] == 0)).sum(0) / fires.sum(0)
    np.testing.assert_allclose(vec["zplus_closed_rate"], closed, equal_nan=True)
    lift_bg, lift_cls = vec["zplus_lift_bg"], vec["zplus_lift_cls"]
    bg_dom = np.isfinite(lift_cls) & (lift_bg > lift_cls) & (lift_bg > 0)
    if bg_dom.any() and np.isfinite(closed[bg_dom]).any():
        assert it["closed_bg"] == pytest.approx(np.nanmean(closed[bg_dom]))


def test_what_the_report_reads_is_written(trained, evaluated):
    """features.json's counts and training curves, the gate cached as 0/1 bytes, both arrays' per-dim vectors and
    background shares, the closed-gate rates by dominance: each key runs.csv, the tables or the atlas read."""
    from bayesncl.measures import arrays

    run, _ = trained
    out, _ = evaluated
    log = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    body = _read(out / "features.json")
    feats, vec = np.load(out / "features.npz"), np.load(out / "vectors.npz")
    assert body["features"]["test_images"] == len(feats["labels"])
    assert body["features"]["arrays"] == sorted(feats.files)
    assert body["training"]["loss"] == [x["loss"] for x in log]
    assert body["training"]["open_gates_last"] == log[-1]["open_gates"] and "config" in body
    batch = body["config"]["train"]["batch_size"]  # the collapse record, against the run's own batch
    assert body["training"]["collapse"]["chance"] == pytest.approx(math.log(2 * batch - 1))
    assert body["training"]["collapse"]["collapsed"] in (True, False)
    assert feats["gate"].dtype == np.uint8 and set(np.unique(feats["gate"])) <= {0, 1}
    C_ = int(feats["num_classes"])
    for name in ("feature", "zplus"):
        per_dim = arrays.interpretability(feats[name], feats["labels"], C_)["per_dim"]
        for k in ("sc", "h_sum", "h_mean", "h_freq", "freq"):
            np.testing.assert_allclose(vec[f"{name}_{k}"], per_dim[k], equal_nan=True, err_msg=f"{name}_{k}")
    it = _read(out / "interpretability.json")["interpretability"]
    B = int(feats["num_backgrounds"])
    for name in ("feature", "zplus"):
        share = arrays.background_dominance(feats[name], feats["labels"], feats["backgrounds"], C_, B)["share"]
        assert it[f"bg_dominated_{name}"] == pytest.approx(share, nan_ok=True), name
    assert {"closed_bg", "closed_cls"} <= set(it)


def test_a_cpu_section_rerun_alone_gives_the_same_numbers(trained, evaluated, tmp_path):
    run, _ = trained
    out, _ = evaluated
    before = _read(out / "retrieval.json")
    evaluate(run / "model.pt", out, only=["retrieval"], progress=False)
    assert _read(out / "retrieval.json") == before


def test_cpu_section_without_features_names_the_command(trained, tmp_path, capsys):
    run, _ = trained
    with pytest.raises(MissingInputError, match="--only features"):
        evaluate(run / "model.pt", tmp_path, only=["interpretability"], progress=False)
    assert main(["evaluate", "--checkpoint", str(run / "model.pt"), "--out", str(tmp_path), "--only", "retrieval"]) == 2
    assert "features.npz does not exist" in capsys.readouterr().err


def test_topk_binding_recorded_and_weights_digest_tells_identical_runs(tmp_path):
    from helpers import TINY

    short = TINY + ["train.epochs=1", "train.max_steps_per_epoch=2"]
    digests = {}
    for name, sets in {"ncl": ["method.name=ncl"], "topk_all": ["method.name=topk_ncl", "method.topk_k=16"],
                       "topk_2": ["method.name=topk_ncl", "method.topk_k=2"]}.items():
        pretrain(C.resolve(sets=short + sets), tmp_path / name, progress=False)
        feats, interp = evaluate(tmp_path / name / "model.pt", tmp_path / name / "e",
                                 only=["features", "interpretability"], progress=False)
        digests[name] = _read(feats)["run"]["weights_sha"]
        if name.startswith("topk"):  # the mask cached as 0/1 bytes, as the gate
            assert np.load(tmp_path / name / "e" / "features.npz")["mask"].dtype == np.uint8
        it = _read(interp)["interpretability"]
        if name == "topk_all":  # k = D keeps every entry: the mask never binds
            assert it["topk_bound"] == 0
        if name == "topk_2":
            assert 0 < it["topk_bound"] <= 1 and 0 < it["topk_removed"] < 1
    # a mask that never binds trains exactly NCL's weights
    assert digests["topk_all"] == digests["ncl"] != digests["topk_2"]


def test_sections_that_do_not_apply(tmp_path):
    from helpers import TINY

    cfg = C.resolve(sets=TINY + ["method.name=cl", "train.epochs=1", "train.max_steps_per_epoch=1"])
    assert "retrieval" not in applicable(cfg) and "dynamics" not in applicable(cfg)
    cifar = C.resolve(sets=TINY + ["data.dataset=cifar10", "data.root=/x"])
    assert "background_probe" not in applicable(cifar)
    assert "background_probe" in applicable(C.resolve(sets=TINY + ["data.dataset=cifar10", "data.root=/x",
                                                                    "eval.waterbirds_root=/wb"]))
    pretrain(cfg, tmp_path, progress=False)
    written = evaluate(tmp_path / "model.pt", tmp_path / "e", progress=False)
    assert "retrieval.json" not in {p.name for p in written}
    with pytest.raises(ConfigError, match="not reported for SimCLR"):
        evaluate(tmp_path / "model.pt", tmp_path / "e", only=["retrieval"], progress=False)


def test_gpu_need_follows_the_protocol(trained):
    _, cfg = trained
    assert SECTIONS["features"].gpu(cfg)
    assert not SECTIONS["linear_probe"].gpu(cfg) and not SECTIONS["interpretability"].gpu(cfg)
    paper = C.resolve(base={"eval": {"probe": "paper", "waterbirds_root": "/wb"}})
    assert SECTIONS["linear_probe"].gpu(paper) and SECTIONS["background_probe"].gpu(paper)


def test_paper_probe_protocol_is_labelled(trained, tmp_path):
    run, _ = trained
    path, = evaluate(run / "model.pt", tmp_path, only=["linear_probe"], progress=False,
                     sets=["eval.probe=paper", "eval.probe_epochs=1"])
    lp = _read(path)["linear_probe"]
    assert lp["protocol"] == "paper" and 0 <= lp["top1"] <= 100
    assert not (tmp_path / "features_train.npz").exists()  # the paper protocol reads images, not the cache


def test_paper_probe_on_the_synthetic_set_still_caches_the_train_features(trained, tmp_path):
    """Without Waterbirds, the synthetic set's background probe reads the train split's cached h: `features`
    writes it under the paper probe protocol too (which itself reads images, not the cache)."""
    run, _ = trained
    written = evaluate(run / "model.pt", tmp_path, only=["features", "background_probe"], progress=False,
                       sets=["eval.probe=paper"])
    assert [p.name for p in written] == ["features.json", "background_probe.json"]
    assert _read(written[0])["features"]["train_images"] > 0
    with np.load(tmp_path / "features_train.npz") as f:
        assert f["h"].shape[0] == _read(written[0])["features"]["train_images"]
    bg = _read(written[1])["background_probe"]
    assert bg["target"] == "synthetic_background" and bg["protocol"] == "fast" and 0 <= bg["acc"] <= 100


def test_waterbirds_background_probe_reads_place_from_the_models_h(trained, tmp_path):
    """With eval.waterbirds_root, the probe embeds Waterbirds' train and test splits with the run's model and
    predicts `place` from h (the fast probe, 2 classes); it needs no features cache."""
    from helpers.datasets import write_waterbirds

    from bayesncl.data import load_waterbirds
    from bayesncl.measures.linear import linear_probe_fast
    from bayesncl.training.embed import embed

    run, cfg = trained
    root = tmp_path / "waterbirds"
    write_waterbirds(root)
    (path,) = evaluate(run / "model.pt", tmp_path / "e", only=["background_probe"], progress=False,
                       sets=[f"eval.waterbirds_root={root}"])
    bg = _read(path)["background_probe"]
    assert (bg["target"], bg["protocol"]) == ("waterbirds_place", "fast")
    model, _ = files.load_model(run / "model.pt")
    split = {s: load_waterbirds(root, s) for s in ("train", "test")}
    # the probe's h with running statistics, as the released linear probe (docs/METHOD.md section 4)
    (htr,), (hte,) = (embed(model, split[s], cfg, torch.device("cpu"), key=("h",), bn="running")
                      for s in ("train", "test"))
    want = linear_probe_fast(htr.numpy(), split["train"].backgrounds.numpy(), hte.numpy(),
                             split["test"].backgrounds.numpy(), 2, seed=cfg["seed"])
    assert bg["acc"] == pytest.approx(want["top1"])


def test_cost_alone_reads_only_the_checkpoint(trained, tmp_path):
    """The cost job's only input is model.pt: it runs into an empty folder, and reports GFLOPs per image and
    millions of parameters of the model."""
    from bayesncl.measures.cost import count_flops_per_image

    run, cfg = trained
    (path,) = evaluate(run / "model.pt", tmp_path, only=["cost"], progress=False)
    c = _read(path)["cost"]
    model, _ = files.load_model(run / "model.pt")
    assert c["params_m"] == pytest.approx(sum(p.numel() for p in model.parameters()) / 1e6)
    size = cfg["data"]["synthetic"]["image_size"]
    flops = count_flops_per_image(model.train(), torch.randn(2, 3, size, size))
    assert c["gflops"] == pytest.approx(flops / 1e9, rel=1e-6) and 0 < c["gflops"] < 1


@pytest.mark.long
def test_trained_probe_beats_chance_and_random_init(tmp_path):
    # The demo grid's NCL run (config/config.yaml, its 16 epochs) at seed 0. At 9 epochs the probe beat
    # random init by only 4.9 points (36.6% vs 31.7% on the 2048 test images).
    grid = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    run = next(r for r in expand_grid(grid).values()
               if r.config["method"]["name"] == "ncl" and r.config["seed"] == 0 and "table1" in r.sets)
    cfg = C.resolve(base=run.config, sets=["train.dynamics_every=0"])
    pretrain(cfg, tmp_path / "trained", progress=False)
    torch.manual_seed(cfg["seed"])
    files.save({"config": cfg, "model": build_method(cfg).state_dict(), "epoch": 0}, tmp_path / "rand" / "model.pt")
    (tmp_path / "rand" / "log.jsonl").write_text("")  # trained for zero epochs
    acc = {}
    for name in ("trained", "rand"):
        *_, probe = evaluate(tmp_path / name / "model.pt", tmp_path / name / "eval", only=["features", "linear_probe"],
                             progress=False)
        acc[name] = _read(probe)["linear_probe"]["top1"]
    chance = 100 / cfg["data"]["synthetic"]["num_classes"]
    assert acc["trained"] > 2.5 * chance, acc
    assert acc["trained"] > acc["rand"] + 5, acc


def test_checkpoint_with_other_config_is_refused(trained, tmp_path, capsys):
    run, cfg = trained
    other = dict(cfg, method=dict(cfg["method"], rho=0.5))
    (tmp_path / "c.yaml").write_text(C.dump_yaml(other))
    code = main(["evaluate", "--checkpoint", str(run / "model.pt"), "--out", str(tmp_path / "e"),
                 "--config", str(tmp_path / "c.yaml")])
    assert code == 2 and "method.rho" in capsys.readouterr().err
    assert not (tmp_path / "e").exists()


def test_missing_checkpoint(tmp_path, capsys):
    missing = tmp_path / "nope" / "model.pt"
    assert main(["evaluate", "--checkpoint", str(missing), "--out", str(tmp_path / "e")]) == 2
    assert str(missing) in capsys.readouterr().err


def test_foreign_checkpoint(tmp_path, capsys):
    torch.save({"weights": torch.zeros(2)}, tmp_path / "x.pt")
    assert main(["evaluate", "--checkpoint", str(tmp_path / "x.pt"), "--out", str(tmp_path / "e")]) == 2
    assert "is this a bayesncl checkpoint" in capsys.readouterr().err


def test_empty_split_is_a_clear_error(trained, tmp_path, monkeypatch):
    import bayesncl.data as data

    real = data.load_split

    def empty_test(cfg, split):
        ds = real(cfg, split)
        if split == "test":
            ds.images, ds.labels, ds.backgrounds = ds.images[:0], ds.labels[:0], ds.backgrounds[:0]
        return ds

    monkeypatch.setattr(data, "load_split", empty_test)
    with pytest.raises(DataError, match="empty"):
        evaluate(trained[0] / "model.pt", tmp_path, only=["features"], progress=False)


def test_only_eval_and_data_keys_can_be_overridden(trained, tmp_path):
    with pytest.raises(ConfigError, match="method"):
        evaluate(trained[0] / "model.pt", tmp_path, sets=["method.rho=0.5"], progress=False)
    with pytest.raises(ConfigError, match="train"):
        evaluate(trained[0] / "model.pt", tmp_path, overrides={"train": {"epochs": 3}}, progress=False)


def test_missing_dynamics_fail_loudly(tmp_path):
    from helpers import TINY

    sets = TINY + ["method.name=ncl", "train.epochs=1", "train.max_steps_per_epoch=1"]
    pretrain(C.resolve(sets=sets), tmp_path, progress=False)
    with pytest.raises(ConfigError, match="recorded no gradient dynamics"):
        evaluate(tmp_path / "model.pt", tmp_path / "e", only=["dynamics"], progress=False)
    # dynamics_every is part of the run's identity: a finished run is not silently reused without them
    with pytest.raises(BayesNCLError, match="train.dynamics_every: 0 != 1"):  # another run: refused
        pretrain(C.resolve(sets=sets + ["train.dynamics_every=1"]), tmp_path, progress=False)
