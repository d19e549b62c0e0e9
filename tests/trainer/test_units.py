"""Core trainer logic without engines: schedule, guard, checkpoint retention, configs."""

from __future__ import annotations

import math

import pytest

from pretrain.config import load_config, parse_config
from pretrain.errors import ConfigError
from tests.trainer.faults import NanLossAtStep
from trainer.checkpoint import list_checkpoints, newest_valid, prune
from trainer.config import GuardConfig, OptimConfig, TrainConfig
from trainer.guard import GuardGaveUp, SpikeGuard
from trainer.step import lr_at


def test_schedule_warms_up_then_decays_to_the_floor():
    optim = OptimConfig(lr=1e-3, warmup_fraction=0.02, min_lr_ratio=0.1)
    total = 1000
    assert optim.warmup_for(total) == 20
    lrs = [lr_at(step, optim, total) for step in range(total)]
    assert lrs[0] == pytest.approx(1e-3 / 20)
    assert lrs[19] == pytest.approx(1e-3)
    assert all(a <= b for a, b in zip(lrs[:20], lrs[1:20], strict=False))
    assert all(a >= b for a, b in zip(lrs[19:], lrs[20:], strict=False))
    assert lrs[-1] == pytest.approx(1e-4, rel=1e-3)
    assert lr_at(5000, optim, total) == pytest.approx(1e-4)  # stays at the floor
    halfway = 20 + (total - 20) // 2
    assert lrs[halfway] == pytest.approx(0.55e-3, rel=1e-2)  # cosine midpoint


def test_guard_flags_nan_and_spikes_only_after_history():
    guard = SpikeGuard(GuardConfig(min_history=3, loss_spike_ratio=2.0, grad_norm_spike_ratio=5))
    assert guard.check(float("nan"), 1.0) == "loss is nan"
    assert guard.check(3.0, float("inf")) == "grad norm is inf"
    assert guard.check(50.0, 1.0) is None  # no history yet: early losses are not judged
    for loss in (4.0, 3.9, 3.8):
        guard.record(loss, 1.0)
    assert guard.check(4.5, 1.2) is None
    assert "running median" in guard.check(8.1, 1.0)
    assert "grad norm 6" in guard.check(3.7, 6.0)
    assert guard.state()["losses"] == [4.0, 3.9, 3.8]


def test_guard_gives_up_after_max_rollbacks_with_a_clear_message():
    guard = SpikeGuard(GuardConfig(max_rollbacks=1))
    guard.rolled_back(7, "loss is nan", [6], [[0, 48, 56]], 5)
    with pytest.raises(GuardGaveUp, match=r"max_rollbacks = 1 exceeded.*steps 7, 9"):
        guard.rolled_back(9, "loss is nan", [8], [[0, 64, 72]], 5)
    restored = SpikeGuard(GuardConfig())
    restored.load_state(guard.state())  # what a resume does with the checkpoint's guard state
    assert restored.rollbacks == 2


def test_nan_fault_fires_on_every_micro_batch_of_its_step_once():
    fault = NanLossAtStep(3)
    seen = []
    for step in (1, 2, 3, 3, 4):  # step 3 runs twice: the replay after its rollback
        fault.on_step_start(None, step)
        seen.append([math.isnan(fault.on_loss(None, 1.0)) for _ in range(2)])
    assert seen == [[False] * 2, [False] * 2, [True] * 2, [False] * 2, [False] * 2]


def _fake_checkpoints(root, steps):
    from pretrain.manifest import write_manifest

    for step in steps:
        path = root / "checkpoints" / f"iter_{step:07d}"
        path.mkdir(parents=True)
        (path / "state.json").write_text(f'{{"step": {step}}}')
        (path / "weights.bin").write_bytes(bytes(range(step % 200 + 10)))
        write_manifest(path, "checkpoint", counts={"step": step})
    (root / "checkpoints" / "iter_0000099.tmp").mkdir()  # an unfinished save is never listed


