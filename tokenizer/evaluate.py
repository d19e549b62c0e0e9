"""`pretrain tokenizer eval`: compression and vocabulary use per domain and language, on the eval
split (or, when it is tiny, a stated fallback: `select_eval_docs`), against a SentencePiece BPE
trained on the same sample and vocabulary size (tokenizer.baseline)."""

from __future__ import annotations

import textwrap
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pretrain.artifacts import tokenizer_eval as eval_kind
from pretrain.artifacts.base import write_artifact
from pretrain.errors import InputError
from pretrain.locking import output_lock
from pretrain.output_check import require_own_output
from pretrain.progress import Progress
from pretrain.publish import publishing
from pretrain.storage import write_json
from tokenizer.lock import LockedTokenizer, load_locked
from tokenizer.shards import read_columns, require_shards, shards_identity, tag, unit_hash
from tokenizer.training_sample import SamplePlan, group_key, stream_sample

MIN_EVAL_DOCS = 20
MIN_EVAL_BYTES = 20_000
MAX_EVAL_BYTES = 50_000_000
RARE_COUNT = 5
MAX_BARS = 30
UNSPACED_LANGS = {"zh", "ja", "ko", "th", "lo", "km", "my", "bo", "yue", "wuu"}
"""Languages written without spaces between words: no tokens-per-word figure."""


@dataclass
class Doc:
    text: str
    domain: str
    lang: str


@dataclass
class Stats:
    documents: int = 0
    bytes: int = 0
    chars: int = 0
    tokens: int = 0
    words: int = 0
    word_tokens: int = 0
    exact: int = 0

    def add(self, doc: Doc, num_tokens: int, exact: bool) -> None:
        self.documents += 1
        self.bytes += len(doc.text.encode("utf-8"))
        self.chars += len(doc.text)
        self.tokens += num_tokens
        self.exact += exact
        if doc.lang.split("_")[0] not in UNSPACED_LANGS:
            self.words += len(doc.text.split())
            self.word_tokens += num_tokens

    def figures(self) -> dict[str, Any]:
        tokens = max(self.tokens, 1)
        return {
            "documents": self.documents,
            "bytes": self.bytes,
            "tokens": self.tokens,
            "bytes_per_token": round(self.bytes / tokens, 4),
            "chars_per_token": round(self.chars / tokens, 4),
            "tokens_per_word": round(self.word_tokens / self.words, 4) if self.words else None,
            "roundtrip_exact": round(self.exact / max(self.documents, 1), 6),
        }


@dataclass
class Measure:
    groups: dict[str, Stats] = field(default_factory=dict)
    usage: Counter = field(default_factory=Counter)

    def add(self, doc: Doc, ids: list[int], exact: bool) -> None:
        for key in ("all", f"domain={doc.domain}", f"lang={doc.lang}", f"{doc.domain}/{doc.lang}"):
            self.groups.setdefault(key, Stats()).add(doc, len(ids), exact)
        self.usage.update(ids)

    def report(self, vocab_size: int, special_ids: set[int]) -> dict[str, Any]:
        counts = np.zeros(vocab_size, dtype=np.int64)
        for token_id, count in self.usage.items():
            if 0 <= token_id < vocab_size:
                counts[token_id] = count
        regular = np.array([i for i in range(vocab_size) if i not in special_ids])
        used = counts[regular]
        return {
            "groups": {k: v.figures() for k, v in sorted(self.groups.items())},
            "vocab": {
                "size": vocab_size,
                "unused_fraction": round(float((used == 0).mean()), 6),
                "rare_fraction": round(float(((used > 0) & (used < RARE_COUNT)).mean()), 6),
                "rare_threshold": RARE_COUNT,
            },
        }


def _scan(shards: list[Path], keep: Any) -> list[Doc]:
    docs, total = [], 0
    for path in shards:
        for table in read_columns(path, ("id", "split", "domain", "lang", "text")):
            rows = zip(*(table.column(c).to_pylist() for c in table.column_names), strict=True)
            for doc_id, split, domain, lang, text in rows:
                if text and total < MAX_EVAL_BYTES and keep(doc_id, split, domain, lang):
                    docs.append(Doc(text, tag(domain), tag(lang)))
                    total += len(text.encode("utf-8"))
    return docs


