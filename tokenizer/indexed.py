"""Megatron-Core's indexed dataset format (`<prefix>.bin` / `<prefix>.idx`, "MMIDIDX"), written
and read back here with numpy alone: importing megatron.core's IndexedDatasetBuilder pulls in
torch and megatron.core's optimizer packages (~5 CPU-s in every encode worker, issue #31).

Our files are byte-identical to IndexedDatasetBuilder's for the same documents added with
`add_document(tokens, [len(tokens)])` (one sequence per document), and Megatron's IndexedDataset
reads them (tests/tokenizer/test_indexed.py holds both to the real classes). The layout, from
megatron/core/datasets/indexed_dataset.py (_IndexWriter):

- .bin: every document's tokens, concatenated, in the token dtype (native byte order);
- .idx: b"MMIDIDX\\x00\\x00", version 1 (<Q), dtype code (<B), sequence count (<Q), document
  count (<Q, the sequence count + 1), sequence lengths (int32), sequence byte offsets into the
  .bin (int64), document indices (int64: 0, 1, ..., sequence count).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from itertools import chain
from pathlib import Path

import numpy as np

from pretrain.errors import ArtifactError

HEADER = b"MMIDIDX\x00\x00"
DTYPE_CODES = {np.dtype(np.uint16): 8, np.dtype(np.int32): 4}  # megatron's DType enum
_COUNTS = struct.Struct("<9sQBQQ")  # header, version, dtype code, sequences, documents


class IndexedWriter:
    """Writes `<prefix>.bin` as documents are added and `<prefix>.idx` on `finalize()`."""

    def __init__(self, prefix: str | Path, dtype: type[np.integer]) -> None:
        self.prefix, self.dtype = str(prefix), np.dtype(dtype)
        self.lengths: list[int] = []
        Path(f"{self.prefix}.bin").write_bytes(b"")

    def add_documents(self, documents: Sequence[Sequence[int]]) -> list[int]:
        """Append documents (token ids, EOD included), one sequence each, in one write; returns
        their lengths."""
        lengths = [len(document) for document in documents]
        tokens = np.fromiter(chain.from_iterable(documents), self.dtype, count=sum(lengths))
        with open(f"{self.prefix}.bin", "ab") as data:
            data.write(tokens.tobytes())
        self.lengths.extend(lengths)
        return lengths

    def finalize(self) -> None:
        lengths = np.asarray(self.lengths, dtype=np.int32)
        pointers = np.zeros(len(lengths), dtype=np.int64)
        np.cumsum(lengths[:-1].astype(np.int64) * self.dtype.itemsize, out=pointers[1:])
        counts = (HEADER, 1, DTYPE_CODES[self.dtype], len(lengths), len(lengths) + 1)
        with open(f"{self.prefix}.idx", "wb") as idx:
            idx.write(_COUNTS.pack(*counts))
            idx.write(lengths.tobytes())
            idx.write(pointers.tobytes())
            idx.write(np.arange(len(lengths) + 1, dtype=np.int64).tobytes())


def read_sequence_lengths(prefix: str | Path) -> list[int]:
    """The token count of every sequence (document) in `<prefix>.idx`."""
    path = f"{prefix}.idx"
    with open(path, "rb") as idx:
        head = idx.read(_COUNTS.size)
        if len(head) < _COUNTS.size or not head.startswith(HEADER):
            raise ArtifactError(f"{path} is not a Megatron index (MMIDIDX): encode it again")
        count = _COUNTS.unpack(head)[3]
        return np.fromfile(idx, dtype=np.int32, count=count).tolist()
