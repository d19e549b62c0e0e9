"""The ledger: where every document went, per stage, reason, domain and language. Each part's merge
computes a part record; the driver sums them into `ledger.json` and checks conservation (read =
kept + dropped, documents and bytes). A document counts at the FIRST failing clause in stage order
(dropped: its first hard-reject clause; kept: its first soft reason, else `pass`)."""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from data_pipeline import throughput
from data_pipeline.parts import PARTS
from data_pipeline.stages.pii import KINDS as PII_KINDS
from pretrain.schema import reason_column

PASS = "pass"
UNKNOWN = "unknown"


def matches(clauses: Sequence[str], stage: str, reason: str) -> bool:
    """True when `stage:reason` matches a select clause (`stage:*` matches any reason)."""
    return f"{stage}:{reason}" in clauses or f"{stage}:*" in clauses


def _column(table: pa.Table, name: str) -> list[Any]:
    return table.column(name).to_pylist() if name in table.column_names else [None] * table.num_rows


def attribute(
    table: pa.Table,
    stages: Sequence[str],
    drop: Sequence[str],
) -> tuple[pa.Array, list[tuple[str, str, bool]]]:
    """Per row: (keep mask, [(stage, reason, dropped)]) from the `<stage>_reason` columns."""
    reasons = {s: _column(table, reason_column(s)) for s in stages}
    keep, verdicts = [], []
    for i in range(table.num_rows):
        first_soft, first_hard = None, None
        for stage in stages:
            reason = reasons[stage][i]
            if reason is None:
                continue
            if matches(drop, stage, reason):
                first_hard = (stage, reason, True)
                break
            first_soft = first_soft or (stage, reason, False)
        verdict = first_hard or first_soft or (PASS, PASS, False)
        keep.append(not verdict[2])
        verdicts.append(verdict)
    return pa.array(keep, pa.bool_()), verdicts


def pii_totals(table: pa.Table, keep: pa.Array) -> dict[str, int]:
    """Redactions per PII kind in the kept rows' `pii_counts` (kinds never checked left out)."""
    if "pii_counts" not in table.column_names:
        return {}
    totals: dict[str, int] = {}
    for counts, kept in zip(table.column("pii_counts").to_pylist(), keep.to_pylist(), strict=True):
        if not kept or not counts:
            continue
        for kind, count in counts.items():
            if count is not None:
                totals[kind] = totals.get(kind, 0) + count
    return totals


