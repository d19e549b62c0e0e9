"""Megatron-Core GPTModel weights -> a Hugging Face `LlamaForCausalLM` (config and state dict).

Written here, not taken from Megatron-Bridge: Megatron-Bridge 0.3.1 (the registry's newest)
requires transformers < 5, transformer-engine[core_cu13] and mamba-ssm / causal-conv1d (CUDA
builds that fail to build on a CPU machine), so it does not install next to our stack (torch 2.13
CPU, megatron-core 0.16.1, transformers 5). The mapping of the local layer spec:

- `linear_qkv.weight` [groups * (heads/groups + 2) * head_dim, hidden] is fused PER QUERY GROUP:
  each group's q heads, then its one k head, then its one v head -> q_proj, k_proj, v_proj.
- `linear_fc1.weight` [2 * ffn, hidden] with SwiGLU is [gate; up] (megatron's glu takes
  silu(first half) * second half) -> gate_proj, up_proj.
- `input_layernorm` / `pre_mlp_layernorm` / `final_layernorm` -> input_layernorm /
  post_attention_layernorm / model.norm; `linear_proj` -> o_proj; `linear_fc2` -> down_proj.
- Tied embeddings: one `model.embed_tokens.weight` and `tie_word_embeddings: true`; untied adds
  `lm_head.weight` from `output_layer.weight`.
- RoPE: megatron rotates halves (not interleaved), rotary_percent 1, inv_freq = base^(-2i/d): what
  Llama's rotary embedding does; `rope_theta` = model.rotary_base.
- The vocabulary stays padded (make_vocab_size_divisible_by): the softmax runs over the same rows,
  so the log-probabilities are the same; ids past the tokenizer are never produced by it.

The `module.` (DDP) prefix and the TP/PP layout are gone before this runs: `trainer.inference`
loads any saved layout into one TP=1/PP=1 model (dist_checkpointing reshards).
"""

from __future__ import annotations

from typing import Any

import torch

from pretrain.errors import ConfigError
from trainer.config import ModelConfig


def check_llama_shape(model: ModelConfig) -> None:
    """Refuse in one line a GPTModel that is not Llama-shaped (GELU, LayerNorm, learned pos)."""
    problems = []
    if not model.swiglu:
        problems.append("model.swiglu=false (GELU MLP)")
    if model.normalization != "RMSNorm":
        problems.append(f"model.normalization={model.normalization}")
    if model.position_embedding != "rope":
        problems.append(f"model.position_embedding={model.position_embedding}")
    if problems:
        raise ConfigError(
            "--format hf writes a Llama-family model (SwiGLU, RMSNorm, RoPE); this run has "
            + ", ".join(problems)
            + ": there is no Llama equivalent, export the checkpoint as is"
        )


def hf_config(
    model: ModelConfig, vocab_size: int, eos_id: int | None, pad_id: int | None, dtype: str
) -> dict[str, Any]:
    """config.json of the exported LlamaForCausalLM (`vocab_size`: megatron's padded size).

    Both the transformers 4 (`rope_theta`) and 5 (`rope_parameters`) spellings of RoPE are written,
    so servers pinned to either read it."""
    import transformers

    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": int(vocab_size),
        "hidden_size": model.hidden_size,
        "intermediate_size": model.ffn_size,
        "num_hidden_layers": model.num_layers,
        "num_attention_heads": model.num_attention_heads,
        "num_key_value_heads": model.query_groups,
        "head_dim": model.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": model.seq_length,
        "initializer_range": model.init_method_std,
        "rms_norm_eps": model.norm_epsilon,
        "rope_theta": float(model.rotary_base),
        "rope_scaling": None,
        "rope_parameters": {"rope_type": "default", "rope_theta": float(model.rotary_base)},
        "attention_bias": model.add_bias_linear,
        "mlp_bias": model.add_bias_linear,
        "attention_dropout": 0.0,
        "pretraining_tp": 1,
        "tie_word_embeddings": not model.untie_embeddings,
        "bos_token_id": None,
        "eos_token_id": eos_id,
        "pad_token_id": pad_id,
        "torch_dtype": dtype,
        "dtype": dtype,
        "use_cache": True,
        "transformers_version": transformers.__version__,
    }


