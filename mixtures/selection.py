"""Each component's documents: the encoded sidecars' rows matching every clause of its `select`,
never `split == eval`; unknown tag values and empty or overlapping components are refused."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mixtures.recipe import Component, Range
from pretrain.artifacts.encoded import SIDECAR_SUFFIX
from pretrain.errors import ArtifactError, ConfigError
from pretrain.manifest import canonical_json, sha256_bytes
from tokenizer.encode import sidecar_schema

CORE_COLUMNS = ("doc_index", "id", "num_tokens", "source", "split")
"""Sidecar columns every encoder wrote; the others are the stages' tags (tokenizer.encode)."""
_WIDE = {pa.float32(): pa.float64(), pa.int32(): pa.int64()}
"""Tags and counts are read widened (float64 ranges, int64 token sums)."""
DOCS_DTYPE = np.dtype([("prefix", "<i4"), ("doc", "<i8"), ("tokens", "<i8")])
"""A component's document list: which encoded prefix, which document of it, its token count."""


@dataclass
class Sidecars:
    """All sidecar rows of an encoded artifact, with the prefix number of each row."""

    table: pa.Table
    prefix_of_row: np.ndarray


def load_sidecars(encoded_dir: Path, prefixes: list[str]) -> Sidecars:
    tables, owners = [], []
    for number, stem in enumerate(prefixes):
        path = encoded_dir / f"{stem}{SIDECAR_SUFFIX}"
        if not path.is_file():
            raise ArtifactError(
                f"{path} is missing: the encoded artifact lists prefix {stem!r} "
                "without its sidecar; re-run `pretrain tokenizer encode`"
            )
        table = _read_sidecar(path)
        doc_index = table.column("doc_index").to_numpy()
        if not np.array_equal(doc_index, np.arange(table.num_rows)):
            raise ArtifactError(
                f"{path}: doc_index is not 0..{table.num_rows - 1} in order; "
                "the sidecar does not match its .bin; re-encode"
            )
        tables.append(table)
        owners.append(np.full(table.num_rows, number, dtype=np.int32))
    if not tables:
        raise ArtifactError(f"{encoded_dir}: the encoded artifact lists no prefixes; re-encode")
    return Sidecars(pa.concat_tables(tables), np.concatenate(owners))


def _read_sidecar(path: Path) -> pa.Table:
    """A sidecar with the columns the encoder writes now (tokenizer.encode.sidecar_schema), widened;
    a stage's tag it lacks (encoded before the stage existed) reads as typed nulls."""
    table = pq.read_table(path)
    missing = [c for c in CORE_COLUMNS if c not in table.column_names]
    if missing:
        raise ArtifactError(
            f"{path} lacks sidecar column(s) {', '.join(missing)}; re-encode "
            "with a current `pretrain tokenizer encode`"
        )
    fields = [pa.field(f.name, _WIDE.get(f.type, f.type)) for f in sidecar_schema()]
    columns = [
        table.column(f.name).cast(f.type)
        if f.name in table.column_names
        else pa.nulls(table.num_rows, f.type)
        for f in fields
    ]
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))


def _range_mask(column: pa.ChunkedArray, bounds: Range) -> pa.ChunkedArray:
    mask = pc.is_valid(column)
    if bounds.min is not None:
        mask = pc.and_(mask, pc.greater_equal(column, bounds.min))
    if bounds.max is not None:
        mask = pc.and_(mask, pc.less_equal(column, bounds.max))
    return pc.fill_null(mask, False)


def _values_mask(
    name: str, column: pa.ChunkedArray, wanted: list[str], train: pa.ChunkedArray, where: str
) -> pa.ChunkedArray:
    present = {v for v in pc.unique(pc.filter(column, train)).to_pylist() if v is not None}
    if name == "source":
        unknown = [g for g in wanted if not fnmatch.filter(sorted(present), g)]
        matched = sorted({v for g in wanted for v in fnmatch.filter(sorted(present), g)})
    else:
        unknown = [v for v in wanted if v not in present]
        matched = wanted
    if unknown:
        shown = ", ".join(sorted(present)[:12]) or "none (the tag is null everywhere)"
        raise ConfigError(
            f"{where}.{name}: unknown tag value(s) {', '.join(unknown)}; the "
            f"encoded data has {shown}"
        )
    return pc.fill_null(pc.is_in(column, value_set=pa.array(matched, pa.string())), False)


def component_mask(component: Component, sidecars: Sidecars, where: str) -> np.ndarray:
    """Boolean mask over all sidecar rows of the documents `component` selects."""
    table = sidecars.table
    train = pc.fill_null(pc.not_equal(table.column("split"), "eval"), False)
    mask = train
    for name, value in component.select.clauses().items():
        column = table.column(name)
        if column.null_count == len(column):
            raise ConfigError(
                f"{where}.{name}: the tag is null in every document (the stage "
                "that provides it did not run); drop the clause or re-run the data "
                "pipeline with that stage"
            )
        if isinstance(value, list):
            clause = _values_mask(name, column, value, train, where)
        elif isinstance(value, bool):
            clause = pc.fill_null(pc.equal(column, value), False)
        else:
            clause = _range_mask(column, value)
        mask = pc.and_(mask, clause)
    return np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool)


def select_components(
    components: list[Component], sidecars: Sidecars, exclude_ids: frozenset[str] = frozenset()
) -> list[np.ndarray]:
    """Each component's documents (DOCS_DTYPE), minus `exclude_ids` (decontamination);
    overlapping selections are refused."""
    owner = np.full(sidecars.table.num_rows, -1, dtype=np.int32)
    keep = np.ones(sidecars.table.num_rows, dtype=bool)
    if exclude_ids:
        value_set = pa.array(sorted(exclude_ids), pa.string())
        excluded = pc.is_in(sidecars.table.column("id"), value_set=value_set)
        keep = ~np.asarray(pc.fill_null(excluded, False).to_numpy(zero_copy_only=False))
    tokens = sidecars.table.column("num_tokens").to_numpy(zero_copy_only=False)
    doc_index = sidecars.table.column("doc_index").to_numpy(zero_copy_only=False)
    selected = []
    for k, component in enumerate(components):
        where = f"recipe.components[{k}].select ({component.name})"
        mask = component_mask(component, sidecars, where) & keep
        if not mask.any():
            raise ConfigError(
                f"{where} matches no training document; loosen the selection or "
                "remove the component"
            )
        clash = np.unique(owner[mask & (owner >= 0)])
        if clash.size:
            other = components[int(clash[0])].name
            raise ConfigError(
                f"{where} overlaps component {other!r} "
                f"({int((mask & (owner == clash[0])).sum())} documents in both); "
                "make the selections disjoint so epoch caps mean what they say"
            )
        owner[mask] = k
        docs = np.empty(int(mask.sum()), dtype=DOCS_DTYPE)
        docs["prefix"] = sidecars.prefix_of_row[mask]
        docs["doc"] = doc_index[mask]
        docs["tokens"] = tokens[mask]
        selected.append(docs)
    return selected


def select_sha256(component: Component) -> str:
    """Identity of a component's selection (used to refuse a re-plan that changes selections)."""
    return sha256_bytes(canonical_json(component.select.model_dump(mode="json")))
