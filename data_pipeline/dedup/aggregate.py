"""Distributed dedup's aggregate: Ray tasks over hash partitions, nothing global in one process.

Each step is one task per producer (a persisted part, or a partition), whose pieces go through
files (data_pipeline.dedup.exchange), deleted once no later step reads them; what each task
computes is in data_pipeline.dedup.tasks:

1. map: each part's band, exact, doc and signed rows, split into P partitions (load_map_part)
2. buckets: per key partition, candidate pairs of each band bucket and exact-duplicate edges
3. verify: candidates join u's signed row (attach_u), then v's, where pairs whose estimate is
   within noise of the threshold are checked against the shingles (verify_v)
4. components: alternating large-star / small-star steps until the edge set stops changing
5. labels: each document's root; keep: per root partition, the kept document and cluster size,
   split by part for the runner's join (DedupStage.join_part, tasks.attach)

Only tasks (1 CPU each), so Ray Data's actor/CPU deadlock on small clusters cannot occur here;
every wait has a timeout that fails with a message instead of hanging.
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
from data_pipeline.stage_types import AGGREGATE_SCRATCH, MapOutput
from pretrain.errors import ray_get
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
    maps = [(dict(p.files), dict(p.info), i, partitions) for i, p in enumerate(parts)]
    tags = aggregate(run, maps, config, partitions)
    for step in folder.iterdir():  # only the tags' files are read after this (the joins)
        if not step.name.endswith("-keep"):
            remove_tree(step)
    stats = stats_of(run, partitions)
    stats.extra["plan"] = {"partitions": partitions, "worker_memory_mb": worker_memory_mb}
    stats.extra["exchange"] = {"written_bytes": run.written, "peak_bytes": run.peak}
    joins = [(tags[i % partitions],) for i in range(len(parts))]
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
    """Runs the steps: one Ray task per producer, each writing its pieces to files (exchange),
    waited for with a timeout; deletes each step's files once no later step reads them."""

    def __init__(self, config: DedupConfig, folder: str | OutPath) -> None:
        import ray

        self.ray = ray
        self.exchange: Any = output_path(folder)
        """Folder of the exchange's files (data_pipeline.dedup.exchange)."""
        self.steps = 0
        self.timeout = config.task_timeout_s
        self.infos: dict[str, list[dict[str, Any]]] = {}
        self.remotes: dict[Any, Any] = {}
        self.costs: list[Any] = []
        """One ref per task: its CPU-seconds and peak RSS (data_pipeline.throughput)."""
        self.timeline: list[tuple[str, float]] = [("start", time.time())]
        """(step, Unix time it finished), in order: where a run's time and memory went."""
        self.live: dict[OutPath, int] = {}
        self.written = self.peak = 0
        """Bytes of the exchange files written, and the most on disk at once."""

    def step(
        self, step: str, func: Any, groups: int, partitions: int, producers: list
    ) -> tuple[list[list[exchange.Gather]], list[dict[str, Any]]]:
        """Run one task per args tuple in `producers` and wait for them all; `func` returns
        `groups` x `partitions` pieces, then its info. Returns (columns, infos): columns[g][q]
        is the exchange.Gather of partition q of group g, infos[i] producer i's info."""
        self.steps += 1
        name = f"{self.steps:04d}-{step}"
        if func not in self.remotes:
            timed = throughput.timed_task(exchange.producer(func), 1)
            self.remotes[func] = self.ray.remote(num_cpus=1, max_retries=2)(timed)
        refs = []
        for i, args in enumerate(producers):
            info, cost = (
                self.remotes[func]
                .options(num_returns=2)
                .remote(groups, partitions, (self.exchange, name, i), *args)
            )
            refs.append(info)
            self.costs.append(cost)
        timed_out = RuntimeError(
            f"dedup step {step!r} waited more than task_timeout_s={self.timeout} s; check "
            "`ray status`: actors may be holding every CPU (see the Ray deadlock note)"
        )
        infos = ray_get(self.ray, refs, self.timeout, timed_out)  # a changed file: one line
        self.infos.setdefault(step, []).extend(infos)
        self.timeline.append((step, time.time()))
        for group in range(groups):
            folder = exchange.group_folder(self.exchange, name, group)
            self.live[folder] = exchange.tree_bytes(folder)
            self.written += self.live[folder]
        self.peak = max(self.peak, sum(self.live.values()))
        columns = [
            [exchange.Gather(self.exchange, name, g, len(producers), q) for q in range(partitions)]
            for g in range(groups)
        ]
        return columns, infos

    def release(self, *columns: list[exchange.Gather]) -> None:
        """Delete the files of these columns: every step that reads them has finished."""
        for column in columns:
            folder = exchange.group_folder(self.exchange, column[0].step, column[0].group)
            remove_tree(folder)
            self.live.pop(folder, None)

    def cost(self) -> dict[str, float]:
        """CPU-seconds and peak RSS of every task launched so far."""
        return throughput.merge_reports(self.ray.get(self.costs, timeout=self.timeout))


