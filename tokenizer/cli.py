"""`pretrain tokenizer ...` commands."""

from __future__ import annotations

from typing import Any

from pretrain.cli_utils import add_command, add_config_args
from pretrain.placeholder import not_built


def register(sub: Any) -> None:
    tok = sub.add_parser("tokenizer", help="train, evaluate, lock and encode with a BPE tokenizer")
    tsub = tok.add_subparsers(dest="tokenizer_command", metavar="TOKENIZER_COMMAND", required=True)
    train = add_command(tsub, ["tokenizer", "train"], not_built("pretrain tokenizer train", 5),
                        "train a byte-level BPE on a tag-weighted sample of shards")
    add_config_args(train)
    ev = add_command(tsub, ["tokenizer", "eval"], not_built("pretrain tokenizer eval", 5),
                     "evaluate a tokenizer per domain and language on the eval split")
    ev.add_argument("tokenizer_dir", metavar="TOKENIZER_DIR")
    ev.add_argument("--data", required=True, metavar="SHARDS_DIR")
    enc = add_command(tsub, ["tokenizer", "encode"], not_built("pretrain tokenizer encode", 5),
                      "encode shards to Megatron .bin/.idx with per-document tag sidecars")
    enc.add_argument("tokenizer_dir", metavar="TOKENIZER_DIR")
    enc.add_argument("--data", required=True, metavar="SHARDS_DIR")
    enc.add_argument("--out", required=True, metavar="DIR")
