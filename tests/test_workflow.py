"""The Snakemake workflow: DAG of the paper grid, lint, config errors, and the tiny grid end to end."""

import json
import os
import re
import shutil
import sys
import sysconfig
from pathlib import Path

import pandas as pd
import pytest
import yaml
from helpers.processes import current

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = shutil.which("snakemake")
LOCAL = {"all", "summarize", "report", "plan", "jobs", "document", "pdf"}  # run by Snakemake itself (localrule)
pytestmark = pytest.mark.skipif(SNAKEMAKE is None, reason="snakemake not installed (pip install -e '.[workflow]')")


def snakemake(*args, cwd=ROOT, timeout=600):
    # --nolock: other test workers run Snakemake in the checkout at once (each into a temp folder of its own), and
    # Snakemake's lock files there race between processes
    return current().run([SNAKEMAKE, "--nolock", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)


def job_counts(output: str) -> dict[str, int]:
    table = output.split("Job stats:")[1]
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M)}


def test_paper_dag_builds_without_data(tmp_path):
    r = snakemake("-n", "--configfile", "config/paper.yaml", "--config", f"results={tmp_path}")
    assert r.returncode == 0, r.stderr + r.stdout
    counts = job_counts(r.stdout)
    # Distinct runs, 3 seeds each: Tables 1-2: 3 datasets x 5 methods (45); Table 4 adds 4 ablations on
    # CIFAR-100 (12); Table 5 ResNet-50 x 3 methods (9); Figure 4a on ImageNet-100, 3 more widths than the
    # default D = 2048 x 2 methods (18); Figure 4b 4 more rho and 4 more lambda values (24). Tables 3, 6, 7
    # and Figure 3 reuse runs already counted.
    # The initialisation control (bayesncl.grid.expand.plan_init_runs): an untrained twin of every distinct untrained
    # network of Tables 1, 2, 4, 5, 6 and Figure 4a (36 + 9 + 9 + 18; w/o detach and BayesNCL (Gumbel) start from
    # BayesNCL (STE)'s network), evaluation only.
    twins = 36 + 9 + 9 + 18
    runs = 45 + 12 + 9 + 18 + 24 + twins
    assert counts["pretrain"] == runs
    # One evaluation job per section and run: every run gets features, interpretability and the linear probe;
    # retrieval all but the 12 SimCLR runs (Tables 1-2 and 5) and their 12 twins; the background probe Table 6's
    # NCL and BayesNCL runs on ImageNet-100 (6) and their twins (6); dynamics Table 3's (6, CIFAR-100); cost
    # Table 7's (2 methods x 3 datasets x 3).
    assert counts["features"] == counts["interpretability"] == counts["linear_probe"] == runs
    assert counts["retrieval"] == runs - 24
    assert counts["background_probe"] == 12 and counts["dynamics"] == 6 and counts["cost"] == 18
    assert "evaluate" not in counts
    assert counts["summarize"] == 1 and counts["report"] == 1
    # docs/CLUSTER.md says so
    sections = ("features", "interpretability", "linear_probe", "retrieval", "cost", "background_probe", "dynamics")
    intro = " ".join((ROOT / "docs" / "CLUSTER.md").read_text().split())
    assert (f"lists its {runs} pretraining jobs ({runs - twins} that train: CIFAR-10 15, CIFAR-100 60, ImageNet-100 "
            f"33; {twins} untrained twins that only save their initialisation) and their "
            f"{sum(counts[s] for s in sections)} evaluation jobs ({counts['features']} each of `features`, "
            f"`interpretability`, `linear_probe`; {counts['retrieval']} `retrieval`; {counts['cost']} `cost`; "
            f"{counts['background_probe']} `background_probe`; {counts['dynamics']} `dynamics`)") in intro


