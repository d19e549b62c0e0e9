"""`pretrain tokenizer encode`: tagged shards -> Megatron .bin/.idx + per-document tag sidecars.

Per prefix `<stem>` (tokenizer.prefixes: `train-<n>` or `eval-<n>`, so no training prefix holds an
eval document): `<stem>.bin/.idx` (tokenizer.indexed; EOD appended to every document, empty ones
included) and `<stem>.docs.parquet`, row i describing document i (`sidecar_schema`: id, token
count, source, split and every stage's `tags`, null where the pipeline did not produce one).
Each finished prefix leaves a hidden `.<stem>.done` record (sources, tokenizer, the outputs'
sha256); a re-run skips a prefix while its record and files hold (the sidecar's columns included:
a stage's tag added or retyped since), and encodes any other again.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from data_pipeline.stages.registry import tag_fields
from pretrain.artifacts import encoded as encoded_kind
from pretrain.artifacts.base import write_artifact
from pretrain.locking import output_lock
from pretrain.manifest import sha256_file
from pretrain.output_check import require_own_output, temporary_file
from pretrain.progress import Progress
from pretrain.schema import BASE_FIELDS
from pretrain.storage import write_json
from tokenizer.indexed import IndexedWriter
from tokenizer.lock import LockedTokenizer, load_locked
from tokenizer.prefixes import MIN_PREFIX_DOCUMENTS, Prefix, plan_prefixes
from tokenizer.shards import read_columns, require_shards

BASE_COLUMNS = ("id", "source", "split")
"""The shards' base columns every sidecar row carries besides the stages' tags."""


def sidecar_schema() -> pa.Schema:
    """doc_index, id, num_tokens, source, split, then every stage's tags in pipeline order."""
    base = {f.name: f for f in BASE_FIELDS}
    return pa.schema(
        [
            pa.field("doc_index", pa.int64()),
            base["id"].with_nullable(True),
            pa.field("num_tokens", pa.int32()),
            *(base[name].with_nullable(True) for name in BASE_COLUMNS[1:]),
            *(tag.with_nullable(True) for tag in tag_fields()),
        ]
    )


def tag_names() -> tuple[str, ...]:
    """The shard columns a sidecar copies: id, source, split and the stages' tags."""
    return tuple(name for name in sidecar_schema().names if name not in ("doc_index", "num_tokens"))


OUTPUT_SUFFIXES = (".bin", ".idx", ".docs.parquet", ".done")
HASHED = {".idx": "idx_sha256", ".docs.parquet": "sidecar_sha256", ".bin": "bin_sha256"}
"""The `.done` record's sha256 of each output (through pretrain.hashcache)."""


def sidecar_path(out: Path, stem: str) -> Path:
    return out / f"{stem}.docs.parquet"


def _done_path(out: Path, stem: str) -> Path:
    return out / f".{stem}.done"


def _finished(
    out: Path, stem: str, split: str, sources: dict[str, str], tokenizer_sha: str
) -> dict[str, Any] | None:
    """The prefix's `.done` record while it holds: same sources, split and tokenizer, every
    output's sha256, and the sidecar's columns what the stages declare now."""
    record = _read_record(_done_path(out, stem))
    made_from = ("sources", "split", "tokenizer_sha256")
    if record is None or tuple(map(record.get, made_from)) != (sources, split, tokenizer_sha):
        return None
    for suffix, key in HASHED.items():
        path = out / f"{stem}{suffix}"
        if not path.is_file() or sha256_file(path) != record.get(key):
            return None
    schema = pq.read_schema(sidecar_path(out, stem))
    return record if _columns(schema) == _columns(sidecar_schema()) else None


def _read_record(path: Path) -> dict[str, Any] | None:
    """A `.done` record, or None (none, or damaged: the prefix is encoded again)."""
    try:
        record = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _columns(schema: pa.Schema) -> list[tuple[str, pa.DataType]]:
    return [(field.name, field.type) for field in schema]


def _job_tables(job: Prefix, columns: Sequence[str], batch_size: int) -> Iterator[pa.Table]:
    """The job's shards read in batches, only the rows of its split family."""
    for shard, _ in job.shards:
        wanted = tuple(dict.fromkeys((*columns, "split")))
        for table in read_columns(shard, wanted, batch_size=batch_size):
            held_out = pc.fill_null(pc.equal(table.column("split"), "eval"), False)
            rows = table.filter(held_out if job.split == "eval" else pc.invert(held_out))
            if rows.num_rows:
                yield rows.select(list(dict.fromkeys(columns)))


