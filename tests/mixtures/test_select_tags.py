"""A recipe selects on any tag a stage declares (`Stage.tags`), typed by its declaration, and a
recipe written before that keeps its hash (and so every mixture locked on it stays valid).

The declared tags come from a plugin stage installed in a temporary directory (a module and its
dist-info with a `pretrain.stages` entry point, what `pip install` leaves): no project file names
them. The sidecars are the synthetic encoded artifact's, with the plugin's columns appended as
the encoder copies them; selections are compared with an independent pandas filter."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from data_pipeline.stages import registry as stage_registry
from mixtures.recipe import MixtureConfig, Recipe, build_sha256, recipe_sha256
from mixtures.selection import load_sidecars, select_components, select_sha256
from pretrain.config import parse_config
from pretrain.errors import ConfigError
from tests.mixtures.conftest import mixture_config

pytestmark = pytest.mark.timeout(120)

PLUGIN = """
import pyarrow as pa

from data_pipeline.stages.base import Stage


class ToyTags(Stage):
    name = "toytags"
    order = 57
    columns = (
        pa.field("toy_kind", pa.string()),
        pa.field("toy_flag", pa.bool_()),
        pa.field("toy_score", pa.float32()),
        pa.field("toy_len", pa.int32()),
        pa.field("toy_note", pa.string()),
    )
    tags = ("toy_kind", "toy_flag", "toy_score", "toy_len")

    def __call__(self, batch):
        raise NotImplementedError("only its declaration is used here")
"""
PREFIXES = [f"part-{p:05d}" for p in range(3)]

# Recorded with the recipe code before declared tags could be selected (main at 9322f07): a
# recipe's hash is what an ablation's gate compares and what a locked mixture's build hash holds.
EVERY_CLAUSE = {
    "name": "every-clause",
    "components": [
        {
            "name": "web",
            "weight": 0.6,
            "max_epochs": 2,
            "select": {
                "domain": ["news", "wiki"],
                "lang": "en",
                "source": ["web/*"],
                "ppl_bucket": ["head"],
                "quality_score": {"min": 0.5},
                "perplexity": {"max": 900.5},
                "unsafe_score": {"min": None, "max": 0.2},
                "url_blocked": False,
                "dup_keep": True,
            },
        },
        {"name": "rest", "weight": 0.4},
    ],
    "phases": [
        {"name": "main", "share": 0.9},
        {"name": "anneal", "share": 0.1, "seq_length": 64, "weights": {"web": 1.0}},
    ],
}
EVERY_CLAUSE_SHA = "049aacb3490011ad52f103ebbe2bf89cff9c5638f5fe6f711b31cd59d9b21f85"
EVERY_CLAUSE_SELECTS = [
    "46b1220a83bb7365feeadcf84573f6cc5795b98f8208559bdcb59bd5eed266a2",
    "e18327ab1d68d0da26aa38573ae8576d9260dd93ffe70f129848a4002ac7a7b9",
]
TEST_MIX_SHA = "237806a1f955485498ebef8c39982f869ed11c5465a5de9977240982a223f79d"
TEST_MIX_BUILD_SHA = "8f90d42870fd7a8d12fad9e18d37e6b09402417f45315b8f856c3a7b71a8cb14"


@pytest.fixture()
def toy_tags(tmp_path, monkeypatch):
    """The registry as a process with the plugin installed sees it (cache cleared around)."""
    site = tmp_path / "site"
    info = site / "toy_tags-0.1.dist-info"
    info.mkdir(parents=True)
    (site / "toy_tags.py").write_text(PLUGIN, encoding="utf-8")
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-tags\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[pretrain.stages]\ntoytags = toy_tags:ToyTags\n")
    monkeypatch.syspath_prepend(str(site))
    stage_registry.registry.cache_clear()
    yield
    monkeypatch.undo()
    sys.modules.pop("toy_tags", None)
    stage_registry.registry.cache_clear()


@pytest.fixture()
def tagged_dir(encoded_dir: Path, tmp_path: Path) -> Path:
    """The synthetic encoded artifact with the plugin's tags in its sidecars (nulls planted)."""
    out = tmp_path / "enc"
    shutil.copytree(encoded_dir, out)
    for p, stem in enumerate(PREFIXES):
        path = out / f"{stem}.docs.parquet"
        table = pq.read_table(path)
        i = np.arange(table.num_rows)
        columns = {
            "toy_kind": pa.array([None if k % 13 == 4 else "abc"[(k + p) % 3] for k in i]),
            "toy_flag": pa.array([None if k % 19 == 2 else bool(k % 4) for k in i]),
            "toy_score": pa.array((i * 37 + p) % 100 / 100, pa.float32()),
            "toy_len": pa.array((i * 7 + p) % 50, pa.int32()),
        }
        for name, column in columns.items():
            table = table.append_column(name, column)
        pq.write_table(table, path)
    return out


def _frame(encoded: Path) -> pd.DataFrame:
    parts = [
        pq.read_table(encoded / f"{stem}.docs.parquet").to_pandas().assign(prefix=p)
        for p, stem in enumerate(PREFIXES)
    ]
    return pd.concat(parts, ignore_index=True)


def _frame_true(series: pd.Series) -> pd.Series:
    return series.fillna(False).astype(bool)


