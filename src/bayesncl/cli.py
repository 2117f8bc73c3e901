"""Command line: `bayesncl pretrain | evaluate | summarize | report | make-synthetic`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .atomic import atomic_write_text
from .config import ConfigError


def _pretrain(args) -> int:
    from .config import resolve
    from .data import check_data
    from .train import pretrain

    base = json.loads(args.config_json) if args.config_json else None
    cfg = resolve(file=args.config, base=base, sets=args.set)
    check_data(cfg["data"])
    path = pretrain(cfg, args.out, progress=not args.quiet)
    print(f"pretrained model: {path}")
    return 0


def _evaluate(args) -> int:
    from .evaluation import evaluate

    path = evaluate(args.checkpoint, args.out, only=args.only, sets=args.set, expect_config=args.config,
                    progress=not args.quiet)
    print(f"metrics: {path}")
    return 0


def _summarize(args) -> int:
    from .report.summary import write_summary

    manifest = args.manifest
    if args.manifest_json is not None:
        entries = json.loads(args.manifest_json)
        manifest = Path(args.out).with_name("manifest.json")
        atomic_write_text(manifest, json.dumps(entries, indent=1) + "\n")
    write_summary(manifest, args.out)
    print(f"summary: {args.out}")
    return 0


def _report(args) -> int:
    from .report import write_report

    write_report(args.summary, args.out)
    print(f"tables and figures under {args.out}")
    return 0


def _make_synthetic(args) -> int:
    from .config import resolve
    from .data import load_split

    cfg = resolve(file=args.config, sets=args.set)
    for split in ("train", "test"):
        ds = load_split(cfg["data"], split)
        print(f"{split}: {len(ds.labels)} images, {ds.num_classes} classes")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from .evaluation import SECTIONS

    p = argparse.ArgumentParser(prog="bayesncl", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    def common(sp, config_required=False):
        sp.add_argument("--config", required=config_required, help="YAML config file")
        sp.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key, e.g. --set method.rho=0.7 (repeatable)")
        sp.add_argument("--quiet", action="store_true", help="no progress bar")

    sp = sub.add_parser("pretrain", help="pretrain one configuration (resumes from DIR/checkpoint.pt)")
    common(sp)
    sp.add_argument("--config-json", help="config as a JSON object (what the workflow passes), under --set")
    sp.add_argument("--out", required=True, metavar="DIR")
    sp.set_defaults(func=_pretrain)

    sp = sub.add_parser("evaluate", help="evaluate a pretrained checkpoint")
    sp.add_argument("--checkpoint", required=True, metavar="CKPT")
    sp.add_argument("--out", required=True, metavar="DIR")
    sp.add_argument("--only", nargs="+", choices=SECTIONS, help="compute only these sections")
    sp.add_argument("--config", help="the run's config: refuse a checkpoint trained with a different one")
    sp.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override an eval.* or data.* key (e.g. data.root, eval.waterbirds_root)")
    sp.add_argument("--quiet", action="store_true")
    sp.set_defaults(func=_evaluate)

    sp = sub.add_parser("summarize", help="collect metrics.json files named by a manifest into one CSV")
    src = sp.add_mutually_exclusive_group(required=True)
    src.add_argument("--manifest", help="JSON list of {metrics, sets, variant, sweep} entries")
    src.add_argument("--manifest-json", help="the same list inline (kept as manifest.json beside --out)")
    sp.add_argument("--out", required=True)
    sp.set_defaults(func=_summarize)

    sp = sub.add_parser("report", help="render Tables 1-7 and Figures 3-4 from the summary CSV")
    sp.add_argument("--summary", required=True)
    sp.add_argument("--out", required=True, metavar="DIR")
    sp.set_defaults(func=_report)

    sp = sub.add_parser("make-synthetic", help="generate (and cache) the synthetic dataset")
    common(sp)
    sp.set_defaults(func=_make_synthetic)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ConfigError, FileNotFoundError, ValueError) as e:  # DataError is a ValueError
        print(f"bayesncl {args.command}: error: {e}", file=sys.stderr)
        return 2
    except RuntimeError as e:
        from .train import TrainingDiverged  # only pretrain raises it, and has imported it

        if not isinstance(e, TrainingDiverged):
            raise
        print(f"bayesncl {args.command}: training diverged: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
