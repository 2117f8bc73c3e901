"""The numbers in printed tables against values computed here, from the fixtures, with NumPy and scipy.stats.t:
the golden files (tests/golden) and the claims rows of test_claims.py's wired grid. The golden files pin the
formatting byte for byte (tests/test_report.py::test_golden_tables); this file checks that their numbers are
right. Cells are read by their numbers only (a printed value agrees when it is the true one rounded to the digits
shown), so a change of layout does not break these tests; a wrong mean, std, seed count, Δ or interval does."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

GOLDEN = Path(__file__).with_name("golden")
NUMBER = r"[-+−]?\d+(?:\.\d+)?"
DATASETS = {"CIFAR-10": "cifar10", "CIFAR-100": "cifar100"}


def agrees(printed: str, value: float) -> bool:
    """The printed number is `value` rounded to the digits it shows (signs of a rounded zero aside)."""
    digits = len(printed.split(".")[1]) if "." in printed else 0
    return abs(float(printed.replace("−", "-")) - value) <= 0.5 * 10.0 ** -digits + 1e-9


def agrees_all(cell: str, values: list[float]) -> bool:
    found = re.findall(NUMBER, cell.replace("$-$", "-"))
    return len(found) == len(values) and all(agrees(p, v) for p, v in zip(found, values))


def t_interval(d) -> tuple[float, float, float]:
    """mean(d) and its 95% Student-t interval, mean ± t(0.975, n - 1) sd / sqrt(n) (docs/METHOD.md section 9)."""
    d = np.asarray(d, dtype=float)
    n = len(d)
    half = stats.t.ppf(0.975, n - 1) * d.std(ddof=1) / math.sqrt(n)
    return float(d.mean()), float(d.mean() - half), float(d.mean() + half)


def md_rows(text: str) -> list[list[str]]:
    return [[c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]] for line in text.splitlines()
            if line.startswith("|") and not set(line) <= set("|:- ")]


def side_stats(values) -> list[float]:
    v = np.asarray([x for x in values if math.isfinite(x)], dtype=float)
    return [float(v.mean())] + ([float(v.std(ddof=1))] if len(v) > 1 else [])


# --------------------------------------------------------------------------- golden tables
@pytest.fixture(scope="module")
def runs() -> pd.DataFrame:
    return pd.read_csv(GOLDEN / "runs.csv")  # plain pandas: not bayesncl's reader


def _blocks(rows: list[tuple[str, list[str]]]):
    """(dataset, label without its seed-count mark, n from the mark or None, cells) of a table's method rows."""
    dataset = None
    for label, cells in rows:
        block = re.search(r"CIFAR-\d+", label)
        if block and not any(c.strip("-") for c in cells):
            dataset = DATASETS[block.group(0)]
            continue
        mark = re.search(r"\(n=(\d+)\)|\$\^\{n=(\d+)\}\$", label)
        n = int(next(g for g in mark.groups() if g)) if mark else None
        label = re.sub(r"\s*\(n=\d+\)|\$\^\{n=\d+\}\$", "", label).replace("*", "")
        label = re.sub(r"\\([_%&#])", r"\1", label).strip()
        yield dataset, label, n, cells


def _check_table(runs: pd.DataFrame, rows, metrics: list[str]) -> int:
    checked = 0
    for dataset, label, n, cells in _blocks(rows):
        group = runs[(runs["dataset"] == dataset) & (runs["variant"] == label)]
        assert len(group), (dataset, label)
        assert n == (len(group) if len(group) != 3 else None), (dataset, label, n)  # the caption says 3 seeds
        assert len(cells) == len(metrics), (label, cells)
        for metric, cell in zip(metrics, cells):
            values = pd.to_numeric(group[metric], errors="coerce") if metric in group else pd.Series([math.nan])
            no_value = not np.isfinite(values).any() or (metric.startswith("ret_") and label == "SimCLR")
            if no_value:
                assert cell.strip("*$ ") in ("-", "--"), (dataset, label, metric, cell)
                continue
            assert agrees_all(cell.replace(r"\pm", "±"), side_stats(values)), (dataset, label, metric, cell)
            checked += 1
    return checked


def tex_rows(text: str) -> list[tuple[str, list[str]]]:
    body = text.split(r"\midrule", 1)[1].split(r"\bottomrule")[0]
    cells = [[c.strip() for c in line.strip().removesuffix(r"\\").split(" & ")] for line in body.splitlines()
             if line.strip() not in ("", r"\midrule")]
    return [(c[0], c[1:]) for c in cells]


TABLE1 = ["sc", "se_sum", "se_mean", "se_freq", "act", "alive"]
TABLE2 = ["probe_top1", "probe_top5", "ret_p1", "ret_p3", "ret_p5", "ret_p10"]


def test_golden_table1_numbers_are_the_means_and_stds_of_runs_csv(runs):
    assert _check_table(runs, tex_rows((GOLDEN / "table1.tex").read_text(encoding="utf-8")), TABLE1) >= 30


@pytest.mark.parametrize("kind", ["md", "tex"])
def test_golden_table2_numbers_are_the_means_and_stds_of_runs_csv(runs, kind):
    text = (GOLDEN / f"table2.{kind}").read_text(encoding="utf-8")
    rows = [(r[0], r[1:]) for r in md_rows(text)[1:]] if kind == "md" else tex_rows(text)
    assert _check_table(runs, rows, TABLE2) >= 20
    blocks = re.findall(r"CIFAR-(\d+) \(\$?K = (\d+)\$?\)", text)
    assert len(blocks) == 2
    for dataset, k in blocks:  # the block's K is the runs' ret_K
        assert set(runs.loc[runs["dataset"] == f"cifar{dataset}", "ret_K"]) == {int(k)}


