"""`ablation` (`pretrain ablate`): the decision report over proxy runs of mixture recipes
(`report.json`). The launch gate reads it here (`open(dir).report_json`) and re-applies the decision
rule itself (trainer.gate): the trainer needs nothing from evals."""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cached_property
from typing import Any, ClassVar

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


class Ablation(base.Artifact[AblationFields]):
    """A verified ablation artifact; `.report_json` is its report.json (its bytes hashed by the
    manifest, so reading it after `open` reads what was verified)."""

    @cached_property
    def report_json(self) -> dict[str, Any]:
        """report.json as written (every field, typed or not)."""
        return dict(json.loads(self.path(REPORT_FILE).read_bytes()))


open = Ablation.open
