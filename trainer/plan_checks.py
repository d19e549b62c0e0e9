"""The pre-launch checklist: data budget, schedule, memory fit (with the knob that fixes it) and
communication per step.

Communication volumes (elements per GPU per step, ring collectives moving 2(n-1)/n of the data
for an all-reduce and (n-1)/n for a reduce-scatter or all-gather):
- Data parallel (Rajbhandari et al. 2020, Sec. 7): all-reduce of the gradients, 2*Psi; ZeRO 1/2
  reduce-scatter grads + all-gather params, also 2*Psi; ZeRO 3 adds a second parameter all-gather
  in the backward, 3*Psi. Psi = parameters of the GPU's model-parallel shard.
- Tensor parallel (Shoeybi et al. 2019): 2 all-reduces of s*b*h activations per layer forward and
  2 backward (sequence parallel swaps each for an all-gather + reduce-scatter of the same volume),
  2 more with full recompute; per micro-batch, over the stage's L/PP layers.
- Pipeline parallel: each micro-batch sends its s*b*h activations forward and receives their
  gradients back, once per stage boundary.
"""

from __future__ import annotations

from typing import Any

from trainer.config import TrainConfig
from trainer.plan_memory import memory_per_gpu

CHINCHILLA_TOKENS_PER_PARAM = 20
"""Hoffmann et al. 2022 (Chinchilla), Table 3: compute-optimal tokens are ~20x the parameters."""
TOKENS_PER_PARAM_BAND = (15, 30)
WARMUP_BAND = (0.01, 0.02)


def data_checks(config: TrainConfig, params: int, tokens: int, steps: int) -> dict[str, Any]:
    """Tokens per parameter, Chinchilla-optimal tokens, warmup and the min-LR floor."""
    o = config.optim
    warmup = o.warmup_for(steps)
    return {
        "tokens_per_parameter": tokens / params if params else 0.0,
        "chinchilla_optimal_tokens": CHINCHILLA_TOKENS_PER_PARAM * params,
        "warmup_steps": warmup,
        "warmup_fraction": warmup / steps if steps else 0.0,
        "peak_lr": o.lr,
        "min_lr": o.lr * o.min_lr_ratio,
    }


def data_warnings(data: dict[str, Any], tokens: int) -> list[str]:
    warnings = []
    low, high = TOKENS_PER_PARAM_BAND
    if tokens and not low <= data["tokens_per_parameter"] <= high:
        warnings.append(
            f"{data['tokens_per_parameter']:.1f} tokens per parameter is outside {low}-{high} "
            f"(Chinchilla-optimal: {data['chinchilla_optimal_tokens']:.3g} tokens, ~20 per "
            "parameter): change data.train_tokens or the model size"
        )
    low, high = WARMUP_BAND
    if tokens and not low <= data["warmup_fraction"] <= high:
        warnings.append(
            f"warmup is {data['warmup_fraction']:.2%} of the steps ({data['warmup_steps']} "
            f"steps), outside the usual {low:.0%}-{high:.0%}: set optim.warmup_fraction"
        )
    if data["min_lr"] == 0:
        warnings.append(
            "optim.min_lr_ratio=0 decays the learning rate to zero; a floor of ~0.1x the peak "
            "is usual (Hoffmann et al. 2022 decay 10x)"
        )
    return warnings


def _fix_candidates(config: TrainConfig) -> list[tuple[str, dict[str, Any]]]:
    """Single-knob changes, cheapest throughput cost first."""
    p, m, b = config.parallel, config.model, config.batch
    out: list[tuple[str, dict[str, Any]]] = []
    for stage in (1, 2, 3):
        if config.parallel.zero < stage and p.data_parallel > 1:
            out.append((f"parallel.zero={stage}", {"parallel": {"zero": stage}}))
    if m.recompute == "none":
        out.append(("model.recompute=selective", {"model": {"recompute": "selective"}}))
    if m.recompute != "full":
        out.append(("model.recompute=full", {"model": {"recompute": "full"}}))
    if b.micro_batch_size > 1:
        out.append(("batch.micro_batch_size=1", {"batch": {"micro_batch_size": 1}}))
    if p.tensor * 2 <= p.gpus_per_node and m.num_attention_heads % (p.tensor * 2) == 0:
        out.append((f"parallel.tensor={p.tensor * 2}", {"parallel": {"tensor": p.tensor * 2}}))
    if m.num_layers % (p.pipeline * 2) == 0:
        out.append(
            (f"parallel.pipeline={p.pipeline * 2}", {"parallel": {"pipeline": p.pipeline * 2}})
        )
    return out


