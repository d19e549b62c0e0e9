"""`build.decontaminate`: training documents an eval set found to be near-copies never enter."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from pretrain.manifest import load_manifest, write_manifest
from pretrain_app.cli import main
from tests.mixtures.conftest import mixture_config

pytestmark = pytest.mark.timeout(120)


def _evalset(path: Path, train_ids: list[str]) -> Path:
    path.mkdir(parents=True)
    pq.write_table(pa.table({"train_id": train_ids}), path / "contaminated.parquet")
    write_manifest(path, "evalset", counts={"contaminated": len(train_ids)})
    return path


def _web_training_ids(encoded: Path) -> list[str]:
    ids = []
    for sidecar in sorted(encoded.glob("*.docs.parquet")):
        rows = pq.read_table(sidecar, columns=["id", "domain", "lang", "split"]).to_pylist()
        ids += [
            r["id"]
            for r in rows
            if r["domain"] == "web" and r["lang"] == "en" and r["split"] != "eval"
        ]
    return ids


def test_contaminated_documents_are_excluded_and_recorded(tmp_path: Path, encoded_dir: Path):
    web_ids = _web_training_ids(encoded_dir)
    dirty = web_ids[:5]
    evalset = _evalset(tmp_path / "evalset", dirty + ["not-a-training-doc"])
    clean_cfg = mixture_config(encoded_dir, tmp_path / "clean")
    dirty_cfg = mixture_config(encoded_dir, tmp_path / "dirty", decontaminate=[str(evalset)])
    for name, cfg in (("clean", clean_cfg), ("dirty", dirty_cfg)):
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(cfg))
        assert main(["mixture", "build", str(tmp_path / f"{name}.yaml")]) == 0
    clean, dirty_manifest = load_manifest(tmp_path / "clean"), load_manifest(tmp_path / "dirty")
    web = {c["name"]: c for c in clean["components"]}["web"]
    web_decon = {c["name"]: c for c in dirty_manifest["components"]}["web"]
    assert web_decon["documents"] == web["documents"] - len(dirty)
    assert dirty_manifest["decontaminated"]["excluded_ids"] == len(dirty) + 1
    assert dirty_manifest["recipe_sha256"] == clean["recipe_sha256"]
    assert dirty_manifest["build_sha256"] != clean["build_sha256"]
    assert any(i["kind"] == "evalset" for i in dirty_manifest["inputs"])
