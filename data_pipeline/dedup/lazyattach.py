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
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from data_pipeline.dedup import tasks


def _attach_slice(block_ref: Any, slice_index: int, first: int, rows: int, pieces: tuple) -> list:
    """Run inside Ray Data's read task: fetch the slice's block and its tag pieces (object refs,
    or exchange.Gather files that tasks.concat reads), and attach."""
    import ray

    block = ray.get(block_ref)
    resolved = [ray.get(p) if isinstance(p, ray.ObjectRef) else p for p in pieces]
    return [tasks.attach(block, slice_index, first, rows, *resolved)]


def _datasource(
    blocks: Sequence[Any],
    sizes: Sequence[tuple[int, int]],
    slices: Sequence[tuple[int, int, int]],
    tags: list,
    partitions: int,
) -> Any:
    from ray.data.block import BlockMetadata
    from ray.data.datasource import Datasource, ReadTask

    def read_fn(b: int, s: int, lo: int, n: int) -> Any:
        ref, pieces = blocks[b], tuple(tags[s % partitions])
        return lambda: _attach_slice(ref, s, lo, n, pieces)

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
) -> Any:
    """A lazy dataset of the tagged slices, in slice order (one block per slice)."""
    import ray

    source = _datasource(blocks, sizes, slices, tags, partitions)
    dataset = ray.data.read_datasource(source, num_cpus=1, override_num_blocks=len(slices))
    dataset.context.execution_options.preserve_order = True
    return dataset
