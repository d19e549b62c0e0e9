"""Distributed dedup on Ray: Ray tasks over hash partitions, no actors, nothing global in one
process.

1. map: per slice of a block (data_pipeline.dedup.budget), signatures -> band rows, exact rows,
   doc rows and signed rows (signature + shingles), each split into P partitions
2. buckets: per key partition, candidate pairs of each band bucket (+ exact-duplicate edges)
3. verify: candidates join u's signature (partition of u), then v's (partition of v)
4. components: alternating large-star / small-star steps over edge partitions until the edge set
   stops changing (data_pipeline.dedup.components)
5. labels: per vertex partition, each document's root; keep: per root partition, the kept
   document and cluster size; attach: per slice, tags joined back by (slice, row), order kept; each input block is
   freed once its slices are tagged when the input was handed over (dedup_dataset)

Only tasks are used (1 CPU each), so the actor/CPU deadlock of Ray Data on small clusters cannot
occur here; every wait has a timeout that fails with a message instead of hanging.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import Any

from data_pipeline import throughput
from data_pipeline.dedup import budget, exchange, tasks
from data_pipeline.dedup.budget import DEFAULT_WORKER_MEMORY_MB
from data_pipeline.dedup.config import DedupConfig
from data_pipeline.dedup.core import DedupStats
from data_pipeline.stagekit import AGGREGATE_SCRATCH, MapOutput
from pretrain.errors import PretrainError
from pretrain.outstore import OutPath, output_path, remove_tree
from pretrain.progress import Progress


class _Runner:
    """Launches the step functions as Ray tasks and waits for them with a timeout."""

    def __init__(self, config: DedupConfig, folder: str | None = None) -> None:
        import ray

        self.ray = ray
        self.exchange = folder
        """Folder of the file-based exchange (data_pipeline.dedup.exchange); None: Ray objects."""
        self.scratch = None if folder is None else exchange.Scratch(folder)
        self.producing: list[Any] = []
        """Cost refs of the file producers whose files a consumer launched next may read."""
        self.steps = 0
        self.timeout = config.task_timeout_s
        self.infos: dict[str, list[dict[str, Any]]] = {}
        self.remotes: dict[Any, Any] = {}
        self.isolate = config.isolate_tasks
        self.costs: list[Any] = []
        """One ref per task: its CPU-seconds and peak RSS (data_pipeline.throughput)."""
        self.timeline: list[tuple[str, float]] = [("start", time.time())]
        """(step, Unix time it finished), in order: where a run's time and memory went."""

    def launch(self, func: Any, num_returns: int, *args: Any) -> list[Any]:
        if self.producing and any(isinstance(a, exchange.Gather) for a in args):
            self.wait(self.producing, "exchange")  # a Gather's files exist once these finish
            self.producing = []
            self.sweep()
        key = (func, num_returns)
        if key not in self.remotes:
            options = {"max_calls": 1} if self.isolate else {}
            timed = throughput.timed_task(func, num_returns)
            self.remotes[key] = self.ray.remote(num_cpus=1, max_retries=2, **options)(timed)
        *refs, cost = self.remotes[key].options(num_returns=num_returns + 1).remote(*args)
        self.costs.append(cost)
        if self.scratch is not None:
            self.scratch.read_by(args, cost)
        return refs

    def release(self, *columns: Any, lineage: bool) -> None:
        """No task launched from now on reads these pieces (exchange.Scratch.release)."""
        if self.scratch is not None:
            self.scratch.release(columns, lineage)

    def gathers(self, *columns: Any) -> list[Any]:
        """`columns` with only their exchange.Gathers (no object ref): what `release` needs."""
        return [[[g for g in c if isinstance(g, exchange.Gather)] for c in col] for col in columns]

    def sweep(self) -> None:
        if self.scratch is not None:
            self.scratch.sweep(self.ray)

    def scatter(
        self, step: str, func: Any, groups: int, extra: int, partitions: int, producers: list
    ) -> tuple[list[list[list[Any]]], list[list[Any]]]:
        """Launch one producer task per args tuple in `producers`; `func`'s first `groups` x
        `partitions` returns are partition pieces, then `extra` values. Returns (columns, rests):
        columns[g][q] is what a consumer of partition q passes on for group g (one ref per
        producer, or one exchange.Gather naming their files), rests[i] producer i's extra refs."""
        if self.exchange is None:
            outs = [self.launch(func, groups * partitions + extra, *args) for args in producers]
            columns = [
                [[o[g * partitions + q] for o in outs] for q in range(partitions)]
                for g in range(groups)
            ]
            return columns, [o[groups * partitions :] for o in outs]
        self.steps += 1
        name = f"{self.steps:04d}-{step}"
        outs = [
            self.launch(
                exchange.producer(func),
                max(1, extra),
                groups,
                partitions,
                (self.exchange, name, i),
                *args,
            )
            for i, args in enumerate(producers)
        ]
        self.producing += self.costs[len(self.costs) - len(outs) :]
        if self.scratch is not None:
            self.scratch.produced(name, groups, self.costs[len(self.costs) - len(outs) :])
        columns = [
            [[exchange.Gather(self.exchange, name, g, len(outs), q)] for q in range(partitions)]
            for g in range(groups)
        ]
        return columns, [o[:extra] for o in outs]

    def cost(self) -> dict[str, float]:
        """CPU-seconds and peak RSS of every task launched so far."""
        return throughput.merge_task_costs(self.ray.get(self.costs, timeout=self.timeout))

    def wait(self, refs: list[Any], step: str) -> list[Any]:
        try:
            return self.ray.get(refs, timeout=self.timeout)
        except self.ray.exceptions.GetTimeoutError:
            raise RuntimeError(
                f"dedup step {step!r} waited more than task_timeout_s={self.timeout} s; check "
                "`ray status`: actors may be holding every CPU (see the Ray deadlock note)"
            ) from None
        except self.ray.exceptions.RayTaskError as exc:  # e.g. a changed exchange file: 1 line
            if isinstance(cause := getattr(exc, "cause", None), PretrainError):
                raise type(cause)(str(cause)) from None
            raise

    def get(self, refs: list[Any], step: str) -> list[Any]:
        values = self.wait(refs, step)
        self.sweep()
        self.infos.setdefault(step, []).extend(v for v in values if isinstance(v, dict))
        self.timeline.append((step, time.time()))
        return values


