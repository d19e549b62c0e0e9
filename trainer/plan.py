"""`pretrain plan`: parameters, compute, memory, data and layout of a run, before any process starts.

Formulas and their sources:
- Exact parameters: the Megatron-Core GPTModel built from the same config (tests compare with
  `sum(p.numel())`); approximations beside it: 12*L*h^2 and Narayanan et al. 2021 ("Efficient
  Large-Scale Language Model Training on GPU Clusters Using Megatron-LM"), Eq. 2:
  P = 12*L*h^2 * (1 + 13/(12h) + (V + s)/(12*L*h)).
- FLOPs per token: 6*N (Kaplan et al. 2020), and the attention-aware 6*N + 12*L*H*Q*T of PaLM
  (Chowdhery et al. 2022, Appendix B), H heads of size Q over T tokens of context.
- Model-state memory: ZeRO (Rajbhandari et al. 2020): mixed-precision Adam holds 2+2+K bytes per
  parameter with K = 12, i.e. 16 bytes; stage 1 shards the K bytes over the N_d data-parallel ranks,
  stage 2 the gradients too, stage 3 everything. Its 7.5B-parameter, 64-GPU example: 120 GB, 31.4 GB,
  16.6 GB, 1.9 GB.
- Activations: Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer
  Models"), bytes per layer s*b*h*(10 + 24/t + 5*a*s/(h*t)) with tensor parallel t and no sequence
  parallel; 2*s*b*h with full recomputation (the layer input only). Written for GPT with GELU and
  multi-head attention: an approximation for SwiGLU/GQA, stated in the output.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from pretrain.errors import ConfigError
from trainer.config import ModelConfig, TrainConfig

GPU_PEAK_BF16: dict[str, float] = {
    # Dense (no sparsity) bf16 tensor-core peaks from the vendors' data sheets.
    "A100": 312e12,
    "H100-SXM": 989e12,
    "H100-PCIe": 756e12,
    "H200": 989e12,
    "B200": 2250e12,
}
DEFAULT_MFU = 0.40
DEFAULT_OVERHEAD = 1.15
"""Restarts, evals and checkpoints on top of pure training time (a stated assumption)."""
ZERO_K = 12  # bytes of optimizer state per parameter for mixed-precision Adam (ZeRO paper)


def _norm_params(model: ModelConfig) -> int:
    return model.hidden_size * (1 if model.normalization == "RMSNorm" else 2)


def parameter_breakdown(model: ModelConfig, vocab_size: int, tensor_parallel: int = 1) -> dict:
    """Exact parameter counts of the Megatron-Core GPTModel our trainer builds from `model`."""
    h, d = model.hidden_size, model.head_dim
    heads, groups, ffn = model.num_attention_heads, model.query_groups, model.ffn_size
    bias = model.add_bias_linear
    vocab = model.padded_vocab_size(vocab_size, tensor_parallel)
    qkv_out = heads * d + 2 * groups * d
    fc1_out = ffn * (2 if model.swiglu else 1)
    attention = h * qkv_out + heads * d * h + (qkv_out + h if bias else 0)
    mlp = h * fc1_out + ffn * h + (fc1_out + h if bias else 0)
    per_layer = attention + mlp + 2 * _norm_params(model)
    embedding = vocab * h
    position = model.seq_length * h if model.position_embedding == "learned_absolute" else 0
    output = vocab * h if model.untie_embeddings else 0
    total = embedding + position + model.num_layers * per_layer + _norm_params(model) + output
    return {
        "total": total,
        "embedding": embedding,
        "position_embedding": position,
        "output_layer": output,
        "per_layer": per_layer,
        "attention_per_layer": attention,
        "mlp_per_layer": mlp,
        "non_embedding": total - embedding - position - output,
        "padded_vocab_size": vocab,
    }


def narayanan_eq2(num_layers: int, hidden: int, vocab: int, seq_length: int) -> float:
    """Narayanan et al. 2021, Eq. 2 (GPT with a tied, learned-position embedding, 4h MLP)."""
    lh = num_layers * hidden
    return 12 * lh * hidden * (1 + 13 / (12 * hidden) + (vocab + seq_length) / (12 * lh))


def flops_per_token(params: int, model: ModelConfig, seq_length: int) -> dict[str, float]:
    attention = 12 * model.num_layers * model.num_attention_heads * model.head_dim * seq_length
    return {"6N": 6.0 * params, "attention_aware": 6.0 * params + attention}


def zero_model_state_gb(params: float, data_parallel: int) -> dict[str, float]:
    """Model-state bytes per GPU (GB = 1e9) for mixed-precision Adam at each ZeRO stage."""
    return {
        "baseline": (4 + ZERO_K) * params / 1e9,
        "stage1_os": (4 + ZERO_K / data_parallel) * params / 1e9,
        "stage2_os_g": (2 + (2 + ZERO_K) / data_parallel) * params / 1e9,
        "stage3_os_g_p": (4 + ZERO_K) * params / data_parallel / 1e9,
    }


def activation_bytes_per_layer(
    model: ModelConfig, micro_batch: int, seq_length: int, tensor_parallel: int, recompute: str
) -> float:
    """Korthikanti et al. 2022, Table 2 (no sequence parallelism): `none`, `selective` (attention
    scores recomputed, as flash attention does) or `full` (only the layer input is kept)."""
    s, b, h, a, t = (
        seq_length,
        micro_batch,
        model.hidden_size,
        model.num_attention_heads,
        tensor_parallel,
    )
    if recompute == "full":
        return 2.0 * s * b * h
    if recompute == "selective":
        return s * b * h * (10 + 24 / t)
    return s * b * h * (10 + 24 / t + 5 * a * s / (h * t))


def layout_errors(config: TrainConfig, mixture_global_batch: int | None) -> list[str]:
    """Every layout problem, each naming the fields, the values and what to change."""
    m, p, b = config.model, config.parallel, config.batch
    tp, pp, cp = p.tensor, p.pipeline, p.context
    errors = []
    if m.hidden_size % m.num_attention_heads:
        errors.append(
            f"model.hidden_size={m.hidden_size} is not divisible by "
            f"model.num_attention_heads={m.num_attention_heads}"
        )
    if m.num_attention_heads % tp:
        errors.append(
            f"model.num_attention_heads={m.num_attention_heads} is not divisible by "
            f"parallel.tensor={tp}"
        )
    if m.num_attention_heads % m.query_groups:
        errors.append(
            f"model.num_attention_heads={m.num_attention_heads} is not divisible by "
            f"model.num_query_groups={m.query_groups}"
        )
    if m.query_groups % tp:
        errors.append(
            f"model.num_query_groups={m.query_groups} is not divisible by parallel.tensor={tp}"
        )
    stages = pp * (p.virtual_pipeline or 1)
    if m.num_layers % stages:
        errors.append(
            f"model.num_layers={m.num_layers} is not divisible by parallel.pipeline * "
            f"virtual_pipeline={stages}"
        )
    if p.virtual_pipeline and pp == 1:
        errors.append("parallel.virtual_pipeline needs parallel.pipeline > 1")
    if tp > p.gpus_per_node:
        errors.append(
            f"parallel.tensor={tp} exceeds parallel.gpus_per_node={p.gpus_per_node}: "
            "tensor parallelism must stay within a node"
        )
    dp = p.data_parallel
    if tp * pp * cp * dp != p.world_size:
        errors.append(
            f"world size {p.world_size} (nodes * gpus_per_node) != tensor {tp} * "
            f"pipeline {pp} * context {cp} * data {dp}"
        )
    if b.global_batch_size % (b.micro_batch_size * dp):
        errors.append(
            f"batch.global_batch_size={b.global_batch_size} is not divisible by "
            f"micro_batch_size {b.micro_batch_size} * data parallel {dp}"
        )
    if cp > 1 and m.seq_length % (2 * cp):
        errors.append(f"model.seq_length={m.seq_length} is not divisible by 2 * context={2 * cp}")
    if mixture_global_batch is not None and mixture_global_batch != b.global_batch_size:
        errors.append(
            f"the mixture was built for global batch W={mixture_global_batch}, "
            f"batch.global_batch_size={b.global_batch_size}: rebuild the mixture with "
            f"global_batch={b.global_batch_size} or change the batch"
        )
    return errors


def _mixture_info(config: TrainConfig) -> dict[str, Any] | None:
    if not config.data.mixture_dir:
        return None
    path = Path(config.data.mixture_dir) / "manifest.json"
    if not path.is_file():
        return None
    manifest = json.loads(path.read_text())
    components = manifest.get("components", [])
    capacity = sum(c.get("available_tokens", 0) * c.get("max_epochs", 1) for c in components)
    return {
        "global_batch": manifest.get("global_batch"),
        "capacity_tokens": capacity or None,
        "vocab_size": manifest.get("tokenizer", {}).get("vocab_size"),
    }


def _tokenizer_vocab(config: TrainConfig) -> int | None:
    if not config.data.tokenizer_dir:
        return None
    lock = Path(config.data.tokenizer_dir) / "lock.json"
    return json.loads(lock.read_text()).get("vocab_size") if lock.is_file() else None


def _memory(config: TrainConfig, params: int) -> dict[str, Any]:
    m, p, o = config.model, config.parallel, config.optim
    shard = p.tensor * p.pipeline
    local = params / shard
    dp = p.data_parallel
    # Megatron keeps bf16 params, fp32 main grads and fp32 main params + Adam moments (12 bytes).
    if o.precision == "bf16":
        weights, grads, optim = 2 * local, 4 * local, 12 * local
    else:
        weights, grads, optim = 4 * local, 4 * local, 8 * local
    if o.distributed_optimizer:
        optim /= dp
    seq, micro = m.seq_length, config.batch.micro_batch_size
    layers = m.num_layers  # 1F1B: the first stage holds PP micro batches of L/PP layers each
    act = {
        mode: activation_bytes_per_layer(m, micro, seq, p.tensor, mode) * layers / 1e9
        for mode in ("none", "selective", "full")
    }
    # On GPU the attention runs as flash attention, which never stores the s*s scores.
    chosen = act["full" if m.recompute_activations else "selective"]
    states = (weights + grads + optim) / 1e9
    return {
        "weights_gb": weights / 1e9,
        "grads_gb": grads / 1e9,
        "optimizer_gb": optim / 1e9,
        "activations_gb": act,
        "total_gb": states + chosen,
        "zero_16_bytes_per_param_gb": zero_model_state_gb(local, dp),
        "note": "activations: Korthikanti et al. 2022 (GELU/MHA form, approximate for SwiGLU/GQA)",
    }


def build_plan(
    config: TrainConfig,
    gpu: str | None = None,
    mfu: float = DEFAULT_MFU,
    overhead: float = DEFAULT_OVERHEAD,
) -> dict[str, Any]:
    """The whole plan as a dict; raises ConfigError with every layout problem on one line."""
    mixture = _mixture_info(config)
    errors = layout_errors(config, mixture["global_batch"] if mixture else None)
    if errors:
        raise ConfigError("; ".join(errors))
    m = config.model
    vocab = m.vocab_size or (mixture or {}).get("vocab_size") or _tokenizer_vocab(config)
    if vocab is None:
        raise ConfigError(
            "model.vocab_size is not set and neither data.tokenizer_dir nor a built "
            "data.mixture_dir names the vocabulary: set one of them"
        )
    counts = parameter_breakdown(m, vocab, config.parallel.tensor)
    n = counts["total"]
    per_token = flops_per_token(n, m, m.seq_length)
    step_tokens = config.batch.global_batch_size * m.seq_length
    tokens = config.data.train_tokens or (config.run.train_steps or 0) * step_tokens
    gpu = gpu or config.metrics.mfu_gpu
    if gpu not in GPU_PEAK_BF16:
        raise ConfigError(f"metrics.mfu_gpu={gpu!r} is unknown; known: {', '.join(GPU_PEAK_BF16)}")
    peak = config.metrics.peak_flops or GPU_PEAK_BF16[gpu]
    total_flops = per_token["attention_aware"] * tokens
    gpu_seconds = total_flops / (mfu * peak) * overhead
    warnings = []
    tokens_per_param = tokens / n if n else 0.0
    if tokens and not 15 <= tokens_per_param <= 30:
        warnings.append(
            f"{tokens_per_param:.1f} tokens per parameter is outside 15-30 "
            "(Chinchilla-optimal is about 20)"
        )
    available = config.data.available_tokens or (mixture or {}).get("capacity_tokens")
    if available is not None and tokens > available:
        warnings.append(
            f"the budget of {tokens:,} tokens exceeds the {available:,} the data can "
            "give at its epoch caps"
        )
    return {
        "parameters": {
            **counts,
            "approx_12Lh2": 12 * m.num_layers * m.hidden_size**2,
            "narayanan_eq2": narayanan_eq2(
                m.num_layers, m.hidden_size, counts["padded_vocab_size"], m.seq_length
            ),
        },
        "compute": {
            "flops_per_token": per_token,
            "flops_per_step": per_token["attention_aware"] * step_tokens,
            "tokens": tokens,
            "steps": math.ceil(tokens / step_tokens) if step_tokens else 0,
            "total_flops": total_flops,
            "gpu": gpu,
            "peak_flops_per_gpu": peak,
            "mfu": mfu,
            "overhead": overhead,
            "gpu_days": gpu_seconds / 86400,
            "wall_days": gpu_seconds / 86400 / config.parallel.world_size,
        },
        "memory_per_gpu": _memory(config, n),
        "data": {"tokens_per_parameter": tokens_per_param, "available_tokens": available},
        "layout": {
            "world_size": config.parallel.world_size,
            "tensor": config.parallel.tensor,
            "pipeline": config.parallel.pipeline,
            "context": config.parallel.context,
            "data": config.parallel.data_parallel,
            "grad_accumulation": config.batch.global_batch_size
            // (config.batch.micro_batch_size * config.parallel.data_parallel),
            "tokens_per_step": step_tokens,
        },
        "warnings": warnings,
    }


def format_plan(plan: dict[str, Any]) -> str:
    par, comp, mem, lay = (
        plan["parameters"],
        plan["compute"],
        plan["memory_per_gpu"],
        plan["layout"],
    )
    lines = [
        f"parameters      {par['total'] / 1e9:8.3f} B exact (non-embedding "
        f"{par['non_embedding'] / 1e9:.3f} B); 12Lh^2 {par['approx_12Lh2'] / 1e9:.3f} B; "
        f"Narayanan Eq.2 {par['narayanan_eq2'] / 1e9:.3f} B",
        f"layout          world {lay['world_size']} = TP {lay['tensor']} x PP {lay['pipeline']} x "
        f"CP {lay['context']} x DP {lay['data']}; grad accumulation {lay['grad_accumulation']}; "
        f"{lay['tokens_per_step']:,} tokens/step",
        f"compute         {comp['flops_per_token']['attention_aware']:.3e} FLOPs/token "
        f"(6N {comp['flops_per_token']['6N']:.3e}); {comp['total_flops']:.3e} FLOPs for "
        f"{comp['tokens']:,} tokens ({comp['steps']:,} steps)",
        f"time            {comp['gpu_days']:.1f} GPU-days on {comp['gpu']} at MFU "
        f"{comp['mfu']:.0%} x overhead {comp['overhead']} ({comp['wall_days']:.2f} days wall)",
        f"memory/GPU      weights {mem['weights_gb']:.2f} GB, grads {mem['grads_gb']:.2f} GB, "
        f"optimizer {mem['optimizer_gb']:.2f} GB, activations "
        f"{mem['activations_gb']['selective']:.2f} GB with flash attention (none "
        f"{mem['activations_gb']['none']:.2f} GB, full recompute "
        f"{mem['activations_gb']['full']:.2f} GB); total {mem['total_gb']:.2f} GB",
        f"data            {plan['data']['tokens_per_parameter']:.1f} tokens per parameter",
    ]
    lines += [f"warning         {w}" for w in plan["warnings"]]
    return "\n".join(lines)


def plan_command(args: argparse.Namespace) -> int:
    from pretrain.cli_utils import resolve_config

    config = resolve_config(TrainConfig, args)
    if config is None:
        return 0
    plan = build_plan(config)
    print(json.dumps(plan, indent=2) if args.json else format_plan(plan))
    return 0
