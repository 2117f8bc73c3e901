"""The feature atlas, ``atlas_<dataset>.{pdf,png}``: what each dimension of z+ fires on, and what the gate
switches off (the paper's Appendix K), drawn from runs that `bayesncl evaluate` has already evaluated.

Per run it reads ``RUN/config.resolved.yaml`` (which dataset) and ``RUN/eval/features.npz`` (test split in
dataset order: ``labels``, ``backgrounds`` when the set has them, ``zplus``, ``gate`` for BayesNCL), and the
test images by index (``ImageSet.images[i]``, or ``ImageSet.dataset[i]`` when file-backed, so a file-backed
set is never loaded whole). Two parts:

- **The mechanism at a glance**, one panel per run: for every active dim of z+, activation frequency (x)
  against SC (y), coloured by the closed-gate rate (share of the images with z+_ij > eps whose gate is 0);
  background-dominated dims (lift rule of docs/METHOD.md section 4) ringed where a background label exists.
- **Dimension sheets**: the N most consistent dims of z+ and, for a gated run, the N dims whose gate closes
  most often, each a row of its top-k activating test images, annotated with SC, activation frequency,
  closed-gate rate, majority class and majority background. A red frame marks an image whose gate is
  closed on that dim. Runs without a gate get neither the closed-gate sheet nor the gate fields.

Dims firing on fewer than k test images are ranked after the others, so a dim that fires on one image (SC
100% by construction) does not head the "most consistent" sheet.
"""

from __future__ import annotations

import os
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..core.errors import BayesNCLError
from ..measures import arrays as measures
from ..measures.arrays import EPS
from ..settings.registry import method_traits
from .names import DATASET_NAMES, is_main

__all__ = ["AtlasError", "AtlasRun", "DimStats", "Sheet", "SheetRow", "atlas_runs", "build_sheets",
           "dim_stats", "load_run", "rank_dims", "render_atlas", "top_images", "write_atlas"]

GATE_NAMES = {"ste": "STE", "gumbel": "Gumbel", "soft": "soft gate"}


class AtlasError(BayesNCLError):
    """A run folder cannot be drawn (missing or inconsistent evaluation outputs); names file and fix."""


# --------------------------------------------------------------------------- per-dimension statistics
@dataclass
class DimStats:
    """Per-dimension values of z+ (arrays of length D; NaN / -1 for dims that never fire)."""

    count: np.ndarray            # images with z+_ij > eps
    freq: np.ndarray             # count / N
    sc: np.ndarray               # majority-class share among the firing images (SC_j, a fraction)
    cls: np.ndarray              # majority class
    bg_sc: np.ndarray | None     # majority-background share among the firing images
    bg: np.ndarray | None        # majority background
    closed: np.ndarray | None    # closed-gate rate
    bg_dom: np.ndarray | None    # background-dominated (lift rule)
    base_cls: float              # majority class share of the test split (SC of an always-on dim)


