"""GPU claim (one H200/H100, at most ~5 minutes): our stack (Megatron-Core GPTModel with the GPU
fast path of trainer/model.py: TransformerEngine layers when installed, fused RoPE / bias-
activation / softmax, bf16 params with fp32 main grads, megatron DDP and optimizer) reaches at least
0.9x the tokens/s of a plain-PyTorch GPT of the same shape in bf16 autocast (SDPA attention, fused
AdamW), interleaved in one process, on two cases: the 1B shape of configs/train_full.yaml at seq
2048 and the same model at seq 4096. MFU of both is (6*N + 12*L*S*H*Q) * tokens/s / peak
(trainer.flops, the formula `pretrain plan` uses), peak = 989 TFLOP/s dense bf16.

It also runs the ZeRO stages megatron-core only supports on CUDA (parallel.zero 2 and 3, megatron_fsdp)
for a few steps next to stage 0 and records their losses (one GPU: DP = 1, so this checks that the
code path runs and agrees, not the sharding's memory).

    python benchmarks/gpu_trainer.py              # on the GPU machine (writes results/trainer_gpu.json)
    python benchmarks/gpu_trainer.py --dry-run    # anywhere: tiny shape, CPU, fp32, same code path

The device machine has Python 3.12 and its own CUDA torch but no megatron-core: install a carried
cp312 wheel first: `pip install --no-deps megatron_core-0.16.1-cp312-*.whl psutil`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

GPU_SHAPE = {
    "num_layers": 16,
    "hidden_size": 2048,
    "num_attention_heads": 32,
    "num_query_groups": 8,
    "ffn_hidden_size": 8192,
    "vocab_size": 32768,
    "seq_length": 2048,
}
GPU_BATCH = {"micro_batch_size": 4, "global_batch_size": 16}
GPU_CASES = [
    ("1b-seq2048", GPU_SHAPE, GPU_BATCH),
    (
        "1b-seq4096",
        {**GPU_SHAPE, "seq_length": 4096},
        {"micro_batch_size": 2, "global_batch_size": 8},
    ),
]
DRY_SHAPE = {
    "num_layers": 2,
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_query_groups": 2,
    "ffn_hidden_size": 128,
    "vocab_size": 256,
    "seq_length": 64,
}
DRY_BATCH = {"micro_batch_size": 2, "global_batch_size": 4}
DRY_CASES = [("tiny", DRY_SHAPE, DRY_BATCH)]
PEAK_FLOPS = 989e12


def _config(
    run_dir: Path, shape: dict[str, int], batch: dict[str, int], gpu: bool, zero: int = 0
) -> Any:
    from pretrain.config import parse_config
    from trainer.config import TrainConfig

    return parse_config(
        TrainConfig,
        {
            "run": {"out_dir": str(run_dir), "train_steps": 10_000},
            "model": {**shape, "make_vocab_size_divisible_by": 128 if gpu else 64},
            "batch": batch,
            "optim": {"lr": 3e-4, "precision": "bf16" if gpu else "fp32"},
            "parallel": {"backend": "nccl" if gpu else "gloo", "zero": zero},
            "data": {
                "source": "synthetic",
                "synthetic_vocab": shape["vocab_size"],
                "synthetic_documents": 2048 if gpu else 64,
                "phases": [{"name": "main", "seq_length": shape["seq_length"]}],
            },
            "metrics": {"trackers": [], "peak_flops": PEAK_FLOPS},
            "guard": {"enabled": False},
        },
    )


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _timed(step: Any, batches: list[int]) -> float:
    _sync()
    start = time.perf_counter()
    for batch in batches:
        step(batch)
    _sync()
    return time.perf_counter() - start


def _interleave(
    args: argparse.Namespace, ours_step: Any, plain_step: Any, tokens: int
) -> list[dict[str, float]]:
    """Warm both up, then alternate timed rounds (ABBA order) until rounds or time run out."""
    warmup = list(range(args.warmup))
    _timed(ours_step, warmup)
    _timed(plain_step, warmup)
    rows, start = [], time.perf_counter()
    for round_index in range(args.rounds):
        if time.perf_counter() - start > args.max_seconds:
            break
        batches = list(
            range(
                args.warmup + round_index * args.steps, args.warmup + (round_index + 1) * args.steps
            )
        )
        order = [("ours", ours_step), ("plain", plain_step)]
        times = {
            name: _timed(fn, batches) for name, fn in (order[::-1] if round_index % 2 else order)
        }
        rows.append({name: tokens / seconds for name, seconds in times.items()})
        print(
            f"round {round_index}: ours {rows[-1]['ours']:.0f} tok/s, plain "
            f"{rows[-1]['plain']:.0f} tok/s",
            flush=True,
        )
    return rows


def _run(
    args: argparse.Namespace, run_dir: Path, shape: dict[str, int], batch: dict[str, int]
) -> dict[str, Any]:
    import torch

    from benchmarks.bench_trainer_cpu import PlainTrainer
    from trainer.flops import flops_per_token
    from trainer.model import fast_path_flags, te_available

    gpu = not args.dry_run
    trainer = _config(run_dir, shape, batch, gpu).build()
    device = "cuda" if gpu else "cpu"
    plain = PlainTrainer(
        shape,
        batch["micro_batch_size"],
        device=device,
        dtype=torch.bfloat16 if gpu else torch.float32,
    )

    def ours_step(index: int) -> None:
        trainer.train_step(index)
        trainer.state.step += 1

    def plain_step(index: int) -> None:
        tokens, _ = trainer.data.rank_batch(index, 0, 1)
        plain.step(torch.from_numpy(tokens))

    rows = _interleave(
        args, ours_step, plain_step, batch["global_batch_size"] * shape["seq_length"] * args.steps
    )
    per_token = flops_per_token(trainer.config.model, shape["vocab_size"], shape["seq_length"])[
        "model"
    ]
    ours = statistics.median(r["ours"] for r in rows)
    base = statistics.median(r["plain"] for r in rows)
    ratio = statistics.median(r["ours"] / r["plain"] for r in rows)
    flags = fast_path_flags(trainer.config, "cuda" if gpu else "cpu", te_available())
    parameters = trainer.num_params
    return {
        "fast_path": {"transformer_engine": te_available(), **flags},
        "shape": shape,
        "batch": batch,
        "parameters": parameters,
        "rounds": rows,
        "ours_tokens_per_s": ours,
        "plain_tokens_per_s": base,
        "ratio": ratio,
        "target": 0.9,
        "met": ratio >= 0.9,
        "mfu_formula": "(6*N + 12*L*S*H*Q) * tokens_per_s / peak_flops",
        "peak_flops": PEAK_FLOPS,
        "model_flops_per_token": per_token,
        "mfu_ours": per_token * ours / PEAK_FLOPS,
        "mfu_plain": per_token * base / PEAK_FLOPS,
    }


def _free_memory() -> None:
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def zero_check(args: argparse.Namespace, run_dir: Path, steps: int = 3) -> dict[str, Any]:
    """Losses of the first steps at each ZeRO stage the device supports, next to stage 0."""
    gpu = not args.dry_run
    shape, batch = (GPU_SHAPE, GPU_BATCH) if gpu else (DRY_SHAPE, DRY_BATCH)
    losses: dict[str, list[float]] = {}
    errors: dict[str, str] = {}
    for stage in (0, 1, 2, 3) if gpu else (0, 1):
        try:  # a failing stage is a result (megatron_fsdp has never run here), not a crash
            trainer = _config(run_dir / f"zero{stage}", shape, batch, gpu, stage).build()
            losses[str(stage)] = [trainer.train_step(index).loss for index in range(steps)]
            del trainer
        except Exception as exc:  # noqa: BLE001
            errors[str(stage)] = f"{type(exc).__name__}: {exc}"[:500]
        _free_memory()
    diffs = {
        stage: max(abs(a - b) for a, b in zip(values, losses["0"], strict=True))
        for stage, values in losses.items()
        if "0" in losses
    }
    return {"losses": losses, "max_abs_diff_vs_zero0": diffs, "errors": errors, "data_parallel": 1}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="gpu_trainer", description=__doc__.split("\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="tiny shape on CPU, fp32")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=5, help="steps per timed round")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--max-seconds", type=float, default=200.0)
    args = parser.parse_args(argv if argv is not None else [])
    if args.dry_run:
        args.rounds, args.steps, args.warmup = 2, 1, 1
    try:
        import megatron.core  # noqa: F401
    except ModuleNotFoundError:
        sys.exit(
            "gpu_trainer: megatron-core is not installed; pip install --no-deps the carried "
            "megatron_core-0.16.1 wheel for this Python, and psutil"
        )
    import torch

    if not args.dry_run and not torch.cuda.is_available():
        sys.exit("gpu_trainer: no CUDA device; run with --dry-run to check the code path on CPU")
    # No WORLD_SIZE: the trainer makes a world of one in this process (trainer.model.init_distributed)
    cases = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, shape, batch in DRY_CASES if args.dry_run else GPU_CASES:
            cases.append({"case": name, **_run(args, Path(tmp) / name, shape, batch)})
            _free_memory()  # the case's trainers are gone with _run's frame
            print(
                f"{name}: ours / plain tokens/s {cases[-1]['ratio']:.3f} (target >= 0.9); MFU "
                f"ours {cases[-1]['mfu_ours']:.3f}, plain {cases[-1]['mfu_plain']:.3f}",
                flush=True,
            )
        zero = zero_check(args, Path(tmp) / "zero")
    torch.distributed.destroy_process_group()
    result = {
        "claim": "Megatron-Core stack vs plain PyTorch bf16 GPT, one GPU",
        "dry_run": args.dry_run,
        "device": torch.cuda.get_device_name() if not args.dry_run else "cpu",
        **cases[0],
        "met": all(c["met"] for c in cases),
        "cases": cases,
        "zero_check": zero,
    }
    if args.dry_run:
        print(json.dumps(result, sort_keys=True))
    else:
        from benchmarks.common import write_result

        write_result("trainer_gpu", result)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
