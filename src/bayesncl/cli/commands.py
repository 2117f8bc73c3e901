"""The `bayesncl` commands' handlers: each takes the parsed arguments (bayesncl.cli.main's parser) and returns the
exit code; a BayesNCLError it raises is the CLI's one line and exit 2. Each imports what its command needs when
it runs, so the CLI starts without torch."""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

from ..core.atomic import check_writable_dir
from ..core.errors import REQUEUE_EXIT, BayesNCLError, ConfigError, OutputError
from ..core.startup import mark_ready
from ..core.yamlio import json_flag


def _input_file(path: str, what: str, fix: str, error=BayesNCLError) -> None:
    """A missing input fails at once with its name, not with a traceback from deep inside."""
    p = Path(path)
    if not p.is_file():
        state = "is a folder, not a file" if p.is_dir() else "does not exist"
        raise error(f"{what} {p} {state}; {fix}")


def cmd_pretrain(args) -> int:
    from ..settings.config import resolve
    from ..data import check_data
    from ..training.train import Preempted, TrainingDiverged, pretrain

    base = json_flag(args.config_json, "--config-json") if args.config_json else None
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


def cmd_evaluate(args) -> int:
    from ..evaluation.runner import evaluate
    from ..core.yamlio import parse_set

    for item in args.set:  # a bad value fails before the checkpoint is loaded
        parse_set(item)
    overrides = json_flag(args.config_json, "--config-json") if args.config_json else None
    triggers = json_flag(args.trigger_json, "--trigger-json") if args.trigger_json else None
    _input_file(args.checkpoint, "--checkpoint", "give the model.pt that `bayesncl pretrain` wrote")
    check_writable_dir(args.out)
    for path in evaluate(args.checkpoint, args.out, only=args.only, sets=args.set, overrides=overrides,
                         expect_config=args.config, progress=not args.quiet, replace=args.replace, triggers=triggers):
        print(f"wrote {path}")
    return 0


def cmd_summarize(args) -> int:
    from ..report.summary import write_summary
    mark_ready()  # imports done: the work begins (bayesncl.core.startup)

    out = Path(args.out)
    if out.is_dir():
        raise OutputError(f"--out {out} is a folder; give the CSV file to write, e.g. {out / 'runs.csv'}")
    check_writable_dir(out.parent, what=f"--out {out}")
    if args.grid is not None:
        grid = _read_grid(args.grid).config
    else:  # the workflow's merged config (its plugins in the environment)
        from .workflow import load_workflow_json

        grid = load_workflow_json(args.grid_json).config
    write_summary(grid, args.out)
    print(f"summary: {args.out}")
    return 0


def _grid_inputs(paths: list[str], fix: str) -> None:
    """Each of a grid's files (the grid, then its overlays) exists, else one line naming it and ``fix``."""
    for path in paths:
        _input_file(path, "--grid", fix)


def _read_grid(paths: list[str], fix: str = "give the workflow config, e.g. config/config.yaml", **how):
    """The workflow config of `--grid` (a grid and its overlays), read as Snakemake reads it
    (bayesncl.cli.workflow.load_workflow): its plugins from beside its files, its schema, runs and claims checked."""
    from .workflow import load_workflow

    _grid_inputs(paths, fix)
    return load_workflow(paths, **how)


def cmd_stale(args) -> int:
    from ..report.atlas import atlas_runs
    from ..report.document import builds_pdf
    from ..grid.stale import print_stale
    mark_ready()  # imports done: the work begins (bayesncl.core.startup)

    wf = _read_grid(args.grid)
    results = args.results or wf.config.get("results")
    if not results or not Path(results).is_dir():
        raise ConfigError(f"--results {results}: no such folder; give the folder the grid's runs are in")
    print_stale(wf.config, results, " ".join(args.grid), args.targets, args.all, atlas=atlas_runs(wf.runs),
                pdf=builds_pdf(), runs=wf.runs)
    return 0


GRID_OF_RUNS = "give the workflow config the runs came from, e.g. config/config.yaml"


def _report_inputs(args) -> None:
    """The report's and the document's inputs: runs.csv, and the grid files with their plugins where given."""
    _input_file(args.summary, "--summary", "run `bayesncl summarize` first")
    if args.grid is not None:  # its plugins (the report reads their methods' traits) and its claims
        _read_grid(args.grid, GRID_OF_RUNS)


def cmd_report(args) -> int:
    from ..report import write_report
    mark_ready()  # imports done: the work begins (bayesncl.core.startup)

    _report_inputs(args)
    check_writable_dir(args.out)
    write_report(args.summary, args.out, grid=args.grid, smoke=args.smoke)
    if args.smoke:
        from ..report.smoke import NOTE

        print(NOTE)
    print(f"tables and figures under {args.out}")
    return 0


def cmd_document(args) -> int:
    from ..report.document import write_document
    mark_ready()  # imports done: the work begins (bayesncl.core.startup)

    _report_inputs(args)
    overrides = json_flag(args.overrides_json, "--overrides-json") if args.overrides_json else None
    check_writable_dir(args.out)
    written = write_document(args.summary, args.out, grid=args.grid, figures=args.figures, overrides=overrides)
    print(f"report sources: {Path(args.out) / 'report' / 'report.tex'} and {len(written) - 1} more files")
    return 0


def cmd_pdf(args) -> int:
    from ..report.document import build_pdf
    mark_ready()  # imports done: the work begins (bayesncl.core.startup)

    check_writable_dir(Path(args.out).parent, what=f"--out {args.out}")
    print(f"report: {build_pdf(args.tex, args.out)}")
    return 0


