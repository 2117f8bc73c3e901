"""Figures 3, 4a, 4b, the open-gate curves and SC over training, checked on the drawn matplotlib objects: titles name the
dataset and the values held fixed, one legend per figure, bands only where there are seeds, NCL's
reference in Figure 4b, lambda on a log axis with 0 set apart, gate curves as the mean over seeds."""

import json
import re
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from matplotlib.collections import LineCollection, PolyCollection

from bayesncl.settings import registry
from bayesncl.report import drawing, figures, lines, names
from bayesncl.report import summary as summ
from helpers.report import figure_row, gate_curve

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def frame():
    rows = []
    for s in range(3):  # main comparison: 3 seeds, also the base point of every sweep
        rows.append(figure_row("NCL", "ncl", s, "table1;figure3;figure4a", "figure4a:proj_dim", sc=30.0 + s,
                               probe_top1=60.0 + s, ret_curve=json.dumps({"32": 40.0 + s, "64": 45.0}), ret_K=64))
        rows.append(figure_row("BayesNCL (STE)", "bayesncl", s, "table1;figure3;figure4a;figure4b",
                               "figure4a:proj_dim;figure4b:rho;figure4b:lambda", sc=36.0 + s, probe_top1=61.0,
                               ret_curve=json.dumps({"32": 42.0, "64": 47.0 + s}), ret_K=64,
                               gate_curve=gate_curve(0.5, s)))
    for D in (512, 1024):
        for v, m in (("NCL", "ncl"), ("BayesNCL (STE)", "bayesncl")):
            rows.append(figure_row(v, m, 0, "figure4a", "figure4a:proj_dim", D=D, sc=40.0, probe_top1=62.0))
    for rho in (0.5, 0.95):
        rows.append(figure_row("BayesNCL (STE)", "bayesncl", 0, "figure4b", "figure4b:rho", rho=rho, sc=30.0,
                               probe_top1=59.0))
    for lam in (0.0, 1e-5, 1e-3):
        rows.append(figure_row("BayesNCL (STE)", "bayesncl", 0, "figure4b", "figure4b:lambda", lam=lam, sc=33.0,
                               probe_top1=60.0, gate_curve=gate_curve(0.3 if lam == 0 else 0.9, 0)))
    rows.append(figure_row("Soft gate", "bayesncl", 0, "table4", gate_curve=gate_curve(0.7, 0)))
    return summ.prepare(pd.DataFrame(rows))


def _title(fig) -> str:
    return fig._suptitle.get_text()


def _bands(ax) -> list:
    return [c for c in ax.collections if isinstance(c, PolyCollection)]


def _bars(ax) -> list:
    return [c for c in ax.collections if isinstance(c, LineCollection)]


def _line(ax, prefix):
    (line,) = [ln for ln in ax.lines if ln.get_label().startswith(prefix)]
    return line


def test_every_figure_names_dataset_and_fixed_values_and_has_one_legend(frame):
    for make in (figures._figure3, figures._figure4a, figures._figure4b):
        fig = make(frame)
        title = " ".join(_title(fig).split())
        assert "CIFAR-100" in title and "D = 256" in title, (make.__name__, title)
        assert "ρ = 0.8" in title and "λ = 3e-5" in title, (make.__name__, title)
        assert len(fig.legends) == 1 and all(ax.get_legend() is None for ax in fig.axes), make.__name__
        # Legend entries are what is drawn, and each says how many seeds.
        labels = [t.get_text() for t in fig.legends[0].get_texts()]
        drawn = {ln.get_label() for ax in fig.axes for ln in ax.lines}
        assert set(labels) <= drawn, (labels, drawn)
        assert any(re.search(r"\(n=[0-9-]+ seeds?\)", lab) for lab in labels), labels


