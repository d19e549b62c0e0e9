"""`MixtureDataset` reads the right tokens through Megatron's IndexedDataset and refuses tampering."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml

from mixtures.dataset import MixtureDataset
from pretrain.errors import ArtifactError, ConfigError
from pretrain_app.cli import main
from tests.mixtures.conftest import EOD, doc_tokens, make_encoded, mixture_config

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def mixture(tmp_path_factory: pytest.TempPathFactory, encoded_dir: Path) -> Path:
    root = tmp_path_factory.mktemp("mixture")
    config = mixture_config(encoded_dir, root / "mix")
    config["recipe"]["phases"] = [
        {"name": "main", "share": 0.8},
        {"name": "anneal", "share": 0.2, "seq_length": 16},
    ]
    (root / "mix.yaml").write_text(yaml.safe_dump(config))
    assert main(["mixture", "build", str(root / "mix.yaml")]) == 0
    return root / "mix"


def _selected_docs(encoded_dir: Path, domain: str, lang: str | None) -> dict[bytes, int]:
    """Whole documents (body + EOD) that a component selecting domain/lang may contain."""
    docs = {}
    for prefix in range(3):
        side = pq.read_table(encoded_dir / f"part-{prefix:05d}.docs.parquet").to_pandas()
        for row in side.itertuples():
            if row.split == "train" and row.domain == domain and (lang is None or row.lang == lang):
                docs[doc_tokens(prefix, row.doc_index, row.num_tokens).tobytes()] = row.num_tokens
    return docs


def test_contract_attributes_and_sample_shape(mixture: Path) -> None:
    ds = MixtureDataset(mixture)
    assert len(ds) == 256 and ds.seq_length == 32 and ds.global_batch == 16
    assert ds.component_names == ["web", "code", "books_hq"]
    assert len(ds.build_sha256) == len(ds.recipe_sha256) == len(ds.tokenizer_sha256) == 64
    sample = ds[5]
    assert sample["tokens"].dtype == np.int64 and sample["tokens"].shape == (33,)
    assert sample["component"] in (0, 1, 2)
    anneal = MixtureDataset(mixture, phase=1)
    assert anneal.seq_length == 16 and anneal[0]["tokens"].shape == (17,)
    with pytest.raises(IndexError):
        ds[len(ds)]


def test_one_epoch_of_a_component_is_each_selected_document_exactly_once(
    mixture: Path, encoded_dir: Path
) -> None:
    ds = MixtureDataset(mixture)
    web = 0
    size = ds.sequences_per_epoch[web]
    comps = np.asarray(ds._index["component"])
    rows = np.flatnonzero(comps == web)
    seqs = np.array([int(ds._index[i]["sequence"]) for i in rows])
    first_epoch = rows[seqs < size][np.argsort(seqs[seqs < size])]
    assert first_epoch.size == size, "the web component drew at least one full epoch"
    stream = np.concatenate([ds[int(i)]["tokens"][:-1] for i in first_epoch])
    expected = _selected_docs(encoded_dir, "web", "en")
    pieces = np.split(stream, np.flatnonzero(stream == EOD) + 1)
    whole = [p.astype(np.uint16).tobytes() for p in pieces if p.size and p[-1] == EOD]
    assert len(whole) == len(set(whole)), "a document repeated inside one epoch"
    assert set(whole) <= set(expected), "a document from outside the selection was read"
    # The windows cover the epoch's stream up to its last partial window (< 2 windows lost).
    covered = sum(len(piece) // 2 for piece in whole)
    assert sum(expected.values()) - 2 * 32 <= covered <= sum(expected.values())


def test_every_sample_is_made_of_its_components_documents(mixture: Path, encoded_dir: Path) -> None:
    ds = MixtureDataset(mixture)
    allowed = {
        0: _selected_docs(encoded_dir, "web", "en"),
        1: _selected_docs(encoded_dir, "code", None),
    }
    for i in range(0, len(ds), 7):
        sample = ds[i]
        if sample["component"] not in allowed:
            continue
        pieces = np.split(sample["tokens"], np.flatnonzero(sample["tokens"] == EOD) + 1)
        for piece in pieces[1:-1]:
            assert piece.astype(np.uint16).tobytes() in allowed[sample["component"]]


def test_pickles_for_dataloader_workers(mixture: Path) -> None:
    ds = MixtureDataset(mixture)
    clone = pickle.loads(pickle.dumps(ds))
    assert np.array_equal(clone[17]["tokens"], ds[17]["tokens"])


def test_tampered_index_is_refused(mixture: Path, tmp_path: Path) -> None:
    copy = tmp_path / "mix"
    shutil.copytree(mixture, copy)
    path = copy / "index" / "0-main.npy"
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match="0-main.npy does not match its sha256"):
        MixtureDataset(copy)


def test_other_encoded_data_is_refused(mixture: Path, tmp_path: Path) -> None:
    other = make_encoded(tmp_path / "other", prefixes=3, docs=60, seed=1)
    with pytest.raises(ArtifactError, match="has manifest sha256"):
        MixtureDataset(mixture, encoded_dir=other)


def test_unknown_phase_is_a_one_line_error(mixture: Path) -> None:
    with pytest.raises(ConfigError, match=r"phase 2 is out of range .* \(main, anneal\)"):
        MixtureDataset(mixture, phase=2)
