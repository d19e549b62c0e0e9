"""The typed artifact readers: they verify before they type, read the one manifest format and
refuse any other (an edited manifest: its seal; another version), and their writers refuse
fields their kind does not have."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pretrain.artifacts import ablation, base, encoded, model, shards
from pretrain.artifacts.base import write_artifact
from pretrain.errors import ArtifactError
from pretrain.manifest import MANIFEST, load_manifest, manifest_sha256, seal_of, write_manifest
from pretrain.provenance import capture


def _shards(root: Path, rows: int = 3) -> Path:
    (root / "data").mkdir(parents=True)
    table = pa.table(
        {"id": [f"d{i}" for i in range(rows)], "text": ["x" * (i + 1) for i in range(rows)]}
    )
    pq.write_table(table, root / "data" / "a-00000.parquet")
    (root / "stray.parquet").write_bytes(b"not listed under data/")
    fields = shards.ShardsFields(
        stages=[{"name": "rules", "version": 1, "config": {}}],
        models={},
        sections={"toy": {"cutoffs": [10.0, 20.0]}},
    )
    write_artifact(root, fields, config={"output": str(root)}, counts={"documents_kept": rows})
    return root


def test_shards_reader_lists_only_listed_shards_and_fills_absent_columns(tmp_path) -> None:
    art = shards.open(_shards(tmp_path / "s"))
    assert [p.name for p in art.shard_paths] == ["a-00000.parquet"]
    (table,) = list(shards.read_columns(art.shard_paths[0], ["id", "lang"]))
    assert table.column("id").to_pylist() == ["d0", "d1", "d2"]
    assert table.column("lang").null_count == 3  # a column of a stage that did not run
    assert art.section_record("toy") == {"cutoffs": [10.0, 20.0]}
    assert art.section_record("other") == {}  # a stage that recorded nothing
    assert art.manifest_sha256 == manifest_sha256(tmp_path / "s")


def test_a_byte_flipped_at_the_same_size_is_refused(tmp_path) -> None:
    root = _shards(tmp_path / "s")
    shard = root / "data" / "a-00000.parquet"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x01
    shard.write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match="does not match its sha256"):
        shards.open(root, full=True)


def test_an_artifact_of_another_kind_is_refused(tmp_path) -> None:
    root = _shards(tmp_path / "s")
    with pytest.raises(ArtifactError, match="is a 'shards' artifact, this needs a 'encoded'"):
        encoded.open(root)
    with pytest.raises(ArtifactError, match="not a model"):
        model.open(root)


def test_a_shards_artifact_without_shards_is_refused(tmp_path) -> None:
    root = tmp_path / "empty"
    root.mkdir()
    write_manifest(root, "shards")
    with pytest.raises(ArtifactError, match="lists no data/"):
        shards.open(root)


def test_a_data_run_that_kept_no_document_is_refused_saying_so(tmp_path) -> None:
    # an empty input gives a finished run with no shard: "re-run `pretrain data run`" (the
    # message for an artifact missing its shards) would give the same run again
    root = tmp_path / "kept-none"
    root.mkdir()
    write_manifest(root, "shards", counts={"documents_in": 3, "documents_kept": 0})
    with pytest.raises(ArtifactError, match="holds no documents: its data run kept 0 of 3"):
        shards.open(root)


def _rewrite_manifest(root: Path, **changes: object) -> None:
    """The manifest as a writer that wrote `changes` would have sealed it."""
    manifest = load_manifest(root)
    manifest.update(changes)
    manifest["seal"] = seal_of(manifest)
    (root / MANIFEST).write_text(json.dumps(manifest))


def test_the_kinds_fields_are_read_typed_beside_the_common_ones(tmp_path) -> None:
    art = shards.open(_shards(tmp_path / "s"))
    assert isinstance(art, shards.Shards) and isinstance(art.fields, shards.ShardsFields)
    assert art.fields.sections == {"toy": {"cutoffs": [10.0, 20.0]}}
    assert art.manifest.kind == "shards" and art.manifest.counts == {"documents_kept": 3}


@pytest.mark.parametrize("field", ["approved", "files_extra"])
def test_a_field_added_and_resealed_is_refused_in_one_line(tmp_path, field) -> None:
    """One format: a field no writer of the kind writes is refused, even when the seal was
    recomputed (before, a reader ignored it as a newer version's)."""
    root = _shards(tmp_path / "s")
    _rewrite_manifest(root, **{field: True})
    with pytest.raises(ArtifactError, match=rf"field '{field}'.*edited or damaged") as info:
        shards.open(root)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "edit",
    [{"manifest_version": 1}, {"manifest_version": 3}, {"manifest_version": True}, {"seal": None}],
)
def test_a_manifest_not_of_the_one_format_is_refused_in_one_line(tmp_path, edit) -> None:
    """Another version (resealed as its writer would have) or no seal: never read as this one."""
    root = _shards(tmp_path / "s")
    manifest = load_manifest(root)
    manifest.update(edit)
    if "seal" not in edit:
        manifest["seal"] = seal_of(manifest)
    else:
        del manifest["seal"]
    (root / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(ArtifactError, match="manifest_version|seal") as info:
        shards.open(root)
    assert "\n" not in str(info.value)


def test_a_field_of_the_wrong_type_is_one_line_refusal(tmp_path) -> None:
    root = _shards(tmp_path / "s")
    _rewrite_manifest(root, sections={"toy": "high"})
    with pytest.raises(ArtifactError, match="field 'sections.toy'.*rebuild") as info:
        shards.open(root)
    assert "\n" not in str(info.value)


def test_the_writer_refuses_a_field_its_kind_does_not_have(tmp_path) -> None:
    root = tmp_path / "a"
    root.mkdir()
    (root / "report.json").write_text("{}")
    with pytest.raises(ValueError, match="typo_recipe"):
        write_artifact(root, ablation.AblationFields(typo_recipe="x"))  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="passed"):
        write_artifact(root, ablation.AblationFields(passed="perhaps"))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="names no artifact kind"):
        write_artifact(root, base.Fields())
    assert not (root / MANIFEST).exists()  # nothing written


