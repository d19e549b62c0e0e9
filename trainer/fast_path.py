"""Which Megatron-Core performance features a run turns on, decided from the device it runs on.

On CUDA: TransformerEngine layers when TE is installed (with TE's fused RoPE and the fused weight-
gradient accumulation), fused bias+activation, bias+dropout and masked softmax, sequence parallelism
whenever TP > 1, the configured recompute (selective recomputes core attention only), overlapped
grad reduce / param gather (the config's choice), bf16. On CPU every fusion stays off: megatron-core
0.16.1 implements them with CUDA kernels, and sequence parallelism refuses the torch LayerNorm
fallback (trainer/cpu_compat.py).

`fast_path_flags` is a pure function of the config, a device string and whether TE is importable,
so tests check the GPU decision on a machine without a GPU.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Any

from pretrain.errors import ConfigError

if TYPE_CHECKING:
    from trainer.config import TrainConfig


def te_available() -> bool:
    return importlib.util.find_spec("transformer_engine") is not None


def on_cuda(device: str) -> bool:
    return device.startswith("cuda")


def sequence_parallel_on(config: TrainConfig, device: str) -> bool:
    """On when TP > 1 on CUDA unless the config turns it off; refused on CPU."""
    wanted = config.parallel.sequence_parallel
    if not on_cuda(device):
        if wanted:
            raise ConfigError(
                "parallel.sequence_parallel=true needs CUDA (megatron-core's CPU LayerNorm "
                "fallback refuses it); unset it on CPU"
            )
        return False
    return config.parallel.tensor > 1 and wanted is not False


def recompute_flags(config: TrainConfig) -> dict[str, Any]:
    mode = config.model.recompute_mode
    if mode == "full":
        return {
            "recompute_granularity": "full",
            "recompute_method": "uniform",
            "recompute_num_layers": 1,
        }
    if mode == "selective":  # megatron's default recompute_modules: ["core_attn"]
        return {"recompute_granularity": "selective"}
    return {"recompute_granularity": None, "recompute_method": None, "recompute_num_layers": None}


def fast_path_flags(config: TrainConfig, device: str, te: bool) -> dict[str, Any]:
    """TransformerConfig keyword arguments for the fused kernels, sequence parallel and recompute."""
    gpu = on_cuda(device)
    model = config.model
    activation_fusible = model.swiglu or model.add_bias_linear  # GELU fusion needs a bias
    return {
        "sequence_parallel": sequence_parallel_on(config, device),
        "apply_rope_fusion": gpu and te and model.position_embedding == "rope",
        "bias_activation_fusion": gpu and activation_fusible,
        "masked_softmax_fusion": gpu,
        "bias_dropout_fusion": gpu,
        "gradient_accumulation_fusion": gpu and te,
        "persist_layer_norm": False,
        **recompute_flags(config),
    }


def use_te_spec(device: str, te: bool) -> bool:
    return on_cuda(device) and te


def zero_wrapping(config: TrainConfig, device: str) -> dict[str, Any]:
    """DistributedDataParallelConfig arguments for parallel.zero (see trainer/plan_memory.py)."""
    stage = config.zero_stage
    if stage <= 1:
        return {"use_distributed_optimizer": stage == 1}
    if not on_cuda(device):
        raise ConfigError(
            f"parallel.zero={stage} runs megatron_fsdp, which needs CUDA in megatron-core 0.16.1 "
            "(it allocates torch.cuda.Stream and a cuda DeviceMesh); on CPU use parallel.zero 0 "
            "or 1"
        )
    strategy = "optim_grads" if stage == 2 else "optim_grads_params"
    return {
        "use_distributed_optimizer": True,
        "use_megatron_fsdp": True,
        "data_parallel_sharding_strategy": strategy,
    }


def check_device_support(config: TrainConfig, device: str) -> None:
    """Refuse, before any process starts, what megatron-core cannot run on `device`."""
    zero_wrapping(config, device)
    sequence_parallel_on(config, device)