def wait_for_cpu(ray: Any, timeout: float) -> None:
    deadline = time.monotonic() + min(timeout, 60.0)
    while ray.available_resources().get("CPU", 0) < 1:
        if time.monotonic() > deadline:
            raise RuntimeError(
                "dedup: no free CPU on the Ray cluster for 60 s; actors of an "
                "earlier stage hold them all (use fractional num_cpus there)"
            )
        time.sleep(0.5)


def aggregate(run: Runner, maps: list, config: DedupConfig, partitions: int) -> list:
    """Persisted map sides (one args tuple of tasks.load_map_part per part) -> per partition q,
    the exchange.Gather of the tags of the parts whose index is q modulo the partitions."""
    p = partitions
    (bands, exact, docs, signed), _ = run.step("map", tasks.load_map_part, 4, p, maps)
    (cands, exact_edges), _ = run.step(
        "buckets", tasks.bucket_edges, 2, p, [(config, p, bands[q], exact[q]) for q in range(p)]
    )
    run.release(bands, exact)  # band and exact rows (~0.27 KB/doc) go before the verify peak
    (joined,), _ = run.step(
        "verify-u", tasks.attach_u, 1, p, [(config, p, cands[q], signed[q]) for q in range(p)]
    )
    run.release(cands)
    (verified,), _ = run.step(
        "verify-v", tasks.verify_v, 1, p, [(config, p, joined[q], signed[q]) for q in range(p)]
    )
    run.release(joined, signed)
    roots = _components(run, [exact_edges, verified], p)
    (labelled,), _ = run.step(
        "labels", tasks.label_docs, 1, p, [(p, roots[q], docs[q]) for q in range(p)]
    )
    run.release(roots, docs)
    producers = [(p, labelled[q]) for q in range(p)]
    (kept,), _ = run.step("keep", tasks.keep_clusters, 1, p, producers)
    run.release(labelled)
    return kept


def _components(run: Runner, edges: list[list[exchange.Gather]], partitions: int) -> list:
    """Alternating large- and small-star steps over `edges` (columns oriented for a large step)
    until the edge set stops changing, then a last large step: (vertex, root) by vertex."""

    def star(kind: str, then: str, edges: list[list[exchange.Gather]]) -> tuple[list, list]:
        producers = [(kind, then, partitions, *(c[q] for c in edges)) for q in range(partitions)]
        (out,), infos = run.step(f"{kind}-star", tasks.star, 1, partitions, producers)
        run.release(*edges)
        return [out], infos

    previous = None
    for _ in range(200):  # more star rounds than any graph needs: a bug, not input
        edges, _ = star("large", "small", edges)
        edges, infos = star("small", "large", edges)
        count = sum(i["fingerprint"][0] for i in infos)
        digest = sum(i["fingerprint"][1] for i in infos) % 2**64
        if (count, digest) == previous:
            break
        previous = (count, digest)
    else:
        raise RuntimeError("dedup: connected components did not converge in 200 rounds")
    return star("large", "roots", edges)[0][0]


def stats_of(run: Runner, partitions: int) -> DedupStats:
    total = throughput.merge_reports([i for infos in run.infos.values() for i in infos])
    names = [f.name for f in dataclasses.fields(DedupStats) if f.name != "extra"]
    counts: dict[str, Any] = {name: int(total.get(name, 0)) for name in names}
    stats = DedupStats(**counts)
    rounds = len(run.infos.get("small-star", [])) // partitions
    stats.extra = {"partitions": partitions, "component_rounds": rounds}
    return stats
