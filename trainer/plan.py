"""`pretrain plan`: parameters, compute, memory, data and layout of a run, before any process
starts. Formulas and sources: trainer/flops.py, trainer/plan_memory.py, trainer/plan_checks.py."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from pretrain.artifacts import mixture as mixture_artifact
from pretrain.artifacts import tokenizer as tokenizer_artifact
from pretrain.artifacts.mixture import MixtureFields
from pretrain.errors import ConfigError
from trainer.config import TrainConfig
from trainer.flops import flops_per_token, gpu_spec, narayanan_eq2, parameter_breakdown
from trainer.plan_checks import communication, data_checks, data_warnings, memory_fixes
from trainer.plan_memory import memory_per_gpu


def layout_errors(config: TrainConfig, mixture_global_batch: int | None) -> list[str]:
    """Every layout problem, each naming the fields, the values and what to change."""
    m, p, b = config.model, config.parallel, config.batch
    tp, pp, cp = p.tensor, p.pipeline, p.context
    errors = []
    if m.kv_channels is None and m.hidden_size % m.num_attention_heads:
        errors.append(
            f"model.hidden_size={m.hidden_size} is not divisible by "
            f"model.num_attention_heads={m.num_attention_heads}: set model.kv_channels (the "
            "head size) or change one of them"
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
    if m.num_layers % pp:
        errors.append(f"model.num_layers={m.num_layers} is not divisible by parallel.pipeline={pp}")
    if tp > p.gpus_per_node:
        errors.append(
            f"parallel.tensor={tp} exceeds parallel.gpus_per_node={p.gpus_per_node}: "
            "tensor parallelism must stay within a node (its 4 all-reduces per layer per "
            "micro-batch would run at inter-node speed, ~10x slower than NVLink); use "
            "parallel.pipeline or ZeRO across nodes"
        )
    try:
        p.check_world(p.world_size, f"parallel.nodes {p.nodes} x gpus_per_node {p.gpus_per_node}")
    except ConfigError as exc:
        errors.append(str(exc))
    dp = p.data_parallel
    try:
        b.microbatches(dp)
    except ConfigError as exc:
        errors.append(str(exc))
    if cp > 1 and m.seq_length % (2 * cp):
        errors.append(f"model.seq_length={m.seq_length} is not divisible by 2 * context={2 * cp}")
    if mixture_global_batch is not None and mixture_global_batch != b.global_batch_size:
        errors.append(
            f"the mixture was built for global batch W={mixture_global_batch}, "
            f"batch.global_batch_size={b.global_batch_size}: rebuild the mixture with "
            f"global_batch={b.global_batch_size} or change the batch"
        )
    return errors


def _mixture(config: TrainConfig) -> MixtureFields | None:
    """The mixture's fields (sizes checked, not bytes: a plan trusts nothing it reads), or None
    before it is built (a plan is often made first)."""
    directory = config.data.mixture_dir
    if not directory or not (Path(directory) / "manifest.json").is_file():
        return None
    return mixture_artifact.open(directory, deep=False).fields


def _vocab(config: TrainConfig, mixture: MixtureFields | None) -> int:
    vocab = config.model.vocab_size or (
        mixture and mixture.tokenizer and mixture.tokenizer.vocab_size
    )
    tokenizer = config.data.tokenizer_dir
    if not vocab and tokenizer and (Path(tokenizer) / "manifest.json").is_file():
        vocab = tokenizer_artifact.open(tokenizer, deep=False).fields.tokenizer.vocab_size
    if not vocab:
        raise ConfigError(
            "model.vocab_size is not set and neither data.tokenizer_dir nor a built "
            "data.mixture_dir names the vocabulary: set one of them"
        )
    return int(vocab)


def _hardware(config: TrainConfig) -> tuple[str, float, float, float]:
    """(GPU key, peak FLOP/s, memory GB, intra-node GB/s) from the config and the GPU table."""
    name, spec = gpu_spec(config.plan.gpu or config.metrics.mfu_gpu)
    peak = config.metrics.peak_flops or spec.peak_bf16
    memory = config.plan.gpu_memory_gb or spec.memory_gb
    return name, peak, memory, config.plan.intra_node_gb_per_s or spec.nvlink_gb_per_s


def _compute(config: TrainConfig, vocab: int, peak: float, mfu: float, overhead: float) -> dict:
    m = config.model
    per_token = flops_per_token(m, vocab, m.seq_length, config.parallel.tensor)
    step_tokens = config.batch.global_batch_size * m.seq_length
    tokens = config.data.train_tokens or (config.run.train_steps or 0) * step_tokens
    world = config.parallel.world_size
    # `mfu` is the utilization of every executed FLOP; recompute makes the run take longer and
    # lowers the model-FLOPs MFU that results.
    train_seconds = per_token["hardware"] * tokens / (world * peak * mfu)
    return {
        "flops_per_token": per_token,
        "flops_per_step": per_token["model"] * step_tokens,
        "hardware_flops_per_step": per_token["hardware"] * step_tokens,
        "tokens": tokens,
        "steps": math.ceil(tokens / step_tokens) if step_tokens else 0,
        "total_flops": per_token["model"] * tokens,
        "total_hardware_flops": per_token["hardware"] * tokens,
        "total_flops_6N": per_token["6N"] * tokens,
        "peak_flops_per_gpu": peak,
        "hardware_utilization": mfu,
        "mfu": mfu * per_token["model"] / per_token["hardware"],
        "overhead": overhead,
        "step_seconds": per_token["hardware"] * step_tokens / (world * peak * mfu),
        "gpu_days": train_seconds * world * overhead / 86400,
        "wall_days": train_seconds * overhead / 86400,
    }


def build_plan(config: TrainConfig, allow_oom: bool = False) -> dict[str, Any]:
    """The whole plan as a dict; raises ConfigError with every layout problem on one line, and
    when the plan does not fit the GPU's memory (unless allow_oom, which makes it a warning)."""
    mixture = _mixture(config)
    errors = layout_errors(config, mixture.global_batch if mixture else None)
    if errors:
        raise ConfigError("; ".join(errors))
    vocab = _vocab(config, mixture)
    counts = parameter_breakdown(config.model, vocab, config.parallel.tensor)
    name, peak, memory_gb, intra = _hardware(config)
    compute = {"gpu": name, **_compute(config, vocab, peak, config.plan.mfu, config.plan.overhead)}
    memory = memory_per_gpu(config, counts)
    limit = memory_gb * config.plan.usable_memory_fraction
    memory.update(device_gb=memory_gb, usable_gb=limit, fits=memory["total_gb"] <= limit)
    data = data_checks(config, counts["total"], compute["tokens"], compute["steps"])
    warnings = data_warnings(data, compute["tokens"])
    capacity = (
        sum((c.available_tokens or 0) * (c.max_epochs or 1) for c in mixture.components)
        if mixture
        else 0
    )
    available = config.data.available_tokens or capacity or None
    data["available_tokens"] = available
    if available is not None and compute["tokens"] > available:
        warnings.append(
            f"the budget of {compute['tokens']:,} tokens exceeds the {available:,} the data can "
            "give at its epoch caps"
        )
    if not memory["fits"]:
        fixes = memory_fixes(
            config, lambda c: parameter_breakdown(c.model, vocab, c.parallel.tensor), limit
        )
        memory["fixes"] = fixes
        message = (
            f"memory: the plan needs {memory['total_gb']:.1f} GB per GPU, {name} has "
            f"{memory_gb:g} GB ({limit:.1f} GB usable at plan.usable_memory_fraction="
            f"{config.plan.usable_memory_fraction}); "
            + (
                f"fits with {'; or '.join(fixes)}"
                if fixes
                else "no single knob fixes it: combine ZeRO, TP, PP and recompute or use more GPUs"
            )
        )
        if not allow_oom:
            raise ConfigError(message + " (--allow-oom plans anyway)")
        warnings.append(message)
    p, b = config.parallel, config.batch
    layout = {
        "world_size": p.world_size,
        "tensor": p.tensor,
        "pipeline": p.pipeline,
        "context": p.context,
        "data": p.data_parallel,
        "zero": config.parallel.zero,
        "grad_accumulation": b.global_batch_size // (b.micro_batch_size * p.data_parallel),
        "tokens_per_step": b.global_batch_size * config.model.seq_length,
    }
    comm = communication(
        config, memory["parameters_on_gpu"], intra, config.plan.inter_node_gb_per_s
    )
    parameters = {
        **counts,
        "approx_12Lh2": 12 * config.model.num_layers * config.model.hidden_size**2,
        "narayanan_eq2": narayanan_eq2(
            config.model.num_layers,
            config.model.hidden_size,
            counts["padded_vocab_size"],
            config.model.seq_length,
        ),
    }
    return {
        "parameters": parameters,
        "compute": compute,
        "memory_per_gpu": memory,
        "data": data,
        "layout": layout,
        "communication_per_step": comm,
        "warnings": warnings,
    }


