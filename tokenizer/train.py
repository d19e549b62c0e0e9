"""`pretrain tokenizer train`: a byte-level BPE (HF `tokenizers`, no unknown token, no normalizer)
on a tag-weighted shard sample. Special tokens take the first ids: <|endoftext|> = 0 (EOD),
<|pad|> = 1, then the user-defined ones."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pretrain.artifacts import tokenizer as tokenizer_kind
from pretrain.artifacts.base import write_artifact
from pretrain.artifacts.tokenizer import KIND, LOCK_FILE, TOKENIZER_FILE, tokenizer_id
from pretrain.config import config_dict
from pretrain.errors import ConfigError
from pretrain.locking import output_lock
from pretrain.manifest import canonical_json, file_records
from pretrain.output_check import require_own_output
from pretrain.progress import VERBOSE, verbosity
from pretrain.publish import publishing
from pretrain.storage import write_atomic
from tokenizer.config import TokenizerTrainConfig, default_name
from tokenizer.hf import hf_file_bytes
from tokenizer.pipeline import build_tokenizer
from tokenizer.shards import require_shards, shards_identity
from tokenizer.training_sample import plan_sample, stream_sample

PATH_KEYS = ("data", "out")
"""Config keys left out of lock.json: where files live is not what the tokenizer is (the input is
identified by its content), so the same training gives the same id anywhere."""


def train_on_texts(texts: Any, config: TokenizerTrainConfig) -> Any:
    """Train on an iterator of texts (or of lists of texts); check the special token ids."""
    from tokenizers import pre_tokenizers, trainers

    specials = config.all_special_tokens
    if config.vocab_size < 256 + len(specials) + 1:
        raise ConfigError(
            f"vocab_size = {config.vocab_size} cannot hold 256 byte tokens and "
            f"{len(specials)} special tokens; raise it (e.g. 32768)"
        )
    tokenizer = build_tokenizer(config.pretokenize)
    trainer = trainers.BpeTrainer(
        vocab_size=config.vocab_size,
        min_frequency=config.min_frequency,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        # the library's own bar draws blank lines off a terminal: only with -v
        show_progress=verbosity() >= VERBOSE,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    for expected_id, token in enumerate(specials):
        assert tokenizer.token_to_id(token) == expected_id, (token, expected_id)
    return tokenizer


def preflight(config: TokenizerTrainConfig) -> list[Path]:
    """What `train` (and `--dry-run`) checks first: the shards verify and `out` is new, empty or
    a tokenizer. Returns the shard files."""
    _, shards = require_shards(config.data)
    require_own_output(Path(config.out), "out =", KIND)
    return shards


def make_lock(
    config: TokenizerTrainConfig, tokenizer: Any, composition: dict[str, Any], shards_sha: str
) -> dict[str, Any]:
    """The lock.json content (no timestamps: the same inputs give the same tokenizer id)."""
    vocab_size = tokenizer.get_vocab_size()
    # named by the vocabulary it holds, not the one asked for (a small sample gives fewer tokens)
    name = config.name or default_name(vocab_size)
    return {
        "name": name,
        "vocab_size": vocab_size,
        "vocab_size_requested": config.vocab_size,
        "special_tokens": {t: tokenizer.token_to_id(t) for t in config.all_special_tokens},
        "eod_id": tokenizer.token_to_id(config.all_special_tokens[0]),
        "pad_id": tokenizer.token_to_id(config.all_special_tokens[1]),
        "token_dtype": "uint16" if vocab_size < 65536 else "int32",
        "config": {k: v for k, v in config_dict(config).items() if k not in PATH_KEYS},
        "sample": composition,
        # content, not the shards manifest's bytes (created_unix, command): the manifest's sha256
        # is lineage and stays in manifest.json `inputs`, outside the id
        "inputs": {"shards_content_sha256": shards_sha},
    }


def train(config: TokenizerTrainConfig) -> dict[str, Any]:
    """Train, lock and write the tokenizer artifact; return its manifest."""
    with output_lock(config.out):
        shards = preflight(config)
        shards_sha = shards_identity(config.data)
        plan = plan_sample(shards, config.sample)
        tokenizer = train_on_texts(stream_sample(shards, plan), config)
        composition = plan.composition()
        if composition["documents"] == 0:
            raise ConfigError(
                f"sample of {config.data} is empty (no train-split text with non-zero "
                "weight); check sample.domain_weights / sample.lang_weights"
            )
        # built out of sight, manifest last, then published in one rename (pretrain.publish): a kill
        # leaves the earlier tokenizer whole (its eval/ too, which the new one replaces), or nothing
        out = Path(config.out)
        with publishing(out) as files:
            manifest = _write_files(files, config, tokenizer, composition, shards_sha)
        return manifest


def _write_files(
    files: Path,
    config: TokenizerTrainConfig,
    tokenizer: Any,
    composition: dict[str, Any],
    shards_sha: str,
) -> dict[str, Any]:
    """tokenizer.json, the HF side files, lock.json and, last, the manifest, into `files`."""
    import tokenizers

    tokenizer.save(str(files / TOKENIZER_FILE))
    lock = make_lock(config, tokenizer, composition, shards_sha)
    for name, data in hf_file_bytes(lock, config.model_max_length).items():
        write_atomic(files / name, data)
    write_atomic(files / LOCK_FILE, canonical_json(lock) + b"\n")  # the hash ignores layout
    # hashed once, here: the manifest lists these digests (`known`) and the identity is theirs
    known = file_records(files)
    sha = tokenizer_kind.identity_of({name: entry["sha256"] for name, entry in known.items()})
    info = tokenizer_kind.TokenizerRef(
        name=lock["name"],
        sha256=sha,
        id=tokenizer_id(lock["name"], sha),
        vocab_size=lock["vocab_size"],
    )
    fields = tokenizer_kind.TokenizerFields(
        tokenizer=info, library={"tokenizers": tokenizers.__version__}
    )
    return write_artifact(
        files,
        fields,
        config=config_dict(config),
        inputs=[config.data],
        known=known,
        counts={
            "vocab_size": lock["vocab_size"],
            "sample_documents": composition["documents"],
            "sample_bytes": composition["bytes"],
        },
    )
