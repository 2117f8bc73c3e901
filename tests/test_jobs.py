"""`bayesncl jobs`: the workflow's benchmark files (Snakemake's extended format) in one CSV, and the totals."""

import math

import pandas as pd
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from bayesncl.cli.main import main
from bayesncl.report.jobs import WALL_STEP, collect, render, startup_bound, startup_share, totals
from bayesncl.core.startup import DECIMALS, clock_tick
from helpers.report import write_benchmark


def test_collects_every_job_with_NA_where_memory_was_not_sampled(tmp_path):
    b = tmp_path / "benchmarks"
    write_benchmark(b, "pretrain/cifar10/ncl/seed~0.tsv", 3600.0, 812.5, 1, "pretrain")
    write_benchmark(b, "pretrain/cifar10/cl/seed~0.tsv", 1800.0, 700.0, 1, "pretrain")
    write_benchmark(b, "retrieval/cifar10/ncl/seed~0.tsv", 0.4, "NA", 0, "retrieval")  # ended before the first sample
    write_benchmark(b, "atlas/cifar10.tsv", 12.0, 300.0, 0, "atlas")
    write_benchmark(b, "summarize.tsv", 5.0, 200.0, None, "summarize", extended=False)
    jobs = collect(b)
    assert list(jobs["rule"]) == ["atlas", "pretrain", "pretrain", "retrieval", "summarize"]
    assert list(jobs["run"]) == ["cifar10", "cifar10/cl/seed~0", "cifar10/ncl/seed~0", "cifar10/ncl/seed~0", ""]
    assert math.isnan(jobs.loc[3, "max_rss_mb"]) and math.isnan(jobs.loc[3, "cpu_seconds"])
    assert list(jobs["max_rss_mb"].iloc[[0, 1, 2, 4]]) == [300.0, 700.0, 812.5, 200.0]  # max_rss, no other column
    assert list(jobs["cpu_seconds"].iloc[[0, 1, 2, 4]]) == [11.05, 1620.25, 3240.25, 4.75]  # cpu_time
    assert list(jobs["seconds"]) == [12.0, 1800.0, 3600.0, 0.4, 5.0]
    assert jobs.loc[1, "gpus"] == 1 and jobs.loc[3, "gpus"] == 0 and math.isnan(jobs.loc[4, "gpus"])
    per = totals(jobs).set_index("rule")
    assert per.loc["pretrain", "jobs"] == 2 and per.loc["pretrain", "seconds"] == 5400
    assert per.loc["pretrain", "gpu_hours"] == pytest.approx(1.5) and per.loc["atlas", "gpu_hours"] == 0
    assert math.isnan(per.loc["summarize", "gpu_hours"]) and per.loc["pretrain", "max_rss_mb"] == 812.5
    text = render(jobs)
    assert "GPU-hours of the grid as run: 1.50 (1 jobs do not record their GPUs)" in text
    assert "| retrieval | 1 | 0.00 | 0.4 | NA | NA | 0.00 |" in text
    assert "| pretrain | 2 | 1.50 | 2,700.0 | NA | 812 | 1.50 |" in text  # max RSS: the larger of 812.5 and 700
    assert "No job recorded its start-up time." in text


def test_totals_say_missing_where_nothing_was_measured():
    jobs = pd.DataFrame({"rule": ["a", "a", "b"], "run": ["x", "y", "x"], "seconds": [math.nan, math.nan, 10.0],
                         "max_rss_mb": [math.nan, math.nan, 5.0], "gpus": [1.0, 1.0, math.nan]})
    per = totals(jobs, all_row=True).set_index("rule")
    assert per.loc["a", "unmeasured"] == 2 and per.loc["b", "unmeasured"] == 0
    for col in ("seconds", "max_rss_mb", "gpu_hours"):  # nothing measured: NaN, not 0
        assert math.isnan(per.loc["a", col]), col
    assert math.isnan(per.loc["b", "gpu_hours"])
    assert per.loc["all", "seconds"] == 10.0 and math.isnan(per.loc["all", "gpu_hours"])
    assert "GPU-hours of the grid as run: NA (1 jobs do not record their GPUs)" in render(jobs)


def test_the_median_is_the_middle_job_not_the_mean():
    """One slow job among quick ones moves a mean, not the median (odd and even counts; unmeasured left out)."""
    jobs = pd.DataFrame({"rule": ["a"] * 4 + ["b"] * 4, "run": list("wxyzwxyz"),
                         "seconds": [1.0, 2.0, 100.0, math.nan, 1.0, 2.0, 4.0, 100.0], "gpus": [0.0] * 8})
    per = totals(jobs, all_row=True).set_index("rule")
    assert per.loc["a", "median_seconds"] == 2.0 and per.loc["b", "median_seconds"] == 3.0
    assert per.loc["all", "median_seconds"] == 2.0
    assert "| a | 4 | 0.03 | 2.0 |" in render(jobs)


def test_cli_writes_csv_with_NA_and_the_totals(tmp_path, capsys):
    b = tmp_path / "benchmarks"
    write_benchmark(b, "cost/synthetic/ncl/seed~0.tsv", 0.3, "NA", 0, "cost")
    out = tmp_path / "summary" / "jobs.csv"
    assert main(["jobs", "--benchmarks", str(b), "--out", str(out), "--smoke"]) == 0
    text = out.read_text()
    assert text.splitlines()[0] == "rule,run,seconds,max_rss_mb,gpus,cpu_seconds,startup_seconds,benchmark"
    assert text.splitlines()[1].startswith("cost,synthetic/ncl/seed~0,0.3,NA,0.0,NA,NA,")
    assert "SMOKE RUN" in (tmp_path / "summary" / "jobs.md").read_text()
    assert "| cost | 1 |" in capsys.readouterr().out
    assert pd.read_csv(out)["max_rss_mb"].isna().all()


