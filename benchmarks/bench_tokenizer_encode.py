"""Encoding shards to Megatron .bin/.idx: the contenders of the `encode` claim
(benchmarks/claims.py), each run by the harness in its own process on the same shards and the same
tokenizer.json (a 32k byte-level BPE trained by us on that input, `--prepare`):

- ours: `pretrain tokenizer encode` (its default Ray path), called as the CLI is;
- no_ray: the same with `--no-ray` (shards one after another in this process);
- floor: a plain `encode_batch_fast` over batches of 1,024 documents + a numpy writer (uint16
  tokens, EOD-terminated, int64 document lengths): the least any encoder must do;
- datatrove 0.10.1: ParquetReader -> MegatronDocumentTokenizer, LocalPipelineExecutor with tasks
  = cores and workers = 1 (the ranks in this process; `encode_batch` uses all cores);
- megatron_loop: what Megatron-LM's tools/preprocess_data.py does (a Pool of `cores` workers
  encoding ONE document per call, the parent appending to IndexedDatasetBuilder),
  re-implemented here (only megatron-core is installed).

Each child prints READY after its imports and, last, its token count (the output check).

    python -m benchmarks.run encode    # or: --prepare WORK --corpus DIR --mb 30
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from benchmarks import bench_tokenizer_train
from benchmarks.bench_tokenizer_train import corpus_shards
from benchmarks.common import add_corpus_argument, corpus_dir
from benchmarks.harness import ready, report

CORES = os.cpu_count() or 1
_TOKENIZER: Any = None


def _prepare(work: Path, mb: float) -> None:
    """WORK/shards (`mb` MB of corpus text) and WORK/tokenizer (32k, trained by us on them)."""
    from tokenizer.config import TokenizerTrainConfig
    from tokenizer.train import train

    bench_tokenizer_train.WORK = work / "cache"  # not the shared cache: a smoke corpus differs
    shutil.copytree(corpus_shards(mb), work / "shards")
    train(
        TokenizerTrainConfig(
            data=str(work / "shards"),
            out=str(work / "tokenizer"),
            vocab_size=32768 if mb >= 10 else 1024,
            sample={"max_bytes": 50_000_000},
        ),
    )


def _texts(shard: Path) -> Any:
    from tokenizer.shards import read_columns

    for table in read_columns(shard, ("text",), batch_size=1024):
        yield from (t or "" for t in table.column("text").to_pylist())


def _init_worker(path: str) -> None:
    global _TOKENIZER
    from tokenizers import Tokenizer

    _TOKENIZER = Tokenizer.from_file(path)


def _encode_one(text: str) -> list[int]:
    ids = _TOKENIZER.encode(text, add_special_tokens=False).ids
    ids.append(_TOKENIZER.token_to_id("<|endoftext|>"))
    return ids


def run_megatron_loop(tokenizer_dir: Path, shards: list[Path], out: Path) -> int:
    """The classic preprocess_data loop (see module docstring); returns tokens written."""
    import multiprocessing

    import numpy as np
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

    tokens = 0
    context = multiprocessing.get_context("fork")
    with context.Pool(CORES, _init_worker, (str(tokenizer_dir / "tokenizer.json"),)) as pool:
        for shard in shards:
            builder = IndexedDatasetBuilder(str(out / f"{shard.stem}.bin"), dtype=np.uint16)
            for ids in pool.imap(_encode_one, _texts(shard), 32):
                builder.add_document(np.asarray(ids, dtype=np.uint16), [len(ids)])
                tokens += len(ids)
            builder.finalize(str(out / f"{shard.stem}.idx"))
    return tokens


def run_datatrove(tokenizer_dir: Path, shards_dir: Path, out: Path) -> int:
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.readers import ParquetReader
    from datatrove.pipeline.tokens import MegatronDocumentTokenizer

    executor = LocalPipelineExecutor(
        pipeline=[
            ParquetReader(
                str(shards_dir / "data"), text_key="text", id_key="id", glob_pattern="*.parquet"
            ),
            MegatronDocumentTokenizer(
                output_folder=str(out / "tokens"),
                tokenizer_name_or_path=str(tokenizer_dir / "tokenizer.json"),
                eos_token="<|endoftext|>",
            ),
        ],
        tasks=CORES,
        workers=1,
        logging_dir=str(out / "logs"),
    )
    executor.run()

    return _idx_tokens(out / "tokens")


def run_floor(tokenizer_dir: Path, shards: list[Path], out: Path) -> int:
    """encode_batch_fast + a numpy writer: per shard one .bin of uint16 tokens and one .npy of
    document lengths. Returns tokens written."""
    import numpy as np
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    eod = tok.token_to_id("<|endoftext|>")
    tokens = 0
    for shard in shards:
        lengths: list[int] = []
        with open(out / f"{shard.stem}.bin", "wb") as sink:
            batch: list[str] = []
            for text in [*_texts(shard), None]:
                if text is not None:
                    batch.append(text)
                if batch and (text is None or len(batch) == 1024):
                    for encoding in tok.encode_batch_fast(batch, add_special_tokens=False):
                        ids = np.asarray([*encoding.ids, eod], dtype=np.uint16)
                        sink.write(ids.tobytes())
                        lengths.append(len(ids))
                    batch = []
        np.save(out / f"{shard.stem}.lengths.npy", np.asarray(lengths, dtype=np.int64))
        tokens += sum(lengths)
    return tokens


def _idx_tokens(out: Path) -> int:
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    tokens = 0
    for index in sorted(out.rglob("*.idx")):
        if index.with_suffix(".bin").stat().st_size == 0:  # a datatrove rank given no document
            continue
        dataset = IndexedDataset(str(index.with_suffix("")))  # held: its arrays view the mmap
        tokens += int(dataset.sequence_lengths.sum())
    return tokens


def _child(kind: str, shards_dir: Path, tokenizer_dir: Path, out: Path) -> None:
    import megatron.core.datasets.indexed_dataset  # noqa: F401  (imports are start-up)

    from pretrain_app.cli import main as pretrain
    from tokenizer.shards import require_shards

    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    ready()
    if kind in ("ours", "no_ray"):
        command = ["tokenizer", "encode", str(tokenizer_dir), "--data", str(shards_dir)]
        rc = pretrain(
            [*command, "--out", str(out / "encoded"), "-q"]
            + (["--no-ray"] if kind == "no_ray" else [])
        )
        if rc:
            raise SystemExit(rc)
        tokens = _idx_tokens(out / "encoded")
    elif kind == "floor":
        tokens = run_floor(tokenizer_dir, require_shards(shards_dir)[1], out)
    elif kind == "datatrove":
        tokens = run_datatrove(tokenizer_dir, shards_dir, out)
    else:
        tokens = run_megatron_loop(tokenizer_dir, require_shards(shards_dir)[1], out)
    report({"tokens": tokens})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    add_corpus_argument(parser)
    parser.add_argument("--mb", type=float, default=30)
    parser.add_argument("--prepare", type=Path, metavar="WORK")
    parser.add_argument(
        "--child", choices=("ours", "no_ray", "floor", "datatrove", "megatron_loop")
    )
    parser.add_argument("--shards", type=Path)
    parser.add_argument("--tokenizer", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv or [])
    if args.prepare:
        bench_tokenizer_train.CORPUS = corpus_dir(args.corpus)
        _prepare(args.prepare, args.mb)
    elif args.child:
        _child(args.child, args.shards, args.tokenizer, args.out)
    else:
        parser.error("run it as a claim: python -m benchmarks.run encode")


if __name__ == "__main__":
    main(sys.argv[1:])
