"""The time each job of the workflow asks the scheduler for (SLURM's --time), decided here only: the workflow's
resource functions (workflow/rules/common.smk) and `bayesncl estimate` ask the same `Planner`, so the estimate
prints the sums of what the workflow asks.

A job's expected seconds are bayesncl.planning.estimate's (`run_cost`'s "expected": the pretraining job, each evaluation
section). It needs its expected seconds times the factor of its kind (rule, dataset, architecture; a pretraining job
of train.epochs 0, which only saves an untrained twin's initialisation, is a kind of its own, INIT):
- before any job of its kind has finished, PRIOR (a plugin's section 1: its declared runtime is its request);
- after, the upper LEVEL prediction bound of the ratio measured / expected of the next job, from those of the kind's
  finished jobs (log scale, Student's t; their spread pooled with PRIOR_DF pseudo-jobs of spread PRIOR_LOG_SD, so
  that one job, or a few that took the same time, still leave a margin): a job asks what its kind took, scaled by
  its own expected work against theirs, and the margin narrows as jobs finish. The measured seconds are the
  jobs' benchmark records under <results>/benchmarks, read by bayesncl.report.jobs (`bayesncl jobs`); a
  pretraining job's at least the seconds its log's epochs took (a run resumed in a further allocation has a
  record of its last allocation only). Not counted: a job of a run folder that records another config than the
  grid's, and a section restored on a retry (it ran in an earlier attempt).
What it asks, in whole minutes:
- a pretraining submission: SUBMISSION_START_S (Snakemake's own start inside the job) and its need, then its stop
  margin (workflow/scripts/allocation.py stops the run that long before the allocation ends), at most the
  partition's limit; a run needing more continues in further allocations, each asking the same;
- a run's evaluation submission (the group eval_<run>, workflow/rules/evaluate.smk): its sections still to do and,
  for an untrained twin, its initialisation (no pretraining submission of its own), together: SUBMISSION_START_S
  and their needs, at least FLOOR_MIN in all (one floor a submission), shared among its jobs in whole minutes
  (Snakemake asks for the sum of a group's runtimes, its jobs running one after another); a job of the run
  submitted although its output exists (a rerun) asks for a submission of its own;
- a retry: attempt times what the first attempt asked (a pretraining job's stop margin once).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

__all__ = ["FLOOR_MIN", "INIT", "PRIOR", "RESTORED", "STOP_MARGIN_S", "SUBMISSION_START_S", "Asked", "Learned",
           "Planner", "factor", "kind", "run_requests", "shares", "trains"]

PRIOR = 1.5  # a pretraining job short of time goes on in another allocation; a section, in a retry twice as long
FLOOR_MIN = 3
SUBMISSION_START_S = 30.0  # Snakemake reading the workflow inside the job (the paper grid: about 14 CPU-seconds)
STOP_MARGIN_S = 600  # the pretrain rule's and the profile's stop_margin_s
LEVEL = 0.95
PRIOR_LOG_SD = 0.15  # jobs of one kind on one GPU model: within about 15% of each other
PRIOR_DF = 4
HOLD_S = 60.0  # the finished jobs are read again, and a run's requests decided again, at most this often
PRETRAIN = "pretrain"
INIT = "init"
RESTORED = "restored from attempt"  # the log line of a section restored on a retry (evaluate.smk)


def trains(cfg: dict) -> bool:
    """Whether a run config trains; train.epochs 0 (an untrained twin) only saves the initialisation."""
    return bool(cfg["train"]["epochs"])


def kind(run, job: str) -> tuple[str, str, str]:
    """The jobs whose times predict each other's: (rule, dataset, architecture); INIT for a run that only saves its
    initialisation."""
    cfg = run.config
    return (job if job != PRETRAIN or trains(cfg) else INIT), cfg["data"]["dataset"], cfg["model"]["arch"]


def factor(ratios: list[float]) -> float:
    """The upper LEVEL prediction bound of the next job's measured / expected, from `ratios` of finished jobs."""
    from scipy.stats import t

    n = len(ratios)
    logs = [math.log(r) for r in ratios]
    mean = sum(logs) / n
    df = n - 1 + PRIOR_DF
    spread = math.sqrt((sum((x - mean) ** 2 for x in logs) + PRIOR_DF * PRIOR_LOG_SD ** 2) / df)
    return math.exp(mean + float(t.ppf(LEVEL, df)) * spread * math.sqrt(1 + 1 / n))