def _wait_for_cpu(ray: Any, timeout: float) -> None:
    deadline = time.monotonic() + min(timeout, 60.0)
    while ray.available_resources().get("CPU", 0) < 1:
        if time.monotonic() > deadline:
            raise RuntimeError(
                "dedup: no free CPU on the Ray cluster for 60 s; actors of an "
                "earlier stage hold them all (use fractional num_cpus there)"
            )
        time.sleep(0.5)


def _blocks(materialized: Any) -> tuple[list[Any], list[tuple[int, int]]]:
    """Block refs and their (rows, bytes) from the dataset's metadata (nothing is fetched)."""
    refs, sizes = [], []
    for bundle in materialized.iter_internal_ref_bundles():
        for entry in bundle.blocks:
            ref, meta = (entry.ref, entry.metadata) if hasattr(entry, "ref") else entry
            refs.append(ref)
            sizes.append((int(meta.num_rows or 0), int(meta.size_bytes or 0)))
    return refs, sizes


def dedup_dataset(
    dataset: Any,
    config: DedupConfig,
    stage: Any,
    worker_memory_mb: int = DEFAULT_WORKER_MEMORY_MB,
    exchange_dir: str | None = None,
) -> tuple[Any, DedupStats]:
    """Tag every row of a Ray Dataset; returns (dataset with the dedup columns, stats). Slices
    and partitions come from the input's size and `worker_memory_mb` (data_pipeline.dedup.budget).
    With `exchange_dir` (a folder every worker reads and writes: local disk on one node, a shared
    file system or s3:// on a cluster), the aggregate's steps exchange their pieces through files
    in a fresh subfolder, removed at the end (data_pipeline.dedup.exchange), not as Ray objects:
    the object store then holds only the input and the tagged output (the same tags).

    `dataset` may be handed over in a one-item list, which this empties: then nothing here keeps
    the input's blocks once their slices are tagged (each attach task holds its block until it
    ends), so when the caller keeps no other reference the object store frees each input block
    as its tagged blocks appear, not only after the whole output exists. `stats.extra[
    "input_blocks_held_after_attach"]` counts the input blocks still referenced then (Ray's
    reference table): 0 when the input was handed over and nothing else held it."""
    import ray

    materialized = (dataset.pop() if isinstance(dataset, list) else dataset).materialize()
    del dataset
    blocks, sizes = _blocks(materialized)
    if not blocks or sum(rows for rows, _ in sizes) == 0:
        return materialized, DedupStats()
    del materialized  # from here `blocks` is this function's only hold on the input
    cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
    cap = budget.MAX_PARTITIONS if exchange_dir is None else budget.MAX_FILE_PARTITIONS
    plan = budget.plan(sizes, worker_memory_mb, cpus, config, cap)
    partitions = plan.partitions
    _wait_for_cpu(ray, config.task_timeout_s)
    folder = None if exchange_dir is None else output_path(exchange_dir) / uuid.uuid4().hex
    run = _Runner(config, None if folder is None else str(folder))
    steps = Progress(total=6, desc="dedup", unit="step", leave=False)
    maps = run.scatter(
        "map",
        tasks.map_block,
        4,
        1,
        partitions,
        [(blocks[b], s, lo, n, config, partitions) for s, (b, lo, n) in enumerate(plan.slices)],
    )
    tags = _aggregate(run, maps, config, partitions, steps)
    _remove_steps(folder, keep="-keep")
    out, held = _attach_streaming(run, blocks, plan.slices, tags, partitions)
    _remove_steps(folder)
    steps.update()
    steps.close()
    result = ray.data.from_arrow_refs(out)
    stats = _stats(run, partitions)
    stage.cost, stage.timeline = run.cost(), run.timeline
    stats.extra["plan"] = {**plan.describe(), "worker_memory_mb": worker_memory_mb}
    stats.extra["input_blocks_held_after_attach"] = held
    if config.index.save_to:
        from data_pipeline.dedup.index import save_index

        save_index(config.index.save_to, (ray.get(ref) for ref in out), config, tagged=True)
    return result, stats


