"""What reruns a finished grid (docs/USAGE.md, "Upgrading"): a pretraining or evaluation job's trigger is what
decides its outputs (bayesncl.grid.trigger_config), not every key the code knows.

The workflow tests run `snakemake -n` over the finished tiny grid (conftest's tiny_grid) with a copy of the
package in which one line of config.py was changed, as a `git pull` would change it: a new key, a changed default.
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

from bayesncl import config as C
from bayesncl.grid import expand_grid, trigger_config, trigger_diff
from bayesncl.stale import describe, run_staleness
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
def _package_copy(tmp_path, old: str, new: str) -> Path:
    """src/ copied with one change to config.py (exactly one occurrence of `old`)."""
    src = tmp_path / "src"
    shutil.copytree(ROOT / "src", src, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    path = src / "bayesncl" / "config.py"
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
    """(jobs per rule, the run ids of the pretrain jobs, the output) of `snakemake -n` with the finished grid's
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
    planned = re.findall(r"rule pretrain:\n(?:    .*\n)*?    output: \S*/runs/(\S+)/model\.pt", r.stdout)
    return counts, sorted(planned), r.stdout


pytestmark_wf = pytest.mark.skipif(SNAKEMAKE is None, reason="snakemake not installed (pip install -e '.[workflow]')")

NEW_KEY = ('    max_steps_per_epoch: int = _field(0, "cap on steps per epoch; 0: no cap", ge=0)\n',
           '    max_steps_per_epoch: int = _field(0, "cap on steps per epoch; 0: no cap", ge=0)\n'
           '    label_smoothing: float = _field(0.0, "a new key", ge=0, added=0.0)\n')