def _encoded_batches(
    tokenizer: LockedTokenizer, job: Prefix, batch_size: int
) -> Iterator[tuple[pa.Table, list[Any]]]:
    """(tags + text table, encodings) per batch; the next batch is encoded in a helper thread
    (the Rust encoder releases the GIL) while the caller writes this one."""
    hf = tokenizer.tokenizer
    hf.encode_special_tokens = True  # "<|endoftext|>" inside a document is text, not an EOD
    encode = getattr(hf, "encode_batch_fast", hf.encode_batch)
    with ThreadPoolExecutor(max_workers=1) as pool:
        pending: tuple[pa.Table, Future] | None = None
        for table in _job_tables(job, ("text", *tag_names()), batch_size):
            texts = [t or "" for t in table.column("text").to_pylist()]
            submitted = (table, pool.submit(encode, texts, add_special_tokens=False))
            if pending is not None:
                yield pending[0], pending[1].result()
            pending = submitted
        if pending is not None:
            yield pending[0], pending[1].result()


def encode_prefix(
    tokenizer: LockedTokenizer, job: Prefix, out: Path, batch_size: int = 1024
) -> tuple[dict[str, Any], bool]:
    """Encode one prefix into `out/<stem>.{bin,idx,docs.parquet}` unless already done; its
    `.done` record and whether it was."""
    stem, sources = job.name, {path.stem: sha for path, sha in job.shards}
    record = _finished(out, stem, job.split, sources, tokenizer.sha256)
    if record is not None:
        return record, True
    dtype = np.uint16 if tokenizer.token_dtype == "uint16" else np.int32
    tmp_prefix = out / f".{stem}.partial"
    writer = IndexedWriter(tmp_prefix, dtype)
    sidecars: list[pa.Table] = []
    documents = tokens = 0
    for table, encodings in _encoded_batches(tokenizer, job, batch_size):
        lengths = writer.add_documents([e.ids + [tokenizer.eod_id] for e in encodings])
        sidecars.append(_sidecar_batch(table, documents, lengths))
        documents += len(lengths)
        tokens += sum(lengths)
    writer.finalize()
    partial = {suffix: Path(f"{tmp_prefix}{suffix}") for suffix in OUTPUT_SUFFIXES[:3]}
    _write_sidecar(sidecars, partial[".docs.parquet"])
    record = {
        "sources": sources,
        "split": job.split,
        "tokenizer_sha256": tokenizer.sha256,
        "documents": documents,
        "tokens": tokens,
        "bin_bytes": partial[".bin"].stat().st_size,
        **{key: sha256_file(partial[suffix]) for suffix, key in HASHED.items()},
    }
    # the record first, then the files: a kill between leaves files the re-run checks against
    # it (moved first, a kill before the record left a .bin/.idx refused as a stranger's)
    write_json(_done_path(out, stem), record)
    for suffix, path in partial.items():
        os.replace(path, out / f"{stem}{suffix}")
    return record, False


def _write_sidecar(batches: list[pa.Table], path: Path) -> None:
    sidecar = pa.concat_tables(batches) if batches else sidecar_schema().empty_table()
    pq.write_table(sidecar, path, compression="zstd")


def _sidecar_batch(table: pa.Table, start: int, lengths: list[int]) -> pa.Table:
    columns: dict[str, Any] = {
        "doc_index": pa.array(np.arange(start, start + len(lengths), dtype=np.int64)),
        "num_tokens": pa.array(lengths, type=pa.int32()),
    }
    schema = sidecar_schema()
    for field in schema:
        if field.name not in columns:
            columns[field.name] = table.column(field.name).cast(field.type)
    return pa.table({name: columns[name] for name in schema.names}, schema=schema)


def preflight(
    tokenizer_dir: str | Path, data: str | Path, out: str | Path
) -> tuple[LockedTokenizer, dict[str, Any], list[Path]]:
    """What `encode` (and `--dry-run`) checks first: tokenizer, shards, and `out` is ours."""
    tokenizer = load_locked(tokenizer_dir)
    shards_manifest, shards = require_shards(data)
    require_own_output(Path(out), "--out", encoded_kind.KIND, _scratch, _resumable)
    return tokenizer, shards_manifest, shards


def _resumable(out: Path) -> bool:
    """An encode killed before its manifest: `.done` records that `encode_prefix` wrote."""
    records = (_read_record(path) or {} for path in out.glob(".*.done"))
    return any({"sources", "tokenizer_sha256"} <= record.keys() for record in records)


