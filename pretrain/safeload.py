"""Nothing we are handed is unpickled (docs/artifacts.md#never-unpickled): torch DCP `.metadata`
through an unpickler admitting only that format's classes, `.pt` with `weights_only`, `.npy`
without pickle; `check_checkpoint` opens each file a checkpoint lists that way."""

from __future__ import annotations

import dataclasses
import enum
import io
import os
import pickle
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO

from pretrain.errors import ArtifactError

DCP_MODULES = (
    "torch.distributed.checkpoint.metadata",
    "torch.distributed.checkpoint.planner",
    "torch.distributed.checkpoint.filesystem",
)
_FUNCTIONS = {("torch.serialization", "_get_layout"), ("collections", "OrderedDict")}


class UnsafePickle(ArtifactError):
    """A pickle names a global outside the allowed set: it is refused, never executed."""


def _allowed(module: str, name: str, obj: Any) -> bool:
    import torch

    if (module, name) in _FUNCTIONS:
        return True
    if module == "torch":
        return obj is torch.Size or isinstance(obj, torch.dtype)
    if module in DCP_MODULES and isinstance(obj, type):
        return dataclasses.is_dataclass(obj) or issubclass(obj, enum.Enum)
    return False


def _enum_member(cls: Any, name: Any) -> Any:
    """`getattr(EnumClass, "MEMBER")`, the form in which Python pickles some enum members (torch's
    `_MEM_FORMAT_ENCODING`): admitted only for a member of an enum of the format, nothing else."""
    if (
        isinstance(cls, type)
        and issubclass(cls, enum.Enum)
        and cls.__module__ in DCP_MODULES
        and isinstance(name, str)
        and name in cls.__members__
    ):
        return cls[name]
    raise UnsafePickle(
        f"refused to unpickle getattr({getattr(cls, '__name__', cls)!r}, {name!r}): only members "
        "of the torch distributed-checkpoint format's enums"
    )


class _DcpUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("builtins", "getattr"):
            return _enum_member
        allowed_module = module in DCP_MODULES or module in {"torch", "torch.serialization"}
        obj = super().find_class(module, name) if allowed_module else None
        if allowed_module and _allowed(module, name, obj):
            return obj
        raise UnsafePickle(
            f"refused to unpickle {module}.{name}: it is not part of the torch "
            "distributed-checkpoint format"
        )


def load_dcp_metadata(stream: BinaryIO, what: str = ".metadata") -> Any:
    """Read a torch DCP `.metadata` pickle admitting only the classes of that format."""
    try:
        return _DcpUnpickler(stream).load()
    except UnsafePickle as exc:
        raise UnsafePickle(f"{what}: {exc}; the checkpoint was tampered with") from None
    except Exception as exc:  # a truncated or garbled pickle raises many types
        raise ArtifactError(f"{what} is not a readable checkpoint index ({exc})") from None


def _safe_read_metadata(self: Any, *args: Any, **kwargs: Any) -> Any:
    """FileSystemReader.read_metadata with the restricted unpickler (same behaviour otherwise)."""
    from torch.distributed.checkpoint.metadata import StorageMeta

    path = self._get_metadata_path(kwargs.get("rank"))
    with self.fs.create_stream(path, "rb") as stream:
        metadata = load_dcp_metadata(stream, str(path))
    if getattr(metadata, "storage_meta", None) is None:
        metadata.storage_meta = StorageMeta()
    metadata.storage_meta.load_id = self.load_id
    return metadata


def guard_torch_loading() -> None:
    """Make every checkpoint read in this process safe: DCP metadata through the restricted
    unpickler, and `torch.load` in weights_only mode even where a caller did not ask for it
    (megatron's `common.pt` load passes no `weights_only`)."""
    from torch.distributed.checkpoint import filesystem

    filesystem.FileSystemReader.read_metadata = _safe_read_metadata
    os.environ.pop("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", None)
    os.environ["TORCH_FORCE_WEIGHTS_ONLY_LOAD"] = "1"


def torch_load(path: str | os.PathLike) -> Any:
    """`torch.load(weights_only=True)` on CPU; a file needing more is refused in one line."""
    import torch

    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UnsafePickle(
            f"{path} is not loadable as plain tensors and was refused ({first[:200]})"
        ) from None


def check_checkpoint(directory: str | os.PathLike, manifest: Mapping[str, Any]) -> None:
    """Open every loadable file a checkpoint's manifest lists the safe way; raise on the first
    that is refused (a planted payload, a corrupt index)."""
    import numpy as np

    root = Path(directory)
    for rel in sorted(manifest["files"]):
        path = root / rel
        if path.name == ".metadata" or path.name.endswith(".metadata"):
            load_dcp_metadata(io.BytesIO(path.read_bytes()), f"{root.name}/{rel}")
        elif path.suffix == ".pt":
            torch_load(path)
        elif path.suffix == ".npy":
            try:
                np.load(path, allow_pickle=False)
            except ValueError as exc:
                raise UnsafePickle(f"{path} needs pickle to load and was refused ({exc})") from None
