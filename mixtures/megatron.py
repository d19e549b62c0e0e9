"""`pretrain mixture export MIXTURE --megatron --out DIR` (docs/mixtures.md): a weight over our
prefixes cannot express a component (a tag selection spread over many prefixes), so each
component's documents are copied into a prefix of its own, `DIR/<name>.bin/.idx`, and per phase
`DIR/<n>-<phase>.data-args` holds `weight prefix` pairs (the component's share of the index)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from pretrain.artifacts import encoded as encoded_kind
from pretrain.artifacts import megatron_export as export_kind
from pretrain.artifacts import mixture as mixture_kind
from pretrain.artifacts.base import write_artifact
from pretrain.locking import output_lock
from pretrain.output_check import require_own_output
from pretrain.progress import Progress
from pretrain.publish import publishing
from pretrain.storage import write_atomic


def data_args(weights: dict[str, float], directory: Path) -> str:
    """`w1 prefix1 w2 prefix2 ...` (Megatron-LM's `--data-path` form), components with a
    positive weight only, prefixes absolute."""
    pairs = [f"{weight:.12g} {directory / name}" for name, weight in weights.items() if weight > 0]
    return " ".join(pairs) + "\n"


def phase_weights(mixture: mixture_kind.Mixture) -> dict[str, dict[str, float]]:
    """Per phase file name, component -> its share of the phase's sample index."""
    names = [c.name for c in mixture.fields.components]
    blends = {}
    for number, phase in enumerate(mixture.fields.phases):
        component = mixture.index(number)["component"]
        counts = np.bincount(component, minlength=len(names))
        total = max(int(counts.sum()), 1)
        shares = {name: int(count) / total for name, count in zip(names, counts, strict=True)}
        blends[f"{number}-{phase.name}.data-args"] = shares
    return blends


def _copy_component(
    docs: np.ndarray, prefixes: list[Path], dtype: type, prefix: Path
) -> tuple[int, int]:
    """The documents `docs` (selection.DOCS_DTYPE rows) copied in order into `prefix`."""
    from megatron.core.datasets.indexed_dataset import IndexedDataset, IndexedDatasetBuilder

    builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=dtype)
    readers: dict[int, Any] = {}
    tokens = 0
    for source, doc in zip(docs["prefix"].tolist(), docs["doc"].tolist(), strict=True):
        if source not in readers:
            readers[source] = IndexedDataset(str(prefixes[source]))
        document = readers[source].get(doc)
        builder.add_document(document, [document.size])
        tokens += int(document.size)
    builder.finalize(f"{prefix}.idx")
    return len(docs), tokens


def export_megatron(mixture_dir: str | Path, out: str | Path) -> dict[str, Any]:
    """Write the per-component prefixes and per-phase data-args files; return the manifest."""
    with output_lock(out):
        out = Path(out)
        require_own_output(out, "--out", export_kind.KIND)
        mixture = mixture_kind.open(mixture_dir)
        encoded = encoded_kind.open(mixture.recorded_encoded())
        prefixes = encoded.prefix_paths()  # the numbering components/<name>.npy uses
        dtype = np.uint16 if encoded.fields.token_dtype == "uint16" else np.int32
        final = out.resolve()
        counts: dict[str, Any] = {"documents": 0, "tokens": 0}
        with publishing(out) as scratch:
            components = {}
            for component in Progress(mixture.fields.components, desc="export", unit="component"):
                docs = np.load(mixture.path(f"components/{component.name}.npy"))
                documents, tokens = _copy_component(docs, prefixes, dtype, scratch / component.name)
                components[component.name] = {"documents": documents, "tokens": tokens}
                counts["documents"] += documents
                counts["tokens"] += tokens
            blends = phase_weights(mixture)
            for name, weights in blends.items():
                write_atomic(scratch / name, data_args(weights, final).encode())
            fields = export_kind.MegatronExportFields(
                mixture_build_sha256=mixture.fields.build_sha256,
                components=components,
                blends=blends,
                token_dtype=encoded.fields.token_dtype,
            )
            manifest = write_artifact(
                scratch,
                fields,
                config={"mixture": str(Path(mixture_dir).resolve())},
                inputs=[mixture_dir],
                counts=counts,
            )
        return manifest
