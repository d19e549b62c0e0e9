"""Every artifact kind's manifest model, by kind name (for tools that read any artifact, such as
`pretrain show`; a package reading one kind imports that kind's module instead)."""

from __future__ import annotations

import os
from typing import Any

from pretrain.artifacts import (
    ablation,
    dedup_index,
    encoded,
    eval_results,
    evalset,
    export,
    mixture,
    mixture_report,
    model,
    raw,
    run,
    shards,
    tokenizer_eval,
)
from pretrain.artifacts import tokenizer as tokenizer_kind
from pretrain.artifacts.base import Manifest
from pretrain.errors import ArtifactError

MANIFESTS: dict[str, type[Manifest]] = {
    m.KIND: m
    for m in (
        shards.ShardsManifest,
        model.FasttextManifest,
        model.KenlmManifest,
        tokenizer_kind.TokenizerManifest,
        encoded.EncodedManifest,
        evalset.EvalsetManifest,
        mixture.MixtureManifest,
        mixture_report.MixtureReportManifest,
        run.RunManifest,
        ablation.AblationManifest,
        export.ExportManifest,
        run.CheckpointManifest,
        tokenizer_eval.TokenizerEvalManifest,
        eval_results.EvalManifest,
        dedup_index.DedupIndexManifest,
        raw.RawManifest,
    )
}


def typed(raw: dict[str, Any], directory: str | os.PathLike) -> Manifest | None:
    """`raw` as its kind's model; None for a kind without one or fields no version wrote."""
    manifest_model = MANIFESTS.get(str(raw.get("kind")))
    if manifest_model is None:
        return None
    try:
        return manifest_model.parse(raw, directory)  # type: ignore[no-any-return]
    except ArtifactError:
        return None
