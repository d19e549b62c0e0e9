"""Claim: the global-quota sampler keeps every global batch on target; independent random sampling
and Megatron-Core's BlendedDataset blending indices drift from batch to batch.

Same weights, same number of samples. Deviation = the largest |realised - target| share of a
component in a window of W samples, over aligned global batches and over all sliding windows;
also the cumulative deviation (sequences) at batch boundaries and at every sample.
Run: `.venv/bin/python -m benchmarks.bench_mixture_deviation`.
"""

from __future__ import annotations

import numpy as np

from benchmarks.common import write_result
from mixtures import boundaries, sampler, schedule

WEIGHTS = np.array([0.37, 0.23, 0.17, 0.11, 0.07, 0.05])
GLOBAL_BATCHES = (64, 512)
NUM_BATCHES = 400
SEED = 0
SWEEP_TRIALS = 30


def megatron_components(weights: np.ndarray, size: int) -> np.ndarray:
    """Megatron-Core's BlendedDataset sample order: build_blending_indices (C++)."""
    from megatron.core.datasets import helpers

    dataset_index = np.zeros(size, dtype=np.int16)
    sample_index = np.zeros(size, dtype=np.int64)
    helpers.build_blending_indices(dataset_index, sample_index, weights, weights.size, size, False)
    return dataset_index


def random_components(weights: np.ndarray, size: int) -> np.ndarray:
    """Independent sampling: every sample's component drawn at random with the weights."""
    return np.random.default_rng(SEED).choice(weights.size, size=size, p=weights).astype(np.int16)


