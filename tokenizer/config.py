"""Typed configs of `pretrain tokenizer train` (YAML in configs/tokenizer.yaml)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from pretrain.config import StrictModel

EOD_TOKEN = "<|endoftext|>"
PAD_TOKEN = "<|pad|>"


class SampleConfig(StrictModel):
    """How the training text is drawn from the shards (streamed, never the whole corpus)."""

    max_bytes: int = Field(200_000_000, gt=0)
    """Budget of UTF-8 bytes in the training sample (after weighting)."""
    domain_weights: dict[str, Annotated[float, Field(ge=0)]] = Field(default_factory=dict)
    """Relative inclusion weight per `domain` tag (0 excludes); unlisted domains get `default`."""
    lang_weights: dict[str, Annotated[float, Field(ge=0)]] = Field(default_factory=dict)
    """Relative inclusion weight per `lang` tag, multiplied with the domain weight."""
    default_weight: float = Field(1.0, ge=0)
    max_doc_chars: int = Field(200_000, gt=0)
    """Longer documents are truncated to this many characters in the sample."""
    seed: int = 0
    """Salt of the per-document hash that decides inclusion (deterministic, order-free)."""


class PreTokenizeConfig(StrictModel):
    """Pre-tokenisation before byte-level BPE.

    CJK: `run` isolates each run of Han/Kana/Hangul characters from Latin text, digits and
    punctuation (as DeepSeek's tokenizer does), so merges stay inside Chinese text and can learn
    multi-character words; `char` splits CJK text into single characters (no cross-character
    merges: at most one token per character, worse compression, never a broken word boundary).
    """

    cjk: Literal["run", "char"] = "run"
    individual_digits: bool = True
    """Split every digit into its own pre-token (numbers tokenise the same way everywhere)."""


class TokenizerTrainConfig(StrictModel):
    """`pretrain tokenizer train CONFIG`."""

    data: str
    """A `shards` artifact directory (output of `pretrain data run`)."""
    out: str
    """Directory the tokenizer artifact is written to."""
    name: str | None = None
    """Artifact name, e.g. `bpe-32k` (default: derived from vocab_size)."""
    vocab_size: int = Field(32768, ge=300, le=1_048_576)
    """Total vocabulary, special tokens and the 256 byte tokens included (a multiple of 128 keeps
    Megatron's embedding padding a no-op)."""
    min_frequency: int = Field(2, ge=1)
    model_max_length: int = Field(4096, ge=8)
    """`model_max_length` of the HF tokenizer_config.json: the longest input the models trained with
    this tokenizer take (`pretrain export` writes the exported model's seq_length instead)."""
    special_tokens: list[str] = Field(default_factory=list)
    """User-defined special tokens; ids follow <|endoftext|> = 0 and <|pad|> = 1 in list order."""
    pretokenize: PreTokenizeConfig = PreTokenizeConfig()
    sample: SampleConfig = SampleConfig()

    @model_validator(mode="after")
    def _specials_unique(self) -> TokenizerTrainConfig:
        names = self.all_special_tokens
        if len(set(names)) != len(names):
            raise ValueError(
                f"special_tokens {self.special_tokens} repeat a token or use a "
                f"reserved one ({EOD_TOKEN}, {PAD_TOKEN})"
            )
        if any(not token for token in names):
            raise ValueError("special_tokens must not contain an empty string")
        return self

    @property
    def all_special_tokens(self) -> list[str]:
        return [EOD_TOKEN, PAD_TOKEN, *self.special_tokens]


def default_name(vocab_size: int) -> str:
    """`bpe-32k` for 32768, `bpe-50k` for 50304, `bpe-4096` below 1024 * 4 when not round."""
    if vocab_size % 1024 == 0 or vocab_size >= 16384:
        return f"bpe-{round(vocab_size / 1024)}k"
    return f"bpe-{vocab_size}"