def test_demo_dag_trains_each_config_once(tmp_path):
    r = snakemake("-n", "--config", f"results={tmp_path}")
    assert r.returncode == 0, r.stderr + r.stdout
    # Tables 1-2: 5 methods x 5 seeds (25); Table 4: 4 ablations x 3 seeds (12); Table 5: 2 ResNet-50 runs x 3
    # (6); the saturation figure: NCL at 4 and 8 epochs x 3 (6; 16 is Table 1's run, 0 its twin); Figure 4a: 1 more
    # width x 2 methods x 2 (4); Figure 4b: 2 more lambda values and 2 more rho values x 2 (8).
    counts = job_counts(r.stdout)
    # The initialisation control: an untrained twin of each distinct untrained network of Tables 1-2, 4, 5, 6 and
    # Figure 4a (20 + 9 + 6 + 4; w/o detach and BayesNCL (Gumbel) start from BayesNCL (STE)'s): 39.
    assert counts["pretrain"] == 25 + 12 + 6 + 6 + 4 + 8 + 39
    # One evaluation job per run (the demo's `evaluation_jobs: per_run`): Table 3's dynamics and Table 7's cost on NCL
    # and BayesNCL x 5 seeds, with Table 6's background probe; their 10 twins with the background probe alone;
    # SimCLR's 5 runs and 5 twins without retrieval.
    assert counts["evaluate_with_background_probe_dynamics_cost"] == 10
    assert counts["evaluate_with_background_probe"] == counts["evaluate_without_retrieval"] == 10
    assert counts["evaluate"] == counts["pretrain"] - 30
    # `evaluation_jobs: per_section` (the schema's default): a job per section, as on a cluster
    r = snakemake("-n", "--config", f"results={tmp_path}", "evaluation_jobs=per_section")
    assert r.returncode == 0, r.stderr + r.stdout
    apart = job_counts(r.stdout)
    assert apart["features"] == apart["interpretability"] == apart["pretrain"] == counts["pretrain"]
    assert not any(k.startswith("evaluate") for k in apart)
    # On a machine with a GPU (one named: a dry run needs none), a run's one evaluation job takes it (features runs
    # the network there) as its pretraining does
    r = current().run([SNAKEMAKE, "--nolock", "-n", "--config", f"results={tmp_path}"], cwd=ROOT, capture_output=True,
                      text=True, timeout=600, env={**os.environ, "CUDA_VISIBLE_DEVICES": "0"})
    assert r.returncode == 0, r.stderr + r.stdout
    jobs = re.findall(r"^(?:local)?rule (\w+):\n(?:    .*\n)*?    resources: ([^\n]*)", r.stdout, re.M)
    evaluations = {k for k in counts if k.startswith("evaluate")}
    assert {rule for rule, res in jobs if "gpu=1" in res} == {"pretrain", *evaluations}
    # With the overlay config/sweeps.yaml (merged key by key after the demo, as the README types it) and one
    # override of the global seed list, as typed on a shell (the stability check): Figure 4a's 5 seeds add the
    # larger width x 2 methods x 3 (6) and their twins (6), Figure 4b 2 more lambda values and 2 more rho values x 3
    # (12), the saturation figure BayesNCL (STE) at 4 and 8 epochs x 3 (6); every other job is the demo's, on seeds
    # 5-9.
    r = snakemake("-n", "--configfile", "config/config.yaml", "config/sweeps.yaml",
                  "--config", f"results={tmp_path}", "seeds=[5,6,7,8,9]")
    assert r.returncode == 0, r.stderr + r.stdout
    grown = job_counts(r.stdout)
    assert grown["pretrain"] - counts["pretrain"] == 6 + 6 + 12 + 6
    every_run = ("pretrain", "evaluate")  # no SimCLR added
    assert all(grown[job] == counts[job] + 30 for job in every_run)
    assert {k: v for k, v in grown.items() if k not in every_run + ("total",)} == {
        k: v for k, v in counts.items() if k not in every_run + ("total",)}
    assert "seed~9" in r.stdout and "seed~0" not in r.stdout


# `snakemake ARGS` that also prints, per group job, what its SLURM submission asks for: Snakemake's group
# resources as a cluster run computes them (members in series inside the submission) and its members' own.
PLAN = """\
import json, sys
from snakemake.cli import main
from snakemake.resources import GroupResources
import snakemake.dag

update = snakemake.dag.DAG.update_groups

def update_groups(self):
    update(self)
    for g in {id(g): g for g in self._group.values()}.values():
        asked = GroupResources.basic_layered(toposorted_jobs=g.toposorted, constraints=g.global_resources,
                                             run_local=False, additive_resources=["runtime"], sortby=["runtime"])
        members = {j.rule.name: {k: v for k, v in j.resources.items() if isinstance(v, (int, str))} for j in g.jobs}
        print("GROUP " + json.dumps({"id": g.groupid, "asked": {k: v for k, v in asked.items()
                                     if isinstance(v, (int, str))}, "members": members}), file=sys.stderr)

snakemake.dag.DAG.update_groups = update_groups
sys.argv = ["snakemake", *sys.argv[1:]]
main()
"""


def plan(*args, cwd=ROOT):
    """(dry-run stdout, {group id: {"asked": ..., "members": {rule: resources}}}) of `snakemake -n ARGS`."""
    r = current().run([sys.executable, "-c", PLAN, "-n", *args], cwd=cwd, capture_output=True, text=True,
                      timeout=600)
    assert r.returncode == 0, r.stderr[-5000:] + r.stdout[-3000:]
    groups = {}
    for line in r.stderr.splitlines():
        if line.startswith("GROUP "):
            g = json.loads(line[len("GROUP "):])
            groups[g["id"]] = g
    return r.stdout, groups


