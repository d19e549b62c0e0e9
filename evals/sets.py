"""`pretrain eval build`: eval sets from the `split == eval` documents, one per domain and language,
and `contaminated.parquet`: the training documents a mixture must exclude, found with the data
job's MinHash dedup index (near copies of eval documents) and evals/task_overlap.py (task text).
"""

from __future__ import annotations

import re
import shutil
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pydantic import Field, model_validator

from evals.lm_eval_tasks import parse_spec, rendered_tasks
from evals.task_overlap import TaskIndex
from evals.tasks import Task, load_tasks
from pretrain.artifacts import evalset as evalset_artifact
from pretrain.artifacts import shards as shards_artifact
from pretrain.artifacts.base import write_artifact
from pretrain.artifacts.evalset import CONTAMINATED_FILE
from pretrain.config import StrictModel, config_dict
from pretrain.errors import InputError
from pretrain.locking import output_lock
from pretrain.output_check import require_own_output
from pretrain.publish import publishing
from pretrain.storage import write_json
from tokenizer.shards import read_columns

HIT_SCHEMA = pa.schema(
    [
        ("train_id", pa.string()),
        ("eval_id", pa.string()),
        ("jaccard", pa.float32()),
        ("domain", pa.string()),
        ("lang", pa.string()),
        ("task", pa.string()),
    ]
)
"""One contaminating match: a training document and the eval document (`jaccard`: MinHash
estimate) or the task example (`task`, `eval_id` the example's id, `jaccard` null) it holds."""
LM_EVAL_PREFIX = "lm_eval:"
"""The `task` of a hit on an lm-eval task's document (a task file's hits name the file's task)."""
SET_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("text", pa.string()),
        ("domain", pa.string()),
        ("lang", pa.string()),
        ("num_bytes", pa.int64()),
    ]
)


class DecontaminationConfig(StrictModel):
    """MinHash LSH over word n-grams (character n-grams for CJK text)."""

    enabled: bool = True
    num_perm: int = Field(128, ge=16, le=1024)
    ngram: int = Field(5, ge=1, le=32)
    threshold: float = Field(0.7, gt=0, le=1)
    """Estimated Jaccard similarity at or above which a training document counts as a copy."""
    seed: int = 1
    task_ngram: int = Field(13, ge=1, le=64)
    """Task examples: a training document sharing a normalised word n-gram this long with one is
    contaminated (GPT-3's 13; CJK characters are words)."""
    task_min_words: int = Field(8, ge=1)
    """A task text shorter than `task_ngram` words is matched whole when it has at least this many
    words; shorter ones are not judged (counted as `unchecked_examples`)."""


class EvalBuildConfig(StrictModel):
    """`pretrain eval build` config (example: configs/eval.yaml)."""

    shards: str
    """A `shards` artifact (`pretrain data run`): eval documents come from its split == eval rows."""
    train_shards: list[str] = Field(default_factory=list)
    """More shards artifacts to decontaminate against (the `shards` artifact is always checked)."""
    out: str = "runs/evalsets"
    max_docs_per_set: int = Field(500, ge=1)
    min_docs_per_set: int = Field(1, ge=1)
    """Domain/language groups with fewer eval documents are left out (and reported)."""
    max_bytes_per_doc: int = Field(20000, ge=64)
    """Longer documents are cut at a UTF-8 character boundary (bounds eval cost)."""
    keep_duplicates: bool = False
    """Keep eval documents the pipeline marked dup_keep == false (redundant copies)."""
    tasks: list[str] = Field(default_factory=list)
    """Task JSONL files (multiple-choice / cloze, docs/evals.md) copied into the artifact;
    training documents holding an example's text are listed as contaminated."""
    lm_eval: list[str] = Field(default_factory=list)
    """lm-eval tasks as `eval run --lm-eval` takes them (`NAME=FILE`): not copied, but their
    documents are checked against the training documents like the task files'."""
    decontamination: DecontaminationConfig = Field(default_factory=DecontaminationConfig)
    seed: int = 0
    batch_rows: int = Field(4096, ge=1)

    @model_validator(mode="after")
    def _min_within_max(self) -> EvalBuildConfig:
        # groups are sampled down to max_docs_per_set first: a larger minimum leaves out every one
        if self.min_docs_per_set > self.max_docs_per_set:
            raise ValueError(
                f"min_docs_per_set = {self.min_docs_per_set} is above max_docs_per_set = "
                f"{self.max_docs_per_set}: every set would be left out; lower it or raise the cap"
            )
        return self


