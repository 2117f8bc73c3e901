"""A seed whose value is NaN (a run collapsed to no active dimension) is missing, never counted as a seed, wherever
a count of seeds is printed: metrics.json's `<metric>_seeds`, the terminal's "Main comparison" k/n, the figure
legends' n."""

import math
import re

import pandas as pd
import pytest

from bayesncl.report import claims_table, figures, summary


def _main(sc_ncl, sc_bayes, **extra):
    """The main comparison on one dataset: NCL and BayesNCL, one run per seed, the given SC values."""
    rows = []
    for variant, method, values in (("NCL", "ncl", sc_ncl), ("BayesNCL", "bayesncl", sc_bayes)):
        for seed, sc in enumerate(values):
            rows.append({"run_id": f"synthetic/{method}/seed~{seed}", "dataset": "synthetic", "arch": "resnet18",
                         "method": method, "variant": variant, "sets": "table1;table2;figure4a", "sweep": "proj_dim",
                         "gate": "ste" if method == "bayesncl" else "", "detach": 1.0, "head_depth": 2.0,
                         "rho": 0.8, "lambda": 3e-5, "proj_dim": 64.0, "seed": seed,
                         "weights_sha": f"{method}/{seed}", "sc": sc, "se_sum": 1.5, "act": 20.0,
                         "probe_top1": 60.0 + seed, "ret_p10": 70.0, **extra})
    return summary.prepare(pd.DataFrame(rows))


def test_metrics_json_counts_the_finite_seeds():
    head = summary.headline(_main([30.0, math.nan, 32.0], [40.0, 41.0, 42.0]))["synthetic"]["resnet18"]
    assert head["NCL"]["seeds"] == 3 and head["NCL"]["sc_seeds"] == 2  # 2 of the 3 seeds have an SC
    assert head["NCL"]["sc"] == pytest.approx(31.0)  # the mean of the finite ones
    assert "sc_seeds" not in head["BayesNCL"] and "probe_top1_seeds" not in head["NCL"]
    # A metric no seed has is left out; its count would say 0 of 3.
    none = summary.headline(_main([math.nan] * 3, [40.0] * 3))["synthetic"]["resnet18"]["NCL"]
    assert "sc" not in none and none["seeds"] == 3


def _main_rows(text: str) -> dict[str, str]:
    """The terminal's main-comparison rows, by method."""
    table = text.split("Main comparison", 1)[1]
    return {m: line for line in table.splitlines() for m in ("BayesNCL", "NCL")
            if re.match(rf"Synthetic\s+ResNet-18\s+{m}\s", line)}


def test_terminal_main_comparison_says_k_of_n():
    rows = _main_rows(claims_table.outcome(_main([30.0, math.nan, 32.0], [40.0, 41.0, 42.0])))
    assert "31.00 ± 1.41 (2/3)" in rows["NCL"]  # SC over the 2 finite seeds, of 3
    assert "(2/3)" not in rows["BayesNCL"] and "(3/3)" not in rows["BayesNCL"]
    assert "41.00 ± 1.00" in rows["BayesNCL"]


def test_figure_legends_count_the_finite_seeds():
    fig = figures._figure4a(_main([30.0, math.nan, 32.0], [40.0, 41.0, 42.0]))
    sc = fig.axes[0]
    labels = {ln.get_label() for ln in sc.lines}
    assert "NCL (n=2 seeds)" in labels and "BayesNCL (n=3 seeds)" in labels, labels
    # The top-1 panel has every seed of NCL.
    assert "NCL (n=3 seeds)" in {ln.get_label() for ln in fig.axes[1].lines}
