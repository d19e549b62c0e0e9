"""`ablation` (`pretrain ablate`): the decision report over proxy runs of mixture recipes
(`report.json`). The launch gate reads it here (`open(dir).report`) and re-applies the decision
rule itself (trainer.gate): the trainer needs nothing from evals."""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cached_property
from typing import Any, ClassVar

from pydantic import Field

from pretrain.artifacts import base

KIND = "ablation"
REPORT_FILE = "report.json"


class AblationFields(base.Fields):
    """The report fields the manifest repeats (`fields_of(report)`), so `pretrain show` needs
    no report.json."""

    KIND: ClassVar[str] = KIND
    chosen_recipe_sha256: str | None = None
    base_recipe_sha256: str | None = None
    tokenizer_sha256: str | None = None
    data_manifest_sha256: str | None = None
    passed: bool | None = None
    target_metric: str | None = None


def fields_of(report: Mapping[str, Any]) -> AblationFields:
    """The manifest fields of an ablation whose report is `report`."""
    return AblationFields(**{key: report.get(key) for key in AblationFields.model_fields})


class Report(base.Record):
    """The parts of report.json the gate binds to (the rest is kept as written)."""

    chosen_recipe_sha256: str | None = None
    chosen_recipe_name: str | None = None
    base_recipe_sha256: str | None = None
    tokenizer_sha256: str | None = None
    data_manifest_sha256: str | None = None
    target_metric: str | None = None
    primary_proxy: str | None = None
    passed: bool | None = None
    criteria: dict[str, Any] = Field(default_factory=dict)
    summary: dict[str, Any] = Field(default_factory=dict)
    runs: list[dict[str, Any]] = Field(default_factory=list)
    scale_agreement: Any = None


class Ablation(base.Artifact[AblationFields]):
    """A verified ablation artifact; `.report` is its report.json (its bytes hashed by the
    manifest, so reading it after `open` reads what was verified)."""

    @cached_property
    def report_json(self) -> dict[str, Any]:
        """report.json as written (every field, typed or not)."""
        return dict(json.loads(self.path(REPORT_FILE).read_bytes()))

    @cached_property
    def report(self) -> Report:
        return Report.model_validate(self.report_json)


open = Ablation.open