@pytest.mark.long
def test_paper_grid_on_slurm_is_two_submissions_per_run(tmp_path):
    """`snakemake --profile slurm all` as the README types it (dry run): per run that trains one pretraining job,
    per run one evaluation submission (group eval_<run>) holding all its sections, run in series on one GPU node,
    and an untrained twin's initialisation (it asks for no pretraining submission of its own). Every job asks what
    bayesncl.planning.time_requests decides, and the dry run's requests add up to `bayesncl estimate`'s, to the
    minute."""
    import yaml

    from bayesncl.planning.estimate import estimate, measured_rates, planner
    from bayesncl.grid.expand import evaluation_sections, expand_grid

    out, groups = plan("--profile", "slurm", "all", "--config", f"results={tmp_path}")
    grid = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())
    runs = expand_grid(grid)
    trained = {rid for rid, run in runs.items() if run.config["train"]["epochs"]}
    profile = yaml.safe_load((ROOT / "slurm" / "config.yaml").read_text())["set-resources"]["pretrain"]
    rates, limits = measured_rates("h200"), dict(time_limit_min=profile["time_limit"],
                                                 margin_s=profile["stop_margin_s"])
    grid_plan = planner(runs, rates, tmp_path, **limits)
    asks = {rid: grid_plan.asked(rid) for rid in runs}
    top = re.findall(r"^rule (\w+):\n(?:    .*\n)*?    resources: (.*)$", out, re.M)  # not in a group
    local = LOCAL
    submitted = [rule for rule, _ in top if rule not in local] + [f"group {g}" for g in groups]
    assert len(groups) == len(runs) and {f"eval_{rid}" for rid in runs} == set(groups)
    # once per ImageNet-100 root, before its runs: the prepared copy (rules/prepare.smk)
    assert sorted(rule for rule, _ in top if rule not in local) == (["atlas"] * 3 + ["prepare_data"]
                                                                    + ["pretrain"] * len(trained))
    assert len(submitted) == len(trained) + len(runs) + 3 + 1 == 108 + 180 + 4
    assert out.count("Group job eval_") == len(runs)
    for rule, res in top:
        fields = dict(kv.split("=", 1) for kv in res.split(", "))
        if rule == "pretrain":
            assert fields["slurm_partition"] == "gpu" and fields["gpu"] == "1"
        elif rule not in local:
            assert fields["slurm_partition"] != "gpu" and fields.get("gpu", "0") == "0", (rule, fields)
    for gid, g in groups.items():
        rid = gid[len("eval_"):]
        members, asked = g["members"], g["asked"]
        init = [] if rid in trained else ["pretrain"]
        assert sorted(members) == sorted(evaluation_sections(runs[rid]) + init), gid
        # each section takes the one `serial` slot of its submission: none runs beside another
        assert {r: m.get("serial") for r, m in members.items() if r != "pretrain"} == dict.fromkeys(
            set(members) - {"pretrain"}, 1), gid
        # one partition (a group must name one); one GPU, not one per GPU section: members run in series
        assert {m["slurm_partition"] for m in members.values()} == {"gpu"} == {asked["slurm_partition"]}
        for key in ("gpu", "cpus_per_task", "mem_mb"):
            assert asked[key] == max(m.get(key, 0) for m in members.values()), (gid, key)
        # the submission asks for the sum of its jobs' shares: one request, one floor
        assert asked["gpu"] == 1 and asked["runtime"] == sum(m["runtime"] for m in members.values()), gid
        assert {r: m["runtime"] for r, m in members.items()} == {r: asks[rid].job(r) for r in members}, gid
        # the paper protocol and Waterbirds run the network, and a twin's initialisation
        assert {r for r, m in members.items() if m["gpu"]} == {"features", "linear_probe", *init} | (
            {"background_probe"} & set(members)), gid
    longest = max(g["asked"]["runtime"] for g in groups.values())
    assert f"up to {longest} minutes" in (ROOT / "slurm" / "config.yaml").read_text()  # what the profile says
    # Pretraining asks for its time (capped by the profile's limit) and the profile's CPUs per GPU
    pretrain_asks = sorted(asks[rid].pretrain() for rid in trained)
    assert f"{pretrain_asks[0]} to {pretrain_asks[-1]} minutes on the paper grid" in (
        ROOT / "slurm" / "config.yaml").read_text()
    seen = []
    for rule, res in top:
        if rule == "pretrain":
            fields = dict(kv.split("=", 1) for kv in res.split(", "))
            assert {k: int(fields[k]) for k in ("cpus_per_gpu", "stop_margin_s")} == {
                k: profile[k] for k in ("cpus_per_gpu", "stop_margin_s")}, fields
            seen.append(int(fields["runtime"]))
            assert _sbatch_gpu_flags(fields) == "--gpus=1"
    assert sorted(seen) == pretrain_asks and max(seen) <= profile["time_limit"]
    assert "cpus_per_gpu" not in (ROOT / "workflow" / "rules" / "pretrain.smk").read_text()
    # what `bayesncl estimate` prints, with the profile's limit and margin, is what the dry run asks
    total = estimate(grid, rates, results=tmp_path, **limits).total()
    assert (round(total.pretrain_request_h * 60, 6), round(total.eval_request_h * 60, 6)) == (
        sum(seen), sum(g["asked"]["runtime"] for g in groups.values()))
    assert total.submissions == len(submitted)


def _sbatch_gpu_flags(resources: dict) -> str:
    """What snakemake-executor-plugin-slurm adds to sbatch for a job's GPU: --gpus=N or --gres=..."""
    from snakemake_executor_plugin_slurm.utils import set_gres_string

    class Job:
        def __init__(self, res):
            self.resources = type("R", (dict,), {"__getattr__": dict.get})(res)

    return set_gres_string(Job({k: int(v) if str(v).isdigit() else v for k, v in resources.items()})).strip()


def test_smoke_run_on_a_gres_cluster_asks_minutes_and_gres(tmp_path):
    """`--config smoke=true gpu_request=gres` with the SLURM profile (dry run): every submission asks for
    SMOKE_MINUTES a job (an evaluation submission: the sum over its sections), whatever the profile's limit; GPUs
    are asked as --gres=gpu:1, never --gpus; the ImageNet-100 preparation decodes a subset of the classes."""
    from bayesncl.data.imagenet import SMOKE_CLASSES, imagenet100_classes
    from bayesncl.grid.expand import SMOKE_MINUTES

    out, groups = plan("--profile", "slurm", "all", "--config", f"results={tmp_path}", "smoke=true",
                       "gpu_request=gres", "-p")
    top = re.findall(r"^rule (\w+):\n(?:    .*\n)*?    resources: (.*)$", out, re.M)
    local = LOCAL
    submitted = [(rule, dict(kv.split("=", 1) for kv in res.split(", "))) for rule, res in top if rule not in local]
    assert {rule for rule, _ in submitted} == {"pretrain", "atlas", "prepare_data"} and groups
    for rule, fields in submitted:
        assert int(fields["runtime"]) == SMOKE_MINUTES, (rule, fields)
        if rule == "pretrain":
            assert fields["gres"] == "gpu:1" and fields["gpu"] == "0"
            assert _sbatch_gpu_flags(fields) == "--gres=gpu:1"
    for g in groups.values():
        asked = g["asked"]
        assert asked["runtime"] == SMOKE_MINUTES * len(g["members"]), g
        assert asked["gres"] == "gpu:1" and asked["gpu"] == 0 and _sbatch_gpu_flags(asked) == "--gres=gpu:1"
    # On a cluster pretraining runs inside allocation.py (stopped and requeued before the allocation ends)
    assert re.search(r"allocation\.py --margin 600 -- bayesncl pretrain ", out)
    # The one preparation decodes the first SMOKE_CLASSES classes of the list, not ImageNet-100's 100
    (prepare,) = re.findall(r"bayesncl prepare --config-json '([^']+)'", out)
    assert json.loads(prepare)["data"]["classes"] == imagenet100_classes()[:SMOKE_CLASSES] and SMOKE_CLASSES < 100