def test_figure4a_bands_only_where_there_are_seeds(frame):
    fig = figures._figure4a(frame)
    sc = fig.axes[0]
    line = _line(sc, "BayesNCL (STE)")
    assert list(line.get_xdata()) == [256, 512, 1024]
    assert line.get_ydata()[0] == pytest.approx(np.mean([36.0, 37.0, 38.0]))
    assert line.get_label() == "BayesNCL (STE) (n=1-3 seeds)"
    # D = 256 has 3 seeds between single-seed points: an error bar of the sample std there, no band.
    assert not _bands(sc)
    segs = [seg for c in _bars(sc) for seg in c.get_segments()]
    assert any(np.allclose(seg[:, 0], 256) and np.isclose(np.ptp(seg[:, 1]), 2 * np.std([36, 37, 38], ddof=1))
               for seg in segs)
    # Default D marked.
    assert any(ln.get_label() == "default D (Tables 1-2)" and ln.get_xdata()[0] == 256 for ln in sc.lines)

    one_seed = frame[frame["seed"] == 0]
    fig = figures._figure4a(one_seed)
    assert not _bands(fig.axes[0]) and not _bars(fig.axes[0])


def test_figure3_band_with_seeds_and_table2_k_marked(frame):
    fig = figures._figure3(frame)
    ax = fig.axes[0]
    ncl = _line(ax, "NCL")
    assert list(ncl.get_xdata()) == [32, 64] and ncl.get_ydata()[0] == pytest.approx(41.0)
    assert len(_bands(ax)) == 2  # NCL and BayesNCL, 3 seeds each
    assert any(ln.get_label() == "K of Table 2" and ln.get_xdata()[0] == 64 for ln in ax.lines)
    assert ax.get_xscale() == "log"


def test_figure4b_ncl_reference_log_lambda_and_default_point(frame):
    # NCL's untrained twin and a shorter run of the saturation set, at the same D: not the reference
    other = [figure_row("NCL", "ncl", s, sets, epochs=e, sc=5.0, probe_top1=5.0)
             for s, sets, e in ((0, "", 0.0), (1, "saturation", 4.0))]
    fig = figures._figure4b(summ.prepare(pd.concat([frame, pd.DataFrame(other)], ignore_index=True)))
    sc_rho, sc_lam, top_rho, top_lam = fig.axes[:4]
    ncl_sc = np.mean([30.0, 31.0, 32.0])
    for ax, want in ((sc_rho, ncl_sc), (sc_lam, ncl_sc), (top_lam, np.mean([60.0, 61.0, 62.0]))):
        ref = _line(ax, "NCL, same D")
        assert ref.get_linestyle() == "--" and ref.get_ydata()[0] == pytest.approx(want)
        assert "n=3 seeds" in ref.get_label()
    # lambda: log axis, 0 drawn left of the smallest positive value, ticks 0, 1e-5, 3e-5, 1e-3.
    assert sc_lam.get_xscale() == "log"
    labels = [t.get_text() for t in sc_lam.get_xticklabels()]
    assert labels == ["0", "1e-5", "3e-5", "1e-3"]
    ticks = list(sc_lam.get_xticks())
    assert 0 < ticks[0] < 1e-5 and ticks[1:] == pytest.approx([1e-5, 3e-5, 1e-3])
    zero_marker = [ln for ln in sc_lam.lines if len(ln.get_xdata()) == 1 and ln.get_xdata()[0] == ticks[0]
                   and ln.get_marker() == "o"]
    assert zero_marker and zero_marker[0].get_ydata()[0] == pytest.approx(33.0)
    assert _line(sc_lam, "BayesNCL").get_xdata()[0] == pytest.approx(1e-5)  # the line starts after the break
    # Default operating point marked in each sweep.
    assert _line(sc_rho, "default operating point").get_xdata()[0] == pytest.approx(0.8)
    assert _line(sc_lam, "default operating point").get_xdata()[0] == pytest.approx(3e-5)
    assert sc_rho.get_xscale() == "linear" and "λ = 3e-5" in sc_rho.get_title()


