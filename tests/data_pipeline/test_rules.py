"""Rule-signals stage: contract, reasons, CJK/code awareness, and parity with datatrove's filters."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from data_pipeline.stages.registry import schema_for, stage_class
from data_pipeline.stages.rules import RulesConfig, RulesStage
from data_pipeline.stages.rules_text import NGrams
from pretrain.config import parse_config
from pretrain.errors import ConfigError
from pretrain.schema import BASE_FIELDS

PROSE = """The river town wakes slowly in the winter, and the ferry is the first thing to move.
Its engine coughs twice before it settles into a steady rhythm that carries across the water.
Fishermen who have worked these banks for decades say that the current has changed since the dam.
They point to the sandbars that appear each spring in places where there used to be deep pools.
Scientists from the university have measured the flow, and their numbers agree with the old men.
The town council has asked for money to dredge the channel, but the request has been delayed.
In the meantime, the ferry captain reads the river every morning with the care of a scholar.
He knows that a mistake could strand his boat and the twenty cars that depend on it each day.
Children wave at him from the landing, and he answers with a short blast of the horn."""

CHINESE = """河流小镇的冬天醒得很慢，渡船是第一个开始移动的东西。
它的发动机咳嗽两次，然后进入稳定的节奏，声音传过水面。
在这些河岸工作了几十年的渔民说，自从修了大坝以后，水流已经改变了。
他们指着每年春天出现的沙洲，那里过去是很深的水潭。
大学的科学家测量了水流，他们的数据和老人们说的一致。
镇议会申请了资金来疏浚航道，但是这个请求被推迟了。
与此同时，渡船的船长每天早上都像学者一样仔细地观察河流。
他知道一个错误就可能让他的船搁浅，而每天有二十辆车依靠这条船。
孩子们在码头上向他挥手，他用一声短促的汽笛回应他们。"""

PYTHON = '''import os


def list_files(root):
    """Return every file below root."""
    found = []
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            found.append(os.path.join(dirpath, name))
    return found


if __name__ == "__main__":
    print(len(list_files(".")))
'''


def make_batch(
    texts: list[str | None],
    langs: list[str | None] | None = None,
    domains: list[str | None] | None = None,
) -> pa.Table:
    n = len(texts)
    columns = {
        "id": [f"d{i}" for i in range(n)],
        "text": texts,
        "url": [None] * n,
        "source": ["test"] * n,
        "meta": [None] * n,
        "split": ["train"] * n,
    }
    table = pa.Table.from_pydict(columns, schema=pa.schema(BASE_FIELDS))
    if langs is not None:
        table = table.append_column(pa.field("lang", pa.string()), pa.array(langs, pa.string()))
    if domains is not None:
        table = table.append_column(pa.field("domain", pa.string()), pa.array(domains, pa.string()))
    return table


@pytest.mark.timeout(120)
def test_a_crafted_document_is_one_timeout_row_within_its_limit():
    """Words of 999 '!' make the sentence regex backtrack quadratically inside one C call: 5 MB of
    them cost about a minute of CPU. With a 1 s limit the document is a timeout row (null signals)
    within seconds, and the ordinary document after it keeps its signals."""
    import time

    crafted = " ".join(["!" * 999] * 5000) + " end."
    stage = RulesStage(RulesConfig(timeout_s=1.0))
    started = time.monotonic()
    out = stage(make_batch([crafted, PROSE]))
    assert time.monotonic() - started < 60  # wall, on a loaded 2-core machine; ~65 s CPU before
    assert out.column("rules_reason").to_pylist() == ["timeout", None]
    assert out.column("num_words").to_pylist()[0] is None
    assert out.column("num_words").to_pylist()[1] > 150
    declared = schema_for(["rules"])  # base columns, then each stage's declared ones
    assert (out.schema.names, out.schema.types) == (declared.names, declared.types)


def reason(text: str, **kwargs) -> str | None:
    config = kwargs.pop("config", None)
    stage = RulesStage(config)
    return stage.signals(text, **kwargs)["rules_reason"]


def test_stage_contract_appends_registered_columns_and_keeps_rows():
    stage = stage_class("rules")()
    stage.setup()
    out = stage(make_batch([PROSE, "", None, "lorem ipsum dolor sit amet. " * 3]))
    declared = schema_for(["rules"])  # base columns, then each stage's declared ones
    assert (out.schema.names, out.schema.types) == (declared.names, declared.types)
    assert out.num_rows == 4
    assert out.column("id").to_pylist() == ["d0", "d1", "d2", "d3"]
    reasons = out.column("rules_reason").to_pylist()
    assert reasons[0] is None
    assert reasons[1] == reasons[2] == "empty"
    assert out.column("num_words").to_pylist()[0] > 150
    assert stage.describe()["name"] == "rules"


def test_good_prose_passes_with_plausible_signals():
    signals = RulesStage().signals(PROSE)
    assert signals["rules_reason"] is None
    assert 3.5 < signals["mean_word_length"] < 6
    assert signals["stop_word_count"] >= 5
    assert signals["dup_line_frac"] == 0
    assert signals["line_punct_ratio"] == 1.0
    assert signals["garbled_ratio"] == 0
    assert signals["log_like_ratio"] == 0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("\n".join(PROSE.splitlines()[:2]), "gopher_too_few_words"),
        (
            PROSE + "\nLorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod.",
            "c4_lorem_ipsum",
        ),
        (
            PROSE + "\nThe config block is { a: 1 } and it is here to stay for good.",
            "c4_curly_bracket",
        ),
        ("\n".join(["Buy cheap watches online today now."] * 30), "gopher_dup_line_frac"),
        ("\n\n".join(PROSE.splitlines()[:3] * 3), "gopher_dup_para_frac"),
        (PROSE.replace(".", ""), "c4_too_few_sentences"),
        ("\n".join(f"- {line}" for line in PROSE.splitlines()), "gopher_too_many_bullets"),
    ],
)
def test_first_failing_clause_is_named(text, expected):
    assert reason(text) == expected


def test_fineweb_clause_on_raw_text_when_c4_is_off():
    lines = PROSE.replace(".", "").splitlines()
    config = RulesConfig.model_validate({"c4": {"enabled": False}})
    assert reason("\n".join(lines), config=config) == "fineweb_line_punct"


def test_thresholds_come_from_config_and_typos_are_refused():
    short = "\n".join(PROSE.splitlines()[:2])
    config = parse_config(RulesConfig, {"gopher_quality": {"min_doc_words": 3}})
    assert reason(short) == "gopher_too_few_words"
    assert reason(short, config=config) != "gopher_too_few_words"
    with pytest.raises(ConfigError, match="min_doc_wrds"):
        parse_config(RulesConfig, {"gopher_quality": {"min_doc_wrds": 3}})


def test_chinese_is_counted_by_characters():
    aware = RulesStage().signals(CHINESE, lang="zh")
    assert aware["rules_reason"] is None
    cjk_chars = sum(1 for ch in CHINESE if "\u4e00" <= ch <= "\u9fff")
    assert abs(aware["num_words"] - cjk_chars / 2) <= 10
    assert aware["stop_word_count"] >= 5
    naive = RulesStage(RulesConfig(script_aware=False)).signals(CHINESE, lang="zh")
    assert naive["rules_reason"] is not None  # as datatrove's English rules would judge it
    assert naive["num_words"] < 50


def test_missing_language_tag_detects_cjk_script():
    assert RulesStage().signals(CHINESE, lang=None)["rules_reason"] is None


def test_code_is_not_judged_by_prose_rules():
    assert reason(PYTHON, domain="code") is None
    assert reason(PYTHON, domain=None) is not None
    minified = "var a=1;" * 400
    assert reason(minified, domain="code") == "code_long_line"
    off = RulesConfig(code_aware=False)
    assert reason(PYTHON, domain="code", config=off) is not None


def test_math_keeps_its_curly_brackets():
    latex = PROSE + "\nWe define the set {x : x > 0} of positive numbers in this chapter."
    assert reason(latex, domain="math") is None
    assert reason(latex, domain=None) == "c4_curly_bracket"


def test_garbled_and_log_like_text_are_flagged():
    mojibake = PROSE.replace("the", "thÃ©").replace("a ", "â€™ ")
    signals = RulesStage().signals(mojibake)
    assert signals["rules_reason"] == "garbled_text"
    assert signals["garbled_ratio"] > 0.01
    assert RulesStage().signals(PROSE + "\ufffd" * 40)["rules_reason"] == "garbled_text"
    log = "\n".join(
        f"2024-03-0{i % 9 + 1} 12:00:{i:02d} INFO worker {i} finished task in 3 ms"
        for i in range(40)
    )
    signals = RulesStage().signals(log)
    assert signals["rules_reason"] == "log_like"
    assert signals["log_like_ratio"] == 1.0


def test_null_tags_mean_unknown_prose():
    stage = RulesStage()
    out = stage(make_batch([PROSE, CHINESE], langs=[None, "zh"], domains=[None, None]))
    assert out.column("rules_reason").to_pylist() == [None, None]


# -- parity with datatrove's own filters (the reference implementation) -----------------------


def _datatrove_keeps(texts: list[str]) -> list[bool]:
    from datatrove.data import Document
    from datatrove.pipeline.filters import (
        C4QualityFilter,
        FineWebQualityFilter,
        GopherQualityFilter,
        GopherRepetitionFilter,
    )

    steps = (
        GopherRepetitionFilter(),
        GopherQualityFilter(),
        C4QualityFilter(),
        FineWebQualityFilter(),
    )
    kept = []
    for i, text in enumerate(texts):
        doc = Document(text=text, id=str(i))
        results = (step.filter(doc) for step in steps)  # lazily: stops at the first drop
        kept.append(all(r is True or (isinstance(r, tuple) and r[0]) for r in results))
    return kept


@pytest.mark.timeout(120)
def test_keep_drop_matches_datatrove_on_varied_documents():
    rng = random.Random(3)
    sentences = PROSE.splitlines()
    docs = [
        PROSE,
        CHINESE,
        PYTHON,
        "Short.",
        "\n".join(sentences * 2),
        PROSE.replace(".", ""),
        PROSE + "\nlorem ipsum dolor sit amet, it says here.",
        "\n".join(f"- item {i} of the list" for i in range(60)),
    ]
    for _ in range(12):
        docs.append("\n".join(rng.sample(sentences, k=rng.randint(2, len(sentences)))))
    config = RulesConfig(
        script_aware=False, code_aware=False, max_garbled_ratio=None, max_log_like_ratio=None
    )
    theirs = _datatrove_keeps(docs)
    ours = [RulesStage(config).signals(d)["rules_reason"] is None for d in docs]
    assert ours == theirs
    assert any(ours) and not all(ours)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from(["a", "bb", "ccc", "dd", "e"]), min_size=0, max_size=60),
    st.integers(min_value=2, max_value=10),
)
def test_ngram_counts_equal_datatrove(words, n):
    from datatrove.pipeline.filters.gopher_repetition_filter import (
        find_all_duplicate,
        find_top_duplicate,
        get_n_grams,
    )

    ngrams = NGrams(words)
    assert ngrams.dup_chars(n) == find_all_duplicate(words, n)
    grams = get_n_grams(words, n)
    expected = find_top_duplicate(grams) if grams else 0
    assert ngrams.top_chars(n) == expected


def test_stage_pickles_after_setup_for_ray_workers():
    import pickle

    stage = RulesStage(RulesConfig(max_log_like_ratio=0.9))
    stage.setup()
    clone = pickle.loads(pickle.dumps(stage))
    assert clone.config == stage.config
    assert clone.signals(PROSE) == stage.signals(PROSE)


GERMAN = """Der Fluss fließt im Winter langsam durch die alte Stadt am Rand der Berge.
Die Fähre ist jeden Morgen das erste Boot, das sich auf dem kalten Wasser bewegt.
Fischer, die seit Jahrzehnten hier arbeiten, sagen, dass sich die Strömung verändert hat.
Sie zeigen auf Sandbänke, die im Frühling dort auftauchen, wo früher tiefe Becken lagen.
Forscher der Universität haben den Durchfluss gemessen und bestätigen diese Beobachtung.
Der Gemeinderat hat Geld für das Ausbaggern beantragt, doch der Antrag wurde verschoben.
Bis dahin liest der Kapitän den Fluss jeden Tag mit der Sorgfalt eines Gelehrten."""


def test_english_stop_words_do_not_judge_other_languages():
    assert reason(GERMAN, lang="de") is None
    assert reason(GERMAN, lang=None) == "gopher_few_stop_words"