def _batches(files: list[Path], columns: list[str], batch_rows: int) -> Iterator[pa.Table]:
    for path in files:
        yield from read_columns(path, columns, batch_rows)  # absent tags: their stage's type


def _truncate(text: str, max_bytes: int) -> str:
    data = text.encode("utf-8")
    return text if len(data) <= max_bytes else data[:max_bytes].decode("utf-8", errors="ignore")


def _collect_eval(files: list[Path], cfg: EvalBuildConfig) -> dict[tuple[str, str], list[dict]]:
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    columns = ["id", "text", "split", "domain", "lang", "dup_keep"]
    for table in _batches(files, columns, cfg.batch_rows):
        rows = table.to_pylist()
        for row in rows:
            if row["split"] != "eval" or not row.get("text"):
                continue
            if not cfg.keep_duplicates and row.get("dup_keep") is False:
                continue
            key = (row.get("domain") or "unknown", row.get("lang") or "unknown")
            groups[key].append(
                {"id": row["id"], "text": _truncate(row["text"], cfg.max_bytes_per_doc)}
            )
    rng = np.random.default_rng(cfg.seed)
    for key, docs in groups.items():
        docs.sort(key=lambda d: d["id"])
        if len(docs) > cfg.max_docs_per_set:
            keep = sorted(rng.choice(len(docs), cfg.max_docs_per_set, replace=False))
            groups[key] = [docs[i] for i in keep]
    return groups


def _dedup_config(cfg: DecontaminationConfig) -> Any:
    from data_pipeline.dedup.config import DedupConfig

    return DedupConfig(
        threshold=cfg.threshold,
        num_perm=cfg.num_perm,
        seed=cfg.seed,
        word_ngram=cfg.ngram,
        char_ngram=cfg.ngram,
    )


def _task_matches(index: TaskIndex, train: pa.Table) -> list[dict[str, Any]]:
    """One batch of training documents against the task examples' n-grams."""
    hits = []
    for row in train.select(["id", "text", "domain", "lang"]).to_pylist():
        for task, example in sorted(index.matches(row["text"])):
            hits.append(
                {
                    "train_id": row["id"],
                    "eval_id": example,
                    "jaccard": None,
                    "domain": row["domain"],
                    "lang": row["lang"],
                    "task": task,
                }
            )
    return hits


def _matches(index_dir: Path, train: pa.Table) -> list[dict[str, Any]]:
    """Query one batch of training documents against the eval index."""
    from data_pipeline.dedup.index import query

    matches = query(index_dir, train.select(["id", "text", "lang"]))
    tags = {r["id"]: r for r in train.select(["id", "domain", "lang"]).to_pylist()}
    return [
        {
            "train_id": m["id"],
            "eval_id": m["matched_id"],
            "jaccard": float(m["jaccard"]),
            "domain": tags[m["id"]]["domain"],
            "lang": tags[m["id"]]["lang"],
            "task": None,
        }
        for m in matches.to_pylist()
    ]


def decontaminate(
    eval_docs: list[dict],
    train_files: list[Path],
    cfg: DecontaminationConfig,
    batch_rows: int,
    index_dir: Path,
    tasks: TaskIndex | None = None,
) -> list[dict[str, Any]]:
    """Every training document (split != eval) whose MinHash signature matches an eval document
    at or above the threshold, found with the pipeline's dedup index (data_pipeline.dedup.index:
    the eval documents are indexed, the training data is queried batch by batch), and, in the
    same pass, every one holding a task example's text (`tasks`: evals/task_overlap.py)."""
    from data_pipeline.dedup.index import save_index
    from pretrain.progress import Progress

    eval_table = pa.table(
        {
            "id": [d["id"] for d in eval_docs],
            "text": [d["text"] for d in eval_docs],
            "lang": [d.get("lang") for d in eval_docs],
        }
    )
    save_index(index_dir, [eval_table], _dedup_config(cfg), partitions=4)
    hits: list[dict[str, Any]] = []
    progress = Progress(desc="decontaminate", unit="doc", leave=False)
    for table in _batches(train_files, ["id", "text", "split", "domain", "lang"], batch_rows):
        progress.update(table.num_rows)
        train = table.filter(
            pc.and_(pc.not_equal(table.column("split"), "eval"), pc.is_valid(table.column("text")))
        )
        if train.num_rows:
            hits.extend(_matches(index_dir, train))
            if tasks:
                hits.extend(_task_matches(tasks, train))
    progress.close()
    return hits


