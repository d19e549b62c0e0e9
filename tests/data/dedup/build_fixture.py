"""Rebuild docs.jsonl from the development corpus (run by hand; tests only read docs.jsonl).

.venv/bin/python tests/data/dedup/build_fixture.py /work/shared/corpus
"""

from __future__ import annotations

import gzip
import json
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _load(path: Path, want) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [row for row in map(json.loads, handle) if want(row)]


def _edit_words(text: str, rng: random.Random, fraction: float) -> str:
    words = text.split(" ")
    for _ in range(max(1, int(len(words) * fraction))):
        words[rng.randrange(len(words))] = rng.choice(["alpha", "beta", "gamma", "delta"])
    return " ".join(words)


def main(corpus: str) -> None:
    rng = random.Random(4)
    root = Path(corpus)
    en = _load(
        root / "en.jsonl.gz", lambda r: "linux-doc" in r["source"] and 1500 < len(r["text"]) < 4000
    )
    zh = _load(
        root / "zh.jsonl.gz",
        lambda r: r["source"].endswith(("/zh_CN/man1/cp.1.gz", "/zh_TW/man1/cp.1.gz")),
    )
    docs = []

    def add(doc_id: str, text: str, group: str | None, lang: str = "en", source: str = "") -> None:
        docs.append({"id": doc_id, "text": text, "lang": lang, "group": group, "source": source})

    for i, row in enumerate(en[:12]):
        add(f"en-{i:02d}", row["text"], f"g{i:02d}" if i < 6 else None, source=row["source"])
    for i, row in enumerate(en[:6]):
        if i % 3 == 0:  # exact copy up to case and whitespace
            add(
                f"en-{i:02d}-copy",
                "  " + row["text"].upper().replace("\n", "\n\n"),
                f"g{i:02d}",
                source=row["source"],
            )
        else:  # near copy: 1% of words replaced
            add(
                f"en-{i:02d}-near",
                _edit_words(row["text"], rng, 0.01),
                f"g{i:02d}",
                source=row["source"],
            )
    for i, row in enumerate(en[6:9], start=6):  # a heavy revision: 30% of words changed
        add(f"en-{i:02d}-rev", _edit_words(row["text"], rng, 0.3), None, source=row["source"])
    for row in zh:  # zh_CN and zh_TW translations of one file: NOT duplicates
        tag = "zh-CN" if "/zh_CN/" in row["source"] else "zh-TW"
        add(f"zh-{tag}", row["text"], None, lang="zh", source=row["source"])
    cn = next(r for r in zh if "/zh_CN/" in r["source"])
    add("zh-CN-near", cn["text"].replace("。", "．", 3), "gzh", lang="zh", source=cn["source"])
    docs[-3 if "zh_CN" in docs[-3]["source"] else -2]["group"] = "gzh"
    add("empty-1", "", "gempty")
    add("empty-2", "   \n ", "gempty")
    add("tiny-1", "Hello world", "gtiny")
    add("tiny-2", "hello   WORLD", "gtiny")
    add("tiny-3", "Goodbye", None)
    with open(HERE / "docs.jsonl", "w", encoding="utf-8") as handle:
        for doc in docs:
            handle.write(json.dumps(doc, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