def select_eval_docs(shards: list[Path], lock: dict[str, Any]) -> tuple[list[Doc], str]:
    """The eval documents and a sentence saying where they come from: the eval split; if it is
    tiny, plus train documents the tokenizer's sample did not draw; if it drew all, plus a 10%
    hash sample of the train split, flagged as seen in training."""
    docs = _scan(shards, lambda i, split, d, lang: split == "eval")
    size = sum(len(d.text.encode("utf-8")) for d in docs)
    if len(docs) >= MIN_EVAL_DOCS and size >= MIN_EVAL_BYTES:
        return docs, f"split == eval ({len(docs)} documents)"
    tiny = f"the eval split is tiny ({len(docs)} documents, {size} bytes)"
    groups = lock["sample"]["groups"]
    seed = lock["config"]["sample"]["seed"]

    def held_out(doc_id: str, split: str, domain: Any, lang: Any) -> bool:
        probability = groups.get(group_key(domain, lang), {}).get("inclusion_probability", 0.0)
        return split != "eval" and unit_hash(doc_id, seed) >= probability

    fallback = _scan(shards, held_out)
    if len(fallback) >= MIN_EVAL_DOCS:
        return docs + fallback, (
            f"{tiny}; added {len(fallback)} train-split documents the "
            "tokenizer's sample did not draw (held out)"
        )
    seen = _scan(shards, lambda i, split, d, lang: split != "eval" and unit_hash(i, 7919) < 0.1)
    share = "a 10% hash sample of"
    if not docs and not seen:  # a handful of documents, none in the 10%: take them all
        seen, share = _scan(shards, lambda i, split, d, lang: split != "eval"), "all of"
    if not docs and not seen:
        raise InputError(f"{shards[0].parent.parent} holds no document with text to evaluate on")
    return docs + seen, (
        f"{tiny} and the sample drew every train document; added {share} the train split "
        f"({len(seen)} documents) that the tokenizer SAW IN TRAINING: compression figures "
        "are optimistic"
    )


def _measure(docs: list[Doc], encode: Any, decode: Any, desc: str) -> Measure:
    """Every document's ids (`encode`: texts -> id lists) and whether `decode` gives it back."""
    measure = Measure()
    for start in Progress(range(0, len(docs), 512), desc=desc, unit="batch", leave=False):
        batch = docs[start : start + 512]
        ids = encode([d.text for d in batch])
        for doc, token_ids, text in zip(batch, ids, decode(ids), strict=True):
            measure.add(doc, token_ids, text == doc.text)
    return measure


def measure_ours(tokenizer: LockedTokenizer, docs: list[Doc]) -> Measure:
    hf = tokenizer.tokenizer  # load_locked set encode_special_tokens: special text is text

    def encode(texts: list[str]) -> list[list[int]]:
        return [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]

    return _measure(
        docs, encode, lambda ids: hf.decode_batch(ids, skip_special_tokens=False), "eval ours"
    )


def measure_sentencepiece(processor: Any, docs: list[Doc]) -> Measure:
    decode = lambda ids: [processor.decode(x) for x in ids]  # noqa: E731
    return _measure(docs, processor.encode, decode, "eval sentencepiece")


def train_baseline(tokenizer: LockedTokenizer, shards: list[Path]) -> Any:
    """SentencePiece BPE on the tokenizer's own sample (regenerated from lock.json)."""
    from tokenizer.baseline import train_sentencepiece

    lock = tokenizer.lock
    groups = lock["sample"]["groups"]
    plan = SamplePlan(
        {k: g["available_bytes"] for k, g in groups.items()},
        {k: g["inclusion_probability"] for k, g in groups.items()},
        lock["config"]["sample"]["seed"],
        lock["config"]["sample"]["max_doc_chars"],
    )
    return train_sentencepiece(stream_sample(shards, plan), tokenizer.vocab_size)


# the tokenizer's own writer lock too: a `tokenizer train` replacing it (which moves its eval/
# out) must not run while an eval reads it and writes into it, nor an eval while it runs
def evaluate(
    tokenizer_dir: str | Path,
    data: str | Path,
    out: str | Path | None = None,
    baseline: bool = True,
) -> dict[str, Any]:
    """Evaluate, write report.json + compression.png + manifest into `out`; return the report."""
    with output_lock(tokenizer_dir), output_lock(out or Path(tokenizer_dir) / "eval"):
        out = Path(out) if out is not None else Path(tokenizer_dir) / "eval"
        require_own_output(
            out, "--out", eval_kind.KIND
        )  # not a folder of someone else's report.json
        tokenizer = load_locked(tokenizer_dir)
        _, shards = require_shards(data)
        docs, source = select_eval_docs(shards, tokenizer.lock)
        specials = set(tokenizer.lock["special_tokens"].values())
        report: dict[str, Any] = {
            "tokenizer": tokenizer.info,
            "eval_source": source,
            "out": str(out),
            "same_shards_as_training": shards_identity(data)
            == tokenizer.lock["inputs"].get("shards_content_sha256"),
            "ours": measure_ours(tokenizer, docs).report(tokenizer.vocab_size, specials),
        }
        if baseline:
            processor = train_baseline(tokenizer, shards)
            special_sp = {
                i
                for i in range(processor.get_piece_size())
                if processor.is_control(i) or processor.is_unknown(i)
            }
            report["sentencepiece"] = measure_sentencepiece(processor, docs).report(
                processor.get_piece_size(), special_sp
            )
        summary = _summary(report)
        # built out of sight, published in one rename (pretrain.publish): an earlier eval stays
        # whole until the new one replaces it
        with publishing(out) as files:
            write_json(files / "report.json", report)
            plot_compression(report, files / "compression.png")
            write_artifact(
                files,
                eval_kind.TokenizerEvalFields(tokenizer=tokenizer.info, summary=summary),
                config={"baseline": baseline},
                inputs=[data, tokenizer_dir],
                counts={"documents": len(docs)},
            )
        return report


