"""`pretrain plan` against the published tables in tests/data/published/ (sources in its README)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainer.config import TrainConfig
from trainer.plan import build_plan
from trainer.plan_memory import state_bytes_per_param, zero_model_state_gb

PUBLISHED = Path(__file__).resolve().parents[1] / "data" / "published"


def _load(name: str) -> dict:
    return json.loads((PUBLISHED / name).read_text())


MEGATRON = _load("megatron_2021.json")
A100 = MEGATRON["a100_peak_tflops"]


def gpt_config(
    layers: int,
    hidden: int,
    heads: int,
    gpus: int,
    batch: int,
    tensor: int = 8,
    pipeline: int = 1,
    tokens: float | None = None,
    recompute: str = "full",
    vocab: int = 51200,
    **extra: dict,
) -> TrainConfig:
    """A GPT shaped as in the papers: LayerNorm, GELU 4h MLP, biases, learned positions, tied."""
    model = {
        "num_layers": layers,
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "swiglu": False,
        "normalization": "LayerNorm",
        "add_bias_linear": True,
        "position_embedding": "learned_absolute",
        "seq_length": 2048,
        "vocab_size": vocab,
        "make_vocab_size_divisible_by": 1,
        "recompute": recompute,
        **extra.get("model", {}),
    }
    return TrainConfig.model_validate(
        {
            "plan": extra.get("plan", {}),
            "model": model,
            "parallel": {
                "tensor": tensor,
                "pipeline": pipeline,
                "gpus_per_node": 8,
                "nodes": gpus // 8,
                **extra.get("parallel", {}),
            },
            "optim": {"precision": "bf16"},
            "batch": {"micro_batch_size": 1, "global_batch_size": batch},
            "data": {"train_tokens": int(tokens) if tokens else batch * 2048},
        }
    )


def a100(tflops_per_gpu: float) -> dict:
    """The plan's assumptions of a published run: A100s at its achieved TFLOP/s, no overhead."""
    return {"gpu": "a100", "mfu": tflops_per_gpu / A100, "overhead": 1.0}


def megatron_eq3(batch: int, seq: int, layers: int, hidden: int, vocab: int) -> float:
    """Narayanan et al. 2021, Eq. 3: FLOPs per iteration with full activation recomputation."""
    return (
        96 * batch * seq * layers * hidden**2
        * (1 + seq / (6 * hidden) + vocab / (16 * layers * hidden))
    )  # fmt: skip


@pytest.mark.parametrize("row", MEGATRON["table_1"]["rows"], ids=lambda r: f"{r[0]}B")
def test_table_1_flops_per_iteration_within_1_percent_of_eq3(row):
    _, heads, hidden, layers, tp, pp, gpus, batch, _ = row
    plan = build_plan(gpt_config(layers, hidden, heads, gpus, batch, tp, pp), allow_oom=True)
    eq3 = megatron_eq3(batch, 2048, layers, hidden, 51200)
    assert plan["compute"]["hardware_flops_per_step"] == pytest.approx(eq3, rel=0.01)
    # Eq. 3's derivation without the recompute forward: 3 passes over the layers instead of 4,
    # the logit layer unchanged
    no_recompute = build_plan(
        gpt_config(layers, hidden, heads, gpus, batch, tp, pp, recompute="none"), allow_oom=True
    )
    logits = 6 * batch * 2048 * hidden * 51200
    expected = (eq3 - logits) * 3 / 4 + logits
    assert no_recompute["compute"]["hardware_flops_per_step"] == pytest.approx(expected, rel=0.01)


@pytest.mark.parametrize("row", MEGATRON["training_time_examples"]["rows"], ids=lambda r: r["name"])
def test_training_time_examples_within_3_percent(row):
    pipeline = {96: 16, 128: 64}[row["layers"]]
    gpus = row["gpus"]
    config = gpt_config(
        row["layers"], row["hidden"], row["heads"], gpus, gpus, 8, pipeline, row["tokens"],
        plan=a100(row["tflops_per_gpu"]),
    )  # fmt: skip
    plan = build_plan(config)
    assert plan["compute"]["wall_days"] == pytest.approx(row["days"], rel=0.03)
    assert plan["compute"]["mfu"] < plan["compute"]["hardware_utilization"]


