"""Mixture config: the recipe (components selected by sidecar tags, weights, epoch caps, phases)
and the build settings (encoded data, pinned tokenizer, token budget, global batch, seed).

The recipe hash is the sha256 of the canonical recipe (what an ablation decides); the build hash
adds the build settings and the identities of the data and tokenizer (what a run consumes).
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any

import pyarrow as pa
from pydantic import (
    BeforeValidator,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic_core import PydanticCustomError

from data_pipeline.stages.registry import tag_fields
from pretrain.config import StrictModel
from pretrain.errors import ConfigError
from pretrain.manifest import canonical_json, sha256_bytes

WEIGHT_TOLERANCE = 1e-6
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"


def _as_list(value: Any) -> Any:
    return [value] if isinstance(value, str | bool) else value


def _as_number(value: Any) -> Any:
    """Accept `1e9` and `1_000_000` written as YAML strings for token counts."""
    if isinstance(value, str):
        try:
            return float(value.replace("_", ""))
        except ValueError:
            return value
    return value


StrList = Annotated[list[str], BeforeValidator(_as_list)]


class Range(StrictModel):
    """Closed interval [min, max]; either end may be left open (null)."""

    min: float | None = None
    max: float | None = None


Clause = Range | bool | list[str]
"""What a clause on a declared tag takes, by the tag's type: a range (numbers), true/false
(booleans), values (strings: a list, or one value)."""


class Select(StrictModel):
    """A conjunction of tag clauses over the encoded sidecar; documents with a null tag never
    match a clause on that tag. `split == eval` is always excluded.

    The fields below are the built-in stages' tags. Any other tag a stage declares
    (`Stage.tags`, e.g. a plugin's: data_pipeline.stages.registry.tag_fields) is written beside
    them (`toy_chars: {min: 60}`) and typed by its declared type; a name no stage declares is
    refused, naming the tags there are."""

    domain: StrList | None = None
    lang: StrList | None = None
    source: StrList | None = None
    """Glob patterns (fnmatch) over the `source` tag."""
    ppl_bucket: StrList | None = None
    quality_score: Range | None = None
    perplexity: Range | None = None
    unsafe_score: Range | None = None
    url_blocked: bool | None = None
    dup_keep: bool | None = None
    tags: dict[str, Clause] = Field(default_factory=dict)
    """The clauses on declared tags other than the fields above (written flat, never as `tags`)."""

    @model_validator(mode="before")
    @classmethod
    def _declared_tags(cls, data: Any) -> Any:
        """Move every key that is not a built-in clause into `tags`, typed by its declaration."""
        if not isinstance(data, dict):
            return data
        fixed = set(cls.model_fields) - {"tags"}
        extra = {key: value for key, value in data.items() if key not in fixed}
        if not extra:
            return data
        declared = {field.name: field.type for field in tag_fields()}
        tags = {key: _typed_clause(key, value, declared) for key, value in extra.items()}
        return {**{k: v for k, v in data.items() if k in fixed}, "tags": tags}

    @model_serializer(mode="wrap")
    def _flat(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Dump the declared tags' clauses beside the built-in ones (and no `tags` key): a recipe
        without them dumps, and so hashes, exactly as before they could be written."""
        data = dict(handler(self))
        tags = data.pop("tags", None) or {}
        return {**data, **tags}

    def clauses(self) -> dict[str, Clause]:
        """Every clause written, built-in and declared, by tag name."""
        fixed = {name: getattr(self, name) for name in type(self).model_fields if name != "tags"}
        return {**{k: v for k, v in fixed.items() if v is not None}, **self.tags}


def _typed_clause(name: str, value: Any, declared: dict[str, pa.DataType]) -> Any:
    """`value` as the clause a tag of the declared type takes; a validation error naming the tags
    there are (or the form the tag needs)."""
    kind = declared.get(name)
    if kind is None:
        known = [*(n for n in Select.model_fields if n != "tags"), *declared]
        known = list(dict.fromkeys(known))
        raise PydanticCustomError(
            "unknown_tag",
            f"unknown tag {name!r}: no stage declares it; the tags are {', '.join(known)} "
            "(a plugin stage's tag needs the plugin installed)",
        )
    if pa.types.is_boolean(kind):
        if isinstance(value, bool):
            return value
        need = "true or false"
    elif pa.types.is_integer(kind) or pa.types.is_floating(kind):
        if isinstance(value, dict) and set(value) <= {"min", "max"}:
            return Range.model_validate(value)
        need = "a range {min: X, max: Y}"
    elif pa.types.is_string(kind) or pa.types.is_large_string(kind):
        values = _as_list(value)
        if isinstance(values, list) and values and all(isinstance(v, str) for v in values):
            return values
        need = "a value or a list of values"
    else:
        raise PydanticCustomError(
            "tag_type", f"tag {name!r} is of type {kind}, which a select clause cannot compare"
        )
    raise PydanticCustomError("tag_clause", f"tag {name!r} is {kind}: its clause takes {need}")


class Component(StrictModel):
    name: str = Field(pattern=NAME_PATTERN)
    select: Select = Select()
    weight: float = Field(ge=0, le=1)
    """Share of the main phase's sequences (phases may override)."""
    max_epochs: float = Field(1.0, gt=0)
    """Epoch cap summed over phases: sequences drawn / sequences per epoch."""


class Phase(StrictModel):
    name: str = Field(pattern=NAME_PATTERN)
    share: float = Field(gt=0, le=1)
    """Share of the total token budget spent in this phase."""
    seq_length: int | None = Field(None, ge=8)
    """Defaults to build.seq_length."""
    weights: dict[str, Annotated[float, Field(ge=0)]] | None = None
    """Component name -> weight (missing names get 0); defaults to the components' weights."""


class Recipe(StrictModel):
    name: str = Field("mixture", pattern=NAME_PATTERN)
    components: list[Component] = Field(min_length=1)
    phases: list[Phase] = Field(default_factory=list)


class Replan(StrictModel):
    """Weights changed mid-run: keep what the run consumed, re-allocate the rest."""

    mixture: str
    """The mixture the run has been training on."""
    consumed_sequences: int = Field(ge=0)
    """The trainer's data state: samples consumed so far (whole global batches)."""


class BuildSettings(StrictModel):
    encoded: str
    """Directory of an `encoded` artifact (`pretrain tokenizer encode`)."""
    tokenizer: str | None = None
    """Tokenizer artifact directory; its identity must match the encoded data's."""
    tokenizer_sha256: str | None = None
    """The pinned tokenizer identity (its manifest's `tokenizer.sha256`); refused when the data
    differs."""
    total_tokens: Annotated[int, BeforeValidator(_as_number)] = Field(gt=0)
    seq_length: int = Field(2048, ge=8)
    global_batch: int = Field(gt=0)
    """W: sequences per global batch; every aligned batch, and every prefix of the index, holds
    each component within 1 sequence of its quota."""
    seed: int = Field(1234, ge=0)
    model_params: Annotated[float, BeforeValidator(_as_number)] | None = Field(None, gt=0)
    """Optional model size: tokens per parameter is printed, warned outside 15-30."""
    decontaminate: list[str] = Field(default_factory=list)
    """`evalset` artifact directories (`pretrain eval build`): the training documents they found
    to be near-copies of eval documents are excluded from every component. Part of the build
    hash, not the recipe hash (the gate compares recipes)."""

    @field_validator("tokenizer_sha256")
    @classmethod
    def _hex(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[0-9a-f]{64}", value):
            raise ValueError(
                "must be the 64-hex sha256 identity of the tokenizer (`pretrain show TOKENIZER`)"
            )
        return value


class MixtureConfig(StrictModel):
    recipe: Recipe
    build: BuildSettings
    out: str
    """Directory the mixture artifact is written to."""
    replan: Replan | None = None


def recipe_sha256(recipe: Recipe) -> str:
    """The sha256 of the canonical recipe (its JSON dump; a clause on a declared tag is a key of
    its select like any built-in one, so it changes the hash too)."""
    return sha256_bytes(canonical_json(recipe.model_dump(mode="json")))


def build_sha256(
    config: MixtureConfig,
    *,
    tokenizer_sha256: str,
    encoded_sha256: str,
    replan_from: str | None = None,
) -> str:
    """Recipe + everything that changes which tokens a run sees, and in which order."""
    settings = config.build.model_dump(mode="json", exclude={"encoded", "tokenizer"})
    payload = {
        "recipe_sha256": recipe_sha256(config.recipe),
        "build": settings,
        "tokenizer_sha256": tokenizer_sha256,
        "encoded_manifest_sha256": encoded_sha256,
        "replan": None
        if config.replan is None
        else {
            "from_build_sha256": replan_from,
            "consumed_sequences": config.replan.consumed_sequences,
        },
    }
    return sha256_bytes(canonical_json(payload))


def resolved_phases(config: MixtureConfig) -> list[Phase]:
    """The phases with seq_length and weights filled in (one `main` phase when none are given)."""
    recipe = config.recipe
    default = {c.name: c.weight for c in recipe.components}
    phases = recipe.phases or [Phase(name="main", share=1.0)]
    return [
        Phase(
            name=p.name,
            share=p.share,
            seq_length=p.seq_length or config.build.seq_length,
            weights={name: (p.weights or default).get(name, 0.0) for name in default},
        )
        for p in phases
    ]


def check_recipe(config: MixtureConfig) -> None:
    """Refuse, with one line each, duplicate names, weights or shares not summing to 1."""
    recipe = config.recipe
    names = [c.name for c in recipe.components]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(
            f"recipe.components: duplicate name(s) {', '.join(dupes)}; give each "
            "component a unique name"
        )
    total = sum(c.weight for c in recipe.components)
    if not math.isclose(total, 1.0, abs_tol=WEIGHT_TOLERANCE):
        raise ConfigError(
            f"recipe.components[*].weight sum to {total:.6g}, not 1; rescale the "
            "weights so they sum to 1"
        )
    phase_names = [p.name for p in recipe.phases]
    if len(set(phase_names)) != len(phase_names):
        raise ConfigError(f"recipe.phases: duplicate phase names {phase_names}; make them unique")
    if recipe.phases:
        share = sum(p.share for p in recipe.phases)
        if not math.isclose(share, 1.0, abs_tol=WEIGHT_TOLERANCE):
            raise ConfigError(
                f"recipe.phases[*].share sum to {share:.6g}, not 1; rescale the "
                "phase shares so they sum to 1"
            )
    for i, phase in enumerate(recipe.phases):
        _check_phase_weights(i, phase, names)


def _check_phase_weights(i: int, phase: Phase, names: list[str]) -> None:
    if phase.weights is None:
        return
    unknown = sorted(set(phase.weights) - set(names))
    if unknown:
        raise ConfigError(
            f"recipe.phases[{i}].weights: unknown component(s) {', '.join(unknown)};"
            f" components are {', '.join(names)}"
        )
    total = sum(phase.weights.values())
    if not math.isclose(total, 1.0, abs_tol=WEIGHT_TOLERANCE):
        raise ConfigError(
            f"recipe.phases[{i}].weights ({phase.name}) sum to {total:.6g}, not 1; "
            "rescale them so they sum to 1"
        )
