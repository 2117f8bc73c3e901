"""Command line: `bayesncl pretrain | evaluate | summarize | report | jobs | atlas | document | pdf |
make-synthetic | prepare | stale | status | estimate | plan | arrange-val | import | export`."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import warnings
from pathlib import Path

from .atomic import check_writable_dir
from .registry import METHODS
from .errors import REQUEUE_EXIT, TERMINATED, BayesNCLError, ConfigError, OutputError
from .outdir import replace_help
from .startup import mark_ready


def _input_file(path: str, what: str, fix: str, error=BayesNCLError) -> None:
    """A missing input fails at once with its name, not with a traceback from deep inside."""
    p = Path(path)
    if not p.is_file():
        state = "is a folder, not a file" if p.is_dir() else "does not exist"
        raise error(f"{what} {p} {state}; {fix}")


def _json_object(text: str, flag: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{flag}: not valid JSON ({e})") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{flag}: expected a JSON object of config keys")
    return value


def _pretrain(args) -> int:
    from .config import resolve
    from .data import check_data
    from .train import Preempted, TrainingDiverged, pretrain

    base = _json_object(args.config_json, "--config-json") if args.config_json else None
    cfg = resolve(file=args.config, base=base, sets=args.set)
    check_data(cfg["data"])
    check_writable_dir(args.out)
    try:
        path = pretrain(cfg, args.out, progress=not args.quiet, replace=args.replace)
    except Preempted as e:  # the SLURM profile retries exit 75, and the rerun resumes
        print(f"bayesncl pretrain: {e} (exit {REQUEUE_EXIT})", file=sys.stderr)
        return REQUEUE_EXIT
    except TrainingDiverged as e:
        print(f"bayesncl pretrain: training diverged: {e}", file=sys.stderr)
        return 1
    print(f"pretrained model: {path}")
    return 0


def _evaluate(args) -> int:
    from .config import parse_set
    from .evaluation.runner import evaluate

    for item in args.set:  # a bad value fails before the checkpoint is loaded
        parse_set(item)
    overrides = _json_object(args.config_json, "--config-json") if args.config_json else None
    _input_file(args.checkpoint, "--checkpoint", "give the model.pt that `bayesncl pretrain` wrote")
    check_writable_dir(args.out)
    for path in evaluate(args.checkpoint, args.out, only=args.only, sets=args.set, overrides=overrides,
                         expect_config=args.config, progress=not args.quiet, replace=args.replace):
        print(f"wrote {path}")
    return 0


def _summarize(args) -> int:
    from .report.summary import write_summary
    mark_ready()  # imports done: the work begins (bayesncl.startup)

    out = Path(args.out)
    if out.is_dir():
        raise OutputError(f"--out {out} is a folder; give the CSV file to write, e.g. {out / 'runs.csv'}")
    check_writable_dir(out.parent, what=f"--out {out}")
    if args.grid is not None:
        grid = _read_grid(args.grid)
    else:
        grid = _json_object(args.grid_json, "--grid-json")
    write_summary(grid, args.out)
    print(f"summary: {args.out}")
    return 0


def _read_grid(path: str) -> dict:
    """A workflow config file, checked (its schema where the workflow extra is installed) and its plugins
    found beside it."""
    from .config import load_yaml_file
    from .plugins import export_env, load_grid
    from .wfconfig import check_grid

    _input_file(path, "--grid", "give the workflow config, e.g. config/config.yaml")
    grid = load_yaml_file(path, "--grid", "expected the workflow config, a YAML text file (results, seeds, "
                                          "defaults, datasets, variants, sets), e.g. config/config.yaml")
    if not isinstance(grid, dict):
        raise ConfigError(f"--grid {path}: expected a mapping (results, seeds, defaults, datasets, ...)")
    load_grid(grid, [Path(path).parent])  # a plugin that fails is named as the grid's (plugins:)
    export_env(grid.get("plugins") or [], [Path(path).parent])  # found beside the grid file
    check_grid(grid, f"--grid {path}")
    return grid


def _stale(args) -> int:
    from .stale import print_stale
    mark_ready()  # imports done: the work begins (bayesncl.startup)

    grid = _read_grid(args.grid)
    results = args.results or grid.get("results")
    if not results or not Path(results).is_dir():
        raise ConfigError(f"--results {results}: no such folder; give the folder the grid's runs are in")
    print_stale(grid, results, args.grid, args.targets)
    return 0


def _grid_plugins(grid_file: str) -> None:
    """The plugins a workflow config names, imported from beside it: the report reads their methods' traits."""
    from .config import load_yaml_file
    from .plugins import load_grid

    grid = load_yaml_file(grid_file, "--grid")
    if isinstance(grid, dict) and grid.get("plugins"):
        load_grid(grid, [Path(grid_file).parent])


