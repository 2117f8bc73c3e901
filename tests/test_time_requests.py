"""bayesncl.planning.time_requests: what each job asks the scheduler for, before any job of its kind has finished and
after, each evaluation submission's one request shared among its jobs, and what the grid's finished jobs teach."""

import json
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from bayesncl.planning import time_requests as T
from bayesncl.grid.expand import expand_grid
from bayesncl.runs.files import record_config
from helpers.report import write_benchmark

SECTIONS = {"features": 21.7, "interpretability": 30.0, "retrieval": 30.0, "linear_probe": 103.3}
PRETRAIN_S = 5052.0
GRID = {
    "results": "results", "seeds": [0, 1, 2],
    "defaults": {"model": {"arch": "resnet18", "width": 4, "proj_hidden": 32, "proj_dim": 16},
                 "train": {"epochs": 100, "batch_size": 256}, "eval": {"probe": "paper", "probe_epochs": 10}},
    "datasets": {"cifar10": {"data": {"dataset": "cifar10", "root": "/nowhere"}},
                 "cifar100": {"data": {"dataset": "cifar100", "root": "/nowhere"}}},
    "variants": {"NCL": {"method": {"name": "ncl"}}},
    "sets": {"figure3": {"variants": ["NCL"]}, "table1": {"variants": ["NCL"], "datasets": ["cifar100"]}},
}


def price(run):
    """Every run's jobs expected to take the same seconds; a run of train.epochs 0 only its initialisation."""
    pre = PRETRAIN_S if run.config["train"]["epochs"] else 60.0
    return {"expected": {"pretrain": pre, **SECTIONS}, "declared": ()}


@pytest.fixture(scope="module")
def runs():
    return expand_grid(GRID)


def rid(runs, dataset, seed, trained=True):
    return next(r for r, run in runs.items() if run.config["data"]["dataset"] == dataset and
                run.config["seed"] == seed and bool(run.config["train"]["epochs"]) == trained)


def finish(results, runs, run_id, seconds, sections=15.0, config=None):
    """A run the grid ran: its config recorded, model.pt and every section's JSON written, each job's benchmark."""
    folder = results / "runs" / run_id
    (folder / "eval").mkdir(parents=True, exist_ok=True)
    record_config(folder, config or runs[run_id].config)
    (folder / "model.pt").write_text("x")
    write_benchmark(results / "benchmarks", f"pretrain/{run_id}.tsv", seconds, 800.0, 1, "pretrain")
    for name in SECTIONS:
        (folder / "eval" / f"{name}.json").write_text("{}")
        write_benchmark(results / "benchmarks", f"{name}/{run_id}.tsv", sections, 500.0, 1, name)


def naive_bound(ratios):
    """The upper 95% prediction bound of the next log ratio, written out from its definition: the mean of the logs
    plus Student's t (n - 1 + 4 degrees of freedom) times the spread pooled with 4 pseudo-jobs of sd 0.15, times
    sqrt(1 + 1/n)."""
    x = np.log(np.asarray(ratios, dtype=float))
    n = len(x)
    pooled = (np.sum((x - x.mean()) ** 2) + 4 * 0.15 ** 2) / (n - 1 + 4)
    return float(np.exp(x.mean() + stats.t.ppf(0.95, n + 3) * np.sqrt(pooled) * np.sqrt(1 + 1 / n)))


@pytest.mark.parametrize("ratios", [[0.0119], [1.0, 1.0], [0.8, 1.1, 0.95, 1.3], [2.0] * 30, [0.5, 4.0]])
def test_the_factor_is_the_upper_prediction_bound_of_the_next_ratio(ratios):
    assert T.factor(ratios) == pytest.approx(naive_bound(ratios), rel=1e-12)
    assert T.factor([3 * r for r in ratios]) == pytest.approx(3 * T.factor(ratios), rel=1e-12)  # scales with them


def test_the_margin_narrows_as_jobs_agree_and_widens_with_their_spread():
    margins = [T.factor([1.0] * n) for n in (1, 2, 5, 30, 300)]
    assert margins == sorted(margins, reverse=True) and 1.0 < margins[-1] < 1.1 < margins[0] < 1.6
    assert T.factor([0.5, 2.0]) > T.factor([0.9, 1.1]) > T.factor([1.0, 1.0])


def naive_shares(total, weights):
    """Largest remainders in exact arithmetic: each its whole quota, the rest one each to the largest remainders
    (the earlier first on a tie)."""
    quotas = [Fraction(total) * Fraction(w) / sum(map(Fraction, weights)) for w in weights]
    out = [math.floor(q) for q in quotas]
    order = sorted(range(len(quotas)), key=lambda i: (-(quotas[i] - out[i]), i))
    for i in order[: total - sum(out)]:
        out[i] += 1
    return out