def test_a_failed_section_is_planned_alone(tmp_path):
    """The sections of a run that ended stay; the next plan submits only the missing one, without pretraining."""
    from bayesncl.grid.expand import evaluation_sections, expand_grid

    runs = expand_grid(yaml.safe_load((ROOT / "config" / "tiny.yaml").read_text()))
    rid = next(r for r in runs if "/ncl/" in r and "table6" in runs[r].sets)
    run = tmp_path / "runs" / rid
    (run / "eval").mkdir(parents=True)
    (run / "model.pt").write_text("x")
    sections = evaluation_sections(runs[rid])
    for name in sections:  # written after the model, in order
        if name != "linear_probe":
            for f in {"features": ["features.json", "features.npz"],
                      "interpretability": ["interpretability.json", "vectors.npz"]}.get(name, [f"{name}.json"]):
                (run / "eval" / f).write_text("{}")
    targets = [str(run / "eval" / f"{name}.json") for name in sections]
    out, groups = plan("--profile", "slurm", *targets, "--configfile", "config/tiny.yaml",
                       "--config", f"results={tmp_path}")
    assert list(groups) == [f"eval_{rid}"] and list(groups[f"eval_{rid}"]["members"]) == ["linear_probe"]
    assert "rule pretrain:" not in out
def test_lint():
    r = snakemake("--lint")
    assert r.returncode == 0, r.stdout + r.stderr


def _bad_config(tmp_path, edit) -> Path:
    cfg = yaml.safe_load((ROOT / "config" / "tiny.yaml").read_text())
    edit(cfg)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


BAD = [
    (lambda c: c["variants"]["NCL"]["method"].update(name="simsiam"), "method.name"),
    (lambda c: c["datasets"].update(cifar10={"data": {"dataset": "cifar10"}}),
     "data.root: dataset 'cifar10' needs a root path"),
    (lambda c: c.update(seeds=[]), "seeds"),
    (lambda c: c["sets"]["table1"].update(seeds=[]), "seeds"),
    (lambda c: c["sets"]["table1"]["variants"].append("MoCo"), "sets.table1.variants"),
    (lambda c: c["defaults"]["method"].update(rho=1.5), "method.rho"),
    (lambda c: c["sets"].update(table8={"variants": ["NCL"]}), "sets.table8"),
    # Table 6 probes the background: a dataset without background labels needs Waterbirds
    (lambda c: c["datasets"].update(cifar10={"data": {"dataset": "cifar10", "root": "/x"}}), "eval.waterbirds_root"),
    (lambda c: c["sets"]["table4"].update(n_seeds=2), "sets.table4.n_seeds: 2 seeds asked for"),
    (lambda c: c["sets"]["table4"].update(n_seeds=1, seeds=[0]), "n_seeds"),
    (lambda c: c["sets"]["table4"].update(n_seeds=0), "n_seeds"),
]


@pytest.mark.parametrize("edit,message", BAD[:3])
def test_bad_config_fails_when_the_dag_is_built(tmp_path, edit, message):
    r = snakemake("-n", "--configfile", str(_bad_config(tmp_path, edit)), "--config", f"results={tmp_path}")
    assert r.returncode != 0
    assert message in r.stdout + r.stderr


@pytest.mark.parametrize("edit,message", [
    (lambda c: c.update(plugins=["no_such_plugin"]), "invalid workflow config: plugins: no plugin module "
                                                     "'no_such_plugin' (looked for no_such_plugin.py in "),
    (lambda c: c.update(claims=[{"metric": "sc", "left": "NCL", "right": "Nope", "relation": ">"}]),
     "invalid workflow config: claims[0].right: no variant 'Nope'; the variants: BayesNCL (STE), NCL,"),
    # whatever a plugin raises or exits with, whatever type a claim's value has
    (lambda c: c.update(plugins=["plug"]), "invalid workflow config: plugins: plugin 'plug' ({tmp}/plug.py, line 2) "
                                           "raised RuntimeError: no GPU while imported; fix the plugin"),
    (lambda c: c.update(plugins=["plug_syntax"]), "invalid workflow config: plugins: plugin 'plug_syntax' "
                                                  "({tmp}/plug_syntax.py, line 1) raised SyntaxError: "),
    (lambda c: c.update(plugins=["plug_exit"]), "invalid workflow config: plugins: plugin 'plug_exit' "
                                                "({tmp}/plug_exit.py, line 2) called sys.exit(3) while imported"),
    (lambda c: c.update(claims=[{"metric": ["sc"], "left": "NCL", "right": "NCL", "relation": ">"}]),
     "invalid workflow config: claims[0].metric: ['sc'] is not a name"),
    (lambda c: c.update(claims=[{"metric": "sc", "left": "NCL", "right": "NCL", "relation": "within",
                                 "tolerance": float("nan")}]),
     "invalid workflow config: claims[0].tolerance: nan is not a finite positive number"),
])
def test_a_bad_plugin_or_claim_stops_the_dag_in_one_line(tmp_path, edit, message):
    (tmp_path / "plug.py").write_text("import os\nraise RuntimeError('no GPU')\n")
    (tmp_path / "plug_syntax.py").write_text("def f(:\n    pass\n")
    (tmp_path / "plug_exit.py").write_text("import sys\nsys.exit(3)\n")
    message = message.replace("{tmp}", str(tmp_path))
    r = snakemake("-n", "--configfile", str(_bad_config(tmp_path, edit)), "--config", f"results={tmp_path}")
    assert r.returncode == 2
    (line,) = [ln for ln in r.stderr.splitlines() if ln.startswith("invalid workflow config")]
    assert line.startswith(message) and "Traceback" not in r.stderr


