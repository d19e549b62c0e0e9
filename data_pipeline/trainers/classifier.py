"""`pretrain data train-classifier`: a fastText supervised model artifact from labelled records.

The artifact (kind `fasttext-model`) holds `model.bin` (or `model.ftz` when quantized) and
`model.json`: task name, labels, positive label (quality models), the text normalisation, training
statistics and held-out accuracy with per-label precision/recall. Records are split into train and
held-out by a hash of their text, so the split is stable run to run.
"""

from __future__ import annotations

import random
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from data_pipeline.fasttext_file import LABEL_PREFIX
from data_pipeline.normalization import NORMALIZATION, classifier_line
from data_pipeline.trainers.records import RecordSource, field_value, is_heldout
from pretrain.artifacts import model as model_kind
from pretrain.artifacts.base import write_artifact
from pretrain.config import StrictModel, config_dict
from pretrain.errors import ConfigError, InputError
from pretrain.lifetime import die_with_parent
from pretrain.locking import output_lock
from pretrain.manifest import sha256_file
from pretrain.output_check import require_new_output
from pretrain.publish import publishing
from pretrain.storage import write_json


class ClassifierInput(RecordSource):
    """One input file: every record gets `label`, or its label is read from `label_field`."""

    label: str | None = None
    """Fixed label for every record of this file (e.g. `hq` for reference text)."""
    label_field: str | None = None
    """Dotted field holding the label, e.g. `label` or `meta.domain`."""
    label_map: dict[str, str] = {}
    """Raw label value -> model label (e.g. {en: prose, zh: prose}); unmapped values kept as is."""

    @model_validator(mode="after")
    def _one_label_source(self) -> ClassifierInput:
        if (self.label is None) == (self.label_field is None):
            raise ValueError("set exactly one of `label` (fixed) or `label_field` (per record)")
        return self


class FastTextParams(StrictModel):
    """fastText supervised hyper-parameters (names as in fastText)."""

    dim: int = Field(64, ge=2, le=1024)
    epoch: int = Field(10, ge=1, le=1000)
    lr: float = Field(0.1, gt=0, le=10)
    word_ngrams: int = Field(2, ge=1, le=5)
    min_count: int = Field(1, ge=1)
    bucket: int = Field(200_000, ge=0, le=10_000_000)
    """Hashed n-gram buckets. Set explicitly: fastText's default (2M) makes a 409 MB model."""
    loss: str = Field("softmax", pattern="^(softmax|hs|ova)$")
    thread: int = Field(1, ge=1, le=64)
    """1 thread makes training deterministic for a given seed."""
    seed: int = 0


class ClassifierConfig(StrictModel):
    """`configs/classifier_*.yaml`."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_-]*$")
    """What the model tags, e.g. `domain` or `quality`."""
    out: str
    """Output artifact directory."""
    inputs: list[ClassifierInput] = Field(min_length=1)
    labels: list[str] = Field(min_length=2)
    """Labels the model predicts; records with other labels are skipped (and counted)."""
    positive_label: str | None = None
    """For quality models: the label whose probability is `quality_score`."""
    holdout_fraction: float = Field(0.1, ge=0.0, lt=0.9)
    max_per_label: int | None = Field(None, ge=1)
    """Down-sample each label to at most this many training records (balances classes)."""
    max_chars: int = Field(20_000, ge=100)
    """Characters of each document the model sees (training and tagging alike)."""
    fasttext: FastTextParams = FastTextParams()
    quantize: bool = False
    """Product-quantize the model (`model.ftz`, ~7x smaller, slightly less accurate)."""
    seed: int = 0

    @model_validator(mode="after")
    def _positive_is_a_label(self) -> ClassifierConfig:
        if self.positive_label is not None and self.positive_label not in self.labels:
            raise ValueError(f"positive_label {self.positive_label!r} is not one of {self.labels}")
        if len(set(self.labels)) != len(self.labels):
            raise ValueError("labels must be distinct")
        return self


def _label_of(record: dict[str, Any], source: ClassifierInput) -> str | None:
    if source.label is not None:
        return source.label
    raw = field_value(record, source.label_field or "")
    if raw is None:
        return None
    return source.label_map.get(str(raw), str(raw))


def collect_examples(config: ClassifierConfig) -> tuple[dict[str, list[str]], Counter]:
    """label -> normalised one-line documents; plus counts of skipped records by reason."""
    by_label: dict[str, list[str]] = {label: [] for label in config.labels}
    skipped: Counter = Counter()
    for source in config.inputs:
        count = 0
        for record, text in source.records(f"read {Path(source.path).name}"):
            label = _label_of(record, source)
            if label not in by_label:
                skipped["label_not_in_labels" if label is not None else "no_label"] += 1
                continue
            line = classifier_line(text if isinstance(text, str) else None, config.max_chars)
            if not line:
                skipped["empty_text"] += 1
                continue
            by_label[label].append(line)
            count += 1
            if source.max_records and count >= source.max_records:
                break
    return by_label, skipped


def split_examples(
    config: ClassifierConfig, by_label: dict[str, list[str]]
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(train, held-out) lists of (label, line); train shuffled with the config seed."""
    rng = random.Random(config.seed)
    train, heldout = [], []
    for label in config.labels:
        lines = by_label[label]
        if not lines:
            raise InputError(
                f"label {label!r} has no training records; add inputs for it or "
                "remove it from `labels`"
            )
        label_train = [x for x in lines if not is_heldout(x, config.holdout_fraction)]
        heldout.extend((label, x) for x in lines if is_heldout(x, config.holdout_fraction))
        if config.max_per_label and len(label_train) > config.max_per_label:
            label_train = rng.sample(label_train, config.max_per_label)
        train.extend((label, x) for x in label_train)
    rng.shuffle(train)
    return train, heldout


