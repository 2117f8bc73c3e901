"""`bayesncl evaluate`: every number of Tables 1-7 and Figures 3-4 from one pretrained checkpoint.

Sections (docs/METHOD.md sections 4-7): interpretability, linear_probe, retrieval, background, dynamics, cost.
Writes `metrics.json` (headline numbers, format in docs/DESIGN.md) and `vectors.npz` (per-dimension
vectors) into the output folder, both atomically.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import numpy as np

SECTIONS = ("interpretability", "linear_probe", "retrieval", "background", "dynamics", "cost")


def _run_info(cfg: dict) -> dict:
    m, mc = cfg["model"], cfg["method"]
    return {"dataset": cfg["data"]["dataset"], "arch": m["arch"], "width": m["width"], "method": mc["name"],
            "gate": mc["gate"], "detach": mc["detach"], "head_depth": mc["head_depth"], "rho": mc["rho"],
            "lambda": mc["lambda"], "proj_dim": m["proj_dim"], "seed": cfg["seed"], "epochs": cfg["train"]["epochs"]}


def _clean(x):
    """JSON-safe: tensors/ndarrays to lists, NaN to None."""
    import torch

    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, (torch.Tensor, np.ndarray)):
        return _clean(np.asarray(x).tolist())
    if isinstance(x, (np.floating, np.integer)):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def _nonempty(ds, what: str):
    if len(ds.labels) == 0:
        from ..data import DataError

        raise DataError(f"{what}: the split is empty; evaluation needs at least one image")
    return ds


def evaluate(checkpoint: str | Path, out_dir: str | Path, *, only=None, sets=(), expect_config=None,
             progress: bool = True) -> Path:
    from .. import checkpoint as ckpt_io
    from ..atomic import atomic_path, atomic_write_text
    from ..config import RUNTIME_KEYS, ConfigError, _merge, nest, parse_set, resolve, validate
    from ..data import load_split
    import torch

    from ..train import channels_last, resolve_device
    from . import cost, dynamics, metrics, probe, retrieval

    checkpoint = Path(checkpoint)
    model, cfg = ckpt_io.load_model(checkpoint)
    if expect_config is not None:
        want = resolve(file=expect_config)
        diff = ckpt_io.config_diff(cfg, want, ignore=RUNTIME_KEYS)
        if diff:
            raise ConfigError(f"{checkpoint} does not match {expect_config}: " + "; ".join(diff))
        cfg["eval"] = want["eval"]
    if sets:  # only paths and eval options may change at evaluation time
        over = nest(dict(parse_set(s) for s in sets))
        bad = [k for k in over if k not in ("eval", "data")]
        if bad:
            raise ConfigError(f"--set {bad[0]}.*: only eval.* and data.* keys can be overridden at evaluation")
        cfg = validate(_merge(cfg, over))
    only = tuple(only or SECTIONS)
    device = resolve_device(cfg)
    model = model.to(device)
    if channels_last(cfg, device):
        model = model.to(memory_format=torch.channels_last)
    run_dir = checkpoint.parent
    result: dict = {"run": {**_run_info(cfg), "checkpoint": str(checkpoint),
                            "weights_sha": ckpt_io.weights_digest(model)}}
    if (run_dir / "log.jsonl").exists():
        result["training"] = _training(run_dir / "log.jsonl")
    vectors: dict[str, np.ndarray] = {}
    from ..train import embed

    test = train = None
    needs_test = {"interpretability", "linear_probe", "retrieval", "background"} & set(only)
    if needs_test:
        test = _nonempty(load_split(cfg["data"], "test"), f"{cfg['data']['dataset']} test split")
        method = cfg["method"]["name"]
        keys = ("feature", "h") + (("zplus",) if method != "cl" else ()) + \
            {"bayesncl": ("gate",), "topk_ncl": ("mask",)}.get(method, ())
        outs = dict(zip(keys, embed(model, test, cfg, device, key=keys)))
    if {"linear_probe", "background"} & set(only):
        train = _nonempty(load_split(cfg["data"], "train"), f"{cfg['data']['dataset']} train split")
        h_train, = embed(model, train, cfg, device, key="h")

    if "interpretability" in only:
        r = metrics.interpretability(outs["feature"], test.labels, test.num_classes)
        per_dim = r.pop("per_dim")
        active = r.pop("active", None)
        for k, v in per_dim.items():
            vectors[f"feature_{k}"] = np.asarray(v)
        if active is not None:
            vectors["feature_active"] = np.asarray(active)
        if "zplus" in outs:
            rz = metrics.interpretability(outs["zplus"], test.labels, test.num_classes)
            r["zplus"] = {k: v for k, v in rz.items() if k not in ("per_dim", "active")}
            for k, v in rz["per_dim"].items():
                vectors[f"zplus_{k}"] = np.asarray(v)
        if test.backgrounds is not None:
            for name in ("zplus", "feature"):
                if name in outs:
                    d = metrics.background_dominance(outs[name], test.labels, test.backgrounds,
                                                     test.num_classes, test.num_backgrounds)
                    r[f"bg_dominated_{name}"] = d["share"]
                    vectors[f"{name}_bg_sc"] = np.asarray(d["bg_sc"])
                    vectors[f"{name}_lift_bg"] = np.asarray(d["lift_bg"])
                    vectors[f"{name}_lift_cls"] = np.asarray(d["lift_cls"])
                    if name == "zplus":
                        dom = d
        if "gate" in outs:  # the mechanism: does the gate switch background dims off?
            closed = metrics.closed_gate_rate(outs["zplus"], outs["gate"])
            vectors["zplus_closed_rate"] = np.asarray(closed)
            if test.backgrounds is not None:
                for key, sel in (("closed_bg", dom["bg_dom"]), ("closed_cls", dom["cls_dom"])):
                    v = closed[sel & torch.isfinite(closed)]
                    r[key] = float(v.mean()) if v.numel() else math.nan
        if "mask" in outs:
            b = metrics.topk_binding(outs["zplus"], outs["mask"])
            r["topk_bound"], r["topk_removed"] = b["bound"], b["removed"]
        result["interpretability"] = r

    if "linear_probe" in only:
        if cfg["eval"]["probe"] == "paper":
            result["linear_probe"] = probe.linear_probe_paper(model, train, test, cfg, device, progress=progress)
        else:
            result["linear_probe"] = probe.linear_probe_fast(h_train, train.labels, outs["h"], test.labels,
                                                             test.num_classes, seed=cfg["seed"])

    if "retrieval" in only and cfg["method"]["name"] != "cl":  # not reported for SimCLR (section 5)
        from ..config import RETRIEVAL_K

        f = outs["feature"]
        k_sel = min(cfg["eval"]["retrieval_k"] or RETRIEVAL_K[cfg["data"]["dataset"]], f.shape[1])
        r = retrieval.retrieval_precision(f, test.labels, K=k_sel)
        r["K"] = k_sel
        r["curve"] = {str(k): v for k, v in retrieval.retrieval_curve(f, test.labels,
                                                                      retrieval.default_Ks(f.shape[1])).items()}
        result["retrieval"] = r

    if "background" in only:
        result["background"] = _background(model, cfg, device, train, test, h_train, outs, probe)

    if "dynamics" in only:
        if not (run_dir / "dynamics.pt").exists():
            raise ConfigError(f"dynamics: {run_dir / 'dynamics.pt'} does not exist; pretrain with "
                              "train.dynamics_every > 0 (or drop 'dynamics' from --only)")
        dyn = ckpt_io.load(run_dir / "dynamics.pt")
        epochs = sorted(dyn, key=int)
        rows = [dynamics.spearman_table(dyn[e]["af"], dyn[e]["gv"], dyn[e]["sc"]) for e in epochs]
        result["dynamics"] = {"epochs": [int(e) for e in epochs],
                              **{k: [row[k] for row in rows] for k in ("af_gv", "gv_sc", "af_sc")}}

    if "cost" in only:
        result["cost"] = _cost(model, cfg, device, run_dir, cost)

    out = Path(out_dir)
    metrics_path = out / "metrics.json"
    with atomic_path(out / "vectors.npz") as tmp:
        with open(tmp, "wb") as fh:
            np.savez(fh, **vectors)
    if test is not None:  # per-image outputs on the test split (index i = test image i), for the atlas
        feats = {"labels": np.asarray(test.labels), "feature": outs["feature"].numpy()}
        if test.backgrounds is not None:
            feats["backgrounds"] = np.asarray(test.backgrounds)
        if "zplus" in outs:
            feats["zplus"] = outs["zplus"].numpy()
        if "gate" in outs:
            feats["gate"] = (outs["gate"] > 0.5).numpy().astype(np.uint8)
        with atomic_path(out / "features.npz") as tmp:
            with open(tmp, "wb") as fh:
                np.savez(fh, **feats)
    atomic_write_text(metrics_path, json.dumps(_clean(result), indent=2) + "\n")
    return metrics_path


def _log_lines(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def _training(log: Path) -> dict:
    """Per-epoch loss and open-gate fraction from the training log."""
    lines = _log_lines(log)
    r = {"epochs": [x["epoch"] for x in lines], "loss": [x.get("loss") for x in lines]}
    if lines and "open_gates" in lines[-1]:
        r["open_gates"] = [x.get("open_gates") for x in lines]
        r["open_gates_last"] = lines[-1]["open_gates"]
    return r


def _background(model, cfg, device, train, test, h_train, outs, probe) -> dict:
    """Predict the background from frozen h: Waterbirds `place` when a root is given, else the dataset's
    own background label (the synthetic set)."""
    from ..data import load_waterbirds
    from ..train import embed

    root = cfg["eval"]["waterbirds_root"]
    if root:
        wb_train = _nonempty(load_waterbirds(root, "train"), f"Waterbirds train split under {root}")
        wb_test = _nonempty(load_waterbirds(root, "test"), f"Waterbirds test split under {root}")
        (htr,), (hte,) = embed(model, wb_train, cfg, device, key="h"), embed(model, wb_test, cfg, device, key="h")
        r = probe.linear_probe_fast(htr, wb_train.backgrounds, hte, wb_test.backgrounds, 2, seed=cfg["seed"])
        return {"acc": r["top1"], "protocol": r["protocol"], "target": "waterbirds_place"}
    if train.backgrounds is None:
        from ..config import ConfigError

        raise ConfigError(
            f"background probe: dataset {cfg['data']['dataset']!r} has no background labels; set "
            "eval.waterbirds_root=/path/to/waterbird_complete95_forest2water2 (or drop 'background' from --only)")
    r = probe.linear_probe_fast(h_train, train.backgrounds, outs["h"], test.backgrounds,
                                train.num_backgrounds, seed=cfg["seed"])
    return {"acc": r["top1"], "protocol": r["protocol"], "target": f"{cfg['data']['dataset']}_background"}


def _cost(model, cfg, device, run_dir: Path, cost) -> dict:
    import torch

    from ..config import crop_size

    size = crop_size(cfg)
    x = torch.randn(2, 3, size, size, device=device)
    # The training forward pass (Gumbel noise and all), on a copy: train-mode BN updates its statistics.
    flops = cost.count_flops_per_image(copy.deepcopy(model).train(), x)
    r = {"gflops": flops / 1e9, "params_m": cost.count_params(model) / 1e6}
    log = run_dir / "log.jsonl"
    if log.exists():
        r.update(cost.training_time_from_log(log))
        peaks = [p for p in (x.get("peak_mem_mb") for x in _log_lines(log)) if p is not None]
        r["peak_mem_mb"] = max(peaks) if peaks else None
    return r