def _summary(report: dict[str, Any]) -> dict[str, Any]:
    ours = report["ours"]["groups"]["all"]
    base = report.get("sentencepiece", {}).get("groups", {}).get("all")
    return {
        "bytes_per_token": ours["bytes_per_token"],
        "baseline_bytes_per_token": base["bytes_per_token"] if base else None,
        "roundtrip_exact": ours["roundtrip_exact"],
        "eval_source": report["eval_source"],
    }


def format_table(report: dict[str, Any]) -> str:
    """The per-group table printed by the CLI (ours vs SentencePiece)."""
    ours, base = report["ours"], report.get("sentencepiece")
    head = (
        f"{'group':<22}{'docs':>6}{'MB':>8}{'B/tok':>8}{'SP':>7}{'ratio':>7}"
        f"{'ch/tok':>8}{'SP':>7}{'tok/w':>7}{'SP':>7}{'exact':>7}{'SP':>7}"
    )
    lines = [f"tokenizer {report['tokenizer']['id']}; eval data: {report['eval_source']}", head]
    groups = ours["groups"]
    keys = plot_groups(report) + sorted(k for k in groups if "/" in k)
    for key in keys:
        mine = groups[key]
        other = base["groups"].get(key, {}) if base else {}
        ratio = (mine["bytes_per_token"] / other["bytes_per_token"]) if other else None
        lines.append(
            f"{key[:21]:<22}{mine['documents']:>6}{mine['bytes'] / 1e6:>8.2f}"
            f"{mine['bytes_per_token']:>8.3f}{_f(other.get('bytes_per_token')):>7}{_f(ratio):>7}"
            f"{mine['chars_per_token']:>8.3f}{_f(other.get('chars_per_token')):>7}"
            f"{_f(mine['tokens_per_word']):>7}{_f(other.get('tokens_per_word')):>7}"
            f"{mine['roundtrip_exact']:>7.3f}{_f(other.get('roundtrip_exact')):>7}"
        )
    for name, part in (("ours", ours), ("sentencepiece", base)):
        if part:
            vocab = part["vocab"]
            lines.append(
                f"vocab {name}: {vocab['size']} ids, unused on eval "
                f"{vocab['unused_fraction']:.1%}, rare (<{RARE_COUNT} uses) "
                f"{vocab['rare_fraction']:.1%}"
            )
    return "\n".join(lines)


def _f(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def plot_groups(report: dict[str, Any]) -> list[str]:
    """`all`, then each domain, then each language (the domain x language cells stay in JSON)."""
    groups = report["ours"]["groups"]
    ordered = [
        "all",
        *sorted(k for k in groups if k.startswith("domain=")),
        *sorted((k for k in groups if k.startswith("lang=")), key=lambda k: -groups[k]["bytes"]),
    ]
    return [k for k in ordered if k in groups][:MAX_BARS]


def plot_compression(report: dict[str, Any], path: Path) -> None:
    """Horizontal grouped bars of bytes/token (PNG, Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = plot_groups(report)
    ours = report["ours"]["groups"]
    base = report.get("sentencepiece", {}).get("groups", {})
    height = 0.4
    fig, ax = plt.subplots(figsize=(8, 1.6 + 0.42 * len(groups)))
    positions = list(range(len(groups)))
    ax.barh(
        [p - height / 2 for p in positions],
        [ours[g]["bytes_per_token"] for g in groups],
        height,
        label=report["tokenizer"]["id"],
        color="tab:blue",
    )
    if base:
        ax.barh(
            [p + height / 2 for p in positions],
            [base.get(g, {}).get("bytes_per_token", 0) for g in groups],
            height,
            label="SentencePiece BPE (same sample and vocab size)",
            color="tab:orange",
        )
    ax.set_yticks(positions, [f"{g} ({ours[g]['documents']} docs)" for g in groups])
    ax.invert_yaxis()
    ax.set_xlabel("bytes per token (higher = better compression)")
    source = textwrap.shorten(report["eval_source"], 110, placeholder=" ...")
    ax.set_title("Compression on " + "\n".join(textwrap.wrap(source, 80)), fontsize=8)
    ax.legend(
        loc="upper center",
        bbox_to_anchor=(0.5, -0.35 / max(len(groups), 1) - 0.08),
        ncol=2,
        fontsize=8,
        frameon=False,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