def test_the_writer_records_the_command_main_captured(tmp_path) -> None:
    with capture(["data", "run", "pipeline.yaml"]):
        _shards(tmp_path / "s")
    assert shards.open(tmp_path / "s").manifest.command == [
        "pretrain",
        "data",
        "run",
        "pipeline.yaml",
    ]


def test_the_ablation_report_is_read_typed_after_verification(tmp_path) -> None:
    root = tmp_path / "abl"
    root.mkdir()
    report = {
        "chosen_recipe_sha256": "c" * 64,
        "base_recipe_sha256": "b" * 64,
        "tokenizer_sha256": "t" * 64,
        "data_manifest_sha256": "d" * 64,
        "passed": True,
        "target_metric": "bpb",
        "primary_proxy": "p0",
        "runs": [{"recipe_sha256": "c" * 64}],
    }
    (root / "report.json").write_text(json.dumps(report))
    write_artifact(root, ablation.fields_of(report), counts={"runs": 1})
    art = ablation.open(root)
    assert art.fields.chosen_recipe_sha256 == "c" * 64
    assert art.report_json == report
    (root / "report.json").write_text(json.dumps({**report, "passed": False}))
    with pytest.raises(ArtifactError, match="report.json"):
        ablation.open(root)


def test_show_reads_figures_typed_and_survives_a_field_no_version_wrote(tmp_path) -> None:
    from pretrain.show import describe

    root = _shards(tmp_path / "s")
    assert describe(root)["figures"] == {"documents_kept": 3}
    abl = tmp_path / "abl"
    abl.mkdir()
    (abl / "report.json").write_text("{}")
    write_artifact(abl, ablation.fields_of({"passed": True, "target_metric": "bpb"}))
    assert describe(abl)["figures"]["passed"] is True
    _rewrite_manifest(abl, passed="perhaps")  # no version wrote this: figures fall back to counts
    node = describe(abl)
    assert node["status"] == "ok" and node["figures"] == {}


def test_an_edited_manifest_is_refused_by_its_seal(tmp_path) -> None:
    root = _shards(tmp_path / "s")
    path = root / MANIFEST
    original = path.read_bytes()
    text = original.decode()
    at = text.index('"documents_kept": ') + len('"documents_kept": ')  # the count 3
    path.write_text(text[:at] + "4" + text[at + 1 :])  # same size, still valid JSON
    assert path.stat().st_size == len(original) and load_manifest(root)["counts"] == {
        "documents_kept": 4
    }
    with pytest.raises(ArtifactError, match="does not match its seal") as info:
        shards.open(root)
    assert "\n" not in str(info.value)
    path.write_bytes(original)
    assert shards.open(root).manifest.counts == {"documents_kept": 3}
    manifest = load_manifest(root)
    manifest["approved"] = True  # a field added by hand
    path.write_text(json.dumps(manifest))
    with pytest.raises(ArtifactError, match="does not match its seal"):
        shards.open(root)


def test_a_pickle_in_place_of_the_manifest_is_refused_and_never_loaded(tmp_path) -> None:
    import pickle

    class Payload:
        def __reduce__(self):  # unpickling it would create `marker`
            return (open, (str(marker), "w"))

    root = _shards(tmp_path / "s")
    marker = tmp_path / "unpickled"
    (root / MANIFEST).write_bytes(pickle.dumps(Payload()))
    with pytest.raises(ArtifactError, match="not valid JSON"):
        shards.open(root)
    assert not marker.exists()