def _scratch(name: str) -> bool:
    """What a kill inside a prefix leaves: `.<stem>.partial.*`, temporary files."""
    return temporary_file(name) or (name.startswith(".") and ".partial." in name)


def _prepare_out(out: Path, stems: set[str]) -> None:
    """Drop the old manifest, outputs of prefixes no longer planned and temporary files."""
    if (out / "manifest.json").is_file():
        (out / "manifest.json").unlink()
    out.mkdir(parents=True, exist_ok=True)
    for path in out.iterdir():
        if temporary_file(path.name) and path.is_file():
            path.unlink()
            continue
        suffix = next((s for s in OUTPUT_SUFFIXES if path.name.endswith(s)), None)
        if suffix is None or not path.is_file():
            continue
        stem = path.name.removeprefix(".").removesuffix(suffix)  # a stem may hold dots
        if stem not in stems:
            path.unlink()


def _run_ray(
    jobs: list[Prefix], tokenizer: LockedTokenizer, out: Path, num_cpus: float
) -> list[tuple[dict[str, Any], bool]]:
    import ray

    from pretrain import rayinit

    rayinit.connect(None)  # RAY_ADDRESS, else a loopback-only local Ray that dies with us

    @ray.remote(num_cpus=num_cpus)
    def encode_remote(tokenizer: LockedTokenizer, job: Prefix) -> tuple[dict[str, Any], bool]:
        return encode_prefix(tokenizer, job, out)

    shipped = ray.put(tokenizer)  # verified above: the workers need neither its folder nor a check
    results = [encode_remote.remote(shipped, job) for job in jobs]
    pending = list(results)
    with Progress(total=len(pending), desc="encode (ray)", unit="prefix") as bar:
        while pending:
            _, pending = ray.wait(pending, num_returns=1)
            bar.update(1)
    return list(ray.get(results))  # in job order


def plan_jobs(
    data: str | Path, manifest: dict[str, Any], shards: list[Path], min_prefix_documents: int
) -> list[Prefix]:
    """The prefixes to write, each with its shards and their sha256."""
    root = Path(data).resolve()
    sha = {s: manifest["files"][s.resolve().relative_to(root).as_posix()]["sha256"] for s in shards}
    return plan_prefixes(sha, min_prefix_documents)


def encode(
    tokenizer_dir: str | Path,
    data: str | Path,
    out: str | Path,
    *,
    backend: str = "ray",
    num_cpus: float = 1.0,
    min_prefix_documents: int = MIN_PREFIX_DOCUMENTS,
) -> dict[str, Any]:
    """Encode every shard of a verified `shards` artifact, the `encoded` manifest last. backend
    `ray`: one task per prefix (RAY_ADDRESS honoured); `inline`: prefixes one after another."""
    with output_lock(out):
        tokenizer, shards_manifest, shards = preflight(tokenizer_dir, data, out)
        out = Path(out)
        jobs = plan_jobs(data, shards_manifest, shards, min_prefix_documents)
        _prepare_out(out, {job.name for job in jobs})
        if backend == "ray" and len(jobs) > 1:
            results = _run_ray(jobs, tokenizer, out, num_cpus)
        else:  # here, one prefix after another, with the tokenizer verified above
            progress = Progress(jobs, desc="encode", unit="prefix")
            results = [encode_prefix(tokenizer, job, out) for job in progress]
        shard_counts = {
            job.name: {key: record[key] for key in ("documents", "tokens", "split", "sources")}
            for job, (record, _) in zip(jobs, results, strict=True)
        }
        config = {
            "tokenizer": tokenizer.info,
            "data": str(Path(data).resolve()),
            "token_dtype": tokenizer.token_dtype,
            "min_prefix_documents": min_prefix_documents,
        }
        counts = {
            "documents": sum(r["documents"] for r in shard_counts.values()),
            "tokens": sum(r["tokens"] for r in shard_counts.values()),
            "eval_documents": sum(
                r["documents"] for r in shard_counts.values() if r["split"] == "eval"
            ),
            "shards_skipped": sum(skipped for _, skipped in results),
        }
        fields = encoded_kind.EncodedFields(
            tokenizer=tokenizer.info,
            prefixes=list(shard_counts),
            token_dtype=tokenizer.token_dtype,
            shards=shard_counts,
            eod_id=tokenizer.eod_id,
        )
        return write_artifact(
            out, fields, config=config, inputs=[data, tokenizer_dir], counts=counts
        )