def cmd_jobs(args) -> int:
    from ..report.jobs import write_jobs
    mark_ready()  # imports done: the work begins (bayesncl.core.startup)

    check_writable_dir(Path(args.out).parent, what=f"--out {args.out}")
    csv, md, text = write_jobs(args.benchmarks, args.out, smoke=args.smoke)
    print(text, end="")
    print(f"jobs: {csv}, {md}")
    return 0


def cmd_make_synthetic(args) -> int:
    from ..settings.config import resolve
    from ..data.synthetic import NAME as SYNTHETIC, get_synthetic, synthetic_cache_path
    from ..core.yamlio import parse_set

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


def cmd_prepare(args) -> int:
    import os

    from ..settings.config import resolve
    from ..data import check_data
    from ..settings.registry import DATASETS

    if args.workers is not None and args.workers < 0:
        raise ConfigError(f"--workers: {args.workers} is negative; give 0 (decode in this process) or a number of "
                          "decoding processes")
    base = json_flag(args.config_json, "--config-json") if args.config_json else None
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
    from ..settings.registry import _resolve

    for line in _resolve(spec.prepare)(d, workers, args.verify):
        print(line)
    return 0


def cmd_status(args) -> int:
    from ..grid.status import grid_status, render
    mark_ready()  # imports done: the work begins (bayesncl.core.startup)

    grid = _read_grid(args.grid).config if args.grid else None
    results = args.results or (grid or {}).get("results") or "results"
    if not Path(results).is_dir():
        raise ConfigError(f"RESULTS {results}: no such folder; give the grid's results folder (its `results:`)")
    print(render(grid_status(results, grid), args.only), end="")
    return 0


def cmd_estimate(args) -> int:
    from ..planning.estimate import estimate, measured_rates, render
    from ..core.yamlio import parse_set
    from ..planning.time_requests import STOP_MARGIN_S
    mark_ready()  # imports done: the work begins (bayesncl.core.startup)

    if args.gpu is None and args.measured is None:
        raise ConfigError("--gpu: name the GPU (e.g. --gpu h200) or give --measured DIR/gpu_check.json")
    if args.time_limit is not None and args.time_limit <= 0:
        raise ConfigError(f"--time-limit: {args.time_limit} is not a positive number of minutes")
    if args.stop_margin is not None and not args.stop_margin >= 0:
        raise ConfigError(f"--stop-margin: {args.stop_margin} is not a number of seconds (0 or more)")
    sizes = {}
    for item in args.images:
        name, value = parse_set(item)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ConfigError(f"--images {item}: expected DATASET=N, N a positive number of training images")
        sizes[name] = value
    grid = _read_grid(args.grid, overrides={"smoke": True} if args.smoke else None).config
    rates = measured_rates(args.gpu, args.measured)
    margin = STOP_MARGIN_S if args.stop_margin is None else args.stop_margin
    results = args.results or grid["results"]  # the schema's default; a smoke run's own folder (load_workflow)
    est = estimate(grid, rates, time_limit_min=args.time_limit, sizes=sizes, margin_s=margin, results=results,
                   progress=sys.stderr.isatty())
    print(render(est), end="")
    return 0


def cmd_arrange_val(args) -> int:
    from ..data.ilsvrc_val import arrange_val

    for line in arrange_val(args.root, args.labels, args.meta, args.classes, args.symlink, progress=not args.quiet):
        print(line)
    return 0


def cmd_atlas(args) -> int:
    from ..report.atlas import write_atlas
    from ..report.provenance import stamp
    mark_ready()  # imports done: the work begins (bayesncl.core.startup)

    out = args.out or str(Path(args.run[0]) / "eval" / "atlas")
    out = out[:-4] if out.endswith((".pdf", ".png")) else out
    _grid_inputs(args.grid or [], GRID_OF_RUNS)
    for path in write_atlas(args.run, out, n=args.dims, k=args.images, data_sets=args.set, stamp=stamp(args.grid)):
        print(f"atlas: {path}")
    return 0


def cmd_import(args) -> int:
    from ..runs.released import import_checkpoint, write_run

    check_writable_dir(args.out)
    overrides = json_flag(args.config_json, "--config-json") if args.config_json else None
    imp = import_checkpoint(args.checkpoint, file=args.config, sets=args.set, args=args.args, overrides=overrides)
    path = write_run(imp, args.checkpoint, args.out, replace=args.replace)
    for flag in imp.flags:
        print(f"note: {flag}")
    print(f"imported {args.checkpoint} (sha256 {imp.sha256[:16]}): {path}")
    return 0


def cmd_export(args) -> int:
    from ..runs.export import export

    _input_file(args.checkpoint, "--checkpoint", "give the model.pt that `bayesncl pretrain` or `bayesncl import` "
                "wrote")
    check_writable_dir(args.out)
    for path in export(args.checkpoint, args.out, args.format, heads=args.heads, replace=args.replace):
        print(f"wrote {path}")
    return 0


def cmd_list(args) -> int:
    from .catalog import DEFAULT_KINDS, entries, render
    mark_ready()  # imports done: the work begins (bayesncl.core.startup)

    claims = None
    if args.grid is not None:
        claims = _read_grid(args.grid).config.get("claims") or None  # its plugins loaded, its claims checked
    print(render(entries(args.kinds or DEFAULT_KINDS, claims)), end="")
    return 0
