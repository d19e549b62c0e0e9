"""Per-GPU memory of a run: model states at each ZeRO stage as Megatron-Core holds them, and
activations at the chosen recompute.

Model states, bytes per parameter of the GPU's shard (d = data-parallel size):

| precision / grads        | ZeRO 0 (DDP) | 1 (distributed optimizer) | 2 (fsdp optim_grads) | 3 (fsdp all) |
| bf16, fp32 grads (ours)  | 2 + 4 + 12   | 2 + 4 + 12/d              | 2 + (4 + 12)/d       | 18/d         |
| bf16, bf16 grads         | 2 + 2 + 16   | 2 + 2 + 16/d              | 2 + (2 + 16)/d       | 20/d         |
| fp32                     | 4 + 4 + 8    | 4 + 4 + 8/d               | 4 + (4 + 8)/d        | 16/d         |

Why not ZeRO's 2 + 2 + 12 (Rajbhandari et al. 2020, "16 bytes", K = 12): Megatron keeps gradients in
a contiguous fp32 buffer (`grad_reduce_in_fp32`, the accurate default for bf16) that the optimizer
uses directly as its fp32 main gradients, so gradients cost 4 bytes, not 2, and the distributed
optimizer (which reduce-scatters into that full-size buffer) does not shard them: 6 + 12/d, the
"bf16 param, fp32 grads" row of Megatron-Core's distributed-optimizer guide. With bf16 gradients
the optimizer adds an fp32 copy of its shard's gradients (+4 or +4/d). fp32 parameters are their
own master copy (Adam: 8 bytes). The ZeRO paper's ideal figures are reported beside ours.

Activations: Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer
Models"), bytes per layer with tensor parallel t: s*b*h*(10 + 24/t + 5*a*s/(h*t)) without sequence
parallel, s*b*h/t*(34 + 5*a*s/h) with it; our attention (SDPA or TransformerEngine's, fused)
stores no scores, so the 5as/h term is 0 at every recompute setting; `full` keeps each layer's 2*s*b*h input (/t with
sequence parallel) plus one layer's working set during its backward. The first pipeline stage holds
min(PP, micro-batches) micro-batches of L/PP layers (1F1B). Written for GPT with GELU and
multi-head attention: an approximation for SwiGLU/GQA, stated in the output.
"""

from __future__ import annotations

from typing import Any

from trainer.config import TrainConfig

ZERO_K = 12  # bytes of optimizer state per parameter for mixed-precision Adam (ZeRO paper)


def zero_model_state_gb(params: float, data_parallel: int) -> dict[str, float]:
    """ZeRO paper (Table 1, Figure 1): model-state GB per GPU for mixed-precision Adam."""
    return {
        "baseline": (4 + ZERO_K) * params / 1e9,
        "stage1_os": (4 + ZERO_K / data_parallel) * params / 1e9,
        "stage2_os_g": (2 + (2 + ZERO_K) / data_parallel) * params / 1e9,
        "stage3_os_g_p": (4 + ZERO_K) * params / data_parallel / 1e9,
    }


def state_bytes_per_param(
    precision: str, grad_reduce_in_fp32: bool, zero: int, data_parallel: int
) -> dict[str, float]:
    """Bytes per parameter for weights, gradients and optimizer state as Megatron-Core holds them."""
    d = data_parallel
    if precision == "bf16":
        weights, grads = 2.0, 4.0 if grad_reduce_in_fp32 else 2.0
        optim = 12.0 + (0.0 if grad_reduce_in_fp32 else 4.0)  # fp32 master + Adam m, v (+ grads)
    else:
        weights, grads, optim = 4.0, 4.0, 8.0
    if zero >= 1:
        optim /= d
    if zero >= 2:
        grads /= d
    if zero >= 3:
        weights /= d
    return {"weights": weights, "grads": grads, "optimizer": optim}


def activation_bytes_per_layer(config: TrainConfig, mode: str) -> float:
    """Korthikanti et al. 2022 bytes per layer per micro-batch for recompute `mode`."""
    m, t, b = config.model, config.parallel.tensor, config.batch.micro_batch_size
    s, h = m.seq_length, m.hidden_size
    sp = config.parallel.sequence_parallel_on_gpu
    if mode == "full":
        return 2.0 * s * b * h / (t if sp else 1)
    if sp:
        return s * b * h / t * 34
    return s * b * h * (10 + 24 / t)


def stage_parameters(config: TrainConfig, counts: dict[str, Any]) -> int:
    """Parameters on the fullest pipeline stage of one TP rank (first or last stage)."""
    p, t = config.parallel.pipeline, config.parallel.tensor
    layers = counts["per_layer"] * config.model.num_layers / p
    first = counts["embedding"] + counts["position_embedding"]
    # With PP > 1 a tied embedding has a copy on the last stage for the logits.
    last = counts["output_layer"] or (counts["embedding"] if p > 1 else 0)
    if p == 1:
        return round((layers + first + last) / t)
    return round((layers + max(first, last)) / t)


def activations_gb(config: TrainConfig, mode: str) -> float:
    """Activation GB on the first pipeline stage (1F1B holds min(PP, micro-batches) of them)."""
    par, m, b = config.parallel, config.model, config.batch.micro_batch_size
    micro_batches = max(1, config.batch.global_batch_size // (b * par.data_parallel))
    in_flight = min(par.pipeline, micro_batches)
    layers = m.num_layers / par.pipeline
    total = activation_bytes_per_layer(config, mode) * layers * in_flight
    if mode == "full":  # the layer being recomputed holds its full working set
        total += activation_bytes_per_layer(config, "selective")
    return total / 1e9


def logits_gb(config: TrainConfig, vocab: int) -> float:
    """Last stage: bf16 logits plus the fp32 softmax the cross-entropy keeps (6 bytes per entry)."""
    b = config.batch.micro_batch_size
    return config.model.seq_length * b * vocab / config.parallel.tensor * 6 / 1e9


def memory_per_gpu(config: TrainConfig, counts: dict[str, Any]) -> dict[str, Any]:
    """Model states, activations (every recompute mode and the chosen one) and the total."""
    local = stage_parameters(config, counts)
    dp = config.parallel.data_parallel
    per_param = state_bytes_per_param(
        config.optim.precision, config.optim.grad_reduce_in_fp32, config.parallel.zero, dp
    )
    states = {key: value * local / 1e9 for key, value in per_param.items()}
    act = {mode: activations_gb(config, mode) for mode in ("none", "selective", "full")}
    mode = config.model.recompute
    logits = logits_gb(config, counts["padded_vocab_size"])
    total = sum(states.values()) + act[mode] + logits
    return {
        "parameters_on_gpu": local,
        "zero_stage": config.parallel.zero,
        "bytes_per_parameter": per_param,
        "weights_gb": states["weights"],
        "grads_gb": states["grads"],
        "optimizer_gb": states["optimizer"],
        "model_states_gb": sum(states.values()),
        "activations_gb": act,
        "recompute": mode,
        "sequence_parallel": config.parallel.sequence_parallel_on_gpu,
        "logits_gb": logits,
        "total_gb": total,
        "zero_paper_gb": zero_model_state_gb(local, dp),
        "note": "activations: Korthikanti et al. 2022 (GELU/MHA form, approximate for SwiGLU/GQA)",
    }