def part_counts(
    table: pa.Table,
    stages: Sequence[str],
    drop: Sequence[str],
) -> tuple[pa.Array, dict[str, Any], list[tuple[str, str, bool]]]:
    """The keep mask of one shard's rows, its part record and each row's verdict (`attribute`)."""
    keep, verdicts = attribute(table, stages, drop)
    domains = _column(table, "domain")
    langs = _column(table, "lang")
    raw_bytes = _column(table, "_raw_bytes")
    text_bytes = _column(table, "num_bytes")
    rows: dict[tuple[str, str, str, str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    for i, (stage, reason, dropped) in enumerate(verdicts):
        key = (
            stage,
            reason,
            domains[i] or UNKNOWN,
            langs[i] or UNKNOWN,
            "dropped" if dropped else "kept",
        )
        counts = rows[key]
        counts[0] += 1
        counts[1] += raw_bytes[i] or 0
        counts[2] += 0 if dropped else (text_bytes[i] or 0)
    flags: dict[str, dict[str, list[int]]] = {}  # soft tags of kept rows, per stage
    for stage in stages:
        col = reason_column(stage)
        if col not in table.column_names or table.column(col).null_count == table.num_rows:
            continue
        flags[stage] = defaultdict(lambda: [0, 0])
        for reason, size, kept in zip(
            table.column(col).to_pylist(), raw_bytes, keep.to_pylist(), strict=True
        ):
            if reason is not None and kept:
                flags[stage][reason][0] += 1
                flags[stage][reason][1] += size or 0
    return (
        keep,
        {
            "documents": table.num_rows,
            "bytes": int(pc.sum(table.column("_raw_bytes")).as_py() or 0) if table.num_rows else 0,
            "rows": _row_dicts(rows),
            "flags": {
                s: {r: {"documents": v[0], "bytes": v[1]} for r, v in sorted(f.items())}
                for s, f in flags.items()
            },
            "pii": pii_totals(table, keep),
        },
        verdicts,
    )


def _totals(rows: Iterable[dict[str, Any]]) -> dict[str, int]:
    docs = bytes_ = text = 0
    for row in rows:
        docs, bytes_, text = (
            docs + row["documents"],
            bytes_ + row["bytes"],
            text + row["text_bytes"],
        )
    return {"documents": docs, "bytes": bytes_, "text_bytes": text}


class Fold:
    """The sums of every part record folded in so far, never the records themselves: the driver's
    memory is set by the number of distinct reasons, not of parts (millions at 40 TB)."""

    def __init__(self) -> None:
        self.parts = 0
        self.rows: dict[tuple[str, ...], list[int]] = defaultdict(lambda: [0, 0, 0])
        self.flags: dict[str, dict[str, list[int]]] = {}
        self.pii: dict[str, int] = {}

    def add(self, record: dict[str, Any]) -> None:
        self.parts += 1
        for row in record["rows"]:
            key = (row["stage"], row["reason"], row["domain"], row["lang"], row["outcome"])
            counts = self.rows[key]
            counts[0] += row["documents"]
            counts[1] += row["bytes"]
            counts[2] += row["text_bytes"]
        for stage, reasons in record["flags"].items():
            merged = self.flags.setdefault(stage, {})
            for reason, count in reasons.items():
                entry = merged.setdefault(reason, [0, 0])
                entry[0] += count["documents"]
                entry[1] += count["bytes"]
        for kind, count in record.get("pii", {}).items():
            self.pii[kind] = self.pii.get(kind, 0) + count


def _row_dicts(counts: dict[tuple[str, ...], Sequence[int]]) -> list[dict[str, Any]]:
    """(stage, reason, domain, lang, outcome) -> [documents, bytes, text_bytes] as ledger rows."""
    keys = ("stage", "reason", "domain", "lang", "outcome")
    values = ("documents", "bytes", "text_bytes")
    return [
        {**dict(zip(keys, k, strict=True)), **dict(zip(values, v, strict=True))}
        for k, v in sorted(counts.items())
    ]


def _funnel(
    rows: list[dict[str, Any]],
    flags: dict[str, dict[str, list[int]]],
    stages: Sequence[str],
    total_docs: int,
    total_bytes: int,
) -> list[dict[str, Any]]:
    funnel, docs_in, bytes_in = [], total_docs, total_bytes
    for stage in stages:
        dropped = [r for r in rows if r["stage"] == stage and r["outcome"] == "dropped"]
        lost = _totals(dropped)
        reasons: dict[str, dict[str, Any]] = {}
        for row in dropped:
            entry = reasons.setdefault(
                row["reason"], {"documents": 0, "bytes": 0, "action": "dropped"}
            )
            entry["documents"] += row["documents"]
            entry["bytes"] += row["bytes"]
        for reason, (documents, size) in flags.get(stage, {}).items():
            entry = reasons.setdefault(reason, {"documents": 0, "bytes": 0, "action": "tagged"})
            if entry["action"] == "tagged":
                entry["documents"] += documents
                entry["bytes"] += size
        funnel.append(
            {
                "stage": stage,
                "documents_in": docs_in,
                "bytes_in": bytes_in,
                "documents_dropped": lost["documents"],
                "bytes_dropped": lost["bytes"],
                "documents_kept": docs_in - lost["documents"],
                "bytes_kept": bytes_in - lost["bytes"],
                "reasons": reasons,
            }
        )
        docs_in, bytes_in = docs_in - lost["documents"], bytes_in - lost["bytes"]
    return funnel


def _mix(rows: list[dict[str, Any]], key: str) -> dict[str, dict[str, int]]:
    mix: dict[str, dict[str, int]] = {}
    for row in rows:
        if row["outcome"] == "kept":
            entry = mix.setdefault(row[key], {"documents": 0, "text_bytes": 0})
            entry["documents"] += row["documents"]
            entry["text_bytes"] += row["text_bytes"]
    return dict(sorted(mix.items()))


def aggregate(
    records: Iterable[dict[str, Any]],
    stages: Sequence[str],
    documents_read: int,
    bytes_read: int,
    fold: Fold | None = None,
) -> dict[str, Any]:
    """Sum the part records (into `fold` when given: those the merge handed over) into the ledger
    and check conservation against what was read; the order of the records does not matter."""
    fold = fold if fold is not None else Fold()
    for record in records:
        fold.add(record)
    rows = _row_dicts(fold.rows)
    kept = _totals(r for r in rows if r["outcome"] == "kept")
    dropped = _totals(r for r in rows if r["outcome"] == "dropped")
    balanced = (
        documents_read == kept["documents"] + dropped["documents"]
        and bytes_read == kept["bytes"] + dropped["bytes"]
    )
    return {
        "parts": fold.parts,
        "documents_in": documents_read,
        "bytes_in": bytes_read,
        "documents_kept": kept["documents"],
        "bytes_kept": kept["bytes"],
        "text_bytes_kept": kept["text_bytes"],
        "documents_dropped": dropped["documents"],
        "bytes_dropped": dropped["bytes"],
        "conservation": {
            "balanced": balanced,
            "documents": f"{documents_read} in = "
            f"{kept['documents']} kept + {dropped['documents']} dropped",
            "bytes": f"{bytes_read} in = {kept['bytes']} kept + {dropped['bytes']} dropped",
        },
        "stages": _funnel(rows, fold.flags, stages, documents_read, bytes_read),
        "pii_redacted": {k: fold.pii[k] for k in PII_KINDS if k in fold.pii},
        "languages": _mix(rows, "lang"),
        "domains": _mix(rows, "domain"),
        "rows": rows,
    }


# --- what the driver folds as the merge hands each part over ------------------------------------
# A merge task returns the bytes of the part's record and its stages' costs with its row
# (workers.merge_parts); the resume scan hands over each part it verified the same way. The
# driver folds them (`Merged`): the ledger's sums, the digest of every file a part record lists
# (the manifest then reads none back) and each stage's cost totals. Only parts this run was not
# told of are read at the end: at 2M parts in an object store, millions of GETs not sent.


def digest(data: bytes) -> dict[str, Any]:
    return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


class Merged:
    """The fold of every part the merge of this run returned (see the comment above)."""

    def __init__(self) -> None:
        self.fold = Fold()
        self.known: dict[str, dict[str, Any]] = {}
        """Digests for the manifest: the part records and the files they list."""
        self.shards: set[str] = set()
        """Parts whose part record was folded here (not read back)."""
        self.costs: dict[str, dict[str, Any]] = {}
        """Stage -> cost totals over the parts this run merged (data_pipeline.throughput)."""
        self.measured = 0

    def add(self, block: Any) -> None:
        """Fold one output block of the merge (columns shard, record, cost)."""
        if not block.num_rows or "record" not in block.column_names:
            return
        for shard, record, cost in zip(
            block.column("shard").to_pylist(),
            block.column("record").to_pylist(),
            block.column("cost").to_pylist(),
            strict=True,
        ):
            self.add_record(shard, record.encode())
            if cost:  # none: merged by an earlier try of the task
                for stage, entry in json.loads(cost).items():
                    throughput.add_cost(self.costs.setdefault(stage, {}), entry)
                self.measured += 1

    def forget_records(self) -> None:
        """Drop the part records folded so far (the ledger then reads every one back)."""
        self.fold, self.shards = Fold(), set()

    def add_record(self, shard: str, data: bytes) -> None:
        if shard in self.shards:
            return  # each part once, whatever handed it over twice
        content = json.loads(data)
        self.known[f"{PARTS}/{shard}.json"] = digest(data)
        for name, record in content.get("files", {}).items():
            self.known[name] = {"bytes": record.get("bytes"), "sha256": record.get("sha256")}
        self.fold.add(content)
        self.shards.add(shard)
