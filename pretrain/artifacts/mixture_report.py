"""`mixture-report` (`pretrain mixture report`): target vs realised shares of a built mixture.

`report.json` and `report.png`. Written by default inside the mixture (`MIXTURE/report/`), after
the mixture's manifest: as an artifact of its own it is not one of the mixture's unlisted files,
so `pretrain verify MIXTURE` still passes (as TOKENIZER/eval and RUN/evals do).
"""

from __future__ import annotations

from typing import ClassVar

from pretrain.artifacts import base

KIND = "mixture-report"


class MixtureReportFields(base.Fields):
    KIND: ClassVar[str] = KIND
    build_sha256: str
    """The build hash of the mixture reported on."""


open = base.Artifact[MixtureReportFields].open
