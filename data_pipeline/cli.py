"""`pretrain data ...` commands."""

from __future__ import annotations

from typing import Any

from pretrain.cli_utils import add_command, add_config_args
from pretrain.placeholder import not_built


def register(sub: Any) -> None:
    data = sub.add_parser("data", help="data jobs: tag, filter, dedup raw text into shards")
    dsub = data.add_subparsers(dest="data_command", metavar="DATA_COMMAND", required=True)
    run = add_command(dsub, ["data", "run"], not_built("pretrain data run", 3),
                      "run the tagging pipeline on raw inputs, writing tagged Parquet shards")
    add_config_args(run)
    run.add_argument("--ray-address", default=None,
                     help="existing Ray cluster (default: RAY_ADDRESS or a local instance)")
    lm = add_command(dsub, ["data", "train-lm"], not_built("pretrain data train-lm", 4),
                     "train a KenLM model artifact from reference text")
    add_config_args(lm)
    clf = add_command(dsub, ["data", "train-classifier"],
                      not_built("pretrain data train-classifier", 3),
                      "train a fastText classifier artifact from labelled JSONL")
    add_config_args(clf)
