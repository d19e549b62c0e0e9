"""The GPU fast path is decided from the device string: checked here for 'cuda' without a GPU."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from pretrain.errors import ConfigError
from trainer.config import TrainConfig
from trainer.cpu_compat import needs_cpu_patches
from trainer.model import fast_path_flags, zero_wrapping


def _config(**sections) -> TrainConfig:
    base = {"model": {"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4}}
    return TrainConfig.model_validate({**base, **sections})


def test_cuda_turns_on_every_fusion_and_sequence_parallel_with_tp():
    config = _config(parallel={"tensor": 2, "gpus_per_node": 2}, model={"recompute": "selective"})
    flags = fast_path_flags(config, "cuda", te=True)
    assert flags["sequence_parallel"] is True
    for name in (
        "apply_rope_fusion",
        "bias_activation_fusion",
        "masked_softmax_fusion",
        "bias_dropout_fusion",
        "gradient_accumulation_fusion",
    ):
        assert flags[name] is True, name
    assert flags["recompute_granularity"] == "selective"
    # without TE the kernels that come from TE stay off; megatron's own fusions stay on
    no_te = fast_path_flags(config, "cuda", te=False)
    assert not no_te["apply_rope_fusion"] and not no_te["gradient_accumulation_fusion"]
    assert no_te["bias_activation_fusion"] and no_te["sequence_parallel"]


def test_cpu_keeps_every_fusion_off_and_refuses_sequence_parallel():
    config = _config(parallel={"tensor": 2, "gpus_per_node": 2})
    flags = fast_path_flags(config, "cpu", te=True)
    assert not any(v for k, v in flags.items() if k.endswith("fusion") or k == "sequence_parallel")
    with pytest.raises(ConfigError, match="sequence_parallel=true needs CUDA"):
        fast_path_flags(_config(parallel={"sequence_parallel": True}), "cpu", te=False)
    tp1 = fast_path_flags(_config(), "cuda", te=True)
    assert tp1["sequence_parallel"] is False  # nothing to shard over with TP = 1
    off = _config(parallel={"tensor": 2, "gpus_per_node": 2, "sequence_parallel": False})
    assert fast_path_flags(off, "cuda", te=True)["sequence_parallel"] is False


def test_gelu_without_bias_keeps_activation_fusion_off():
    # megatron's fused GELU asserts add_bias_linear; SwiGLU fuses without a bias
    gelu = _config(
        model={"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "swiglu": False}
    )
    assert fast_path_flags(gelu, "cuda", te=True)["bias_activation_fusion"] is False


def test_cuda_flags_build_a_valid_megatron_transformer_config():
    from megatron.core.transformer import TransformerConfig

    config = _config(parallel={"tensor": 2, "gpus_per_node": 2}, model={"recompute": "full"})
    flags = fast_path_flags(config, "cuda", te=False)
    tconfig = TransformerConfig(
        num_layers=2, hidden_size=64, num_attention_heads=4, tensor_model_parallel_size=2, **flags
    )
    assert tconfig.sequence_parallel and tconfig.recompute_granularity == "full"


def test_zero_stages_map_to_megatron_modes():
    assert zero_wrapping(_config(), "cpu") == {"use_distributed_optimizer": False}
    one = _config(parallel={"zero": 1})
    assert zero_wrapping(one, "cpu") == {"use_distributed_optimizer": True}
    three = zero_wrapping(_config(parallel={"zero": 3}), "cuda")
    assert three["use_megatron_fsdp"] and three["data_parallel_sharding_strategy"] == (
        "optim_grads_params"
    )
    two = zero_wrapping(_config(parallel={"zero": 2}), "cuda")
    assert two["data_parallel_sharding_strategy"] == "optim_grads"
    with pytest.raises(ConfigError, match="megatron_fsdp, which needs CUDA"):
        zero_wrapping(_config(parallel={"zero": 2}), "cpu")


_NO_PATCH_ON_CUDA = textwrap.dedent("""
    import torch
    from trainer import cpu_compat
    original = torch.cuda.synchronize
    cpu_compat.apply_cpu_patches("cuda:0")
    assert not cpu_compat._PATCHED and torch.cuda.synchronize is original
    with cpu_compat.device_context() as mode:
        assert mode is None, mode
    cpu_compat.apply_cpu_patches("cpu")
    assert cpu_compat._PATCHED and torch.cuda.synchronize is not original
    with cpu_compat.device_context() as mode:
        assert isinstance(mode, cpu_compat.CpuDeviceMode), mode
    print("ok")
""")


@pytest.mark.timeout(120)
def test_cpu_compat_never_patches_a_cuda_run():
    assert (
        needs_cpu_patches("cpu")
        and not needs_cpu_patches("cuda")
        and not needs_cpu_patches("cuda:3")
    )
    result = subprocess.run(
        [sys.executable, "-c", _NO_PATCH_ON_CUDA], capture_output=True, text=True, timeout=100
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("mode", ["selective", "full"])
def test_recompute_modes_train_the_same_losses(tmp_path, reference_run, mode):
    from tests.trainer.trainer_testlib import losses, run_ranks, tiny_config

    _, plain = reference_run
    run_ranks(tiny_config(tmp_path / mode, model={"recompute": mode}), 1, timeout_s=400)
    recomputed = losses(tmp_path / mode)
    for step, loss in plain.items():
        assert recomputed[step] == pytest.approx(loss, rel=1e-5, abs=1e-5), (step, mode)
