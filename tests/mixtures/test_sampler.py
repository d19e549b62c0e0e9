"""Property tests of the global-quota sampler core (plain numpy, no engines)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mixtures import sampler

BOUND = 1.0 + 1e-9  # quota bounds are within 1 sequence; weights are quantised to 2**-40


@st.composite
def plans(draw: st.DrawFn) -> dict:
    num_components = draw(st.integers(1, 7))
    raw = draw(st.lists(st.integers(1, 1000), min_size=num_components, max_size=num_components))
    weights = np.array(raw, dtype=np.float64) / sum(raw)
    global_batch = draw(st.integers(1, 96))
    num_batches = draw(st.integers(1, 40))
    sizes = draw(st.lists(st.integers(1, 500), min_size=num_components, max_size=num_components))
    return {
        "weights": weights,
        "global_batch": global_batch,
        "num_batches": num_batches,
        "sizes": sizes,
        "seed": draw(st.integers(0, 2**31 - 1)),
    }


def _index(plan: dict, seed: int | None = None) -> np.ndarray:
    return sampler.build_index(
        plan["weights"],
        plan["num_batches"],
        plan["global_batch"],
        plan["sizes"],
        seed if seed is not None else plan["seed"],
    )


@pytest.mark.timeout(120)
@settings(max_examples=150, deadline=None)
@given(plans())
def test_every_aligned_batch_and_prefix_is_within_one_sequence_of_quota(plan: dict) -> None:
    index = _index(plan)
    assert index.size == plan["num_batches"] * plan["global_batch"]
    comp = index["component"]
    assert sampler.max_batch_deviation(comp, plan["weights"], plan["global_batch"]) < BOUND
    assert sampler.max_prefix_deviation(comp, plan["weights"], plan["global_batch"]) < BOUND


@pytest.mark.timeout(120)
@settings(max_examples=80, deadline=None)
@given(plans())
def test_same_seed_same_index_and_other_seed_shuffles(plan: dict) -> None:
    first, second = _index(plan), _index(plan)
    assert first.tobytes() == second.tobytes()
    other = _index(plan, seed=plan["seed"] + 1)
    # The component layout is seed-independent; only the order inside components changes.
    assert np.array_equal(first["component"], other["component"])


@pytest.mark.timeout(120)
@settings(max_examples=80, deadline=None)
@given(plans())
def test_no_sequence_repeats_before_its_epoch_is_exhausted(plan: dict) -> None:
    index = _index(plan)
    for k, size in enumerate(plan["sizes"]):
        seqs = index["sequence"][index["component"] == k]
        assert np.all(seqs >= 0)
        epochs = seqs // size
        # Draws walk the epochs in order and every sequence appears once per epoch.
        assert np.all(np.diff(epochs) >= 0)
        for epoch in np.unique(epochs):
            in_epoch = seqs[epochs == epoch] % size
            assert np.unique(in_epoch).size == in_epoch.size
        if seqs.size:  # the stream opens a new epoch only when the previous one is used up
            assert epochs.max() == (seqs.size - 1) // size


@pytest.mark.timeout(120)
@settings(max_examples=80, deadline=None)
@given(plans(), st.integers(0, 40), st.integers(1, 30), st.data())
def test_replan_keeps_consumed_prefix_and_conserves_data(
    plan: dict, consumed_batches: int, new_batches: int, data: st.DataObject
) -> None:
    old = _index(plan)
    consumed = min(consumed_batches, plan["num_batches"]) * plan["global_batch"]
    k = len(plan["sizes"])
    raw = data.draw(st.lists(st.integers(1, 1000), min_size=k, max_size=k))
    new_weights = np.array(raw, np.float64) / sum(raw)
    new = sampler.replan_index(
        old, consumed, new_weights, new_batches, plan["global_batch"], plan["sizes"], plan["seed"]
    )
    assert new[:consumed].tobytes() == old[:consumed].tobytes()
    rest = new[consumed:]
    assert sampler.max_batch_deviation(rest["component"], new_weights, plan["global_batch"]) < BOUND
    # Each component's stream continues: concatenated draws are exactly a fresh plan's draws.
    for comp, size in enumerate(plan["sizes"]):
        seqs = new["sequence"][new["component"] == comp]
        epochs = seqs // size
        assert np.all(np.diff(epochs) >= 0)
        for epoch in np.unique(epochs):
            in_epoch = seqs[epochs == epoch]
            assert np.unique(in_epoch).size == in_epoch.size, "a consumed sequence was redrawn"


def test_sliding_windows_stay_close_to_target() -> None:
    weights = [0.5, 0.3, 0.15, 0.05]
    index = sampler.build_index(weights, 50, 64, [10_000] * 4, seed=3)
    # Interleaving inside batches keeps every window of W samples within a few sequences.
    assert sampler.max_window_deviation(index["component"], weights, 64) < 2.0


def test_weights_are_quantised_exactly() -> None:
    numer = sampler.quantize_weights([1, 1, 1])
    assert int(numer.sum()) == sampler.WEIGHT_SCALE
    assert numer.max() - numer.min() <= 1


def test_integer_quotas_are_exact_in_every_batch() -> None:
    counts = sampler.allocate_batches([0.25, 0.75], 10, 8)
    assert (counts == [2, 6]).all()


@pytest.mark.timeout(120)
@settings(max_examples=60, deadline=None)
@given(st.data())
def test_planned_mixtures_never_exceed_epoch_caps(data: st.DataObject) -> None:
    from mixtures.plan import InfeasibleMixture, make_plan
    from mixtures.recipe import MixtureConfig
    from mixtures.selection import DOCS_DTYPE

    k = data.draw(st.integers(1, 5))
    raw = data.draw(st.lists(st.integers(0, 100), min_size=k, max_size=k))
    raw[0] = raw[0] or 1
    caps = data.draw(st.lists(st.floats(0.1, 5), min_size=k, max_size=k))
    docs = []
    for _ in range(k):
        lengths = data.draw(st.lists(st.integers(1, 300), min_size=1, max_size=30))
        arr = np.zeros(len(lengths), dtype=DOCS_DTYPE)
        arr["tokens"] = lengths
        docs.append(arr)
    width = data.draw(st.integers(1, 32))
    config = MixtureConfig.model_validate(
        {
            "recipe": {
                "components": [
                    {"name": f"c{i}", "weight": r / sum(raw), "max_epochs": cap}
                    for i, (r, cap) in enumerate(zip(raw, caps, strict=True))
                ]
            },
            "build": {
                "encoded": "unused",
                "tokenizer_sha256": "0" * 64,
                "seq_length": 8,
                "global_batch": width,
                "total_tokens": data.draw(st.integers(8, 20_000)),
            },
            "out": "unused",
        }
    )
    try:
        plan = make_plan(config, docs, None)
    except InfeasibleMixture as exc:
        assert str(exc).startswith("recipe infeasible")
        return
    except Exception as exc:  # an empty component is the only other refusal
        assert "is empty" in str(exc)
        return
    index = plan.index(0)
    for comp, cap in enumerate(caps):
        size = plan.phases[0].sequences_per_epoch[comp]
        drawn = int((index["component"] == comp).sum())
        assert drawn <= cap * size + 1e-6
        if raw[comp] == 0:
            assert drawn == 0