def test_recompute_changes_time_the_way_the_paper_counts_it():
    # 175B on 1024 GPUs at 140 TFLOP/s: without counting the extra forward pass the estimate
    # came out ~25% short of the paper's 34 days (the old planner said 26.1).
    full = build_plan(gpt_config(96, 12288, 96, 1024, 1536, 8, 16, 300e9, plan=a100(140)))
    none = build_plan(
        gpt_config(96, 12288, 96, 1024, 1536, 8, 16, 300e9, "none", plan=a100(140)), allow_oom=True
    )
    selective = build_plan(
        gpt_config(96, 12288, 96, 1024, 1536, 8, 16, 300e9, "selective", plan=a100(140))
    )
    days = [p["compute"]["wall_days"] for p in (none, selective, full)]
    assert days[0] < days[1] < days[2]
    assert days[2] / days[0] == pytest.approx(4 / 3, rel=0.02)
    assert days[1] / days[0] < 1.01  # core attention is ~1% of a 175B model's FLOPs at s=2048
    assert none["compute"]["total_flops"] == full["compute"]["total_flops"]  # model FLOPs


@pytest.mark.parametrize(
    "row",
    MEGATRON["table_2"]["rows"],
    ids=lambda r: f"{r['scheme']}-{r['params_billion']}B-{r['gpus']}",
)
def test_table_2_training_days_within_3_percent(row):
    gpus, layers = row["gpus"], row["layers"]
    if row["scheme"] == "ZeRO-3":
        tensor, pipeline, batch = 1, 1, 2560 if layers == 105 else 1536
        extra = {"parallel": {"zero": 3}, "plan": a100(row["tflops_per_gpu"])}
    else:  # model-parallel size 96 = TP 8 x PP 12, and 280 = TP 8 x PP 35
        tensor, pipeline, batch = 8, {96: 12, 105: 35}[layers], 1536 if layers == 96 else 2240
        extra = {"plan": a100(row["tflops_per_gpu"])}
    config = gpt_config(
        layers, row["hidden"], row["heads"], gpus, batch, tensor, pipeline, 300e9, **extra
    )
    plan = build_plan(config, allow_oom=True)
    assert round(plan["parameters"]["total"] / 1e9, 1) == pytest.approx(
        row["params_billion"], abs=0.15
    )
    assert plan["compute"]["wall_days"] == pytest.approx(row["days"], rel=0.03)
    assert plan["layout"]["zero"] == (3 if row["scheme"] == "ZeRO-3" else 0)


ZERO = _load("zero_2020.json")


def _printed_decimals(value: float) -> int:
    text = repr(float(value)).rstrip("0").rstrip(".")
    return len(text.split(".")[1]) if "." in text else 0


@pytest.mark.parametrize("row", ZERO["rows"], ids=lambda r: f"{r['model']}-dp{r['dp']}")
def test_zero_table_1_within_half_a_percent(row):
    ours = zero_model_state_gb(ZERO["models"][row["model"]], row["dp"])
    for column, key in (("os", "stage1_os"), ("os_g", "stage2_os_g"), ("os_g_p", "stage3_os_g_p")):
        if column not in row:
            continue
        published = row[column]
        # 0.5%, or the paper's own rounding where it prints fewer than 3 significant digits
        half_unit = 0.5 * 10 ** -_printed_decimals(published)
        assert abs(ours[key] - published) <= max(0.005 * published, half_unit), column


def test_zero_bytes_per_parameter_is_16():
    b = ZERO["bytes_per_parameter"]
    assert b["fp16_params"] + b["fp16_grads"] + b["optimizer_K"] == b["total"]
    assert zero_model_state_gb(1e9, 1)["baseline"] == pytest.approx(b["total"])


