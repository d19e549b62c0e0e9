"""A checkpoint loads whichever CPython wrote it. CPython 3.11.0-3.11.x (e.g. Debian's 3.11.2)
pickles an Enum member as `getattr(EnumClass, "NAME")`; 3.10, 3.11.7 and 3.12+ pickle it as
`EnumClass(value)`. A DCP `.metadata` holds such members (`_MEM_FORMAT_ENCODING`), so the
restricted unpickler must admit both forms.

Why this test exists: `make demo` built its venv with /usr/bin/python3.11 (3.11.2) and every
proxy checkpoint was refused as tampered, while the slow demo tests passed: they ran on the
pyenv 3.11.7 venv, whose checkpoints never contain the getattr form. Here both forms are written
on any interpreter (the `.metadata` of a real checkpoint re-pickled in each form, manifest
re-signed as a checkpoint from the other interpreter would be) and read by what the demo reads
with: resume's checkpoint choice, `pretrain verify` and `load_model` (`pretrain eval run`).
"""

from __future__ import annotations

import enum
import io
import pickle
import pickletools
import shutil
from pathlib import Path

import pytest
import torch

from pretrain.manifest import load_manifest, write_manifest
from pretrain_app.cli import main
from trainer.checkpoint import list_checkpoints, newest_valid


class _EnumPickler(pickle.Pickler):
    """Pickles Enum members the way a given CPython's `Enum.__reduce_ex__` does."""

    def __init__(self, stream: io.BytesIO, by_name: bool) -> None:
        super().__init__(stream, protocol=pickle.DEFAULT_PROTOCOL)
        self.by_name = by_name

    def reducer_override(self, obj: object) -> object:
        if isinstance(obj, enum.Enum) and not isinstance(obj, type):
            if self.by_name:  # CPython 3.11.2 enum.py: `return getattr, (self.__class__, ...)`
                return getattr, (type(obj), obj.name)
            return type(obj), (obj.value,)  # 3.10, 3.11.7, 3.12, 3.13
        return NotImplemented


def _globals(data: bytes) -> set[tuple[str, str]]:
    """(module, name) of every global a pickle references (protocol 4: two strings then
    STACK_GLOBAL)."""
    found, strings = set(), []
    for op, arg, _ in pickletools.genops(data):
        if op.name in {"SHORT_BINUNICODE", "BINUNICODE", "UNICODE"}:
            strings.append(arg)
        elif op.name == "STACK_GLOBAL":
            found.add((strings[-2], strings[-1]))
        elif op.name == "GLOBAL":
            found.add(tuple(arg.split(" ", 1)))
    return found


def _rewrite_metadata(checkpoint: Path, by_name: bool) -> bytes:
    path = checkpoint / ".metadata"
    metadata = pickle.loads(path.read_bytes())  # our own file, written by this test's fixture
    stream = io.BytesIO()
    _EnumPickler(stream, by_name).dump(metadata)
    path.write_bytes(stream.getvalue())
    old = load_manifest(checkpoint)
    write_manifest(checkpoint, "checkpoint", config=old["config"], counts=old["counts"])
    return stream.getvalue()


def _weights(checkpoint: Path) -> dict[str, torch.Tensor]:
    from trainer.inference import load_model

    model = load_model(checkpoint).model
    return {k: v.clone() for k, v in model.state_dict().items() if isinstance(v, torch.Tensor)}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("by_name", [True, False], ids=["cpython-3.11.2", "cpython-3.11.7"])
def test_checkpoint_loads_whichever_python_pickled_its_enums(tmp_path, reference_run, by_name):
    reference, _ = reference_run
    run = tmp_path / "run"
    shutil.copytree(reference, run)
    step, newest = list_checkpoints(run)[-1]
    data = _rewrite_metadata(newest, by_name)
    names = _globals(data)
    assert any(name == "_MEM_FORMAT_ENCODING" for _, name in names)  # the format has enums
    assert (("builtins", "getattr") in names) is by_name  # the form under test is what we wrote

    path, skipped = newest_valid(run)  # resume picks it, nothing skipped as "tampered"
    assert skipped == [] and path == newest
    assert main(["verify", str(newest)]) == 0
    original = _weights(list_checkpoints(reference)[-1][1])
    loaded = _weights(newest)
    assert loaded.keys() == original.keys() and step > 0
    assert all(torch.equal(loaded[k], original[k]) for k in original)
