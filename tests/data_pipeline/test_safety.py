"""Safety stage: URL blocklist (datatrove's bundled lists, offline), unsafe words, PII redaction."""

from __future__ import annotations

import socket
from pathlib import Path

import pyarrow as pa
import pytest

from data_pipeline.stages.pii import KINDS as PII_KINDS
from data_pipeline.stages.registry import schema_for, stage_class
from data_pipeline.stages.safety import (
    SafetyConfig,
    SafetyStage,
    UnsafeWords,
    UrlBlocklist,
    pii_struct,
    unsafe_score,
)
from pretrain.errors import ConfigError
from pretrain.schema import BASE_FIELDS

CLEAN = (
    "The committee met on Tuesday to review the budget for the new library. Members agreed "
    "that the reading room needs better lighting and more seats for students."
)


def make_batch(texts: list[str | None], urls: list[str | None]) -> pa.Table:
    n = len(texts)
    columns = {
        "id": [f"d{i}" for i in range(n)],
        "text": texts,
        "url": urls,
        "source": ["test"] * n,
        "meta": [None] * n,
        "split": ["train"] * n,
    }
    return pa.Table.from_pydict(columns, schema=pa.schema(BASE_FIELDS))


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("pretrain-cache"))


@pytest.fixture(scope="module")
def stage(cache_dir) -> SafetyStage:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PRETRAIN_CACHE", cache_dir)
        stage = stage_class("safety")()
        stage.setup()  # hashes datatrove's bundled 4.5M-domain list once, caches it
    return stage


@pytest.mark.timeout(120)
def test_stage_contract_redacts_text_and_tags_rows(stage):
    batch = make_batch(
        [CLEAN, "Write to li.na@example.cn or call 13800138000.", None, CLEAN],
        ["https://library.example.org/news", None, None, "https://www.pornhub.com/view"],
    )
    out = stage(batch)
    declared = schema_for(["safety"])  # base columns, then each stage's declared ones
    assert (out.schema.names, out.schema.types) == (declared.names, declared.types)
    assert out.num_rows == 4
    texts = out.column("text").to_pylist()
    assert texts[0] == CLEAN
    assert texts[1] == "Write to <EMAIL> or call <PHONE>."
    assert texts[2] is None
    counts = out.column("pii_counts").to_pylist()
    assert counts[1] == pii_struct({"email": 1, "phone": 1})
    assert counts[1]["email"] == 1 and counts[1]["card"] == 0
    assert counts[0] == pii_struct({})  # checked, none found: every kind 0
    assert out.column("url_blocked").to_pylist() == [False, False, False, True]
    assert out.column("safety_reason").to_pylist() == [None, None, None, "url_blocklist"]


def test_bundled_blocklist_rules(stage):
    blocklist = stage._blocklist
    assert blocklist.reason("https://www.pornhub.com/") == "domain"
    assert blocklist.reason("http://0-1avsex.com/index.html") == "domain"
    assert blocklist.reason("https://example.com/free-porn-videos") == "word"
    assert blocklist.reason("https://docs.python.org/3/library/re.html") is None
    assert blocklist.reason("https://www.bbc.co.uk/news") is None
    assert blocklist.reason(None) is None


def test_domain_hashes_are_cached_and_reused(stage, cache_dir, monkeypatch):
    cached = list(Path(cache_dir).glob("url-domains-*.npy"))
    assert len(cached) == 1
    monkeypatch.setenv("PRETRAIN_CACHE", cache_dir)
    again = UrlBlocklist(bundled=True)  # loads the .npy instead of re-hashing
    assert len(again._domains) == len(stage._blocklist._domains) > 4_000_000
    assert again.reason("http://0-1avsex.com/") == "domain"