def _report(args) -> int:
    from .report import write_report
    mark_ready()  # imports done: the work begins (bayesncl.startup)

    _input_file(args.summary, "--summary", "run `bayesncl summarize` first")
    if args.grid is not None:
        _input_file(args.grid, "--grid", "give the workflow config the runs came from, e.g. config/config.yaml")
        _grid_plugins(args.grid)
    check_writable_dir(args.out)
    write_report(args.summary, args.out, grid=args.grid, smoke=args.smoke)
    if args.smoke:
        from .report.smoke import NOTE

        print(NOTE)
    print(f"tables and figures under {args.out}")
    return 0


def _document(args) -> int:
    from .report.document import write_document
    mark_ready()  # imports done: the work begins (bayesncl.startup)

    _input_file(args.summary, "--summary", "run `bayesncl summarize` first")
    if args.grid is not None:
        _input_file(args.grid, "--grid", "give the workflow config the runs came from, e.g. config/config.yaml")
        _grid_plugins(args.grid)
    overrides = _json_object(args.overrides_json, "--overrides-json") if args.overrides_json else None
    check_writable_dir(args.out)
    from .report import declare_from

    declare_from(args.grid)  # the workflow config's own claims, on the claims page
    written = write_document(args.summary, args.out, grid=args.grid, figures=args.figures, overrides=overrides)
    print(f"report sources: {Path(args.out) / 'report' / 'report.tex'} and {len(written) - 1} more files")
    return 0


def _pdf(args) -> int:
    from .report.document import build_pdf
    mark_ready()  # imports done: the work begins (bayesncl.startup)

    check_writable_dir(Path(args.out).parent, what=f"--out {args.out}")
    print(f"report: {build_pdf(args.tex, args.out)}")
    return 0


def _jobs(args) -> int:
    from .report.jobs import write_jobs
    mark_ready()  # imports done: the work begins (bayesncl.startup)

    check_writable_dir(Path(args.out).parent, what=f"--out {args.out}")
    csv, md, text = write_jobs(args.benchmarks, args.out, smoke=args.smoke)
    print(text, end="")
    print(f"jobs: {csv}, {md}")
    return 0


def _make_synthetic(args) -> int:
    from .config import parse_set, resolve
    from .data.synthetic import NAME as SYNTHETIC, get_synthetic, synthetic_cache_path

    for item in args.set:
        key = parse_set(item)[0]
        if not (key.startswith("data.synthetic.") or key == "data.cache_dir"):
            raise ConfigError(f"--set {key}: make-synthetic takes data.synthetic.* and data.cache_dir only")
    cfg = resolve(file=args.config, sets=args.set)
    if cfg["data"]["dataset"] != SYNTHETIC:
        raise ConfigError(f"data.dataset: make-synthetic generates the synthetic set, but {args.config} trains on "
                          f"{cfg['data']['dataset']!r}")
    params, cache = cfg["data"]["synthetic"], cfg["data"]["cache_dir"]
    path = synthetic_cache_path(params, cache)
    fix = "set data.cache_dir (or $BAYESNCL_CACHE) to a folder you can write"
    try:
        check_writable_dir(path.parent, what=f"data.cache_dir {path.parent}")
    except OutputError as e:
        raise OutputError(f"{e}; {fix}") from None
    with warnings.catch_warnings(record=True) as caught:  # a cache that could not be written: an error here
        warnings.simplefilter("always", RuntimeWarning)
        data = get_synthetic(params, cache)
    if not path.is_file():
        why = next((str(w.message) for w in caught if "synthetic cache" in str(w.message)), "it is not there")
        raise OutputError(f"data.cache_dir: nothing was cached ({why}); {fix}")
    for split in ("train", "test"):
        print(f"{split}: {len(data[f'{split}_labels'])} images, {params['num_classes']} classes")
    print(f"cached in {path}")
    return 0


