"""The workflow's pre-flight (bayesncl.grid.preflight): which dataset roots the jobs still to be done read, and the one
line per bad root. On the paper grid's runs (config/paper.yaml), with the roots pointed at folders made here."""

from pathlib import Path

import pytest
import yaml

from bayesncl.data.imagenet import imagenet100_classes
from bayesncl.evaluation.sections import SECTIONS
from bayesncl.grid.expand import evaluation_sections, expand_grid
from bayesncl.grid.preflight import missing_data, todo_from_files

ROOT = Path(__file__).resolve().parents[1]


def write_imagenet_folders(root: Path) -> Path:
    """What the cheap check asks of an ImageNet-100 root: train/ and val/ with a folder per listed class."""
    for split in ("train", "val"):
        for wnid in imagenet100_classes():
            (root / split / wnid).mkdir(parents=True)
    return root


def write_waterbirds_metadata(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "metadata.csv").write_text("img_id,img_filename,y,split,place,place_filename\n")
    return root


@pytest.fixture
def grid(tmp_path):
    """(workflow config, runs, the ImageNet-100 run of Table 6 (it has the background probe)) with good roots."""
    wf = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())
    wf["results"] = str(tmp_path / "results")
    ds = wf["datasets"]
    for name in ("cifar10", "cifar100"):
        (tmp_path / name).mkdir()
        ds[name]["data"]["root"] = str(tmp_path / name)
    ds["imagenet100"]["data"]["root"] = str(write_imagenet_folders(tmp_path / "imagenet"))
    ds["imagenet100"]["eval"]["waterbirds_root"] = str(write_waterbirds_metadata(tmp_path / "waterbirds"))
    runs = expand_grid(wf)
    rid = next(r for r, run in runs.items() if r.startswith("imagenet100/") and "table6" in run.sets)
    assert "background_probe" in evaluation_sections(runs[rid])
    return wf, runs, rid


def _with(wf: dict, dataset: str, section: str, key: str, value: str) -> tuple[dict, dict]:
    wf = yaml.safe_load(yaml.safe_dump(wf))
    wf["datasets"][dataset][section][key] = value
    return wf, expand_grid(wf)


def test_good_roots_give_no_line(grid):
    wf, runs, rid = grid
    assert missing_data(wf, runs, {rid: {"pretrain", *evaluation_sections(runs[rid]), "atlas"}}) == []


@pytest.mark.parametrize("todo", [{"pretrain"}, {"features"}, {"atlas"}, {"linear_probe"}])
def test_a_bad_imagenet_root_is_reported_for_every_job_that_reads_it(grid, tmp_path, todo):
    wf, _, rid = grid
    bad = str(tmp_path / "no-imagenet")
    wf, runs = _with(wf, "imagenet100", "data", "root", bad)
    assert SECTIONS["linear_probe"].gpu(runs[rid].config)  # the paper protocol reads the images
    lines = missing_data(wf, runs, {rid: todo}, "paper.yaml")
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"imagenet100 (datasets.imagenet100.data.root: {bad}): ")
    assert "Fix: set datasets.imagenet100.data.root in paper.yaml" in lines[0] and rid in lines[0]


def test_the_cpu_sections_and_a_finished_run_read_no_images(grid, tmp_path):
    wf, _, rid = grid
    wf, runs = _with(wf, "imagenet100", "data", "root", str(tmp_path / "no-imagenet"))
    assert missing_data(wf, runs, {rid: {"interpretability", "retrieval", "dynamics", "cost"}}) == []
    assert missing_data(wf, runs, {rid: set()}) == []


def test_a_bad_waterbirds_root_is_reported_while_the_background_probe_is_to_run(grid, tmp_path):
    wf, _, rid = grid
    bad = str(tmp_path / "no-waterbirds")
    wf, runs = _with(wf, "imagenet100", "eval", "waterbirds_root", bad)
    lines = missing_data(wf, runs, {rid: {"background_probe"}})
    assert len(lines) == 1 and lines[0].startswith(f"waterbirds (datasets.imagenet100.eval.waterbirds_root: {bad}): ")
    # training and the other sections do not read Waterbirds
    assert missing_data(wf, runs, {rid: {"pretrain", "features", "linear_probe", "atlas"}}) == []


