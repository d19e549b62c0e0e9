"""Check a fastText model file's header against its own size before `fasttext.load_model` reads it.

fastText trusts its header: a file declaring a huge dimension, vocabulary or matrix makes
`load_model` allocate and loop for minutes (176 CPU-s measured), and garbage makes it fail with a
C++ exception. We walk the layout fasttext.cc loadModel reads, without the vectors, and refuse in
one line naming the file.
"""

from __future__ import annotations

import mmap
import struct
from pathlib import Path
from typing import Any

from pretrain.errors import ArtifactError

LABEL_PREFIX = "__label__"
"""What fastText puts before every label (training lines, predictions)."""
MAGIC = 793712314
"""FASTTEXT_FILEFORMAT_MAGIC_INT32."""
VERSIONS = (11, 12)
MAX_DIM = 10_000
"""Published fastText models use 10-300; anything past this is not a model we trained."""
MAX_COUNT = 2**31 - 1
_ARGS = struct.Struct("<12id")  # dim ws epoch minCount neg wordNgrams loss model bucket minn
#                                 maxn lrUpdateRate, then t (double)
_DICT = struct.Struct("<3i2q")  # size nwords nlabels ntokens pruneidx_size
_CENTROIDS = 256  # ProductQuantizer::ksub_


class _Reader:
    def __init__(self, data: mmap.mmap | bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, fmt: struct.Struct | str) -> tuple[Any, ...]:
        unpack = fmt if isinstance(fmt, struct.Struct) else struct.Struct("<" + fmt)
        if self.pos + unpack.size > len(self.data):
            raise ValueError("the file ends inside its header")
        values = unpack.unpack_from(self.data, self.pos)
        self.pos += unpack.size
        return values

    def skip(self, size: int, what: str) -> None:
        if size < 0 or self.pos + size > len(self.data):
            raise ValueError(
                f"{what} declares {size} bytes, the file has {len(self.data) - self.pos}"
            )
        self.pos += size


def _check_counts(dim: int, loss: int, model: int, bucket: int, minn: int, maxn: int) -> None:
    if not 0 < dim <= MAX_DIM:
        raise ValueError(f"dimension {dim} is outside 1..{MAX_DIM}")
    if not (1 <= loss <= 4 and 1 <= model <= 3):
        raise ValueError(f"loss {loss} / model {model} is not a fastText loss / model")
    if not (0 <= bucket <= MAX_COUNT and 0 <= minn <= maxn <= 1000):
        raise ValueError(f"bucket {bucket}, minn {minn}, maxn {maxn} are out of range")


def _skip_matrix(reader: _Reader, quantized: bool, dim: int, max_rows: int, what: str) -> None:
    if quantized:
        (qnorm,) = reader.take("?")
        rows, cols, codesize = reader.take("qqi")
        if cols != dim or not 0 <= rows <= max_rows:
            raise ValueError(f"{what}: {rows}x{cols}, expected at most {max_rows}x{dim}")
        reader.skip(codesize, what)
        pq_dim, _nsubq, _dsub, _lastdsub = reader.take("4i")
        reader.skip(4 * pq_dim * _CENTROIDS, what)
        if qnorm:
            reader.skip(rows, what)
            reader.take("4i")
            reader.skip(4 * _CENTROIDS, what)
        return
    rows, cols = reader.take("qq")
    if cols != dim or not 0 <= rows <= max_rows:
        raise ValueError(f"{what}: {rows}x{cols}, expected at most {max_rows}x{dim}")
    reader.skip(4 * rows * cols, what)


def _walk(data: mmap.mmap | bytes) -> None:
    reader = _Reader(data)
    magic, version = reader.take("ii")
    if magic != MAGIC or version not in VERSIONS:
        raise ValueError("not a fastText model (wrong magic number or version)")
    args = reader.take(_ARGS)
    dim, loss, model, bucket, minn, maxn = args[0], args[6], args[7], args[8], args[9], args[10]
    _check_counts(dim, loss, model, bucket, minn, maxn)
    size, nwords, nlabels, ntokens, pruneidx_size = reader.take(_DICT)
    if not (nwords >= 0 and nlabels >= 0 and size == nwords + nlabels and ntokens >= 0):
        raise ValueError(f"dictionary counts size {size}, words {nwords}, labels {nlabels}")
    if size * 10 > len(data) - reader.pos:  # each entry is at least a NUL, a count and a type
        raise ValueError(f"dictionary declares {size} entries, the file is too small for them")
    for _ in range(size):
        end = data.find(b"\0", reader.pos)
        if end < 0:
            raise ValueError("the file ends inside its dictionary")
        reader.pos = end + 1
        reader.skip(9, "a dictionary entry")
    if pruneidx_size > 0:
        reader.skip(8 * pruneidx_size, "the pruning index")
    (quant_input,) = reader.take("?")
    _skip_matrix(reader, quant_input, dim, nwords + bucket, "the input matrix")
    (quant_output,) = reader.take("?")
    _skip_matrix(reader, quant_output, dim, max(nlabels, nwords), "the output matrix")


def check_fasttext_file(path: str | Path) -> None:
    """Refuse (ArtifactError, one line naming `path`) a file fastText would choke or stall on."""
    try:
        with open(path, "rb") as handle:
            if handle.seek(0, 2) == 0:
                raise ValueError("the file is empty")
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
                _walk(data)
    except (ValueError, OSError) as exc:
        raise ArtifactError(
            f"{path}: not a usable fastText model ({exc}); rebuild it with "
            "`pretrain data train-classifier` or point the config at a fastText .bin/.ftz file"
        ) from None


def load_fasttext(path: str | Path) -> Any:
    """`fasttext.load_model(path)` after `check_fasttext_file`; a load failure is one line too."""
    import fasttext

    check_fasttext_file(path)
    fasttext.FastText.eprint = lambda *args, **kwargs: None  # silence the load_model warning
    try:
        return fasttext.load_model(str(path))
    except (ValueError, RuntimeError, MemoryError) as exc:
        raise ArtifactError(f"{path}: fastText could not load it ({exc}); rebuild it") from None
