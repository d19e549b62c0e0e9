"""Claim: `pretrain plan`'s model-state memory per GPU (weights + grads + optimizer, at each ZeRO
stage) is within 15% of what Megatron-Core really holds, per rank, on CPU with gloo.

    python -m benchmarks.bench_plan_memory            # writes results/plan_memory.json
    python -m benchmarks.bench_plan_memory --quick    # two layouts (the test runs this)

Each layout trains one real step (megatron DDP or distributed optimizer, Adam state allocated),
then every live tensor in the rank's process is found through the garbage collector and its
storage counted once (views of megatron's contiguous buffers share storage). The baseline is the
plan's figure for the same config; the ZeRO paper's 16-bytes-per-parameter figure is shown beside
it. Start-up (torchrun, imports) is not part of the measurement. The machine is shared: memory is
not timing-sensitive, so the numbers are stable.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

SHAPE = {
    "num_layers": 4,
    "hidden_size": 256,
    "num_attention_heads": 8,
    "num_query_groups": 4,
    "ffn_hidden_size": 768,
    "seq_length": 64,
    "vocab_size": 2048,
    "make_vocab_size_divisible_by": 128,
}
LAYOUTS = [
    {"name": "dp1 zero0 fp32", "world": 1, "parallel": {}, "precision": "fp32"},
    {"name": "dp2 zero0 fp32", "world": 2, "parallel": {"zero": 0}, "precision": "fp32"},
    {"name": "dp2 zero1 fp32", "world": 2, "parallel": {"zero": 1}, "precision": "fp32"},
    {"name": "dp2 zero1 bf16", "world": 2, "parallel": {"zero": 1}, "precision": "bf16"},
    {"name": "dp1 zero0 bf16", "world": 1, "parallel": {}, "precision": "bf16"},
    {"name": "tp2 zero0 fp32", "world": 2, "parallel": {"tensor": 2}, "precision": "fp32"},
    {"name": "pp2 zero0 fp32", "world": 2, "parallel": {"pipeline": 2}, "precision": "fp32"},
]
QUICK = ["dp2 zero0 fp32", "dp2 zero1 fp32"]


def layout_config(layout: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    return {
        "run": {"out_dir": str(run_dir), "train_steps": 2, "seed": 3},
        "model": SHAPE,
        "parallel": {"gpus_per_node": layout["world"], **layout["parallel"]},
        "optim": {"lr": 1e-3, "warmup_steps": 0, "precision": layout["precision"]},
        "batch": {"micro_batch_size": 2, "global_batch_size": 4},
        "data": {
            "source": "synthetic",
            "synthetic_documents": 32,
            "synthetic_vocab": SHAPE["vocab_size"],
            "phases": [{"name": "main", "seq_length": SHAPE["seq_length"]}],
        },
        "metrics": {"trackers": [], "peak_flops": 1e11},
        "guard": {"enabled": False},
    }


def live_tensor_bytes() -> int:
    """Bytes of every distinct tensor storage alive in this process."""
    import torch

    gc.collect()
    seen: dict[int, int] = {}
    for obj in gc.get_objects():
        try:
            if isinstance(obj, torch.Tensor) and obj.device.type == "cpu":
                storage = obj.untyped_storage()
                seen[storage.data_ptr()] = storage.nbytes()
        except Exception:  # noqa: S112 - objects gc returns may be half-built; skip them
            continue
    return sum(seen.values())


def _rank(config_json: str, out_dir: str) -> None:
    """One rank under torchrun (`--rank CONFIG.json OUT`): build, one step, count live tensors."""
    import torch

    from pretrain.config import parse_config
    from trainer.config import TrainConfig

    config = parse_config(TrainConfig, json.loads(Path(config_json).read_text()))
    trainer = config.build()
    before = live_tensor_bytes()  # model, grad buffers; Adam state is allocated at the 1st step
    trainer.train_step(0)
    after = live_tensor_bytes()
    rank = torch.distributed.get_rank()
    Path(out_dir, f"rank{rank}.json").write_text(
        json.dumps({"rank": rank, "before_step_bytes": before, "after_step_bytes": after})
    )
    torch.distributed.destroy_process_group()


def measure(layout: dict[str, Any]) -> dict[str, Any]:
    """The layout's ranks started as `pretrain launch` starts them (torchrun on 127.0.0.1, the
    command trainer/launch.py builds), each running `_rank` instead of the training loop."""
    import subprocess
    from types import SimpleNamespace

    from pretrain.config import parse_config
    from trainer.config import TrainConfig
    from trainer.launch import torchrun_command
    from trainer.plan import build_plan

    with tempfile.TemporaryDirectory() as tmp:
        config_data = layout_config(layout, Path(tmp) / "run")
        config_json = Path(tmp) / "config.json"
        config_json.write_text(json.dumps(config_data))
        args = SimpleNamespace(rdzv_endpoint=None, smoke=False)
        command = torchrun_command(args, layout["world"], "1", config_json)
        entry = command.index("trainer.worker")
        command[entry:] = ["benchmarks.bench_plan_memory", "--rank", str(config_json), tmp]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
        subprocess.run(command, cwd=REPO, env=env, check=True, stdout=subprocess.DEVNULL)
        ranks = [json.loads(p.read_text()) for p in sorted(Path(tmp).glob("rank*.json"))]
        plan = build_plan(parse_config(TrainConfig, config_data))
    memory = plan["memory_per_gpu"]
    measured = max(r["after_step_bytes"] for r in ranks) / 1e9
    planned = memory["model_states_gb"]
    return {
        "layout": layout["name"],
        "parameters_on_gpu_plan": memory["parameters_on_gpu"],
        "bytes_per_parameter_plan": sum(memory["bytes_per_parameter"].values()),
        "measured_gb_max_rank": measured,
        "measured_gb_per_rank": [r["after_step_bytes"] / 1e9 for r in ranks],
        "plan_gb": planned,
        "zero_paper_16_bytes_gb": memory["zero_paper_gb"]["baseline"],
        "plan_over_measured": planned / measured,
        "within_15_percent": abs(planned / measured - 1) <= 0.15,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="bench_plan_memory", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="two layouts, no result file")
    parser.add_argument("--rank", nargs=2, metavar=("CONFIG", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rank:  # one of measure()'s ranks
        _rank(*args.rank)
        return {}
    layouts = [x for x in LAYOUTS if not args.quick or x["name"] in QUICK]
    rows = [measure(layout) for layout in layouts]
    for row in rows:
        print(
            f"{row['layout']:16s} measured {row['measured_gb_max_rank'] * 1e3:7.2f} MB, plan "
            f"{row['plan_gb'] * 1e3:7.2f} MB ({row['plan_over_measured']:.3f}x), "
            f"{row['bytes_per_parameter_plan']:.1f} B/param",
            flush=True,
        )
    result = {
        "claim": "plan model-state memory within 15% of megatron-core's live tensors per rank",
        "shape": SHAPE,
        "rows": rows,
        "met": all(r["within_15_percent"] for r in rows),
    }
    if args.quick:
        print(json.dumps(result, sort_keys=True))
    else:
        from benchmarks.common import write_result

        write_result("plan_memory", result)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
