import json
import subprocess
import sys
import textwrap

import pytest

from pretrain.errors import ConfigError
from pretrain_app.cli import main
from trainer.config import ModelConfig, TrainConfig
from trainer.flops import narayanan_eq2, parameter_breakdown
from trainer.plan import build_plan
from trainer.plan_memory import zero_model_state_gb

# Narayanan et al. 2021, Table 1: (parameters in billions, heads, hidden, layers); V=51200, s=2048.
TABLE_1 = [
    (1.7, 24, 2304, 24),
    (3.6, 32, 3072, 30),
    (7.5, 32, 4096, 36),
    (18.4, 48, 6144, 40),
    (39.1, 64, 8192, 48),
    (76.1, 80, 10240, 60),
    (145.6, 96, 12288, 80),
    (310.1, 128, 16384, 96),
    (529.6, 128, 20480, 105),
    (1008.0, 160, 25600, 128),
]


@pytest.mark.parametrize(("billions", "heads", "hidden", "layers"), TABLE_1)
def test_eq2_reproduces_narayanan_table_1(billions, heads, hidden, layers):
    assert round(narayanan_eq2(layers, hidden, 51200, 2048) / 1e9, 1) == billions


def test_exact_count_of_the_table_1_shape_matches_eq2_for_gpt_architecture():
    # GPT as in the paper: LayerNorm, GELU 4h MLP, biases, learned positions, tied embeddings.
    model = ModelConfig(
        num_layers=24,
        hidden_size=2304,
        num_attention_heads=24,
        swiglu=False,
        normalization="LayerNorm",
        add_bias_linear=True,
        seq_length=2048,
        position_embedding="learned_absolute",
        make_vocab_size_divisible_by=1,
    )
    exact = parameter_breakdown(model, 51200)["total"]
    # Eq. 2 counts 13h per layer (4 biases, 2 LayerNorms) but leaves out the final LayerNorm (2h).
    assert exact == narayanan_eq2(24, 2304, 51200, 2048) + 2 * 2304


def test_zero_paper_example_7_5b_on_64_gpus():
    gb = zero_model_state_gb(7.5e9, 64)
    assert gb["baseline"] == pytest.approx(120.0)
    assert round(gb["stage1_os"], 1) == 31.4
    assert round(gb["stage2_os_g"], 1) == 16.6
    assert round(gb["stage3_os_g_p"], 1) == 1.9
    assert gb["baseline"] / 7.5 == 16  # 16 bytes per parameter


SHAPES = {
    "tied_gqa_swiglu": dict(
        num_layers=2,
        hidden_size=64,
        num_attention_heads=4,
        num_query_groups=2,
        swiglu=True,
        vocab_size=1000,
    ),
    "untied_mha_gelu": dict(
        num_layers=3,
        hidden_size=48,
        num_attention_heads=4,
        swiglu=False,
        untie_embeddings=True,
        normalization="LayerNorm",
        vocab_size=777,
    ),
    "untied_gqa_swiglu_bias": dict(
        num_layers=2,
        hidden_size=64,
        num_attention_heads=8,
        num_query_groups=4,
        swiglu=True,
        untie_embeddings=True,
        add_bias_linear=True,
        vocab_size=500,
        ffn_hidden_size=96,
    ),
    "kv_channels_wider_than_hidden": dict(
        num_layers=2,
        hidden_size=48,
        num_attention_heads=4,
        num_query_groups=2,
        kv_channels=16,
        vocab_size=300,
    ),
}

_COUNT_SCRIPT = textwrap.dedent("""
    import json, sys
    import torch
    from trainer.config import TrainConfig
    from trainer.model import build_model, init_distributed
    torch.set_num_threads(1)
    shapes = json.loads(sys.argv[1])
    init_distributed(TrainConfig())
    out = {}
    for name, model in shapes.items():
        config = TrainConfig.model_validate({"model": model})
        gpt = build_model(config, model["vocab_size"])
        out[name] = sum(p.numel() for p in gpt.parameters())
    print(json.dumps(out))
""")