def _with(config: TrainConfig, update: dict[str, Any]) -> TrainConfig:
    data = config.model_dump()
    for section, values in update.items():
        data[section].update(values)
    if "tensor" in update.get("parallel", {}) or "pipeline" in update.get("parallel", {}):
        data["parallel"]["data"] = None  # the world stays, data parallel shrinks
    return TrainConfig.model_validate(data)


def memory_fixes(config: TrainConfig, counts_for: Any, limit_gb: float) -> list[str]:
    """Each single knob that brings the plan under `limit_gb`, with the total it gives."""
    fixes = []
    for label, update in _fix_candidates(config):
        try:
            candidate = _with(config, update)
        except ValueError:
            continue
        total = memory_per_gpu(candidate, counts_for(candidate))["total_gb"]
        if total <= limit_gb:
            fixes.append(f"{label} ({total:.1f} GB)")
    return fixes


def _ring(n: int, all_reduce: bool) -> float:
    return (2.0 if all_reduce else 1.0) * (n - 1) / n if n > 1 else 0.0


def communication(
    config: TrainConfig, local_params: int, intra_gb_s: float, inter_gb_s: float
) -> dict[str, Any]:
    """Bytes each GPU sends per optimizer step, per kind of parallelism, and the time at bandwidth."""
    p, m = config.parallel, config.model
    bf16 = config.optim.precision == "bf16"
    act_bytes = 2 if bf16 else 4
    grad_bytes = 4 if (config.optim.grad_reduce_in_fp32 or not bf16) else 2
    micro_batches = config.batch.global_batch_size // (
        config.batch.micro_batch_size * p.data_parallel
    )
    tokens_micro = m.seq_length * config.batch.micro_batch_size
    zero, d = config.parallel.zero, p.data_parallel
    if zero == 0:
        dp_bytes = _ring(d, True) * local_params * grad_bytes
        dp_psi = 2.0
    else:  # reduce-scatter grads, all-gather params (ZeRO 3: twice)
        gathers = 2 if zero == 3 else 1
        dp_bytes = _ring(d, False) * local_params * (grad_bytes + gathers * act_bytes)
        dp_psi = 2.0 + (gathers - 1)
    collectives = 4 + (2 if m.recompute == "full" else 0)
    tp_bytes = (
        (collectives * (m.num_layers / p.pipeline) * micro_batches * _ring(p.tensor, True))
        * tokens_micro
        * m.hidden_size
        * act_bytes
    )
    pp_bytes = 2 * micro_batches * tokens_micro * m.hidden_size * act_bytes if p.pipeline > 1 else 0
    # DP and PP groups span nodes once the model-parallel group fills a node.
    model_parallel = p.tensor * p.pipeline * p.context
    dp_bw = inter_gb_s if p.nodes > 1 and model_parallel * d > p.gpus_per_node else intra_gb_s
    pp_bw = inter_gb_s if p.nodes > 1 and p.tensor * p.pipeline > p.gpus_per_node else intra_gb_s
    tp_bw = intra_gb_s if p.tensor <= p.gpus_per_node else inter_gb_s
    rows = {
        "data_parallel": (dp_bytes, dp_bw),
        "tensor_parallel": (tp_bytes, tp_bw),
        "pipeline_parallel": (pp_bytes, pp_bw),
    }
    return {
        "dp_volume_psi": dp_psi if d > 1 else 0.0,
        **{
            name: {"gb": b / 1e9, "gb_per_s": bw, "seconds": b / 1e9 / bw}
            for name, (b, bw) in rows.items()
        },
        "note": "ring collectives; time without overlap with compute",
    }
