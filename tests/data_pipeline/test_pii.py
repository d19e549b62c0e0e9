"""PII detection and redaction: precision/recall on the labelled set, checksums, redaction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from data_pipeline.stages.pii import (
    DETECTORS,
    KINDS,
    cn_id_valid,
    find_pii,
    luhn_valid,
    possible_kinds,
    redact,
)

LABELLED = Path(__file__).resolve().parents[1] / "data" / "pii" / "labelled.jsonl"


def load_labelled() -> list[dict]:
    return [json.loads(line) for line in LABELLED.read_text("utf-8").splitlines()]


def score(rows: list[dict]) -> tuple[dict[str, list[int]], int]:
    """Per kind [true positives, false positives, false negatives] (exact span match)."""
    table = {kind: [0, 0, 0] for kind in KINDS}
    for row in rows:
        gold = {(s["start"], s["end"], s["kind"]) for s in row["spans"]}
        got = {(s.start, s.end, s.kind) for s in find_pii(row["text"])}
        for _, _, kind in gold & got:
            table[kind][0] += 1
        for _, _, kind in got - gold:
            table[kind][1] += 1
        for _, _, kind in gold - got:
            table[kind][2] += 1
    return table, len(rows)


def test_labelled_set_is_big_and_has_hard_negatives():
    rows = load_labelled()
    assert len(rows) >= 100
    assert sum(not r["spans"] for r in rows) >= 50
    assert {s["kind"] for r in rows for s in r["spans"]} == set(KINDS)
    for row in rows:
        for span in row["spans"]:
            assert (
                row["text"][span["start"] : span["end"]].strip()
                == row["text"][span["start"] : span["end"]]
            )


def test_precision_and_recall_on_labelled_set():
    table, _ = score(load_labelled())
    tp = sum(v[0] for v in table.values())
    fp = sum(v[1] for v in table.values())
    fn = sum(v[2] for v in table.values())
    assert tp / (tp + fp) >= 0.95
    assert tp / (tp + fn) >= 0.95
    for kind, (k_tp, _k_fp, k_fn) in table.items():
        assert k_tp / (k_tp + k_fn) >= 0.9, kind


def test_checksums():
    assert cn_id_valid("11010519491231002X")
    assert not cn_id_valid("110105194912310021")
    assert luhn_valid("4111111111111111")
    assert not luhn_valid("4111111111111112")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Mail jane@example.com now.", "Mail <EMAIL> now."),
        ("我的手机号是13800138000，谢谢。", "我的手机号是<PHONE>，谢谢。"),
        ("身份证 11010519491231002X 已登记", "身份证 <CN_ID> 已登记"),
        ("身份证 110105194912310021 已登记", "身份证 110105194912310021 已登记"),
        ("pay with 4111 1111 1111 1111 today", "pay with <CARD> today"),
        ("ssh 10.1.2.3 or 2001:db8::7.", "ssh <IPV4> or <IPV6>."),
        ("Linux version 5.10.0.8 is fine", "Linux version 5.10.0.8 is fine"),
    ],
)
def test_redact_rewrites_text_with_placeholders(text, expected):
    assert redact(text)[0] == expected


def test_redact_counts_per_kind_and_respects_kinds():
    text = "a@b.io, c@d.io, 13800138000 and 8.8.8.8"
    redacted, counts = redact(text)
    assert counts == {"email": 2, "phone": 1, "ipv4": 1}
    assert find_pii(redacted) == []
    only_mail, counts = redact(text, kinds=["email"])
    assert counts == {"email": 2}
    assert "13800138000" in only_mail


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                "hello",
                " ",
                "x@y.com",
                "13912345678",
                "v1.2.3.4",
                "2024-01-02",
                "192.168.0.1",
                "。",
                "4111111111111111",
                "abc",
                "12:30:45",
            ]
        ),
        max_size=12,
    )
)
def test_redaction_leaves_no_detectable_pii(parts):
    redacted, counts = redact(" ".join(parts))
    assert find_pii(redacted) == []
    assert "x@y.com" not in redacted
    assert all(n > 0 for n in counts.values())


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="0123456789 -.:()+@abcdefxX", max_size=60))
def test_prefilter_never_hides_a_match(text):
    kinds = possible_kinds(text)
    for kind, (pattern, validate) in DETECTORS.items():
        if any(validate(text, match) for match in pattern.finditer(text)):
            assert kind in kinds, (kind, text)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab.@-_+x1 \n", max_size=120))
def test_fast_detectors_find_what_the_plain_patterns_find(text):
    from data_pipeline.stages import pii

    plain = {"email": pii._EMAIL, "phone": pii._PHONE, "ipv4": pii._IPV4, "card": pii._CARD}
    for kind, pattern in plain.items():
        fast = DETECTORS[kind][0]
        assert [m.span() for m in fast.finditer(text)] == [m.span() for m in pattern.finditer(text)]


MULTILINGUAL = LABELLED.with_name("multilingual.jsonl")
GERMAN = (
    "Unser Büro in Berlin ist telefonisch unter +49 30 12345678 erreichbar, die Filiale unter "
    "030 1234567. Im Jahr 2023 kostete das Abonnement 19,99 EUR im Monat, heute 1.299,00 € im "
    "Jahr. Version 2.4.1.3 erschien am 12.03.2024; PLZ 10115."
)


def test_german_numbers_are_redacted_in_a_german_document():
    redacted, counts = redact(GERMAN, lang="de")
    assert "+49 30 12345678" not in redacted and "030 1234567" not in redacted
    assert counts == {"phone": 2}
    for kept in ("2023", "19,99 EUR", "1.299,00 €", "2.4.1.3", "12.03.2024", "10115"):
        assert kept in redacted, kept


def test_national_formats_follow_the_language_tag():
    assert redact("Fax 030 1234567 bitte.", lang="de")[0] == "Fax <PHONE> bitte."
    assert redact("Fax 030 1234567 bitte.", lang="deu_Latn")[0] == "Fax <PHONE> bitte."
    assert redact("Fax 030 1234567 please.", lang="en")[1] == {}  # not a US or UK number
    assert redact("Call +49 30 12345678 today.", lang=None)[1] == {"phone": 1}  # E.164: any


@pytest.mark.parametrize("lang", ["en", "de", "fr", "es", "zh"])
def test_multilingual_set_precision_and_recall(lang):
    rows = [json.loads(x) for x in MULTILINGUAL.read_text("utf-8").splitlines()]
    rows = [r for r in rows if r["lang"] == lang]
    assert sum(bool(r["spans"]) for r in rows) >= 5 and sum(not r["spans"] for r in rows) >= 5
    tp = fp = fn = 0
    for row in rows:
        gold = {(s["start"], s["end"], s["kind"]) for s in row["spans"]}
        got = {(s.start, s.end, s.kind) for s in find_pii(row["text"], lang=lang)}
        tp, fp, fn = tp + len(gold & got), fp + len(got - gold), fn + len(gold - got)
    assert tp / (tp + fp) >= 0.95 and tp / (tp + fn) >= 0.95, (tp, fp, fn)
