"""Distributed dedup's aggregate on Ray: Ray tasks over hash partitions, no actors, nothing
global in one process. `dedup_parts` (DedupStage.aggregate, in the runner's driver) runs over
input parts whose map side is persisted (DedupStage.map_part); each step is one Ray task per
producer or partition (`Runner`; data_pipeline.dedup.tasks holds what each task computes):

1. map: per persisted part, its band rows, exact rows, doc rows and signed rows, each split into
   P partitions (tasks.load_map_part)
2. buckets: per key partition, candidate pairs of each band bucket (+ exact-duplicate edges)
3. verify: candidates join u's signed row (partition of u), then v's (partition of v), where
   the pairs whose estimate is within noise of the threshold are checked against the shingles
   (tasks.attach_u, tasks.verify_v)
4. components: alternating large-star / small-star steps over edge partitions until the edge set
   stops changing (data_pipeline.dedup.components)
5. labels: per vertex partition, each document's root; keep: per root partition, the kept
   document and cluster size, split by part for the join back
6. join: the runner joins each part's tags back by row (DedupStage.join_part, tasks.attach)

Every all-to-all step's pieces go through files (data_pipeline.dedup.exchange); each step's
inputs are released (`Runner.release`) as soon as no later step reads them. Only tasks are used
(1 CPU each), so the actor/CPU deadlock of Ray Data on small clusters cannot occur here; every
wait has a timeout that fails with a message instead of hanging.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Sequence
from typing import Any

from data_pipeline import throughput
from data_pipeline.dedup import budget, exchange, tasks
from data_pipeline.dedup.budget import DEFAULT_WORKER_MEMORY_MB
from data_pipeline.dedup.config import DedupConfig
from data_pipeline.dedup.core import DedupStats
from data_pipeline.stagekit import AGGREGATE_SCRATCH, MapOutput, ray_get
from data_pipeline.throughput import peak_rss_mb
from pretrain.progress import Progress
from pretrain.storage import OutPath, output_path, remove_tree


def dedup_parts(
    parts: Sequence[MapOutput],
    config: DedupConfig,
    stage: Any,
    worker_memory_mb: int = DEFAULT_WORKER_MEMORY_MB,
) -> tuple[list[tuple[Any, ...]], DedupStats]:
    """The aggregate over input parts whose map side (tasks.map_tables) is persisted: for each
    part, the tag pieces its join (tasks.attach) needs; and the stats. Partitions come from the
    parts' sizes and `worker_memory_mb` (data_pipeline.dedup.budget). Every step exchanges its
    pieces through files beside the persisted map side (data_pipeline.dedup.exchange: local
    disk, or the output's object store on a cluster); the tags' files stay until the next
    aggregate (the joins read them)."""
    import ray

    if not parts:
        return [], DedupStats()
    documents = sum(int(p.info.get("documents", 0)) for p in parts)
    input_bytes = sum(output_path(f).stat().st_size for p in parts for f in p.files.values())
    cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
    partitions, _ = budget.choose_partitions(documents, input_bytes, worker_memory_mb, cpus, config)
    wait_for_cpu(ray, config.task_timeout_s)
    folder = _exchange_folder(parts)
    run = Runner(config, folder)
    steps = Progress(total=5, desc="dedup", unit="step", leave=False)
    maps = run.scatter(
        "map",
        tasks.load_map_part,
        4,
        1,
        partitions,
        [(dict(p.files), dict(p.info), i, partitions) for i, p in enumerate(parts)],
    )
    tags = aggregate(run, maps, config, partitions, steps)
    steps.close()
    run.sweep()  # what the steps let go is deleted, and the disk peak recorded
    for step in folder.iterdir():  # only the tags' files are read after this (the joins)
        if not step.name.endswith("-keep"):
            remove_tree(step)
    stats = stats_of(run, partitions)
    stats.extra["plan"] = {"partitions": partitions, "worker_memory_mb": worker_memory_mb}
    stats.extra["exchange"] = run.scratch.summary()
    joins = [tuple(tags[i % partitions]) for i in range(len(parts))]
    if config.index.save_to:  # the map side's signatures, with the tags just found
        import pyarrow.parquet as pq

        from data_pipeline.dedup.index import write_index

        signed = ["vertex", "id", "sig", "shingles"]
        docs = (
            tasks.attach(pq.read_table(p.files["docs"], columns=signed), i, *joins[i])
            for i, p in enumerate(parts)
        )
        write_index(config.index.save_to, docs, config)
    stage.cost, stage.timeline = run.cost(), run.timeline
    return joins, stats


def _exchange_folder(parts: Sequence[MapOutput]) -> OutPath:
    """A fresh folder for this aggregate's exchange files, beside the persisted map side; the
    folders of earlier runs (a driver killed mid-aggregate, or the joins' tags of the last run)
    are removed first. A task of a killed driver still writing writes into its own old folder."""
    root = output_path(parts[0].rows).parent / AGGREGATE_SCRATCH
    remove_tree(root)
    return root / uuid.uuid4().hex


class Runner:
    """Launches the step functions as Ray tasks and waits for them with a timeout."""

    def __init__(self, config: DedupConfig, folder: str | OutPath) -> None:
        import ray

        self.ray = ray
        self.exchange: Any = output_path(folder)
        """Folder of the exchange's files (data_pipeline.dedup.exchange)."""
        self.scratch = exchange.Scratch(self.exchange)
        self.producing: list[Any] = []
        """Cost refs of the file producers whose files a consumer launched next may read."""
        self.steps = 0
        self.timeout = config.task_timeout_s
        self.infos: dict[str, list[dict[str, Any]]] = {}
        self.remotes: dict[Any, Any] = {}
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
            timed = throughput.timed_task(func, num_returns)
            self.remotes[key] = self.ray.remote(num_cpus=1, max_retries=2)(timed)
        *refs, cost = self.remotes[key].options(num_returns=num_returns + 1).remote(*args)
        self.costs.append(cost)
        self.scratch.read_by(args, cost)
        return refs

    def release(self, *columns: Any, lineage: bool) -> None:
        """No task launched from now on reads these pieces (exchange.Scratch.release)."""
        self.scratch.release(columns, lineage)

    def gathers(self, *columns: Any) -> list[Any]:
        """`columns` with only their exchange.Gathers (no object ref): what `release` needs."""
        return [[[g for g in c if isinstance(g, exchange.Gather)] for c in col] for col in columns]

    def sweep(self) -> None:
        self.scratch.sweep(self.ray)

    def scatter(
        self, step: str, func: Any, groups: int, extra: int, partitions: int, producers: list
    ) -> tuple[list[list[list[Any]]], list[list[Any]]]:
        """Launch one producer task per args tuple in `producers`; `func`'s first `groups` x
        `partitions` returns are partition pieces, then `extra` values. Returns (columns, rests):
        columns[g][q] is what a consumer of partition q passes on for group g (one exchange.Gather
        naming the producers' files), rests[i] producer i's extra refs."""
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
        costs = self.costs[len(self.costs) - len(outs) :]  # the producers'
        self.producing += costs
        self.scratch.produced(name, groups, costs)
        columns = [
            [[exchange.Gather(self.exchange, name, g, len(outs), q)] for q in range(partitions)]
            for g in range(groups)
        ]
        return columns, [o[:extra] for o in outs]

    def cost(self) -> dict[str, float]:
        """CPU-seconds and peak RSS of every task launched so far."""
        return throughput.merge_reports(self.ray.get(self.costs, timeout=self.timeout))

    def wait(self, refs: list[Any], step: str) -> list[Any]:
        timed_out = RuntimeError(
            f"dedup step {step!r} waited more than task_timeout_s={self.timeout} s; check "
            "`ray status`: actors may be holding every CPU (see the Ray deadlock note)"
        )
        return ray_get(self.ray, refs, self.timeout, timed_out)  # a changed exchange file: 1 line

    def get(self, refs: list[Any], step: str) -> list[Any]:
        values = self.wait(refs, step)
        self.sweep()
        self.infos.setdefault(step, []).extend(v for v in values if isinstance(v, dict))
        self.timeline.append((step, time.time()))
        return values


def wait_for_cpu(ray: Any, timeout: float) -> None:
    deadline = time.monotonic() + min(timeout, 60.0)
    while ray.available_resources().get("CPU", 0) < 1:
        if time.monotonic() > deadline:
            raise RuntimeError(
                "dedup: no free CPU on the Ray cluster for 60 s; actors of an "
                "earlier stage hold them all (use fractional num_cpus there)"
            )
        time.sleep(0.5)


def aggregate(
    run: Runner,
    maps: tuple,
    config: DedupConfig,
    partitions: int,
    steps: Any,
) -> list:
    """Map outputs (4 groups of pieces + info per part) -> per partition, what its tag pieces'
    consumer passes on."""
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


def _buckets(run: Runner, bands: list, exact: list, config: DedupConfig, partitions: int):
    producers = [
        (config, partitions, len(bands[p]), *bands[p], *exact[p]) for p in range(partitions)
    ]
    (cands,), rests = run.scatter("buckets", tasks.bucket_edges, 1, 2, partitions, producers)
    run.get([r[-1] for r in rests], "buckets")
    return cands, [r[0] for r in rests]


def _verify(run: Runner, cands: list, docs: list, config: DedupConfig, partitions: int) -> list:
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


def _star_step(run: Runner, kind: str, edges: list, partitions: int) -> tuple[list, list]:
    producers = [(kind, partitions, e) for e in edges]
    (pieces,), _ = run.scatter(f"{kind}-scatter", tasks.star_scatter, 1, 0, partitions, producers)
    outs = [run.launch(tasks.star_reduce, 2, kind, *pieces[q]) for q in range(partitions)]
    infos = run.get([o[1] for o in outs], f"{kind}-star")
    run.release(pieces, lineage=True)  # the edges of star_reduce go into the next scatter
    return [o[0] for o in outs], infos


def _components(run: Runner, edges: list, partitions: int) -> list:
    previous = None
    for _ in range(200):  # more star rounds than any graph needs: a bug, not input
        edges, _ = _star_step(run, "large", edges, partitions)
        edges, infos = _star_step(run, "small", edges, partitions)
        count = sum(i["fingerprint"][0] for i in infos)
        digest = sum(i["fingerprint"][1] for i in infos) % 2**64
        if (count, digest) == previous:
            break
        previous = (count, digest)
    else:
        raise RuntimeError("dedup: connected components did not converge in 200 rounds")
    edges, _ = _star_step(run, "large", edges, partitions)
    return edges


def _keep(run: Runner, roots: list, docs: list, partitions: int) -> list[list]:
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


def stats_of(run: Runner, partitions: int) -> DedupStats:
    merged = {step: throughput.merge_reports(infos) for step, infos in run.infos.items()}
    total = throughput.merge_reports(list(merged.values()))
    names = [f.name for f in dataclasses.fields(DedupStats) if f.name != "extra"]
    counts: dict[str, Any] = {name: int(total.get(name, 0)) for name in names}
    stats = DedupStats(**counts)
    rounds = len(run.infos.get("small-star", [])) // partitions
    stats.extra = {
        "partitions": partitions,
        "component_rounds": rounds,
        # largest peak RSS of the worker processes that ran each step; workers are reused across
        # steps (and runs), so this is a running maximum
        "worker_peak_rss_mb_by_step": {
            step: round(info.get("peak_rss_mb", 0.0), 1) for step, info in merged.items()
        },
        "driver_peak_rss_mb": round(peak_rss_mb(), 1),
    }
    return stats
