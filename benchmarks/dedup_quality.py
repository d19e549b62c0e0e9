"""Dedup quality on real text with known near-duplicates: precision / recall of verified candidate
PAIRS at Jaccard >= 0.8 against brute-force exact Jaccard, and cluster purity, default settings.

The set (<= 5,000 documents, from the development corpus):
- the same Linux kernel page as HTML text (web.jsonl.gz, navigation included) and as its rst
  source (zh.jsonl.gz, translations/zh_CN);
- man pages in Simplified and Traditional Chinese (translations: NOT duplicates);
- revisions of the same file: kernel docs (en) with a second version where 0-6% of the words
  were replaced, inserted or deleted (a spread of Jaccard values around the 0.8 threshold);
- background: Python HTML docs (shared navigation), Debian handbook / FAQ (en and zh-CN), more
  kernel docs, man pages.
Ground truth: exact Jaccard of the shingle sets (word 5-grams; char 5-grams for zh) of every pair,
by a sparse incidence-matrix product. Clusters: the stage's one path (map per part -> aggregate on
a local 2-CPU Ray -> join), as `pretrain data run` runs it. Writes benchmarks/results/dedup_quality.{json,png}.

    .venv/bin/python -m benchmarks.dedup_quality
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import re
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa

from benchmarks.common import RESULTS, add_corpus_argument, corpus_dir, write_result

CORPUS: Path  # the --corpus directory, set by main()
THRESHOLD = 0.8


def _load(name: str) -> list[dict]:
    with gzip.open(CORPUS / f"{name}.jsonl.gz", "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def _revise(text: str, rng: random.Random, fraction: float) -> str:
    words = text.split(" ")
    for _ in range(int(len(words) * fraction)):
        pos, op = rng.randrange(len(words)), rng.random()
        if op < 0.5:
            words[pos] = f"rev{rng.randrange(10**5)}"
        elif op < 0.75:
            words.insert(pos, f"ins{rng.randrange(10**5)}")
        elif len(words) > 1:
            del words[pos]
    return " ".join(words)


def _path_key(source: str) -> str:
    path = source.split(":/", 1)[-1]
    path = re.sub(r"^.*/translations/", "", path)
    return re.sub(r"\.(html|rst\.gz|txt\.gz)$", "", path)


def build_set(seed: int = 0) -> list[dict]:
    """The documents: id, text, lang, kind (what role the document plays)."""
    rng = random.Random(seed)
    web, en, zh = _load("web"), _load("en"), _load("zh")
    docs: list[dict] = []

    def add(kind: str, row: dict, text: str | None = None) -> None:
        docs.append(
            {
                "id": f"{kind}-{len(docs):05d}",
                "text": row["text"] if text is None else text,
                "lang": row["lang"],
                "kind": kind,
                "source": row["source"],
            }
        )

    rst = {_path_key(r["source"]): r for r in zh if "/translations/zh_CN/" in r["source"]}
    for row in web:
        if "linux-doc" in row["source"] and _path_key(row["source"]) in rst:
            add("html", row)
            add("rst", rst[_path_key(row["source"])])
    man = {}
    for row in zh:
        match = re.search(r"/man/(zh_CN|zh_TW)/(.+)$", row["source"])
        if match:
            man.setdefault(match.group(2), {})[match.group(1)] = row
    pairs = [p for p in man.values() if len(p) == 2]
    for pair in rng.sample(pairs, min(400, len(pairs))):
        add("man-zh-CN", pair["zh_CN"])
        add("man-zh-TW", pair["zh_TW"])
    kernel = [r for r in en if "linux-doc" in r["source"] and 800 <= len(r["text"]) <= 30000]
    rng.shuffle(kernel)
    for row in kernel[:700]:
        add("original", row)
        add("revision", row, _revise(row["text"], rng, rng.uniform(0.0, 0.06)))
    background = [r for r in web if "linux-doc" not in r["source"]] + kernel[700:1500]
    for row in rng.sample(background, min(5000 - len(docs), len(background))):
        add("background", row)
    return docs[:5000]


def shingle_sets(docs: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """(unique shingle hashes per document, back to back; offsets) with our shingling."""
    from data_pipeline.dedup.minhash import batch_shingles

    shingles, offsets, _ = batch_shingles(
        pa.array([d["text"] for d in docs]), pa.array([d["lang"] for d in docs]), 5, 5
    )
    sets = [np.unique(shingles[offsets[i] : offsets[i + 1]]) for i in range(len(docs))]
    lengths = np.array([len(s) for s in sets])
    out = np.zeros(len(sets) + 1, dtype=np.int64)
    np.cumsum(lengths, out=out[1:])
    return np.concatenate(sets), out


def brute_force_pairs(sets: np.ndarray, offsets: np.ndarray) -> dict[tuple[int, int], float]:
    """Exact Jaccard of every pair that shares a shingle, as {(i, j): J} for i < j."""
    from scipy import sparse

    _, column = np.unique(sets, return_inverse=True)
    rows = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
    incidence = sparse.csr_matrix((np.ones(len(rows), np.int32), (rows, column)))
    inter = sparse.triu(incidence @ incidence.T, k=1).tocoo()
    sizes = np.diff(offsets)
    union = sizes[inter.row] + sizes[inter.col] - inter.data
    jaccard = inter.data / union
    return {(int(i), int(j)): float(x) for i, j, x in zip(inter.row, inter.col, jaccard)}


def verified_pairs(docs: list[dict]) -> dict[tuple[int, int], float]:
    """Every LSH candidate pair (all pairs of each bucket), verified at default settings.
    Returns {pair: similarity used to decide (exact Jaccard where it was computed)}."""
    from data_pipeline.dedup.components import bucket_pairs
    from data_pipeline.dedup.config import DedupConfig
    from data_pipeline.dedup.core import band_rows, signature_table, signatures_of, verify_pairs

    config = DedupConfig()
    sigs, _ = signature_table(
        pa.table(
            {
                "id": [d["id"] for d in docs],
                "text": [d["text"] for d in docs],
                "lang": [d["lang"] for d in docs],
            }
        ),
        config,
    )
    keys, vertices = band_rows(sigs, config)
    position = {v: i for i, v in enumerate(np.asarray(sigs.column("vertex")).tolist())}
    left, right = bucket_pairs(keys, vertices, small_bucket=None)
    u = np.array([position[v] for v in vertices[left].tolist()], dtype=np.int64)
    v = np.array([position[x] for x in vertices[right].tolist()], dtype=np.int64)
    u, v = np.minimum(u, v), np.maximum(u, v)
    signatures = signatures_of(sigs.column("sig"), config.num_perm)
    shingles = sigs.column("shingles")
    vertex = np.asarray(sigs.column("vertex"))
    ok, estimate, _ = verify_pairs(
        signatures[u], shingles.take(pa.array(u)), sigs, vertex[v], config
    )
    return {(int(a), int(b)): float(e) for a, b, e, k in zip(u, v, estimate, ok) if k}


def stage_clusters(table: pa.Table, parts: int = 4) -> np.ndarray:
    """`dup_cluster` of every row as `pretrain data run` tags it: the dedup stage's map of each
    of `parts` parts, persisted as the runner does (global_parts.persist), its aggregate on a
    local Ray (2 CPUs, started the way a job starts it), each part joined back."""
    import pyarrow.parquet as pq

    from data_pipeline import global_parts
    from data_pipeline.stages.dedup import DedupStage
    from pretrain import rayinit

    stage, found = DedupStage(), []
    bounds = [len(table) * k // parts for k in range(parts + 1)]
    rayinit.connect(None, num_cpus=2)
    try:
        with tempfile.TemporaryDirectory(prefix="dedup-quality-") as tmp:
            for k, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
                rows, name = table.slice(lo, hi - lo), f"q-{k:05d}"
                tables, info = stage.map_part(rows)
                out = Path(tmp)
                global_parts.persist(out, stage.name, name, rows, tables, info=info, depends="")
                found.append(global_parts.load(out, stage.name, name, rows.num_rows, ""))
            joins = stage.aggregate(found)
            tagged = [
                stage.join_part(pq.read_table(p.rows), {}, i, *joins[i])
                for i, p in enumerate(found)
            ]
    finally:
        rayinit.shutdown(True)
    return np.asarray(pa.concat_tables(tagged).column("dup_cluster"))


def cluster_metrics(
    docs: list[dict], truth: set[tuple[int, int]], jaccard: dict[tuple[int, int], float]
) -> dict:
    """Purity of the stage's clusters against connected components of the truth graph."""
    from scipy import sparse
    from scipy.sparse.csgraph import connected_components

    table = pa.table(
        {
            "id": [d["id"] for d in docs],
            "text": [d["text"] for d in docs],
            "lang": [d["lang"] for d in docs],
        }
    )
    cluster = stage_clusters(table)
    pairs = np.array(sorted(truth), dtype=np.int64).reshape(-1, 2)
    graph = sparse.coo_matrix(
        (np.ones(len(pairs)), (pairs[:, 0], pairs[:, 1])), shape=(len(docs), len(docs))
    )
    label = connected_components(graph, directed=False)[1]
    _, cluster_id, sizes = np.unique(cluster, return_inverse=True, return_counts=True)
    multi = sizes[cluster_id] > 1
    majority = 0
    for c in np.unique(cluster_id[multi]):
        majority += np.unique(label[cluster_id == c], return_counts=True)[1].max()
    same = [(i, j) for i, j in jaccard if cluster_id[i] == cluster_id[j]]
    in_cluster = sum(1 for p in same if jaccard[p] >= THRESHOLD)
    return {
        "clusters": int(len(np.unique(cluster_id[multi]))),
        "documents_in_clusters": int(multi.sum()),
        "purity": round(majority / max(1, multi.sum()), 4),
        "pairs_in_clusters_with_jaccard_ge_0.8": round(in_cluster / max(1, len(same)), 4),
        "cluster_id": cluster_id,
    }