@given(st.integers(0, 500), st.lists(st.floats(0.01, 1e5), min_size=1, max_size=8))
def test_a_submission_s_minutes_are_shared_by_largest_remainders(total, weights):
    got = T.shares(total, weights)
    assert sum(got) == total and all(s >= 0 for s in got)
    assert all(abs(s - total * w / sum(weights)) < 1 for s, w in zip(got, weights))
    assert got == naive_shares(total, weights)


def test_shares_by_hand():
    assert T.shares(6, [21.7, 30.0, 30.0, 103.3]) == [1, 1, 1, 3]  # quotas 0.70 0.97 0.97 3.35
    assert T.shares(3, [1.0, 1.0]) == [2, 1]  # a tie: the earlier


def test_before_any_job_finished_a_job_asks_the_prior_times_its_expected_time(runs):
    run = runs[rid(runs, "cifar10", 0)]
    asked = T.run_requests(run, price(run)["expected"], T.Learned())
    work = math.ceil((T.SUBMISSION_START_S + T.PRIOR * PRETRAIN_S) / 60)
    assert (asked.work, asked.allocations, asked.pretrain(), asked.pretrain(3)) == (work, 1, work + 10, 3 * work + 10)
    total = math.ceil((T.SUBMISSION_START_S + T.PRIOR * sum(SECTIONS.values())) / 60)
    assert asked.evaluation == dict(zip(SECTIONS, T.shares(total, list(SECTIONS.values()))))
    assert [asked.job(k, 2) for k in SECTIONS] == [2 * v for v in asked.evaluation.values()]
    # the partition's limit caps a request; a run needing more trains in further allocations, each until its margin
    capped = T.run_requests(run, price(run)["expected"], T.Learned(), time_limit_min=60)
    assert capped.pretrain() == 60 and capped.allocations == math.ceil(PRETRAIN_S / 60 / 50)
    # a limit no longer than the margin: the job runs to the limit (allocation.py does not stop it early)
    for limit in (10, 9):
        short = T.run_requests(run, price(run)["expected"], T.Learned(), time_limit_min=limit)
        assert short.allocations == math.ceil(PRETRAIN_S / 60 / limit) and short.pretrain() == limit
    # one floor a submission: sections that need seconds ask FLOOR_MIN together, not each
    quick = T.run_requests(run, {"pretrain": 60.0, "features": 5.0, "retrieval": 5.0}, T.Learned())
    assert sum(quick.evaluation.values()) == T.FLOOR_MIN
    # whole minutes of the submission's 30 s start and the jobs' needs: 30 + 1.5 x 20 s is one minute, 30 + 1.5 x
    # 100 s three
    exact = T.run_requests(run, {"pretrain": 20.0, "features": 100.0}, T.Learned())
    assert (exact.work, exact.evaluation) == (1, {"features": 3})


def test_a_run_that_does_not_train_asks_only_inside_its_evaluation_submission(runs):
    twin = runs[rid(runs, "cifar100", 0, trained=False)]
    asked = T.run_requests(twin, price(twin)["expected"], T.Learned(), time_limit_min=100)
    assert (asked.work, asked.allocations, asked.pretrain()) == (None, 0, None)
    assert list(asked.evaluation) == ["pretrain", *SECTIONS]  # its initialisation first, in the same submission
    total = math.ceil((T.SUBMISSION_START_S + T.PRIOR * (60.0 + sum(SECTIONS.values()))) / 60)
    assert sum(asked.evaluation.values()) == total and asked.job("pretrain") == asked.evaluation["pretrain"]
    assert T.kind(twin, "pretrain") == (T.INIT, "cifar100", "resnet18")
    assert T.kind(twin, "features") == ("features", "cifar100", "resnet18")  # evaluated as a trained run is
    assert T.kind(runs[rid(runs, "cifar100", 0)], "pretrain") == ("pretrain", "cifar100", "resnet18") != T.kind(
        twin, "pretrain")


def test_a_submission_is_made_of_what_is_still_to_do(runs):
    """Sections done are not asked for; a section rerun although its output exists asks for a submission of its
    own."""
    run = runs[rid(runs, "cifar10", 0)]
    todo = {"retrieval", "linear_probe"}
    asked = T.run_requests(run, price(run)["expected"], T.Learned(), todo=todo)
    need = [T.PRIOR * SECTIONS[k] for k in ("retrieval", "linear_probe")]
    total = max(T.FLOOR_MIN, math.ceil((T.SUBMISSION_START_S + sum(need)) / 60))
    assert [asked.evaluation[k] for k in ("retrieval", "linear_probe")] == T.shares(total, need)
    assert asked.evaluation["features"] == max(T.FLOOR_MIN, math.ceil((T.SUBMISSION_START_S + T.PRIOR * 21.7) / 60))
    rerun = T.run_requests(run, price(run)["expected"], T.Learned(), todo=set())  # every output there: each alone
    assert rerun.evaluation == {k: max(T.FLOOR_MIN, math.ceil((T.SUBMISSION_START_S + T.PRIOR * v) / 60))
                                for k, v in SECTIONS.items()} and rerun.evaluation["linear_probe"] == 4