def _prepare(args) -> int:
    import os

    from .config import resolve
    from .data import check_data
    from .registry import DATASETS

    if args.workers is not None and args.workers < 0:
        raise ConfigError(f"--workers: {args.workers} is negative; give 0 (decode in this process) or a number of "
                          "decoding processes")
    base = _json_object(args.config_json, "--config-json") if args.config_json else None
    cfg = resolve(file=args.config, base=base, sets=args.set)
    d = cfg["data"]
    spec = DATASETS[d["dataset"]]
    if spec.prepare is None:
        with_copy = ", ".join(DATASETS.names(lambda s: s.prepare is not None))
        raise ConfigError(f"data.dataset: {d['dataset']!r} has no prepared copy (nothing to prepare); the datasets "
                          f"that have one: {with_copy}")
    check_data(d)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    workers = args.workers if args.workers is not None else cpus
    from .registry import _resolve

    for line in _resolve(spec.prepare)(d, workers, args.verify):
        print(line)
    return 0


def _status(args) -> int:
    from .status import grid_status, render
    mark_ready()  # imports done: the work begins (bayesncl.startup)

    grid = _read_grid(args.grid) if args.grid else None
    results = args.results or (grid or {}).get("results") or "results"
    if not Path(results).is_dir():
        raise ConfigError(f"RESULTS {results}: no such folder; give the grid's results folder (its `results:`)")
    print(render(grid_status(results, grid), args.only), end="")
    return 0


def _estimate(args) -> int:
    from .config import parse_set
    from .estimate import estimate, measured_rates, render
    mark_ready()  # imports done: the work begins (bayesncl.startup)

    if args.gpu is None and args.measured is None:
        raise ConfigError("--gpu: name the GPU (e.g. --gpu h200) or give --measured DIR/gpu_check.json")
    if args.time_limit is not None and args.time_limit <= 0:
        raise ConfigError(f"--time-limit: {args.time_limit} is not a positive number of minutes")
    sizes = {}
    for item in args.images:
        name, value = parse_set(item)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ConfigError(f"--images {item}: expected DATASET=N, N a positive number of training images")
        sizes[name] = value
    grid = _read_grid(args.grid)
    if args.smoke:
        grid["smoke"] = True
    rates = measured_rates(args.gpu, args.measured)
    est = estimate(grid, rates, time_limit_min=args.time_limit, sizes=sizes, progress=sys.stderr.isatty())
    print(render(est), end="")
    return 0


def _arrange_val(args) -> int:
    from .data.ilsvrc_val import arrange_val

    for line in arrange_val(args.root, args.labels, args.meta, args.classes, args.symlink, progress=not args.quiet):
        print(line)
    return 0


def _atlas(args) -> int:
    from .report.atlas import write_atlas
    from .report.provenance import stamp
    mark_ready()  # imports done: the work begins (bayesncl.startup)

    out = args.out or str(Path(args.run[0]) / "eval" / "atlas")
    out = out[:-4] if out.endswith((".pdf", ".png")) else out
    if args.grid is not None:
        _input_file(args.grid, "--grid", "give the workflow config the runs came from, e.g. config/config.yaml")
    for path in write_atlas(args.run, out, n=args.dims, k=args.images, data_sets=args.set, stamp=stamp(args.grid)):
        print(f"atlas: {path}")
    return 0



def _import(args) -> int:
    from .weights.released import import_checkpoint, write_run

    check_writable_dir(args.out)
    overrides = _json_object(args.config_json, "--config-json") if args.config_json else None
    imp = import_checkpoint(args.checkpoint, file=args.config, sets=args.set, args=args.args, overrides=overrides)
    path = write_run(imp, args.checkpoint, args.out, replace=args.replace)
    for flag in imp.flags:
        print(f"note: {flag}")
    print(f"imported {args.checkpoint} (sha256 {imp.sha256[:16]}): {path}")
    return 0


def _export(args) -> int:
    from .weights.export import export

    _input_file(args.checkpoint, "--checkpoint", "give the model.pt that `bayesncl pretrain` or `bayesncl import` "
                "wrote")
    check_writable_dir(args.out)
    for path in export(args.checkpoint, args.out, args.format, heads=args.heads, replace=args.replace):
        print(f"wrote {path}")
    return 0