def test_gates_figure_mean_over_seeds_and_lambda_sweep(frame):
    fig = figures._gates(frame)
    variants, sweep = fig.axes
    ste = _line(variants, "BayesNCL (STE)")
    curves = np.array([json.loads(gate_curve(0.5, s)) for s in range(3)]) * 100
    assert list(ste.get_xdata()) == list(range(1, 7))
    assert np.allclose(ste.get_ydata(), curves.mean(0)) and "n=3 seeds" in ste.get_label()
    assert len(_bands(variants)) == 1  # only the seeded variant has a band
    assert "Soft gate (n=1 seed)" in [ln.get_label() for ln in variants.lines]
    assert "λ sweep" in sweep.get_title()
    assert {ln.get_label().split(" (")[0] for ln in sweep.lines} == {"λ = 0", "λ = 1e-5", "λ = 3e-5", "λ = 1e-3"}
    assert "ρ = 0.8" in _title(fig) and "λ = 3e-5" in _title(fig)


def test_render_writes_every_figure_even_without_runs(tmp_path, frame):
    paths = figures.render_figures(frame, tmp_path / "full", ("png",))
    assert sorted(p.name for p in paths) == sorted(f"{n}.png" for n in names.FIGURE_NAMES)
    empty = summ.prepare(pd.DataFrame([figure_row("A", "ncl", 0, "table1")]))
    assert len(figures.render_figures(empty, tmp_path / "empty", ("pdf",))) == len(names.FIGURE_NAMES)
    for p in (tmp_path / "empty").iterdir():
        assert b"CreationDate" not in p.read_bytes()


def test_fmt_is_short_and_exact():
    assert [drawing.fmt_value(v) for v in (3e-5, 1e-4, 0.0, 0.8, 256.0)] == ["3e-5", "1e-4", "0", "0.8", "256"]
    assert drawing.fmt_value(math.nan) == "?"


def test_figure4b_lambda_only_sweep_keeps_the_main_default_and_says_rho_is_not_swept():
    # The demo's shape: every sweep point appears once, so the default must come from the main runs.
    rows = [figure_row("BayesNCL (STE)", "bayesncl", s, "table1;figure4b", "lambda", sc=36.0, probe_top1=61.0)
            for s in range(3)]
    rows += [figure_row("NCL", "ncl", s, "table1", sc=30.0, probe_top1=60.0) for s in range(3)]
    rows += [figure_row("BayesNCL (STE)", "bayesncl", 0, "figure4b", "lambda", lam=lam, sc=33.0, probe_top1=60.0)
             for lam in (0.0, 1e-4)]
    fig = figures._figure4b(summ.prepare(pd.DataFrame(rows)))
    sc_rho, sc_lam = fig.axes[:2]
    assert not sc_rho.lines and "not swept" in sc_rho.texts[0].get_text()
    assert _line(sc_lam, "default operating point").get_xdata()[0] == pytest.approx(3e-5)
    assert "λ = 3e-5" in _title(fig)


