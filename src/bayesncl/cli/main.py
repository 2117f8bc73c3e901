"""Command line: `bayesncl pretrain | evaluate | summarize | report | jobs | atlas | document | pdf |
make-synthetic | prepare | stale | status | estimate | plan | arrange-val | import | export | list`.

The `bayesncl` script (and `python -m bayesncl`) is bayesncl.cli.entry: a command the workflow routes goes to the fork
server's client (bayesncl.cli.forkserver) without importing this module, which runs only where no server can run it;
any other runs `main` here. The parser is here, each command's handler in bayesncl.cli.commands."""

from __future__ import annotations

import argparse
import signal
import sys

from . import commands
from ..core.errors import REQUEUE_EXIT, TERMINATED, BayesNCLError
from ..runs.ownership import replace_help
from ..settings.plugins import FLAG as PLUGIN_FLAG
from ..settings.registry import METHODS
from .workflow import grid_argument


def _weights_commands(sub, common) -> None:
    """`bayesncl import` and `bayesncl export` (bayesncl.runs)."""
    from ..runs.export import FORMATS

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
    sp.add_argument("--config-json", help=argparse.SUPPRESS)  # the workflow's run config (bayesncl.grid.expand)
    sp.add_argument("--out", required=True, metavar="DIR", help="run folder: model.pt, config.resolved.yaml")
    sp.add_argument("--replace", action="store_true", help=replace_help("the run"))
    sp.set_defaults(func=commands.cmd_import)

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
    sp.set_defaults(func=commands.cmd_export)