def test_blocklist_needs_no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("network access attempted")

    monkeypatch.setattr(socket, "socket", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    blocklist = UrlBlocklist(bundled=False, extra_domains=["bad.example"])
    assert blocklist.reason("https://shop.bad.example/x") == "domain"
    assert blocklist.reason("https://good.example/x") is None


def test_unsafe_words_whole_words_categories_and_chinese():
    words = UnsafeWords()
    assert words.hits("The class assessed Scunthorpe's cocktails and grapes.") == {}
    assert words.hits("What a fucking mess, you bastard.") == {"profanity": 2}
    assert words.hits("他妈的，你这个傻逼") == {"profanity": 2}
    assert words.hits("可能性很大，刚度不足，成人教育") == {}  # common words are not matched
    assert words.hits("neonazi rally") == {"extremism": 1}


def test_unsafe_score_is_documented_formula():
    weights = {"sexual": 1.0}
    assert unsafe_score({}, 100, weights) == 0.0
    assert unsafe_score({"sexual": 1}, 100, weights) == pytest.approx(0.3935, abs=1e-3)
    assert unsafe_score({"sexual": 1}, 1000, weights) < unsafe_score({"sexual": 3}, 1000, weights)
    assert unsafe_score({"sexual": 50}, 100, weights) < 1.0


def test_unsafe_words_set_reason_and_categories(stage):
    row = stage.document("You are a fucking bastard and a slut, you shit.", None)
    assert row["safety_reason"] == "unsafe_words"
    assert row["unsafe_categories"] == ["profanity", "sexual"]
    assert row["unsafe_score"] > 0.9
    assert stage.document(CLEAN, None)["unsafe_score"] == 0.0


def test_config_switches_and_errors():
    stage = SafetyStage(
        SafetyConfig(
            url_blocklist=False,
            redact_pii=False,
            unsafe_words=False,
            extra_blocked_domains=("blocked.test",),
        )
    )
    row = stage.document("mail a@b.io", "http://www.blocked.test/page")
    assert row["text"] == "mail a@b.io"
    assert row["pii_counts"] == dict.fromkeys(PII_KINDS)  # not checked: null, not 0
    assert row["url_blocked"] is True
    with pytest.raises(ConfigError, match="pii_kinds"):
        SafetyStage(SafetyConfig(url_blocklist=False, pii_kinds=("ssn",))).setup()


def test_stage_pickles_without_its_lists(stage):
    import pickle

    payload = pickle.dumps(stage)
    assert len(payload) < 10_000  # the 4.5M-domain list stays on the worker
    clone = pickle.loads(payload)
    assert clone.document("mail a@b.io", None)["text"] == "mail <EMAIL>"


GERMAN_PAGE = (
    "Liebe Kundinnen und Kunden, unser Kundendienst in Berlin ist ab sofort telefonisch unter "
    "+49 30 12345678 erreichbar, die Filiale in der Innenstadt unter 030 1234567. Im Jahr 2023 "
    "kostete das Abonnement 19,99 EUR im Monat. Die neue Version 2.4.1 der App erschien am "
    "12.03.2024 und kann kostenlos heruntergeladen werden. Wir freuen uns auf Ihren Anruf."
)
ENGLISH_PAGE = (
    "Dear customers, our help desk is open from Monday to Friday. Please write to "
    "help@example.org or call (415) 555-0132 if you have a question about your order. The "
    "price of the annual plan stays at $129 in 2024, and version 3.1 of the app is out now."
)


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_data_run_redacts_by_language_and_totals_pii_in_ledger_and_manifest(
    ray_local, cache_dir, tmp_path, monkeypatch
):
    import json

    from data_pipeline.config import PipelineConfig
    from data_pipeline.runner import run_pipeline
    from pretrain.manifest import require

    monkeypatch.setenv("PRETRAIN_CACHE", cache_dir)
    source = tmp_path / "in" / "pages.jsonl"
    source.parent.mkdir()
    docs = [GERMAN_PAGE, ENGLISH_PAGE, GERMAN_PAGE.replace("Berlin", "Hamburg"), CLEAN]
    source.write_text("".join(json.dumps({"text": t}) + "\n" for t in docs))
    out = tmp_path / "out"
    config = PipelineConfig.model_validate(
        {
            "inputs": [str(source.parent)],
            "output": str(out),
            "stages": {"extract": {}, "langid": {}, "safety": {"url_blocklist": False}},
            "ray": {"timeout_s": 250},
        }
    )
    result = run_pipeline(config, progress=False)
    import pyarrow.parquet as pq

    table = pq.read_table(out / "data").sort_by("id")
    langs = table.column("lang").to_pylist()
    assert langs.count("de") == 2, langs
    for text, lang in zip(table.column("text").to_pylist(), langs, strict=True):
        if lang == "de":
            assert "12345678" not in text and "1234567" not in text, text
            assert (
                "2023" in text and "19,99 EUR" in text and "2.4.1" in text and "12.03.2024" in text
            )
    expected = {"email": 1, "cn_id": 0, "card": 0, "ipv6": 0, "ipv4": 0, "phone": 5}
    ledger = json.loads((out / "ledger.json").read_text())
    assert ledger["pii_redacted"] == expected == result.ledger["pii_redacted"]
    assert require(out, kind="shards")["counts"]["pii_redacted"] == expected
