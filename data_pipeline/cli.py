"""`pretrain data ...` commands."""

from __future__ import annotations

import argparse
from typing import Any

from pretrain.cli_utils import add_command, add_config_args, resolve_config


def run(args: argparse.Namespace) -> int:
    """`pretrain data run CONFIG`: tag raw inputs into shards, ledger.json and a manifest."""
    from data_pipeline.config import PipelineConfig

    config = resolve_config(PipelineConfig, args, _preflight)
    if config is None:
        return 0
    from data_pipeline.runner import run_pipeline
    from pretrain.command import current_command

    result = run_pipeline(config, ray_address=args.ray_address, command=current_command())
    print(f"pretrain data run: {result.summary()}")
    return 0


def _preflight(config: Any) -> str:
    from data_pipeline.runner import preflight

    skipped: list[dict[str, str]] = []
    stages, inputs = preflight(config, skipped)
    names = ", ".join(stage.name for stage in stages)
    return (
        f"{len(inputs)} input files open; stages {names} configured; models verified; "
        f"{len(skipped)} files of directory inputs skipped"
    )


def train_lm(args: argparse.Namespace) -> int:
    """`pretrain data train-lm CONFIG` (handler lives with the models)."""
    from data_pipeline.models.cli_handlers import train_lm as handler

    return handler(args)


def train_classifier(args: argparse.Namespace) -> int:
    """`pretrain data train-classifier CONFIG` (handler lives with the models)."""
    from data_pipeline.models.cli_handlers import train_classifier as handler

    return handler(args)


def register(sub: Any) -> None:
    data = sub.add_parser("data", help="data jobs: tag, filter, dedup raw text into shards")
    dsub = data.add_subparsers(dest="data_command", metavar="DATA_COMMAND", required=True)
    run_parser = add_command(
        dsub,
        ["data", "run"],
        run,
        "run the tagging pipeline on raw inputs, writing tagged Parquet "
        "shards, ledger.json and a manifest",
    )
    add_config_args(run_parser)
    run_parser.add_argument(
        "--ray-address",
        default=None,
        help="existing Ray cluster (default: RAY_ADDRESS or a local instance)",
    )
    lm = add_command(
        dsub,
        ["data", "train-lm"],
        train_lm,
        "train a KenLM model artifact from reference text",
    )
    add_config_args(lm)
    clf = add_command(
        dsub,
        ["data", "train-classifier"],
        train_classifier,
        "train a fastText classifier artifact from labelled JSONL",
    )
    add_config_args(clf)
