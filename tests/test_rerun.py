"""What reruns a finished grid (docs/USAGE.md, "Upgrading"): a pretraining or evaluation job's trigger is what
decides its outputs (bayesncl.grid.expand.trigger_config), not every key the code knows.

The workflow tests run `snakemake -n` over the finished tiny grid (conftest's tiny_grid) with a copy of the
package in which one line of settings/config.py was changed, as a `git pull` would change it: a new key, a changed
default.
"""

import json
import os
import re
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd
import pytest
import yaml

from bayesncl.settings import config as C
from bayesncl.grid.expand import expand_grid, trigger_config, trigger_diff
from bayesncl.grid.stale import REPORT_JOBS, describe, run_staleness
from helpers.grids import dry_jobs, pretrained
from helpers.processes import current

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = shutil.which("snakemake", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")


def _cfg(*sets):
    return C.resolve(sets=list(sets))


# ----------------------------------------------------------------------------------------------- the trigger
def test_a_key_at_its_old_behaviour_leaves_the_trigger():
    """train.loss_scaler was added with runs before it taking every step (added: none): a run at none has the
    trigger of a run recorded before the key existed; at fp16 the key is in it."""
    none, fp16 = _cfg("train.loss_scaler=none"), _cfg("train.loss_scaler=fp16")
    assert "loss_scaler" not in trigger_config(none)["train"]
    assert trigger_config(fp16)["train"]["loss_scaler"] == "fp16"
    old = json.loads(json.dumps(none))
    del old["train"]["loss_scaler"]
    assert trigger_config(C.as_recorded(old)) == trigger_config(none)


def test_locations_and_evaluation_settings_never_retrain():
    base = trigger_config(_cfg())
    for key in ("train.device=cpu", "train.threads=3", "data.num_workers=1", "data.cache_dir=/elsewhere",
                "eval.probe=paper", "eval.batch_size=64"):
        assert trigger_config(_cfg(key)) == base, key
    assert trigger_config(_cfg("method.temperature=0.3")) != base


def test_a_method_setting_its_method_does_not_read_leaves_its_trigger():
    ncl = trigger_config(_cfg("method.name=ncl"))
    assert trigger_config(_cfg("method.name=ncl", "method.head_lr=0.5", "method.rho=0.5")) == ncl
    assert trigger_config(_cfg("method.name=ncl", "method.nonneg=relu")) != ncl
    bayes = trigger_config(_cfg("method.name=bayesncl"))
    assert trigger_config(_cfg("method.name=bayesncl", "method.head_lr=0.5")) != bayes
    cl = trigger_config(_cfg("method.name=cl"))
    assert trigger_config(_cfg("method.name=cl", "method.nonneg=relu")) == cl


def test_the_evaluation_trigger_holds_eval_and_the_data_but_not_its_locations():
    base = trigger_config(_cfg(), "evaluate")
    assert trigger_config(_cfg("eval.probe=paper"), "evaluate") != base
    assert trigger_config(_cfg("data.synthetic.test_size=99"), "evaluate") != base
    assert trigger_config(_cfg("data.cache_dir=/elsewhere", "train.epochs=3"), "evaluate") == base


def test_trigger_diff_names_each_key_with_both_values():
    was, now = _cfg("train.epochs=3"), _cfg("train.epochs=5")
    assert trigger_diff(was, now) == [("train.epochs", 3, 5)]
    assert trigger_diff(now, now) == []


def test_a_run_recorded_before_a_key_existed_is_stale_only_where_it_did_otherwise():
    wf = yaml.safe_load((ROOT / "config" / "tiny.yaml").read_text())
    run = next(iter(expand_grid(wf).values()))
    recorded = json.loads(json.dumps(run.config))
    assert run_staleness(recorded, run) == {}
    del recorded["train"]["loss_scaler"]  # trained before the key: every step taken, today fp16
    diff = run_staleness(recorded, run)
    assert diff == {"train.loss_scaler": ["none", "fp16"]}
    assert describe({"train.loss_scaler": ["none", "fp16"]}) == "train.loss_scaler none (today fp16)"


# ------------------------------------------------------------------------------------ on a finished grid
def _package_copy(tmp_path, old: str, new: str, module: str = "settings/config.py") -> Path:
    """src/ copied with one change to one of its modules, settings/config.py unless named (exactly one occurrence of
    `old`)."""
    src = tmp_path / "src"
    shutil.copytree(ROOT / "src", src, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    path = src / "bayesncl" / module
    text = path.read_text()
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new))
    return src


def _grid_file(tmp_path, results: Path) -> Path:
    """The tiny grid, as the finished one was run."""
    wf = yaml.safe_load((ROOT / "config" / "tiny.yaml").read_text())
    wf["results"] = str(results)
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(wf, sort_keys=False))
    return path


def _plan(args, src: Path | None) -> tuple[dict[str, int], list[str], str]:
    """(jobs per rule, the jobs as "rule target" (dry_jobs), the output) of `snakemake -n` with the finished grid's
    arguments (tiny_grid's: its config file and results folder)."""
    env = dict(os.environ, PYTHONPATH=str(src or ROOT / "src"), OMP_NUM_THREADS="1")
    r = current().run([SNAKEMAKE, "-n", "--nolock", "--cores", "1", *args], cwd=ROOT, env=env,
                      capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    if "Job stats:" not in r.stdout:
        assert "Nothing to be done" in r.stdout + r.stderr, r.stdout[-3000:]
        return {}, [], r.stdout
    table = r.stdout.split("Job stats:")[1]
    counts = {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M)}
    return counts, dry_jobs(r.stdout), r.stdout


pytestmark_wf = pytest.mark.skipif(SNAKEMAKE is None, reason="snakemake not installed (pip install -e '.[workflow]')")

