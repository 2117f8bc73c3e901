"""Each evaluation section measures the array its table reads: the real sections on a tiny BayesNCL run,
their numbers recomputed from the cached ``features.npz`` (the evaluation feature vs z+)."""

import json

import numpy as np
import pytest

from bayesncl.settings import config as C
from bayesncl.measures import arrays as measures
from bayesncl.evaluation.runner import evaluate
from bayesncl.training.train import pretrain


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    from helpers import TINY

    run = tmp_path_factory.mktemp("run")
    # BayesNCL: its evaluation feature (gated, renormalised) and z+ differ in which dims fire.
    cfg = C.resolve(sets=TINY + ["method.name=bayesncl", "eval.retrieval_k=8"])
    pretrain(cfg, run, progress=False)
    out = run / "eval"
    evaluate(run / "model.pt", out, only=["features", "interpretability", "retrieval"], progress=False)
    with np.load(out / "features.npz") as f:
        arrays = dict(f)
    body = {name: json.loads((out / f"{name}.json").read_text())[name] for name in ("interpretability", "retrieval")}
    return arrays, body


def test_table1_metrics_are_those_of_the_evaluation_feature(evaluated):
    arrays, body = evaluated
    t = arrays
    C_ = int(arrays["num_classes"])
    on_feature = measures.interpretability(t["feature"], t["labels"], C_)
    on_zplus = measures.interpretability(t["zplus"], t["labels"], C_)
    keys = ("sc", "se_sum", "se_mean", "se_freq", "act", "alive")
    # The test can tell the two arrays apart on this run (else it would prove nothing).
    assert any(on_feature[k] != pytest.approx(on_zplus[k]) for k in ("sc", "act")), (on_feature, on_zplus)
    it = body["interpretability"]
    for k in keys:
        assert it[k] == pytest.approx(on_feature[k], nan_ok=True), k
    for k in keys:  # z+ has its own block, for the atlas and Table 6
        assert it["zplus"][k] == pytest.approx(on_zplus[k], nan_ok=True), k


def test_retrieval_runs_on_the_evaluation_feature(evaluated):
    arrays, body = evaluated
    t = arrays
    r = body["retrieval"]
    assert r["K"] == 8
    on_feature = measures.retrieval_precision(t["feature"], t["labels"], K=8)
    on_zplus = measures.retrieval_precision(t["zplus"], t["labels"], K=8)
    keys = ("p@1", "p@3", "p@5", "p@10")
    assert any(on_feature[k] != pytest.approx(on_zplus[k]) for k in keys), (on_feature, on_zplus)
    for k in keys:
        assert r[k] == pytest.approx(on_feature[k]), k
    curve = measures.retrieval_curve(t["feature"], t["labels"], measures.default_Ks(t["feature"].shape[1]))
    assert r["curve"] == pytest.approx({str(k): v for k, v in curve.items()})
