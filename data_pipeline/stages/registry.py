"""The stage registry, derived from the stage classes themselves: adding a stage is one module.

Stages are the concrete `Stage` subclasses named in their own class body, found in every module of
`data_pipeline.stages` and in the `pretrain.stages` entry points of installed distributions (a
plugin whose import fails is listed: enabling it is a one-line error naming the failure). Read
once per process, in the driver; workers rebuild a stage from its `spec()` (`base.build_stage`).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import pkgutil
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import metadata
from typing import Any

import pyarrow as pa
from pydantic import ValidationError

from data_pipeline.stages.base import Stage, StageSection
from pretrain import schema
from pretrain.artifacts.shards import Shards
from pretrain.errors import ArtifactError, ConfigError, SchemaError

ENTRY_POINT_GROUP = "pretrain.stages"
"""Entry-point group of stages installed from other distributions."""


@dataclass(frozen=True)
class Unavailable:
    """A stage whose module could not be imported (an entry point whose plugin is broken)."""

    target: str
    error: str


def _own_stages(module: Any) -> list[type[Stage]]:
    """The registrable stages a module defines: concrete, named in their own class body."""
    return [
        cls
        for cls in vars(module).values()
        if inspect.isclass(cls)
        and issubclass(cls, Stage)
        and cls.__module__ == module.__name__
        and "name" in vars(cls)
        and not inspect.isabstract(cls)
    ]


def _builtin() -> list[type[Stage]]:
    package = importlib.import_module("data_pipeline.stages")
    found: list[type[Stage]] = []
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        if info.name not in ("base", "registry"):
            found += _own_stages(importlib.import_module(f"{package.__name__}.{info.name}"))
    return found


def _plugins() -> dict[str, type[Stage] | Unavailable]:
    found: dict[str, type[Stage] | Unavailable] = {}
    for point in sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda p: p.name):
        try:
            loaded = point.load()
        except Exception as exc:  # a broken plugin is reported when a config enables it
            found[point.name] = Unavailable(point.value, f"{type(exc).__name__}: {exc}")
            continue
        if not (inspect.isclass(loaded) and issubclass(loaded, Stage)) or loaded.name != point.name:
            found[point.name] = Unavailable(
                point.value, f"it is not a Stage subclass named {point.name!r}"
            )
            continue
        found[point.name] = loaded
    return found


def _check(classes: Iterable[type[Stage]]) -> None:
    names: dict[str, type[Stage]] = {}
    orders: dict[int, str] = {}
    owners: dict[str, str] = {}
    for cls in classes:
        where = f"{cls.__module__}.{cls.__qualname__}"
        if cls.name in names:
            raise ConfigError(f"two stages are named {cls.name!r}: {where} and {names[cls.name]}")
        if cls.order in orders:
            raise ConfigError(
                f"stages {cls.name!r} ({where}) and {orders[cls.order]!r} have the same order "
                f"{cls.order}; give {cls.name!r} a free `order` (its place in the pipeline)"
            )
        names[cls.name], orders[cls.order] = cls, cls.name
        if not (isinstance(cls.Section, type) and issubclass(cls.Section, StageSection)):
            raise ConfigError(f"stage {cls.name!r} ({where}): `Section` must be a StageSection")
        fields = [f.name for f in cls.columns]
        clash = set(fields) & {f.name for f in schema.BASE_FIELDS}
        if clash or len(set(fields)) != len(fields):
            raise SchemaError(f"stage {cls.name!r} declares base or repeated columns: {fields}")
        stray = [tag for tag in cls.tags if tag not in fields]
        if stray or len(set(cls.tags)) != len(cls.tags):
            raise SchemaError(
                f"stage {cls.name!r} ({where}): tags {list(cls.tags)} must be distinct names "
                f"among its columns {fields}"
            )
        for name in fields:
            if name in owners:
                raise SchemaError(
                    f"column {name!r} is declared by stages {owners[name]!r} and {cls.name!r}; "
                    "each column belongs to one stage"
                )
            owners[name] = cls.name


@functools.cache
def registry() -> dict[str, type[Stage] | Unavailable]:
    """Stage name -> class, in pipeline order (`order`); broken plugins last."""
    plugins = _plugins()
    classes = [*_builtin(), *(c for c in plugins.values() if not isinstance(c, Unavailable))]
    _check(classes)
    taken = {c.name for c in classes}
    ordered: dict[str, type[Stage] | Unavailable] = {
        c.name: c for c in sorted(classes, key=lambda c: c.order)
    }
    ordered.update({n: u for n, u in plugins.items() if n not in taken})
    return ordered


def stage_class(name: str) -> type[Stage]:
    """The class of stage `name`; a one-line error for an unknown or broken one."""
    found = registry().get(name)
    if found is None:
        raise ConfigError(f"unknown stage {name!r}; known stages: {', '.join(registry())}")
    if isinstance(found, Unavailable):
        raise ConfigError(
            f"stages.{name} is enabled but {found.target} is not available ({found.error}); "
            f"set stages.{name}.enabled=false"
        )
    return found


def required_stages() -> dict[str, str]:
    """Stages every job runs -> why (a config without one of them is refused with it)."""
    return {
        name: cls.required
        for name, cls in registry().items()
        if not isinstance(cls, Unavailable) and cls.required
    }


def manifest_sections(stages: Iterable[Stage]) -> dict[str, dict[str, Any]]:
    """The shards manifest's `sections` after `stages` ran: each stage's `manifest_section()`,
    checked against its `Section` (stages recording nothing have none)."""
    sections: dict[str, dict[str, Any]] = {}
    for stage in stages:
        record = stage.manifest_section()
        if record is None:
            continue
        if type(record) is not type(stage).Section:
            raise SchemaError(
                f"stage {stage.name!r}: manifest_section() returned a {type(record).__name__}, "
                f"not its Section {type(stage).Section.__name__}"
            )
        sections[stage.name] = record.model_dump(mode="json")
    return sections


def section(shards: Shards, name: str) -> StageSection:
    """Stage `name`'s typed section of a shards artifact's manifest (its `Section` defaults where
    it did not run). A section of the wrong type is a one-line refusal."""
    cls = stage_class(name)
    record = shards.section_record(name)
    try:
        return cls.Section.model_validate(record)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in (name, *first["loc"]))
        raise ArtifactError(
            f"{shards.directory}: manifest section {where!r} is not what stage {name!r} records "
            f"({first['msg']}); rebuild the artifact"
        ) from None


def tag_fields() -> tuple[pa.Field, ...]:
    """The tags the packages downstream read by name (each stage's `tags`, with the type its
    `columns` give), in pipeline order: the one declaration the shards' readers, the encoder's
    sidecars and the mixtures' select clauses derive from."""
    return tuple(
        field
        for cls in registry().values()
        if not isinstance(cls, Unavailable)
        for field in cls.columns
        if field.name in cls.tags
    )


def schema_for(stages: Iterable[str]) -> pa.Schema:
    """The schema of a table after the given stages have run (base columns first)."""
    return schema.document_schema([field for name in stages for field in stage_class(name).columns])