def _majority(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    total = counts.sum(0)
    share = np.divide(counts.max(0), total, out=np.full(total.shape, np.nan), where=total > 0)
    return share, np.where(total > 0, counts.argmax(0), -1)


def dim_stats(zplus: np.ndarray, labels: np.ndarray, num_classes: int, gate: np.ndarray | None = None,
              backgrounds: np.ndarray | None = None, num_backgrounds: int | None = None,
              eps: float = EPS) -> DimStats:
    """Per-dim statistics of ``zplus`` [N, D] with the evaluation's own metric functions, so the atlas
    marks exactly the dims the tables count."""
    Z = np.asarray(zplus, dtype=np.float32)
    y = np.asarray(labels, dtype=np.int64)
    _, counts = measures.class_dim_matrices(Z, y, num_classes, eps)
    count = counts.sum(0)
    sc, cls = _majority(counts)
    bg_sc = bg = bg_dom = closed = None
    if backgrounds is not None:
        b = np.asarray(backgrounds, dtype=np.int64)
        bg_sc, bg = _majority(measures.class_dim_matrices(Z, b, num_backgrounds, eps)[1])
        bg_dom = measures.background_dominance(Z, y, b, num_classes, num_backgrounds, eps)["bg_dom"]
    if gate is not None:
        closed = measures.closed_gate_rate(Z, np.asarray(gate), eps)
    n = max(len(labels), 1)
    base = float(np.bincount(np.asarray(labels, dtype=np.int64), minlength=num_classes).max() / n)
    return DimStats(count=count, freq=count / n, sc=sc, cls=cls, bg_sc=bg_sc, bg=bg, closed=closed,
                    bg_dom=bg_dom, base_cls=base)


def rank_dims(score: np.ndarray, count: np.ndarray, n: int, min_count: int) -> np.ndarray:
    """The ``n`` firing dims with the highest ``score`` (NaN never chosen). Dims with fewer than
    ``min_count`` firing images come after all others; ties: more firing images, then the lower index."""
    idx = np.flatnonzero(np.isfinite(score) & (count > 0))
    order = np.lexsort((idx, -count[idx], -score[idx], count[idx] < min_count))  # last key is primary
    return idx[order][:n]


def top_images(zplus: np.ndarray, dims, k: int, eps: float = EPS) -> list[np.ndarray]:
    """Per dim in ``dims``: indices of its (at most) ``k`` most activating test images with z+ > eps,
    in descending activation; equal activations in index order."""
    out = []
    for j in dims:
        col = np.asarray(zplus[:, j])
        order = np.argsort(-col, kind="stable")[:k]
        out.append(order[col[order] > eps])
    return out


# --------------------------------------------------------------------------- runs
@dataclass
class AtlasRun:
    name: str
    run_dir: Path
    zplus: np.ndarray
    labels: np.ndarray
    num_classes: int
    gate: np.ndarray | None = None
    backgrounds: np.ndarray | None = None
    num_backgrounds: int | None = None
    class_names: list[str] | None = None
    background_names: list[str] | None = None
    images: Any = None           # the test ImageSet (None: sheets without pictures)
    dataset: str = ""
    seed: int | None = None
    stats: DimStats = field(init=False)

    def __post_init__(self):
        self.stats = dim_stats(self.zplus, self.labels, self.num_classes, self.gate, self.backgrounds,
                               self.num_backgrounds)


def run_name(cfg: dict) -> str:
    m = cfg["method"]
    spec = method_traits(m["name"])
    return f"{spec.label} ({GATE_NAMES.get(m['gate'], m['gate'])})" if spec.gated else spec.label


def load_run(run_dir: str | os.PathLike, data_sets: list[str] | tuple = (), load_images: bool = True) -> AtlasRun:
    """A run folder's features.npz and test images; ``data_sets`` are ``data.*=value`` overrides (e.g. a
    dataset root that moved since training)."""
    from ..settings.config import merge, resolve, validate
    from ..data import load_split
    from ..core.errors import ConfigError
    from ..core.yamlio import nest, parse_set

    run = Path(run_dir)
    cfg_path, feat_path = run / "config.resolved.yaml", run / "eval" / "features.npz"
    if not cfg_path.is_file():
        raise AtlasError(f"{cfg_path}: not found; --run must name a run folder written by `bayesncl pretrain`")
    if not feat_path.is_file():
        raise AtlasError(f"{feat_path}: not found; run `bayesncl evaluate --checkpoint {run / 'model.pt'} "
                         f"--out {run / 'eval'} --only features` first")
    cfg = resolve(file=cfg_path)
    if data_sets:
        over = nest(dict(parse_set(s) for s in data_sets))
        if set(over) - {"data"}:
            raise ConfigError(f"--set {sorted(set(over) - {'data'})[0]}.*: only data.* keys can be overridden "
                              "for the atlas")
        cfg = validate(merge(cfg, over))
    with np.load(feat_path) as f:
        arrays = {k: f[k] for k in f.files}
    for key in ("labels", "zplus"):
        if key not in arrays:
            why = " (a SimCLR run has no z+; the atlas needs an NCL-family run)" if key == "zplus" else ""
            raise AtlasError(f"{feat_path}: no array {key!r}{why}; re-run `bayesncl evaluate` on {run}")
    zplus, labels = arrays["zplus"], arrays["labels"].astype(np.int64)
    if zplus.ndim != 2 or zplus.shape[0] != labels.shape[0]:
        raise AtlasError(f"{feat_path}: zplus has shape {zplus.shape} for {labels.shape[0]} labels; "
                         f"re-run `bayesncl evaluate` on {run}")
    gate = arrays.get("gate")
    if gate is not None and gate.shape != zplus.shape:
        raise AtlasError(f"{feat_path}: gate has shape {gate.shape}, zplus {zplus.shape}; "
                         f"re-run `bayesncl evaluate` on {run}")
    test = load_split(cfg["data"], "test") if load_images else None
    if test is not None and (len(test) != len(labels) or not np.array_equal(np.asarray(test.labels), labels)):
        raise AtlasError(f"{feat_path}: its {len(labels)} labels do not match the {len(test)} images of the "
                         f"{cfg['data']['dataset']} test split; re-run `bayesncl evaluate` on {run}")
    backgrounds = arrays.get("backgrounds")
    num_classes = test.num_classes if test is not None else int(labels.max()) + 1
    num_bg = None
    if backgrounds is not None:
        backgrounds = backgrounds.astype(np.int64)
        num_bg = test.num_backgrounds if test is not None else int(backgrounds.max()) + 1
    return AtlasRun(name=run_name(cfg), run_dir=run, zplus=zplus, labels=labels, num_classes=num_classes,
                    gate=gate, backgrounds=backgrounds, num_backgrounds=num_bg,
                    class_names=getattr(test, "class_names", None),
                    background_names=getattr(test, "background_names", None),
                    images=test, dataset=cfg["data"]["dataset"], seed=cfg.get("seed"))


# --------------------------------------------------------------------------- sheets
@dataclass
class SheetRow:
    dim: int
    images: np.ndarray             # test indices, most activating first
    closed: np.ndarray | None      # per image: gate closed on this dim (None without a gate)
    fields: dict[str, str]         # annotation, in display order


@dataclass
class Sheet:
    title: str
    rows: list[SheetRow]


def _name(names: list[str] | None, i: int, width: int = 14) -> str:
    text = names[i] if names and 0 <= i < len(names) else str(i)
    return text if len(text) <= width else text[: width - 1] + "…"


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def build_sheets(run: AtlasRun, n: int = 6, k: int = 8) -> list[Sheet]:
    """The most consistent dims of z+ and, with a gate, the dims whose gate closes most often."""
    s = run.stats
    picks = [(f"{run.name}: the {n} most consistent dims of z+", rank_dims(s.sc, s.count, n, k))]
    if s.closed is not None:
        picks.append((f"{run.name}: the {n} dims whose gate closes most often",
                      rank_dims(s.closed, s.count, n, k)))
    sheets = []
    for title, dims in picks:
        rows = []
        for j, idx in zip(dims, top_images(run.zplus, dims, k)):
            j = int(j)
            fields = {"dim": f"dim {j}", "SC": f"SC {_pct(s.sc[j])}", "active": f"fires on {_pct(s.freq[j])}"}
            if s.closed is not None:
                fields["closed"] = f"gate closed {_pct(s.closed[j])}"
            fields["class"] = f"class {_name(run.class_names, int(s.cls[j]))}"
            if s.bg is not None:
                fields["background"] = (f"bg {_name(run.background_names, int(s.bg[j]))} "
                                        f"({_pct(s.bg_sc[j])})")
                if s.bg_dom[j]:
                    fields["bg_dom"] = "bg-dominated"
            closed = None if run.gate is None else run.gate[idx, j] == 0
            rows.append(SheetRow(dim=j, images=idx, closed=closed, fields=fields))
        sheets.append(Sheet(title=title, rows=rows))
    return sheets


# --------------------------------------------------------------------------- drawing
def _thumbs(ds, indices: np.ndarray, size: int) -> list[np.ndarray]:
    """HWC uint8 thumbnails of test images ``indices``, read one by one."""
    import torch
    import torch.nn.functional as F

    out = []
    for i in indices:
        x = ds.images[int(i)] if ds.images is not None else ds.dataset[int(i)][0]
        x = torch.as_tensor(x)
        if x.shape[-1] > size:
            x = F.interpolate(x[None].float(), size=(size, size), mode="bilinear", antialias=True,
                              align_corners=False)[0].round().clamp(0, 255).to(torch.uint8)
        out.append(x.permute(1, 2, 0).numpy())
    return out


def _strip(ax, run: AtlasRun, row: SheetRow, k: int, size: int) -> None:
    from matplotlib.patches import Rectangle

    gap = max(1, size // 8)
    canvas = np.full((size, k * (size + gap) - gap, 3), 255, dtype=np.uint8)
    if run.images is not None:
        for p, img in enumerate(_thumbs(run.images, row.images, size)):
            h, w = img.shape[:2]
            canvas[:h, p * (size + gap): p * (size + gap) + w] = img
    ax.imshow(canvas, interpolation="nearest")
    if row.closed is not None:
        for p, closed in enumerate(row.closed):
            if closed:
                ax.add_patch(Rectangle((p * (size + gap) - 0.5, -0.5), size, size, fill=False,
                                       edgecolor="red", linewidth=1.2))
    if len(row.images) < k:
        ax.text(len(row.images) * (size + gap), size / 2, f"fires on {len(row.images)} image(s) only",
                fontsize=6, va="center", color="0.4")
    ax.set_axis_off()
    f = row.fields
    first = " · ".join(f[key] for key in ("dim", "SC", "active", "closed") if key in f)
    second = " · ".join(f[key] for key in ("class", "background", "bg_dom") if key in f)
    ax.set_title(first + "\n" + second, loc="left", fontsize=6.5, pad=2)


def _scatter(ax, run: AtlasRun, norm, cmap):
    s = run.stats
    on = s.count > 0
    x, y = 100 * s.freq[on], 100 * s.sc[on]
    handles = []
    if s.closed is not None:
        mappable = ax.scatter(x, y, c=100 * s.closed[on], cmap=cmap, norm=norm, s=16, edgecolors="none")
    else:
        mappable = None
        handles.append(ax.scatter(x, y, color="0.45", s=16, edgecolors="none", label="dim of z+ (no gate)"))
    if s.bg_dom is not None:
        d = s.bg_dom[on]
        handles.append(ax.scatter(x[d], y[d], s=70, facecolors="none", edgecolors="crimson", linewidths=1.0,
                                  label="background-dominated dim (lift rule)"))
    handles.append(ax.axhline(100 * s.base_cls, color="0.55", linestyle=":", linewidth=1, zorder=0,
                              label="SC of an always-on dim (class base rate)"))
    D = run.zplus.shape[1]
    ax.set_title(f"{run.name}: {int(on.sum())} of {D} dims of z+ active, their mean SC {100 * np.nanmean(s.sc):.1f}%")
    ax.set_xlabel("activation frequency (% of test images)")
    ax.set_ylabel("SC of the dim (% of its firing images\nin their majority class)")
    ax.grid(alpha=0.25)
    return mappable, handles


def render_atlas(runs: list[AtlasRun], out_stem: str | os.PathLike, n: int = 6, k: int = 8,
                 formats: tuple[str, ...] = ("pdf", "png"), stamp: str | None = None) -> list[Path]:
    """Draw the atlas of ``runs`` (side by side) into ``out_stem``.{pdf,png}, ``stamp`` (commit and grid)
    in their metadata; returns the paths."""
    from matplotlib import colormaps, rc_context
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import Normalize
    from matplotlib.figure import Figure

    from .drawing import RC, save_figure

    if not runs:
        raise AtlasError("atlas: no runs given; pass --run RUN_DIR (a run evaluated by `bayesncl evaluate`)")
    sheets = [(run, sheet) for run in runs for sheet in build_sheets(run, n, k)]
    sizes = [r.images.stored_size if r.images is not None else 16 for r in runs]
    size = min(max(sizes), 64)
    sheet_w = 0.42 * k + 0.3
    width = max(sheet_w * len(sheets), 4.2 * len(runs) + 0.8)
    scatter_h, sheet_h = 3.4, 0.34 + 0.78 * n
    with rc_context(RC):
        fig = Figure(figsize=(width, scatter_h + sheet_h + 0.5), layout="constrained")
        FigureCanvasAgg(fig)
        top, bottom = fig.subfigures(2, 1, height_ratios=[scatter_h, sheet_h])
        ds = runs[0].dataset
        seeds = sorted({r.seed for r in runs if r.seed is not None})
        fig.suptitle(f"Feature atlas: {DATASET_NAMES.get(ds, ds)} test split ({len(runs[0].labels)} images)"
                     + (f", seed {', '.join(map(str, seeds))}" if seeds else ""), fontsize=10)
        axes = top.subplots(1, len(runs), sharex=True, sharey=True, squeeze=False)[0]
        norm, cmap = Normalize(0, 100), colormaps["viridis"]
        handles, mappable = {}, None
        for ax, run in zip(axes, runs):
            m, hs = _scatter(ax, run, norm, cmap)
            mappable = m if mappable is None else mappable
            handles.update({h.get_label(): h for h in hs})
        axes[0].set_xlim(left=0)
        if mappable is not None:
            top.colorbar(mappable, ax=list(axes), label="closed-gate rate (% of firing images)", pad=0.01)
        per_col = max(len(lab) for lab in handles) + 6  # characters per legend column, handle included
        ncols = max(1, min(len(handles), int(width * 72 / (0.5 * RC["legend.fontsize"])) // per_col))
        top.legend(list(handles.values()), list(handles), loc="outside lower center", ncols=ncols,
                   frameon=False)
        cols = bottom.subfigures(1, len(sheets), squeeze=False)[0]
        for sub, (run, sheet) in zip(cols, sheets):
            title = f"{sheet.title}, top {k} activating test images each"
            if run.gate is not None:
                title += " (red frame: gate closed on that image)"
            sub.suptitle("\n".join(textwrap.wrap(title, int(sheet_w * 72 / (0.5 * 7.5)))), fontsize=7.5)
            row_axes = sub.subplots(n, 1, squeeze=False)[:, 0]
            for ax, row in zip(row_axes, sheet.rows):
                _strip(ax, run, row, k, size)
            for ax in row_axes[len(sheet.rows):]:
                ax.set_axis_off()
        return save_figure(fig, Path(out_stem).parent, Path(out_stem).name, formats, stamp)


def write_atlas(run_dirs: list[str | os.PathLike], out_stem: str | os.PathLike, n: int = 6, k: int = 8,
                data_sets: list[str] | tuple = (), formats: tuple[str, ...] = ("pdf", "png"),
                stamp: str | None = None) -> list[Path]:
    """Load each run folder and draw them side by side (one dataset: the first run's test images)."""
    if n < 1 or k < 1:
        raise AtlasError(f"atlas: --dims and --images must be >= 1, got {n} and {k}")
    runs = [load_run(d, data_sets) for d in run_dirs]
    datasets = {r.dataset for r in runs}
    if len(datasets) > 1:
        raise AtlasError(f"atlas: the runs are on different datasets ({', '.join(sorted(datasets))}); "
                         "draw one dataset per atlas")
    return render_atlas(runs, out_stem, n, k, formats, stamp)


# --------------------------------------------------------------------------- workflow
def atlas_runs(runs: dict) -> dict[str, list[str]]:
    """{dataset: [run ids]} for the workflow's atlas: NCL and BayesNCL (STE) at the lowest seed of the
    main comparison (names.MAIN_SETS), in that order; datasets with neither are left out."""
    out: dict[str, list[str]] = {}
    main = [r for r in runs.values() if is_main(r.sets)]
    for ds in dict.fromkeys(r.config["data"]["dataset"] for r in main):
        picked = []
        for want in (lambda m: method_traits(m["name"]).reference,
                     lambda m: method_traits(m["name"]).gated and m["gate"] == "ste"):
            cands = [r for r in main if r.config["data"]["dataset"] == ds and want(r.config["method"])]
            if cands:
                picked.append(min(cands, key=lambda r: r.config["seed"]).run_id)
        if picked:
            out[ds] = picked
    return out