def test_both_bad_roots_are_each_reported_once(grid, tmp_path):
    wf, _, _ = grid
    wf, _ = _with(wf, "imagenet100", "data", "root", str(tmp_path / "no-imagenet"))
    wf, runs = _with(wf, "imagenet100", "eval", "waterbirds_root", str(tmp_path / "no-waterbirds"))
    todo = {r: {"pretrain", *evaluation_sections(run)} for r, run in runs.items() if r.startswith("imagenet100/")}
    lines = missing_data(wf, runs, todo)
    assert sorted(line.split(" ", 1)[0] for line in lines) == ["imagenet100", "waterbirds"], lines


def test_todo_from_files(grid):
    """A run with model.pt still needs its missing sections (features first, which reads its dataset), and every
    section that reads the features made again (as Snakemake: their input is newer); an atlas is done when both its
    PDF and its PNG exist and none of its runs' features is to be made."""
    wf, runs, rid = grid
    results = Path(wf["results"])
    sections = {r: evaluation_sections(run) for r, run in runs.items()}
    other = next(r for r in runs if r.startswith("imagenet100/") and r != rid)
    atlas = {"imagenet100": [rid, other]}
    todo = todo_from_files(runs, results, atlas)
    assert todo[rid] == {"pretrain", "atlas", *sections[rid]}

    run_dir = results / "runs" / rid
    (run_dir / "eval").mkdir(parents=True)
    (run_dir / "model.pt").write_bytes(b"trained")
    from bayesncl.grid.expand import prepared_copies

    for tag in prepared_copies(runs)[0]:  # ImageNet-100's prepared copy made (else what reads it runs again)
        (results / "prepared").mkdir(exist_ok=True)
        (results / "prepared" / f"{tag}.txt").write_text("made")
    for name in sections[rid]:
        if name != "features":
            (run_dir / "eval" / f"{name}.json").write_text("{}")
    figures = results / "figures"
    figures.mkdir(parents=True)
    (figures / "atlas_imagenet100.png").write_bytes(b"png")
    todo = todo_from_files(runs, results, atlas)
    after = {s for s in sections[rid] if "features" in SECTIONS[s].reads}
    assert todo[rid] == {"features", "atlas", *after} and "atlas" in todo[other]
    assert "cost" in sections[rid] and "cost" not in todo[rid]  # it reads the model alone
    bad = str(Path(wf["results"]).parent / "moved-away")
    wf2, runs2 = _with(wf, "imagenet100", "data", "root", bad)
    lines = missing_data(wf2, runs2, {rid: {"features"}})
    assert len(lines) == 1 and lines[0].startswith("imagenet100 ") and bad in lines[0]

    (figures / "atlas_imagenet100.png").unlink()
    (figures / "atlas_imagenet100.pdf").write_bytes(b"pdf")
    assert "atlas" in todo_from_files(runs, results, atlas)[rid]
    (figures / "atlas_imagenet100.png").write_bytes(b"png")
    (run_dir / "eval" / "features.json").write_text("{}")
    (run_dir / "eval" / "features.npz").write_bytes(b"arrays")  # what the atlas reads
    todo = todo_from_files(runs, results, atlas)
    assert todo[rid] == {"atlas"} and "atlas" in todo[other]  # drawn again: the other run's features are to be made
    assert todo_from_files(runs, results, {"imagenet100": [rid]})[rid] == set()


def test_the_background_probe_with_waterbirds_reads_waterbirds_only(grid, tmp_path):
    """Waterbirds is embedded by the run's model: the run's own dataset is not read, so a bad dataset root does
    not stop it."""
    wf, _, rid = grid
    wf, runs = _with(wf, "imagenet100", "data", "root", str(tmp_path / "no-imagenet"))
    assert SECTIONS["background_probe"].gpu(runs[rid].config)
    assert missing_data(wf, runs, {rid: {"background_probe"}}) == []