def _attach_streaming(
    run: _Runner, blocks: list[Any], slices: Sequence[tuple[int, int, int]], tags: list, parts: int
) -> tuple[list[Any], int]:
    """One attach task per slice, in block order; the driver's refs to the input blocks are
    dropped (emptying `blocks`) once every task is submitted, so a block lives only until its
    last slice is tagged. Returns (the tagged slices' refs, input blocks still referenced once
    all are tagged)."""
    ids = [ref.hex().encode() for ref in blocks]
    out = [
        run.launch(tasks.attach, 1, blocks[b], s, lo, n, *tags[s % parts])[0]
        for s, (b, lo, n) in enumerate(slices)
    ]
    blocks.clear()
    ready, _ = run.ray.wait(out, num_returns=len(out), timeout=run.timeout, fetch_local=False)
    if len(ready) < len(out):
        raise RuntimeError(
            f"dedup step 'attach' waited more than task_timeout_s={run.timeout} s; check "
            "`ray status`: actors may be holding every CPU (see the Ray deadlock note)"
        )
    run.timeline.append(("attach", time.time()))
    counts = run.ray._private.worker.global_worker.core_worker.get_all_reference_counts()
    # held by a reference in this process ("local"); a finished task's hold on its argument
    # ("submitted") is released asynchronously after ray.wait returns, so it is not counted
    return out, sum(1 for i in ids if counts.get(i, {}).get("local", 0) > 0)


