"""International PII: precision and recall of the PII detector before and after libphonenumber
(with national phone formats picked by the document's language tag), on the multilingual labelled
set (tests/data/pii/multilingual.jsonl: English, German, French, Spanish, Chinese) and the original
labelled set, and redaction speed of both on the same documents, in the same run.

"Before" is `data_pipeline/stages/pii.py` as it was just before `phonenumbers` came in (found with
`git log -S`), loaded from git; pass `--before REV` to compare against another commit.

    .venv/bin/python -m benchmarks.bench_pii_multilingual [--corpus DIR --docs 2000]
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import inspect
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from benchmarks.common import add_corpus_argument, corpus_dir, write_result

ROOT = Path(__file__).resolve().parents[1]
SETS = {
    name: ROOT / "tests" / "data" / "pii" / f"{name}.jsonl" for name in ("multilingual", "labelled")
}
MODULE = "data_pipeline/stages/pii.py"
Detect = Callable[[str, str | None], set[tuple[int, int, str]]]


def before_rev() -> str:
    """The parent of the commit that brought `phonenumbers` into pii.py (HEAD while unlanded)."""
    added = subprocess.run(
        ["git", "log", "--reverse", "--format=%H", "-S", "import phonenumbers", "--", MODULE],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return f"{added[0]}^" if added else "HEAD"


def _module_at(rev: str, path: str, name: str) -> ModuleType:
    """The file `path` as it was at `rev`, loaded as module `name`."""
    source = subprocess.run(
        ["git", "show", f"{rev}:{path}"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    # The baseline imported its list of PII kinds from pretrain.nested, which no longer holds
    # it: the same revision's nested.py stands in for it.
    if "from pretrain.nested import" in source:
        _module_at(rev, "pretrain/nested.py", f"{name}_nested")
        source = source.replace("from pretrain.nested import", f"from {name}_nested import")
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location(name, f.name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def load_module(rev: str) -> ModuleType:
    return _module_at(rev, MODULE, "pii_before")


def detector(module: ModuleType) -> Detect:
    takes_lang = "lang" in inspect.signature(module.find_pii).parameters

    def detect(text: str, lang: str | None) -> set[tuple[int, int, str]]:
        spans = module.find_pii(text, lang=lang) if takes_lang else module.find_pii(text)
        return {(s.start, s.end, s.kind) for s in spans}

    return detect


def scores(rows: list[dict[str, Any]], detect: Detect, kinds: set[str] | None = None) -> dict:
    tp = fp = fn = 0
    for row in rows:
        gold = {(s["start"], s["end"], s["kind"]) for s in row["spans"]}
        got = detect(row["text"], row.get("lang"))
        if kinds is not None:
            gold, got = {s for s in gold if s[2] in kinds}, {s for s in got if s[2] in kinds}
        tp, fp, fn = tp + len(gold & got), fp + len(got - gold), fn + len(gold - got)
    return {
        "precision": round(tp / max(tp + fp, 1), 4),
        "recall": round(tp / max(tp + fn, 1), 4),
        "true_positives": tp,
        "false_positives": fp,
        "false_negatives": fn,
    }


def load_corpus(corpus: Path, limit: int) -> list[tuple[str, str | None]]:
    """Every `step`-th document of the corpus's en, web and zh files, with its `lang`."""
    docs: list[tuple[str, str | None]] = []
    for name in ("en.jsonl.gz", "web.jsonl.gz", "zh.jsonl.gz"):
        with gzip.open(corpus / name, "rt", encoding="utf-8") as f:
            docs.extend((row["text"], row.get("lang")) for row in map(json.loads, f))
    step = max(1, len(docs) // limit)
    return docs[::step][:limit]


def docs_per_s(docs: list[tuple[str, str | None]], detect: Detect) -> float:
    start = time.perf_counter()
    for text, lang in docs:
        detect(text, lang)
    return len(docs) / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from data_pipeline.stages import pii

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default=None, help="git revision of the baseline pii.py")
    add_corpus_argument(parser)
    parser.add_argument("--docs", type=int, default=2000, help="corpus documents timed")
    args = parser.parse_args([] if argv is None else argv)
    rev = args.before or before_rev()
    before, after = detector(load_module(rev)), detector(pii)
    sets = {n: [json.loads(x) for x in p.read_text("utf-8").splitlines()] for n, p in SETS.items()}
    result: dict[str, Any] = {"before_rev": rev}
    for name, rows in sets.items():
        result[name] = {
            "examples": len(rows),
            "negatives": sum(not r["spans"] for r in rows),
            "before": scores(rows, before),
            "after": scores(rows, after),
            "before_phone": scores(rows, before, {"phone"}),
            "after_phone": scores(rows, after, {"phone"}),
        }
    docs = [(r["text"], r.get("lang")) for rows in sets.values() for r in rows] * 20
    if args.corpus:
        docs = load_corpus(corpus_dir(args.corpus), args.docs)
    rate_before = rate_after = 0.0
    for _ in range(3):  # alternate, best of each: the machine's load changes over minutes
        rate_before = max(rate_before, docs_per_s(docs, before))
        pii._window_phones.cache_clear()  # each pass starts cold, as a worker does
        rate_after = max(rate_after, docs_per_s(docs, after))
    result["speed"] = {
        "documents": len(docs),
        "input": "corpus" if args.corpus else "the labelled sets x20",
        "before_docs_per_s": round(rate_before, 1),
        "after_docs_per_s": round(rate_after, 1),
        "ratio": round(rate_after / rate_before, 3),
    }
    write_result("pii_multilingual", result)
    multi = result["multilingual"]
    print(
        f"pii multilingual ({multi['examples']} docs): P {multi['before']['precision']:.1%} -> "
        f"{multi['after']['precision']:.1%}, R {multi['before']['recall']:.1%} -> "
        f"{multi['after']['recall']:.1%}; speed {result['speed']['ratio']}x of before"
    )
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