def _train_in_child(
    train_file: str, params: dict[str, Any], quantize: bool, out_file: str, errors: Any
) -> None:
    """Runs in a fresh process: fastText 0.9.2 can diverge (NaN) when a second model is trained
    in the same process, so every training gets its own."""
    import multiprocessing

    parent = multiprocessing.parent_process()
    die_with_parent(parent.pid if parent is not None else None)
    import fasttext

    try:
        model = fasttext.train_supervised(
            input=train_file,
            dim=params["dim"],
            epoch=params["epoch"],
            lr=params["lr"],
            wordNgrams=params["word_ngrams"],
            minCount=params["min_count"],
            bucket=params["bucket"],
            loss=params["loss"],
            thread=params["thread"],
            seed=params["seed"],
            verbose=0,
        )
        if quantize:
            model.quantize(input=train_file, qnorm=True, retrain=False, cutoff=0)
        model.save_model(out_file)
    except RuntimeError as exc:
        errors.put(str(exc))


def _fit(
    config: ClassifierConfig, train: list[tuple[str, str]], workdir: Path, model_file: Path
) -> None:
    """Train in a spawned process and save the model to `model_file`. The child saves into
    `workdir` (this run's own), and dies with this process: a killed run's child does not go on
    writing a model where the re-run writes its own."""
    import multiprocessing

    train_file = workdir / "train.txt"
    with open(train_file, "w", encoding="utf-8") as handle:
        for label, line in train:
            handle.write(f"{LABEL_PREFIX}{label} {line}\n")
    saved = workdir / model_file.name
    context = multiprocessing.get_context("spawn")
    errors = context.Queue()
    child = context.Process(
        target=_train_in_child,
        args=(
            str(train_file),
            config.fasttext.model_dump(),
            config.quantize,
            str(saved),
            errors,
        ),
    )
    child.start()
    child.join()
    message = errors.get() if not errors.empty() else None
    if message and "NaN" in message:
        raise ConfigError(
            f"fasttext.lr = {config.fasttext.lr}: training diverged (NaN); halve the learning rate"
        )
    if message or child.exitcode != 0 or not saved.is_file():
        raise RuntimeError(f"fastText training failed (exit code {child.exitcode}): {message}")
    saved.replace(model_file)


