"""The smoke switch (`--config smoke=true`) over the paper grid's structure, end to end on tiny files in the real
on-disk formats: CIFAR-10/100 pickles, an ImageNet-100 tree of JPEGs for the 100 listed classes, Waterbirds'
metadata.csv with its images. Every set, dataset and variant of config/paper.yaml, its stems, architectures,
projectors, probe protocols and the Waterbirds probe; only sizes are cut for two CPU cores here (one seed, two
points per sweep, narrow networks). A bad dataset root stops the run before any job."""

import json
import re
import shutil
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from bayesncl.data.imagenet import imagenet100_classes
from helpers.processes import current

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = shutil.which("snakemake")
pytestmark = pytest.mark.skipif(SNAKEMAKE is None, reason="snakemake not installed (pip install -e '.[workflow]')")


def write_datasets(root: Path) -> dict[str, Path]:
    from helpers.datasets import write_cifar10, write_cifar100, write_imagenet, write_waterbirds

    roots = {name: root / name for name in ("cifar10", "cifar100", "imagenet", "waterbirds")}
    write_cifar10(roots["cifar10"], per_batch=4)  # 20 train, 3 test images
    write_cifar100(roots["cifar100"], n_train=16, n_test=8)
    # 2 a class: the smoke run reads the first SMOKE_CLASSES classes, 2 steps of 8 images
    write_imagenet(roots["imagenet"], wnids=imagenet100_classes(), n_train=2, n_val=1)
    write_waterbirds(roots["waterbirds"])
    return roots


def paper_for_two_cores(roots: dict[str, Path], results: Path) -> dict:
    """config/paper.yaml with the generated roots and sizes for a CPU; its structure unchanged."""
    cfg = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())
    cfg["results"] = str(results)
    cfg["seeds"] = [0]
    d = cfg["defaults"]
    d["data"]["num_workers"] = 0
    d["model"].update(width=4, proj_hidden=32, proj_dim=16)
    d["train"].update(batch_size=8, threads=1)
    d["eval"]["batch_size"] = 64
    ds = cfg["datasets"]
    ds["cifar10"]["data"]["root"] = str(roots["cifar10"])
    ds["cifar100"]["data"]["root"] = str(roots["cifar100"])
    for name in ("cifar10", "cifar100"):
        ds[name]["method"]["topk_k"] = 2  # round(D / 10), D = 16
    im = ds["imagenet100"]
    im["data"].update(root=str(roots["imagenet"]), imagenet_stored_size=32)
    im["model"].update(proj_hidden=64, proj_dim=32)  # the paper's 16384/2048, scaled
    im["method"]["topk_k"] = 3
    im["eval"]["waterbirds_root"] = str(roots["waterbirds"])
    sets = cfg["sets"]
    sets["figure4a"]["sweep"]["model.proj_dim"] = [16, 32]
    sets["figure4b"]["sweep"] = {k: v[:1] + [0.8 if k == "method.rho" else 3.0e-5]
                                 for k, v in sets["figure4b"]["sweep"].items()}
    return cfg