CASES = [
    ({"toy_kind": ["a", "c"]}, lambda f: f.toy_kind.isin(["a", "c"])),
    ({"toy_kind": "b", "lang": "en"}, lambda f: (f.toy_kind == "b") & (f.lang == "en")),
    ({"toy_flag": False}, lambda f: _frame_true(f.toy_flag == False)),  # noqa: E712
    ({"toy_score": {"min": 0.25, "max": 0.5}}, lambda f: f.toy_score.between(0.25, 0.5)),
    (
        {"toy_len": {"max": 9}, "toy_flag": True, "domain": "web"},
        lambda f: (f.toy_len <= 9) & _frame_true(f.toy_flag == True) & (f.domain == "web"),  # noqa: E712
    ),
]


@pytest.mark.parametrize(("select", "expected"), CASES)
def test_a_declared_tag_is_selected_by_its_declared_type(
    toy_tags, tagged_dir: Path, select: dict, expected
) -> None:
    frame = _frame(tagged_dir)
    recipe = Recipe.model_validate({"components": [{"name": "c", "select": select, "weight": 1}]})
    (docs,) = select_components(list(recipe.components), load_sidecars(tagged_dir, PREFIXES))
    want = frame[expected(frame) & (frame.split != "eval")]
    got = set(zip(docs["prefix"].tolist(), docs["doc"].tolist(), strict=True))
    assert got == set(zip(want.prefix, want.doc_index, strict=True))
    assert got, "the case selects something"


def test_a_recipe_hashes_as_its_canonical_dump() -> None:
    recipe = Recipe.model_validate(EVERY_CLAUSE)
    assert recipe_sha256(recipe) == EVERY_CLAUSE_SHA
    assert [select_sha256(c) for c in recipe.components] == EVERY_CLAUSE_SELECTS
    config = MixtureConfig.model_validate(mixture_config(Path("/enc"), Path("/out")))
    assert recipe_sha256(config.recipe) == TEST_MIX_SHA
    assert build_sha256(config, tokenizer_sha256="a" * 64, encoded_sha256="b" * 64) == (
        TEST_MIX_BUILD_SHA
    )
    assert "tags" not in config.model_dump(mode="json")["recipe"]["components"][0]["select"]


def test_a_declared_tag_clause_is_in_the_hash_and_round_trips(toy_tags) -> None:
    base = {"components": [{"name": "c", "select": {"lang": "en"}, "weight": 1}]}
    plain = Recipe.model_validate(base)
    tagged = Recipe.model_validate(
        {
            "components": [
                {"name": "c", "select": {"lang": "en", "toy_len": {"min": 3}}, "weight": 1}
            ]
        }
    )
    dumped = tagged.model_dump(mode="json")
    select = dumped["components"][0]["select"]
    assert select["toy_len"] == {"min": 3.0, "max": None} and "tags" not in select  # flat
    again = Recipe.model_validate(dumped)
    assert again == tagged and recipe_sha256(again) == recipe_sha256(tagged)
    assert recipe_sha256(tagged) != recipe_sha256(plain)
    other = {"components": [{"name": "c", "select": {"lang": "en", "toy_len": {"min": 4}}}]}
    other["components"][0]["weight"] = 1
    assert recipe_sha256(Recipe.model_validate(other)) != recipe_sha256(tagged)


@pytest.mark.parametrize(
    ("select", "message"),
    [
        (
            {"toy_knd": ["a"]},
            r"unknown tag 'toy_knd': no stage declares it; the tags are domain, lang, source, "
            r".*dup_keep, toy_kind, toy_flag, toy_score, toy_len \(",
        ),
        ({"toy_note": "x"}, r"unknown tag 'toy_note'"),  # a column, not a declared tag
        ({"tags": {"toy_kind": "a"}}, r"unknown tag 'tags'"),  # no back door around the types
        ({"toy_flag": "yes"}, r"tag 'toy_flag' is bool: its clause takes true or false"),
        ({"toy_len": [3, 4]}, r"tag 'toy_len' is int32: its clause takes a range"),
        ({"toy_score": {"min": 1, "mx": 2}}, r"tag 'toy_score' is float: its clause takes a range"),
        ({"toy_kind": {"min": 1}}, r"tag 'toy_kind' is string: its clause takes a value or a list"),
    ],
)
def test_a_clause_no_declaration_allows_is_one_line(toy_tags, select: dict, message: str) -> None:
    data = mixture_config(Path("/enc"), Path("/out"))
    data["recipe"]["components"][0]["select"] = select
    with pytest.raises(ConfigError, match=message) as caught:
        parse_config(MixtureConfig, data, source="mix.yaml")
    text = str(caught.value)
    assert "\n" not in text and text.startswith("mix.yaml: recipe.components.0.select")


def test_without_the_plugin_its_tag_is_unknown(tmp_path: Path) -> None:
    stage_registry.registry.cache_clear()
    data = mixture_config(Path("/enc"), Path("/out"))
    data["recipe"]["components"][0]["select"] = {"toy_kind": "a"}
    with pytest.raises(ConfigError, match=r"unknown tag 'toy_kind'.*plugin installed"):
        parse_config(MixtureConfig, data)
