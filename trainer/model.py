"""Megatron-Core adapter: our `TrainConfig` converted once into Megatron's configs, this rank's
GPTModel, megatron DDP and the optimizer; and the fast path (`fast_path_flags`, a pure function
of the config and device so tests check the GPU decision without a GPU): on CUDA the fusions, TE
layers when installed, sequence parallel when TP > 1; on CPU none (megatron-core 0.16.1 has only
CUDA kernels for them)."""

from __future__ import annotations

import atexit
import datetime
import importlib.util
import os
import random
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from pretrain.errors import ConfigError
from trainer.cpu_compat import apply_cpu_patches, device_context, needs_cpu_patches

if TYPE_CHECKING:
    from trainer.config import TrainConfig

# attention_backend writes NVTE_* variables into os.environ; a second model built in the same
# process with another backend then fails. We clear them before each build (one backend per build).
_NVTE_PREFIX = "NVTE_"


def resolve_backend(config: TrainConfig) -> str:
    """gloo on CPU, nccl on GPU, unless the config names one."""
    if config.parallel.backend != "auto":
        return config.parallel.backend
    return "nccl" if torch.cuda.is_available() else "gloo"


def device_type(config: TrainConfig) -> str:
    """ "cuda" (nccl with CUDA present) or "cpu": where the run's ranks compute, what the
    fast-path decisions (below) are made for and whether megatron runs CPU-patched (the one
    device rule: the launcher, every rank and the smoke test ask it)."""
    return "cuda" if resolve_backend(config) == "nccl" and torch.cuda.is_available() else "cpu"


def default_threads() -> int:
    """Torch threads per CPU rank: PRETRAIN_TORCH_THREADS or OMP_NUM_THREADS when set, else 1.

    One thread per rank by default: on a shared or oversubscribed machine, multi-threaded CPU
    ranks spin against each other (measured here: 40x slower at 2 threads under load); raise it
    on a dedicated machine with PRETRAIN_TORCH_THREADS=<cores / nproc>.
    """
    for name in ("PRETRAIN_TORCH_THREADS", "OMP_NUM_THREADS"):
        if os.environ.get(name, "").isdigit():
            return max(1, int(os.environ[name]))
    return 1


def init_distributed(config: TrainConfig) -> None:
    """torch.distributed and megatron's parallel groups: from torchrun's environment, or, without
    it (WORLD_SIZE unset: a rank in the caller's process, or a model loaded there by
    trainer.inference), a world of one on an in-memory store, so no port is held and no
    rendezvous variable is left for the caller's children; that world is closed at exit."""
    from megatron.core import parallel_state

    from trainer.local_torchrun import bind_stores_to_loopback

    if device_type(config) == "cpu":
        torch.set_num_threads(default_threads())
        apply_cpu_patches("cpu")
    else:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    if not torch.distributed.is_initialized():
        timeout = datetime.timedelta(seconds=600)
        if "WORLD_SIZE" in os.environ:
            bind_stores_to_loopback()  # a 127.0.0.1 master store listens on loopback only
            torch.distributed.init_process_group(backend=resolve_backend(config), timeout=timeout)
        else:
            store = torch.distributed.HashStore()
            torch.distributed.init_process_group(
                backend=resolve_backend(config), store=store, rank=0, world_size=1, timeout=timeout
            )
            # A gloo group still alive at interpreter teardown can abort the process
            # ("terminate called without an active exception"): close what we opened, once.
            atexit.unregister(close_distributed)
            atexit.register(close_distributed)
    par = config.parallel
    par.check_world(torch.distributed.get_world_size(), "torchrun's --nproc-per-node x --nnodes")
    parallel_state.destroy_model_parallel()
    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=par.tensor,
        pipeline_model_parallel_size=par.pipeline,
        context_parallel_size=par.context,
    )