def _plot(jaccard: dict, predicted: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [k for k in predicted if k in jaccard]
    fig, ax = plt.subplots(figsize=(5, 4))
    ax.scatter([jaccard[k] for k in keys], [predicted[k] for k in keys], s=4, alpha=0.5)
    ax.axvline(THRESHOLD, color="red", lw=0.8)
    ax.axhline(THRESHOLD, color="red", lw=0.8)
    ax.set_xlabel("exact Jaccard (brute force)")
    ax.set_ylabel("similarity the verifier used")
    ax.set_title("dedup: verified candidate pairs")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    global CORPUS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_corpus_argument(parser)
    CORPUS = corpus_dir(parser.parse_args([] if argv is None else argv).corpus)
    docs = build_set()
    sets, offsets = shingle_sets(docs)
    jaccard = brute_force_pairs(sets, offsets)
    truth = {p for p, x in jaccard.items() if x >= THRESHOLD}
    predicted = verified_pairs(docs)
    hits = len(truth & set(predicted))
    clusters = cluster_metrics(docs, truth, jaccard)
    cluster_id = clusters.pop("cluster_id")
    kinds = [d["kind"] for d in docs]
    translations = [
        (i, i + 1)
        for i in range(len(docs) - 1)
        if kinds[i] == "man-zh-CN" and kinds[i + 1] == "man-zh-TW"
    ]
    if not os.environ.get("BENCH_SMOKE"):  # a smoke run keeps the results (common.write_result)
        RESULTS.mkdir(parents=True, exist_ok=True)
        _plot(jaccard, predicted, RESULTS / "dedup_quality.png")
    result = {
        "documents": len(docs),
        "kinds": {k: kinds.count(k) for k in sorted(set(kinds))},
        "threshold": THRESHOLD,
        "true_pairs": len(truth),
        "verified_pairs": len(predicted),
        "pair_precision": round(hits / max(1, len(predicted)), 4),
        "pair_recall": round(hits / max(1, len(truth)), 4),
        "targets": {"precision": 0.95, "recall": 0.95},
        "cluster": clusters,
        "translation_pairs": len(translations),
        "translation_pairs_clustered": sum(
            int(cluster_id[i] == cluster_id[j]) for i, j in translations
        ),
        "translation_pairs_jaccard_ge_0.8": sum(
            int(jaccard.get(p, 0.0) >= THRESHOLD) for p in translations
        ),
        "html_rst_pairs_jaccard_ge_0.8": sum(
            int(jaccard.get((i, i + 1), 0.0) >= THRESHOLD)
            for i in range(len(docs) - 1)
            if kinds[i] == "html" and kinds[i + 1] == "rst"
        ),
        "plot": "benchmarks/results/dedup_quality.png",
    }
    print(
        f"precision {result['pair_precision']}, recall {result['pair_recall']} "
        f"({len(truth)} true pairs), purity {clusters['purity']}"
    )
    write_result("dedup_quality", result)


if __name__ == "__main__":
    main(sys.argv[1:])