@pytest.mark.parametrize("edit,message", BAD)
def test_bad_config_is_reported_with_its_key(tmp_path, edit, message):
    """What common.smk runs (schema, then bayesncl.grid.expand), without a Snakemake process per case."""
    import jsonschema

    from bayesncl.core.errors import ConfigError
    from bayesncl.grid.expand import expand_grid

    cfg = yaml.safe_load(_bad_config(tmp_path, edit).read_text())
    schema = yaml.safe_load((ROOT / "workflow" / "schemas" / "config.schema.yaml").read_text())
    with pytest.raises((ConfigError, jsonschema.ValidationError)) as err:
        jsonschema.validate(cfg, schema)
        expand_grid(cfg)
    text = str(err.value) if isinstance(err.value, ConfigError) else ".".join(map(str, err.value.path)) + str(err.value)
    assert message in text


# Metric columns each set needs, so that a table cell is a number.
REQUIRED = {
    "table1": ["sc", "se_sum", "se_mean", "se_freq", "act"],
    "table2": ["probe_top1", "probe_top5"],
    "table3": ["dyn_af_gv", "dyn_gv_sc", "dyn_af_sc", "dyn_sc"],
    "table4": ["sc", "se_sum", "act", "probe_top1"],
    "table5": ["sc", "se_sum", "act", "probe_top1"],
    "table6": ["bg_acc", "bg_dominated_zplus", "bg_dominated_feature"],
    "table7": ["gflops", "params_m", "sec_per_epoch", "img_per_s", "train_minutes"],
    "figure3": ["ret_curve"],
}


def test_tiny_grid_end_to_end(tiny_grid):
    out, args, r = tiny_grid  # conftest.py: `snakemake --cores 2` over config/tiny.yaml, once per session
    for i in range(1, 8):
        for ext in ("tex", "md"):
            assert (out / "tables" / f"table{i}.{ext}").stat().st_size > 0
    for name in ("figure3", "figure4a", "figure4b", "gates", "sc_training", "saturation", "atlas_synthetic"):
        for ext in ("pdf", "png"):
            assert (out / "figures" / f"{name}.{ext}").stat().st_size > 0

    runs = pd.read_csv(out / "summary" / "runs.csv")
    cfg = yaml.safe_load((ROOT / "config" / "tiny.yaml").read_text())
    for set_name, spec in cfg["sets"].items():
        rows = runs[runs["sets"].fillna("").str.split(";").apply(lambda s: set_name in s)]  # a twin: in no set
        assert set(spec["variants"]) <= set(rows["variant"]), set_name
        for col in REQUIRED.get(set_name, []):
            needed = rows if not col.startswith("ret") else rows[rows["method"] != "cl"]
            assert needed[col].notna().all(), (set_name, col)
        if set_name.startswith("table"):
            md = (out / "tables" / f"{set_name}.md").read_text()
            tex = (out / "tables" / f"{set_name}.tex").read_text()
            for variant in spec["variants"]:
                assert variant in md, (set_name, variant)
            assert "nan" not in md.lower() and "nan" not in tex.lower(), set_name
    assert json.loads((out / "summary" / "metrics.json").read_text())["synthetic"]
    from bayesncl.report import claims, judge, summary  # the claims table has a row for every claim (part)
    every = {c.claim for _, comps in judge.claims_rows(summary.prepare(pd.DataFrame())) for c in comps}
    md = (out / "tables" / "claims.md").read_text()
    ids = {line.split("|")[1].strip() for line in md.splitlines() if line.startswith("| ")}
    assert every <= {i.split("-")[0] for i in ids} and len(ids) == len(  # one id per row (10b-16, 10b-32)
        [line for line in md.splitlines() if line.startswith("| ") and not line.startswith("| *")]) + 1
    # the controls: 1a made again on the untrained twins (one seed: no interval), 7a says why it has none
    cells = {line.split("|")[1].strip(): line.split("|")[8].strip() for line in md.splitlines() if line.startswith("| ")}
    assert cells["1a"].startswith(("+", "-")) and cells["1a"].endswith("(no CI)"), cells["1a"]
    assert cells["7a"] == claims.NO_INIT["dyn"] and "Family (graph)" in md
    assert "Claims (docs/METHOD.md section 9" in r.stdout + r.stderr  # the outcome, on the terminal
    # What each job cost: every job of every rule but the last (jobs itself), GPUs as held (none here)
    from bayesncl.grid.expand import expand_grid

    jobs = pd.read_csv(out / "summary" / "jobs.csv")
    n_runs = len(expand_grid(cfg))
    assert (jobs["rule"] == "pretrain").sum() == (jobs["rule"] == "features").sum() == n_runs
    assert {"interpretability", "retrieval", "linear_probe", "background_probe", "dynamics", "cost", "atlas",
            "summarize", "report"} <= set(jobs["rule"])
    assert (jobs["seconds"] > 0).all() and (jobs["gpus"] == 0).all()
    assert "GPU-hours of the grid as run: 0.00" in (out / "summary" / "jobs.md").read_text()
    # Every job recorded its start-up, part of its wall time as far as the two records' resolution tells (a 0.08 s
    # job can record 0.082 s: jobs.startup_bound), and ran in a child of the fork server (local CPU jobs)
    from bayesncl.report.jobs import startup_bound

    assert jobs["startup_seconds"].notna().all() and (jobs["startup_seconds"] <= startup_bound(jobs["seconds"])).all()
    records = [json.loads(p.read_text()) for p in (out / "benchmarks").rglob("*.start.json")]
    assert len(records) == len(jobs) and all(rec["forkserver"] is True for rec in records)
    assert all(rec["max_rss_mb"] > 50 for rec in records)  # the child's own memory, not its client's
    from bayesncl.cli import forkserver  # the run ended the servers it started, and removed their folder

    assert not Path(forkserver.run_folder(str(ROOT))).exists()
    assert "Start-up (process start, imports, loading;" in (out / "summary" / "jobs.md").read_text()
    # The saturation set's 0-epoch run and the 7 untrained twins (one per distinct initialisation of the claims'
    # runs; the saturation run is NCL's) are random-init networks: no training log, evaluated like the others
    zero = runs[runs["epochs"] == 0]
    assert len(zero) == 1 + 7 and zero["infonce_final"].isna().all() and zero["sc"].notna().all()
    assert (zero["sets"].fillna("") == "").sum() == 7 and zero["init_of"].notna().all()
    trained = runs[runs["epochs"] > 0]
    assert (trained["epochs"] == 1).all() and trained["infonce_final"].between(0, 20).all()

    again = snakemake("-n", "--cores", "2", *args)
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr


def test_shared_run_is_one_readable_run():
    from bayesncl.grid.expand import expand_grid

    runs = expand_grid(yaml.safe_load((ROOT / "config" / "paper.yaml").read_text()))
    # Table 3 records dynamics in the run Tables 1, 2, 4 and 7 share: trained once, and its id says so
    run = runs["cifar100/bayesncl/rho~0.8/lambda~3e-05/dyn~10/seed~0"]
    assert {"table1", "table2", "table3", "table4", "table7"} <= set(run.sets)
    assert run.config["train"]["dynamics_every"] == 10
    assert run.config["method"]["gate"] == "ste" and run.config["method"]["head_depth"] == 2
    assert "cifar100/bayesncl/gate~soft/rho~0.8/lambda~3e-05/seed~0" in runs
    assert "cifar100/ncl/arch~resnet50/seed~2" in runs
    assert not [rid for rid in runs if rid.startswith("cifar10/") and "dyn~" in rid]  # no Table 3 there


def test_two_variants_that_are_one_run_are_reported():
    from bayesncl.grid.expand import GridWarning, expand_grid

    cfg = yaml.safe_load((ROOT / "config" / "tiny.yaml").read_text())
    cfg["variants"]["Also STE"] = {"method": {"name": "bayesncl", "gate": "ste"}}
    cfg["sets"]["table4"]["variants"].append("Also STE")
    with pytest.warns(GridWarning, match="'Also STE' resolves to the same run config as 'BayesNCL \\(STE\\)'"):
        runs = expand_grid(cfg)
    assert len(runs) == len(expand_grid(yaml.safe_load((ROOT / "config" / "tiny.yaml").read_text())))
    assert [n for r in runs.values() for n in r.notes if "'Also STE'" in n]


def test_the_dag_build_prints_the_grid_notes(tmp_path):
    cfg = yaml.safe_load((ROOT / "config" / "tiny.yaml").read_text())
    cfg["variants"]["Also STE"] = {"method": {"name": "bayesncl", "gate": "ste"}}
    cfg["sets"]["table4"]["variants"].append("Also STE")
    (tmp_path / "alias.yaml").write_text(yaml.safe_dump(cfg))
    r = snakemake("-n", "--configfile", str(tmp_path / "alias.yaml"), "--config", f"results={tmp_path}")
    assert r.returncode == 0, r.stderr + r.stdout
    assert "warning: " in r.stderr and "variant 'Also STE' resolves to the same run config" in r.stderr


def test_sets_asking_different_dynamics_for_one_run_fail():
    from bayesncl.core.errors import ConfigError
    from bayesncl.grid.expand import expand_grid

    cfg = yaml.safe_load((ROOT / "config" / "tiny.yaml").read_text())
    cfg["sets"]["table7"]["dynamics_every"] = 2
    with pytest.raises(ConfigError, match="sets.table7.dynamics_every: 2 conflicts with 1"):
        expand_grid(cfg)


def _seeds_by_set(runs) -> dict[str, set[int]]:
    out: dict[str, set[int]] = {}
    for run in runs.values():
        for set_name in run.sets:
            out.setdefault(set_name, set()).add(run.config["seed"])
    return out


def test_n_seeds_takes_a_prefix_of_the_global_seed_list():
    from bayesncl.grid.expand import expand_grid

    cfg = yaml.safe_load((ROOT / "config" / "tiny.yaml").read_text())
    cfg["seeds"] = [0, 1, 2]
    cfg["sets"]["table4"]["n_seeds"] = 2
    cfg["sets"]["figure4b"]["seeds"] = [7]
    by_set = _seeds_by_set(expand_grid(cfg))
    assert by_set["table1"] == {0, 1, 2} and by_set["table4"] == {0, 1} and by_set["figure4b"] == {7}
    # One override of the global list moves every set that does not pin its own seeds.
    cfg["seeds"] = [5, 6, 7]
    runs = expand_grid(cfg)
    by_set = _seeds_by_set(runs)
    assert by_set["table1"] == {5, 6, 7} and by_set["table4"] == {5, 6} and by_set["figure4b"] == {7}
    soft = {r.config["seed"] for r in runs.values() if "Soft gate" in r.labels.values()}
    assert soft == {5, 6}  # an ablation-only variant: the first two seeds, not the last two