def _weights_commands(sub, common) -> None:
    """`bayesncl import` and `bayesncl export` (bayesncl.weights)."""
    from .weights import FORMATS

    sp = sub.add_parser("import", help="a checkpoint of the released BayesNCL code (a solo-learn .ckpt) as a run "
                                       "folder whose model.pt `bayesncl evaluate` reads",
                        description="Map a released-code checkpoint (state_dict: backbone.*, projector.*, "
                                    "gating_head.*) to this package's model.pt and run config: its hyper-parameters "
                                    "where present (the checkpoint's, or args.json beside it), its keys and shapes "
                                    "otherwise. What neither says is printed as a note. Data and evaluation settings: "
                                    "--config / --set.")
    common(sp)
    sp.add_argument("--checkpoint", required=True, metavar="CKPT", help="the released code's .ckpt")
    sp.add_argument("--args", metavar="JSON", help="the released run's args.json (default: the one beside CKPT)")
    sp.add_argument("--config-json", help=argparse.SUPPRESS)  # the workflow's run config (bayesncl.grid)
    sp.add_argument("--out", required=True, metavar="DIR", help="run folder: model.pt, config.resolved.yaml")
    sp.add_argument("--replace", action="store_true", help=replace_help("the run"))
    sp.set_defaults(func=_import)

    sp = sub.add_parser("export", help="a run's backbone in torchvision's / timm's key layout, or as safetensors",
                        description="Write the backbone of a model.pt as DIR/backbone.pth (torchvision, timm) or "
                                    "DIR/backbone.safetensors, loadable with strict=True into the ResNet that "
                                    "DIR/config.json describes (docs/USAGE.md), and the run config as JSON.")
    sp.add_argument("--checkpoint", required=True, metavar="PT", help="a model.pt")
    sp.add_argument("--format", required=True, choices=FORMATS,
                    help="torchvision or timm: backbone.pth; safetensors: backbone.safetensors (any width)")
    sp.add_argument("--heads", action="store_true", help="also the projector and the gating head (heads.*)")
    sp.add_argument("--out", required=True, metavar="DIR", help="folder for the files and config.json; created if "
                                                                "missing")
    sp.add_argument("--replace", action="store_true", help=replace_help("the export"))
    sp.set_defaults(func=_export)