def test_startup_seconds_come_from_the_record_beside_each_benchmark(tmp_path):
    """<run>.start.json (forkserver.mark_ready) joins its own job; the share counts only jobs with both numbers;
    an unreadable record is NA, never a failure."""
    b = tmp_path / "benchmarks"
    write_benchmark(b, "pretrain/s/ncl/seed~0.tsv", 20.0, 100.0, 0, "pretrain")
    write_benchmark(b, "pretrain/s/ncl/seed~1.tsv", 30.0, 100.0, 0, "pretrain")
    write_benchmark(b, "features/s/ncl/seed~0.tsv", 10.0, 100.0, 0, "features")
    write_benchmark(b, "report.tsv", 40.0, 100.0, 0, "report")
    (b / "pretrain/s/ncl/seed~0.start.json").write_text(
        '{"startup_seconds": 1.5, "forkserver": true, "max_rss_mb": 456.5, "cpu_seconds": 17.25}\n')
    (b / "pretrain/s/ncl/seed~1.start.json").write_text('{"startup_seconds": 0.5}\n')
    (b / "features/s/ncl/seed~0.start.json").write_text('{"startup_seconds": 2.0}\n')
    (b / "report.start.json").write_text("not json")
    jobs = collect(b).set_index("run")
    assert jobs.loc["s/ncl/seed~0"].set_index("rule").loc["pretrain", "startup_seconds"] == 1.5
    assert jobs.loc["s/ncl/seed~0"].set_index("rule").loc["features", "startup_seconds"] == 2.0
    assert jobs.loc["s/ncl/seed~1", "startup_seconds"] == 0.5 and math.isnan(jobs.loc["", "startup_seconds"])
    # a forked job's own memory and CPU time replace its client's (the benchmark's); others keep the benchmark's
    forked = jobs.loc["s/ncl/seed~0"].set_index("rule").loc["pretrain"]
    assert (forked["max_rss_mb"], forked["cpu_seconds"]) == (456.5, 17.25)
    assert (jobs.loc["s/ncl/seed~1", "max_rss_mb"], jobs.loc["s/ncl/seed~1", "cpu_seconds"]) == (100.0, 27.25)
    per = totals(collect(b)).set_index("rule")
    assert per.loc["pretrain", "startup_seconds"] == 2.0 and math.isnan(per.loc["report", "startup_seconds"])
    assert startup_share(collect(b)) == (4.0, 60.0, 3)  # the report job has no start-up: left out of both sums
    assert "Start-up (process start, imports, loading; 3 of 4 jobs record it): 4.0 s of their 60.0 s, 6.7%." \
        in render(collect(b))


def _snakemake_s(running_time: float) -> float:
    """The wall seconds the installed Snakemake writes in a benchmark .tsv for a job of `running_time`."""
    from snakemake.benchmark import BenchmarkRecord

    record = BenchmarkRecord(running_time=running_time)
    record.process_gone = True  # a job over before the first sample: NA memory, no warning
    return float(record.to_tsv(extended_fmt=False).split("\t")[0])


@given(st.floats(0, 1e5))
@example(0.004)
@example(0.005)
@example(0.07504)
@example(0.0849)
def test_snakemake_writes_wall_seconds_to_the_step_startup_bound_assumes(t):
    s = _snakemake_s(t)
    assert abs(s - t) < WALL_STEP and s == round(s, 2)
    if t < 0.004:
        assert s == 0.0  # shorter than the resolution: no wall time at all


HZ = round(1 / clock_tick())


@settings(max_examples=500, deadline=None)
@given(uptime_ticks=st.integers(0, 10**8), tick_part=st.floats(0, 1, exclude_max=True),
       after_clock=st.floats(0, 0.05), startup=st.floats(0, 100), work=st.floats(0, 100))
@example(uptime_ticks=123456, tick_part=0.999, after_clock=0.0, startup=0.004, work=0.0)  # under the resolution
@example(uptime_ticks=123456, tick_part=0.2, after_clock=0.0, startup=0.08, work=0.0)  # the 0.082 s against 0.08 s
@example(uptime_ticks=123456, tick_part=0.9999999, after_clock=0.0, startup=1.1345107, work=0.0)  # the most over
def test_a_recorded_startup_never_exceeds_its_bound_whatever_the_job_length(uptime_ticks, tick_part, after_clock,
                                                                            startup, work):
    """A job's process starts `after_clock` s after Snakemake's clock, `tick_part` of a clock tick into tick
    `uptime_ticks`, spends `startup` s before its work and `work` s in it. What each side writes, computed as
    each writes it (Snakemake's own record; bayesncl.core.startup's /proc start and rounding), stays within the bound
    for every length, jobs shorter than the wall time's resolution included."""
    created = (uptime_ticks + tick_part) / HZ  # boot clock
    recorded_start = uptime_ticks / HZ  # process_started: whole ticks
    recorded = round(max(0.0, created + startup - recorded_start), DECIMALS)  # mark_ready
    s = _snakemake_s(after_clock + startup + work)
    assert recorded <= startup_bound(s)


def test_the_startup_bound_is_tight_enough_to_catch_a_start_up_from_before_the_job():
    assert startup_bound(0.08) - 0.08 < 0.02
    assert not 0.2 <= startup_bound(0.08)  # e.g. timed from the fork server's start, not the job's
    jobs = pd.DataFrame({"seconds": [0.0, 0.08, 12.5], "startup_seconds": [0.014, 0.082, 3.0]})
    assert (jobs["startup_seconds"] <= startup_bound(jobs["seconds"])).all()  # the form test_workflow uses