def test_a_panel_without_runs_says_why_in_its_set_s_note(tmp_path, monkeypatch):
    """A grid that sweeps lambda, not rho: Figure 4b's rho panels say so and why (the grid file's
    sets.figure4b.note, read by the report from the grid files); the panels with runs carry no note. The demo
    sweeps both, so it has no note to show."""
    import bayesncl.report as report

    rows = [figure_row("BayesNCL (STE)", "bayesncl", s, "table1;figure4b", "lambda", sc=36.0, probe_top1=61.0)
            for s in range(3)]
    rows += [figure_row("BayesNCL (STE)", "bayesncl", 0, "figure4b", "lambda", lam=lam, sc=33.0, probe_top1=60.0)
             for lam in (0.0, 1e-4)]
    df = summ.prepare(pd.DataFrame(rows))
    assert report.set_notes([ROOT / "config" / "config.yaml"]) == {}
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump({"sets": {"figure4b": {"variants": ["A"], "note": "its runs would not fit"},
                                             "table1": {"variants": ["A"]}}}))
    notes = report.set_notes([grid])
    assert notes == {"figure4b": "its runs would not fit"} and report.set_notes(None) == {}
    fig = figures._figure4b(df, notes["figure4b"])
    sc_rho, sc_lam, top_rho, top_lam = fig.axes[:4]
    for ax in (sc_rho, top_rho):
        text = " ".join(ax.texts[0].get_text().split())
        assert text.startswith("ρ is not swept in this grid") and notes["figure4b"] in text
    assert sc_lam.lines and not sc_lam.texts and top_lam.lines and not top_lam.texts
    rho = [figure_row("BayesNCL (STE)", "bayesncl", 0, "figure4b", "rho", rho=r, sc=33.0) for r in (0.5, 0.8)]
    unmeasured = figures._figure4b(summ.prepare(pd.DataFrame(rho)), "why")  # swept, but no top-1 to draw
    assert [" ".join(t.get_text().split()) for t in unmeasured.axes[2].texts] == ["no runs why"]
    seen = {}
    blank = figures.new_figure(1, 1)
    monkeypatch.setattr(figures, "_figure4a", lambda df, note: seen.setdefault("figure4a", note) and blank)
    monkeypatch.setattr(figures, "_gates", lambda df: seen.setdefault("gates", "drawn") and blank)
    figures.render_figures(df, tmp_path, ("png",), notes={"figure4a": "why not", "gates": "never"})
    assert seen == {"figure4a": "why not", "gates": "drawn"}


@pytest.mark.parametrize("stem", ["figure3", "figure4a", "figure4b", "saturation"])
def test_every_figure_of_a_set_says_its_note_where_a_panel_has_no_runs(stem, tmp_path, monkeypatch):
    """Each figure drawn from a set shows the set's note in its empty panels; write_report hands the figures the
    notes of the grid files it was given."""
    import bayesncl.report as report

    empty = summ.prepare(pd.DataFrame([figure_row("A", "ncl", 0, "table1")]))
    maker = {"figure3": figures._figure3, "figure4a": figures._figure4a, "figure4b": figures._figure4b,
             "saturation": figures.saturation_figure}[stem]
    texts = [" ".join(t.get_text().split()) for ax in maker(empty, "the reason why").axes for t in ax.texts]
    assert texts and all(t.endswith("the reason why") for t in texts)
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump({"sets": {stem: {"variants": ["A"], "note": "the reason why"}}}))
    empty.to_csv(tmp_path / "runs.csv", index=False)
    seen = {}
    monkeypatch.setattr(report, "render_tables", lambda *a, **k: [])
    monkeypatch.setattr(report, "write_claims", lambda *a, **k: [])
    monkeypatch.setattr(figures, "render_figures", lambda df, out, formats, stamp, notes: seen.update(notes) or [])
    report.write_report(tmp_path / "runs.csv", tmp_path / "out", grid=[grid], echo=False)
    assert seen == {stem: "the reason why"}


def test_figure4b_draws_the_grids_sweep_points_only():
    # tiny.yaml's shape: the lambda sweep's values leave out the default 3e-5, so the main run is a point of
    # the rho sweep only and the lambda panel has no 3e-5 point.
    rows = [figure_row("BayesNCL (STE)", "bayesncl", 0, "table1;figure4b", "rho", sc=36.0, probe_top1=61.0),
            figure_row("NCL", "ncl", 0, "table1", sc=30.0, probe_top1=60.0),
            figure_row("BayesNCL (STE)", "bayesncl", 0, "figure4b", "rho", rho=0.5, sc=30.0, probe_top1=59.0)]
    rows += [figure_row("BayesNCL (STE)", "bayesncl", 0, "figure4b", "lambda", lam=lam, sc=33.0, probe_top1=60.0)
             for lam in (0.0, 1e-4, 3e-3)]
    fig = figures._figure4b(summ.prepare(pd.DataFrame(rows)))
    sc_rho, sc_lam = fig.axes[:2]
    assert list(_line(sc_rho, "BayesNCL").get_xdata()) == [0.5, 0.8]
    assert [t.get_text() for t in sc_lam.get_xticklabels()] == ["0", "1e-4", "3e-3"]
    assert list(_line(sc_lam, "BayesNCL").get_xdata()) == pytest.approx([1e-4, 3e-3])


