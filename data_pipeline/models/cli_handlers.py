"""Handlers behind `pretrain data train-classifier CONFIG` and `pretrain data train-lm CONFIG`.

`data_pipeline/cli.py` registers the commands (config argument, `--set`, `--dry-run`) and calls
these with the parsed arguments; both return the exit status.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pretrain.command import current_command


def train_classifier(args: argparse.Namespace) -> int:
    """Train a fastText classifier artifact; print where it is and its held-out accuracy."""
    from data_pipeline.models.classifier import ClassifierConfig
    from data_pipeline.models.classifier import train_classifier as run
    from pretrain.cli_utils import resolve_config

    config = resolve_config(ClassifierConfig, args)
    if config is None:
        return 0
    out = run(config, command=current_command())
    info = json.loads((Path(out) / "model.json").read_text(encoding="utf-8"))
    training = info["training"]
    accuracy = training.get("accuracy")
    shown = f"{accuracy:.3f}" if accuracy is not None else "n/a (no held-out records)"
    print(
        f"fasttext-model {config.name}: labels {', '.join(info['labels'])}; "
        f"{training['train_documents']} training documents; held-out accuracy {shown} on "
        f"{training['heldout_documents']} documents -> {out}"
    )
    return 0


def train_lm(args: argparse.Namespace) -> int:
    """Train KenLM n-gram models (one per language) into a `kenlm-model` artifact."""
    from data_pipeline.models.kenlm_train import LanguageModelConfig
    from data_pipeline.models.kenlm_train import train_lm as run
    from pretrain.cli_utils import resolve_config

    config = resolve_config(LanguageModelConfig, args)
    if config is None:
        return 0
    out = run(config, command=current_command())
    info = json.loads((Path(out) / "model.json").read_text(encoding="utf-8"))
    for lang, entry in info["languages"].items():
        print(
            f"kenlm-model {lang}: order {info['order']}, {entry['tokens']} tokens, "
            f"{entry['vocab_size']} words, held-out perplexity "
            f"{entry['heldout_perplexity']} -> {out / entry['file']}"
        )
    return 0