@pytest.mark.timeout(240)
def test_exact_count_equals_real_megatron_gptmodel():
    result = subprocess.run(
        [sys.executable, "-c", _COUNT_SCRIPT, json.dumps(SHAPES)],
        capture_output=True,
        text=True,
        timeout=220,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    real = json.loads(result.stdout.strip().splitlines()[-1])
    for name, shape in SHAPES.items():
        model = ModelConfig(**shape)
        assert parameter_breakdown(model, shape["vocab_size"])["total"] == real[name], name


def test_layout_errors_are_one_line_and_name_every_problem():
    config = TrainConfig.model_validate(
        {
            "model": {
                "num_layers": 5,
                "hidden_size": 96,
                "num_attention_heads": 6,
                "vocab_size": 100,
            },
            "parallel": {"tensor": 4, "pipeline": 2, "gpus_per_node": 2, "nodes": 4},
            "batch": {"global_batch_size": 10, "micro_batch_size": 3},
        }
    )
    with pytest.raises(ConfigError) as err:
        build_plan(config)
    msg = str(err.value)
    assert "\n" not in msg
    for fragment in (
        "num_attention_heads=6 is not divisible by parallel.tensor=4",
        "num_layers=5 is not divisible",
        "exceeds parallel.gpus_per_node=2",
        "global_batch_size=10",
    ):
        assert fragment in msg
    odd = config.model_copy(update={"parallel": config.parallel.model_copy(update={"nodes": 3})})
    with pytest.raises(ConfigError, match="gpus_per_node 2 = 6 processes is not a multiple of"):
        build_plan(odd)


def test_plan_cli_json_for_the_full_configs(capsys, repo_root):
    assert main(["plan", str(repo_root / "configs/train_full.yaml"), "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert 0.9e9 < plan["parameters"]["total"] < 1.5e9
    assert plan["layout"]["grad_accumulation"] * plan["layout"]["data"] * 4 == 512
    assert 15 <= plan["data"]["tokens_per_parameter"] <= 30
    assert plan["compute"]["gpu_days"] > 0 and plan["warnings"] == []
    assert main(["plan", str(repo_root / "configs/train_7b.yaml")]) == 0
    assert "B exact" in capsys.readouterr().out


def test_tokens_per_parameter_warning(repo_root):
    config = TrainConfig.model_validate(
        {"model": {"vocab_size": 1000}, "data": {"train_tokens": 10_000}}
    )
    plan = build_plan(config)
    assert any("tokens per parameter" in w for w in plan["warnings"])


@pytest.mark.parametrize(
    ("flag", "value", "field"),
    [
        ("--mfu", "0", "plan.mfu"),
        ("--mfu", "nan", "plan.mfu"),
        ("--mfu", "5", "plan.mfu"),
        ("--mfu", "-0.5", "plan.mfu"),
        ("--overhead", "0.5", "plan.overhead"),
        ("--peak-tflops", "-1", "metrics.peak_flops"),
        ("--peak-tflops", "0", "metrics.peak_flops"),
    ],
)
def test_plan_flags_out_of_range_are_one_line(capsys, repo_root, flag, value, field):
    """A flag is a field of the config: checked by the same model, one line, exit 2 (was a
    ZeroDivisionError traceback for --mfu 0 and a printed plan for the others)."""
    assert main(["plan", str(repo_root / "configs/train_full.yaml"), flag, value]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and field in err, err


def test_plan_flags_in_range_change_the_plan(capsys, repo_root):
    config = str(repo_root / "configs/train_full.yaml")
    assert main(["plan", config, "--json", "--mfu", "0.2"]) == 0
    slow = json.loads(capsys.readouterr().out)["compute"]
    assert main(["plan", config, "--json", "--mfu", "0.4", "--peak-tflops", "500"]) == 0
    fast = json.loads(capsys.readouterr().out)["compute"]
    assert slow["hardware_utilization"] == 0.2 and fast["hardware_utilization"] == 0.4
    assert fast["peak_flops_per_gpu"] == 500e12 and fast["wall_days"] < slow["wall_days"]
