"""`pretrain tokenizer ...` commands."""

from __future__ import annotations

import argparse
from typing import Any

from pretrain.program import add_command, add_config_args, resolve_config


def _train(args: argparse.Namespace) -> int:
    from tokenizer.config import TokenizerTrainConfig
    from tokenizer.train import train

    config = resolve_config(TokenizerTrainConfig, args, _train_preflight)
    if config is None:
        return 0
    manifest = train(config)
    sample = manifest["counts"]
    if sample["vocab_size"] < config.vocab_size:
        print(
            f"note: the sample supports only {sample['vocab_size']} tokens, fewer than "
            f"vocab_size = {config.vocab_size}; train on more text for the full vocabulary"
        )
    print(
        f"tokenizer {manifest['tokenizer']['id']}: vocab {sample['vocab_size']}, trained on "
        f"{sample['sample_documents']} documents ({sample['sample_bytes'] / 1e6:.1f} MB) "
        f"-> {config.out}"
    )
    return 0


def _train_preflight(config: Any) -> str:
    from tokenizer.train import preflight

    return f"{len(preflight(config))} shards verified; out is free"


def _eval(args: argparse.Namespace) -> int:
    from tokenizer.evaluate import evaluate, format_table

    report = evaluate(
        args.tokenizer_dir,
        args.data,
        out=args.out,
        baseline=not args.no_baseline,
    )
    print(format_table(report))
    print(f"report: {report['out']}/report.json, plot: {report['out']}/compression.png")
    return 0


def _encode(args: argparse.Namespace) -> int:
    from pretrain.progress import attach
    from tokenizer.encode import encode, preflight

    attach(args.out)
    if args.dry_run:
        tokenizer, _, shards = preflight(args.tokenizer_dir, args.data, args.out)
        print(f"checked: tokenizer {tokenizer.info['id']} and {len(shards)} shards verified")
        return 0
    manifest = encode(
        args.tokenizer_dir,
        args.data,
        args.out,
        backend="inline" if args.no_ray else "ray",
        num_cpus=args.num_cpus,
        min_prefix_documents=args.min_prefix_documents,
    )
    counts = manifest["counts"]
    print(
        f"encoded {counts['documents']} documents, {counts['tokens']} tokens in "
        f"{len(manifest['prefixes'])} prefix(es) ({counts['shards_skipped']} already done) with "
        f"{manifest['tokenizer']['id']} -> {args.out}"
    )
    return 0


def register(sub: Any) -> None:
    tok = sub.add_parser("tokenizer", help="train, evaluate, lock and encode with a BPE tokenizer")
    tsub = tok.add_subparsers(dest="tokenizer_command", metavar="TOKENIZER_COMMAND", required=True)
    train = add_command(
        tsub,
        ["tokenizer", "train"],
        _train,
        "train a byte-level BPE on a tag-weighted sample of shards",
    )
    add_config_args(train)
    ev = add_command(
        tsub,
        ["tokenizer", "eval"],
        _eval,
        "evaluate a tokenizer per domain and language on the eval split",
    )
    ev.add_argument("tokenizer_dir", metavar="TOKENIZER_DIR")
    ev.add_argument("--data", required=True, metavar="SHARDS_DIR")
    ev.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help="eval artifact directory (default: TOKENIZER_DIR/eval)",
    )
    ev.add_argument(
        "--no-baseline", action="store_true", help="skip training the SentencePiece BPE baseline"
    )
    enc = add_command(
        tsub,
        ["tokenizer", "encode"],
        _encode,
        "encode shards to Megatron .bin/.idx with per-document tag sidecars",
    )
    enc.add_argument("tokenizer_dir", metavar="TOKENIZER_DIR")
    enc.add_argument("--data", required=True, metavar="SHARDS_DIR")
    enc.add_argument("--out", required=True, metavar="DIR")
    enc.add_argument(
        "--no-ray",
        action="store_true",
        help="encode shards one after another in this process (no Ray)",
    )
    enc.add_argument(
        "--num-cpus",
        type=float,
        default=1.0,
        help="CPUs reserved per Ray shard task (fractional allowed)",
    )
    enc.add_argument(
        "--min-prefix-documents",
        type=int,
        default=1000,
        help="pack consecutive shards into .bin/.idx prefixes of at least this many documents "
        "(a short tail joins the one before), so no Megatron split (e.g. 98,1,1) is empty",
    )
    enc.add_argument(
        "--dry-run",
        action="store_true",
        help="verify the tokenizer, the shards and --out, then exit without encoding",
    )
