"""The typed training config read by `pretrain plan` and `pretrain launch`, and where a rank's
trainer is constructed: `TrainConfig.build()`.

One YAML file, validated into `TrainConfig`. The trainer converts it once into Megatron-Core's
`TransformerConfig` / `OptimizerConfig` (trainer/model.py); there is no global argparse. Modules
below this one import it for type hints only (under TYPE_CHECKING), so `build()` may import them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import Field, model_validator

from pretrain.config import StrictModel
from pretrain.errors import ConfigError

if TYPE_CHECKING:
    from trainer.callbacks import Callback
    from trainer.loop import Trainer


class RunConfig(StrictModel):
    """What this run is and where it writes."""

    name: str = "run"
    kind: Literal["proxy", "full"] = "proxy"
    """`full` launches must pass the ablation gate (trainer.gate.check_gate) or --override-gate."""
    out_dir: str = "runs/run"
    seed: int = 1234
    train_steps: int | None = Field(None, ge=1)
    """Optimizer steps; None derives them from data.train_tokens / (global batch * seq_length)."""
    log_every: int = Field(1, ge=1)


class ModelConfig(StrictModel):
    """A decoder-only GPT (Megatron-Core GPTModel)."""

    num_layers: int = Field(2, ge=1)
    hidden_size: int = Field(128, ge=1)
    num_attention_heads: int = Field(4, ge=1)
    num_query_groups: int | None = Field(None, ge=1)
    """GQA: key/value head groups; None means multi-head attention (= num_attention_heads)."""
    ffn_hidden_size: int | None = Field(None, ge=1)
    """None: 4*hidden (GELU) or the LLaMA rule for SwiGLU (8/3*hidden rounded up to 64)."""
    kv_channels: int | None = Field(None, ge=1)
    """Per-head dimension; None means hidden_size / num_attention_heads."""
    vocab_size: int | None = Field(None, ge=2)
    """None: taken from the tokenizer (data.tokenizer_dir or the mixture's tokenizer)."""
    make_vocab_size_divisible_by: int = Field(128, ge=1)
    seq_length: int = Field(256, ge=8)
    """Maximum sequence length (RoPE positions); a mixture phase may use a shorter one."""
    swiglu: bool = True
    normalization: Literal["RMSNorm", "LayerNorm"] = "RMSNorm"
    norm_epsilon: float = Field(1e-5, gt=0)
    position_embedding: Literal["rope", "learned_absolute"] = "rope"
    rotary_base: int = Field(10000, ge=1)
    untie_embeddings: bool = False
    """Separate output layer weights (untied) instead of sharing the input embedding."""
    add_bias_linear: bool = False
    attention_dropout: float = Field(0.0, ge=0, le=1)
    hidden_dropout: float = Field(0.0, ge=0, le=1)
    init_method_std: float = Field(0.02, gt=0)
    recompute: Literal["none", "selective", "full"] = "none"
    """Activation recompute: `selective` recomputes only core attention (Korthikanti et al. 2022),
    `full` every layer from its input (saves memory, costs ~1/3 more compute)."""

    @property
    def query_groups(self) -> int:
        return self.num_query_groups or self.num_attention_heads

    @property
    def ffn_size(self) -> int:
        if self.ffn_hidden_size is not None:
            return self.ffn_hidden_size
        if self.swiglu:
            return 64 * ((int(8 * self.hidden_size / 3) + 63) // 64)
        return 4 * self.hidden_size

    @property
    def head_dim(self) -> int:
        return self.kv_channels or self.hidden_size // self.num_attention_heads

    def padded_vocab_size(self, vocab_size: int, tensor_parallel: int = 1) -> int:
        """Megatron pads the vocabulary to a multiple of make_vocab_size_divisible_by * TP."""
        multiple = self.make_vocab_size_divisible_by * tensor_parallel
        return multiple * ((vocab_size + multiple - 1) // multiple)


class ParallelConfig(StrictModel):
    """Layout: world = nodes * gpus_per_node = tensor * pipeline * context * data."""

    tensor: int = Field(1, ge=1)
    pipeline: int = Field(1, ge=1)
    context: int = Field(1, ge=1)
    """Context parallel: plan-only until measured on a GPU."""
    data: int | None = Field(None, ge=1)
    """None: derived as world / (tensor * pipeline * context)."""
    nodes: int = Field(1, ge=1)
    gpus_per_node: int = Field(1, ge=1)
    """Processes per node (GPUs on a GPU node, CPU ranks on CPU)."""
    backend: Literal["auto", "gloo", "nccl"] = "auto"
    """auto: nccl when CUDA is available, gloo otherwise."""
    overlap_grad_reduce: bool = False
    overlap_param_gather: bool = False
    zero: Literal[0, 1, 2, 3] = 0
    """ZeRO stage (Rajbhandari et al. 2020) as Megatron-Core runs it: 0 plain DDP, 1 the
    distributed optimizer (optimizer state sharded over the data-parallel ranks), 2 and 3
    megatron_fsdp sharding optim+grads / optim+grads+params (CUDA only)."""
    sequence_parallel: bool | None = None
    """Shard layer-norm/dropout activations over the TP group. None: on when tensor > 1 on GPU."""

    @property
    def sequence_parallel_on_gpu(self) -> bool:
        """What a GPU run does (the trainer's rule, and what `pretrain plan` reports)."""
        return self.tensor > 1 and self.sequence_parallel is not False

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def data_parallel(self) -> int:
        if self.data is not None:
            return self.data
        return max(1, self.world_size // (self.tensor * self.pipeline * self.context))

    def check_world(self, world: int, processes: str) -> None:
        """The one world-size rule (the launcher, every rank, the plan): `world` ranks, counted
        as `processes` says, must be a multiple of tensor*pipeline*context, and parallel.data
        when set must be their quotient."""
        model_parallel = self.tensor * self.pipeline * self.context
        if world % model_parallel:
            raise ConfigError(
                f"{processes} = {world} processes is not a multiple of tensor*pipeline*context = "
                f"{model_parallel}; change them or the parallel sizes"
            )
        if self.data is not None and self.data != world // model_parallel:
            raise ConfigError(
                f"parallel.data = {self.data} but {processes} = {world} processes / "
                f"{model_parallel} = {world // model_parallel}; unset parallel.data or run "
                f"{self.data * model_parallel} processes"
            )


class OptimConfig(StrictModel):
    """AdamW with linear warmup then cosine decay to min_lr_ratio * lr."""

    lr: float = Field(3e-4, gt=0)
    min_lr_ratio: float = Field(0.1, ge=0, le=1)
    warmup_fraction: float = Field(0.02, ge=0, lt=1)
    """Warmup steps as a fraction of all steps (1-2% is usual)."""
    warmup_steps: int | None = Field(None, ge=0)
    """Overrides warmup_fraction when set."""
    weight_decay: float = Field(0.1, ge=0)
    beta1: float = Field(0.9, ge=0, lt=1)
    beta2: float = Field(0.95, ge=0, lt=1)
    eps: float = Field(1e-8, gt=0)
    clip_grad: float = Field(1.0, ge=0)
    precision: Literal["fp32", "bf16"] = "fp32"
    """fp32 on CPU; bf16 (fp32 master weights and grads) on GPU."""
    grad_reduce_in_fp32: bool = True
    """bf16 runs: keep and all-reduce gradients in fp32 (4 bytes/param) instead of bf16 (2)."""

    def warmup_for(self, total_steps: int) -> int:
        """Warmup steps of a run of `total_steps` (what the trainer runs and `pretrain plan` says)."""
        if self.warmup_steps is not None:
            return min(self.warmup_steps, total_steps)
        return max(1, round(self.warmup_fraction * total_steps)) if self.warmup_fraction else 0


class BatchConfig(StrictModel):
    micro_batch_size: int = Field(1, ge=1)
    global_batch_size: int = Field(8, ge=1)
    """Sequences per optimizer step (= the mixture's global batch W)."""

    def microbatches(self, data_parallel: int) -> int:
        """Micro-batches per step on each of `data_parallel` ranks (the one batch rule: every
        rank and the plan); refused when they do not divide the global batch."""
        if self.global_batch_size % (self.micro_batch_size * data_parallel):
            raise ConfigError(
                f"batch.global_batch_size={self.global_batch_size} is not divisible by "
                f"micro_batch_size {self.micro_batch_size} x data parallel {data_parallel}; "
                "change one of them"
            )
        return self.global_batch_size // (self.micro_batch_size * data_parallel)


class PhaseConfig(StrictModel):
    """A training phase for synthetic data (a mixture brings its own phases)."""

    name: str = "main"
    seq_length: int = Field(128, ge=8)
    fraction: float = Field(1.0, gt=0, le=1)


class DataConfig(StrictModel):
    """Where tokens come from: a mixture artifact, or synthetic data for tests and smoke runs."""

    source: Literal["mixture", "synthetic"] = "mixture"
    mixture_dir: str | None = None
    encoded_dir: str | None = None
    """Encoded .bin/.idx directory when the mixture does not record where it lives."""
    tokenizer_dir: str | None = None
    """Pins the tokenizer: its lock hash must equal the mixture's, at start and at every resume."""
    expect_build_sha256: str | None = None
    """Pins the mixture build; resume also refuses when it differs from the checkpoint's."""
    train_tokens: int | None = Field(None, ge=1)
    """Token budget of the run (for the plan and the step count)."""
    available_tokens: int | None = Field(None, ge=1)
    """For the plan when no mixture is given: unique tokens the data holds."""
    synthetic_documents: int = Field(256, ge=1)
    synthetic_vocab: int = Field(512, ge=8)
    phases: list[PhaseConfig] = Field(default_factory=lambda: [PhaseConfig()])
    """Synthetic data only: the sequence length per phase and its share of the steps."""


class CheckpointConfig(StrictModel):
    every: int = Field(100, ge=1)
    """Save every N steps (and at the end)."""
    keep_last: int = Field(2, ge=1)
    keep_every: int | None = Field(None, ge=1)
    """Also keep every checkpoint whose step is a multiple of this."""
    async_save: bool = False
    resume: bool = True
    """Resume from the newest valid checkpoint in RUN/checkpoints when present."""
    init_from: str | None = None
    """A new run starts from this checkpoint's weights (RUN/checkpoints/iter_NNNNNNN, or a run
    directory: its newest valid checkpoint) with a fresh optimizer, schedule and data position:
    continued pretraining, annealing. Same model and tokenizer; recorded in the run manifest's
    inputs. A run that has checkpoints of its own resumes from them instead."""


class GuardConfig(StrictModel):
    """Loss-spike guard: compares each step with the recent history."""

    enabled: bool = True
    window: int = Field(20, ge=2)
    min_history: int = Field(20, ge=1)
    """Good steps in the history before a spike ratio is judged (a full window, as OLMo-core's
    spike detector waits for its window; 5 tripped healthy proxies in their first 20 steps)."""
    loss_spike_ratio: float = Field(2.0, gt=1)
    """A loss above ratio * the running median of the window is a spike."""
    grad_norm_spike_ratio: float = Field(10.0, gt=1)
    """A grad norm above ratio * the running median of the window is a spike."""
    max_rollbacks: int = Field(3, ge=0)
    skip_batches: int = Field(1, ge=1)
    """Global batches skipped after a rollback, starting with the offending one."""


Tracker = Literal["tensorboard", "mlflow", "wandb"]


class MetricsConfig(StrictModel):
    peak_flops: float | None = Field(None, gt=0)
    """Assumed peak FLOP/s per device for MFU; None: 989e12 (H100/H200 dense bf16) on GPU,
    a measured matmul peak on CPU."""
    mfu_gpu: str = "H100-SXM"
    trackers: tuple[Tracker, ...] = ("tensorboard",)
    """Where rank 0 logs each record's numbers besides metrics.jsonl (trainer/trackers.py):
    tensorboard (RUN/tensorboard), mlflow (file store RUN/mlruns unless MLFLOW_TRACKING_URI),
    wandb (offline in RUN/wandb unless WANDB_MODE); mlflow and wandb need the `tracking` extra."""


class PlanConfig(StrictModel):
    """Assumptions of `pretrain plan` (each also a flag of the command)."""

    mfu: float = Field(0.40, gt=0, le=1)
    """Achieved fraction of peak on every executed FLOP, recompute included (the "% of peak" of
    Narayanan et al. 2021, Table 1). The plan reports the model-FLOPs MFU that follows."""
    overhead: float = Field(1.15, ge=1)
    """Wall time on top of pure training: restarts, evals, checkpoints (a stated assumption)."""
    gpu: str | None = None
    """A key of trainer.flops.GPUS (h100, h200, a100, ...); None: metrics.mfu_gpu."""
    gpu_memory_gb: float | None = Field(None, gt=0)
    """Device memory per GPU (GB = 1e9); None: the GPU table's."""
    usable_memory_fraction: float = Field(0.90, gt=0, le=1)
    """Share of device memory the plan may fill (CUDA context, NCCL buffers, fragmentation)."""
    intra_node_gb_per_s: float | None = Field(None, gt=0)
    """Per-GPU one-way bandwidth inside a node (NVLink); None: the GPU table's."""
    inter_node_gb_per_s: float = Field(50.0, gt=0)
    """Per-GPU one-way bandwidth across nodes: 50 GB/s = one 400 Gb/s InfiniBand NIC per GPU."""


class EvalConfig(StrictModel):
    """Evaluation during training (trainer/periodic_eval.py): bpb on fixed eval sets."""

    every: int | None = Field(None, ge=1)
    """Evaluate every N steps (and at the last step); None: no evaluation during training."""
    sets: str | None = None
    """An `evalset` artifact (`pretrain eval build`)."""
    max_docs: int | None = Field(50, ge=1)
    """Documents per eval set (the same cap `pretrain eval run --max-docs` takes)."""
    batch_size: int = Field(8, ge=1)

    @model_validator(mode="after")
    def _sets_given(self) -> EvalConfig:
        if self.every is not None and not self.sets:
            raise ValueError("eval.every is set but eval.sets is not; point it at an evalset")
        return self


class CriteriaConfig(StrictModel):
    """How an ablation decides (`criteria` of `pretrain ablate`) and what the launch gate
    re-checks on its report (`gate`): trainer/gate_rule.py applies them."""

    metric: str = "bpb"
    """Target metric (results key, e.g. bpb, bpb/web/en, task/piqa/acc_norm)."""
    min_improvement: float = Field(0.0, ge=0)
    """The lower bound of the chosen recipe's paired improvement over EACH alternative must
    exceed this."""
    confidence: float = Field(0.95, gt=0.5, lt=1.0)
    """With equal recipes the gate passes at most 1 - confidence of the time: the interval of the
    chosen recipe's improvement is widened for the choice among K recipes (trainer/gate_stats.py)."""
    require_seed_spread: bool = True
    """Seed noise must be measured (>= 2 seeds); off: one seed's document interval suffices."""
    max_domain_regression: float | None = Field(None, ge=0)
    """No domain may be worse than the alternative by more than this bpb (upper bound)."""
    require_scale_agreement: bool = True
    """With two proxies, every pair with the chosen recipe agrees at both scales, and its
    small-scale margin is outside the noise."""
    min_token_fraction: float = Field(0.95, gt=0, le=1)
    """A proxy run is unhealthy (left out, refuses the gate) when scored at a step other than
    its last trained one or when it trained fewer tokens than this share of its plan."""


class GateConfig(CriteriaConfig):
    """What the ablation report must show before a `run.kind: full` launch (trainer.gate)."""

    report_dir: str | None = None


class TrainConfig(StrictModel):
    """`pretrain plan` / `pretrain launch` config."""

    run: RunConfig = Field(default_factory=RunConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    parallel: ParallelConfig = Field(default_factory=ParallelConfig)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    batch: BatchConfig = Field(default_factory=BatchConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    guard: GuardConfig = Field(default_factory=GuardConfig)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    gate: GateConfig = Field(default_factory=GateConfig)
    plan: PlanConfig = Field(default_factory=PlanConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)

    def build(self, callbacks: Sequence[Callback] = (), evaluate: bool = True) -> Trainer:
        """This rank's Trainer and everything it is made of, constructed here and only here
        (OLMo-core's `config.build()`). Every rank calls it (trainer/worker.py); benchmarks call
        it to time steps."""
        import torch

        from trainer import model as mcore
        from trainer.data import open_data, resolve_vocab
        from trainer.guard import SpikeGuard
        from trainer.loop import Trainer
        from trainer.metrics import MetricsLog, Throughput

        refuse_plan_only(self)  # the launcher's preflight refused it first
        run_dir = Path(self.run.out_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        mcore.init_distributed(self)
        rank = torch.distributed.get_rank()
        data = open_data(self)
        vocab_size = resolve_vocab(self, data)
        gpt = mcore.build_model(self, vocab_size)
        model = mcore.wrap_ddp(self, gpt)
        optimizer = mcore.build_optimizer(self, model)
        metrics = MetricsLog(run_dir, rank, self.metrics.trackers, self.run.name)
        on_gpu = mcore.device_type(self) == "cuda"
        builtin = (SpikeGuard(self.guard), Throughput(self.metrics, on_gpu), metrics)
        extra = list(callbacks)
        if evaluate and self.eval.every:
            from trainer.periodic_eval import PeriodicEval

            extra.insert(0, PeriodicEval(self, gpt))
        return Trainer(self, data, vocab_size, (gpt, model, optimizer), builtin, extra)

    @model_validator(mode="after")
    def _eval_needs_one_pipeline_stage(self) -> TrainConfig:
        if self.eval.every and self.parallel.pipeline > 1:
            raise ValueError(
                "eval.every with parallel.pipeline > 1 is not supported; unset eval.every and "
                "evaluate the checkpoints with `pretrain eval run`"
            )
        return self


def refuse_plan_only(config: TrainConfig) -> None:
    """What `pretrain plan` accepts but no rank runs (the launcher's preflight and every rank)."""
    if config.parallel.context > 1:
        raise ConfigError(
            "parallel.context > 1 is plan-only until measured on a GPU; set "
            "parallel.context=1 to launch"
        )
