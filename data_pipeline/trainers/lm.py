"""`pretrain data train-lm`: one KenLM n-gram model per language from reference text (the role
Wikipedia plays in CCNet: documents close to it get low perplexity, `head`), normalised as the
perplexity stage scores (data_pipeline.normalization), estimated by mkn.py and written as ARPA.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from data_pipeline.normalization import NORMALIZATION, document_perplexity, lm_sentences
from data_pipeline.trainers.mkn import train_arpa
from data_pipeline.trainers.records import RecordSource, is_heldout
from pretrain.artifacts import model as model_kind
from pretrain.artifacts.base import write_artifact
from pretrain.config import StrictModel, config_dict
from pretrain.errors import InputError
from pretrain.locking import output_lock
from pretrain.manifest import sha256_file
from pretrain.output_check import require_new_output
from pretrain.progress import step
from pretrain.publish import publishing
from pretrain.storage import write_json

MIN_HELDOUT = 20
"""Held-out documents wanted when the token cap stops reading early."""


class LanguageInputs(StrictModel):
    """Reference text for one language."""

    inputs: list[RecordSource] = Field(min_length=1)


class LanguageModelConfig(StrictModel):
    """`configs/lm.yaml`."""

    out: str
    """Output artifact directory."""
    order: int = Field(5, ge=2, le=6)
    """n-gram order (CCNet uses 5)."""
    languages: dict[str, LanguageInputs] = Field(min_length=1)
    """Language code (as the langid stage tags it, e.g. en, zh) -> its reference inputs."""
    max_tokens: int = Field(5_000_000, ge=1000)
    """Stop reading a language's reference text after this many tokens (bounds memory / size)."""
    prune_singletons_from: int | None = Field(None, ge=2, le=6)
    """Drop n-grams seen once at this order and above (3 = lmplz `--prune 0 0 1`): a several
    times smaller ARPA that loads faster in every worker; None keeps every n-gram."""
    heldout_fraction: float = Field(0.02, ge=0.0, lt=0.5)
    """Reference documents kept out of training to report a held-out perplexity."""

    @field_validator("languages")
    @classmethod
    def _language_codes(cls, languages: dict[str, LanguageInputs]) -> dict[str, LanguageInputs]:
        for code in languages:
            if not code.replace("_", "").replace("-", "").isalnum():
                raise ValueError(f"language code {code!r} must be letters/digits (e.g. en, zh)")
        return languages


def _documents(lang: str, spec: LanguageInputs) -> Iterator[str]:
    for source in spec.inputs:
        records = source.records(f"{lang}: {Path(source.path).name}")
        texts = (text for _, text in records if isinstance(text, str))
        yield from itertools.islice(texts, source.max_records)


def reference_sentences(lang: str, config: LanguageModelConfig) -> tuple[list[str], list[str], int]:
    """(training sentences, held-out documents, training documents) for one language."""
    sentences: list[str] = []
    heldout: list[str] = []
    documents = tokens = 0
    for text in _documents(lang, config.languages[lang]):
        if tokens >= config.max_tokens:
            # past the cap: the next unseen documents complete the held-out set, then stop
            if len(heldout) >= MIN_HELDOUT or not config.heldout_fraction:
                break
            heldout.append(text)
        elif is_heldout(text, config.heldout_fraction):
            heldout.append(text)
        elif doc_sentences := lm_sentences(text):
            sentences.extend(doc_sentences)
            documents += 1
            tokens += sum(s.count(" ") + 1 for s in doc_sentences)
    if not sentences:
        raise InputError(
            f"languages.{lang}: the inputs hold no text; check the paths, "
            "text_field and where filters"
        )
    return sentences, heldout, documents


def _heldout_perplexity(arpa: Path, heldout: list[str]) -> float | None:
    import kenlm

    if not heldout:
        return None
    model = kenlm.Model(str(arpa))
    total, count = 0.0, 0
    for text in heldout:
        scored = document_perplexity(model, text)
        if scored:
            total, count = total + scored[0], count + scored[1]
    return round(10 ** (-total / count), 3) if count else None


def check_out(config: LanguageModelConfig) -> Path:
    """The output directory, refused in one line unless it is new or holds only what an earlier
    run of this command left before finishing a model (its logs); `--dry-run` checks it too."""
    out = Path(config.out)
    require_new_output(out, "out =", model_kind.KENLM_KIND)
    return out


def train_lm(config: LanguageModelConfig) -> Path:
    """Train one model per language and write the `kenlm-model` artifact; returns its directory.
    The files are built in a scratch folder and published at the end (pretrain.publish): a
    killed run leaves no model in `out`."""
    with output_lock(config.out):
        out = check_out(config)
        with publishing(out) as files:
            languages = {lang: _train_language(lang, config, files) for lang in config.languages}
            info = {
                "order": config.order,
                "format": "arpa",
                "estimator": "modified-kneser-ney (mkn.py)",
                "prune_singletons_from": config.prune_singletons_from,
                "normalization": NORMALIZATION,
                "languages": languages,
            }
            write_json(files / "model.json", info)
            fields = model_kind.KenlmFields(
                model={
                    "languages": {lang: entry["sha256"] for lang, entry in languages.items()},
                    "order": config.order,
                }
            )
            write_artifact(
                files,
                fields,
                config=config_dict(config),
                counts={lang: entry["tokens"] for lang, entry in languages.items()},
            )
        return out


def _train_language(lang: str, config: LanguageModelConfig, files: Path) -> dict[str, Any]:
    """Estimate one language's model into `files/<lang>.arpa`; its model.json entry."""
    sentences, heldout, documents = reference_sentences(lang, config)
    step(
        f"{lang}: {documents} documents, {len(sentences)} sentences -> estimating the "
        f"order-{config.order} model"
    )
    arpa = files / f"{lang}.arpa"
    with open(arpa, "w", encoding="utf-8") as handle:
        stats = train_arpa(sentences, config.order, handle, config.prune_singletons_from)
    del sentences
    return {
        "file": arpa.name,
        "sha256": sha256_file(arpa),
        "documents": documents,
        "heldout_documents": len(heldout),
        "heldout_perplexity": _heldout_perplexity(arpa, heldout),
        **stats,
    }
