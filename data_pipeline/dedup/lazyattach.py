"""The tagged output of DedupStage.apply as a lazy Ray Dataset: one read task per slice joins
that slice's tags back (tasks.attach) when the consumer reads it, not before `apply` returns.

Before, `apply` ran every attach task and returned the tagged blocks, so the whole tagged
output (the input's columns and the tags) sat in the object store while the consumer wrote it,
beside whatever of the input was not yet freed. Here a tagged block exists only from its read
task until the consumer has used it (Ray Data's streaming executor bounds how many are ahead),
and a consumer that fuses its map (`.map_batches(write)`) into the read never puts one in the
object store. The input blocks stay referenced by the dataset until it is dropped (each read,
and a re-read, needs them).

Order: the dataset's context has `preserve_order` on, so blocks come out in slice order (the
input's order) whatever order the read tasks end in. Only public Ray Data API is used
(Datasource, ReadTask, read_datasource).

Cost: each read records its CPU-seconds (fetching the slice and its tags, the join) in the
cluster's key-value store under the apply's `cost_key` (one key per read: a dataset read twice
costs twice), so `attach_cost` counts the join back, which runs after `apply` has returned, in
the stage's CPU (DedupStage.attach_cost).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import time
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from data_pipeline.dedup import tasks

COST_NAMESPACE = "pretrain-dedup-attach"


def _attach_slice(
    block_ref: Any, slice_index: int, first: int, rows: int, pieces: tuple, cost_key: str
) -> list:
    """Run inside Ray Data's read task: fetch the slice's block and its tag pieces (object refs,
    or exchange.Gather files that tasks.concat reads), attach, and record the CPU it took."""
    import ray

    start = time.process_time()
    block = ray.get(block_ref)
    resolved = [ray.get(p) if isinstance(p, ray.ObjectRef) else p for p in pieces]
    tagged = tasks.attach(block, slice_index, first, rows, *resolved)
    _record(cost_key, slice_index, time.process_time() - start)
    return [tagged]


def _record(cost_key: str, slice_index: int, cpu_s: float) -> None:
    from ray.experimental import internal_kv

    key = f"{cost_key}/{slice_index}/{uuid.uuid4().hex}"
    value = json.dumps({"cpu_s": cpu_s, "peak_rss_mb": tasks.peak_rss_mb()})
    internal_kv._internal_kv_put(key, value, namespace=COST_NAMESPACE)


def attach_cost(cost_keys: Iterable[str]) -> dict[str, float]:
    """CPU-seconds (summed) and peak RSS (max) of every lazy attach read so far under
    `cost_keys`, and how many reads there were."""
    from ray.experimental import internal_kv

    cpu_s, peak, reads = 0.0, 0.0, 0
    for cost_key in cost_keys:
        for key in internal_kv._internal_kv_list(f"{cost_key}/", namespace=COST_NAMESPACE):
            value = internal_kv._internal_kv_get(key, namespace=COST_NAMESPACE)
            if value is None:
                continue
            cost = json.loads(value)
            cpu_s, peak, reads = cpu_s + cost["cpu_s"], max(peak, cost["peak_rss_mb"]), reads + 1
    return {"cpu_s": cpu_s, "peak_rss_mb": peak, "reads": reads}


_KEYS: set[str] = set()
"""Cost keys of this process's lazy datasets not yet forgotten (at exit they are)."""


def forget_costs(cost_keys: Iterable[str]) -> None:
    """Delete the recorded costs of `cost_keys` (a Ray no longer running has none to delete)."""
    from ray.experimental import internal_kv

    for cost_key in list(cost_keys):
        _KEYS.discard(cost_key)
        if internal_kv._internal_kv_initialized():
            internal_kv._internal_kv_del(
                f"{cost_key}/", del_by_prefix=True, namespace=COST_NAMESPACE
            )


def _forget_at_exit() -> None:
    with contextlib.suppress(Exception):  # Ray half shut down at exit: its store goes with it
        forget_costs(sorted(_KEYS))


atexit.register(_forget_at_exit)


def _datasource(
    blocks: Sequence[Any],
    sizes: Sequence[tuple[int, int]],
    slices: Sequence[tuple[int, int, int]],
    tags: list,
    partitions: int,
    cost_key: str,
) -> Any:
    from ray.data.block import BlockMetadata
    from ray.data.datasource import Datasource, ReadTask

    def read_fn(b: int, s: int, lo: int, n: int) -> Any:
        ref, pieces = blocks[b], tuple(tags[s % partitions])
        return lambda: _attach_slice(ref, s, lo, n, pieces, cost_key)

    def estimate(b: int, n: int) -> int:
        rows, size = sizes[b]
        return int(size * n / max(1, rows)) + 100 * n  # + the tags (~100 bytes per row)

    read_tasks = [
        ReadTask(
            read_fn(b, s, lo, n),
            BlockMetadata(num_rows=n, size_bytes=estimate(b, n), input_files=None, exec_stats=None),
        )
        for s, (b, lo, n) in enumerate(slices)
    ]

    class TaggedSlices(Datasource):
        """Each slice's tagged rows, computed when read."""

        def estimate_inmemory_data_size(self) -> int:
            return sum(t.metadata.size_bytes or 0 for t in read_tasks)

        def get_read_tasks(self, parallelism: int, *args: Any, **kwargs: Any) -> list[Any]:
            return list(read_tasks)  # one per slice, whatever `parallelism` asks

    return TaggedSlices()


def tagged_dataset(
    blocks: Sequence[Any],
    sizes: Sequence[tuple[int, int]],
    slices: Sequence[tuple[int, int, int]],
    tags: list,
    partitions: int,
    cost_key: str,
) -> Any:
    """A lazy dataset of the tagged slices, in slice order (one block per slice); each read's
    cost is recorded under `cost_key` (attach_cost)."""
    import ray

    _KEYS.add(cost_key)
    source = _datasource(blocks, sizes, slices, tags, partitions, cost_key)
    dataset = ray.data.read_datasource(source, num_cpus=1, override_num_blocks=len(slices))
    dataset.context.execution_options.preserve_order = True
    return dataset