def evaluate(model: Any, heldout: list[tuple[str, str]], labels: list[str]) -> dict[str, Any]:
    """Held-out accuracy and per-label precision / recall / support."""
    if not heldout:
        return {"heldout_documents": 0, "accuracy": None, "per_label": {}}
    predicted, _ = model.predict([line for _, line in heldout], k=1)
    guesses = [p[0][len(LABEL_PREFIX) :] if p else None for p in predicted]
    truth = [label for label, _ in heldout]
    per_label = {}
    for label in labels:
        tp = sum(g == label and t == label for g, t in zip(guesses, truth, strict=True))
        predicted_n = sum(g == label for g in guesses)
        support = sum(t == label for t in truth)
        per_label[label] = {
            "precision": tp / predicted_n if predicted_n else None,
            "recall": tp / support if support else None,
            "support": support,
        }
    correct = sum(g == t for g, t in zip(guesses, truth, strict=True))
    confusion = {
        t: dict(Counter(g for g, x in zip(guesses, truth, strict=True) if x == t)) for t in labels
    }
    return {
        "heldout_documents": len(heldout),
        "accuracy": correct / len(heldout),
        "per_label": per_label,
        "confusion": confusion,
    }


def check_out(config: ClassifierConfig) -> Path:
    """The output directory, refused in one line unless it is new or holds only what an earlier
    run of this command left before writing a model (its logs); `--dry-run` checks it too."""
    out = Path(config.out)
    require_new_output(out, "out =", model_kind.FASTTEXT_KIND)
    return out


def train_classifier(config: ClassifierConfig) -> Path:
    """Train, evaluate and write the `fasttext-model` artifact; returns its directory."""
    with output_lock(config.out):
        out = check_out(config)
        by_label, skipped = collect_examples(config)
        train, heldout = split_examples(config, by_label)
        # built in a scratch folder, published at the end (pretrain.publish): a killed run leaves
        # no model in `out`
        with publishing(out) as files:
            model_file = files / ("model.ftz" if config.quantize else "model.bin")
            with tempfile.TemporaryDirectory(dir=files, prefix=".train-") as tmp:
                _fit(config, train, Path(tmp), model_file)
            import fasttext

            metrics = evaluate(fasttext.load_model(str(model_file)), heldout, config.labels)
            stats = {
                "train_documents": len(train),
                "train_per_label": dict(Counter(x for x, _ in train)),
                "skipped": dict(skipped),
                **metrics,
            }
            plot_confusion(stats, config.labels, files / "heldout.png", f"{config.name} classifier")
            _write_artifact(config, model_file, stats)
        return out


def _write_artifact(config: ClassifierConfig, model_file: Path, stats: dict[str, Any]) -> None:
    """model.json, then the manifest (written last)."""
    out = model_file.parent
    info = {
        "name": config.name,
        "labels": config.labels,
        "positive_label": config.positive_label,
        "model_file": model_file.name,
        "model_sha256": sha256_file(model_file),
        "max_chars": config.max_chars,
        "normalization": NORMALIZATION,
        "quantized": config.quantize,
        "fasttext": config.fasttext.model_dump(),
        "training": stats,
    }
    write_json(out / "model.json", info)
    fields = model_kind.FasttextFields(
        model={
            "name": config.name,
            "labels": config.labels,
            "sha256": info["model_sha256"],
            "heldout_accuracy": stats["accuracy"],
        }
    )
    write_artifact(
        out,
        fields,
        config=config_dict(config),
        counts={
            "train_documents": stats["train_documents"],
            "heldout_documents": stats["heldout_documents"],
        },
    )


def plot_confusion(metrics: dict[str, Any], labels: list[str], path: Path, title: str) -> None:
    """The held-out report beside model.json: a confusion-matrix PNG (row = true label, column =
    predicted label, cells = held-out documents; Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    confusion = metrics.get("confusion", {})
    matrix = np.array([[confusion.get(t, {}).get(p, 0) for p in labels] for t in labels])
    fig, ax = plt.subplots(figsize=(1.2 * len(labels) + 2.5, 1.0 * len(labels) + 2))
    ax.imshow(matrix, cmap="Blues")
    ax.set_xticks(range(len(labels)), labels)
    ax.set_yticks(range(len(labels)), labels)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    for i in range(len(labels)):
        for j in range(len(labels)):
            ax.text(
                j,
                i,
                str(matrix[i, j]),
                ha="center",
                va="center",
                color="white" if matrix[i, j] > matrix.max() / 2 else "black",
            )
    accuracy = metrics.get("accuracy")
    shown = f"{accuracy:.3f}" if accuracy is not None else "n/a"
    ax.set_title(f"{title}: held-out accuracy {shown} ({metrics.get('heldout_documents', 0)} docs)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