def build_parser() -> argparse.ArgumentParser:
    from ..evaluation.sections import SECTIONS

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
        epilog=f"methods (--set method.name=...): {', '.join(METHODS)}\n{_plugin_settings()}"
               "a plugin's method: --plugin FILE.py (docs/EXTENDING.md)\n"
               "every method, dataset, measure and claim with its settings: bayesncl list [--plugin FILE.py]\n"
               "every key, its default and what it allows: bayesncl list settings (src/bayesncl/settings/config.py)\n"
               "formulas, defaults and protocols: docs/METHOD.md\n"
               "example: bayesncl pretrain --out runs/demo --set method.name=ncl --set train.epochs=20")
    common(sp)
    sp.add_argument("--config-json", help=argparse.SUPPRESS)  # the workflow's run config, under --set
    sp.add_argument("--out", required=True, metavar="DIR",
                    help="run folder: checkpoint.pt, model.pt (what evaluate reads), log.jsonl, "
                         "config.resolved.yaml; created if missing")
    sp.add_argument("--replace", action="store_true", help=replace_help("the run") + "; a resumed run is its own")
    sp.set_defaults(func=commands.cmd_pretrain)

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
    sp.add_argument("--trigger-json", help=argparse.SUPPRESS)  # {section: its rerun trigger}, recorded (grid.stale)
    sp.add_argument("--quiet", action="store_true", help="no progress bar")
    sp.add_argument("--replace", action="store_true", help=replace_help("the evaluation"))
    sp.set_defaults(func=commands.cmd_evaluate)

    sp = sub.add_parser("summarize", help="collect every run's eval/<section>.json of a grid into one CSV",
                        description="Expand the workflow config's grid (as Snakemake does) and collect each run's "
                                    "evaluation files, results/runs/<run>/eval/<section>.json, into one CSV row.")
    src = sp.add_mutually_exclusive_group(required=True)
    grid_argument(src, "the workflow config, e.g. config/config.yaml")
    src.add_argument("--grid-json", help=argparse.SUPPRESS)  # the workflow's config, as Snakemake holds it
    sp.add_argument("--out", required=True, metavar="CSV",
                    help="the summary CSV to write (one row per run); metrics.json, the dvc metrics, "
                         "is written beside it")
    sp.set_defaults(func=commands.cmd_summarize)

    sp = sub.add_parser("stale", help="list the jobs `snakemake` would run on a grid's results, and why",
                        description="Each job `snakemake` would run on the grid's results (what `snakemake -n` "
                                    "plans), one line each with why: a pretraining job whose run's recorded config "
                                    "(results/runs/<run>/config.resolved.yaml, on what decides training: "
                                    "bayesncl.grid.expand.trigger_config) or plugin code differs from today's; an "
                                    "evaluation job whose file's recorded trigger differs; every job after them, and "
                                    "every job whose missing output one of them reads. `snakemake` makes them, or "
                                    "exactly these: snakemake --cores N --configfile CONFIG --forcerun $(bayesncl "
                                    "stale --grid CONFIG --targets). Jobs not compared, and what is not compared here, "
                                    "are named on stderr.")
    grid_argument(sp, "the workflow config, e.g. config/config.yaml", required=True)
    sp.add_argument("--results", metavar="DIR", help="the results folder (default: the workflow config's results)")
    sp.add_argument("--targets", action="store_true", help="print only the outputs, made before, of the jobs to run "
                                                           "(--forcerun takes them; the report's jobs follow)")
    sp.add_argument("--all", action="store_true", help="also the jobs whose output is missing and that no job to "
                                                       "run reads (snakemake makes them where a target needs them)")
    sp.set_defaults(func=commands.cmd_stale)

    sp = sub.add_parser("report", help="render Tables 1-7, the claims table and the figures from the summary CSV")
    sp.add_argument("--summary", required=True, metavar="CSV",
                    help="the runs.csv that `bayesncl summarize` wrote; one without runs or without a run's "
                         "columns is an error (exit 2), and the tables already under DIR stay as they were")
    sp.add_argument("--out", required=True, metavar="DIR",
                    help="writes DIR/tables/{table1..7,claims}.{tex,md} and "
                         "DIR/figures/{figure3,figure4a,figure4b,gates}.{pdf,png}")
    grid_argument(sp, "the workflow config the runs came from: named, with its hash and the commit, in every file "
                      "written")
    sp.add_argument("--smoke", action="store_true", help="mark every table as a smoke run's (not results)")
    sp.set_defaults(func=commands.cmd_report)

    sp = sub.add_parser("document", help="the reproduction report's sources: report.tex, the HTML report's "
                                         "pages and captions, the provenance, the DVC plot data",
                        description="Assemble the reproduction report from the generated tables and figures: "
                                    "DIR/report/report.tex (build it with `bayesncl pdf`), DIR/report/html/*.html "
                                    "and DIR/report/captions/*.rst (for `snakemake --report`), "
                                    "DIR/report/provenance.{rst,json} and DIR/plots/ (for `dvc plots`).")
    sp.add_argument("--summary", required=True, metavar="CSV", help="the runs.csv that `bayesncl summarize` wrote")
    sp.add_argument("--out", required=True, metavar="DIR",
                    help="the results folder that holds tables/ and figures/ (`bayesncl report --out`)")
    grid_argument(sp, "the workflow config the runs came from (named with its hash)")
    sp.add_argument("--figures", nargs="*", default=[], metavar="STEM",
                    help="figures to show, in order: stems of DIR/figures/STEM.pdf (e.g. figure3 atlas_synthetic)")
    sp.add_argument("--overrides-json", help=argparse.SUPPRESS)  # the workflow's --config overrides
    sp.set_defaults(func=commands.cmd_document)

    sp = sub.add_parser("pdf", help="compile the reproduction report (report.tex) with pdflatex",
                        description="Compile DIR/report/report.tex from `bayesncl document` with pdflatex (the log "
                                    "stays beside it) and write the PDF.")
    sp.add_argument("--tex", required=True, metavar="TEX", help="the report.tex that `bayesncl document` wrote")
    sp.add_argument("--out", required=True, metavar="PDF", help="the PDF to write, e.g. results/report.pdf")
    sp.set_defaults(func=commands.cmd_pdf)

    sp = sub.add_parser("jobs", help="what each workflow job cost: its benchmark files in one CSV, totals per rule",
                        description="Collect the workflow's benchmark files (wall time, peak memory, GPUs held) "
                                    "into one CSV row per job, and the totals per rule and the GPU-hours as run "
                                    "into a Markdown table beside it.")
    sp.add_argument("--benchmarks", required=True, metavar="DIR",
                    help="the workflow's <results>/benchmarks folder; a file in it without a record of wall "
                         "seconds, or no file at all, is an error (exit 2)")
    sp.add_argument("--out", required=True, metavar="CSV", help="the CSV to write; the totals go to the .md beside it")
    sp.add_argument("--smoke", action="store_true", help="mark the totals as a smoke run's")
    sp.set_defaults(func=commands.cmd_jobs)

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
    grid_argument(sp, "the workflow config the runs came from: named, with its hash and the commit, in the "
                      "figures' metadata")
    sp.set_defaults(func=commands.cmd_atlas)

    sp = sub.add_parser("make-synthetic", help="generate (and cache) the synthetic dataset",
                        description="Generate the synthetic dataset of the config into its cache: data.cache_dir, "
                                    "else $BAYESNCL_CACHE, else ~/.cache/bayesncl.")
    common(sp)
    sp.set_defaults(func=commands.cmd_make_synthetic)

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
    sp.set_defaults(func=commands.cmd_prepare)

    sp = sub.add_parser("status", help="the grid's progress: each run done, running (epoch, loss, ETA), failed, "
                                       "waiting; flags and totals",
                        description="Read while the grid runs (nothing is written): every run's state from its "
                                    "folder under RESULTS/runs and, with --grid, the runs still waiting.")
    sp.add_argument("results", nargs="?", metavar="RESULTS", help="the grid's results folder (default: the grid's "
                                                                   "`results:`, else results)")
    grid_argument(sp, "the workflow config (e.g. config/paper.yaml): lists the runs not started too")
    sp.add_argument("--only", nargs="+", metavar="STATE", choices=["unreadable", "failed", "running", "requeued",
                                                                    "evaluating", "waiting", "done"],
                    help="list only runs in these states (the totals count every run)")
    sp.set_defaults(func=commands.cmd_status)

    sp = sub.add_parser("estimate", help="GPU-hours and submissions of a grid before it runs, for a named GPU",
                        description="What a workflow config costs: pretraining and evaluation GPU-hours and the "
                                    "SLURM submissions, from benchmarks/gpu_check.py's measured rate on the GPU.")
    grid_argument(sp, "the workflow config, e.g. config/paper.yaml", required=True)
    sp.add_argument("--gpu", help="a GPU with a stored gpu_check measurement, e.g. h200")
    sp.add_argument("--measured", metavar="JSON", help="your GPU's DIR/gpu_check.json (benchmarks/gpu_check.py)")
    sp.add_argument("--time-limit", type=float, metavar="MINUTES",
                    help="the partition's time limit: a run needing more is that many pretraining submissions")
    sp.add_argument("--stop-margin", type=float, metavar="SECONDS",
                    help="the profile's stop_margin_s: a pretraining job stops that long before its allocation "
                         "ends (default: 600, the profile's)")
    sp.add_argument("--results", metavar="DIR", help="the grid's results folder, whose finished jobs "
                                                      "(DIR/benchmarks) the requests learn from (default: the "
                                                      "grid's `results:`, else results)")
    sp.add_argument("--images", action="append", default=[], metavar="DATASET=N",
                    help="training images of a dataset whose size is not known before it is read (an image folder)")
    sp.add_argument("--smoke", action="store_true", help="the smoke run's grid (--config smoke=true)")
    sp.set_defaults(func=commands.cmd_estimate)

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
    sp.set_defaults(func=commands.cmd_arrange_val)

    _weights_commands(sub, common)
    from .plan_command import add_command

    add_command(sub)
    from .catalog import KINDS

    sp = sub.add_parser("list", help="the methods, datasets, evaluation sections, measures and claims there are, "
                                     "each with its settings (type, bounds, default, doc)",
                        description="What the package and the loaded plugins offer, each with its settings: key, "
                                    "type, what it allows, default and doc. Plugins: a grid's (--grid), or by hand "
                                    "(--plugin FILE.py, $BAYESNCL_PLUGINS).")
    sp.add_argument("kinds", nargs="*", choices=[[], *KINDS], metavar="KIND",  # []: none given (argparse checks it)
                    help=f"what to list: {', '.join(KINDS)} (default: all but settings, every key of the package's "
                         "config)")
    grid_argument(sp, "a workflow config: its plugins and its own claims too")
    sp.set_defaults(func=commands.cmd_list)
    for sp in dict.fromkeys(sub.choices.values()):  # every command takes plugins by hand (main reads them first)
        sp.add_argument(PLUGIN_FLAG, action="append", default=[], metavar="FILE.py|MODULE", help=PLUGIN_HELP)
    return p


PLUGIN_HELP = ("a plugin module to load (its .py file, or its name on $BAYESNCL_PLUGIN_PATH or installed), as a "
               "workflow config's plugins: (repeatable; also $BAYESNCL_PLUGINS)")


def _plugin_settings() -> str:
    """The settings of the plugins' methods, for `pretrain --help` (catalog.entries: the one reader)."""
    from .catalog import entries

    lines = [f"  {m.name}: {r.key} ({r.kind}; {r.allowed}; default {r.default!r}): {r.doc}"
             for m in entries(["methods"])["methods"] for r in m.settings if r.declared]
    return "plugin methods' own settings (--set method.KEY=...):\n" + "\n".join(lines) + "\n" if lines else ""


def _plugins_given(argv) -> list[str]:
    """The --plugin items anywhere on the command line, read before the parser is built (its help names what
    they register)."""
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    pre.add_argument(PLUGIN_FLAG, action="append", default=[])
    return pre.parse_known_args(argv)[0].plugin


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
            from ..settings.plugins import load_from_env, load_given

            load_from_env()  # the workflow's plugins (docs/EXTENDING.md): their methods, datasets and sections
            load_given(_plugins_given(sys.argv[1:] if argv is None else argv))  # by hand (--plugin)
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
