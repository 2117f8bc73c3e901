"""Figures 3, 4a, 4b, the open-gate curves and SC over training (PDF + PNG) from the runs summary.

- figure3: retrieval P@10 against the number of kept dimensions K (``ret_curve``), one line per
  variant, one panel per dataset (set ``figure3``); ``cl`` rows are skipped (no retrieval for SimCLR).
  The K of Table 2 is marked.
- figure4a: latent width D (``proj_dim``) against SC and linear-probe top-1 (set ``figure4a``), one row
  of panels per dataset; the default D (the main comparison's, Tables 1-2) is marked.
- figure4b: sensitivity of SC and top-1 to rho and to lambda (set ``figure4b``; a run is a point of a
  sweep when its ``sweep`` column names it for this set, as the grid says: ``summary.sweep_rows``). lambda is on a
  log axis with lambda = 0 drawn apart at the left, behind an axis break; the default operating point
  is marked, and NCL's value at the same dataset, backbone and D is a dashed reference line. Any other setting the
  set sweeps (a plugin's declared one, a package key with a runs.csv column) gets a column of panels of its own,
  drawn alike against its runs.csv column (``summary.sweep_column``).
- gates: open-gate fraction per training epoch (``gate_curve``) of the BayesNCL runs at the default
  operating point, one line per variant, and of the lambda sweep when there is one: do the gates leave
  their initial state?
- sc_training: SC of the evaluation feature over pretraining (``dyn_sc`` at the recorded epochs
  ``dyn_epochs``, then the final ``sc`` if the last epoch was not recorded) of the runs that record
  dynamics (set ``table3``: NCL and BayesNCL), one panel per dataset with each seed drawn faintly; beside
  it, BayesNCL - NCL paired by seed with its 95% t-interval: does claim 1a depend on when training stops?
- saturation: final InfoNCE, SC and top-1 of complete runs against their training budget (``epochs``, set
  ``saturation``: each budget its own warm-up and cosine; 0 epochs is the random-init network), one line
  per variant; the title gives the criterion's verdict on NCL alone (``bayesncl.measures.learning.saturated_budget``):
  the budget where NCL stops improving, or that none up to the largest does.

Every figure names its dataset and the values held fixed in its title and has one legend. Lines are
means over seeds; a band (mean +- sample std) is drawn only where a point has at least two seeds, and each
legend entry says n, the number of seeds. Lines are keyed by everything except the swept parameter and the
seed, so variant names that encode the swept value do not split a line. Uses matplotlib's Agg canvas
directly (no pyplot, no global backend switch); PDFs carry no creation date, so the same data gives the
same bytes.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib import rc_context
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from ..grid.expand import SETS
from ..settings.registry import method_traits
from .drawing import (BAND_ALPHA, RC, arch_text, dataset_name, draw, fmt_value, legend, line_colors, new_figure,
                      no_runs, save_figure, suptitle)
from .lines import (default_point, gate_points, group_key, line_points, mode, paired, parse_json, row_mask,
                    rows_in_set, saturation_verdict, sc_curve, seed_stats, seeds_text, split_lines)
from .names import ARCH_NAMES, FIGURE_NAMES
from .summary import prepare, sweep_column, sweep_rows, swept

__all__ = ["render_figures", "saturation_figure"]



# --------------------------------------------------------------------------- figure 3
def _figure3(df: pd.DataFrame, note: str = "") -> Figure:
    rows = rows_in_set(df, "figure3")
    rows = rows[row_mask(rows, [method_traits(m).nonnegative for m in rows["method"]])]  # retrieval: z+ methods
    datasets = list(dict.fromkeys(rows["dataset"])) or [""]
    fig = new_figure(max(5.0, 3.4 * len(datasets)), 3.4)
    axes = fig.subplots(1, len(datasets), squeeze=False)[0]
    groups = list(dict.fromkeys(zip(rows["arch"], rows["variant"])))
    multi_arch = len({a for a, _ in groups}) > 1
    colors = line_colors([v for _, v in groups])
    fixed = []
    for ax, ds in zip(axes, datasets):
        part = rows[rows["dataset"] == ds]
        ax.set_title(dataset_name(ds))
        ax.set_xlabel("K, dimensions kept (log scale)")
        ax.set_ylabel("retrieval P@10 (%)")
        all_ks: set[int] = set()
        for arch, variant in dict.fromkeys(zip(part["arch"], part["variant"])):
            sub = part[(part["arch"] == arch) & (part["variant"] == variant)]
            per_k: dict[int, list[float]] = {}
            for text in sub["ret_curve"]:
                curve = parse_json(text)
                for k, v in (curve.items() if isinstance(curve, dict) else ()):
                    per_k.setdefault(int(float(k)), []).append(math.nan if v is None else float(v))
            pts = [(k, *seed_stats(per_k[k])) for k in sorted(per_k)]
            pts = [p for p in pts if math.isfinite(p[1])]
            if not pts:
                continue
            label = variant + (f", {ARCH_NAMES.get(arch, arch)}" if multi_arch else "")
            draw(ax, pts, colors[variant], label)
            all_ks.update(p[0] for p in pts)
        table_k = mode(part["ret_K"])
        if math.isfinite(table_k):
            ax.axvline(table_k, color="0.55", linestyle=":", linewidth=1, zorder=0, label="K of Table 2")
        if all_ks:
            ax.set_xscale("log", base=2)
            ax.set_xticks(sorted(all_ks), [str(k) for k in sorted(all_ks)])
            ax.minorticks_off()
        else:
            no_runs(ax, note=note)
        if len(part):
            d = default_point(df, ds)
            fixed.append(f"{dataset_name(ds)}: D = {fmt_value(d['proj_dim'])}, BayesNCL at ρ = {fmt_value(d['rho'])}, "
                         f"λ = {fmt_value(d['lambda'])}")
    arch = arch_text(rows)
    suptitle(fig, "Figure 3: retrieval with the top-K dimensions (test split" + (f", {arch}" if arch else "")
              + ")", fixed)
    legend(fig, axes)
    return fig


# --------------------------------------------------------------------------- figure 4a
# The y axes of the sweep figures (4a, 4b): (runs.csv column, label).
SWEEP_AXES = (("sc", "SC (%)"), ("probe_top1", "linear probe top-1 (%)"))


def _figure4a(df: pd.DataFrame, note: str = "") -> Figure:
    rows = rows_in_set(df, "figure4a")
    datasets = list(dict.fromkeys(rows["dataset"])) or [""]
    fig = new_figure(6.6, 0.6 + 2.6 * len(datasets))
    axes = fig.subplots(len(datasets), 2, squeeze=False)
    all_lines = {ds: split_lines(rows[rows["dataset"] == ds], "proj_dim") for ds in datasets}
    colors = line_colors([lab for ls in all_lines.values() for lab, _ in ls])
    fixed = []
    for r, ds in enumerate(datasets):
        part = rows[rows["dataset"] == ds]
        widths = sorted({int(v) for v in part["proj_dim"] if math.isfinite(v)})
        d = default_point(df, ds) if len(part) else {}
        for ax, (y, ylabel) in zip(axes[r], SWEEP_AXES):
            ax.set_title(f"{dataset_name(ds)}: {ylabel.split(' (')[0]}")
            ax.set_xlabel("latent width D (log scale)")
            ax.set_ylabel(ylabel)
            for label, lp in all_lines[ds]:
                pts = line_points(lp, "proj_dim", y)
                if pts:
                    draw(ax, pts, colors[label], label)
            if widths:
                ax.set_xscale("log", base=2)
                ax.set_xticks(widths, [str(w) for w in widths])
                ax.minorticks_off()
            if not ax.lines:
                no_runs(ax, note=note)
            elif math.isfinite(d.get("proj_dim", math.nan)):
                ax.axvline(d["proj_dim"], color="0.55", linestyle=":", linewidth=1, zorder=0,
                           label="default D (Tables 1-2)")
        if d:
            bayes = part[row_mask(part, [method_traits(m).gated for m in part["method"]])]
            held = f"{dataset_name(ds)}: default D = {fmt_value(d['proj_dim'])}"
            if len(bayes):
                held += f", BayesNCL at ρ = {fmt_value(mode(bayes['rho']))}, λ = {fmt_value(mode(bayes['lambda']))}"
            fixed.append(held)
    arch = arch_text(rows)
    suptitle(fig, "Figure 4a: latent width D (test split" + (f", {arch}" if arch else "") + ")", fixed)
    legend(fig, axes)
    return fig


# --------------------------------------------------------------------------- figure 4b
def _lambda_axis(ax, xs: list[float]):
    """Log x axis for lambda; lambda = 0 (not on a log axis) is drawn apart at the left, behind a break.
    Returns the map from lambda to the plotted x."""
    pos = sorted(v for v in xs if v > 0)
    if not pos:
        return lambda v: v
    lo, hi = pos[0], pos[-1]
    zero_at = lo / 10 ** max(0.7, 0.3 * math.log10(hi / lo))  # a gap of at least most of a decade
    ax.set_xscale("log")
    ticks = ([zero_at] if 0 in xs else []) + pos
    ax.set_xticks(ticks, ["0" if t == zero_at else fmt_value(t) for t in ticks], rotation=30)
    ax.minorticks_off()
    if 0 in xs:
        brk = math.sqrt(zero_at * lo)
        ax.plot([brk / 1.12, brk * 1.12], [0, 0], transform=ax.get_xaxis_transform(), linestyle="none",
                marker=[(-1, -2), (1, 2)], markersize=8, markeredgewidth=1, color="k", clip_on=False)
    return lambda v: zero_at if v == 0 else v


def _draw_lambda(ax, pts, color, label, xmap) -> None:
    """The positive lambdas as a line; lambda = 0 as its own marker, joined by a dotted segment."""
    zero = [p for p in pts if p[0] == 0]
    pos = [p for p in pts if p[0] > 0]
    if pos:
        draw(ax, pos, color, label, xmap)
    if zero:
        z = zero[0]
        ax.errorbar([xmap(0)], [z[1]], yerr=[z[2]] if z[3] > 1 else None, color=color, marker="o",
                    capsize=2, label=None if pos else f"{label} ({seeds_text([z[3]])})")
        if pos:
            ax.plot([xmap(0), xmap(pos[0][0])], [z[1], pos[0][1]], color=color, linestyle=":", linewidth=1)


def _ncl_reference(df: pd.DataFrame, rows: pd.DataFrame) -> pd.DataFrame:
    """NCL runs on the same dataset, backbone, D and training budget as the sweep's rows (any set; not an untrained
    twin nor a shorter run of the saturation set)."""
    at = ("dataset", "arch", "proj_dim", "epochs")
    keys = {tuple(group_key(r[k]) for k in at) for r in rows.to_dict("records")}
    return df[row_mask(df, [method_traits(r["method"]).reference and tuple(group_key(r[k]) for k in at) in keys
                            for r in df.to_dict("records")])]


# How Figure 4b names the paper's swept settings: (symbol, x label); another swept setting is named by its key.
SWEEP_NAMES = {"rho": ("ρ", "ρ, prior keep rate"), "lambda": ("λ", "λ, KL weight (log scale)")}


def _figure4b(df: pd.DataFrame, note: str = "") -> Figure:
    """One column of panels per swept setting: the paper's rho and lambda, then any other setting the set's runs
    sweep (a plugin's declared setting, a package key), each drawn alike against its runs.csv column."""
    rows = rows_in_set(df, "figure4b")
    params = ["rho", "lambda", *(p for p in swept(rows, "figure4b")
                                 if p not in SWEEP_NAMES and sweep_column(p) in rows)]
    columns = {p: sweep_column(p) for p in params}
    df = df.assign(**{columns[p]: pd.to_numeric(df[columns[p]], errors="coerce") for p in params[2:]})
    rows = rows_in_set(df, "figure4b")
    datasets = list(dict.fromkeys(rows["dataset"])) or [""]
    fig = new_figure(3.4 * len(params), 0.9 + 4.6 * len(datasets))
    axes = fig.subplots(2 * len(datasets), len(params), squeeze=False)
    fixed = []
    label_colors = line_colors([lab for ds in datasets for p in params
                                for lab, _ in split_lines(sweep_rows(rows[rows["dataset"] == ds], p, "figure4b"),
                                                          columns[p])])
    others = tuple(columns[p] for p in params[2:])
    for b, ds in enumerate(datasets):
        part = rows[rows["dataset"] == ds]
        sweeps = {p: sweep_rows(part, p, "figure4b") for p in params}
        base = default_point(df, ds, others) if len(part) else dict.fromkeys(["rho", "lambda", *others], math.nan)
        ncl = _ncl_reference(df, part)
        for r, (y, ylabel) in enumerate(SWEEP_AXES):
            for c, param in enumerate(params):
                ax = axes[2 * b + r][c]
                col = columns[param]
                sym, xlabel = SWEEP_NAMES.get(param, (param, param))
                held = {"rho": "λ", "lambda": "ρ"}.get(param)
                ax.set_title(f"{dataset_name(ds)}: {ylabel.split(' (')[0]} vs {sym}" + (
                    f" ({held} = {fmt_value(base['lambda' if param == 'rho' else 'rho'])})" if held else ""))
                ax.set_xlabel(xlabel)
                ax.set_ylabel(ylabel)
                xs = sorted({v for v in pd.to_numeric(sweeps[param][col], errors="coerce") if math.isfinite(v)})
                if len(xs) < 2:  # one point is no sweep: say so rather than draw it
                    no_runs(ax, f"{sym} is not swept in this grid", note)
                    ax.set_xticks([])
                    ax.set_yticks([])
                    continue
                xmap = _lambda_axis(ax, xs) if param == "lambda" else (lambda v: v)
                for label, lp in split_lines(sweeps[param], col):
                    pts = line_points(lp, col, y)
                    if not pts:
                        continue
                    if param == "lambda":
                        _draw_lambda(ax, pts, label_colors[label], label, xmap)
                    else:
                        draw(ax, pts, label_colors[label], label)
                if not ax.lines:
                    no_runs(ax, note=note)
                    continue
                if math.isfinite(base[col]):
                    ax.axvline(xmap(base[col]), color="0.55", linestyle=":", linewidth=1, zorder=0,
                               label="default operating point")
                m, s, n = seed_stats(ncl[y]) if len(ncl) else (math.nan, math.nan, 0)
                if math.isfinite(m):
                    ax.axhline(m, color="0.2", linestyle="--", linewidth=1,
                               label=f"NCL, same D ({seeds_text([n])})")
        if len(part):
            fixed.append(f"{dataset_name(ds)}: default ρ = {fmt_value(base['rho'])}, λ = {fmt_value(base['lambda'])}, "
                         + "".join(f"{p} = {fmt_value(base[columns[p]])}, " for p in params[2:])
                         + f"D = {fmt_value(mode(part['proj_dim']))}")
    arch = arch_text(rows)
    what = "the prior keep rate ρ and the KL weight λ (BayesNCL" if len(params) == 2 else \
        f"ρ and λ (BayesNCL) and to {', '.join(params[2:])} ("
    suptitle(fig, f"Figure 4b: sensitivity to {what}{', ' if len(params) == 2 else ''}test split"
              + (f", {arch}" if arch else "") + ")", fixed)
    legend(fig, axes)
    return fig


# --------------------------------------------------------------------------- open gates


def _gates(df: pd.DataFrame) -> Figure:
    col = df["gate_curve"] if "gate_curve" in df else pd.Series([""] * len(df), index=df.index)
    rows = df[row_mask(df, [method_traits(m).gated and bool(t) for m, t in zip(df["method"], col)])]
    datasets = list(dict.fromkeys(rows["dataset"])) or [""]
    panels = []  # (dataset, title, [(label, rows)])
    fixed = []
    for ds in datasets:
        part = rows[rows["dataset"] == ds]
        if not len(part):
            panels.append((ds, f"{dataset_name(ds)}: BayesNCL variants", []))
            continue
        d = default_point(df, ds)
        at = part[(part["rho"] == d["rho"]) & (part["lambda"] == d["lambda"]) & (part["proj_dim"] == d["proj_dim"])]
        variants: dict[tuple, list[int]] = {}
        for i, rec in zip(at.index, at.to_dict("records")):
            variants.setdefault((rec["arch"], rec["variant"]), []).append(i)
        multi_arch = len({a for a, _ in variants}) > 1
        lines = [(v + (f", {ARCH_NAMES.get(a, a)}" if multi_arch else ""), at.loc[idx])
                 for (a, v), idx in variants.items()]
        panels.append((ds, f"{dataset_name(ds)}: BayesNCL variants", lines))
        fixed.append(f"{dataset_name(ds)}: ρ = {fmt_value(d['rho'])}, λ = {fmt_value(d['lambda'])}, D = {fmt_value(d['proj_dim'])}")
        lam = sweep_rows(rows_in_set(part, "figure4b"), "lambda", "figure4b")
        lam_values = sorted({v for v in lam["lambda"] if math.isfinite(v)})
        if len(lam_values) > 1:
            panels.append((ds, f"{dataset_name(ds)}: λ sweep ({lam['variant'].iloc[0]}, ρ = {fmt_value(mode(lam['rho']))})",
                           [(f"λ = {fmt_value(v)}", lam[lam["lambda"] == v]) for v in lam_values]))
    fig = new_figure(max(3.6 * len(panels), 5.0), 4.8)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (ds, title, lines) in zip(axes, panels):
        ax.set_title(title)
        ax.set_xlabel("pretraining epoch")
        ax.set_ylabel("open gates (% of all gates, training batches)")
        is_sweep = title.split(": ", 1)[-1].startswith("λ")
        if is_sweep:
            from matplotlib import colormaps
            cmap = colormaps["viridis"]
            colors = {lab: cmap(i / max(len(lines) - 1, 1) * 0.85) for i, (lab, _) in enumerate(lines)}
        else:
            colors = line_colors([lab for lab, _ in lines])
        for label, part in lines:
            pts = gate_points(part)
            if pts:
                draw(ax, pts, colors[label], label, marker="." if len(pts) > 15 else "o")
        ax.set_ylim(-2, 102)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if ax.lines:
            # per panel (the sweep panel's entries differ), below the axes so no curve is hidden
            ax.legend(frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncols=1)
        else:
            no_runs(ax, "no BayesNCL run with a gate curve")
    suptitle(fig, "Open gates during pretraining (hard gate m = 1[α > 0.5]): do the gates leave their "
              "initial state?", fixed)
    return fig


# --------------------------------------------------------------------------- SC over training


def _sc_training(df: pd.DataFrame) -> Figure:
    rows = rows_in_set(df, "table3")
    rows = rows[row_mask(rows, [bool(t) for t in rows["dyn_sc"]])]
    datasets = list(dict.fromkeys(rows["dataset"])) or [""]
    fig = new_figure(7.0, 0.9 + 2.9 * len(datasets))
    axes = fig.subplots(len(datasets), 2, squeeze=False)
    colors = line_colors(dict.fromkeys(rows["variant"]))
    fixed = []
    for r, ds in enumerate(datasets):
        ax, dax = axes[r]
        part = rows[rows["dataset"] == ds]
        ax.set_title(f"{dataset_name(ds)}: SC over pretraining")
        dax.set_title(f"{dataset_name(ds)}: BayesNCL − NCL, paired by seed")
        for a in (ax, dax):
            a.set_xlabel("pretraining epoch")
            a.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel("SC (%), evaluation feature")
        dax.set_ylabel("SC difference (points)")
        curves: dict[tuple, dict[int, dict[int, float]]] = {}  # (arch, variant, method) -> seed -> {epoch: SC}
        for rec in part.to_dict("records"):
            c = sc_curve(rec)
            if c:
                curves.setdefault((rec["arch"], rec["variant"], rec["method"]), {})[int(rec["seed"])] = c
        multi_arch = len({k[0] for k in curves}) > 1
        for (arch, variant, _), seeds in curves.items():
            label = variant + (f", {ARCH_NAMES.get(arch, arch)}" if multi_arch else "")
            for c in seeds.values():  # each seed, faint: a crossing on some seeds only stays visible
                ax.plot(sorted(c), [c[e] for e in sorted(c)], color=colors[variant], alpha=0.35, linewidth=0.7,
                        label="_seed")
            per_epoch: dict[int, list[float]] = {}
            for c in seeds.values():
                for e, v in c.items():
                    per_epoch.setdefault(e, []).append(v)
            pts = [(e, *seed_stats(per_epoch[e])) for e in sorted(per_epoch)]
            draw(ax, [p for p in pts if math.isfinite(p[1])], colors[variant], label,
                  marker="." if len(pts) > 15 else "o")
        for (arch, variant, method), seeds in curves.items():
            ref = [v for (a, _, m), v in curves.items() if a == arch and method_traits(m).reference]
            if not method_traits(method).gated or not ref:
                continue
            pts = paired(seeds, ref[0])
            if not pts:
                continue
            xs, ms, hs = [p[0] for p in pts], np.array([p[1] for p in pts]), np.array([p[2] for p in pts])
            ns = sorted({p[3] for p in pts})
            n_text = str(ns[0]) if len(ns) == 1 else f"{ns[0]}-{ns[-1]}"
            dax.plot(xs, ms, color=colors[variant], marker="o",
                     label=f"{variant} − NCL, mean and 95% t-interval (n={n_text} paired seeds)")
            ok = np.isfinite(hs)
            if ok.sum() > 1:
                dax.fill_between(np.array(xs)[ok], (ms - hs)[ok], (ms + hs)[ok], color=colors[variant],
                                 alpha=BAND_ALPHA, linewidth=0)
        if not ax.lines:
            no_runs(ax, "no run recorded SC over training (set table3, train.dynamics_every)")
        if dax.lines:
            dax.axhline(0.0, color="0.2", linestyle="--", linewidth=1, zorder=0, label="no difference")
        else:
            no_runs(dax, "needs NCL and BayesNCL runs on shared seeds")
        if len(part):
            d = default_point(df, ds)
            fixed.append(f"{dataset_name(ds)}: D = {fmt_value(d['proj_dim'])}, BayesNCL at ρ = {fmt_value(d['rho'])}, "
                         f"λ = {fmt_value(d['lambda'])}; faint lines: single seeds; band: ± std over seeds")
    arch = arch_text(rows)
    suptitle(fig, "SC over pretraining (test split" + (f", {arch}" if arch else "") + "): does claim 1a "
              "depend on when training stops?", fixed)
    legend(fig, axes)
    return fig


# --------------------------------------------------------------------------- saturation
SATURATION_PANELS = (("infonce_final", "final InfoNCE (training loss)"), ("sc", "SC (%)"),
                     ("probe_top1", "linear probe top-1 (%)"))


def saturation_figure(df: pd.DataFrame, note: str = "") -> Figure:
    """The saturation figure of the runs of set ``saturation`` (also drawn by benchmarks/demo_runs.py from its study)."""
    rows = rows_in_set(df, "saturation")
    datasets = list(dict.fromkeys(rows["dataset"])) or [""]
    fig = new_figure(8.0, 0.9 + 2.7 * len(datasets))
    axes = fig.subplots(len(datasets), len(SATURATION_PANELS), squeeze=False)
    colors = line_colors(dict.fromkeys(rows["variant"]))
    fixed = []
    for r, ds in enumerate(datasets):
        part = rows[rows["dataset"] == ds]
        for ax, (col, name) in zip(axes[r], SATURATION_PANELS):
            ax.set_title(f"{dataset_name(ds)}: {name}")
            ax.set_xlabel("epochs (0: random init)")
            ax.set_ylabel(name)
            for label, line in split_lines(part, "epochs"):
                pts = line_points(line, "epochs", col)
                if pts:
                    draw(ax, pts, colors.get(line["variant"].iloc[0], "0.3"), label)
            if ax.lines:
                budgets = sorted({int(e) for e in part["epochs"] if math.isfinite(e)})
                positive = [e for e in budgets if e > 0]
                if positive and positive[-1] / positive[0] >= 8:  # budgets that double: a log axis, 0 kept
                    ax.set_xscale("symlog", base=2, linthresh=positive[0], linscale=0.5)
                    ax.set_xlabel("epochs, log scale (0: random init)")
                # upright labels overlap past about 6 budgets on a panel a third of the page wide
                ax.set_xticks(budgets, [str(e) for e in budgets], rotation=90 if len(budgets) > 6 else 0)
                ax.minorticks_off()
            else:
                no_runs(ax, "no runs in set saturation", note)
        if len(part):
            fixed.append(f"{dataset_name(ds)}: {saturation_verdict(part)[1]}")
    suptitle(fig, "Final quality against the training budget (complete runs, each with its own warm-up and "
                  "cosine): has the miniature stopped learning?", fixed)
    legend(fig, axes)
    return fig


def render_figures(df: pd.DataFrame, out_dir: str | os.PathLike,
                   formats: tuple[str, ...] = ("pdf", "png"), stamp: str | None = None,
                   notes: dict[str, str] | None = None) -> list[Path]:
    """Write every figure of ``FIGURE_NAMES`` (each in ``formats``) into ``out_dir``, ``stamp`` in their
    metadata; a figure drawn from a set shows the set's note (the workflow config's ``sets.<name>.note``, ``notes``)
    in its panels without runs. Returns the paths."""
    out = Path(out_dir)
    df = prepare(df)
    written = []
    makers = {"figure3": _figure3, "figure4a": _figure4a, "figure4b": _figure4b, "gates": _gates,
              "sc_training": _sc_training, "saturation": saturation_figure}
    with rc_context(RC):
        for stem in FIGURE_NAMES:
            fig = makers[stem](df, (notes or {}).get(stem, "")) if stem in SETS else makers[stem](df)
            written += save_figure(fig, out, stem, formats, stamp)
    return written
