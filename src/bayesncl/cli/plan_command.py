"""`bayesncl plan`: its arguments and its handler; the planning itself is bayesncl.planning.plan."""

from __future__ import annotations

import argparse

from ..core.errors import ConfigError, DataError
from .workflow import grid_argument
from ..planning.plan import POWER, family_line, make_plan, overlay, render

__all__ = ["add_command", "read_workflow"]


NO_PILOT = ("no pilot: run the grid once (`snakemake --cores 2` for the demo, `snakemake --profile slurm all` "
            "for config/paper.yaml) and pass its <results>/summary/runs.csv as --pilot")


def add_command(sub) -> None:
    """`bayesncl plan`, registered by the CLI."""
    sp = sub.add_parser("plan", help="the seeds each claim needs, from a pilot grid's runs.csv, and the overlay that "
                                     "adds them",
                        description=f"From a finished grid (the pilot), the seeds each claim of the claims table needs "
                                    f"for {POWER:.0%} power at its familywise level in the second look, what they cost "
                                    "in GPU-hours, and a config overlay that runs them: snakemake --profile slurm all "
                                    "--configfile config/paper.yaml --configfile plan.yaml (docs/METHOD.md section 9, "
                                    "\"Planning\"; docs/CLUSTER.md).")
    sp.add_argument("--pilot", metavar="CSV", help="the pilot's runs.csv (`bayesncl summarize`)")
    grid = sp.add_mutually_exclusive_group(required=True)
    grid_argument(grid, "the workflow config the pilot ran, e.g. config/paper.yaml")
    grid.add_argument("--grid-json", help=argparse.SUPPRESS)  # the workflow's merged config
    sp.add_argument("--out", metavar="YAML", help="write the overlay here (default: print only)")
    sp.add_argument("--text", metavar="FILE", help="write the printed plan here too")
    sp.add_argument("--gpu", default="h200", help="the GPU whose measured rate prices the added runs (default h200)")
    sp.add_argument("--measured", metavar="JSON", help="your GPU's gpu_check.json instead (benchmarks/gpu_check.py)")
    sp.set_defaults(func=command)


def read_workflow(grid_files: list[str] | None, grid_json: str | None = None) -> dict:
    """The workflow config as Snakemake reads it, with the same one-line refusals (cli.workflow.load_workflow: the files
    merged, or the JSON the workflow passes; its schema, plugins, every run of its grid and its declared claims)."""
    from pathlib import Path

    from .workflow import load_workflow, load_workflow_json

    if grid_files is not None:
        for path in grid_files:
            if not Path(path).is_file():
                raise ConfigError(f"--grid {path} does not exist; give the workflow config the pilot ran, e.g. "
                                  "config/paper.yaml")
        flow = load_workflow(grid_files)
    else:
        flow = load_workflow_json(grid_json)
    return flow.config


def _output(path: str | None, flag: str) -> None:
    """An output file's place, checked before any work: not a folder, in a folder this process can write."""
    from pathlib import Path

    from ..core.atomic import check_writable_dir
    from ..core.errors import OutputError

    if path is None:
        return
    if Path(path).is_dir():
        raise OutputError(f"{flag} {path} is a folder; give the file to write, e.g. {Path(path) / 'plan.yaml'}")
    check_writable_dir(Path(path).parent, what=f"{flag} {path}")


def command(args) -> int:
    from pathlib import Path

    import yaml

    from ..core.atomic import atomic_write_text
    from ..planning.estimate import measured_rates
    from ..grid.expand import pilot_seeds
    from ..report.names import DATASET_NAMES
    from ..report.summary import read_summary
    from ..core.startup import mark_ready
    mark_ready()

    _output(args.out, "--out")
    _output(args.text, "--text")
    wf = read_workflow(args.grid, args.grid_json)
    if not args.pilot:
        raise ConfigError(NO_PILOT)
    if not Path(args.pilot).is_file():
        raise DataError(f"--pilot {args.pilot}: no such file; {NO_PILOT}")
    rates = measured_rates(args.gpu, args.measured)
    if pilot_seeds(wf):  # a grown grid: its table is the second look
        text = ("This grid is already a second look (its `plan:` names the pilot's seeds): the verdict rule spends "
                "its error over two looks and plans no third; its claims table gives the verdicts.\n")
        layer = {}
    else:
        plan = make_plan(read_summary(args.pilot), wf, rates, pilot=f"--pilot {args.pilot}")
        text = render(plan, DATASET_NAMES) + family_line(plan, DATASET_NAMES) + "\n"
        layer = overlay(plan, wf)
    print(text, end="")
    if args.text:
        atomic_write_text(args.text, text)
    if args.out:
        how = ("# bayesncl plan: the seeds each claim needs (docs/METHOD.md section 9, \"Planning\"). Run it after the "
               "grid's own config:\n#   snakemake --profile slurm all --configfile <grid.yaml> --configfile "
               f"{args.out}\n")
        atomic_write_text(args.out, how + (yaml.safe_dump(layer, sort_keys=False, default_flow_style=None)
                                           if layer else "{}\n"))
        print(f"overlay: {args.out}")
    return 0