@dataclass
class Learned:
    """The ratios measured / expected of a grid's finished jobs, per kind."""
    ratios: dict[tuple[str, str, str], list[float]] = field(default_factory=dict)

    def factor(self, of: tuple[str, str, str], prior: float = PRIOR) -> float:
        found = self.ratios.get(of)
        return factor(found) if found else prior

    @property
    def jobs(self) -> int:
        return sum(map(len, self.ratios.values()))


def shares(total: int, weights: list[float]) -> list[int]:
    """`total` minutes apportioned by `weights` in whole minutes (largest remainders; ties to the earlier)."""
    whole = sum(weights)
    quotas = [total * w / whole for w in weights]
    out = [math.floor(q) for q in quotas]
    for i in sorted(range(len(out)), key=lambda i: (out[i] - quotas[i], i))[: total - sum(out)]:
        out[i] += 1
    return out


def _minutes(seconds: float) -> int:
    return math.ceil(seconds / 60)


@dataclass(frozen=True)
class Asked:
    """One run's requests (minutes) at its first attempt; attempt n asks n times as much."""
    work: int | None  # a pretraining submission's minutes before its stop margin; None: none (it does not train)
    margin: int  # the stop margin's minutes
    limit: int | None  # the partition's limit
    allocations: int  # pretraining submissions
    evaluation: dict[str, int]  # each job of the evaluation submission; their sum is what it asks

    def pretrain(self, attempt: int = 1) -> int | None:
        if self.work is None:
            return None
        asked = attempt * self.work + self.margin
        return min(asked, self.limit) if self.limit else asked

    def job(self, name: str, attempt: int = 1) -> int:
        if name == PRETRAIN and self.work is not None:
            return self.pretrain(attempt)
        return attempt * self.evaluation[name]


def run_requests(run, expected: dict[str, float], learned: Learned, *, todo: set[str] | None = None,
                 declared: tuple[str, ...] = (), time_limit_min: float | None = None,
                 margin_s: float = STOP_MARGIN_S) -> Asked:
    """The requests of one run's jobs (a bayesncl.grid.expand Run) from their `expected` seconds (no "pretrain" where
    its weights are imported, not trained): its pretraining submission, and its evaluation submission made of the jobs
    in `todo` (None: all of them). `declared`: the jobs whose expected seconds are their declared runtime (a
    plugin's section)."""
    need = {job: learned.factor(kind(run, job), 1.0 if job in declared else PRIOR) * s for job, s in expected.items()}
    trained = PRETRAIN in expected and trains(run.config)  # a pretraining submission of its own
    work, allocations = None, 0
    if trained:
        work, allocations = _minutes(SUBMISSION_START_S + need[PRETRAIN]), 1
        if time_limit_min:  # each allocation trains until the stop margin before its end
            usable = time_limit_min - margin_s / 60 if time_limit_min > margin_s / 60 else time_limit_min
            allocations = max(1, math.ceil(expected[PRETRAIN] / 60 / usable))
    members = [job for job in expected if job != PRETRAIN or not trained]
    together = [job for job in members if todo is None or job in todo]
    asked = {}
    if together:
        total = max(FLOOR_MIN, _minutes(SUBMISSION_START_S + sum(need[j] for j in together)))
        asked = dict(zip(together, shares(total, [need[j] for j in together])))
    alone = {j: max(FLOOR_MIN, _minutes(SUBMISSION_START_S + need[j])) for j in members if j not in asked}
    return Asked(work, _minutes(margin_s), int(time_limit_min) if time_limit_min else None, allocations,
                 {j: asked[j] if j in asked else alone[j] for j in members})