def test_seeds_from_the_snakemake_command_line_are_integers():
    """`snakemake --config seeds=[5,6]` hands the items over as strings; the run ids and configs hold ints."""
    from bayesncl.grid.expand import expand_grid

    cfg = yaml.safe_load((ROOT / "config" / "tiny.yaml").read_text())
    as_ints = expand_grid({**cfg, "seeds": [5, 6]})
    as_text = expand_grid({**cfg, "seeds": ["5", "6"]})
    assert list(as_text) == list(as_ints) and any(rid.endswith("seed~6") for rid in as_text)
    assert {type(r.config["seed"]) for r in as_text.values()} == {int}
    from bayesncl.core.errors import ConfigError

    for bad, message in ((["5", "x"], "seeds: 'x' is not a seed"), ([5, "5"], "repeats a seed")):
        with pytest.raises(ConfigError, match=message):
            expand_grid({**cfg, "seeds": bad})


@pytest.mark.parametrize("sweeps", [False, True])
def test_demo_grid_seeds(sweeps):
    """Every set of the demo (and of its overlay config/sweeps.yaml) rests on at least 3 seeds, the main comparison
    on at least 5, but the demo's Figure 4 sweeps on 2 (their points drawn within the demo's time; the overlay gives
    them 5), and no set pins its own seed list, so `--config seeds=[...]` moves the whole grid (the stability
    check)."""
    from bayesncl.grid.expand import expand_grid
    from helpers import grids

    cfg = grids.demo(sweeps)
    assert not [name for name, spec in cfg["sets"].items() if "seeds" in spec]
    runs = expand_grid(cfg)
    points: dict[tuple, set[int]] = {}  # (set, variant, D, lambda) -> seeds: every point of a table or sweep
    for run in runs.values():
        for set_name in run.sets:
            key = (set_name, run.labels[set_name], run.config["model"]["proj_dim"], run.config["method"]["lambda"])
            points.setdefault(key, set()).add(run.config["seed"])
    fewer = {k: v for k, v in points.items() if len(v) < 3}
    assert len(points) >= 25 and all(len(v) == 2 and k[0] in ("figure4a", "figure4b") and not sweeps
                                     for k, v in fewer.items()), fewer
    assert bool(fewer) == (not sweeps)
    main = ("NCL", "Top-k NCL", "BayesNCL (STE)", "BayesNCL (Gumbel)")
    assert all(len(points[("table1", v, 64, 3e-5)]) >= 5 for v in main)
    swapped = expand_grid({**cfg, "seeds": [s + 100 for s in cfg["seeds"]]})
    assert len(swapped) == len(runs)
    assert all(r.config["seed"] >= 100 for r in swapped.values())


def test_evaluation_sections_follow_the_sets():
    from bayesncl.grid.expand import evaluation_sections, expand_grid

    runs = expand_grid(yaml.safe_load((ROOT / "config" / "tiny.yaml").read_text()))
    by_id = {rid: evaluation_sections(run) for rid, run in runs.items()}
    simclr = next(rid for rid in runs if "/cl/" in rid)
    assert by_id[simclr] == ["features", "interpretability", "linear_probe"]  # no retrieval for SimCLR
    main = next(rid for rid, r in runs.items() if {"table3", "table6", "table7"} <= set(r.sets)
                and r.config["method"]["name"] == "ncl")
    assert by_id[main] == ["features", "interpretability", "retrieval", "linear_probe", "background_probe",
                           "dynamics", "cost"]
    sweep = next(rid for rid, r in runs.items() if r.sets == ["figure4b"])
    assert by_id[sweep] == ["features", "interpretability", "retrieval", "linear_probe"]


STUB = """\
#!{python}
# Stands in for `bayesncl` in the GPU tests: records its CUDA_VISIBLE_DEVICES and how long it ran.
import json, os, sys, time
args = sys.argv[1:]
out = args[args.index("--out") + 1]
os.makedirs(out, exist_ok=True)
start = time.time()
time.sleep(1.0)
with open({record!r}, "a") as f:
    f.write(json.dumps({{"gpu": os.environ.get("CUDA_VISIBLE_DEVICES"), "start": start, "end": time.time()}}) + "\\n")
open(os.path.join(out, "model.pt"), "w").close()
"""


def _gpu_grid(tmp_path):
    """The tiny grid with its runs on `device: auto` (GPU jobs), a stub `bayesncl`, and 6 model targets."""
    from bayesncl.grid.expand import expand_grid

    cfg = yaml.safe_load((ROOT / "config" / "tiny.yaml").read_text())
    cfg["defaults"]["train"]["device"] = "auto"
    cfg["results"] = str(tmp_path / "results")
    path = tmp_path / "gpu.yaml"
    path.write_text(yaml.safe_dump(cfg))
    record = tmp_path / "jobs.jsonl"
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "bayesncl").write_text(STUB.format(python=sys.executable, record=str(record)))
    (bindir / "bayesncl").chmod(0o755)
    targets = [f"{cfg['results']}/runs/{rid}/model.pt" for rid in sorted(expand_grid(cfg))[:6]]
    return path, record, bindir, targets


def _overlapping(jobs: list[dict]) -> list[tuple[dict, dict]]:
    """The pairs of jobs that ran at the same time (a job runs over [start, end): one that starts as another
    ends does not overlap it)."""
    return [(j, k) for i, j in enumerate(jobs) for k in jobs[i + 1:] if j["start"] < k["end"] and k["start"] < j["end"]]


