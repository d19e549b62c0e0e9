"""`pretrain mixture export --megatron`: Megatron-Core's own blend parsing and builder read what it
writes. The `--data-args-path` file, split as Megatron-LM splits it, goes through
`get_blend_from_list` into `BlendedMegatronDatasetBuilder`; the blend's samples per component are
our index's shares, and every exported prefix holds exactly its component's documents."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from pretrain.manifest import load_manifest, verify
from pretrain_app.cli import main
from tests.mixtures.conftest import mixture_config
from tests.tokenizer.tok_helpers import MegatronTokenizer

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def exported(encoded_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("megatron")
    config = root / "mix.yaml"
    config.write_text(yaml.safe_dump(mixture_config(encoded_dir, root / "mix")))
    assert main(["mixture", "build", str(config)]) == 0
    argv = ["mixture", "export", str(root / "mix"), "--megatron", "--out", str(root / "mega")]
    assert main(argv) == 0
    return root / "mix", root / "mega"


def test_exported_prefixes_hold_exactly_each_components_documents(
    exported: tuple[Path, Path], encoded_dir: Path
) -> None:
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    mixture, out = exported
    verify(out, deep=True)
    stems = load_manifest(encoded_dir)["prefixes"]
    sources = [IndexedDataset(str(encoded_dir / stem)) for stem in stems]
    for component in load_manifest(mixture)["components"]:
        docs = np.load(mixture / "components" / f"{component['name']}.npy")
        copy = IndexedDataset(str(out / component["name"]))
        assert len(copy) == len(docs) > 0
        for i, (prefix, doc) in enumerate(zip(docs["prefix"], docs["doc"], strict=True)):
            assert np.array_equal(copy[i], sources[int(prefix)][int(doc)])


def test_megatron_builder_reads_the_blend_with_our_shares(
    exported: tuple[Path, Path], tmp_path: Path
) -> None:
    import torch.distributed
    from megatron.core.datasets.blended_megatron_dataset_builder import (
        BlendedMegatronDatasetBuilder,
    )
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
    from megatron.core.datasets.utils import get_blend_from_list

    mixture, out = exported
    phase = load_manifest(mixture)["phases"][0]
    words = (out / f"0-{phase['name']}.data-args").read_text().split()  # as --data-args-path
    prefixes, weights = get_blend_from_list(words)
    assert [Path(p).name for p in prefixes] == ["web", "code", "books_hq"]
    index = np.load(mixture / phase["index"])
    ours = np.bincount(index["component"], minlength=3) / len(index)
    assert np.allclose(weights, ours)
    config = GPTDatasetConfig(
        random_seed=7,
        sequence_length=phase["seq_length"],
        tokenizer=MegatronTokenizer(65536, 0, 1, "synthetic"),
        blend=(prefixes, weights),
        split="100,0,0",
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        create_attention_mask=False,
        path_to_cache=str(tmp_path / "cache"),  # else Megatron writes into the export
    )
    # one gloo rank, as pretrain_gpt.py runs: Megatron's cached indices are built by rank 0
    torch.distributed.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1
    )
    try:
        train, _, _ = BlendedMegatronDatasetBuilder(
            GPTDataset, [len(index), 0, 0], lambda: True, config
        ).build()
    finally:
        torch.distributed.destroy_process_group()
    assert train is not None and len(train) == len(index)
    taken = np.bincount(train.dataset_index, minlength=3)
    assert np.abs(taken - ours * len(index)).max() <= 1  # Megatron's greedy blend, our shares
    assert all(len(train[i]["tokens"]) == phase["seq_length"] for i in range(0, len(train), 37))
