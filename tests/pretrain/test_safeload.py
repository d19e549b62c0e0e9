"""The restricted DCP unpickler admits `getattr` only to rebuild the format's own enum members."""

from __future__ import annotations

import io
import pickle

import pytest
from torch.distributed.checkpoint.metadata import _MEM_FORMAT_ENCODING, Metadata

from pretrain.safeload import UnsafePickle, load_dcp_metadata


class _ByGetattr:
    """Pickles as `getattr(target, name)`, the form Python uses for some enum members."""

    def __init__(self, target: object, name: str) -> None:
        self.target, self.name = target, name

    def __reduce__(self) -> tuple:
        return getattr, (self.target, self.name)


def _load(obj: object) -> object:
    return load_dcp_metadata(io.BytesIO(pickle.dumps(obj)))


def test_an_enum_member_pickled_by_getattr_loads() -> None:
    member = _MEM_FORMAT_ENCODING.TORCH_CONTIGUOUS_FORMAT
    assert _load(_ByGetattr(_MEM_FORMAT_ENCODING, member.name)) is member


@pytest.mark.parametrize(
    "target, name",
    [(Metadata, "__init__"), (_MEM_FORMAT_ENCODING, "__class__"), (_MEM_FORMAT_ENCODING, "mro")],
)
def test_getattr_reaching_anything_else_is_refused(target: object, name: str) -> None:
    with pytest.raises(UnsafePickle, match="getattr"):
        _load(_ByGetattr(target, name))
