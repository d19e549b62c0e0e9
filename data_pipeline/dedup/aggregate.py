"""The aggregate of distributed dedup, step by step over hash partitions (each step one Ray task
per producer or partition; data_pipeline.dedup.launch runs them, data_pipeline.dedup.tasks holds
what each task computes):

1. buckets: per key partition, candidate pairs of each band bucket (+ exact-duplicate edges)
2. verify: candidates join u's signed row (partition of u), then v's (partition of v), where
   the pairs whose estimate is within noise of the threshold are checked against the shingles
   (data_pipeline.dedup.verify)
3. components: alternating large-star / small-star steps over edge partitions until the edge set
   stops changing (data_pipeline.dedup.components)
4. labels: per vertex partition, each document's root; keep: per root partition, the kept
   document and cluster size, split by part for the join back

Each step's inputs are released (launch.Runner.release) as soon as no later step reads them.
"""

from __future__ import annotations

from typing import Any

from data_pipeline.dedup import tasks, verify
from data_pipeline.dedup.config import DedupConfig
from data_pipeline.dedup.core import DedupStats
from data_pipeline.dedup.launch import Runner
from data_pipeline.throughput import peak_rss_mb


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
    (joined,), rests = run.scatter("verify-u", verify.attach_u, 1, 1, partitions, producers)
    run.get([r[-1] for r in rests], "verify-u")
    run.release(cands, lineage=False)
    outs = [
        run.launch(verify.verify_v, 2, config, len(joined[q]), *joined[q], *docs[q])
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