def dedup_parts(
    parts: Sequence[MapOutput],
    config: DedupConfig,
    stage: Any,
    worker_memory_mb: int = DEFAULT_WORKER_MEMORY_MB,
    files: bool = True,
) -> tuple[list[tuple[Any, ...]], DedupStats]:
    """The aggregate over input parts whose map side (tasks.map_tables) is persisted: for each
    part, the tag pieces its join (tasks.attach) needs; and the stats. Partitions come from the
    parts' sizes and `worker_memory_mb` (data_pipeline.dedup.budget). With `files`, every step
    exchanges its pieces through files beside the persisted map side (data_pipeline.dedup.
    exchange; the tags' files stay until the next aggregate, the joins read them); else as Ray
    objects (the same tags)."""
    import ray

    sizes = [
        (
            int(p.info.get("documents", 0)),
            sum(output_path(f).stat().st_size for f in p.files.values()),
        )
        for p in parts
    ]
    if not parts:
        return [], DedupStats()
    cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
    cap = budget.MAX_FILE_PARTITIONS if files else budget.MAX_PARTITIONS
    plan = budget.plan(sizes, worker_memory_mb, cpus, config, cap)
    partitions = plan.partitions
    _wait_for_cpu(ray, config.task_timeout_s)
    folder = _exchange_folder(parts) if files else None
    run = _Runner(config, None if folder is None else str(folder))
    steps = Progress(total=5, desc="dedup", unit="step", leave=False)
    maps = run.scatter(
        "map",
        tasks.load_map_part,
        4,
        1,
        partitions,
        [(dict(p.files), dict(p.info), i, partitions) for i, p in enumerate(parts)],
    )
    tags = _aggregate(run, maps, config, partitions, steps)
    steps.close()
    run.sweep()  # what the steps let go is deleted, and the disk peak recorded
    _remove_steps(folder, keep="-keep")  # only the tags' files are read after this (the joins)
    stats = _stats(run, partitions)
    stats.extra["plan"] = {"partitions": partitions, "worker_memory_mb": worker_memory_mb}
    if run.scratch is not None:
        stats.extra["exchange"] = run.scratch.summary()
    joins = [tuple(tags[i % partitions]) for i in range(len(parts))]
    if config.index.save_to:
        from data_pipeline.dedup.index import save_index

        tagged = (
            ray.get(run.launch(tasks.attach_file, 1, part.rows, i, *joins[i])[0])
            for i, part in enumerate(parts)
        )
        save_index(config.index.save_to, tagged, config, tagged=True)
    stage.cost, stage.timeline = run.cost(), run.timeline
    return joins, stats


def _remove_steps(folder: OutPath | None, keep: str | None = None) -> None:
    """Remove the exchange files of every step but those whose name ends with `keep` (all, and
    the folder, when `keep` is None)."""
    if folder is None:
        return
    if keep is None:
        remove_tree(folder)
        return
    for step in folder.iterdir():
        if not step.name.endswith(keep):
            remove_tree(step)


def _exchange_folder(parts: Sequence[MapOutput]) -> OutPath:
    """A fresh folder for this aggregate's exchange files, beside the persisted map side; the
    folders of earlier runs (a driver killed mid-aggregate, or the joins' tags of the last run)
    are removed first. A task of a killed driver still writing writes into its own old folder."""
    root = output_path(parts[0].rows).parent / AGGREGATE_SCRATCH
    remove_tree(root)
    return root / uuid.uuid4().hex


def _aggregate(run: _Runner, maps: tuple, config: DedupConfig, partitions: int, steps: Any) -> list:
    """Map outputs (4 groups of pieces + info per slice or part) -> per partition, what its tag
    pieces' consumer passes on."""
    (bands, exact, docs, signed), rests = maps
    run.get([r[-1] for r in rests], "map")
    del maps, rests  # no ref to a map output outlives its use below
    steps.update()
    cands, edges = _buckets(run, bands, exact, config, partitions)
    held = run.gathers(bands, exact)
    del bands, exact  # band and exact rows (~0.27 KB/doc) are freed before the verify peak
    steps.update()
    edges += _verify(run, cands, signed, config, partitions)
    # bucket_edges' and verify_v's edges go into the first star step: their files go after it
    run.release(*held, signed, lineage=True)
    del cands, signed  # the object store frees them: only edges and docs go on
    steps.update()
    roots = _components(run, edges, partitions)
    steps.update()
    tags = _keep(run, roots, docs, partitions)
    steps.update()
    return tags