def ours_components(weights: np.ndarray, size: int, width: int) -> np.ndarray:
    counts = boundaries.allocate_batches(weights, size // width, width)
    return schedule.interleave(counts, weights)[0]


def deviations(component: np.ndarray, weights: np.ndarray, width: int) -> dict[str, float]:
    counts = sampler.batch_counts(component, weights.size, width)
    aligned, prefix = (float(d.max()) for d in sampler.batch_deviations(counts, weights, width))
    return {
        "aligned_share": aligned / width,
        "sliding_share": sampler.max_window_deviation(component, weights, width) / width,
        "aligned_sequences": aligned,
        "prefix_sequences": prefix,
        "every_sample_prefix_sequences": float(
            sampler.sample_prefix_deviations(component, weights).max(initial=0.0)
        ),
    }


def main() -> None:
    rows = []
    for width in GLOBAL_BATCHES:
        size = width * NUM_BATCHES
        methods = {
            "ours_global_quota": ours_components(WEIGHTS, size, width),
            "megatron_blending_indices": megatron_components(WEIGHTS, size),
            "independent_random": random_components(WEIGHTS, size),
        }
        row = {"global_batch": width, "num_batches": NUM_BATCHES}
        for name, component in methods.items():
            row[name] = deviations(component, WEIGHTS, width)
        ours = row["ours_global_quota"]
        for base in ("megatron_blending_indices", "independent_random"):
            for kind in ("aligned_share", "sliding_share"):
                ratio = row[base][kind] / max(ours[kind], 1e-12)
                row[f"{base}_over_ours_{kind}"] = ratio
        rows.append(row)
        print(
            f"W={width}: max per-batch deviation (share) aligned / sliding: ours "
            f"{ours['aligned_share']:.4f} / {ours['sliding_share']:.4f}, megatron "
            f"{row['megatron_blending_indices']['aligned_share']:.4f} / "
            f"{row['megatron_blending_indices']['sliding_share']:.4f}, random "
            f"{row['independent_random']['aligned_share']:.4f} / "
            f"{row['independent_random']['sliding_share']:.4f}"
        )
    sweep = weight_sweep()
    print(
        f"random weight sweep ({SWEEP_TRIALS} weight vectors, K 2-12, W 64-1024): worst aligned "
        f"batch deviation ours {sweep['ours_worst_aligned_sequences']:.3f} sequences, megatron "
        f"{sweep['megatron_worst_aligned_sequences']:.3f}; worst every-sample prefix ours "
        f"{sweep['ours_worst_every_sample_prefix_sequences']:.8f}, megatron "
        f"{sweep['megatron_worst_every_sample_prefix_sequences']:.3f}"
    )
    replan = replan_conservation()
    print(
        f"re-plan after {replan['consumed']} of {replan['total']} samples (weights changed): "
        f"repeated / skipped sequences ours {replan['ours_repeated']} / {replan['ours_skipped']},"
        f" megatron {replan['megatron_repeated']} / {replan['megatron_skipped']}"
    )
    write_result(
        "mixture_deviation",
        {"weights": WEIGHTS.tolist(), "rows": rows, "sweep": sweep, "replan": replan},
    )


def replan_conservation(width: int = 512, batches: int = 400) -> dict[str, int]:
    """Weights change mid-run. Ours keeps the consumed prefix and continues each component's
    stream; Megatron rebuilds the blend with the new weights and resumes at the same sample, so
    each dataset restarts from the count the NEW blend would have reached: repeats or skips."""
    new_weights = WEIGHTS[::-1].copy()
    total, consumed = width * batches, width * batches // 2
    sizes = [total] * WEIGHTS.size  # one epoch covers everything: any repeat is a true repeat
    old = sampler.build_index(
        boundaries.allocate_batches(WEIGHTS, batches, width), WEIGHTS, sizes, seed=SEED
    )
    counts = boundaries.allocate_batches(new_weights, batches // 2, width)
    ours = sampler.build_index(counts, new_weights, sizes, seed=SEED, kept=old[:consumed])
    repeated = skipped = 0
    for k in range(WEIGHTS.size):
        used = ours["sequence"][ours["component"] == k]
        repeated += used.size - np.unique(used).size
        # The stream is the epoch permutation; a skip is a stream position passed over.
        stream = sampler.epoch_permutation(SEED, 0, k, 0, sizes[k])[: used.size]
        skipped += np.setdiff1d(stream, used).size
    seen = np.bincount(megatron_components(WEIGHTS, total)[:consumed], minlength=WEIGHTS.size)
    resumed = np.bincount(
        megatron_components(new_weights, total)[:consumed], minlength=WEIGHTS.size
    )
    return {
        "total": total,
        "consumed": consumed,
        "ours_repeated": int(repeated),
        "ours_skipped": int(skipped),
        "megatron_repeated": int(np.clip(seen - resumed, 0, None).sum()),
        "megatron_skipped": int(np.clip(resumed - seen, 0, None).sum()),
    }


def weight_sweep() -> dict[str, float]:
    """Worst aligned-batch and every-sample prefix deviations (sequences) over random weight
    vectors and batch sizes."""
    rng = np.random.default_rng(SEED)
    worst = {
        "ours_worst_aligned_sequences": 0.0,
        "megatron_worst_aligned_sequences": 0.0,
        "ours_worst_every_sample_prefix_sequences": 0.0,
        "megatron_worst_every_sample_prefix_sequences": 0.0,
    }
    for _ in range(SWEEP_TRIALS):
        weights = rng.dirichlet(np.ones(int(rng.integers(2, 13))))
        width = int(rng.choice([64, 96, 256, 1000, 1024]))
        size = width * 200
        for name, component in (
            ("ours", ours_components(weights, size, width)),
            ("megatron", megatron_components(weights, size)),
        ):
            counts = sampler.batch_counts(component, weights.size, width)
            aligned = float(sampler.batch_deviations(counts, weights, width)[0].max())
            prefix = float(sampler.sample_prefix_deviations(component, weights).max(initial=0.0))
            worst[f"{name}_worst_aligned_sequences"] = max(
                worst[f"{name}_worst_aligned_sequences"], aligned
            )
            worst[f"{name}_worst_every_sample_prefix_sequences"] = max(
                worst[f"{name}_worst_every_sample_prefix_sequences"], prefix
            )
    return {"trials": SWEEP_TRIALS, **worst}


if __name__ == "__main__":
    main()
