"""Parameter counts, FLOPs per token and GPU peaks: the one place the plan and the trainer's MFU
take them from.

- Exact parameters: the Megatron-Core GPTModel built from the same config (tests compare with
  `sum(p.numel())`); beside it Narayanan et al. 2021 ("Efficient Large-Scale Language Model
  Training on GPU Clusters Using Megatron-LM"), Eq. 2: P = 12*L*h^2 * (1 + 13/(12h) + (V+s)/(12Lh)).
- Model FLOPs per token (no recompute): 6*N + 12*L*S*(H*Q) with N the parameters in matmuls
  (embedding lookups excluded, a tied embedding counted once as the logit layer), H heads of size Q (kv_channels)
  over S tokens of context: the matmul term of Kaplan et al. 2020 plus the attention-score term of
  Chowdhery et al. 2022 (PaLM), Appendix B. For GPT (Q = h/H) this is Narayanan et al.'s Eq. 3
  without recomputation: 72*B*s*l*h^2 * (1 + s/(6h) + V/(12lh)) per batch of B sequences.
- Recompute adds forward passes the model FLOPs do not count (hardware FLOPs): `full` one more
  forward of every transformer layer, 2*N_layers + 4*L*S*(H*Q) per token (Narayanan Eq. 3 is the
  GPT case: 96*B*s*l*h^2 * (1 + s/(6h) + V/(16lh))); `selective` one more forward of core attention
  only (the QK^T and AV products, 4*L*S*(H*Q) per token), the part Korthikanti et al. 2022 recompute.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pretrain.errors import ConfigError

if TYPE_CHECKING:
    from trainer.config import ModelConfig


@dataclass(frozen=True)
class Gpu:
    peak_bf16: float
    """Dense (no sparsity) bf16 tensor-core FLOP/s from the vendor's data sheet."""
    memory_gb: float
    """Device memory in GB (1e9 bytes), as the data sheet states it."""
    nvlink_gb_per_s: float
    """One-way per-GPU bandwidth inside a node (half the data sheet's bidirectional figure)."""


GPUS: dict[str, Gpu] = {
    "a100": Gpu(312e12, 80, 300),  # A100 SXM 80GB; NVLink 3: 600 GB/s bidirectional
    "a100-40gb": Gpu(312e12, 40, 300),
    "h100": Gpu(989e12, 80, 450),  # H100 SXM; NVLink 4: 900 GB/s bidirectional
    "h100-pcie": Gpu(756e12, 80, 300),  # NVLink bridge 600 GB/s
    "h200": Gpu(989e12, 141, 450),  # same compute as H100 SXM, 141 GB HBM3e
    "b200": Gpu(2250e12, 180, 900),  # HGX B200: 1.44 TB for 8 GPUs; NVLink 5: 1.8 TB/s
    "l40s": Gpu(362e12, 48, 32),  # no NVLink: PCIe Gen4 x16
    "mi300x": Gpu(1307e12, 192, 448),  # AMD data sheet; Infinity Fabric 7 x 64 GB/s one way
}
GPU_ALIASES = {"h100-sxm": "h100", "a100-80gb": "a100", "h200-sxm": "h200"}


def gpu_spec(name: str) -> tuple[str, Gpu]:
    """The canonical key and spec of a GPU name (case-insensitive, aliases like H100-SXM)."""
    key = name.lower()
    key = GPU_ALIASES.get(key, key)
    if key not in GPUS:
        raise ConfigError(
            f"GPU {name!r} is unknown; known: {', '.join(GPUS)}; or give --peak-tflops and "
            "plan.gpu_memory_gb"
        )
    return key, GPUS[key]


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


def attention_flops_per_token(model: ModelConfig, seq_length: int) -> float:
    """QK^T and AV over `seq_length` tokens of context, forward and backward, all layers."""
    width = model.num_attention_heads * model.head_dim
    return 12.0 * model.num_layers * seq_length * width


def matmul_params(counts: dict) -> int:
    """Parameters that multiply activations: embedding lookups (learned positions, and the input
    embedding when the output layer is untied) cost no FLOPs; a tied embedding is the logit layer."""
    lookups = counts["position_embedding"] + (counts["embedding"] if counts["output_layer"] else 0)
    return counts["total"] - lookups


def model_flops_per_token(num_params: int, model: ModelConfig, seq_length: int) -> float:
    """6*N + 12*L*S*(H*Q) with N the matmul parameters: the FLOPs MFU counts (no recompute)."""
    return 6.0 * num_params + attention_flops_per_token(model, seq_length)


def recompute_flops_per_token(
    model: ModelConfig, layer_params: int, seq_length: int, mode: str
) -> float:
    """Extra forward FLOPs per token that recompute `mode` executes (none/selective/full)."""
    core_attention_forward = attention_flops_per_token(model, seq_length) / 3
    if mode == "full":
        return 2.0 * model.num_layers * layer_params + core_attention_forward
    if mode == "selective":
        return core_attention_forward
    return 0.0


def flops_per_token(
    model: ModelConfig, vocab_size: int, seq_length: int, tensor_parallel: int = 1
) -> dict[str, float]:
    """Model FLOPs (what MFU counts), 6N alone, and the hardware FLOPs recompute executes."""
    counts = parameter_breakdown(model, vocab_size, tensor_parallel)
    model_flops = model_flops_per_token(matmul_params(counts), model, seq_length)
    extra = recompute_flops_per_token(model, counts["per_layer"], seq_length, model.recompute)
    return {
        "6N": 6.0 * counts["total"],
        "model": model_flops,
        "recompute": extra,
        "hardware": model_flops + extra,
    }