def _buckets(run: _Runner, bands: list, exact: list, config: DedupConfig, partitions: int):
    producers = [
        (config, partitions, len(bands[p]), *bands[p], *exact[p]) for p in range(partitions)
    ]
    (cands,), rests = run.scatter("buckets", tasks.bucket_edges, 1, 2, partitions, producers)
    run.get([r[-1] for r in rests], "buckets")
    return cands, [r[0] for r in rests]


def _verify(run: _Runner, cands: list, docs: list, config: DedupConfig, partitions: int) -> list:
    producers = [
        (config, partitions, len(cands[q]), *cands[q], *docs[q]) for q in range(partitions)
    ]
    (joined,), rests = run.scatter("verify-u", tasks.attach_u, 1, 1, partitions, producers)
    run.get([r[-1] for r in rests], "verify-u")
    run.release(cands, lineage=False)
    outs = [
        run.launch(tasks.verify_v, 2, config, len(joined[q]), *joined[q], *docs[q])
        for q in range(partitions)
    ]
    run.get([o[-1] for o in outs], "verify-v")
    run.release(joined, lineage=True)
    return [o[0] for o in outs]


def _star_step(run: _Runner, kind: str, edges: list, partitions: int) -> tuple[list, list]:
    producers = [(kind, partitions, e) for e in edges]
    (pieces,), _ = run.scatter(f"{kind}-scatter", tasks.star_scatter, 1, 0, partitions, producers)
    outs = [run.launch(tasks.star_reduce, 2, kind, *pieces[q]) for q in range(partitions)]
    infos = run.get([o[1] for o in outs], f"{kind}-star")
    run.release(pieces, lineage=True)  # the edges of star_reduce go into the next scatter
    return [o[0] for o in outs], infos


def _components(run: _Runner, edges: list, partitions: int, max_rounds: int = 200) -> list:
    previous = None
    for _ in range(max_rounds):
        edges, _ = _star_step(run, "large", edges, partitions)
        edges, infos = _star_step(run, "small", edges, partitions)
        count = sum(i["fingerprint"][0] for i in infos)
        digest = sum(i["fingerprint"][1] for i in infos) % 2**64
        if (count, digest) == previous:
            break
        previous = (count, digest)
    else:
        raise RuntimeError(f"dedup: connected components did not converge in {max_rounds} rounds")
    edges, _ = _star_step(run, "large", edges, partitions)
    return edges


def _keep(run: _Runner, roots: list, docs: list, partitions: int) -> list[list]:
    producers = [(partitions, e) for e in roots]
    (pieces,), _ = run.scatter("roots", tasks.scatter_edges, 1, 0, partitions, producers)
    producers = [(partitions, len(pieces[q]), *pieces[q], *docs[q]) for q in range(partitions)]
    (labelled,), rests = run.scatter("labels", tasks.label_docs, 1, 1, partitions, producers)
    run.get([r[-1] for r in rests], "labels")
    run.release(pieces, docs, lineage=False)
    producers = [(partitions, *labelled[r]) for r in range(partitions)]
    (kept,), rests = run.scatter("keep", tasks.keep_clusters, 1, 1, partitions, producers)
    run.get([r[-1] for r in rests], "keep")
    run.release(labelled, lineage=False)
    return kept


def _stats(run: _Runner, partitions: int) -> DedupStats:
    merged = {step: tasks.merge_info(infos) for step, infos in run.infos.items()}
    total = tasks.merge_info(list(merged.values()))
    names = (
        "documents",
        "empty",
        "tiny",
        "cjk",
        "exact_duplicates",
        "candidate_pairs",
        "verified_pairs",
        "clusters",
        "dropped",
        "index_matches",
    )
    stats = DedupStats(**{name: int(total.get(name, 0)) for name in names})
    rounds = len(run.infos.get("small-star", [])) // partitions
    stats.extra = {
        "partitions": partitions,
        "component_rounds": rounds,
        # largest peak RSS of the worker processes that ran each step; workers are reused across
        # steps (and runs), so this is a running maximum unless isolate_tasks is set
        "worker_peak_rss_mb_by_step": {
            step: round(info.get("peak_rss_mb", 0.0), 1) for step, info in merged.items()
        },
        "driver_peak_rss_mb": round(tasks.peak_rss_mb(), 1),
    }
    return stats