def test_after_jobs_of_a_kind_took_a_minute_the_next_asks_for_a_few_minutes(tmp_path, runs):
    """Two CIFAR-10 runs trained in 60 s (expected: 5,052 s) and evaluated in 15 s a section: the third asks for a
    pretraining submission of minutes (not the prior's 127) and an evaluation submission of FLOOR_MIN (not 6). The
    other dataset's runs, and the untrained twins, are other kinds: they still ask the prior's."""
    for seed in (0, 1):
        finish(tmp_path, runs, rid(runs, "cifar10", seed), 60.0)
    plan = T.Planner(runs, price, tmp_path, remaining=True)
    third, other = rid(runs, "cifar10", 2), rid(runs, "cifar100", 2)
    learned = plan.learned()
    assert learned.ratios == {T.kind(runs[third], "pretrain"): [60.0 / PRETRAIN_S] * 2,
                              **{T.kind(runs[third], k): [15.0 / SECTIONS[k]] * 2 for k in SECTIONS}}
    asked = plan.asked(third)
    work = math.ceil((T.SUBMISSION_START_S + naive_bound([60.0 / PRETRAIN_S] * 2) * PRETRAIN_S) / 60)
    assert asked.work == work == 2 and asked.pretrain() == 2 + 10  # and the stop margin
    assert sum(asked.evaluation.values()) == T.FLOOR_MIN == 3  # one floor for the submission
    prior = T.run_requests(runs[other], price(runs[other])["expected"], T.Learned())
    assert plan.asked(other) == prior and prior.work == 127 and sum(prior.evaluation.values()) == 6
    twin = rid(runs, "cifar100", 2, trained=False)
    assert plan.asked(twin) == T.run_requests(runs[twin], price(runs[twin])["expected"], T.Learned())
    # a finished run asked again: the workflow's planner (remaining) finds nothing to do, so each job it is asked
    # about asks alone; the estimate's prices every job in one submission
    done = rid(runs, "cifar10", 0)
    assert plan.asked(done).evaluation == dict.fromkeys(SECTIONS, T.FLOOR_MIN)
    whole = T.Planner(runs, price, tmp_path).asked(done)
    assert sum(whole.evaluation.values()) == T.FLOOR_MIN and whole == asked


def test_what_a_run_folder_leaves_to_do_is_decided_in_one_place(tmp_path, runs, monkeypatch):
    """The workflow's time requests and the plan of `bayesncl stale` and the pre-flight's dry run read what a run
    folder leaves to do from one function, grid.stale.run_todo: what it says reaches both."""
    from pathlib import Path

    from bayesncl.grid import stale
    from bayesncl.grid.preflight import todo_from_files

    done = rid(runs, "cifar10", 0)
    finish(tmp_path, runs, done, 60.0)  # every output there
    assert stale.run_todo(tmp_path / "runs" / done, list(SECTIONS)) == set()
    assert todo_from_files(runs, tmp_path, {})[done] == set()
    decide = stale.run_todo
    planted = {"retrieval", "linear_probe"}  # one submission shares one floor: not what each asks alone
    monkeypatch.setattr(stale, "run_todo", lambda d, sections: planted if Path(d) == tmp_path / "runs" / done
                        else decide(d, sections))
    assert todo_from_files(runs, tmp_path, {})[done] == planted
    plan = T.Planner(runs, price, tmp_path, remaining=True)
    asked = plan.asked(done)
    assert asked == T.run_requests(runs[done], price(runs[done])["expected"], plan.learned(), todo=planted)
    assert asked != T.run_requests(runs[done], price(runs[done])["expected"], plan.learned(), todo=set())


