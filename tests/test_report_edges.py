"""Report edges that mutation testing found untested (docs/TESTING.md, report/tables.py and summary.py):
a Table 3 group without dynamics among others, the repeat note with two datasets, several K values and
several protocols in one table, and metrics.json's rounding."""

import json

import pandas as pd

from bayesncl.report import summary as summ
from bayesncl.report.tables import render_table


def _row(variant, seed, dataset="cifar10", method="bayesncl", sets="table1", **metrics):
    return {"run_id": f"{dataset}/{variant}/seed~{seed}", "dataset": dataset, "arch": "resnet18",
            "method": method, "variant": variant, "sets": sets, "seed": seed, **metrics}


def _frame(rows):
    return summ.prepare(pd.DataFrame(rows))


def test_table3_keeps_every_group_after_one_without_dynamics():
    dyn = {"dyn_epochs": "[10]", "dyn_af_gv": "[0.5]", "dyn_gv_sc": "[-0.4]", "dyn_af_sc": "[0.1]"}
    rows = [_row("First", 0, method="ncl", sets="table3"),  # recorded no dynamics
            _row("Second", 0, method="ncl", sets="table3", **dyn),
            _row("Third", 0, method="bayesncl", sets="table3", **dyn)]
    md = render_table(_frame(rows), "table3", "md")
    for variant in ("First", "Second", "Third"):
        assert f"| {variant}" in md, md


def test_repeat_note_names_the_dataset_with_two_datasets():
    rows = []
    for d in ("cifar10", "cifar100"):
        rows += [_row("NCL", s, dataset=d, method="ncl", weights_sha=f"{d}{s}", sc=10.0 + s) for s in (0, 1)]
        # a second variant with the same weights as NCL repeats its result on each dataset
        rows += [_row("Copy", s, dataset=d, method="ncl", weights_sha=f"{d}{s}", sc=10.0 + s) for s in (0, 1)]
    md = render_table(_frame(rows), "table1", "md")
    assert "Copy on CIFAR-10 is identical to NCL" in md and "Copy on CIFAR-100 is identical to NCL" in md


def test_table2_block_title_lists_several_k_values():
    rows = [_row("NCL", 0, method="ncl", sets="table2", ret_K=32.0, ret_p10=50.0),
            _row("BayesNCL", 0, sets="table2", ret_K=64.0, ret_p10=55.0)]
    md = render_table(_frame(rows), "table2", "md")
    assert "(K = 32, 64)" in md, md


def test_protocol_note_lists_several_other_protocols():
    rows = [_row("A", 0, sets="table2", probe_top1=60.0, probe_protocol="paper"),
            _row("B", 0, sets="table2", probe_top1=61.0, probe_protocol="fast"),
            _row("C", 0, sets="table2", probe_top1=62.0, probe_protocol="custom")]
    md = render_table(_frame(rows), "table2", "md")
    assert "rows marked † use the fast protocol (linear classifier on cached features, no augmentation; " \
           "not the paper's), custom protocol." in md, md


def test_metrics_json_rounds_to_four_decimals(tmp_path):
    rows = [_row("NCL", s, method="ncl", sets="table1;table2", sc=10.123456 + s, probe_top1=70.0) for s in (0, 1)]
    out = summ.headline(_frame(rows))
    entry = out["cifar10"]["resnet18"]["NCL"]
    assert entry["sc"] == 10.6235 and json.dumps(entry["sc"]) == "10.6235"


def test_metrics_json_counts_the_seeds_a_metric_averages_when_some_left_it_undefined():
    """sc NaN in one of three seeds: its mean is the other two's and sc_seeds says 2; a metric every seed has
    gets no count."""
    rows = [_row("NCL", s, method="ncl", sets="table1;table2", sc=sc, probe_top1=70.0 + s)
            for s, sc in ((0, 10.0), (1, float("nan")), (2, 13.0))]
    entry = summ.headline(_frame(rows))["cifar10"]["resnet18"]["NCL"]
    assert (entry["seeds"], entry["sc"], entry["sc_seeds"], entry["probe_top1"]) == (3, 11.5, 2, 71.0)
    assert "probe_top1_seeds" not in entry and "bg_acc" not in entry  # no seed has a background accuracy


def test_metrics_json_keeps_the_tables_order_not_the_alphabets():
    """Datasets and variants in the order their runs come (the grid's), as the tables list them."""
    variants = (("SimCLR", "cl"), ("NCL", "ncl"), ("BayesNCL (STE)", "bayesncl"))
    rows = [_row(v, 0, dataset=d, method=m, sets="table1", sc=1.0)
            for d in ("synthetic", "cifar10") for v, m in variants]
    out = summ.headline(_frame(rows))
    assert list(out) == ["synthetic", "cifar10"]
    assert list(out["synthetic"]["resnet18"]) == list(out["cifar10"]["resnet18"]) == ["SimCLR", "NCL", "BayesNCL (STE)"]