def _split_qkv(fused: torch.Tensor, model: ModelConfig) -> tuple[torch.Tensor, ...]:
    """Megatron's per-group [q..., k, v] rows (weight or bias) -> (q, k, v)."""
    groups, heads, head_dim = model.query_groups, model.num_attention_heads, model.head_dim
    per_group = heads // groups
    grouped = fused.reshape(groups, (per_group + 2) * head_dim, *fused.shape[1:])
    q, k, v = torch.split(grouped, [per_group * head_dim, head_dim, head_dim], dim=1)
    rest = fused.shape[1:]
    return (
        q.reshape(heads * head_dim, *rest),
        k.reshape(groups * head_dim, *rest),
        v.reshape(groups * head_dim, *rest),
    )


def _layer(sd: dict[str, torch.Tensor], i: int, model: ModelConfig, take: Any) -> dict:
    src, dst = f"decoder.layers.{i}.", f"model.layers.{i}."
    out = {
        dst + "input_layernorm.weight": take(src + "input_layernorm.weight"),
        dst + "post_attention_layernorm.weight": take(src + "pre_mlp_layernorm.weight"),
        dst + "self_attn.o_proj.weight": take(src + "self_attention.linear_proj.weight"),
        dst + "mlp.down_proj.weight": take(src + "mlp.linear_fc2.weight"),
    }
    suffixes = ("weight", "bias") if model.add_bias_linear else ("weight",)
    for suffix in suffixes:
        q, k, v = _split_qkv(take(f"{src}self_attention.linear_qkv.{suffix}"), model)
        out.update({f"{dst}self_attn.{n}_proj.{suffix}": t for n, t in zip("qkv", (q, k, v))})
        gate, up = torch.chunk(take(f"{src}mlp.linear_fc1.{suffix}"), 2, dim=0)
        out[f"{dst}mlp.gate_proj.{suffix}"] = gate
        out[f"{dst}mlp.up_proj.{suffix}"] = up
    if model.add_bias_linear:
        out[dst + "self_attn.o_proj.bias"] = take(src + "self_attention.linear_proj.bias")
        out[dst + "mlp.down_proj.bias"] = take(src + "mlp.linear_fc2.bias")
    return out


def hf_state_dict(
    megatron_sd: dict[str, Any], model: ModelConfig, dtype: torch.dtype = torch.float32
) -> dict[str, torch.Tensor]:
    """The LlamaForCausalLM tensors of a single-process GPTModel state dict (keys without
    `module.`). Every megatron tensor must be used: a key left over (another layer spec, e.g.
    TransformerEngine's fused `layer_norm_weight`) is refused rather than silently dropped."""
    sd = {k: v for k, v in megatron_sd.items() if "_extra_state" not in k and v is not None}
    used: set[str] = set()

    def take(key: str) -> torch.Tensor:
        if key not in sd:
            raise ConfigError(f"checkpoint has no {key}: not a local-spec Megatron GPTModel")
        used.add(key)
        return sd[key]

    out = {"model.embed_tokens.weight": take("embedding.word_embeddings.weight")}
    for i in range(model.num_layers):
        out.update(_layer(sd, i, model, take))
    out["model.norm.weight"] = take("decoder.final_layernorm.weight")
    if model.untie_embeddings:
        out["lm_head.weight"] = take("output_layer.weight")
    left = sorted(set(sd) - used)
    if left:
        raise ConfigError(
            f"checkpoint tensors without a Llama equivalent: {', '.join(left[:4])}; "
            "export supports the local layer spec only"
        )
    return {k: v.detach().to(dtype).contiguous().clone() for k, v in out.items()}