def close_distributed() -> None:
    """Megatron's groups, then the process group (left registered, a later world in this process
    would reuse groups of the destroyed one)."""
    from megatron.core import parallel_state

    parallel_state.destroy_model_parallel()
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def transformer_config(config: TrainConfig) -> Any:
    """Our model/parallel/optim sections as megatron's TransformerConfig (built once)."""
    from megatron.core.transformer import TransformerConfig

    model, par, device = config.model, config.parallel, device_type(config)
    bf16 = config.optim.precision == "bf16"
    return TransformerConfig(
        num_layers=model.num_layers,
        hidden_size=model.hidden_size,
        num_attention_heads=model.num_attention_heads,
        num_query_groups=model.query_groups,
        ffn_hidden_size=model.ffn_size,
        kv_channels=model.head_dim,
        gated_linear_unit=model.swiglu,
        activation_func=torch.nn.functional.silu if model.swiglu else torch.nn.functional.gelu,
        normalization=model.normalization,
        layernorm_epsilon=model.norm_epsilon,
        add_bias_linear=model.add_bias_linear,
        attention_dropout=model.attention_dropout,
        hidden_dropout=model.hidden_dropout,
        init_method_std=model.init_method_std,
        tensor_model_parallel_size=par.tensor,
        pipeline_model_parallel_size=par.pipeline,
        context_parallel_size=par.context,
        bf16=bf16,
        params_dtype=torch.bfloat16 if bf16 else torch.float32,
        pipeline_dtype=torch.bfloat16 if bf16 else torch.float32,
        autocast_dtype=None,
        use_cpu_initialization=device == "cpu",
        perform_initialization=True,
        **fast_path_flags(config, device, te_available()),
        deallocate_pipeline_outputs=False,
    )


def build_model(config: TrainConfig, vocab_size: int) -> Any:
    """This rank's GPTModel (its pipeline stage): TransformerEngine layers when TE and CUDA are
    present, Megatron-Core local layers otherwise."""
    from megatron.core import parallel_state
    from megatron.core.models.gpt import GPTModel, gpt_layer_specs
    from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed

    for key in [k for k in os.environ if k.startswith(_NVTE_PREFIX)]:
        del os.environ[key]
    tconfig = transformer_config(config)
    gpu = device_type(config) == "cuda"
    if gpu and te_available():
        spec = gpt_layer_specs.get_gpt_layer_with_transformer_engine_spec()
    else:
        from trainer.attention import SDPAttention

        spec = gpt_layer_specs.get_gpt_layer_local_spec(normalization=config.model.normalization)
        spec.submodules.self_attention.submodules.core_attention = SDPAttention
    # CPU initialisation draws each full weight from torch's default generator, then splits it:
    # the same seed on every tensor-parallel rank makes TP=2 start from TP=1's exact weights.
    seed = config.run.seed + 100 * parallel_state.get_pipeline_model_parallel_rank()
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    with device_context():
        model_parallel_cuda_manual_seed(config.run.seed)
        model = GPTModel(
            config=tconfig,
            transformer_layer_spec=spec,
            vocab_size=config.model.padded_vocab_size(vocab_size, config.parallel.tensor),
            max_sequence_length=config.model.seq_length,
            pre_process=parallel_state.is_pipeline_first_stage(),
            post_process=parallel_state.is_pipeline_last_stage(),
            share_embeddings_and_output_weights=not config.model.untie_embeddings,
            position_embedding_type=config.model.position_embedding,
            rotary_base=config.model.rotary_base,
        )
        if gpu:
            model.cuda(torch.cuda.current_device())
    return model