def set_name(domain: str, lang: str) -> str:
    """`<domain>__<lang>`, the set's file stem; a tag with a character outside [A-Za-z0-9_.-]
    (a classifier label `news/sports`, `..`) is percent-encoded, so the file stays in sets/."""
    return f"{_file_safe(domain)}__{_file_safe(lang)}"


def _file_safe(tag: str) -> str:
    safe = re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", tag) is not None
    return tag if safe else quote(tag, safe="")


def _write_sets(out: Path, groups: dict, cfg: EvalBuildConfig) -> tuple[list[dict], list[dict]]:
    (out / "sets").mkdir(parents=True)
    written: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    for (domain, lang), docs in sorted(groups.items()):
        if len(docs) < cfg.min_docs_per_set:
            skipped.append({"domain": domain, "lang": lang, "documents": len(docs)})
            continue
        rows = [
            {**doc, "domain": domain, "lang": lang, "num_bytes": len(doc["text"].encode("utf-8"))}
            for doc in docs
        ]
        table = pa.Table.from_pylist(rows, schema=SET_SCHEMA)
        name = set_name(domain, lang)
        if any(entry["name"] == name for entry in written):
            raise InputError(
                f"eval sets {domain}/{lang} and another domain/language pair both name the "
                f"file sets/{name}.parquet; rename one domain label (a '__' inside a label)"
            )
        pq.write_table(table, out / "sets" / f"{name}.parquet", compression="zstd")
        written.append(
            {
                "name": name,
                "domain": domain,
                "lang": lang,
                "documents": len(docs),
                "bytes": sum(row["num_bytes"] for row in rows),
            }
        )
    return written, skipped


def _task_report(
    out: Path, cfg: EvalBuildConfig, tasks: list[Task], hits: list[dict], index: TaskIndex
) -> tuple[list[dict], list[dict]]:
    """Per task file (copied into tasks/) and per lm-eval task: its examples found in training
    documents, those documents, and examples too short to judge."""

    def counts(name: str) -> dict[str, int]:
        mine = [h for h in hits if h["task"] == name]
        return {
            "contaminated_examples": len({h["eval_id"] for h in mine}),
            "contaminated_train_documents": len({h["train_id"] for h in mine}),
            "unchecked_examples": index.unchecked.get(name, 0),
        }

    for path in cfg.tasks:
        (out / "tasks").mkdir(exist_ok=True)
        shutil.copyfile(path, out / "tasks" / Path(path).name)
    files = [
        {"name": t.name, "kind": t.kind, "examples": len(t.examples), **counts(t.name)}
        for t in tasks
    ]
    lm_eval = [
        {"name": name.removeprefix(LM_EVAL_PREFIX), "documents": documents, **counts(name)}
        for name, documents in index.examples.items()
        if name.startswith(LM_EVAL_PREFIX)
    ]
    return files, lm_eval


def preflight(cfg: EvalBuildConfig) -> list[Path]:
    """What `build_eval_sets` checks before working (`--dry-run` runs it): `out` is new or an eval
    set, and the shards (and `train_shards`) verify. Returns the shard files."""
    out = Path(cfg.out)
    require_own_output(out, "out =", evalset_artifact.KIND)
    files = shards_artifact.open(cfg.shards).shard_paths  # listed, never merely present
    for directory in cfg.train_shards:
        shards_artifact.open(directory)
    load_tasks(cfg.tasks)
    for spec in cfg.lm_eval:
        parse_spec(spec)
    return files


