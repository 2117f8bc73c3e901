"""The grids in config/: each passes the workflow schema and expands into runs; the miniature is the demo's runs
trained longer and nothing else."""

from pathlib import Path

import pytest
import yaml

from bayesncl.grid.expand import evaluation_sections, expand_grid
from bayesncl.cli.workflow import SCHEMA, check_workflow_config

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", ["config.yaml", "paper.yaml", "tiny.yaml", "miniature.yaml"])
def test_every_grid_is_valid_and_expands(name):
    wf = yaml.safe_load((ROOT / "config" / name).read_text())
    check_workflow_config(wf, SCHEMA, name)
    runs = expand_grid(wf)
    assert runs
    # Table 7's runs, and only they, are costed; Table 6's runs and their twins get the background probe.
    for run in runs.values():
        sections = evaluation_sections(run)
        assert ("cost" in sections) == ("table7" in run.sets), run.run_id
        assert ("background_probe" in sections) == ("table6" in run.sets + run.init_of), run.run_id


def test_the_miniature_is_the_demo_trained_longer():
    demo = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    mini = yaml.safe_load((ROOT / "config" / "miniature.yaml").read_text())
    runs = {(r.labels["table1"], r.config["seed"]): r.config for r in expand_grid(demo).values() if "table1" in r.sets}
    longer = {(r.labels["table1"], r.config["seed"]): r.config for r in expand_grid(mini).values() if "table1" in r.sets}
    assert set(longer) <= set(runs) and {v for v, _ in longer} == {"NCL", "BayesNCL (STE)"}
    assert {s for _, s in longer} == set(range(5))  # the main comparison's 5 seeds
    for key, cfg in longer.items():
        same = {**runs[key], "train": {**runs[key]["train"], "epochs": 256, "warmup_epochs": 16,
                                       "dynamics_every": 64}}
        assert cfg == same, key
    assert mini["results"] != demo["results"]  # never writes into the demo's results


def test_one_evaluation_job_per_run_named_for_its_sections():
    """On a machine without a GPU a run's evaluation is one job: one rule per distinct list of sections, named for how
    it differs from the sections every plain run gets; every run in exactly one."""
    from bayesncl.grid.expand import PLAIN_RUN, evaluation_jobs

    sections = {"a": list(PLAIN_RUN), "b": [*PLAIN_RUN, "background_probe", "cost"], "c": list(PLAIN_RUN),
                "d": ["features", "interpretability", "linear_probe", "cost"], "e": ["features"]}
    assert evaluation_jobs(sections) == {
        "evaluate": (list(PLAIN_RUN), ["a", "c"]),
        "evaluate_with_background_probe_cost": ([*PLAIN_RUN, "background_probe", "cost"], ["b"]),
        "evaluate_with_cost_without_retrieval": (["features", "interpretability", "linear_probe", "cost"], ["d"]),
        "evaluate_without_interpretability_retrieval_linear_probe": (["features"], ["e"])}
    runs = expand_grid(yaml.safe_load((ROOT / "config" / "paper.yaml").read_text()))
    jobs = evaluation_jobs({rid: evaluation_sections(run) for rid, run in runs.items()})
    assert sorted(rid for _, rids in jobs.values() for rid in rids) == sorted(runs)
    assert all(evaluation_sections(runs[rid]) == names for names, rids in jobs.values() for rid in rids)