def test_default_point_is_the_main_comparisons_even_when_sweep_runs_outnumber_it():
    rows = [figure_row("BayesNCL (STE)", "bayesncl", 0, "table1;table2", D=64)]
    rows += [figure_row("BayesNCL (STE)", "bayesncl", s, "figure4b", "lambda", lam=lam, D=64)
             for lam in (0.0, 1e-4) for s in range(2)]
    rows += [figure_row("BayesNCL (STE)", "bayesncl", s, "figure4a", "proj_dim", D=128) for s in range(3)]
    point = lines.default_point(summ.prepare(pd.DataFrame(rows)), "cifar100")
    assert point == {"proj_dim": 64, "rho": 0.8, "lambda": 3e-5}
    # Without main runs: the value most runs use (ties: the smaller).
    point = lines.default_point(summ.prepare(pd.DataFrame(rows[1:5])), "cifar100")
    assert point == {"proj_dim": 64, "rho": 0.8, "lambda": 0.0}


def _sc_rows(ncl, bayes, epochs=(10, 20, 30), last=36, dataset="synthetic"):
    """table3 rows: per seed, SC at the recorded epochs, and the final SC at epoch ``last``."""
    rows = []
    for variant, method, per_seed in (("NCL", "ncl", ncl), ("BayesNCL (STE)", "bayesncl", bayes)):
        for s, (curve, final) in enumerate(per_seed):
            rows.append(figure_row(variant, method, s, "table1;table3", dataset=dataset, D=64, sc=final,
                             dyn_epochs=json.dumps(list(epochs)), dyn_sc=json.dumps(curve),
                             loss_curve=json.dumps([5.0] * last)))
    return summ.prepare(pd.DataFrame(rows))


def test_sc_training_draws_crossing_curves_with_seed_bands_and_the_paired_interval():
    from scipy import stats

    # NCL keeps improving, BayesNCL starts higher and stays flat: the curves cross between epochs 10 and 20.
    ncl = [([10.0 + s, 20.0 + 2 * s, 30.0 + s], 33.0 + s) for s in range(3)]
    bayes = [([20.0 + 2 * s, 21.0, 22.0 - s], 23.0 + 0.5 * s) for s in range(3)]
    fig = figures._sc_training(_sc_rows(ncl, bayes))
    ax, dax = fig.axes
    n_line, b_line = _line(ax, "NCL"), _line(ax, "BayesNCL (STE)")
    assert list(n_line.get_xdata()) == [10, 20, 30, 36]  # the final SC closes the curve at the last epoch
    want_n = np.array([[*c, f] for c, f in ncl]).mean(0)
    want_b = np.array([[*c, f] for c, f in bayes]).mean(0)
    assert np.allclose(n_line.get_ydata(), want_n) and np.allclose(b_line.get_ydata(), want_b)
    diff = b_line.get_ydata() - n_line.get_ydata()
    assert diff[0] > 0 and diff[-1] < 0  # drawn as crossing
    assert "n=3 seeds" in n_line.get_label() and len(_bands(ax)) == 2
    assert len([ln for ln in ax.lines if ln.get_label() == "_seed"]) == 6  # every seed, faintly

    d_line = _line(dax, "BayesNCL (STE) − NCL")
    paired = np.array([[*b[0], b[1]] for b in bayes]) - np.array([[*n[0], n[1]] for n in ncl])
    assert list(d_line.get_xdata()) == [10, 20, 30, 36] and np.allclose(d_line.get_ydata(), paired.mean(0))
    assert "n=3 paired seeds" in d_line.get_label()
    (band,) = _bands(dax)
    verts = band.get_paths()[0].vertices
    for i, e in enumerate((10, 20, 30, 36)):
        lo, hi = stats.ttest_1samp(paired[:, i], 0.0).confidence_interval(0.95)
        ys = verts[np.isclose(verts[:, 0], e), 1]
        assert ys.min() == pytest.approx(lo) and ys.max() == pytest.approx(hi)
    assert _line(dax, "no difference").get_ydata()[0] == 0.0
    assert "Synthetic" in _title(fig) or "synthetic" in _title(fig).lower()