class Planner:
    """Every request of one grid: run_requests over its runs (`price(run)`: bayesncl.planning.estimate's run_cost, None
    where a run cannot be priced), learning from its finished jobs under `results`/benchmarks (read again at most
    every HOLD_S seconds). With `remaining`, each evaluation submission is made of what its run folder still lacks
    (the workflow: what Snakemake submits); without, of every job (the estimate). A run's requests are decided again
    at most every HOLD_S seconds, so the jobs of one submission, asked one after another, share one decision; a
    retry asks attempt times the last first attempt's."""

    def __init__(self, runs: dict, price: Callable[[object], dict | None], results: str | Path | None = None, *,
                 time_limit_min: float | None = None, margin_s: float = STOP_MARGIN_S, remaining: bool = False,
                 clock: Callable[[], float] = time.monotonic):
        self.runs, self.price, self.remaining, self.clock = runs, price, remaining, clock
        self.results = None if results is None else Path(results)
        self.time_limit_min, self.margin_s = time_limit_min, margin_s
        self._costs: dict[str, dict | None] = {}
        self._seen: dict[Path, tuple] = {}
        self._learned, self._read = Learned(), -math.inf
        self._asked: dict[str, tuple[float, Asked]] = {}

    def cost(self, rid: str) -> dict | None:
        if rid not in self._costs:
            self._costs[rid] = self.price(self.runs[rid])
        return self._costs[rid]

    def learned(self) -> Learned:
        now = self.clock()
        if now - self._read >= HOLD_S:
            self._learned, self._read = self._learn(), now
        return self._learned

    def asked(self, rid: str, attempt: int = 1) -> Asked | None:
        """The run's requests (None where it cannot be priced)."""
        cost = self.cost(rid)
        if cost is None:
            return None
        now, held = self.clock(), self._asked.get(rid)
        if held is None or (attempt == 1 and now - held[0] >= HOLD_S):
            todo = None
            if self.remaining and self.results is not None:
                from ..grid.stale import run_todo

                todo = run_todo(self.results / "runs" / rid, [j for j in cost["expected"] if j != PRETRAIN])
            held = self._asked[rid] = (now, run_requests(
                self.runs[rid], cost["expected"], self.learned(), todo=todo, declared=tuple(cost["declared"]),
                time_limit_min=self.time_limit_min, margin_s=self.margin_s))
        return held[1]

    def minutes(self, rid: str, job: str, attempt: int = 1) -> int | None:
        """What job `job` (pretrain or an evaluation section) of run `rid` asks at `attempt`."""
        asked = self.asked(rid, attempt)
        return None if asked is None else asked.job(job, attempt)

    def _learn(self) -> Learned:
        root = None if self.results is None else self.results / "benchmarks"
        if root is None or not root.is_dir():
            return Learned()
        found: dict[tuple[str, str, str], list[float]] = {}
        for path in sorted(root.rglob("*.tsv")):
            try:
                stat = path.stat()
            except OSError:
                continue
            stamp = (stat.st_mtime_ns, stat.st_size)
            if self._seen.get(path, (None,))[0] != stamp:
                self._seen[path] = (stamp, self._measure(path, root))
            measured = self._seen[path][1]
            if measured is not None:
                found.setdefault(measured[0], []).append(measured[1])
        return Learned(found)

    def _measure(self, path: Path, root: Path) -> tuple[tuple[str, str, str], float] | None:
        """(kind, measured / expected) of one finished job of the grid; None where it tells nothing of one."""
        from ..core.errors import BayesNCLError
        from ..runs.ownership import trained_as
        from ..report.jobs import read_row
        from ..runs.files import EVAL, read_log

        try:
            row = read_row(path, root)
        except BayesNCLError:  # being written, or not a record: no measurement
            return None
        run = self.runs.get(row["run"])
        cost = None if run is None else self.cost(row["run"])
        job, folder = row["rule"], None if self.results is None else self.results / "runs" / row["run"]
        if cost is None or job not in cost["expected"] or not trained_as(folder, run.config):
            return None
        seconds = row["seconds"]
        if job == PRETRAIN:
            try:
                seconds = max(seconds, sum(e.get("epoch_seconds") or 0.0 for e in read_log(folder)))
            except BayesNCLError:
                pass
        else:
            try:
                if RESTORED in (folder / EVAL / f"{job}.log").read_text(errors="replace").partition("\n")[0]:
                    return None
            except OSError:
                pass
        if not seconds > 0:
            return None
        return kind(run, job), seconds / cost["expected"][job]