@pytest.mark.parametrize("row", _load("megatron_core_distributed_optimizer.json")["rows"])
def test_megatron_core_bytes_per_parameter_table(row):
    plain = state_bytes_per_param(row["precision"], row["grad_reduce_in_fp32"], 0, 8)
    assert sum(plain.values()) == row["non_distributed"]
    for d in (2, 8, 64):
        dist = state_bytes_per_param(row["precision"], row["grad_reduce_in_fp32"], 1, d)
        a, b = row["distributed"]
        assert sum(dist.values()) == pytest.approx(a + b / d)


CHINCHILLA = _load("chinchilla_2022.json")
GPT3 = _load("gpt3_2020.json")


def _gpt3_config(row: dict, tokens: float | None = None, kv_channels: bool = True) -> TrainConfig:
    extra = {"model": {"kv_channels": row["head"]}} if kv_channels else {}
    return gpt_config(
        row["layers"], row["hidden"], row["heads"], 8, 8, 1, 1, tokens, "none", 50257, **extra
    )


def test_gpt3_training_compute_is_6nd_within_1_percent():
    row = next(r for r in GPT3["rows"] if r["name"] == "175B")
    compute = GPT3["training_compute"]
    plan = build_plan(_gpt3_config(row, compute["tokens"]), allow_oom=True)
    assert plan["compute"]["total_flops_6N"] == pytest.approx(compute["flops"], rel=0.01)


@pytest.mark.parametrize("row", CHINCHILLA["rows"], ids=lambda r: f"{r['params']:.0e}")
def test_chinchilla_table_3_is_6nd_and_near_20_tokens_per_parameter(row):
    from trainer.flops import flops_per_token
    from trainer.plan_checks import data_checks

    config = gpt_config(24, 2048, 16, 8, 8, recompute="none")
    per_token = flops_per_token(config.model, 51200, 2048)
    n = build_plan(config)["parameters"]["total"]
    # the plan's 6N convention reproduces the table's FLOPs from its N and D
    assert per_token["6N"] / n * row["params"] * row["tokens"] == pytest.approx(
        row["flops"], rel=0.01
    )
    # the plan's Chinchilla-optimal tokens (20 per parameter) vs the fitted table: within 8%
    optimal = data_checks(config, int(row["params"]), 1, 1)["chinchilla_optimal_tokens"]
    assert optimal == pytest.approx(row["tokens"], rel=0.08)


@pytest.mark.parametrize("row", GPT3["rows"], ids=lambda r: r["name"])
def test_gpt3_table_2_1_sizes(row):
    if row.get("head_inconsistent"):
        # printed d_head 128 x 24 heads: kv_channels is honoured (1.52B) ...
        exact = build_plan(_gpt3_config(row), allow_oom=True)["parameters"]
        assert exact["total"] == pytest.approx(1.516e9, rel=0.005)
        # ... and the 1.3B label is the attention-at-width-d_model count
        assert exact["approx_12Lh2"] + 52257 * row["hidden"] == pytest.approx(
            row["params"], rel=0.02
        )
        return
    plan = build_plan(_gpt3_config(row), allow_oom=True)
    assert plan["parameters"]["total"] == pytest.approx(row["params"], rel=0.02)


def test_kv_channels_shape_passes_the_layout_check_and_sets_attention_flops():
    row = next(r for r in GPT3["rows"] if r["name"] == "13B")
    assert row["hidden"] % row["heads"]  # 5140 is not divisible by 40
    with pytest.raises(Exception, match="set model.kv_channels"):
        build_plan(_gpt3_config(row, kv_channels=False), allow_oom=True)
    plan = build_plan(_gpt3_config(row), allow_oom=True)
    per_token = plan["compute"]["flops_per_token"]
    attention = per_token["model"] - 6 * (plan["parameters"]["total"] - 2048 * row["hidden"])
    assert attention == pytest.approx(12 * row["layers"] * 2048 * row["heads"] * row["head"])