def _stale(grid: Path, src: Path | None) -> tuple[list[str], list[str]]:
    """(the run ids `bayesncl stale` lists, its lines) for the grid with the package at `src`."""
    env = dict(os.environ, PYTHONPATH=str(src or ROOT / "src"))
    r = current().run([sys.executable, "-m", "bayesncl", "stale", "--grid", str(grid)], env=env, cwd=ROOT,
                      capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.splitlines()
    return sorted(line.split(": ")[0] for line in lines), lines


def _train(targets: list[str], grid: Path) -> None:
    """Snakemake makes `targets` of `grid` with the package under test, in a plain process (no fork server)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
    env.pop("BAYESNCL_FORKSERVER_DIR", None)
    env.pop("BAYESNCL_PLUGINS", None)
    r = current().run([SNAKEMAKE, *targets, "--cores", "2", "--configfile", str(grid)], cwd=ROOT, env=env,
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
    run again, and `bayesncl stale` lists the same runs (before issue 48 it printed "0 stale run(s)": it completed
    the record with today's default before comparing)."""
    results, args, _ = tiny_grid
    old, new = NEW_KEY
    src = _package_copy(tmp_path, old, new.replace(", added=0.0", ""))
    counts, planned, _ = _plan(args, src)
    runs = expand_grid(yaml.safe_load((ROOT / "config" / "tiny.yaml").read_text()))
    assert counts["pretrain"] == len(runs) and planned == sorted(runs)
    listed, lines = _stale(_grid_file(tmp_path, results), src)
    assert listed == planned
    assert all(line.endswith(": train.label_smoothing absent (today 0.0)") for line in lines), lines


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
    assert planned == want, out[-3000:]
    assert counts["pretrain"] == len(want)

    # `bayesncl stale` names exactly those runs, with the key and both values
    env = dict(os.environ, PYTHONPATH=str(src))
    listed, lines = _stale(grid, src)
    assert listed == want
    tail = "method.head_lr 0.1 (today 0.2)" if "head_lr" in old else "method.nonneg rep_relu (today relu)"
    assert all(line.endswith(tail) for line in lines), lines
    r = current().run([sys.executable, "-m", "bayesncl", "stale", "--grid", str(grid), "--targets"], env=env,
                      cwd=ROOT, capture_output=True, text=True)
    assert sorted(r.stdout.split()) == sorted(str(results / "runs" / rid / "model.pt") for rid in want)


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


def test_stale_runs_compares_each_recorded_config_with_today_s(tmp_path):
    """bayesncl.stale on run folders written by hand: a run recorded as today, one recorded under another
    default, one recorded before a key existed, one never trained."""
    from bayesncl.config import dump_yaml
    from bayesncl.stale import stale_runs, targets

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
    found = stale_runs(wf, tmp_path)
    assert found == {other: {"method.temperature": [0.3, 0.2]}, older: {"train.loss_scaler": ["none", "fp16"]}}
    assert untrained not in found and same not in found
    assert targets(tmp_path, found) == [str(tmp_path / "runs" / rid / "model.pt") for rid in (other, older)]
    assert describe(found[other]) == "method.temperature 0.3 (today 0.2)"
    assert describe({"method.topk_k": [None, 3]}) == "method.topk_k null (today 3)"
    assert describe({"a.b": [1, 2], "c.d": ["x", "y"]}) == "a.b 1 (today 2); c.d x (today y)"


# ----------------------------------------------------------------------- a finished grid with plugin methods
PLUGIN = """
from bayesncl import registry
from bayesncl.methods import NCL


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


def _both(plugin_grid) -> tuple[list[str], list[str], list[str]]:
    """(the runs `snakemake -n` would pretrain, the runs `bayesncl stale` lists, stale's lines)."""
    work, grid, targets = plugin_grid
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
    env.pop("BAYESNCL_PLUGINS", None)
    with ThreadPoolExecutor(2) as pool:  # two processes that only read: side by side on the two cores
        dry = pool.submit(current().run, [SNAKEMAKE, *targets, "-n", "--nolock", "--cores", "1", "--configfile",
                                          str(grid)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        listed, lines = pool.submit(_stale, grid, None).result()
        r = dry.result()
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    planned = sorted(re.findall(r"rule pretrain:\n(?:    .*\n)*?    output: \S*/runs/(\S+)/model\.pt", r.stdout))
    return planned, listed, lines


@pytestmark_wf
def test_the_finished_plugin_grid_plans_nothing_and_nothing_is_stale(plugins_as_trained):
    assert _both(plugins_as_trained)[:2] == ([], [])


@pytestmark_wf
def test_a_plugin_setting_s_default_plans_exactly_the_runs_that_take_it(plugins_as_trained):
    write_plugin(plugins_as_trained[0], "plug_l1", default="2e-3")  # a default: config, not the code's identity
    planned, listed, lines = _both(plugins_as_trained)
    assert planned == listed == ["synthetic/plug_l1/seed~0"]
    assert lines == ["synthetic/plug_l1/seed~0: method.l1_weight 0.001 (today 0.002)"]


@pytestmark_wf
def test_a_plugin_s_code_plans_exactly_the_runs_that_use_it(plugins_as_trained):
    write_plugin(plugins_as_trained[0], "plug_l1", reduce="sum")
    planned, listed, lines = _both(plugins_as_trained)
    assert planned == listed == ["synthetic/plug_l1/l1_weight~0.01/seed~0", "synthetic/plug_l1/seed~0"]
    assert all(re.fullmatch(r"synthetic/plug_l1/\S+: code of method plug_l1 sha256 [0-9a-f]{12} \(today sha256 "
                            r"[0-9a-f]{12}\)", line) for line in lines), lines


@pytestmark_wf
def test_a_plugin_with_a_version_reruns_when_the_version_changes(plugins_as_trained):
    work = plugins_as_trained[0]
    write_plugin(work, "plug_v", reduce="sum")  # an edit under the same version: nothing
    assert _both(plugins_as_trained)[:2] == ([], [])
    write_plugin(work, "plug_v", reduce="sum", version=', version="2"')
    planned, listed, lines = _both(plugins_as_trained)
    assert planned == listed == ["synthetic/plug_v/seed~0"]
    assert lines == ["synthetic/plug_v/seed~0: code of method plug_v version 1 (today version 2)"]


@pytestmark_wf
def test_a_neutral_plugin_setting_plans_no_job(plugins_as_trained):
    """A setting added with the value every run had (`added=`), read by the code, under the same version."""
    write_plugin(plugins_as_trained[0], "plug_v", more=', "bias": registry.setting(0.0, "a new term", added=0.0)',
                 extra=' + self.cfg["method"]["bias"]')
    assert _both(plugins_as_trained)[:2] == ([], [])


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

