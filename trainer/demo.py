"""Demo step: the gated launch of configs/train_full.yaml, shrunk by an explicit tiny override.

Runs after the ablation step: `pretrain launch configs/train_full.yaml --set ...` in its own
process (torchrun, one CPU rank, gloo, fp32) on the chosen mixture, so the full-size config's gate
is exercised for real. When the ablation report does not clear the gate, the demo launches with
`--override-gate` and the refusal is recorded in the run manifest (and in the summary line).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from pretrain.artifacts import mixture as mixture_kind
from pretrain.artifacts import run as run_kind
from pretrain.config import load_config
from pretrain.demostep import DemoContext
from pretrain.errors import GateRefused, PretrainError
from trainer.config import TrainConfig

REPO = Path(__file__).resolve().parent.parent
FULL_CONFIG = REPO / "configs" / "train_full.yaml"
DEMO_STEPS = 12

TINY_OVERRIDE = {
    "model.num_layers": 2,
    "model.hidden_size": 128,
    "model.num_attention_heads": 4,
    "model.num_query_groups": 2,
    "model.ffn_hidden_size": 352,
    "model.vocab_size": "null",
    "model.rotary_base": 10000,
    "parallel.gpus_per_node": 1,
    "parallel.backend": "gloo",
    "parallel.overlap_grad_reduce": "false",
    "optim.precision": "fp32",
    "parallel.zero": 0,
    "optim.lr": 0.003,
    "optim.warmup_fraction": 0.1,
    "checkpoint.every": 6,
    "checkpoint.keep_last": 2,
    "checkpoint.keep_every": "null",
    "checkpoint.async_save": "false",
    "metrics.trackers": "[tensorboard]",
}
"""The explicit CPU shrink of the 1B config: a 2-layer, 128-wide model on one gloo rank."""


def demo_overrides(ctx: DemoContext) -> list[str]:
    mixture = Path(ctx.artifacts["mixture"])
    fields = mixture_kind.open(mixture).fields
    seq_length = max(p.seq_length for p in fields.phases)
    global_batch = fields.global_batch
    if global_batch is None:
        raise PretrainError(
            f"{mixture} records no global_batch; rebuild it with `pretrain mixture build`"
        )
    batches = sum(p.num_sequences for p in fields.phases) // global_batch
    sets = {
        **TINY_OVERRIDE,
        "run.out_dir": str(ctx.out / "run"),
        "run.train_steps": min(DEMO_STEPS, batches),
        "model.seq_length": seq_length,
        "batch.global_batch_size": global_batch,
        "batch.micro_batch_size": max(1, global_batch // 2),
        "data.mixture_dir": str(mixture),
        "data.train_tokens": "null",
    }
    if "tokenizer" in ctx.artifacts:
        sets["data.tokenizer_dir"] = str(ctx.artifacts["tokenizer"])
    if "ablation" in ctx.artifacts:
        sets["gate.report_dir"] = str(ctx.artifacts["ablation"])
    if "evalsets" in ctx.artifacts:  # evaluation during training, every checkpoint interval
        sets["eval.every"] = TINY_OVERRIDE["checkpoint.every"]
        sets["eval.sets"] = str(ctx.artifacts["evalsets"])
        sets["eval.max_docs"] = 20
    return [f"{key}={value}" for key, value in sets.items()]


def _gate_args(overrides: list[str]) -> list[str]:
    from trainer.launch import gate_decision

    config = load_config(TrainConfig, FULL_CONFIG, overrides)
    try:
        gate_decision(config, None)
        return []
    except GateRefused as exc:
        return ["--override-gate", f"demo: the ablation report did not clear the gate ({exc})"]


def step(ctx: DemoContext) -> str:
    """Launch the full config's tiny override on the chosen mixture; sets ctx.artifacts['run']."""
    if "mixture" not in ctx.artifacts:
        raise PretrainError("the launch step needs ctx.artifacts['mixture']; run the mixture step")
    run_dir = ctx.out / "run"
    overrides = demo_overrides(ctx)
    if not ctx.reuse(run_dir):
        import shutil

        shutil.rmtree(run_dir, ignore_errors=True)
        argv = [sys.executable, "-m", "trainer", "launch", str(FULL_CONFIG), "--nproc", "1"]
        for item in overrides:
            argv += ["--set", item]
        argv += _gate_args(overrides)
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise PretrainError(f"pretrain launch failed: {proc.stderr.strip()[-600:]}")
    ctx.artifacts["run"] = run_dir
    opened = run_kind.open(run_dir)
    summary = opened.manifest.counts
    gate = (opened.fields.gate or {}).get("status", "?")
    losses = _loss_range(run_dir)
    return (
        f"{summary['steps']} steps of train_full.yaml (tiny override, "
        f"{summary['parameters'] / 1e6:.2f}M params), loss {losses}, gate {gate} -> {run_dir}"
    )


def _loss_range(run_dir: Path) -> str:
    from trainer.metrics import read_metrics

    losses = [r["loss"] for r in read_metrics(run_dir / "metrics.jsonl") if "loss" in r]
    return f"{losses[0]:.3f} -> {losses[-1]:.3f}" if losses else "n/a"
