"""Encoder resume when the tags changed under a finished prefix: a stage's tag added (a plugin
installed since), its declared type changed, or a sidecar or index damaged at the same size.
Each time the re-run encodes those prefixes again, its outputs equal a fresh encode's byte for
byte, and an unchanged prefix is still skipped.

The plugin (tests/data_pipeline/test_stage_plugin.py's `toy_chars`) is installed in a temporary
directory part way through, as a user would `pip install` it between two runs."""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from data_pipeline.stages import registry as stage_registry
from pretrain.manifest import load_manifest, sha256_file
from tests.data_pipeline.test_stage_plugin import _plugin
from tests.tokenizer.test_stage_tags import _with_tag
from tokenizer.encode import encode

pytestmark = pytest.mark.timeout(600)


def _outputs(out: Path) -> dict[str, str]:
    return {p.name: sha256_file(p) for p in sorted(out.iterdir()) if p.name != "manifest.json"}


def _install(site: Path, monkeypatch: pytest.MonkeyPatch, toy_type: str) -> None:
    """The toy plugin, declaring `toy_chars` as `toy_type`, seen by the registry from now on."""
    _plugin(site)
    module = site / "toy_stages.py"
    text = module.read_text(encoding="utf-8")
    declared = text.replace(
        'pa.field("toy_chars", pa.int32())', f'pa.field("toy_chars", {toy_type})'
    )
    assert declared != text or toy_type == "pa.int32()"
    module.write_text(declared, encoding="utf-8")
    sys.modules.pop("toy_stages", None)
    monkeypatch.syspath_prepend(str(site))
    stage_registry.registry.cache_clear()


@pytest.fixture()
def no_plugin_after():
    yield
    sys.modules.pop("toy_stages", None)
    stage_registry.registry.cache_clear()


@pytest.mark.slow  # megatron-core's first import and six real encodes of 600 documents
def test_a_prefix_whose_sidecar_columns_changed_is_redone_as_a_fresh_encode(
    tokenizer_dir: Path, shards_dir: Path, tmp_path: Path, monkeypatch, no_plugin_after
) -> None:
    tagged = _with_tag(shards_dir, tmp_path / "tagged")
    out = tmp_path / "enc"

    def run(into: Path = out) -> dict:
        return encode(tokenizer_dir, tagged, into, backend="inline", min_prefix_documents=200)

    stage_registry.registry.cache_clear()
    first = run()
    prefixes = first["prefixes"]
    assert prefixes == ["train-00000", "train-00001", "eval-00000"]
    assert "toy_chars" not in pq.read_schema(out / f"{prefixes[0]}.docs.parquet").names
    assert run()["counts"]["shards_skipped"] == 3  # nothing changed: all reused

    _install(tmp_path / "site-int", monkeypatch, "pa.int32()")  # the tag's stage installed since
    added = run()
    assert added["counts"]["shards_skipped"] == 0
    assert _outputs(out) == _outputs(_fresh(run, tmp_path / "fresh-int"))
    sidecar = pq.read_table(out / f"{prefixes[0]}.docs.parquet")
    assert sidecar.schema.field("toy_chars").type == pa.int32()
    assert sidecar.column("toy_chars").null_count == 0

    monkeypatch.undo()  # the plugin upgraded: the same tag, declared as a float now
    _install(tmp_path / "site-float", monkeypatch, "pa.float32()")
    retyped = run()
    assert retyped["counts"]["shards_skipped"] == 0
    assert pq.read_schema(out / f"{prefixes[0]}.docs.parquet").field("toy_chars").type == (
        pa.float32()
    )
    assert _outputs(out) == _outputs(_fresh(run, tmp_path / "fresh-float"))

    sidecar_path = out / f"{prefixes[1]}.docs.parquet"  # a byte flipped, same size
    good = sidecar_path.read_bytes()
    data = bytearray(good)
    data[len(data) // 2] ^= 0x20
    sidecar_path.write_bytes(bytes(data))
    assert run()["counts"]["shards_skipped"] == 2  # only the damaged prefix is redone
    assert sidecar_path.read_bytes() == good
    assert load_manifest(out)["files"][sidecar_path.name]["sha256"] == sha256_file(sidecar_path)

    index = out / f"{prefixes[0]}.idx"  # the token index damaged: that prefix is encoded again
    before = _outputs(out)
    index.write_bytes(index.read_bytes()[:-1] + bytes([index.read_bytes()[-1] ^ 1]))
    assert run()["counts"]["shards_skipped"] == 2
    assert _outputs(out) == before


def _fresh(run, into: Path) -> Path:
    run(into)
    return into
