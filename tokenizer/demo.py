"""Demo step: train a small tokenizer on the demo shards, evaluate it, lock it and encode."""

from __future__ import annotations

from pretrain.artifacts import encoded as encoded_kind
from pretrain.artifacts import tokenizer_eval as eval_kind
from pretrain.command import recorded
from pretrain.demostep import DemoContext
from pretrain.errors import ArtifactError

DEMO_VOCAB = 4096
DEMO_SAMPLE_BYTES = 3_000_000
"""The demo's training sample: enough for a 4k vocabulary, small enough for 2 shared cores."""


def step(ctx: DemoContext) -> str:
    """Train (vocab 4096), evaluate (vs SentencePiece) and encode `ctx.artifacts["shards"]`."""
    with recorded(["pretrain", "demo"]):
        return _step(ctx)


def _step(ctx: DemoContext) -> str:
    from tokenizer.config import TokenizerTrainConfig
    from tokenizer.encode import encode
    from tokenizer.evaluate import evaluate
    from tokenizer.lock import load_locked
    from tokenizer.train import train

    shards = ctx.artifacts.get("shards")
    if shards is None:
        raise ArtifactError(
            "the tokenizer demo step needs the pipeline's shards "
            "(ctx.artifacts['shards']); run the pipeline step first"
        )
    tok_dir, enc_dir = ctx.out / "tokenizer", ctx.out / "encoded"
    if not ctx.reuse(tok_dir):
        train(
            TokenizerTrainConfig(
                data=str(shards),
                out=str(tok_dir),
                vocab_size=DEMO_VOCAB,
                sample={"max_bytes": DEMO_SAMPLE_BYTES},
            ),
        )
    tokenizer = load_locked(tok_dir)
    eval_dir = tok_dir / "eval"
    if not ctx.reuse(eval_dir):
        evaluate(tok_dir, shards, out=eval_dir)
    report = eval_kind.open(eval_dir).fields.summary
    if not ctx.reuse(enc_dir) or encoded_kind.open(enc_dir).tokenizer_sha256 != tokenizer.sha256:
        encode(tok_dir, shards, enc_dir, backend="inline")
    counts = encoded_kind.open(enc_dir).manifest.counts
    ctx.artifacts["tokenizer"] = tok_dir
    ctx.artifacts["encoded"] = enc_dir
    return (
        f"{tokenizer.id}: {report['bytes_per_token']:.2f} bytes/token on eval "
        f"(SentencePiece {report.get('baseline_bytes_per_token') or float('nan'):.2f}); "
        f"encoded {counts['documents']} docs, {counts['tokens']} tokens"
    )