def snakemake(*args, timeout=900):
    return current().run([SNAKEMAKE, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


@pytest.mark.grid
def test_smoke_run_of_the_paper_grid_on_real_format_files(tmp_path):
    roots = write_datasets(tmp_path / "data")
    results = tmp_path / "results"
    cfg = paper_for_two_cores(roots, results)
    (tmp_path / "paper.yaml").write_text(yaml.safe_dump(cfg))
    r = snakemake("--cores", "2", "--configfile", str(tmp_path / "paper.yaml"), "--config", "smoke=true", timeout=2400)
    assert r.returncode == 0, r.stderr[-6000:]
    smoke = Path(f"{results}-smoke")
    assert not results.exists()  # never into the real results
    for name in [f"table{i}" for i in range(1, 8)] + ["claims"]:
        for ext in ("md", "tex"):
            text = (smoke / "tables" / f"{name}.{ext}").read_text()
            assert "SMOKE RUN" in text.splitlines()[0], (name, ext)
    # the claims table's controls: Δ at init on the untrained twins where the metric exists before training
    claims_md = (smoke / "tables" / "claims.md").read_text()
    assert "Family (graph)" in claims_md and "decisive verdicts survive the familywise control" in claims_md
    # section 9's rules on the paper grid's structure: the primary family's gate, one-sided cost claims, one id a row
    assert re.search(r"Family: (primary: \d+ of \d+ hold|secondary not controlled: primary |no primary claim)",
                     claims_md)
    assert "Train time: BayesNCL (STE) at most 6% more than NCL" in claims_md
    for block in claims_md.split("| *")[1:]:
        ids = [line.split("|")[1].strip() for line in block.splitlines()[1:] if line.startswith("| ")]
        assert len(ids) == len(set(ids)), ids
    assert (smoke / "summary" / "plan.md").read_text().startswith("Seeds each claim needs")
    assert "plan" in yaml.safe_load((smoke / "summary" / "plan.yaml").read_text())
    init = [line.split("|")[7].strip() for line in claims_md.splitlines() if line.startswith("| 1a ")]
    assert init and all(cell.startswith(("+", "-")) for cell in init), init
    for name in ("figure3", "figure4a", "figure4b", "gates", "atlas_cifar10", "atlas_cifar100", "atlas_imagenet100"):
        assert (smoke / "figures" / f"{name}.png").stat().st_size > 0, name

    from bayesncl.grid.expand import expand_grid

    runs = expand_grid({**cfg, "smoke": True})
    rows = pd.read_csv(smoke / "summary" / "runs.csv")
    assert set(rows["run_id"]) == set(runs)
    assert {"cifar10", "cifar100", "imagenet100"} == set(rows["dataset"]) and "resnet50" in set(rows["arch"])
    assert set(rows["probe_protocol"]) == {"paper"}
    assert set(rows.loc[rows["bg_acc"].notna(), "dataset"]) == {"imagenet100"}  # Waterbirds, on the ImageNet models
    assert rows.loc[rows["dyn_epochs"].notna(), "run_id"].str.contains("dyn~1/").all()
    for rid, run in runs.items():  # every run trained 1 epoch of 2 steps (an untrained twin none), with the grid's stem
        log = [json.loads(x) for x in (smoke / "runs" / rid / "log.jsonl").read_text().splitlines()]
        assert [x["steps"] for x in log] == ([] if run.init_of and not run.sets else [2]), rid
        assert run.config["model"]["stem"] == ("imagenet" if rid.startswith("imagenet100/") else "cifar")
    jobs = pd.read_csv(smoke / "summary" / "jobs.csv")
    assert (jobs["rule"] == "pretrain").sum() == len(runs) and (jobs["seconds"] > 0).all()
    assert "SMOKE RUN" in (smoke / "summary" / "jobs.md").read_text()


@pytest.mark.long
def test_a_bad_dataset_root_stops_the_run_before_any_job(tmp_path):
    """One line naming the dataset, the config key and the fix; nothing runs. A run whose outputs exist does
    not need its data: the same target with the model present runs."""
    cfg = yaml.safe_load((ROOT / "config" / "tiny.yaml").read_text())
    cfg["results"] = str(tmp_path / "results")
    cfg["datasets"]["cifar10"] = {"data": {"dataset": "cifar10", "root": str(tmp_path / "nowhere")}}
    for spec in cfg["sets"].values():
        spec["datasets"] = ["synthetic"]
    cfg["sets"]["table1"]["datasets"] = ["synthetic", "cifar10"]
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(cfg))
    from bayesncl.grid.expand import expand_grid

    runs = sorted(expand_grid(cfg))
    cifar = next(rid for rid in runs if rid.startswith("cifar10/"))
    synthetic = next(rid for rid in runs if rid.startswith("synthetic/ncl/"))
    targets = [f"{cfg['results']}/runs/{rid}/model.pt" for rid in (cifar, synthetic)]

    r = snakemake(*targets, "--cores", "1", "--configfile", str(path), timeout=300)
    lines = [x for x in r.stderr.splitlines() if x.startswith("pre-flight")]
    assert r.returncode == 2 and len(lines) == 1, r.stderr[-3000:]
    assert "cifar10 (datasets.cifar10.data.root: " in lines[0] and str(tmp_path / "nowhere") in lines[0]
    assert f"Fix: set datasets.cifar10.data.root in {path}" in lines[0]
    assert not (tmp_path / "results").exists()  # no job ran

    dry = snakemake(*targets, "-n", "--configfile", str(path), timeout=300)
    assert dry.returncode == 0 and "pre-flight (dry run): cifar10" in dry.stderr and "Job stats" in dry.stdout

    (tmp_path / "results" / "runs" / cifar).mkdir(parents=True)
    (tmp_path / "results" / "runs" / cifar / "model.pt").write_bytes(b"trained before the data moved")
    r = snakemake(*targets, "--cores", "1", "--configfile", str(path), timeout=300)
    assert r.returncode == 0 and "pre-flight" not in r.stderr, r.stderr[-3000:]
    assert Path(targets[1]).is_file()


def test_smoke_switch_plans_every_output_beside_the_results(tmp_path):
    """`--config smoke=true` (a string on the command line) moves every planned output to <results>-smoke;
    nothing is planned into the real results folder. A dry run: no job runs."""
    from bayesncl.grid.expand import smoke_results

    assert smoke_results("out/results/") == "out/results-smoke" == smoke_results("out/results-smoke")
    results = tmp_path / "results"
    r = snakemake("-n", "--configfile", "config/tiny.yaml", "--config", "smoke=true", f"results={results}",
                  timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    outputs = [line.split(":", 1)[1].strip() for line in r.stdout.splitlines() if line.strip().startswith("output:")]
    paths = [p for line in outputs for p in line.split(", ")]
    assert len(paths) > 50 and all(p.startswith(f"{results}-smoke/") for p in paths), paths[:5]
    assert f"{results}/" not in r.stdout


def test_the_smoke_run_reads_a_subset_of_imagenet100(tmp_path):
    """The smoke run's ImageNet-100 runs read (and prepare) the first SMOKE_CLASSES classes of their list, never the
    100; CIFAR runs are left as they are; run ids are the real grid's. Its preparation decodes that subset only."""
    from bayesncl.data.imagenet import SMOKE_CLASSES, prepared_manifests
    from bayesncl.grid.expand import expand_grid
    from bayesncl.settings.registry import DATASETS
    from helpers.datasets import write_imagenet

    cfg = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())
    real, smoke = expand_grid(cfg), expand_grid({**cfg, "smoke": True})
    # the same ids but for dynamics, which the smoke run records every epoch (dyn~1)
    assert {re.sub(r"/dyn~\d+/", "/", r) for r in smoke} == {re.sub(r"/dyn~\d+/", "/", r) for r in real}
    subset = imagenet100_classes()[:SMOKE_CLASSES]
    by_dataset = {}
    for run in smoke.values():
        by_dataset.setdefault(run.config["data"]["dataset"], set()).add(json.dumps(run.config["data"]["classes"]))
    prepared = {ds for ds in by_dataset if DATASETS[ds].prepare is not None}
    assert prepared and all(by_dataset[ds] == {json.dumps(subset)} for ds in prepared), by_dataset
    assert all(by_dataset[ds] == {"null"} for ds in by_dataset if ds not in prepared), by_dataset
    assert {json.dumps(r.config["data"]["classes"]) for r in real.values()} == {"null"}

    # `bayesncl prepare` with a smoke run's data settings: SMOKE_CLASSES classes decoded, of 100 present
    root = tmp_path / "imagenet"
    write_imagenet(root, wnids=imagenet100_classes(), n_train=1, n_val=1)
    run = next(r for r in smoke.values() if r.config["data"]["dataset"] in prepared)
    data = {**run.config["data"], "root": str(root), "cache_dir": str(tmp_path / "cache"), "imagenet_stored_size": 16}
    r = current().run([sys.executable, "-m", "bayesncl", "prepare", "--config-json", json.dumps({"data": data}),
                       "--workers", "1", "--quiet"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    for manifest in prepared_manifests(data):
        assert json.loads(Path(manifest).read_text())["count"] == SMOKE_CLASSES, manifest
