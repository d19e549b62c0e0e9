"""The sampler's hot loops in C (`_kernels.c`), compiled on first use, as Megatron compiles its
dataset helpers. The numpy code in `mixtures.schedule` and `mixtures.boundaries` is the reference:
the C loops must give the same index bit for bit (tested), and the numpy code is used whenever no
C compiler is found, compiling fails, or `PRETRAIN_NATIVE=0` is set.

The shared object is cached under `$PRETRAIN_CACHE` (default `$XDG_CACHE_HOME/pretrain` or
`~/.cache/pretrain`), named by the hash of the source, the compiler command and the machine type
(a home directory shared by x86 and ARM nodes keeps one per type), written atomically; a cached
file that does not load is rebuilt once.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from pretrain.hashcache import cache_root

SOURCE = Path(__file__).with_name("_kernels.c")
FLAGS = ["-O2", "-shared", "-fPIC", "-std=c99"]
log = logging.getLogger(__name__)

_I64 = np.ctypeslib.ndpointer(dtype=np.int64, flags="C_CONTIGUOUS")
_I16 = np.ctypeslib.ndpointer(dtype=np.int16, flags="C_CONTIGUOUS")
_INT = ctypes.c_int64


def cache_dir() -> Path:
    return cache_root()


def _compile(compiler: str, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        out = Path(tmp) / target.name
        subprocess.run(
            [compiler, *FLAGS, str(SOURCE), "-o", str(out)],
            check=True,
            capture_output=True,
            timeout=120,
        )
        os.replace(out, target)  # atomic: concurrent builders leave one whole file


def target_path(compiler: str) -> Path:
    """Where the kernels built by `compiler` for this machine type are cached."""
    key = " ".join([*FLAGS, compiler, platform.system(), platform.machine()]).encode()
    digest = hashlib.sha256(SOURCE.read_bytes() + key).hexdigest()[:16]
    return cache_dir() / f"mixture-kernels-{digest}.so"


@functools.lru_cache(maxsize=1)
def library() -> ctypes.CDLL | None:
    """The compiled kernels, or None (numpy is used) with the reason logged once."""
    if os.environ.get("PRETRAIN_NATIVE", "1") == "0":
        return None
    compiler = shutil.which(os.environ.get("CC", "cc"))
    if compiler is None:
        log.info("mixtures: no C compiler found; the sampler uses its numpy loops")
        return None
    target = target_path(compiler)
    try:
        if not target.is_file():
            _compile(compiler, target)
        try:
            lib = ctypes.CDLL(str(target))
        except OSError:  # a damaged cached file: build it again, once
            _compile(compiler, target)
            lib = ctypes.CDLL(str(target))
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("mixtures: C kernels unavailable (%s); using the numpy loops", exc)
        return None
    lib.batch_tables.restype = None
    lib.batch_tables.argtypes = [_INT, _I64, _INT, _INT, _INT, _I64, _I64, _I64, _I64]
    lib.batch_tables.argtypes += [_I64, _I64, _I64]
    lib.edf_batches.restype = _INT
    lib.edf_batches.argtypes = [_INT, _I64, _INT, _INT, _INT, _I64, _I64, _I64, _I64, _I16]
    lib.edf_batches.argtypes += [_I64, _I64]
    lib.plan_fast.restype = _INT
    lib.plan_fast.argtypes = [_INT, _INT, _INT, _I64, _I64, _INT] + [_I64] * 16
    return lib
