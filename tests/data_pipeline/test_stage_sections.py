"""A stage's typed section of the shards manifest (`Stage.Section`, `sections.<stage>`): written
from what the stage returns, sealed with the manifest, read back typed by the stage's own model."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from data_pipeline.stages.base import Stage, StageSection
from data_pipeline.stages.perplexity import PerplexitySection, PerplexityStage
from data_pipeline.stages.registry import manifest_sections, section
from pretrain import shards_layout as layout
from pretrain.artifacts import shards
from pretrain.artifacts.base import write_artifact
from pretrain.errors import ArtifactError, SchemaError
from pretrain.manifest import MANIFEST, load_manifest, seal_of

CUTOFFS = {"en": [120.5, 410.0], "zh": [30.0, 88.25]}


def _artifact(root: Path, sections: dict) -> Path:
    (root / layout.DATA_DIR).mkdir(parents=True)
    pq.write_table(pa.table({"id": ["d0"], "text": ["x"]}), root / layout.data_file("a-00000"))
    fields = shards.ShardsFields(stages=[], sections=sections)
    write_artifact(root, fields, config={"output": str(root)}, counts={"documents_kept": 1})
    return root


def _reseal(root: Path, drop: tuple[str, ...] = (), **changes: object) -> None:
    """The manifest as a writer that wrote `changes` (and not `drop`) would have sealed it."""
    manifest = {k: v for k, v in load_manifest(root).items() if k not in drop}
    manifest.update(changes)
    manifest["seal"] = seal_of(manifest)
    (root / MANIFEST).write_text(json.dumps(manifest))


def _perplexity() -> PerplexityStage:
    stage = PerplexityStage()
    stage.cutoffs = {lang: list(pair) for lang, pair in CUTOFFS.items()}
    return stage


def test_a_stage_section_is_written_and_read_back_typed(tmp_path) -> None:
    sections = manifest_sections([_perplexity(), _plain()])
    assert sections == {"perplexity": {"ppl_cutoffs": CUTOFFS}}  # a stage recording nothing: none
    art = shards.open(_artifact(tmp_path / "s", sections))
    assert "ppl_cutoffs" not in art.raw  # no top-level stage key
    read = section(art, "perplexity")
    assert isinstance(read, PerplexitySection) and read.ppl_cutoffs == CUTOFFS


def test_a_stage_that_did_not_run_reads_as_its_section_defaults(tmp_path) -> None:
    art = shards.open(_artifact(tmp_path / "s", {}))
    assert section(art, "perplexity") == PerplexitySection(ppl_cutoffs={})
    assert section(art, "dedup") == StageSection()


def test_a_section_of_the_wrong_type_is_a_one_line_refusal(tmp_path) -> None:
    root = _artifact(tmp_path / "s", manifest_sections([_perplexity()]))
    _reseal(root, sections={"perplexity": {"ppl_cutoffs": {"en": "high"}}})
    with pytest.raises(ArtifactError, match="section 'perplexity.ppl_cutoffs.en'.*rebuild") as info:
        section(shards.open(root), "perplexity")
    assert "\n" not in str(info.value)
    _reseal(root, sections={"perplexity": {"ppl_cutoffs": {}, "typo": 1}})
    with pytest.raises(ArtifactError, match="section 'perplexity.typo'"):
        section(shards.open(root), "perplexity")


def test_a_section_edited_after_it_was_written_breaks_the_seal(tmp_path) -> None:
    root = _artifact(tmp_path / "s", manifest_sections([_perplexity()]))
    text = (root / MANIFEST).read_text()
    assert "120.5" in text
    (root / MANIFEST).write_text(text.replace("120.5", "121.5"))  # same size, one value changed
    with pytest.raises(ArtifactError, match="does not match its seal"):
        shards.open(root)


def _plain() -> Stage:
    from data_pipeline.stages.dedup import DedupStage

    return DedupStage()


def test_a_stage_returning_another_model_is_refused_before_writing() -> None:
    class Wrong(PerplexityStage):
        def manifest_section(self) -> StageSection:
            return StageSection()

    with pytest.raises(SchemaError, match="returned a StageSection, not its Section"):
        manifest_sections([Wrong()])