def wrap_ddp(config: TrainConfig, model: Any) -> Any:
    """Megatron DDP around the model (contiguous grad buffers, bucketed all-reduce), or
    megatron_fsdp for parallel.zero 2 and 3 (CUDA only); with the hooks megatron's schedules
    call: without finalize_model_grads there is no DP all-reduce and no tied-embedding
    all-reduce between the first and last pipeline stages."""
    from megatron.core.distributed import (
        DistributedDataParallel,
        DistributedDataParallelConfig,
        finalize_model_grads,
    )

    device = device_type(config)
    zero = zero_wrapping(config, device)
    wrapper: Any = DistributedDataParallel
    if zero.get("use_megatron_fsdp"):
        from megatron.core.distributed.fsdp.mcore_fsdp_adapter import FullyShardedDataParallel

        wrapper = FullyShardedDataParallel

    ddp_config = DistributedDataParallelConfig(
        **zero,
        overlap_grad_reduce=config.parallel.overlap_grad_reduce and device == "cuda",
        overlap_param_gather=config.parallel.overlap_param_gather and device == "cuda",
        grad_reduce_in_fp32=config.optim.grad_reduce_in_fp32 or config.optim.precision == "fp32",
        check_for_nan_in_grad=False,
        bucket_size=None,
    )
    with device_context():
        wrapped = wrapper(config=model.config, ddp_config=ddp_config, module=model)
    tconfig = model.config
    tconfig.no_sync_func = wrapped.no_sync
    tconfig.finalize_model_grads_func = finalize_model_grads
    if ddp_config.overlap_grad_reduce:
        tconfig.grad_sync_func = wrapped.start_grad_sync
    if ddp_config.overlap_param_gather:
        tconfig.param_sync_func = wrapped.start_param_sync
    return wrapped


def build_optimizer(config: TrainConfig, model: Any) -> Any:
    """Megatron's Adam(W) with fp32 main params; the distributed optimizer shards its state."""
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer

    optim = config.optim
    bf16 = optim.precision == "bf16"
    opt_config = OptimizerConfig(
        optimizer="adam",
        lr=optim.lr,
        min_lr=optim.lr * optim.min_lr_ratio,
        weight_decay=optim.weight_decay,
        adam_beta1=optim.beta1,
        adam_beta2=optim.beta2,
        adam_eps=optim.eps,
        clip_grad=optim.clip_grad,
        bf16=bf16,
        params_dtype=torch.bfloat16 if bf16 else torch.float32,
        use_distributed_optimizer=config.parallel.zero >= 1,
        overlap_param_gather=config.parallel.overlap_param_gather and device_type(config) == "cuda",
    )
    with device_context():
        return get_megatron_optimizer(opt_config, [model])


# ----- the fast path: what the device turns on (see the module doc) ---------------------------
def te_available() -> bool:
    return importlib.util.find_spec("transformer_engine") is not None


def sequence_parallel_on(config: TrainConfig, device: str) -> bool:
    """On when TP > 1 on CUDA unless the config turns it off; refused on CPU."""
    wanted = config.parallel.sequence_parallel
    if needs_cpu_patches(device):
        if wanted:
            raise ConfigError(
                "parallel.sequence_parallel=true needs CUDA (megatron-core's CPU LayerNorm "
                "fallback refuses it); unset it on CPU"
            )
        return False
    return config.parallel.sequence_parallel_on_gpu


def fast_path_flags(config: TrainConfig, device: str, te: bool) -> dict[str, Any]:
    """TransformerConfig keyword arguments for the fused kernels, sequence parallel and recompute."""
    gpu = not needs_cpu_patches(device)
    model = config.model
    activation_fusible = model.swiglu or model.add_bias_linear  # GELU fusion needs a bias
    recompute: dict[str, Any] = {  # selective: megatron's default recompute_modules, core_attn
        "recompute_granularity": None if model.recompute == "none" else model.recompute,
        "recompute_method": "uniform" if model.recompute == "full" else None,
        "recompute_num_layers": 1 if model.recompute == "full" else None,
    }
    return {
        "sequence_parallel": sequence_parallel_on(config, device),
        "apply_rope_fusion": gpu and te and model.position_embedding == "rope",
        "bias_activation_fusion": gpu and activation_fusible,
        "masked_softmax_fusion": gpu,
        "bias_dropout_fusion": gpu,
        "gradient_accumulation_fusion": gpu and te,
        "persist_layer_norm": False,
        **recompute,
    }


def zero_wrapping(config: TrainConfig, device: str) -> dict[str, Any]:
    """DistributedDataParallelConfig arguments for parallel.zero (see trainer/plan_memory.py)."""
    stage = config.parallel.zero
    if stage <= 1:
        return {"use_distributed_optimizer": stage == 1}
    if needs_cpu_patches(device):
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
