"""Claim: building the sample index for 10^8 sequences is the same order of speed as (or faster
than) Megatron-Core's `build_blending_indices` (C++), at similar peak memory.

Both produce, per sample, the component and its running sample number within the component
(Megatron: dataset_index int16 + dataset_sample_index int64; ours: component int16 + draw int64).
We also time our full index (with the per-epoch shuffle inside components), which Megatron does
separately in GPTDataset. Each method runs in its own process so peak memory is its own.
Speed is compared on CPU time (both single-threaded), wall time is recorded too. Our sampler is
numpy (its C kernels were removed after this benchmark showed they saved ~13 CPU-seconds per
10^8-sequence build, see BENCHMARKS.md).
Run: `.venv/bin/python -m benchmarks.bench_mixture_index [--sequences N]`.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import sys
import time

import numpy as np

from benchmarks.common import write_result

WEIGHTS = [0.37, 0.23, 0.17, 0.11, 0.07, 0.05]
GLOBAL_BATCH = 1024
EPOCH_MARGIN = 1.25  # each component holds 1.25x the sequences it serves: one partial epoch


def _rss_mb() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * resource.getpagesize() / 2**20


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _run(method: str, sequences: int, queue: mp.Queue) -> None:
    from megatron.core.datasets import helpers

    from mixtures import boundaries, sampler, schedule

    weights = np.array(WEIGHTS)
    before = _rss_mb()
    start, cpu_start = time.perf_counter(), time.process_time()
    if method == "megatron_build_blending_indices":
        dataset_index = np.zeros(sequences, dtype=np.int16)
        sample_index = np.zeros(sequences, dtype=np.int64)
        helpers.build_blending_indices(
            dataset_index, sample_index, weights, weights.size, sequences, False
        )
        check = int(np.bincount(dataset_index, minlength=weights.size).max())
    elif method == "ours_allocate_interleave":
        counts = boundaries.allocate_batches(weights, sequences // GLOBAL_BATCH, GLOBAL_BATCH)
        component, draw = schedule.interleave(counts, weights)
        check = int(np.bincount(component, minlength=weights.size).max())
    else:
        index = sampler.build_index(
            boundaries.allocate_batches(weights, sequences // GLOBAL_BATCH, GLOBAL_BATCH),
            weights,
            [int(EPOCH_MARGIN * w * sequences) + 1 for w in weights],
            seed=0,
        )
        check = int(np.bincount(index["component"], minlength=weights.size).max())
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    queue.put(
        {
            "seconds": seconds,
            "cpu_seconds": cpu,
            "peak_extra_mb": _peak_mb() - before,
            "largest": check,
        }
    )


def measure(method: str, sequences: int) -> dict:
    context = mp.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=_run, args=(method, sequences, queue))
    process.start()
    result = queue.get(timeout=1200)
    process.join()
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sequences", type=int, default=10**8)
    args = parser.parse_args(argv or [])
    sequences = args.sequences - args.sequences % GLOBAL_BATCH
    methods = (
        "megatron_build_blending_indices",
        "ours_allocate_interleave",
        "ours_full_index_with_shuffle",
    )
    results = {m: measure(m, sequences) for m in methods}
    base = results["megatron_build_blending_indices"]
    for name, res in results.items():
        # CPU time is the fair measure on a shared machine (both sides are single-threaded).
        res["speedup_vs_megatron_cpu"] = base["cpu_seconds"] / res["cpu_seconds"]
        res["speedup_vs_megatron_wall"] = base["seconds"] / res["seconds"]
        print(
            f"{name}: {res['cpu_seconds']:.2f} s CPU ({res['seconds']:.2f} s wall), peak "
            f"+{res['peak_extra_mb']:.0f} MB, {res['speedup_vs_megatron_cpu']:.2f}x Megatron's "
            "speed (CPU time)"
        )
    write_result(
        "mixture_index",
        {
            "sequences": sequences,
            "global_batch": GLOBAL_BATCH,
            "weights": WEIGHTS,
            "results": results,
            "sampler_loops": "numpy",
        },
    )


if __name__ == "__main__":
    main(sys.argv[1:])