def test_a_root_from_the_defaults_names_the_defaults_key(grid, tmp_path):
    wf, _, rid = grid
    bad = str(tmp_path / "no-imagenet")
    wf = yaml.safe_load(yaml.safe_dump(wf))
    del wf["datasets"]["imagenet100"]["data"]["root"]
    wf["defaults"]["data"]["root"] = bad
    runs = expand_grid(wf)
    (line,) = missing_data(wf, runs, {rid: {"pretrain"}})
    assert line.startswith(f"imagenet100 (defaults.data.root: {bad}): ")
    assert "Fix: set defaults.data.root in the workflow config to the folder" in line


def test_a_synthetic_grid_is_checked_without_torch(tmp_path):
    """The pre-flight runs in every Snakemake invocation: a grid of synthetic runs only never imports torch."""
    import subprocess
    import sys

    code = f"""
import sys, yaml
from bayesncl.grid.expand import expand_grid
from bayesncl.grid.preflight import missing_data
wf = yaml.safe_load(open({str(ROOT / "config" / "tiny.yaml")!r}))
runs = expand_grid(wf)
assert missing_data(wf, runs, {{rid: {{"pretrain", "features", "atlas"}} for rid in runs}}) == []
assert "torch" not in sys.modules, "torch imported"
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]


def test_a_prepared_copy_still_to_be_made_is_a_job_of_its_own(grid):
    """The prepared copy of ImageNet-100 (grid.expand.prepared_copies: the workflow's prepare_data markers) is one job,
    named by the hash of its folder, for every run that reads it; once its marker exists, nothing."""
    import hashlib

    from bayesncl.grid.expand import prepared_copies
    from bayesncl.grid.stale import planned_jobs

    wf, runs, rid = grid
    copies, of = prepared_copies(runs)
    (tag, (manifests, data)), = copies.items()
    assert tag == hashlib.sha256(str(Path(manifests[0]).parent).encode()).hexdigest()[:16]
    assert data["dataset"] == "imagenet100" and data["root"] == wf["datasets"]["imagenet100"]["data"]["root"]
    assert set(data) == {"dataset", "root", "classes", "imagenet_stored_size", "cache_dir"}  # what names the copy
    assert {r for r, tags in of.items() if tags == [tag]} == {r for r in runs if r.startswith("imagenet100/")}
    assert all(of[r] == [] for r in runs if not r.startswith("imagenet100/"))

    def prepares():
        return [(j.target, j.planned) for j in planned_jobs(wf, wf["results"], runs=runs, compare=False)
                if j.rule == "prepare_data"]

    assert prepares() == [(tag, True)]
    marker = Path(wf["results"]) / "prepared" / f"{tag}.txt"
    marker.parent.mkdir(parents=True)
    marker.write_text("\n".join(manifests) + "\n")
    assert prepares() == []


def test_a_root_is_checked_once_however_often_it_is_asked(grid, monkeypatch):
    """The workflow asks when it reads the grid (every root) and again once the DAG is built (the roots its jobs
    read): what a root's check found is kept (`checked`), so an image folder is read through once."""
    import bayesncl.grid.preflight as P

    wf, runs, rid = grid
    calls, real = [], P._check
    monkeypatch.setattr(P, "_check", lambda what, data: calls.append(what) or real(what, data))
    checked: dict = {}
    todo = {rid: {"pretrain", "background_probe"}}
    assert missing_data(wf, runs, todo, checked=checked) == [] and calls == ["imagenet100", "waterbirds"]
    assert len(checked) == 2
    wf2, runs2 = _with(wf, "imagenet100", "data", "root", str(Path(wf["results"]).parent / "gone"))
    assert missing_data(wf2, runs2, todo, checked=checked) != [] and calls[2:] == ["imagenet100"]  # another root
    assert missing_data(wf, runs, todo, checked=checked) == [] and len(calls) == 3  # both known: read once
    assert missing_data(wf, runs, todo) == [] and len(calls) == 5  # no memory given: checked again


def test_todo_from_jobs():
    """What the DAG plans, per run: each job of a run by its rule; an atlas job for both runs its figure reads; a
    job of no run (the report's) for none."""
    from types import SimpleNamespace

    from snakemake.iocontainers import Wildcards

    from bayesncl.grid.preflight import todo_from_jobs

    def job(rule, **wildcards):
        return SimpleNamespace(rule=SimpleNamespace(name=rule), wildcards=Wildcards(fromdict=wildcards))

    runs = {"cifar10/ncl/seed~0": None, "cifar10/bayesncl/seed~0": None, "cifar100/ncl/seed~0": None}
    atlas = {"cifar10": ["cifar10/ncl/seed~0", "cifar10/bayesncl/seed~0"]}
    jobs = [job("pretrain", run="cifar10/ncl/seed~0"), job("features", run="cifar10/ncl/seed~0"),
            job("atlas", dataset="cifar10"), job("summarize"), job("pretrain", run="elsewhere/seed~0")]
    assert todo_from_jobs(jobs, runs, atlas) == {"cifar10/ncl/seed~0": {"pretrain", "features", "atlas"},
                                                 "cifar10/bayesncl/seed~0": {"atlas"}, "cifar100/ncl/seed~0": set()}
    # a run's evaluation as one job (a machine without a GPU): its sections, read from its eval/<section>.json outputs
    one = job("evaluate_with_cost", run="cifar100/ncl/seed~0")
    one.output = ["r/runs/cifar100/ncl/seed~0/eval/features.json", "r/runs/cifar100/ncl/seed~0/eval/features.npz",
                  "r/runs/cifar100/ncl/seed~0/eval/cost.json", "r/runs/cifar100/ncl/seed~0/other/linear_probe.json",
                  "r/runs/cifar100/ncl/seed~0/eval/not_a_section.json",
                  "r/runs/cifar100/ncl/seed~0/eval/retrieval.npz"]
    assert todo_from_jobs([one], runs, atlas)["cifar100/ncl/seed~0"] == {"evaluate_with_cost", "features", "cost"}


def test_a_per_run_grid_plans_a_run_s_evaluation_as_one_job(tmp_path):
    """`evaluation_jobs: per_run`: a run's sections are one job, to be made where any of its outputs is missing (the
    pre-flight reads the sections it runs: features reads the dataset), planned after the report's jobs read it, and
    run again where one section's recorded trigger differs from today's."""
    import json

    from bayesncl.grid.expand import evaluation_job, job_trigger
    from bayesncl.grid.stale import planned_jobs

    wf = yaml.safe_load((ROOT / "config" / "tiny.yaml").read_text())
    wf.update(results=str(tmp_path / "results"), evaluation_jobs="per_run",
              sets={"table1": {"variants": ["NCL", "BayesNCL (STE)"]}})
    runs = expand_grid(wf)
    results = tmp_path / "results"
    sections = {rid: evaluation_sections(run) for rid, run in runs.items()}
    for rid, run in runs.items():  # every run made, each file with its trigger
        d = results / "runs" / rid
        (d / "eval").mkdir(parents=True)
        (d / "model.pt").write_bytes(b"trained")
        for s in sections[rid]:
            trigger = json.loads(job_trigger(run.config, "evaluate", s))
            (d / "eval" / f"{s}.json").write_text(json.dumps({"run": {"trigger": trigger}}))
    a, b = sorted(r for r in runs if "epochs~0" not in r)
    job = {rid: evaluation_job(sections[rid]) for rid in runs}
    assert todo_from_files(runs, results, {}, wf) == {rid: set() for rid in runs}
    (results / "runs" / b / "eval" / "retrieval.json").unlink()  # one output of b's job missing
    assert todo_from_files(runs, results, {}, wf)[b] == {job[b], *sections[b]}
    assert todo_from_files(runs, results, {})[b] == {"retrieval"}  # a job per section
    planned = planned_jobs(wf, results)
    assert [(j.rule, j.target, j.planned, j.sections) for j in planned] == [
        (job[b], b, False, tuple(sections[b]))]  # nothing to run reads it yet
    record = results / "runs" / a / "eval" / "linear_probe.json"
    stale = json.loads(record.read_text())
    stale["run"]["trigger"]["eval"]["probe_epochs"] = 7
    record.write_text(json.dumps(stale))
    lines = {(j.rule, j.target): j.why for j in planned_jobs(wf, results) if j.planned}
    assert lines[(job[a], a)] == "linear_probe: eval.probe_epochs 7 (today 50)"
    assert lines[(job[b], b)] == "not made yet"  # the report's jobs after a's read all of b's files
    assert ("summarize", "") in lines and not any(rule in SECTIONS for rule, _ in lines)
