"""`pretrain mixture ...` commands."""

from __future__ import annotations

import argparse
from typing import Any

from pretrain.program import add_command, add_config_args, resolve_config
from pretrain.progress import warn


def register(sub: Any) -> None:
    mix = sub.add_parser("mixture", help="build and report global-quota data mixtures")
    msub = mix.add_subparsers(dest="mixture_command", metavar="MIXTURE_COMMAND", required=True)
    build = add_command(
        msub,
        ["mixture", "build"],
        _build,
        "build a mixture artifact (deterministic sample index) from a recipe",
    )
    add_config_args(build)
    report = add_command(
        msub,
        ["mixture", "report"],
        _report,
        "target vs realised shares of a built mixture, with a plot",
    )
    report.add_argument("directory", metavar="DIR")
    report.add_argument(
        "--run",
        default=None,
        metavar="RUN_DIR",
        help="compare a training run's tokens per component (RUN_DIR/metrics.jsonl) with the index",
    )
    report.add_argument(
        "--out", default=None, help="where to write report.json/report.png (default DIR/report)"
    )
    export = add_command(
        msub,
        ["mixture", "export"],
        _export,
        "a built mixture as Megatron-LM data: per-component prefixes and --data-args-path files",
    )
    export.add_argument("directory", metavar="MIXTURE_DIR")
    export.add_argument(
        "--megatron", action="store_true", required=True, help="the format (the only one)"
    )
    export.add_argument("--out", required=True, metavar="DIR")


def _build(args: argparse.Namespace) -> int:
    from mixtures.build import build_mixture, format_summary
    from mixtures.recipe import MixtureConfig

    config = resolve_config(MixtureConfig, args, _preflight)
    if config is None:
        return 0
    result = build_mixture(config)
    for warning in result.warnings:
        warn(f"pretrain mixture build: warning: {warning}")
    print(format_summary(result))
    return 0


def _preflight(config: Any) -> str:
    from mixtures.build import prepare

    prepared = prepare(config)
    return (
        f"encoded data and tokenizer {prepared.tokenizer.get('id', '?')} verified; "
        f"{len(prepared.docs)} components selected; quotas feasible"
    )


def _report(args: argparse.Namespace) -> int:
    from mixtures.report import format_report, write_report

    report = write_report(args.directory, args.out, args.run)
    print(format_report(report))
    return 0


def _export(args: argparse.Namespace) -> int:
    from mixtures.megatron import export_megatron

    manifest = export_megatron(args.directory, args.out)
    blends = " ".join(f"{args.out}/{name}" for name in manifest["blends"])
    print(
        f"exported {len(manifest['components'])} components ({manifest['counts']['tokens']} "
        f"tokens) -> {args.out}; Megatron-LM: --data-args-path {blends} --split 100,0,0"
    )
    return 0
