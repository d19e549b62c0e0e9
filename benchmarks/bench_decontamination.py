"""Decontamination of training data against eval sets: ours vs datasketch MinHashLSH.

Ours (`evals.sets.decontaminate`): the eval documents go into the pipeline's dedup index
(`data_pipeline.dedup.index`, vectorised MinHash, banded LSH, verified), and the training documents
are queried batch by batch. Baseline: datasketch `MinHash` + `MinHashLSH` (the usual Python route),
with the same word 5-gram shingles, 128 permutations and threshold 0.7, on the same documents.
Input: the development corpus (en + web, where the Python docs exist both as rst and HTML, so real
near-copies cross the split). Reports training documents/s for both, the ratio, and how far the
two agree on which training documents are contaminated.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.common import add_corpus_argument, corpus_dir, peak_rss_mb, write_result
from pretrain.manifest import write_manifest
from pretrain.schema import split_for

CORPUS: Path  # the --corpus directory, set by main()
LIMIT = {"en.jsonl.gz": 8000, "web.jsonl.gz": 1148}
EVAL_FRACTION = 0.05
THRESHOLD = 0.7
WORD = re.compile(r"\w+")


def load_docs() -> list[dict]:
    docs = []
    for name, limit in LIMIT.items():
        with gzip.open(CORPUS / name, "rt", encoding="utf-8") as handle:
            for i, line in enumerate(handle):
                if i >= limit:
                    break
                record = json.loads(line)
                doc_id = f"{name}:{i}"
                docs.append(
                    {
                        "id": doc_id,
                        "text": record["text"][:20000],
                        "lang": "en",
                        "domain": record.get("domain"),
                        "split": split_for(doc_id, EVAL_FRACTION),
                    }
                )
    return docs


def ours(eval_docs: list[dict], train_file: Path, root: Path) -> set[str]:
    from evals.sets import DecontaminationConfig, decontaminate

    cfg = DecontaminationConfig(threshold=THRESHOLD)
    hits = decontaminate(eval_docs, [train_file], cfg, 2048, root / "index")
    return {h["train_id"] for h in hits}


def baseline(eval_docs: list[dict], train_docs: list[dict]) -> set[str]:
    from datasketch import MinHash, MinHashLSH

    def sketch(text: str) -> MinHash | None:
        words = WORD.findall(text.lower())
        grams = {" ".join(words[i : i + 5]).encode() for i in range(max(len(words) - 4, 1))}
        if not words:
            return None
        minhash = MinHash(num_perm=128, seed=1)
        minhash.update_batch(list(grams))
        return minhash

    lsh = MinHashLSH(threshold=THRESHOLD, num_perm=128)
    sketches = {}
    for doc in eval_docs:
        found = sketch(doc["text"])
        if found is not None:
            sketches[doc["id"]] = found
            lsh.insert(doc["id"], found)
    hits = set()
    for doc in train_docs:
        found = sketch(doc["text"])
        if found is None:
            continue
        if any(found.jaccard(sketches[k]) >= THRESHOLD for k in lsh.query(found)):
            hits.add(doc["id"])
    return hits


def main(argv: list[str] | None = None) -> None:
    global CORPUS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_corpus_argument(parser)
    CORPUS = corpus_dir(parser.parse_args([] if argv is None else argv).corpus)
    docs = load_docs()
    eval_docs = [d for d in docs if d["split"] == "eval"]
    train_docs = [d for d in docs if d["split"] != "eval"]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "shards" / "data").mkdir(parents=True)
        train_file = root / "shards" / "data" / "corpus-00000.parquet"
        pq.write_table(pa.Table.from_pylist(docs), train_file)
        write_manifest(root / "shards", "shards")
        start = time.perf_counter()
        ours_hits = ours(eval_docs, train_file, root)
        ours_s = time.perf_counter() - start
    start = time.perf_counter()
    base_hits = baseline(eval_docs, train_docs)
    base_s = time.perf_counter() - start
    both = ours_hits & base_hits
    result = {
        "eval_documents": len(eval_docs),
        "train_documents": len(train_docs),
        "ours_s": round(ours_s, 2),
        "datasketch_s": round(base_s, 2),
        "ours_docs_per_s": round(len(train_docs) / ours_s, 1),
        "datasketch_docs_per_s": round(len(train_docs) / base_s, 1),
        "speedup": round(base_s / ours_s, 2),
        "ours_contaminated": len(ours_hits),
        "datasketch_contaminated": len(base_hits),
        "agreement_jaccard": round(len(both) / max(len(ours_hits | base_hits), 1), 3),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "threshold": THRESHOLD,
    }
    print(
        f"decontamination: ours {result['ours_docs_per_s']} docs/s, datasketch "
        f"{result['datasketch_docs_per_s']} docs/s -> {result['speedup']}x; contaminated "
        f"{len(ours_hits)} vs {len(base_hits)} (agreement {result['agreement_jaccard']})"
    )
    write_result("decontamination", result)


if __name__ == "__main__":
    main(sys.argv[1:])