def _most_at_once(jobs: list[dict]) -> int:
    """The most jobs running at one instant. It is reached at some job's start; counting the jobs that overlap
    one job instead would count two that follow each other on the other GPU, both within its span, as three."""
    return max(sum(k["start"] <= j["start"] < k["end"] for k in jobs) for j in jobs)


def test_concurrency_is_counted_per_instant():
    a = {"gpu": "3", "start": 0.0, "end": 1.5}  # spans two jobs that follow each other on GPU 7
    b, c = {"gpu": "7", "start": -0.5, "end": 0.5}, {"gpu": "7", "start": 0.6, "end": 1.6}
    d = {"gpu": "7", "start": 1.6, "end": 2.6}  # starts as c ends
    assert _most_at_once([a, b, c, d]) == 2 and _overlapping([a, b, c, d]) == [(a, b), (a, c)]
    assert _most_at_once([a, {"gpu": "3", "start": 1.0, "end": 2.0}, {"gpu": "7", "start": 0.8, "end": 1.2}]) == 3
    assert _most_at_once([b]) == 1


def test_local_gpu_jobs_never_share_a_gpu(tmp_path):
    """`--cores 8` on a machine showing two GPUs: at most two GPU jobs at once, never on the same GPU."""
    cfg, record, bindir, targets = _gpu_grid(tmp_path)
    env = dict(os.environ, PATH=f"{bindir}{os.pathsep}{os.environ['PATH']}", CUDA_VISIBLE_DEVICES="3,7",
               TMPDIR=str(tmp_path))  # own GPU lock files
    r = current().run([SNAKEMAKE, "--cores", "8", *targets, "--configfile", str(cfg)], cwd=ROOT, env=env,
                      capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-5000:]
    jobs = [json.loads(line) for line in record.read_text().splitlines()]
    assert len(jobs) == len(targets)
    assert {j["gpu"] for j in jobs} <= {"3", "7"}
    for j, k in _overlapping(jobs):
        assert j["gpu"] != k["gpu"], (j, k)
    # With 8 cores and 1 thread per job, only the GPU limit keeps this at 2 (and both GPUs get used);
    # Snakemake's limit, not jobs started anyway and waiting for a GPU lock.
    assert _most_at_once(jobs) == 2, jobs
    logs = [p.read_text() for p in (tmp_path / "results").rglob("pretrain.log")]
    assert len(logs) == len(targets) and not any("waiting" in log for log in logs), logs

    # Where the job runs is not part of its identity: without GPUs nothing reruns.
    env["CUDA_VISIBLE_DEVICES"] = ""
    again = current().run([SNAKEMAKE, "-n", "--cores", "8", *targets, "--configfile", str(cfg)], cwd=ROOT,
                          env=env, capture_output=True, text=True)
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr, again.stdout


@pytest.mark.parametrize("visible,limit", [("", 0), ("0", 1), ("1,0,-1,2", 2)])
def test_local_gpu_limit_is_the_visible_gpu_count(tmp_path, visible, limit):
    cfg, _, _, targets = _gpu_grid(tmp_path)
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=visible)
    r = current().run([SNAKEMAKE, "-n", "-p", "--cores", "8", targets[0], "--configfile", str(cfg)], cwd=ROOT,
                      env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    assert re.search(rf"\bgpu={min(limit, 1)}\b", r.stdout), r.stdout
    assert ("gpu_slot.py" in r.stdout) == (limit > 0)


def test_gpu_slot_takes_a_free_gpu(tmp_path):
    """A GPU whose lock is held is skipped; the command sees only the GPU it got."""
    import fcntl

    lock = os.open(tmp_path / "gpu-3.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # GPU 3 busy
    script = ROOT / "workflow" / "scripts" / "gpu_slot.py"
    r = current().run([sys.executable, str(script), "--gpus", "3,7", "--lock-dir", str(tmp_path), "--",
                       sys.executable, "-c", "import os; print(os.environ['CUDA_VISIBLE_DEVICES'])"],
                      capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "7", r.stderr
    os.close(lock)
    r = current().run([sys.executable, str(script), "--gpus", "3,7", "--lock-dir", str(tmp_path), "--",
                       sys.executable, "-c", "import os; print(os.environ['CUDA_VISIBLE_DEVICES'])"],
                      capture_output=True, text=True)
    assert r.stdout.strip() == "3", r.stderr


@pytest.mark.parametrize("setting,forked", [(None, True), ("forkserver=false", False), ("forkserver=true", True)])
def test_local_jobs_use_the_fork_server_unless_told_not_to(tmp_path, setting, forked):
    """Every job's command records its start-up beside its benchmark; local CPU jobs go through the fork server
    (`--config forkserver=false`: plain processes) and find `bayesncl` beside the interpreter first."""
    extra = [setting] if setting else []
    r = snakemake("-n", "-p", "--configfile", "config/tiny.yaml", "--config", f"results={tmp_path}", *extra)
    assert r.returncode == 0, r.stderr + r.stdout
    commands = [line for line in r.stdout.splitlines() if "bayesncl pretrain" in line]
    assert commands
    for cmd in commands:
        bench = re.search(r"BAYESNCL_TIMING=(\S+)", cmd).group(1).strip("'")
        assert bench.startswith(f"{tmp_path}/benchmarks/pretrain/") and bench.endswith(".start.json")
        assert ("BAYESNCL_FORKSERVER=1" in cmd) is forked
        scripts = sysconfig.get_path("scripts")  # where this interpreter installed `bayesncl`, if it did
        shim = f"{os.sep}shims{os.sep}" in (shutil.which("bayesncl") or "")  # e.g. pyenv's, found first on PATH
        assert (f"PATH={scripts}:" in cmd) is (shim and (Path(scripts) / "bayesncl").is_file())