def test_sc_training_pairs_only_shared_seeds_and_says_when_there_are_no_records():
    ncl = [([10.0, 20.0, 30.0], 31.0)] * 2
    bayes = [([15.0, 25.0, 35.0], 36.0)] * 3  # seed 2 has no NCL partner
    fig = figures._sc_training(_sc_rows(ncl, bayes))
    d_line = _line(fig.axes[1], "BayesNCL (STE) − NCL")
    assert np.allclose(d_line.get_ydata(), 5.0) and "n=2 paired seeds" in d_line.get_label()
    # Runs without SC records (older dynamics files): an empty panel that says why, not a broken figure.
    rows = _sc_rows(ncl, bayes)
    rows["dyn_sc"] = ""
    fig = figures._sc_training(rows)
    assert not [ln for ln in fig.axes[0].lines] and "no run recorded SC" in fig.axes[0].texts[0].get_text()


def _saturation_frame(sc_at_64: float):
    """NCL and BayesNCL at budgets 0 (random init, no loss), 16, 64 and 128 epochs, 2 seeds."""
    rows = []
    for e, loss, sc, top1 in ((0, None, 15.0, 35.0), (16, 5.2, 15.5, 38.0), (64, 4.51, sc_at_64, 90.0),
                              (128, 4.50, 60.0, 90.5)):
        for s in range(2):
            # BayesNCL far off at 64 epochs: the criterion reads NCL alone
            for v, m, shift in (("NCL", "ncl", 0.0), ("BayesNCL (STE)", "bayesncl", -10.0 if e == 64 else 3.0)):
                rows.append(figure_row(v, m, s, "saturation", "epochs", dataset="synthetic", epochs=e,
                                 infonce_final=math.nan if loss is None else loss + 0.01 * s, sc=sc + shift + s,
                                 probe_top1=top1 + s, infonce_chance=math.log(255)))
    return summ.prepare(pd.DataFrame(rows))


def test_saturation_draws_each_measure_against_the_budget_with_the_criterion_in_the_title():
    fig = figures.saturation_figure(_saturation_frame(sc_at_64=59.5))
    axes = fig.axes[:3]
    assert [a.get_title() for a in axes] == ["Synthetic: final InfoNCE (training loss)", "Synthetic: SC (%)",
                                              "Synthetic: linear probe top-1 (%)"]
    sc_lines = {ln.get_label(): ln for ln in axes[1].lines}
    ncl = next(ln for lab, ln in sc_lines.items() if lab.startswith("NCL"))
    assert list(ncl.get_xdata()) == [0, 16, 64, 128] and list(ncl.get_ydata()) == [15.5, 16.0, 60.0, 60.5]
    loss = next(ln for ln in axes[0].lines if ln.get_label().startswith("NCL"))
    assert list(loss.get_xdata()) == [16, 64, 128]  # random init has no training loss
    assert "Synthetic: NCL saturates at 64 epochs (the smallest budget from which NCL's means" in _title(fig)
    late = figures.saturation_figure(_saturation_frame(sc_at_64=55.0))  # 64 covered 89% of SC's way to 128
    assert "Synthetic: NCL has not saturated below 128 epochs" in _title(late)
    assert [t.get_text() for t in axes[1].get_xticklabels()] == ["0", "16", "64", "128"]
    assert axes[1].get_xscale() == "symlog"  # budgets that double: a log axis that keeps 0
    rows = _saturation_frame(59.5)
    no_init = figures.saturation_figure(rows[rows["epochs"] > 0])  # the start of the way is not known
    assert "Synthetic: needs NCL's random-init network (0 epochs) as the start" in _title(no_init)
    no_chance = figures.saturation_figure(rows.assign(infonce_chance=math.nan))  # an older runs.csv
    assert "Synthetic: needs InfoNCE's chance level" in _title(no_chance)
    empty = figures.saturation_figure(_saturation_frame(59.5).iloc[:0])
    assert "no runs in set saturation" in [t.get_text() for t in empty.axes[0].texts]


