"""Every artifact kind's field model, by kind name (for tools that read any artifact, such as
`pretrain show`; a package reading one kind imports that kind's module instead)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pretrain.artifacts import (
    ablation,
    dedup_index,
    encoded,
    eval_results,
    evalset,
    export,
    megatron_export,
    mixture,
    mixture_report,
    model,
    raw,
    run,
    shards,
    tokenizer_eval,
)
from pretrain.artifacts import tokenizer as tokenizer_kind
from pretrain.artifacts.base import Fields, fields_of
from pretrain.errors import ArtifactError

FIELDS: dict[str, type[Fields]] = {
    f.KIND: f
    for f in (
        shards.ShardsFields,
        model.FasttextFields,
        model.KenlmFields,
        tokenizer_kind.TokenizerFields,
        encoded.EncodedFields,
        evalset.EvalsetFields,
        mixture.MixtureFields,
        mixture_report.MixtureReportFields,
        run.RunFields,
        ablation.AblationFields,
        export.ExportFields,
        run.CheckpointFields,
        tokenizer_eval.TokenizerEvalFields,
        eval_results.EvalFields,
        dedup_index.DedupIndexFields,
        raw.RawFields,
        megatron_export.MegatronExportFields,
    )
}


def typed(raw: Mapping[str, Any], directory: object) -> Fields | None:
    """The kind's fields of manifest `raw`; None for a kind without a model or fields of
    another shape (`pretrain show` then prints the counts only)."""
    model = FIELDS.get(str(raw.get("kind")))
    if model is None:
        return None
    try:
        return fields_of(model, raw, directory)
    except ArtifactError:
        return None