def test_what_the_finished_jobs_do_not_tell(tmp_path, runs):
    """Not counted: a section restored on a retry (it ran in an earlier attempt), a run folder that records another
    config, a run that is not the grid's, a benchmark file being written. A pretraining job resumed in another
    allocation counts at least the seconds its log's epochs took."""
    a, b, c = (rid(runs, "cifar10", s) for s in (0, 1, 2))
    finish(tmp_path, runs, a, 60.0)
    (tmp_path / "runs" / a / "log.jsonl").write_text("".join(json.dumps({"epoch": e, "epoch_seconds": 40.0}) + "\n"
                                                             for e in range(100)))  # 4,000 s in several allocations
    (tmp_path / "runs" / a / "eval" / "retrieval.log").write_text(f"retrieval: {T.RESTORED} 1 of this invocation\n")
    other = json.loads(json.dumps(runs[b].config))
    other["train"]["epochs"] = 10
    finish(tmp_path, runs, b, 6.0, config=other)  # an older config's run, trained 10 epochs
    write_benchmark(tmp_path / "benchmarks", "pretrain/cifar10/ncl/seed~9.tsv", 60.0, 1.0, 1, "pretrain")
    half = tmp_path / "benchmarks" / "features" / f"{c}.tsv"
    half.write_text("s\th:m:s\n")  # its header only, so far
    (tmp_path / "benchmarks" / "aaa").mkdir()
    (tmp_path / "benchmarks" / "aaa" / "gone.tsv").symlink_to(tmp_path / "nowhere.tsv")  # removed while read
    learned = T.Planner(runs, price, tmp_path).learned()
    assert learned.ratios[T.kind(runs[a], "pretrain")] == [4000.0 / PRETRAIN_S]
    assert T.kind(runs[a], "retrieval") not in learned.ratios
    assert learned.ratios[T.kind(runs[a], "features")] == [15.0 / SECTIONS["features"]] and learned.jobs == 4
    # the third run: a log without epoch times (its benchmark counts), a section that took no measurable time (0.00
    # s, not counted), one that took half a second (counted), a log that names a restored section only later on,
    # and one with bytes that are not UTF-8
    finish(tmp_path, runs, c, 60.0, sections=0.5)
    (tmp_path / "runs" / c / "log.jsonl").write_text("".join(json.dumps({"epoch": e, "loss": 1.0}) + "\n"
                                                             for e in range(100)))
    write_benchmark(tmp_path / "benchmarks", f"features/{c}.tsv", 0.0, 500.0, 1, "features")
    (tmp_path / "runs" / c / "eval" / "retrieval.log").write_text(f"retrieval: done\nnot {T.RESTORED} 1\n")
    (tmp_path / "runs" / c / "eval" / "interpretability.log").write_bytes(b"interpretability: \xff\n")
    learned = T.Planner(runs, price, tmp_path).learned()
    assert learned.ratios[T.kind(runs[a], "pretrain")] == [4000.0 / PRETRAIN_S, 60.0 / PRETRAIN_S]
    assert learned.ratios[T.kind(runs[a], "features")] == [15.0 / SECTIONS["features"]]  # not the 0.00 s
    assert learned.ratios[T.kind(runs[a], "retrieval")] == [0.5 / SECTIONS["retrieval"]]
    assert learned.ratios[T.kind(runs[a], "interpretability")] == [15.0 / 30.0, 0.5 / 30.0]


def test_a_decision_holds_for_a_submission_and_a_retry_asks_attempt_times_the_first(tmp_path, runs):
    """The jobs of one submission are asked one after another: they share one decision for HOLD_S seconds, after
    which the finished jobs are read again; a retry asks attempt x the last first attempt's, whatever was learned
    since."""
    now = [0.0]
    plan = T.Planner(runs, price, tmp_path, clock=lambda: now[0])
    target = rid(runs, "cifar10", 2)
    first = plan.asked(target)
    finish(tmp_path, runs, rid(runs, "cifar10", 0), 60.0)
    now[0] = T.HOLD_S / 2
    assert plan.asked(target) is first and plan.minutes(target, "features") == first.evaluation["features"]
    now[0] = T.HOLD_S
    learned = plan.asked(target)
    assert learned.work < first.work and sum(learned.evaluation.values()) < sum(first.evaluation.values())
    now[0] = 1.5 * T.HOLD_S
    assert plan.asked(target) is learned  # held again from its own decision
    finish(tmp_path, runs, rid(runs, "cifar10", 1), 600.0)
    now[0] = 3 * T.HOLD_S
    assert plan.minutes(target, "pretrain", 2) == 2 * learned.work + 10
    assert plan.minutes(target, "linear_probe", 3) == 3 * learned.evaluation["linear_probe"]
    assert plan.asked(target).work > learned.work  # a first attempt after HOLD_S: decided again, the slow run counted


def test_a_run_that_cannot_be_priced_asks_nothing(runs):
    plan = T.Planner(runs, lambda run: None)
    assert plan.asked(next(iter(runs))) is None and plan.minutes(next(iter(runs)), "features") is None
    assert T.Planner(runs, price).learned().jobs == 0  # no results folder: nothing learned


def test_imported_weights_ask_for_no_pretraining(runs):
    """A run whose weights are imported (no "pretrain" among its expected jobs) has no pretraining submission and
    no initialisation in its evaluation submission, whatever its train.epochs."""
    run = runs[rid(runs, "cifar10", 0)]
    asked = T.run_requests(run, SECTIONS, T.Learned(), time_limit_min=60)
    assert (asked.work, asked.allocations, asked.pretrain()) == (None, 0, None) and list(asked.evaluation) == list(
        SECTIONS)
