"""Core attention through `torch.nn.functional.scaled_dot_product_attention` for the local spec.

Megatron-Core's local `DotProductAttention` materialises the [b*heads, s, s] score matrix and runs
its own masked softmax; SDPA picks a fused kernel (flash / memory-efficient on GPU, a fused CPU
kernel otherwise) and handles GQA without repeating key/value heads. Same math, same interface.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
import torch.nn.functional as F
from megatron.core import tensor_parallel
from megatron.core.transformer.dot_product_attention import DotProductAttention
from megatron.core.transformer.enums import AttnMaskType


class SDPAttention(DotProductAttention):
    """Drop-in `core_attention` for megatron's SelfAttention: [s, b, heads, dim] in, [s, b, h] out."""

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attention_mask: torch.Tensor | None,
        attn_mask_type: Any = None,
        attention_bias: Any = None,
        packed_seq_params: Any = None,
    ) -> torch.Tensor:
        if packed_seq_params is not None or attention_bias is not None:
            raise NotImplementedError("SDPAttention supports neither packed sequences nor bias")
        mask_type = attn_mask_type if attn_mask_type is not None else self.attn_mask_type
        causal = mask_type == AttnMaskType.causal
        mask = None if causal or attention_mask is None else ~attention_mask  # True = attend
        q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))  # [b, heads, s, dim]
        dropout = self.attention_dropout.p if self.training else 0.0
        fork = (
            tensor_parallel.get_cuda_rng_tracker().fork() if dropout else contextlib.nullcontext()
        )
        with fork:
            context = F.scaled_dot_product_attention(
                q,
                k,
                v,
                attn_mask=mask,
                dropout_p=dropout,
                is_causal=causal,
                scale=self.softmax_scale,
                enable_gqa=q.shape[1] != k.shape[1],
            )
        seq, batch = query.shape[0], query.shape[1]
        return context.permute(2, 0, 1, 3).reshape(seq, batch, -1)
