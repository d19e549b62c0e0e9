"""The pre-launch checklist of `pretrain plan`: memory fit and its fix, TP within a node, batch,
schedule, communication, and the flags that set the hardware assumptions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pretrain_app.cli import main
from tests.trainer.trainer_testlib import tiny_config
from trainer.config import TrainConfig
from trainer.plan import build_plan

SEVEN_B_FLAT = ["--set", "parallel.tensor=1", "--set", "parallel.pipeline=1"]


def test_a_plan_that_does_not_fit_exits_2_on_one_line_naming_the_fix(capsys, repo_root):
    # LLaMA-7B shape on 32 GPUs as plain DDP: 18 bytes/param of model states alone is 121 GB
    args = ["plan", str(repo_root / "configs/train_7b.yaml"), *SEVEN_B_FLAT]
    assert main([*args, "--set", "parallel.zero=0"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    assert "memory: the plan needs" in err and "h100 has 80 GB" in err
    assert "fits with parallel.zero=1" in err and "--allow-oom" in err


def test_allow_oom_plans_anyway_with_a_warning(capsys, repo_root):
    args = ["plan", str(repo_root / "configs/train_7b.yaml"), *SEVEN_B_FLAT, "--json"]
    flags = ["--set", "parallel.zero=0"]
    assert main([*args, *flags, "--allow-oom"]) == 0
    plan = json.loads(capsys.readouterr().out)
    memory = plan["memory_per_gpu"]
    assert memory["fits"] is False and memory["total_gb"] > 80
    assert any(w.startswith("memory: the plan needs") for w in plan["warnings"])
    # a bigger GPU is a fix too: the same plan fits an H200's 141 GB
    assert main([*args, *flags, "--set", "model.recompute=full", "--gpu", "h200"]) == 0
    assert json.loads(capsys.readouterr().out)["memory_per_gpu"]["fits"] is True


def test_the_1072_gb_plan_no_longer_passes_silently(repo_root):
    # 175B on one 8-GPU node without sharding: the old planner printed it and exited 0
    config = TrainConfig.model_validate(
        {
            "model": {
                "num_layers": 96,
                "hidden_size": 12288,
                "num_attention_heads": 96,
                "vocab_size": 51200,
            },
            "parallel": {"gpus_per_node": 8},
            "optim": {"precision": "bf16"},
            "batch": {"global_batch_size": 8},
        }
    )
    with pytest.raises(Exception, match="no single knob fixes it"):
        build_plan(config)


def test_total_is_the_sum_of_its_parts_at_the_chosen_recompute(capsys, repo_root):
    for mode in ("none", "selective", "full"):
        args = [
            "plan",
            str(repo_root / "configs/train_full.yaml"),
            "--set",
            f"model.recompute={mode}",
        ]
        assert main([*args, "--json"]) == 0
        mem = json.loads(capsys.readouterr().out)["memory_per_gpu"]
        parts = mem["weights_gb"] + mem["grads_gb"] + mem["optimizer_gb"] + mem["logits_gb"]
        assert mem["total_gb"] == pytest.approx(parts + mem["activations_gb"][mode])
        assert main(args) == 0
        text = capsys.readouterr().out
        assert f"activations {mem['activations_gb'][mode]:.2f} GB at recompute={mode}" in text
        assert f"total {mem['total_gb']:.2f} GB" in text
    assert mem["activations_gb"]["full"] < mem["activations_gb"]["selective"]


def test_distributed_optimizer_memory_is_what_megatron_holds():
    base = {
        "model": {"vocab_size": 1000},
        "parallel": {"gpus_per_node": 8},
        "optim": {"precision": "bf16"},
    }
    zero1 = build_plan(
        TrainConfig.model_validate({**base, "parallel": {"gpus_per_node": 8, "zero": 1}})
    )
    per = zero1["memory_per_gpu"]["bytes_per_parameter"]
    assert sum(per.values()) == pytest.approx(6 + 12 / 8)  # bf16 params + fp32 grads + 12/d
    bf16_grads = dict(base, optim={"precision": "bf16", "grad_reduce_in_fp32": False})
    bf16_grads["parallel"] = {"gpus_per_node": 8, "zero": 1}
    per = build_plan(TrainConfig.model_validate(bf16_grads))["memory_per_gpu"][
        "bytes_per_parameter"
    ]
    assert sum(per.values()) == pytest.approx(4 + 16 / 8)
    zero3 = {**base, "parallel": {"gpus_per_node": 8, "zero": 3}}
    per = build_plan(TrainConfig.model_validate(zero3))["memory_per_gpu"]["bytes_per_parameter"]
    assert sum(per.values()) == pytest.approx(18 / 8)


def test_tensor_parallel_across_nodes_is_refused_with_the_reason(capsys, repo_root):
    args = ["plan", str(repo_root / "configs/train_7b.yaml"), "--set", "parallel.tensor=16"]
    assert main([*args, "--set", "parallel.pipeline=1"]) == 2
    err = capsys.readouterr().err
    assert "parallel.tensor=16 exceeds parallel.gpus_per_node=8" in err
    assert "inter-node speed" in err and "parallel.pipeline" in err


def test_batch_schedule_and_data_checks(capsys, repo_root):
    assert main(["plan", str(repo_root / "configs/train_7b.yaml"), "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    layout, data = plan["layout"], plan["data"]
    assert layout["tokens_per_step"] == 1024 * 4096  # global batch in tokens
    assert layout["grad_accumulation"] == 1024 // (1 * 8)  # micro 1, DP 8
    assert data["warmup_fraction"] == pytest.approx(0.01, abs=1e-4)
    assert data["min_lr"] == pytest.approx(3e-5)
    assert data["chinchilla_optimal_tokens"] == 20 * plan["parameters"]["total"]
    assert plan["warnings"] == []
    bad = ["--set", "optim.warmup_fraction=0.1", "--set", "optim.min_lr_ratio=0", "--json"]
    assert main(["plan", str(repo_root / "configs/train_7b.yaml"), *bad]) == 0
    warnings = json.loads(capsys.readouterr().out)["warnings"]
    assert any("warmup is 10.00%" in w for w in warnings)
    assert any("min_lr_ratio=0" in w for w in warnings)


def _comm(**parallel) -> dict:
    config = TrainConfig.model_validate(
        {
            "model": {"vocab_size": 1000, "num_layers": 4},
            "parallel": {"gpus_per_node": 4, "nodes": 2, **parallel},
            "batch": {"global_batch_size": 16},
            "plan": {"inter_node_gb_per_s": 25.0},
        }
    )
    plan = build_plan(config)
    return plan["communication_per_step"] | {"psi": plan["memory_per_gpu"]["parameters_on_gpu"]}


def test_communication_volume_per_step():
    plain, zero3 = _comm(), _comm(zero=3)
    d = 8
    assert plain["dp_volume_psi"] == 2 and zero3["dp_volume_psi"] == 3
    # fp32: all-reduce 2(d-1)/d * Psi * 4 bytes; ZeRO-3 adds a param all-gather: 3/2 of it
    assert plain["data_parallel"]["gb"] == pytest.approx(2 * (d - 1) / d * plain["psi"] * 4 / 1e9)
    assert zero3["data_parallel"]["gb"] == pytest.approx(1.5 * plain["data_parallel"]["gb"])
    # DP spans the two nodes: it runs at the stated inter-node bandwidth
    assert plain["data_parallel"]["gb_per_s"] == 25.0
    assert plain["data_parallel"]["seconds"] == pytest.approx(plain["data_parallel"]["gb"] / 25.0)
    assert plain["tensor_parallel"]["gb"] == 0 and plain["pipeline_parallel"]["gb"] == 0
    tp = _comm(tensor=2)
    # 4 all-reduces of s*b*h per layer per micro-batch, ring factor 2(t-1)/t = 1, fp32
    micro_batches = 16 // 4
    expected = 4 * 4 * micro_batches * 1.0 * 256 * 128 * 4 / 1e9
    assert tp["tensor_parallel"]["gb"] == pytest.approx(expected)
    assert tp["tensor_parallel"]["gb_per_s"] == 450  # NVLink of the default H100


def test_flags_set_mfu_peak_and_gpu(capsys, repo_root):
    config = str(repo_root / "configs/train_full.yaml")
    assert main(["plan", config, "--json"]) == 0
    base = json.loads(capsys.readouterr().out)["compute"]
    assert main(["plan", config, "--json", "--mfu", "0.2", "--peak-tflops", "500"]) == 0
    other = json.loads(capsys.readouterr().out)["compute"]
    assert other["wall_days"] == pytest.approx(base["wall_days"] * 2 * 989 / 500)
    assert main(["plan", config, "--json", "--set", "plan.mfu=0.2", "--gpu", "a100"]) == 0
    a100 = json.loads(capsys.readouterr().out)["compute"]
    assert a100["gpu"] == "a100" and a100["wall_days"] == pytest.approx(
        base["wall_days"] * 2 * 989 / 312
    )
    assert main(["plan", config, "--gpu", "tpu-v9"]) == 2
    assert "GPU 'tpu-v9' is unknown" in capsys.readouterr().err


def test_plan_and_trainer_metrics_use_the_same_flops_per_token(reference_run):
    run_dir, _ = reference_run
    record = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[0])
    config = TrainConfig.model_validate(tiny_config(run_dir, model={"vocab_size": 128}))
    plan = build_plan(config)
    assert record["model_flops_per_token"] == pytest.approx(
        plan["compute"]["flops_per_token"]["model"]
    )


def test_kv_channels_sets_the_attention_width_of_the_flops():
    from trainer.flops import attention_flops_per_token

    config = TrainConfig.model_validate(tiny_config(Path("unused")))
    wide = config.model.model_copy(update={"kv_channels": 32})  # 4 heads x 32 = 128 != hidden 64
    assert attention_flops_per_token(config.model, 64) == 12 * 2 * 64 * 64
    assert attention_flops_per_token(wide, 64) == 12 * 2 * 64 * 128


def test_plan_says_the_warmup_and_sequence_parallel_the_trainer_runs(tmp_path):
    """A 6-step run at 2% warmup: the trainer warms up 1 step (round(0.12) would say 0); sequence
    parallel set at TP=1 is off in the trainer, so the plan says off."""
    config = TrainConfig.model_validate(
        tiny_config(
            tmp_path,
            model={"vocab_size": 1000},
            parallel={"sequence_parallel": True, "gpus_per_node": 1},
        )
    )
    plan = build_plan(config)
    assert plan["data"]["warmup_steps"] == config.optim.warmup_for(6) == 1
    assert plan["memory_per_gpu"]["sequence_parallel"] is False