def test_saturation_title_and_budget_labels_fit_with_many_budgets():
    """Budgets 0-2048 (the long study's): every title line inside the figure, no two x labels overlapping."""
    rows = []
    for e in (0, 16, 32, 64, 128, 256, 512, 1024, 2048):
        for s in range(2):
            rows.append(figure_row("NCL", "ncl", s, "saturation", "epochs", dataset="synthetic", epochs=e,
                             infonce_final=math.nan if e == 0 else 5.0 - e / 1000, sc=15 + e / 30 + s,
                             probe_top1=35 + e / 40))
    from matplotlib import rc_context

    from bayesncl.report.drawing import RC

    with rc_context(RC):  # as render_figures and demo_runs.py draw it
        fig = figures.saturation_figure(summ.prepare(pd.DataFrame(rows)))
        fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    box = fig._suptitle.get_window_extent(renderer)
    assert box.x0 >= 0 and box.x1 <= fig.bbox.width
    for ax in fig.axes[:3]:
        labels = [t.get_window_extent(renderer) for t in ax.get_xticklabels() if t.get_text()]
        assert len(labels) == 9
        assert all(a.x1 <= b.x0 or a.y1 <= b.y0 or b.y1 <= a.y0 for a, b in zip(labels, labels[1:]))


def test_figure4b_draws_a_swept_plugin_setting_as_rho_and_lambda_are_drawn():
    """A plugin setting swept in Figure 4b's set gets its own column of panels, SC and top-1 against its runs.csv
    column, seeds as bands, the default point marked; two variants that differ in another of its settings are two
    lines; the paper's rho and lambda panels stay."""
    from helpers.grids import WEIGHT, plugin_method

    def lp(s, w, sets="figure4b", sweep="l1_weight", power=1, variant="L1"):
        return figure_row(variant, "l1m", s, sets, sweep, l1_weight=w, l1_power=power,
                          sc=30.0 + 10 * w - 20 * w * w + s, probe_top1=60.0 + w)
    settings = {"l1_weight": WEIGHT["l1_weight"], "l1_power": registry.setting(1, "the norm's power", ge=1)}
    with plugin_method(settings=settings):
        rows = [lp(s, 0.1, "table1;figure4b") for s in range(2)]
        rows += [lp(s, w) for w in (0.0, 0.5) for s in range(2)]
        rows += [lp(0, w, power=2, variant="L1 (p=2)") for w in (0.0, 0.5)]
        rows += [figure_row("NCL", "ncl", s, "table1", sc=31.0, probe_top1=60.0) for s in range(2)]
        df = summ.prepare(pd.DataFrame(rows).astype({"l1_weight": str}))  # as read back from runs.csv
        fig = figures._figure4b(df)
    sc_w, top1_w = fig.axes[2], fig.axes[5]
    assert len(fig.axes) == 6 and "l1_weight" in _title(fig) and sc_w.get_title() == "CIFAR-100: SC vs l1_weight"
    assert fig.get_figwidth() == pytest.approx(3 * 3.4)  # a column's width each, as the paper's two
    assert _title(fig).startswith("Figure 4b: sensitivity to ρ and λ (BayesNCL) and to l1_weight (test split")
    assert "l1_weight = 0.1, D = 256" in _title(fig)  # its default point: the main comparison's value
    assert list(_line(sc_w, "L1 (n=").get_xdata()) == [0.0, 0.1, 0.5]
    assert list(_line(sc_w, "L1 (n=").get_ydata()) == pytest.approx([30.5, 31.3, 30.5])
    assert list(_line(sc_w, "L1 (p=2)").get_xdata()) == [0.0, 0.5]
    assert list(_line(top1_w, "L1 (n=").get_ydata()) == pytest.approx([60.0, 60.1, 60.5])
    assert _bands(sc_w) and sc_w.get_xlabel() == "l1_weight"
    default = [ln for ln in sc_w.lines if ln.get_label() == "default operating point"]
    assert len(default) == 1 and list(default[0].get_xdata()) == [0.1, 0.1]
    assert fig.axes[0].texts[0].get_text().startswith("ρ is not swept")
    # drawn alike where the report runs without the plugin (its column is then text, as read from runs.csv)
    alone = summ.prepare(pd.DataFrame([r for r in rows if r["variant"] != "L1 (p=2)"]).astype({"l1_weight": str}))
    assert not pd.api.types.is_numeric_dtype(alone["l1_weight"])
    panel = figures._figure4b(alone).axes[2]
    assert list(_line(panel, "L1 (n=").get_xdata()) == [0.0, 0.1, 0.5]


