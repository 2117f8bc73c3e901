"""Inputs of the report's tests: runs.csv rows for the figures, a tiny grid's evaluation files as `bayesncl
evaluate` writes them, Snakemake benchmark files, and the golden tables."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from bayesncl.grid import expand as grid


GOLDEN = Path(__file__).parents[1] / "golden"


TINY_GRID = Path(__file__).parents[2] / "config" / "tiny.yaml"


def tiny_config(results: Path | str, **sets) -> dict:
    """config/tiny.yaml with ``results`` and some sets replaced."""
    wf = yaml.safe_load(TINY_GRID.read_text(encoding="utf-8"))
    wf["results"] = str(results)
    wf["sets"].update(sets)
    return wf


def eval_content(section: str, run, i: int) -> dict:
    """What `bayesncl evaluate` writes for ``section`` of ``run`` (the i-th run of the grid)."""
    method = run.config["method"]["name"]
    interp = {"sc": 30.0 + i, "se_sum": 1.2, "se_mean": 1.3, "se_freq": 1.4, "act": 12.5, "alive": 200,
              "alive_frac": 0.78, "bg_dominated_zplus": 0.1, "bg_dominated_feature": 0.05}
    if method == "bayesncl":
        interp.update(closed_bg=0.7, closed_cls=0.2)
    if method == "topk_ncl":
        interp.update(topk_bound=0.0, topk_removed=0.0)
    return {
        "interpretability": interp,
        "linear_probe": {"top1": 70.0 + i, "top5": 91.0, "protocol": "fast", "train_top1": 80.0},
        "retrieval": {"K": 8, "p@1": 0.60, "p@3": 0.58, "p@5": 0.57, "p@10": 0.55,  # fractions
                      "curve": {"8": 0.55, "2": 0.40, "4": 0.50}},
        "background_probe": {"acc": 93.4, "protocol": "fast", "target": "background"},
        "dynamics": {"epochs": [1], "af_gv": [0.5], "gv_sc": [-0.4], "af_sc": [0.1]},
        "cost": {"gflops": 1.419, "params_m": 11.9, "sec_per_epoch": 21.0, "img_per_s": 2400.0,
                 "peak_mem_mb": 5000.0, "train_minutes": 75.1},
    }[section]


def write_eval(wf: dict, base: Path | None = None) -> dict:
    """features.json and every section file of every run of the grid, in the per-section layout;
    returns the grid."""
    runs = grid.expand_grid(wf)
    results = Path(wf["results"]) if base is None else base / wf["results"]
    for i, (rid, run) in enumerate(runs.items()):
        cfg = run.config
        info = {"dataset": cfg["data"]["dataset"], "method": cfg["method"]["name"], "seed": cfg["seed"],
                "weights_sha": f"sha{i:02d}"}
        training = {"epochs": [1, 2, 3], "loss": [5.0, 4.5, None]}
        if cfg["method"]["name"] == "bayesncl":
            training.update(open_gates=[1.0, 0.8, 0.55], open_gates_last=0.55)
        folder = results / "runs" / rid / "eval"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "features.json").write_text(json.dumps({"run": info, "features": {"test_images": 120},
                                                          "training": training, "config": cfg}))
        for section in grid.evaluation_sections(run):
            if section == "features":
                continue
            (folder / f"{section}.json").write_text(json.dumps({"run": info, section: eval_content(section, run, i)}))
    return runs


def figure_row(variant, method, seed, sets, sweep="", dataset="cifar100", rho=0.8, lam=3e-5, D=256, **m):
    return {"run_id": f"{dataset}/{variant}/{rho}/{lam}/{D}/seed~{seed}", "dataset": dataset, "arch": "resnet18",
            "method": method, "variant": variant, "sets": sets, "sweep": sweep, "gate": "ste", "rho": rho,
            "lambda": lam, "proj_dim": D, "seed": seed, **m}


def gate_curve(final, seed, epochs=6):
    return json.dumps([round(1 - (1 - final) * e / (epochs - 1) + 0.01 * seed, 4) for e in range(epochs)])


BENCHMARK_HEADER = ("s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\tjobid\trule_name\t"
          "wildcards\tparams\tthreads\tcpu_usage\tresources\tinput_size_mb")


def write_benchmark(root: Path, rel: str, seconds: float, rss, gpu, rule: str, extended: bool = True) -> None:
    """Every memory and CPU column its own value (vms, uss, pss, load, cpu_time all differ from max_rss and
    from each other), so reading the wrong column cannot pass."""
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    mem = ["NA"] * 3 if rss == "NA" else [rss * 3 + 7, rss / 2 + 1, rss + 11]  # max_vms, max_uss, max_pss
    cpu = "NA" if rss == "NA" else round(seconds * 0.9 + 0.25, 3)
    plain = (f"{seconds}\t0:00:01\t{rss}\t{mem[0]}\t{mem[1]}\t{mem[2]}\t0.1\t0.2\t"
             f"{round(seconds / 100 + 3.5, 3)}\t{cpu}")
    if not extended:
        path.write_text("\t".join(BENCHMARK_HEADER.split("\t")[:10]) + "\n" + plain + "\n")
        return
    res = {"tmpdir": "/tmp", "_nodes": 1, "gpu": gpu, "runtime": 60, "mem_mb": 4000, "mem": "4 GB"}
    path.write_text(BENCHMARK_HEADER + "\n" + plain + f"\t7\t{rule}\t{{'run': 'x'}}\t{{'cmd': 'a\\tb'}}\t1\tNA\t{res}\t{{}}\n")