def format_plan(plan: dict[str, Any]) -> str:
    par, comp, mem, lay, data = (
        plan[key] for key in ("parameters", "compute", "memory_per_gpu", "layout", "data")
    )
    per_token, act, comm = (
        comp["flops_per_token"],
        mem["activations_gb"],
        plan["communication_per_step"],
    )
    lines = [
        f"parameters      {par['total'] / 1e9:8.3f} B exact (non-embedding "
        f"{par['non_embedding'] / 1e9:.3f} B); 12Lh^2 {par['approx_12Lh2'] / 1e9:.3f} B; "
        f"Narayanan Eq.2 {par['narayanan_eq2'] / 1e9:.3f} B",
        f"layout          world {lay['world_size']} = TP {lay['tensor']} x PP {lay['pipeline']} x "
        f"CP {lay['context']} x DP {lay['data']}, ZeRO {lay['zero']}; grad accumulation "
        f"{lay['grad_accumulation']}; global batch {lay['tokens_per_step']:,} tokens",
        f"compute         {per_token['model']:.3e} model FLOPs/token (6N {per_token['6N']:.3e}) "
        f"+ {per_token['recompute']:.3e} recompute ({mem['recompute']}); "
        f"{comp['total_hardware_flops']:.3e} FLOPs for {comp['tokens']:,} tokens "
        f"({comp['steps']:,} steps)",
        f"time            {comp['wall_days']:.2f} days wall, {comp['gpu_days']:.1f} GPU-days on "
        f"{comp['gpu']} ({comp['peak_flops_per_gpu'] / 1e12:.0f} TFLOP/s peak) at "
        f"{comp['hardware_utilization']:.0%} of peak (MFU {comp['mfu']:.1%}) x overhead "
        f"{comp['overhead']}; {comp['step_seconds']:.2f} s/step",
        f"memory/GPU      weights {mem['weights_gb']:.2f} GB, grads {mem['grads_gb']:.2f} GB, "
        f"optimizer {mem['optimizer_gb']:.2f} GB, activations {act[mem['recompute']]:.2f} GB "
        f"at recompute={mem['recompute']} (none {act['none']:.2f}, selective "
        f"{act['selective']:.2f}, full {act['full']:.2f}), logits {mem['logits_gb']:.2f} GB; "
        f"total {mem['total_gb']:.2f} GB of {mem['usable_gb']:.1f} usable "
        f"({'fits' if mem['fits'] else 'DOES NOT FIT'})",
        "comm/step       "
        + ", ".join(
            f"{kind.split('_')[0].upper()} {comm[kind]['gb']:.2f} GB = {comm[kind]['seconds']:.3f} s "
            f"at {comm[kind]['gb_per_s']:g} GB/s"
            for kind in ("data_parallel", "tensor_parallel", "pipeline_parallel")
        )
        + f" (DP {comm['dp_volume_psi']:g} x Psi)",
        f"data            {data['tokens_per_parameter']:.1f} tokens per parameter (15-30; "
        f"Chinchilla-optimal {data['chinchilla_optimal_tokens']:.3g} tokens); warmup "
        f"{data['warmup_steps']:,} steps ({data['warmup_fraction']:.1%}); lr {data['peak_lr']:g} "
        f"-> min {data['min_lr']:g}",
    ]
    lines += [f"warning         {w}" for w in plan["warnings"]]
    return "\n".join(lines)
