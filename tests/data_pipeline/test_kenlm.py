"""`pretrain data train-lm`: our modified Kneser-Ney ARPA, loaded by the real `kenlm.Model`."""

from __future__ import annotations

import argparse
import gzip
import io
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from data_pipeline.cli import train_lm
from data_pipeline.normalization import document_perplexity, lm_sentences
from data_pipeline.trainers.lm import LanguageModelConfig
from data_pipeline.trainers.mkn import count_orders, discounts, encode, estimate, train_arpa
from pretrain.config import load_config
from pretrain.errors import ArtifactError, ConfigError, InputError
from pretrain.manifest import require
from pretrain.sample import sample_dir

REPO = Path(__file__).resolve().parents[2]


def _rows() -> list[dict]:
    with gzip.open(sample_dir() / "prose.jsonl.gz", "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def _lm_config(tmp: Path, edit=None) -> str:
    """configs/lm.yaml with the sample path made absolute, order 3 and a small token cap."""
    data = yaml.safe_load((REPO / "configs" / "lm.yaml").read_text())
    for spec in data["languages"].values():
        for source in spec["inputs"]:
            source["path"] = str(sample_dir() / Path(source["path"]).name)
    data.update(order=3, max_tokens=60_000, heldout_fraction=0.05)
    if edit is not None:
        edit(data)
    path = tmp / "lm.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def _args(config: str, *overrides: str, dry_run: bool = False) -> argparse.Namespace:
    return argparse.Namespace(config=config, overrides=list(overrides), dry_run=dry_run)


@pytest.fixture(scope="module")
def lm_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("lm")
    out = root / "lm"
    assert train_lm(_args(_lm_config(root), f"out={out}")) == 0
    return out


def _kenlm(path: Path):
    import kenlm

    return kenlm.Model(str(path))


@pytest.mark.timeout(120)
def test_artifact_per_language_with_hashes_and_heldout_perplexity(lm_dir):
    manifest = require(lm_dir, kind="kenlm-model")
    info = json.loads((lm_dir / "model.json").read_text())
    assert set(info["languages"]) == {"en", "zh"}
    assert info["normalization"]["cjk"] == "character"
    for lang, entry in info["languages"].items():
        assert manifest["files"][entry["file"]]["sha256"] == entry["sha256"]
        assert manifest["model"]["languages"][lang] == entry["sha256"]
        assert entry["tokens"] >= 50_000 and entry["ngrams"][0] == entry["vocab_size"]
        # held-out reference text is predictable but not memorised
        assert 5 < entry["heldout_perplexity"] < 1000, entry


@pytest.mark.timeout(60)
def test_kenlm_loads_it_and_in_domain_beats_out_of_domain(lm_dir):
    rows = _rows()
    model = _kenlm(lm_dir / "en.arpa")
    assert model.order == 3

    def ppl(texts, lm=model):
        total = count = 0
        for text in texts:
            scored = document_perplexity(lm, text)
            total, count = total + scored[0], count + scored[1]
        return 10 ** (-total / count)

    kernel = [
        r["text"] for r in rows if "linux-doc" in r["source"] and r["meta"].get("lang") == "en"
    ][-30:]  # read after the token cap: unseen
    fortunes = [
        r["text"] for r in rows if "fortunes" in r["source"] and r["meta"].get("lang") == "en"
    ][:30]
    garbage = ["qzx vbnm wert yuiop lkjh " * 5, "the the the of of kernel kernel"]
    in_domain, out_domain, junk = ppl(kernel), ppl(fortunes), ppl(garbage)
    assert in_domain < out_domain < junk, (in_domain, out_domain, junk)
    zh = _kenlm(lm_dir / "zh.arpa")
    chinese = [r["text"] for r in rows if "manpages-zh" in r["source"]][-20:]
    assert ppl(chinese, zh) < ppl(kernel, zh)
    assert ppl(kernel, model) < ppl(chinese, model)


@pytest.mark.timeout(60)
def test_every_context_distribution_sums_to_one(lm_dir):
    import kenlm

    model = _kenlm(lm_dir / "en.arpa")
    vocab = []
    with open(lm_dir / "en.arpa", encoding="utf-8") as handle:
        section = None
        for line in handle:
            if line.startswith("\\"):
                section = line.strip()
            elif section == "\\1-grams:" and "\t" in line:
                vocab.append(line.split("\t")[1].strip())
    contexts = [[], ["the"], ["of", "the"], ["the", "kernel"], ["never-seen-word"], ["."]]
    for context in contexts:
        state = kenlm.State()
        model.BeginSentenceWrite(state)
        for word in context:
            nxt = kenlm.State()
            model.BaseScore(state, word, nxt)
            state = nxt
        total = sum(10 ** model.BaseScore(state, w, kenlm.State()) for w in vocab if w != "<s>")
        assert total == pytest.approx(1.0, abs=1e-4), context


@pytest.mark.timeout(30)
def test_modified_kneser_ney_matches_a_hand_count():
    """Tiny corpus: discounts fall back, probabilities equal the textbook formulas."""
    corpus = encode(["a b", "a b", "b a"])
    orders = count_orders(corpus, 2)
    estimate(orders, len(corpus.vocab))
    vocab = {w: i for i, w in enumerate(corpus.vocab)}
    bigrams = {
        (corpus.vocab[c], corpus.vocab[w]): i
        for i, (c, w) in enumerate(zip(orders[1].context, orders[1].word, strict=True))
    }
    # continuation counts: b is preceded by {a, <s>}; a by {<s>, b}; </s> by {a, b}
    assert orders[0].adjusted[vocab["b"]] == 2 and orders[0].adjusted[vocab["</s>"]] == 2
    assert orders[1].count[bigrams[("a", "b")]] == 2
    d1, d2, _ = orders[1].discounts
    # p(b | a): a is followed by b twice and </s> once: (2 - D2) / 3 + gamma(a) p(b)
    gamma_a = (d1 + d2) / 3
    expected = (2 - d2) / 3 + gamma_a * orders[0].prob[vocab["b"]]
    assert orders[1].prob[bigrams[("a", "b")]] == pytest.approx(expected)
    assert orders[0].prob[vocab["<unk>"]] > 0
    assert discounts(np.array([1, 1, 1, 2, 2, 3, 4])) == pytest.approx(
        (1 - 2 * (3 / 7) * 2 / 3, 2 - 3 * (3 / 7) * 1 / 2, 3 - 4 * (3 / 7) * 1 / 1)
    )
    handle = io.StringIO()
    stats = train_arpa(["a b", "a b", "b a"], 2, handle)
    assert stats["ngrams"] == [5, len(bigrams)] and stats["tokens"] == 6
    assert handle.getvalue().startswith("\\data\\\nngram 1=5\n")


@pytest.mark.timeout(30)
def test_chinese_is_tokenised_by_character_and_digits_folded():
    assert lm_sentences("Ｌinux６.1版本") == ["linux 0 . 0 版 本"]
    assert lm_sentences("内核文档 Linux 6.1版本\n\n第二行") == [
        "内 核 文 档 linux 0 . 0 版 本",
        "第 二 行",
    ]


@pytest.mark.timeout(60)
def test_config_errors_and_refusals(tmp_path, lm_dir, capsys):
    with pytest.raises(ConfigError, match="order"):
        load_config(LanguageModelConfig, REPO / "configs" / "lm.yaml", ["order=9"])

    def nothing(data):
        data["languages"]["en"]["inputs"][0]["where"] = {"source": "no-such-source"}

    with pytest.raises(InputError, match="languages.en"):
        train_lm(_args(_lm_config(tmp_path, nothing), f"out={tmp_path / 'x'}"))
    with pytest.raises(ConfigError, match="not empty"):
        train_lm(_args(_lm_config(tmp_path), f"out={lm_dir}"))
    dry = f"out={tmp_path / 'dry'}"  # not runs/models/lm, which a README user has built
    assert train_lm(_args(str(REPO / "configs" / "lm.yaml"), dry, dry_run=True)) == 0
    assert "config_sha256" in capsys.readouterr().out
    tampered = tmp_path / "tampered"
    import shutil

    shutil.copytree(lm_dir, tampered)
    with open(tampered / "zh.arpa", "a", encoding="utf-8") as handle:
        handle.write("\n")
    with pytest.raises(ArtifactError, match="zh.arpa"):
        require(tampered, kind="kenlm-model")


@pytest.mark.timeout(120)
def test_cli_trains_the_example_config_as_shipped(tmp_path, monkeypatch, capsys):
    from pretrain_app.cli import main

    monkeypatch.chdir(REPO)  # the example config names the sample by its repository path
    out = tmp_path / "lm"
    argv = [
        "data",
        "train-lm",
        "configs/lm.yaml",
        "--set",
        f"out={out}",
        "--set",
        "order=2",
        "--set",
        "max_tokens=20000",
    ]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "kenlm-model en: order 2" in printed and "kenlm-model zh: order 2" in printed
    assert require(out, kind="kenlm-model")["model"]["order"] == 2


@pytest.mark.timeout(120)
def test_pruning_singletons_shrinks_the_model_and_keeps_it_normalised(tmp_path):
    import kenlm

    english = [
        r["text"] for r in _rows() if "linux-doc" in r["source"] and r["meta"].get("lang") == "en"
    ]
    train = [s for text in english[:150] for s in lm_sentences(text)]
    heldout = english[-20:]
    results = {}
    for prune_from in (None, 3):
        path = tmp_path / f"prune-{prune_from}.arpa"
        with open(path, "w", encoding="utf-8") as handle:
            stats = train_arpa(train, 4, handle, prune_from)
        model = kenlm.Model(str(path))
        total = count = 0
        for text in heldout:
            scored = document_perplexity(model, text)
            total, count = total + scored[0], count + scored[1]
        state, after = kenlm.State(), kenlm.State()
        model.BeginSentenceWrite(state)
        model.BaseScore(state, "the", after)
        vocab = [
            line.split("\t")[1]
            for line in path.read_text().splitlines()
            if line.count("\t") and " " not in line.split("\t")[1]
        ]
        mass = sum(10 ** model.BaseScore(after, w, kenlm.State()) for w in vocab if w != "<s>")
        assert mass == pytest.approx(1.0, abs=1e-4)
        results[prune_from] = (path.stat().st_size, 10 ** (-total / count), stats["ngrams"])
    full, pruned = results[None], results[3]
    assert pruned[2][:2] == full[2][:2] and pruned[2][3] < full[2][3] / 2
    assert pruned[0] < full[0] / 2
    assert pruned[1] == pytest.approx(full[1], rel=0.1)


@pytest.mark.timeout(60)
def test_plain_text_reference_and_parquet_inputs(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    english = [r["text"] for r in _rows() if "linux-doc" in r["source"]][:40]
    blocks = ["\n".join(line for line in t.splitlines() if line.strip()) for t in english[:20]]
    (tmp_path / "ref.txt").write_text("\n\n".join(blocks))  # documents: blank-line separated
    pq.write_table(pa.table({"body": english[20:]}), tmp_path / "ref.parquet")
    config = {
        "out": str(tmp_path / "lm"),
        "order": 3,
        "heldout_fraction": 0.0,
        "languages": {
            "en": {
                "inputs": [
                    {"path": str(tmp_path / "ref.txt")},
                    {"path": str(tmp_path / "ref.parquet"), "text_field": "body"},
                ]
            }
        },
    }
    (tmp_path / "lm.yaml").write_text(yaml.safe_dump(config))
    assert train_lm(_args(str(tmp_path / "lm.yaml"))) == 0
    info = json.loads((tmp_path / "lm" / "model.json").read_text())["languages"]["en"]
    assert info["documents"] == 40 and info["heldout_perplexity"] is None
