"""The C kernels must build the same index as the numpy reference, and their absence must only
cost speed."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings

from mixtures import native, sampler
from tests.mixtures.test_sampler import assert_exact_bounds, plans


def numpy_only(plan: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The sampler with its numpy loops (as on a machine without a C compiler)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(native, "library", lambda: None)
        counts = sampler.allocate_batches(
            plan["weights"], plan["num_batches"], plan["global_batch"]
        )
        component, draw = sampler.interleave(counts, plan["weights"])
    return counts, component, draw


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler on this machine")
def test_kernels_compile_here() -> None:
    assert native.library() is not None


@pytest.mark.timeout(180)
@settings(max_examples=120, deadline=None)
@given(plan=plans())
def test_kernels_and_numpy_build_the_same_index(plan: dict) -> None:
    counts = sampler.allocate_batches(plan["weights"], plan["num_batches"], plan["global_batch"])
    component, draw = sampler.interleave(counts, plan["weights"])
    ref_counts, ref_component, ref_draw = numpy_only(plan)
    assert np.array_equal(counts, ref_counts)
    assert np.array_equal(component, ref_component)
    assert np.array_equal(draw, ref_draw)
    assert_exact_bounds(ref_component, plan["weights"], plan["global_batch"])


def test_a_broken_compiler_falls_back_to_numpy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    fake = tmp_path / "cc"
    fake.write_text("#!/bin/sh\necho 'cc: internal compiler error' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("CC", str(fake))
    monkeypatch.setenv("PRETRAIN_CACHE", str(tmp_path / "cache"))
    native.library.cache_clear()
    try:
        assert native.library() is None
        assert "using the numpy loops" in caplog.text
        index = sampler.build_index([0.6, 0.4], 5, 10, [100, 100], seed=0)  # still builds
        assert (sampler.batch_counts(index["component"], 2, 10) == [6, 4]).all()
    finally:
        native.library.cache_clear()
    assert not list((tmp_path / "cache").glob("*.so")), "a failed build left a library behind"


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler on this machine")
def test_a_damaged_cached_library_is_rebuilt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PRETRAIN_CACHE", str(tmp_path))
    monkeypatch.delenv("CC", raising=False)
    cached = native.target_path(shutil.which("cc"))
    cached.write_bytes(b"not a shared object")  # e.g. left by a crash of an older version
    native.library.cache_clear()
    try:
        assert native.library() is not None  # rebuilt, not silently dropped to numpy
        assert cached.read_bytes()[:4] == b"\x7fELF"
    finally:
        native.library.cache_clear()