def test_prune_keeps_last_n_and_every_kth(tmp_path):
    _fake_checkpoints(tmp_path, [10, 20, 30, 40, 50, 60])
    prune(tmp_path, keep_last=2, keep_every=30)
    assert [s for s, _ in list_checkpoints(tmp_path)] == [30, 50, 60]


def test_newest_valid_skips_a_tampered_checkpoint(tmp_path):
    _fake_checkpoints(tmp_path, [10, 20])
    weights = tmp_path / "checkpoints" / "iter_0000020" / "weights.bin"
    weights.write_bytes(b"x" + weights.read_bytes()[1:])  # same size, different bytes
    path, skipped = newest_valid(tmp_path)
    assert path.name == "iter_0000010"
    assert skipped[0]["step"] == 20 and "sha256" in skipped[0]["reason"]


@pytest.mark.parametrize("name", ["train_proxy", "train_full", "train_7b"])
def test_example_configs_validate(repo_root, name):
    config = load_config(TrainConfig, repo_root / "configs" / f"{name}.yaml")
    par = config.parallel
    assert config.model.num_attention_heads % par.tensor == 0
    assert config.model.num_layers % par.pipeline == 0
    assert config.batch.global_batch_size % (config.batch.micro_batch_size * par.data_parallel) == 0
    if name != "train_proxy":
        assert config.run.kind == "full" and config.optim.precision == "bf16"


def test_full_config_is_a_1b_class_model(repo_root):
    config = load_config(TrainConfig, repo_root / "configs" / "train_full.yaml")
    model = config.model
    h, layers, kv = model.hidden_size, model.num_layers, model.query_groups * model.head_dim
    per_layer = h * (h + 2 * kv) + h * h + 3 * h * model.ffn_size + 2 * h
    params = layers * per_layer + model.padded_vocab_size(model.vocab_size) * h + h
    assert 0.9e9 < params < 1.6e9
    assert math.isclose(config.data.train_tokens / params, 20, rel_tol=0.25)


def test_typo_in_config_is_a_one_line_error():
    with pytest.raises(ConfigError, match="unknown key 'model.hiden_size'"):
        parse_config(TrainConfig, {"model": {"hiden_size": 64}})


def test_callbacks_run_in_order_and_the_first_veto_wins():
    from trainer.callbacks import Callback, CallbackList

    class Scale(Callback):
        def __init__(self, factor, verdict=None):
            self.factor, self.verdict = factor, verdict

        def on_loss(self, trainer, loss):
            return loss * self.factor + 1

        def check_step(self, trainer, result):
            return self.verdict

    chain = CallbackList([Scale(2), Scale(3, "spike"), Scale(5, "later")])
    assert chain.on_loss(None, 1.0) == ((1.0 * 2 + 1) * 3 + 1) * 5 + 1
    assert chain.check_step(None, None) == "spike"
    assert CallbackList([Scale(2)]).check_step(None, None) is None


def test_guard_defaults_let_a_healthy_proxys_early_grad_norms_pass():
    """A proxy at a high LR: grad norms fall 30x in its first steps and rebound (step 12 here, as
    in the 5M / 3e-3 sweep run whose rollback went to step 1). Not a spike under the defaults;
    NaN still is, during warmup too."""
    guard = SpikeGuard(GuardConfig())
    norms = [3.0, 2.1, 1.0, 0.4, 0.2, 0.12, 0.1, 0.1, 0.11, 0.1, 0.1, 1.6, 0.5, 0.3]
    for step, norm in enumerate(norms, start=1):
        assert guard.check(6.0 - 0.05 * step, norm, warming_up=step <= 4) is None, step
        guard.record(6.0 - 0.05 * step, norm)
    assert guard.check(float("nan"), 1.0, warming_up=True) == "loss is nan"
    warm = SpikeGuard(GuardConfig(min_history=1))
    warm.record(4.0, 0.1)
    assert warm.check(4.0, 5.0, warming_up=True) is None  # the LR still rising
    assert "grad norm 5" in warm.check(4.0, 5.0, warming_up=False)
    assert "running median" in warm.check(9.0, 0.1, warming_up=True)  # a loss spike: always