# claim: (metric, left method, right method, right - left?)
GOLDEN_CLAIMS = {"1a": ("sc", "bayesncl", "ncl", False), "1c": ("se_sum", "bayesncl", "ncl", True),
                 "2a": ("probe_top1", "bayesncl", "ncl", False), "2b": ("probe_top1", "bayesncl", "cl", False),
                 "3": ("ret_p10", "bayesncl", "ncl", False)}


def test_golden_claims_intervals_are_naive_t_intervals_of_runs_csv(runs):
    """Paired by seed where at least 2 seeds are finite on both sides; the sides shown over those seeds."""
    checked = 0
    dataset = None
    for cells in md_rows((GOLDEN / "claims.md").read_text(encoding="utf-8"))[1:]:
        block = re.search(r"CIFAR-\d+", cells[0])
        if block:
            dataset = DATASETS[block.group(0)]
            continue
        if cells[0] not in GOLDEN_CLAIMS or dataset is None or cells[-1] == "not run":
            continue
        metric, lm, rm, flip = GOLDEN_CLAIMS[cells[0]]
        side = lambda m: runs[(runs["dataset"] == dataset) & (runs["method"] == m)].set_index("seed")[metric]  # noqa: E731
        left, right = side(lm).astype(float), side(rm).astype(float)
        shared = [s for s in left.index if s in right.index and np.isfinite(left[s]) and np.isfinite(right[s])]
        if len(shared) >= 2:
            a, b = left[shared].to_numpy(), right[shared].to_numpy()
            d = (b - a) if flip else (a - b)
            assert agrees_all(cells[2], side_stats(a) + [len(shared)]), cells
            assert agrees_all(cells[3], side_stats(b) + [len(shared)]), cells
            assert agrees_all(cells[4], list(t_interval(d))), cells
            assert cells[5].startswith(f"paired ({len(shared)})"), cells
        else:  # Welch; one side with a single seed: the difference of the means, no interval
            a, b = left.dropna().to_numpy(), right.dropna().to_numpy()
            diff = (b.mean() - a.mean()) if flip else (a.mean() - b.mean())
            assert min(len(a), len(b)) < 2 and "no CI" in cells[4] and agrees_all(cells[4], [diff]), cells
            assert cells[5] == f"Welch ({len(a)}, {len(b)})", cells
        checked += 1
    assert checked == 9


# --------------------------------------------------------------------------- the wired claims grid
def test_wired_claims_cells_are_naive_t_intervals():
    """test_claims.py::test_cells_as_printed's rows, recomputed: means, stds and seed counts with NumPy, Δ and
    its interval as the naive Student-t interval of the per-seed differences (against 0 for 7a and 7b)."""
    import json

    from helpers.claims import B, N, frame, wired_rows

    from bayesncl.report import claims_table as claims

    rows = wired_rows()
    md = claims.render_claims(frame(rows), "md")
    by_id = {r[0]: r for r in md_rows(md)}

    def side(variant, set_name, metric, last=False, **where):
        return {r["seed"]: (json.loads(r[metric])[-1] if last else r[metric]) for r in rows
                if r["variant"] == variant and set_name in r["sets"].split(";") and r["arch"] == "resnet18"
                and all(r[k] == v for k, v in where.items())}

    # claim: (left, right or None for 0, right - left?, 100 / mean(right)?)
    cases = {
        "1a": (side(B, "table1", "sc"), side(N, "table1", "sc"), False, False),
        "1c": (side(B, "table1", "se_sum"), side(N, "table1", "se_sum"), True, False),
        "2a": (side(B, "table2", "probe_top1"), side(N, "table2", "probe_top1"), False, False),
        "5": (side(B, "table4", "sc"), side("Soft gate", "table4", "sc"), False, False),
        "6b": (side(B, "table4", "sc"), side("1-layer head", "table4", "sc"), False, False),
        "8": (side(B, "table6", "bg_acc"), side(N, "table6", "bg_acc"), False, False),
        "12a": (side(B, "table7", "gflops"), side(N, "table7", "gflops"), False, True),
        "12b": (side(B, "table7", "train_minutes"), side(N, "table7", "train_minutes"), False, True),
        "7a": (side(N, "table3", "dyn_af_gv", last=True), None, False, False),
        "7b": (side(N, "table3", "dyn_gv_sc", last=True), None, True, False),
    }
    for cid, (left, right, flip, percent) in cases.items():
        cells = by_id[cid]
        if right is None:
            a = np.array(list(left.values()))
            d = -a if flip else a
            assert agrees_all(cells[2], side_stats(a) + [len(a)]) and cells[3] == "0", cells
        else:
            shared = sorted(set(left) & set(right))
            a, b = np.array([left[s] for s in shared]), np.array([right[s] for s in shared])
            d = (b - a) if flip else (a - b)
            if percent:  # Δ in percent of the right side's mean
                d = 100.0 * d / b.mean()
            n_left = "" if len(shared) == len(left) else f"/{len(left)}"
            assert agrees_all(cells[2].replace(n_left, ""), side_stats(a) + [len(shared)]), cells
            assert agrees_all(cells[3], side_stats(b) + [len(shared)]), cells
        assert agrees_all(cells[4], list(t_interval(d))), (cid, cells[4], t_interval(d))
        assert f"({len(d)})" in cells[5], cells