NEW_KEY = ('    max_steps_per_epoch: int = _field(0, "cap on steps per epoch; 0: no cap", ge=0)\n',
           '    max_steps_per_epoch: int = _field(0, "cap on steps per epoch; 0: no cap", ge=0)\n'
           '    label_smoothing: float = _field(0.0, "a new key", ge=0, added=0.0)\n')


def _stale(grid: Path, src: Path | None, *args: str) -> tuple[list[str], list[str], str]:
    """(the jobs `bayesncl stale` lists as "rule target", sorted; its lines; its stderr) for the grid with the
    package at `src`."""
    env = dict(os.environ, PYTHONPATH=str(src or ROOT / "src"))
    r = current().run([sys.executable, "-m", "bayesncl", "stale", "--grid", str(grid), *args], env=env, cwd=ROOT,
                      capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.splitlines()
    return sorted(line.split(": ")[0] for line in lines), lines, r.stderr


def _train(targets: list[str], grid: Path) -> None:
    """Snakemake makes `targets` of `grid` with the package under test, in a plain process (no fork server)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
    env.pop("BAYESNCL_FORKSERVER_DIR", None)
    env.pop("BAYESNCL_PLUGINS", None)
    r = current().run([SNAKEMAKE, *targets, "--cores", "2", "--nolock", "--configfile", str(grid)], cwd=ROOT, env=env,
                      capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, (r.stdout + r.stderr)[-5000:]


@pytestmark_wf
def test_a_new_key_at_its_old_behaviour_plans_no_job(tiny_grid, tmp_path):
    results, args, _ = tiny_grid
    assert _plan(args, None)[0] == {}
    src = _package_copy(tmp_path, *NEW_KEY)
    counts, _, out = _plan(args, src)
    assert counts == {}, out[-3000:]
    assert _stale(_grid_file(tmp_path, results), src)[0] == []


@pytestmark_wf
def test_a_new_key_not_declared_as_its_old_behaviour_reruns_every_run_and_stale_lists_them(tiny_grid, tmp_path):
    """The control: without `added`, nothing says the new key keeps what the runs did. Snakemake plans every
    run again, its evaluation, atlas and report after it, and `bayesncl stale` lists the same jobs, one by one
    (it once printed "0 stale run(s)": it completed the record with today's default before comparing)."""
    results, args, _ = tiny_grid
    old, new = NEW_KEY
    src = _package_copy(tmp_path, old, new.replace(", added=0.0", ""))
    counts, planned, _ = _plan(args, src)
    runs = expand_grid(yaml.safe_load((ROOT / "config" / "tiny.yaml").read_text()))
    assert counts["pretrain"] == len(runs) and pretrained(planned) == sorted(runs)
    assert counts["atlas"] == 1 and counts["summarize"] == counts["pdf"] == 1
    listed, lines, _ = _stale(_grid_file(tmp_path, results), src)
    assert listed == planned
    assert all(line.endswith(": train.label_smoothing absent (today 0.0)") for line in lines
               if line.startswith("pretrain ")), lines


@pytestmark_wf
@pytest.mark.parametrize("old, new, affected", [
    # read by BayesNCL alone: its runs, and no other method's
    ('head_lr: float = _field(0.1,', 'head_lr: float = _field(0.2,', lambda run: run.config["method"]["name"] == "bayesncl"),
    # read by every method built on z+: every run but SimCLR's
    ('nonneg: Literal["relu", "rep_relu"] = _field("rep_relu",', 'nonneg: Literal["relu", "rep_relu"] = _field("relu",',
     lambda run: run.config["method"]["name"] != "cl"),
])
def test_a_changed_default_plans_exactly_the_runs_that_take_it(tiny_grid, tmp_path, old, new, affected):
    results, args, _ = tiny_grid
    grid = _grid_file(tmp_path, results)
    src = _package_copy(tmp_path, old, new)
    counts, planned, out = _plan(args, src)
    runs = expand_grid(yaml.safe_load(grid.read_text()))
    want = sorted(rid for rid, run in runs.items() if affected(run))
    assert 0 < len(want) < len(runs)
    assert pretrained(planned) == want, out[-3000:]
    assert counts["pretrain"] == len(want)

    # `bayesncl stale` names exactly those jobs, the pretraining ones with the key and both values
    env = dict(os.environ, PYTHONPATH=str(src))
    listed, lines, _ = _stale(grid, src)
    assert listed == planned
    tail = "method.head_lr 0.1 (today 0.2)" if "head_lr" in old else "method.nonneg rep_relu (today relu)"
    assert all(line.endswith(tail) for line in lines if line.startswith("pretrain ")), lines
    r = current().run([sys.executable, "-m", "bayesncl", "stale", "--grid", str(grid), "--targets"], env=env,
                      cwd=ROOT, capture_output=True, text=True)
    made_again = [j for j in planned if " " in j]  # the report's jobs follow; --forcerun names the others
    assert len(r.stdout.split()) == len(made_again)
    assert sorted(p for p in r.stdout.split() if p.endswith("/model.pt")) == sorted(
        str(results / "runs" / rid / "model.pt") for rid in want)


@pytestmark_wf
def test_the_report_names_the_stale_runs_in_its_captions(tiny_grid, tmp_path):
    results, _, _ = tiny_grid
    grid = _grid_file(tmp_path, results)
    src = _package_copy(tmp_path, 'head_lr: float = _field(0.1,', 'head_lr: float = _field(0.2,')
    env = dict(os.environ, PYTHONPATH=str(src))
    csv = tmp_path / "runs.csv"
    for args in (["summarize", "--grid", str(grid), "--out", str(csv)],
                 ["report", "--summary", str(csv), "--out", str(tmp_path / "out"), "--grid", str(grid)]):
        r = current().run([sys.executable, "-m", "bayesncl", *args], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
    df = pd.read_csv(csv, keep_default_na=False)
    stale = df[df["stale"] != ""]
    assert set(stale["method"]) == {"bayesncl"} and len(stale) == (df["method"] == "bayesncl").sum()
    assert json.loads(stale["stale"].iloc[0]) == {"method.head_lr": [0.1, 0.2]}
    caption = (tmp_path / "out" / "tables" / "table1.md").read_text()
    n1 = int((df["sets"].str.split(";").apply(lambda s: "table1" in s) & (df["stale"] != "")).sum())
    n = int(df["sets"].str.split(";").apply(lambda s: "table1" in s).sum())
    assert 0 < n1 < n
    assert (f"Runs trained under other settings than the workflow config gives them today: method.head_lr 0.1 in "
            f"{n1} of the table's {n} runs (today 0.2).") in caption


def test_stale_compares_each_recorded_config_with_today_s(tmp_path):
    """bayesncl.grid.stale on run folders written by hand: a run recorded as today, one recorded under another
    default, one recorded before a key existed (each with its model.pt), one never trained."""
    from bayesncl.settings.config import dump_yaml
    from bayesncl.grid.stale import planned_jobs

    wf = yaml.safe_load((ROOT / "config" / "tiny.yaml").read_text())
    runs = expand_grid(wf)
    ids = list(runs)
    same, other, older, untrained = ids[0], ids[1], ids[2], ids[3]
    for rid in (same, other, older):
        cfg = json.loads(json.dumps(runs[rid].config))
        if rid == other:
            cfg["method"]["temperature"] = 0.3  # trained under another default
        if rid == older:
            del cfg["train"]["loss_scaler"]  # recorded before the key: every step taken
        folder = tmp_path / "runs" / rid
        folder.mkdir(parents=True)
        (folder / "config.resolved.yaml").write_text(dump_yaml(cfg))
        (folder / "model.pt").write_bytes(b"trained")
    jobs = {j.target: j for j in planned_jobs(wf, tmp_path) if j.rule == "pretrain"}
    found = {rid: j.why for rid, j in jobs.items() if j.why != "not made yet"}
    assert found == {other: "method.temperature 0.3 (today 0.2)", older: "train.loss_scaler none (today fp16)"}
    assert same not in jobs and jobs[untrained].why == "not made yet"
    assert jobs[untrained].planned  # summarize runs after the two, and reads every run's evaluation: made first
    assert [jobs[rid].output for rid in (other, older)] == [str(tmp_path / "runs" / rid / "model.pt")
                                                            for rid in (other, older)]
    assert describe({"method.topk_k": [None, 3]}) == "method.topk_k null (today 3)"
    assert describe({"a.b": [1, 2], "c.d": ["x", "y"]}) == "a.b 1 (today 2); c.d x (today y)"


def test_a_run_of_a_plugin_no_longer_used_is_stale():
    """Its recorded plugin code names an entry today's config does not use (the method now the package's own, or
    no longer a plugin's): its pretraining trigger lost that code, so Snakemake retrains it, and stale says so
    (comparing only the entries today's config uses would find nothing)."""
    wf = yaml.safe_load((ROOT / "config" / "tiny.yaml").read_text())
    run = next(r for r in expand_grid(wf).values() if r.config["method"]["name"] == "ncl")
    recorded = json.loads(json.dumps(run.config))
    assert run_staleness(recorded, run, {}) == {}
    assert run_staleness(recorded, run, {"method ncl": "version 1"}) == {"code of method ncl": ["version 1", "absent"]}
    assert run_staleness(recorded, run, None) == {}  # no record: not compared


# ------------------------------------------------------------------- the jobs from the records, by hand
def _made(tmp_path, wf: dict) -> tuple[dict, dict, dict]:
    """Every run of `wf` made by hand under tmp_path as the workflow makes it (config.resolved.yaml, model.pt, each
    section's file recording its job's trigger), the atlas and the report: (runs, the atlas's runs, sections)."""
    from bayesncl.settings.config import dump_yaml
    from bayesncl.evaluation.sections import SECTIONS
    from bayesncl.grid.expand import evaluation_sections, job_trigger
    from bayesncl.report.atlas import atlas_runs

    runs = expand_grid(wf)
    sections = {rid: evaluation_sections(run) for rid, run in runs.items()}
    for rid, run in runs.items():
        folder = tmp_path / "runs" / rid
        (folder / "eval").mkdir(parents=True)
        (folder / "config.resolved.yaml").write_text(dump_yaml(run.config))
        (folder / "model.pt").write_bytes(b"trained")
        for name in sections[rid]:
            trigger = json.loads(job_trigger(run.config, "evaluate", name))
            (folder / "eval" / f"{name}.json").write_text(json.dumps({"run": {"trigger": trigger}, name: {}}))
            for _, file in SECTIONS[name].outputs:  # features.npz, vectors.npz
                (folder / "eval" / file).write_bytes(b"arrays")
    for name in ("figures/atlas_synthetic.pdf", "figures/atlas_synthetic.png", "summary/runs.csv"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("made")
    return runs, atlas_runs(runs), sections


def _one_run(tmp_path) -> tuple[dict, str, Path]:
    """The tiny grid cut to one NCL run (no twin, no atlas), made by hand: (the grid, the run's id, its folder)."""
    wf = yaml.safe_load((ROOT / "config" / "tiny.yaml").read_text())
    wf["variants"] = {"NCL": wf["variants"]["NCL"]}
    wf["sets"] = {"table7": {"variants": ["NCL"]}}
    (rid,) = _made(tmp_path, wf)[0]
    return wf, rid, tmp_path / "runs" / rid


def _lines(jobs) -> list[str]:
    return [j.line() for j in jobs]


def test_stale_plans_from_the_records_what_follows_and_what_is_not_made(tmp_path):
    """planned_jobs on folders made by hand: nothing when every record is today's; an evaluation file's recorded
    trigger that differs, its job alone and the report's after it; a features file missing, the sections that read
    it, the atlas and the report after it; a recorded config that differs, the run's every job after it."""
    from bayesncl.evaluation.sections import SECTIONS
    from bayesncl.grid.stale import planned_jobs

    wf = yaml.safe_load((ROOT / "config" / "tiny.yaml").read_text())
    wf["variants"] = {k: wf["variants"][k] for k in ("NCL", "BayesNCL (STE)")}
    wf["sets"] = {"table1": {"variants": ["NCL", "BayesNCL (STE)"]}}
    runs, atlas, sections = _made(tmp_path, wf)
    assert planned_jobs(wf, tmp_path, atlas=atlas, pdf=True) == []
    ncl, bayes = atlas["synthetic"]
    report = ["summarize", "report", "plan", "jobs", "document"]

    path = tmp_path / "runs" / ncl / "eval" / "retrieval.json"
    kept = path.read_text()
    record = json.loads(kept)
    record["run"]["trigger"]["eval"]["batch_size"] = 64
    del record["run"]["trigger"]["eval"]["bn"]
    path.write_text(json.dumps(record))
    assert _lines(planned_jobs(wf, tmp_path, atlas=atlas)) == [
        f"retrieval {ncl}: eval.batch_size 64 (today 256); eval.bn absent (today batch)",
        *(f"{job}: after 1 evaluation job(s)" for job in report)]
    assert planned_jobs(wf, tmp_path, atlas=atlas, compare=False) == []  # by the files alone: nothing missing
    record["run"]["trigger"]["plugin_code"] = {"section gone": "version 1"}
    record["run"]["trigger"]["eval"] = json.loads(kept)["run"]["trigger"]["eval"]
    path.write_text(json.dumps(record))
    jobs = planned_jobs(wf, tmp_path, atlas=atlas, pdf=True)
    assert _lines(jobs)[0] == f"retrieval {ncl}: code of section gone version 1 (today absent)"
    assert [j.rule for j in jobs[1:]] == [*report, "pdf"] and jobs[0].output == str(path) and jobs[0].planned
    path.write_text(kept)

    features = tmp_path / "runs" / bayes / "eval" / "features.json"
    kept_features = features.read_text()
    features.unlink()  # a missing output that nothing to run reads: made only where a target needs it
    assert _lines(planned_jobs(wf, tmp_path, atlas=atlas)) == [f"features {bayes}: not made yet"]
    assert not planned_jobs(wf, tmp_path, atlas=atlas)[0].planned
    path = tmp_path / "runs" / bayes / "eval" / "retrieval.json"
    record = json.loads(path.read_text())
    record["run"]["trigger"]["eval"]["batch_size"] = 64
    path.write_text(json.dumps(record))  # retrieval to run: the features it reads are made first, and what reads them
    jobs = planned_jobs(wf, tmp_path, atlas=atlas)
    why = {"features": "not made yet", "retrieval": "eval.batch_size 64 (today 256)"}
    readers = [s for s in sections[bayes] if "features" in SECTIONS[s].reads]  # dynamics and cost read the model
    assert "retrieval" in readers and "cost" not in readers
    assert _lines(jobs) == [*(f"{s} {bayes}: {why.get(s, f'after features {bayes}')}" for s in ["features", *readers]),
                            f"atlas synthetic: after features {bayes}",
                            *(f"{job}: after {1 + len(readers)} evaluation job(s)" for job in report)]
    assert all(j.planned for j in jobs) and not Path(jobs[0].output).exists() and Path(jobs[1].output).exists()
    features.write_text(kept_features)
    record["run"]["trigger"]["eval"]["batch_size"] = 256
    path.write_text(json.dumps(record))
    assert planned_jobs(wf, tmp_path, atlas=atlas) == []

    twin = next(rid for rid in runs if "epochs~0" in rid)
    cfg = yaml.safe_load((tmp_path / "runs" / twin / "config.resolved.yaml").read_text())
    cfg["seed"] = 5
    (tmp_path / "runs" / twin / "config.resolved.yaml").write_text(yaml.safe_dump(cfg))
    jobs = planned_jobs(wf, tmp_path, atlas=atlas)
    assert _lines(jobs)[0] == f"pretrain {twin}: seed 5 (today 0)" and jobs[0].output.endswith(f"{twin}/model.pt")
    assert _lines(jobs)[1:] == [*(f"{s} {twin}: after {'pretrain' if 'model' in SECTIONS[s].reads else 'features'} "
                                  f"{twin}" for s in sections[twin]),
                                *(f"{job}: after {len(sections[twin])} evaluation job(s)" for job in report)]
    assert planned_jobs(wf, tmp_path, atlas=atlas, compare=False) == []


def test_stale_names_what_it_cannot_compare_and_lists_what_it_can(tmp_path, capsys):
    from bayesncl.grid.stale import NOT_COMPARED, print_stale

    wf, rid, folder = _one_run(tmp_path)
    (folder / "eval" / "cost.json").write_text(json.dumps({"run": {}, "cost": {}}))  # older: no trigger recorded
    (folder / "eval" / "retrieval.json").write_text("[1]")
    (folder / "eval" / "linear_probe.json").unlink()
    print_stale(wf, tmp_path, "g.yaml")
    out, err = capsys.readouterr()
    assert out == ""  # a deleted evaluation file no job to run reads: Snakemake makes it only for a target
    assert err.splitlines() == [
        f"{rid} retrieval: not compared: {folder / 'eval' / 'retrieval.json'}: no evaluation file (no run block with "
        "its trigger); it is the evaluation's: restore it, or evaluate the run again",
        f"1 evaluation job(s) not compared: their files record no trigger (made before bayesncl recorded it; evaluate "
        f"them again to compare them), e.g. {rid} cost",
        f"0 job(s) to run under {tmp_path}; 1 job(s) whose output is missing and that none of them reads (snakemake "
        "makes them where a target of the workflow needs them; --all lists them)",
        NOT_COMPARED[0].upper() + NOT_COMPARED[1:]]
    print_stale(wf, tmp_path, "g.yaml", all_jobs=True)
    assert capsys.readouterr().out == f"linear_probe {rid}: not made yet\n"
    path = folder / "eval" / "interpretability.json"
    record = json.loads(path.read_text())
    record["run"]["trigger"]["eval"]["probe"] = "paper"  # evaluated under another protocol than today's
    path.write_text(json.dumps(record))
    print_stale(wf, tmp_path, "g.yaml")
    out, err = capsys.readouterr()
    assert out.splitlines() == [f"interpretability {rid}: eval.probe paper (today fast)",
                                f"linear_probe {rid}: not made yet"] + [  # what summarize reads, made first
        f"{job}: after 2 evaluation job(s)" for job in REPORT_JOBS[:-1]]
    assert err.splitlines()[-2] == (
        f"7 job(s) to run under {tmp_path}; make them: snakemake --cores N --configfile g.yaml (exactly these, made "
        "before: --forcerun $(bayesncl stale --grid g.yaml --targets))")
    print_stale(wf, tmp_path, "g.yaml", targets_only=True)
    assert capsys.readouterr().out == f"{path}\n"  # the others follow, or are made for the first time


def test_stale_notes_a_missing_record_as_not_compared(tmp_path, capsys):
    """A trained run whose config.resolved.yaml is gone, and an evaluation file written before files recorded their
    trigger: neither is compared (as Snakemake compares a missing record of its own: not at all), and each is named
    as not compared, never left out in silence."""
    from bayesncl.grid.stale import planned_jobs, print_stale

    wf, rid, folder = _one_run(tmp_path)
    (folder / "config.resolved.yaml").unlink()  # beside its model.pt
    (folder / "eval" / "cost.json").write_text(json.dumps({"run": {}, "cost": {}}))  # no trigger recorded
    unread: dict[str, str] = {}
    assert planned_jobs(wf, tmp_path, unread=unread) == []
    missing = f"{folder / 'config.resolved.yaml'} is missing (snakemake compares its own record)"
    assert unread == {rid: missing, f"{rid} cost": ""}
    print_stale(wf, tmp_path, "g.yaml")
    err = capsys.readouterr().err.splitlines()
    assert err[:2] == [f"{rid}: not compared: {missing}",
                       f"1 evaluation job(s) not compared: their files record no trigger (made before bayesncl "
                       f"recorded it; evaluate them again to compare them), e.g. {rid} cost"]
    (folder / "model.pt").unlink()  # not trained: nothing recorded to compare, the run is to be made
    unread.clear()
    assert [j.line() for j in planned_jobs(wf, tmp_path, unread=unread)][0] == f"pretrain {rid}: not made yet"
    assert rid not in unread


# ----------------------------------------------------------------------- a finished grid with plugin methods
PLUGIN = """
from bayesncl.settings import registry
from bayesncl.model.methods import NCL


@registry.method("{name}", label="{name}", reads=("temperature", "nonneg"){version},
                 settings={{"l1_weight": registry.setting({default}, "the L1 penalty's weight", ge=0){more}}})
class Plug(NCL):
    extra_names = ("l1",)

    def extra_loss(self, out):
        return {{"l1": self.cfg["method"]["l1_weight"] * out["zplus"].float().sum(dim=1).{reduce}(){extra}}}
"""
PLUGINS = {"plug_l1": {"version": ""}, "plug_v": {"version": ', version="1"'}}  # a digest, a declared version


def write_plugin(folder: Path, name: str, **edit) -> None:
    fmt = {"name": name, "default": "1e-3", "reduce": "mean", "more": "", "extra": "", **PLUGINS[name], **edit}
    (folder / f"{name}.py").write_text(PLUGIN.format(**fmt))


@pytest.fixture(scope="module")
def plugin_grid(tmp_path_factory):
    """The tiny grid's defaults with two plugin methods: plug_l1 (its code identified by its digest) at its default
    and at ten times it, plug_v (a declared version), and NCL; pretrained only (their model.pt). Returns (folder,
    grid file, the model.pt targets)."""
    if SNAKEMAKE is None:
        pytest.skip("snakemake not installed (pip install -e '.[workflow]')")
    work = tmp_path_factory.mktemp("plugin_grid")
    for name in PLUGINS:
        write_plugin(work, name)
    wf = yaml.safe_load((ROOT / "config" / "tiny.yaml").read_text())
    wf.update(results=str(work / "results"), plugins=list(PLUGINS),
              variants={"NCL": {"method": {"name": "ncl"}}, "L1": {"method": {"name": "plug_l1"}},
                        "L1 x10": {"method": {"name": "plug_l1", "l1_weight": 1.0e-2}},
                        "V": {"method": {"name": "plug_v"}}},
              sets={"table7": {"variants": ["NCL", "L1", "L1 x10", "V"]}})  # no untrained twins: pretraining only
    grid = work / "grid.yaml"
    grid.write_text(yaml.safe_dump(wf, sort_keys=False))
    targets = [str(work / "results" / "runs" / rid / "model.pt") for rid in
               ("synthetic/ncl/seed~0", "synthetic/plug_l1/seed~0", "synthetic/plug_l1/l1_weight~0.01/seed~0",
                "synthetic/plug_v/seed~0")]
    _train(targets, grid)
    return work, grid, targets


@pytest.fixture
def plugins_as_trained(plugin_grid):
    yield plugin_grid
    for name in PLUGINS:  # each test edits the plugins; the next starts from the trained ones
        write_plugin(plugin_grid[0], name)


def _both(plugin_grid, targets: bool = True, *args: str) -> tuple[list[str], list[str], list[str], str]:
    """(the jobs `snakemake -n` plans, the jobs `bayesncl stale` lists, as "rule target" (`targets`: the
    pretraining jobs' run ids, of the model.pt targets), stale's lines and its stderr)."""
    work, grid, models = plugin_grid
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
    env.pop("BAYESNCL_PLUGINS", None)
    with ThreadPoolExecutor(2) as pool:  # two processes that only read: side by side on the two cores
        dry = pool.submit(current().run, [SNAKEMAKE, *(models if targets else ()), "-n", "--nolock", "--cores", "1",
                                          "--configfile", str(grid)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
        listed, lines, err = pool.submit(_stale, grid, None, *args).result()
        r = dry.result()
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    planned = dry_jobs(r.stdout)
    if targets:
        planned, listed = pretrained(planned), pretrained(listed)
        lines = [line for line in lines if line.startswith("pretrain ")]
    return planned, listed, lines, err


@pytestmark_wf
def test_the_finished_plugin_grid_plans_nothing_and_nothing_is_stale(plugins_as_trained):
    assert _both(plugins_as_trained)[:2] == ([], [])


@pytestmark_wf
def test_a_plugin_setting_s_default_plans_exactly_the_runs_that_take_it(plugins_as_trained):
    write_plugin(plugins_as_trained[0], "plug_l1", default="2e-3")  # a default: config, not the code's identity
    planned, listed, lines, _ = _both(plugins_as_trained)
    assert planned == listed == ["synthetic/plug_l1/seed~0"]
    assert lines == ["pretrain synthetic/plug_l1/seed~0: method.l1_weight 0.001 (today 0.002)"]


@pytestmark_wf
def test_a_plugin_s_code_plans_exactly_the_runs_that_use_it(plugins_as_trained):
    write_plugin(plugins_as_trained[0], "plug_l1", reduce="sum")
    planned, listed, lines, _ = _both(plugins_as_trained)
    assert planned == listed == ["synthetic/plug_l1/l1_weight~0.01/seed~0", "synthetic/plug_l1/seed~0"]
    assert all(re.fullmatch(r"pretrain synthetic/plug_l1/\S+: code of method plug_l1 sha256 [0-9a-f]{12} \(today "
                            r"sha256 [0-9a-f]{12}\)", line) for line in lines), lines


@pytest.mark.long
@pytestmark_wf
def test_a_plugin_with_a_version_reruns_when_the_version_changes(plugins_as_trained):
    work = plugins_as_trained[0]
    write_plugin(work, "plug_v", reduce="sum")  # an edit under the same version: nothing
    assert _both(plugins_as_trained)[:2] == ([], [])
    write_plugin(work, "plug_v", reduce="sum", version=', version="2"')
    planned, listed, lines, _ = _both(plugins_as_trained)
    assert planned == listed == ["synthetic/plug_v/seed~0"]
    assert lines == ["pretrain synthetic/plug_v/seed~0: code of method plug_v version 1 (today version 2)"]


@pytestmark_wf
def test_a_neutral_plugin_setting_plans_no_job(plugins_as_trained):
    """A setting added with the value every run had (`added=`), read by the code, under the same version."""
    write_plugin(plugins_as_trained[0], "plug_v", more=', "bias": registry.setting(0.0, "a new term", added=0.0)',
                 extra=' + self.cfg["method"]["bias"]')
    assert _both(plugins_as_trained)[:2] == ([], [])


@pytestmark_wf
def test_a_run_whose_plugin_code_record_is_gone_is_named_not_compared_and_not_retrained(plugins_as_trained):
    """Snakemake compares a job's trigger with its own record of the params it ran with, which deleting the run's
    plugin_code.json leaves as it was: it retrains nothing. `bayesncl stale` lists nothing either (it once listed
    the run as stale, "code absent") and names the run as not compared, in one line."""
    work = plugins_as_trained[0]
    record = work / "results" / "runs" / "synthetic" / "plug_l1" / "seed~0" / "plugin_code.json"
    kept = record.read_bytes()
    record.unlink()
    try:
        planned, listed, lines, err = _both(plugins_as_trained)
        assert (planned, listed, lines) == ([], [], [])
        assert f"synthetic/plug_l1/seed~0: not compared: its plugin code: {record} is missing (snakemake compares " \
               "its own record of it)" in err.splitlines()
    finally:
        record.write_bytes(kept)


@pytest.mark.long
@pytestmark_wf
def test_snakemake_retrains_the_stale_runs_and_then_nothing_is_stale(plugins_as_trained):
    """The plan is carried out: a run whose setting's default changed (another config in its folder) and one whose
    plugin version changed (another code: a resume would keep the old weights) are trained again from the start,
    in their own folders, replaced whole; then nothing is planned and nothing is stale. Last in this file: the
    finished grid is not as trained after it."""
    work, grid, targets = plugins_as_trained
    write_plugin(work, "plug_l1", default="2e-3")
    write_plugin(work, "plug_v", version=', version="2"')
    stale = ["synthetic/plug_l1/seed~0", "synthetic/plug_v/seed~0"]
    assert _both(plugins_as_trained)[:2] == (stale, stale)
    for rid in stale:  # a file of the old run's: gone once the run is trained again, replaced whole (a resume keeps it)
        (work / "results" / "runs" / rid / "old.json").write_text("{}")
    _train(targets, grid)
    for rid in stale:
        run = work / "results" / "runs" / rid
        assert run.joinpath("model.pt").is_file() and not run.joinpath("old.json").exists(), sorted(run.iterdir())
    assert yaml.safe_load((work / "results" / "runs" / stale[0] / "config.resolved.yaml").read_text())[
        "method"]["l1_weight"] == 2e-3
    assert json.loads((work / "results" / "runs" / stale[1] / "plugin_code.json").read_text()) == {
        "method plug_v": "version 2"}
    assert _both(plugins_as_trained)[:2] == ([], [])



# ----------------------------------------------------------------- a finished grid with a measure of its own
MEASURE = """
import numpy as np

from bayesncl.settings import registry
from bayesncl.evaluation.sections import section
from bayesncl.report.cells import register_measure


@section("zero_share", every_run=True, columns={{"percent": "zero_share"}},
         settings={{"scale": registry.setting({scale}, "percent per unit", gt=0)}})
def zero_share(ctx):
    \"\"\"Share of exactly-zero entries of the evaluation feature (test split), in percent.\"\"\"
    feature = np.asarray(ctx.features("test")["feature"])
    return {{"zero_share": {{"percent": float({share}) * ctx.cfg["eval"]["zero_share"]["scale"]}}}}


register_measure("zero_share", "Zeros (%)", 2, "up")
"""


def write_measure(folder: Path, scale: str = "100.0", share: str = "np.mean(feature == 0)") -> None:
    (folder / "my_measure.py").write_text(MEASURE.format(scale=scale, share=share))


@pytest.fixture(scope="module")
def measure_grid(tmp_path_factory):
    """The tiny grid's defaults with a measure of its own (docs/EXTENDING.md section 3) beside it, NCL and BayesNCL
    in Table 1 (and their untrained twins), made whole: trained, evaluated, atlas, report. Returns (folder, grid
    file, no targets)."""
    if SNAKEMAKE is None:
        pytest.skip("snakemake not installed (pip install -e '.[workflow]')")
    work = tmp_path_factory.mktemp("measure_grid")
    write_measure(work)
    wf = yaml.safe_load((ROOT / "config" / "tiny.yaml").read_text())
    wf.update(results=str(work / "results"), plugins=["my_measure"],
              variants={k: wf["variants"][k] for k in ("NCL", "BayesNCL (STE)")},
              sets={"table1": {"variants": ["NCL", "BayesNCL (STE)"]}})
    grid = work / "grid.yaml"
    grid.write_text(yaml.safe_dump(wf, sort_keys=False))
    _train([], grid)
    return work, grid, []


@pytest.fixture
def measure_as_made(measure_grid):
    yield measure_grid
    write_measure(measure_grid[0])


REPORT = sorted(job for job in REPORT_JOBS if job != "pdf" or shutil.which("pdflatex"))  # as the workflow builds


def made_sections(measure_grid) -> dict[str, list[str]]:
    """{run id: its evaluation sections} of the finished grid, read from its files (the grid's plugin stays out of
    this process)."""
    runs = Path(measure_grid[0]) / "results" / "runs"
    return {str(m.parent.relative_to(runs)): sorted(f.stem for f in (m.parent / "eval").glob("*.json"))
            for m in sorted(runs.rglob("model.pt"))}


def _agree(measure_grid, src: Path | None = None) -> tuple[list[str], list[str], str]:
    """(the jobs both plan, stale's lines, its stderr), `snakemake -n` and `bayesncl stale` checked to agree job by
    job (the package at `src`, else the worktree's)."""
    work, grid, _ = measure_grid
    env = dict(os.environ, PYTHONPATH=str(src or ROOT / "src"), OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
    env.pop("BAYESNCL_PLUGINS", None)
    with ThreadPoolExecutor(2) as pool:
        dry = pool.submit(current().run, [SNAKEMAKE, "-n", "--nolock", "--cores", "1", "--configfile", str(grid)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        listed, lines, err = pool.submit(_stale, grid, src).result()
        r = dry.result()
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    assert dry_jobs(r.stdout) == listed, (r.stdout[-3000:], lines)
    return listed, lines, err


@pytest.mark.long
def test_a_measure_s_code_or_settings_make_exactly_its_jobs_and_the_report_again(measure_as_made):
    """A measure's code edit: Snakemake reruns its evaluation job on every run and the report's jobs after them
    (the code's identity is in the jobs' trigger), and `bayesncl stale` lists the same jobs; its setting's default
    likewise, named. The finished grid plans nothing."""
    work = measure_as_made[0]
    runs = made_sections(measure_as_made)
    assert len(runs) == 4 and all("zero_share" in names for names in runs.values())
    assert _agree(measure_as_made)[0] == []
    want = sorted([f"zero_share {rid}" for rid in runs] + REPORT)
    write_measure(work, share="(feature == 0).mean()")
    listed, lines, _ = _agree(measure_as_made)
    assert listed == want
    assert all(re.fullmatch(r"zero_share \S+: code of section zero_share sha256 [0-9a-f]{12} \(today sha256 "
                            r"[0-9a-f]{12}\)", line) for line in lines if line.startswith("zero_share")), lines
    assert "summarize: after 4 evaluation job(s)" in lines
    write_measure(work, scale="1.0")
    listed, lines, _ = _agree(measure_as_made)
    assert listed == want and f"zero_share {next(iter(runs))}: eval.zero_share.scale 100.0 (today 1.0)" in lines


@pytest.mark.long
def test_a_package_measure_s_code_plans_nothing_and_its_settings_every_evaluation(measure_grid, tmp_path):
    """The package's own code is judged by the config it declares, as its methods' (docs/EXTENDING.md section 6):
    an edit of a measure's module reruns nothing, in both; a changed default of an evaluation setting reruns every
    evaluation job (each reads eval.*), the atlas and the report, in both."""
    sections = made_sections(measure_grid)
    src = _package_copy(tmp_path, "def interpretability(", "def _edited():\n    return 0\n\n\ndef interpretability(",
                        "measures/arrays.py")
    assert _agree(measure_grid, src)[0] == []
    shutil.rmtree(src)
    src = _package_copy(tmp_path, 'probe_epochs: int = _field(50,', 'probe_epochs: int = _field(60,')
    listed, lines, _ = _agree(measure_grid, src)
    assert listed == sorted([f"{name} {rid}" for rid, names in sections.items() for name in names]
                            + ["atlas synthetic"] + REPORT)
    assert f"features {next(iter(sections))}: eval.probe_epochs 50 (today 60)" in lines


@pytest.mark.long
def test_stale_and_snakemake_agree_where_a_record_is_missing_or_damaged(measure_as_made):
    """A deleted evaluation file: Snakemake remakes a missing output only where a job to run reads it, and summarize,
    which reads it, is up to date: nothing, in both (stale counts it on stderr; --all lists it); once the measure's
    code changes, summarize runs and it is made first. A damaged one: Snakemake reads no record of ours and plans
    nothing; stale names it as not compared. A deleted run record (config.resolved.yaml) likewise."""
    work, grid, _ = measure_as_made
    runs = made_sections(measure_as_made)
    rid = next(iter(runs))
    folder = work / "results" / "runs" / rid
    kept = {name: ((folder / name).read_bytes(), (folder / name).stat()) for name in (
        "eval/zero_share.json", "eval/retrieval.json", "config.resolved.yaml")}

    def put(name, data=None):  # a file as it was, or damaged, at its old time: Snakemake's mtime trigger not pulled
        (folder / name).write_bytes(kept[name][0] if data is None else data)
        os.utime(folder / name, ns=(kept[name][1].st_atime_ns, kept[name][1].st_mtime_ns))

    try:
        (folder / "eval" / "retrieval.json").unlink()
        listed, lines, err = _agree(measure_as_made)
        assert listed == [] and "; 1 job(s) whose output is missing and that none of them reads" in err
        assert _stale(grid, None, "--all")[1] == [f"retrieval {rid}: not made yet"]
        write_measure(work, share="(feature == 0).mean()")  # the report runs again: what it reads is made first
        listed, lines, _ = _agree(measure_as_made)
        assert listed == sorted([f"zero_share {r}" for r in runs] + [f"retrieval {rid}"] + REPORT)
        assert f"retrieval {rid}: not made yet" in lines
        write_measure(work)
        put("eval/retrieval.json")

        put("eval/zero_share.json", b"{")
        (folder / "config.resolved.yaml").unlink()
        listed, lines, err = _agree(measure_as_made)
        assert listed == []
        assert f"{rid} zero_share: not compared: {folder / 'eval' / 'zero_share.json'}: cannot be read as JSON" in err
        assert f"{rid}: not compared: {folder / 'config.resolved.yaml'} is missing (snakemake compares its own " \
               "record)" in err.splitlines()
    finally:
        for name in kept:
            put(name)


@pytestmark_wf
def test_a_run_s_evaluation_as_one_job_reruns_whole_and_stale_names_it(tmp_path):
    """`evaluation_jobs: per_run`: a run's sections are one job, each section's file records its own trigger, and a
    changed setting that one section reads makes that run's one job again, and the atlas after it (the job writes its
    features again): `snakemake -n` and `bayesncl stale` name the same jobs, stale with the section and why."""
    wf = yaml.safe_load((ROOT / "config" / "tiny.yaml").read_text())
    wf.update(results=str(tmp_path / "results"), evaluation_jobs="per_run",
              sets={name: {"variants": ["NCL", "BayesNCL (STE)"]} for name in ("table1", "table6")})
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump(wf))
    runs = expand_grid(wf)
    targets = [str(tmp_path / "results" / "runs" / rid / "eval" / "features.json") for rid in runs] + [
        str(tmp_path / "results" / "figures" / "atlas_synthetic.pdf")]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1")
    r = current().run([SNAKEMAKE, *targets, "--nolock", "--cores", "2", "--configfile", str(grid)], cwd=ROOT, env=env,
                      capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    from bayesncl.grid.expand import evaluation_job, evaluation_sections, job_trigger

    for rid, run in runs.items():  # every section written, each with its own trigger
        for name in evaluation_sections(run):
            record = json.loads((tmp_path / "results" / "runs" / rid / "eval" / f"{name}.json").read_text())
            assert record["run"]["trigger"] == json.loads(job_trigger(run.config, "evaluate", name)), (rid, name)
    src = _package_copy(tmp_path, 'probe_epochs: int = _field(50,', 'probe_epochs: int = _field(60,')
    dry = current().run([SNAKEMAKE, *targets, "-n", "--nolock", "--cores", "1", "--configfile", str(grid)], cwd=ROOT,
                        env=dict(env, PYTHONPATH=str(src)), capture_output=True, text=True, timeout=600)
    assert dry.returncode == 0, (dry.stdout + dry.stderr)[-4000:]
    want = sorted([f"{evaluation_job(evaluation_sections(run))} {rid}" for rid, run in runs.items()]
                  + ["atlas synthetic"])
    assert dry_jobs(dry.stdout) == want
    listed, lines, _ = _stale(grid, src)
    assert [job for job in listed if " " in job] == want  # and the report's jobs after them
    assert all("linear_probe: eval.probe_epochs 50 (today 60)" in line for line in lines if line.startswith("eval"))


@pytestmark_wf
def test_a_per_run_job_records_each_section_s_own_trigger_a_plugin_s_with_its_code(tmp_path):
    """A run's one evaluation job hands each section its own trigger: a plugin section's names its code, the
    package's sections' do not."""
    write_measure(tmp_path)
    wf = yaml.safe_load((ROOT / "config" / "tiny.yaml").read_text())
    wf.update(results=str(tmp_path / "results"), evaluation_jobs="per_run", plugins=["my_measure"],
              sets={"figure3": {"variants": ["NCL"]}})  # one run, no twin
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump(wf, sort_keys=False))
    (rid,) = expand_grid({**wf, "plugins": []})
    evaluation = tmp_path / "results" / "runs" / rid / "eval"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1")
    env.pop("BAYESNCL_PLUGINS", None)
    r = current().run([SNAKEMAKE, str(evaluation / "features.json"), "--nolock", "--cores", "2", "--configfile",
                       str(grid)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    assert "rule evaluate_with_zero_share:" in r.stdout + r.stderr
    trigger = {name: json.loads((evaluation / f"{name}.json").read_text())["run"]["trigger"]
               for name in ("features", "interpretability", "zero_share")}
    assert list(trigger["zero_share"]["plugin_code"]) == ["section zero_share"]
    assert "plugin_code" not in trigger["features"] and trigger["features"] == trigger["interpretability"]
