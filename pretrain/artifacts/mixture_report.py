"""`mixture-report` (`pretrain mixture report`): `report.json`, `report.png`; by default nested in
the mixture (`MIXTURE/report/`) as an artifact of its own, after the mixture's manifest."""

from __future__ import annotations

from typing import ClassVar

from pretrain.artifacts import base

KIND = "mixture-report"


class MixtureReportFields(base.Fields):
    KIND: ClassVar[str] = KIND
    build_sha256: str
    """The build hash of the mixture reported on."""


open = base.Artifact[MixtureReportFields].open