def test_figure4b_leaves_out_a_sweep_runs_csv_has_no_column_for():
    """A swept key with no runs.csv column (train.lr: its runs' `sweep` says "lr") has nothing to draw against."""
    rows = [figure_row("BayesNCL (STE)", "bayesncl", 0, "figure4b", "lambda;lr", lam=lam, sc=33.0, probe_top1=60.0)
            for lam in (0.0, 1e-4)]
    fig = figures._figure4b(summ.prepare(pd.DataFrame(rows)))
    assert len(fig.axes) == 4 and "lr" not in _title(fig)


def test_figure4b_leaves_out_a_setting_another_set_sweeps_through_the_shared_default():
    """The demo's default run is a point of Figure 4a's D sweep too (its `sweep` says
    "figure4a:proj_dim;figure4b:lambda"): Figure 4b does not sweep D, and gets no panels of it."""
    rows = [figure_row("BayesNCL (STE)", "bayesncl", s, "table1;figure4a;figure4b", "figure4a:proj_dim;figure4b:lambda",
                       sc=36.0, probe_top1=61.0) for s in range(3)]
    rows += [figure_row("BayesNCL (STE)", "bayesncl", 0, "figure4b", "figure4b:lambda", lam=lam, sc=33.0,
                        probe_top1=60.0) for lam in (0.0, 1e-4)]
    fig = figures._figure4b(summ.prepare(pd.DataFrame(rows)))
    assert len(fig.axes) == 4 and "proj_dim" not in _title(fig)


def test_a_sweep_is_read_from_the_column_its_setting_has():
    from helpers.grids import plugin_method

    sweeps = pd.DataFrame({"sweep": ["", "figure4b:rho;figure4b:lambda", "figure4a:proj_dim;figure4b:rho"]})
    assert summ.swept(sweeps, "figure4b") == ["lambda", "rho"] and summ.swept(sweeps, "figure4a") == ["proj_dim"]
    older = pd.DataFrame({"sweep": ["rho;lambda"]})  # a runs.csv from before the sweep was recorded set by set
    assert summ.swept(older, "figure4b") == summ.swept(older, "table1") == ["lambda", "rho"]
    with plugin_method(settings={"alive": registry.setting(0.5, "named as a metric's column", ge=0)}):
        assert [summ.sweep_column(p) for p in ("rho", "proj_dim", "alive", "l1_weight")] == [
            "rho", "proj_dim", "method.alive", "l1_weight"]