def build_eval_sets(cfg: EvalBuildConfig) -> dict[str, Any]:
    """Build the `evalset` artifact at cfg.out; returns its manifest."""
    with output_lock(cfg.out):
        files = preflight(cfg)
        out = Path(cfg.out)
        groups = _collect_eval(files, cfg)
        _check_groups(groups, cfg)  # before `out` is touched: a refused build keeps the old sets
        with publishing(out) as building:
            written, skipped = _write_sets(building, groups, cfg)
            train_files = files + [
                f for d in cfg.train_shards for f in shards_artifact.open(d).shard_paths
            ]
            # each eval document is shingled as its language is (CJK: character n-grams), as the
            # training documents it is compared with are
            kept = [
                {**doc, "lang": row["lang"]}
                for row in written
                for doc in groups[(row["domain"], row["lang"])]
            ]
            tasks = load_tasks(cfg.tasks)
            index = _task_index(cfg, tasks)
            where = building / "decontamination-index"
            hits = (
                decontaminate(kept, train_files, cfg.decontamination, cfg.batch_rows, where, index)
                if cfg.decontamination.enabled
                else []
            )
            manifest = _finish(building, cfg, written, skipped, hits, tasks, index)
        return manifest


def _task_index(cfg: EvalBuildConfig, tasks: list[Task]) -> TaskIndex:
    """The n-grams of every task file's examples and every lm-eval task's documents (named
    `lm_eval:<task>` in the hits)."""
    rendered = rendered_tasks(cfg.lm_eval) if cfg.lm_eval else []
    for task in rendered:
        task.name = f"{LM_EVAL_PREFIX}{task.name}"
    return TaskIndex(
        [*tasks, *rendered],
        cfg.decontamination.task_ngram,
        cfg.decontamination.task_min_words,
    )


def _check_groups(groups: dict[tuple[str, str], list[dict]], cfg: EvalBuildConfig) -> None:
    """Refuse, in one line, a build that would write no set: an evalset without sets scores
    every checkpoint as bpb nan (`eval run`, the ablation and its gate)."""
    if not groups:
        raise InputError(
            f"shards = {cfg.shards} has no split == eval documents with text; "
            "raise the pipeline's eval fraction or use a larger corpus"
        )
    (domain, lang), largest = max(groups.items(), key=lambda item: (len(item[1]), item[0]))
    if len(largest) < cfg.min_docs_per_set:
        raise InputError(
            f"min_docs_per_set = {cfg.min_docs_per_set} leaves out every domain/language group "
            f"(the largest, {domain}/{lang}, has {len(largest)} eval documents): no set would "
            f"be written; lower min_docs_per_set to at most {len(largest)}"
        )


def _finish(
    out: Path,
    cfg: EvalBuildConfig,
    written: list[dict],
    skipped: list[dict],
    hits: list[dict],
    file_tasks: list[Task],
    index: TaskIndex,
) -> dict[str, Any]:
    """contaminated.parquet, the task files, report.json, then the `evalset` manifest."""
    pq.write_table(pa.Table.from_pylist(hits, schema=HIT_SCHEMA), out / CONTAMINATED_FILE)
    tasks, lm_eval = _task_report(out, cfg, file_tasks, hits, index)
    report = {
        "sets": written,
        "skipped_groups": skipped,
        "tasks": tasks,
        "contaminated_train_documents": len({h["train_id"] for h in hits}),
        "contaminated_eval_documents": len({h["eval_id"] for h in hits if h["task"] is None}),
        "contaminated_by_tasks": len({h["train_id"] for h in hits if h["task"] is not None}),
        "lm_eval_tasks": lm_eval,
        "decontamination": config_dict(cfg.decontamination),
    }
    write_json(out / "report.json", report)
    counts = {
        "sets": len(written),
        "documents": sum(s["documents"] for s in written),
        "bytes": sum(s["bytes"] for s in written),
        "contaminated_train_documents": report["contaminated_train_documents"],
    }
    return write_artifact(
        out,
        evalset_artifact.EvalsetFields(sets=written, tasks=tasks),
        config=config_dict(cfg),
        inputs=[cfg.shards, *cfg.train_shards],
        counts=counts,
    )