def build_parser() -> argparse.ArgumentParser:
    from .evaluation.sections import SECTIONS

    p = argparse.ArgumentParser(prog="bayesncl", description=__doc__,
                                epilog="exit status: 0 done; 2 input it cannot use (one line on stderr naming the file "
                                       "or key, what is wrong and the fix; nothing written); 75 stopped by SIGTERM "
                                       "(rerun the same command: pretraining resumes); 1 training diverged")
    sub = p.add_subparsers(dest="command", required=True)

    def common(sp, config_required=False):
        sp.add_argument("--config", required=config_required,
                        help="YAML config file of nested keys (data:, model:, method:, train:, eval:)")
        sp.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key, e.g. --set method.rho=0.7 (repeatable; the value is YAML)")
        sp.add_argument("--quiet", action="store_true", help="no progress bar")

    sp = sub.add_parser(
        "pretrain", help="pretrain one configuration (resumes from DIR/checkpoint.pt)",
        description="Pretrain one configuration; rerunning the same command resumes from DIR/checkpoint.pt.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"methods (--set method.name=...): {', '.join(METHODS)}\n"
               "every key, its default and what it allows: the dataclasses in src/bayesncl/config.py\n"
               "formulas, defaults and protocols: docs/METHOD.md\n"
               "example: bayesncl pretrain --out runs/demo --set method.name=ncl --set train.epochs=20")
    common(sp)
    sp.add_argument("--config-json", help=argparse.SUPPRESS)  # the workflow's run config, under --set
    sp.add_argument("--out", required=True, metavar="DIR",
                    help="run folder: checkpoint.pt, model.pt (what evaluate reads), log.jsonl, "
                         "config.resolved.yaml; created if missing")
    sp.add_argument("--replace", action="store_true", help=replace_help("the run") + "; a resumed run is its own")
    sp.set_defaults(func=_pretrain)

    sections = "\n".join(f"  {n:<17} {s.doc}" for n, s in SECTIONS.items())
    sp = sub.add_parser(
        "evaluate", help="evaluate a pretrained checkpoint, section by section",
        description="Compute the metrics of Tables 1-7 and Figures 3-4 for one pretrained model. Each section "
                    "writes OUT/<section>.json; `features` writes the cached features the others read.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"sections (docs/DESIGN.md):\n{sections}\n"
               "linear_probe and background_probe run on the GPU for the paper protocol and Waterbirds.")
    sp.add_argument("--checkpoint", required=True, metavar="CKPT",
                    help="the model.pt that `bayesncl pretrain` wrote (its config is stored inside)")
    sp.add_argument("--out", required=True, metavar="DIR",
                    help="folder for the section files (the run's eval/); created if missing")
    sp.add_argument("--only", nargs="+", choices=list(SECTIONS), metavar="SECTION",
                    help="compute only these sections (default: every section that applies to the run)")
    sp.add_argument("--config", help="the run's config: refuse a checkpoint trained with a different one")
    sp.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override an eval.* or data.* key (e.g. data.root, eval.waterbirds_root)")
    sp.add_argument("--config-json", help=argparse.SUPPRESS)  # the workflow's eval.*/data.* settings
    sp.add_argument("--quiet", action="store_true", help="no progress bar")
    sp.add_argument("--replace", action="store_true", help=replace_help("the evaluation"))
    sp.set_defaults(func=_evaluate)

    sp = sub.add_parser("summarize", help="collect every run's eval/<section>.json of a grid into one CSV",
                        description="Expand the workflow config's grid (as Snakemake does) and collect each run's "
                                    "evaluation files, results/runs/<run>/eval/<section>.json, into one CSV row.")
    src = sp.add_mutually_exclusive_group(required=True)
    src.add_argument("--grid", metavar="YAML", help="the workflow config, e.g. config/config.yaml")
    src.add_argument("--grid-json", help=argparse.SUPPRESS)  # the workflow's config, as Snakemake holds it
    sp.add_argument("--out", required=True, metavar="CSV",
                    help="the summary CSV to write (one row per run); metrics.json, the dvc metrics, "
                         "is written beside it")
    sp.set_defaults(func=_summarize)

    sp = sub.add_parser("stale", help="list the runs trained under other settings than the grid gives them today",
                        description="Compare each run's recorded config (results/runs/<run>/config.resolved.yaml) "
                                    "with the config the workflow config gives it today, on what decides training "
                                    "(bayesncl.grid.trigger_config). One line per stale run; `snakemake` retrains "
                                    "them, or exactly these: snakemake --cores N --forcerun $(bayesncl stale "
                                    "--grid CONFIG --targets).")
    sp.add_argument("--grid", required=True, metavar="YAML", help="the workflow config, e.g. config/config.yaml")
    sp.add_argument("--results", metavar="DIR", help="the results folder (default: the workflow config's results)")
    sp.add_argument("--targets", action="store_true", help="print only each stale run's model.pt")
    sp.set_defaults(func=_stale)

    sp = sub.add_parser("report", help="render Tables 1-7, the claims table and the figures from the summary CSV")
    sp.add_argument("--summary", required=True, metavar="CSV",
                    help="the runs.csv that `bayesncl summarize` wrote; one without runs or without a run's "
                         "columns is an error (exit 2), and the tables already under DIR stay as they were")
    sp.add_argument("--out", required=True, metavar="DIR",
                    help="writes DIR/tables/{table1..7,claims}.{tex,md} and "
                         "DIR/figures/{figure3,figure4a,figure4b,gates}.{pdf,png}")
    sp.add_argument("--grid", metavar="YAML", help="the workflow config the runs came from: named, with its "
                                                   "hash and the commit, in every file written")
    sp.add_argument("--smoke", action="store_true", help="mark every table as a smoke run's (not results)")
    sp.set_defaults(func=_report)

    sp = sub.add_parser("document", help="the reproduction report's sources: report.tex, the HTML report's "
                                         "pages and captions, the provenance, the DVC plot data",
                        description="Assemble the reproduction report from the generated tables and figures: "
                                    "DIR/report/report.tex (build it with `bayesncl pdf`), DIR/report/html/*.html "
                                    "and DIR/report/captions/*.rst (for `snakemake --report`), "
                                    "DIR/report/provenance.{rst,json} and DIR/plots/ (for `dvc plots`).")
    sp.add_argument("--summary", required=True, metavar="CSV", help="the runs.csv that `bayesncl summarize` wrote")
    sp.add_argument("--out", required=True, metavar="DIR",
                    help="the results folder that holds tables/ and figures/ (`bayesncl report --out`)")
    sp.add_argument("--grid", metavar="YAML", help="the workflow config the runs came from (named with its hash)")
    sp.add_argument("--figures", nargs="*", default=[], metavar="STEM",
                    help="figures to show, in order: stems of DIR/figures/STEM.pdf (e.g. figure3 atlas_synthetic)")
    sp.add_argument("--overrides-json", help=argparse.SUPPRESS)  # the workflow's --config overrides
    sp.set_defaults(func=_document)

    sp = sub.add_parser("pdf", help="compile the reproduction report (report.tex) with pdflatex",
                        description="Compile DIR/report/report.tex from `bayesncl document` with pdflatex (the log "
                                    "stays beside it) and write the PDF.")
    sp.add_argument("--tex", required=True, metavar="TEX", help="the report.tex that `bayesncl document` wrote")
    sp.add_argument("--out", required=True, metavar="PDF", help="the PDF to write, e.g. results/report.pdf")
    sp.set_defaults(func=_pdf)

    sp = sub.add_parser("jobs", help="what each workflow job cost: its benchmark files in one CSV, totals per rule",
                        description="Collect the workflow's benchmark files (wall time, peak memory, GPUs held) "
                                    "into one CSV row per job, and the totals per rule and the GPU-hours as run "
                                    "into a Markdown table beside it.")
    sp.add_argument("--benchmarks", required=True, metavar="DIR",
                    help="the workflow's <results>/benchmarks folder; a file in it without a record of wall "
                         "seconds, or no file at all, is an error (exit 2)")
    sp.add_argument("--out", required=True, metavar="CSV", help="the CSV to write; the totals go to the .md beside it")
    sp.add_argument("--smoke", action="store_true", help="mark the totals as a smoke run's")
    sp.set_defaults(func=_jobs)

    sp = sub.add_parser("atlas", help="feature atlas: what each dim of z+ fires on, what the gate closes",
                        description="Dimension sheets (top activating test images of the most consistent and "
                                    "the most often gated dims) and activation frequency vs SC per dim, the "
                                    "runs side by side; reads RUN_DIR/eval/features.npz from `bayesncl evaluate`.")
    sp.add_argument("--run", action="extend", nargs="+", required=True, metavar="RUN_DIR",
                    help="run folder(s) of one dataset, e.g. an NCL and a BayesNCL run (repeatable)")
    sp.add_argument("--out", metavar="PATH", help="output path without extension; writes PATH.pdf and "
                                                  "PATH.png (default: the first RUN_DIR/eval/atlas)")
    sp.add_argument("--dims", type=int, default=6, metavar="N", help="dims per sheet (default 6)")
    sp.add_argument("--images", type=int, default=8, metavar="K", help="images per dim (default 8)")
    sp.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a data.* key of the runs' config, e.g. data.root=/new/path")
    sp.add_argument("--grid", metavar="YAML", help="the workflow config the runs came from: named, with its "
                                                   "hash and the commit, in the figures' metadata")
    sp.set_defaults(func=_atlas)

    sp = sub.add_parser("make-synthetic", help="generate (and cache) the synthetic dataset",
                        description="Generate the synthetic dataset of the config into its cache: data.cache_dir, "
                                    "else $BAYESNCL_CACHE, else ~/.cache/bayesncl.")
    common(sp)
    sp.set_defaults(func=_make_synthetic)

    sp = sub.add_parser("prepare", aliases=["prepare-imagenet"],
                        help="decode a file-backed dataset (ImageNet-100, an image folder) once into the cache the "
                             "loader reads",
                        description="Decode every image of the config's dataset (train/ and val/) once, as the "
                                    "loader would, into data.cache_dir (else $BAYESNCL_CACHE, else ~/.cache/bayesncl): "
                                    "for ImageNet-100 about 24 GiB at the stored size 256. Runs then read it "
                                    "instead of the image files (the same pixels). Does nothing when a valid copy exists: its "
                                    "manifest binds each data file to its split, image count and per-block checksums.")
    common(sp)
    sp.add_argument("--config-json", help=argparse.SUPPRESS)  # the workflow's data settings
    sp.add_argument("--workers", type=int, metavar="N", help="decoding processes (default: one per CPU)")
    sp.add_argument("--verify", action="store_true",
                    help="check the checksum of every block of an existing copy (each open checks a sample) and "
                         "decode again the images of the blocks that differ")
    sp.set_defaults(func=_prepare)

    sp = sub.add_parser("status", help="the grid's progress: each run done, running (epoch, loss, ETA), failed, "
                                       "waiting; flags and totals",
                        description="Read while the grid runs (nothing is written): every run's state from its "
                                    "folder under RESULTS/runs and, with --grid, the runs still waiting.")
    sp.add_argument("results", nargs="?", metavar="RESULTS", help="the grid's results folder (default: the grid's "
                                                                   "`results:`, else results)")
    sp.add_argument("--grid", help="the workflow config (e.g. config/paper.yaml): lists the runs not started too")
    sp.add_argument("--only", nargs="+", metavar="STATE", choices=["unreadable", "failed", "running", "requeued",
                                                                    "evaluating", "waiting", "done"],
                    help="list only runs in these states (the totals count every run)")
    sp.set_defaults(func=_status)

    sp = sub.add_parser("estimate", help="GPU-hours and submissions of a grid before it runs, for a named GPU",
                        description="What a workflow config costs: pretraining and evaluation GPU-hours and the "
                                    "SLURM submissions, from benchmarks/gpu_check.py's measured rate on the GPU.")
    sp.add_argument("--grid", required=True, help="the workflow config, e.g. config/paper.yaml")
    sp.add_argument("--gpu", help="a GPU with a stored gpu_check measurement, e.g. h200")
    sp.add_argument("--measured", metavar="JSON", help="your GPU's DIR/gpu_check.json (benchmarks/gpu_check.py)")
    sp.add_argument("--time-limit", type=float, metavar="MINUTES",
                    help="the partition's time limit: a run needing more is that many pretraining submissions")
    sp.add_argument("--images", action="append", default=[], metavar="DATASET=N",
                    help="training images of a dataset whose size is not known before it is read (an image folder)")
    sp.add_argument("--smoke", action="store_true", help="the smoke run's grid (--config smoke=true)")
    sp.set_defaults(func=_estimate)

    sp = sub.add_parser("arrange-val", help="sort the flat official ILSVRC-2012 val/ into class folders (links)",
                        description="Link ROOT/val/<file> into ROOT/val/<wnid>/<file> for the ImageNet-100 classes "
                                    "(or all), from LOC_val_solution.csv or the devkit's ground truth and meta.mat.")
    sp.add_argument("root", metavar="ROOT", help="the ImageNet root holding train/ and the flat val/")
    sp.add_argument("--labels", required=True, help="LOC_val_solution.csv, or the devkit's "
                                                    "data/ILSVRC2012_validation_ground_truth.txt")
    sp.add_argument("--meta", help="the devkit's data/meta.mat (with the ground-truth file)")
    sp.add_argument("--classes", help="a one-wnid-per-line file, or `all` (default: the shipped ImageNet-100 list)")
    sp.add_argument("--symlink", action="store_true", help="relative symbolic links instead of hard links")
    sp.add_argument("--quiet", action="store_true", help="no progress bar")
    sp.set_defaults(func=_arrange_val)

    _weights_commands(sub, common)
    from .plan import add_command

    add_command(sub)
    return p


def _terminated(signum, frame):
    print(TERMINATED, file=sys.stderr)
    raise SystemExit(REQUEUE_EXIT)


def main(argv: list[str] | None = None) -> int:
    """Run one command: 0 done, 2 bad input (one line on stderr), 75 stopped by SIGTERM (rerun it), 1 a failure.
    Training installs its own SIGTERM handler (a checkpoint, then 75); until then, and after, this one."""
    import threading

    own = threading.current_thread() is threading.main_thread()  # signal handlers live in the main thread
    previous = signal.signal(signal.SIGTERM, _terminated) if own else None  # first: before the heavy imports
    try:
        try:
            from .plugins import load_from_env

            load_from_env()  # the workflow's plugins (docs/EXTENDING.md): their methods, datasets and sections
        except BayesNCLError as e:
            print(f"bayesncl: error: {e}", file=sys.stderr)
            return 2
        args = build_parser().parse_args(argv)
        try:
            return args.func(args)
        except BayesNCLError as e:  # bad input; anything else is a bug and keeps its traceback
            print(f"bayesncl {args.command}: error: {e}", file=sys.stderr)
            return 2
    finally:
        if own:
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
