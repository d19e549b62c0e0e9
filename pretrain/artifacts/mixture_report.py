"""`mixture-report` (`pretrain mixture report`): target vs realised shares of a built mixture.

`report.json` and `report.png`. Written by default inside the mixture (`MIXTURE/report/`), after
the mixture's manifest: as an artifact of its own it is not one of the mixture's unlisted files,
so `pretrain verify MIXTURE` still passes (as TOKENIZER/eval and RUN/evals do).
"""

from __future__ import annotations

import os
from typing import ClassVar

from pretrain.artifacts import base

KIND = "mixture-report"
REPORT_FILE = "report.json"


class MixtureReportFields(base.Fields):
    KIND: ClassVar[str] = KIND
    build_sha256: str
    """The build hash of the mixture reported on."""


class MixtureReportManifest(MixtureReportFields, base.Manifest):
    """A mixture-report artifact's manifest, as `open` reads it."""


write = base.Writer(MixtureReportFields)
"""Write a mixture-report manifest once report.json and report.png are written."""


class MixtureReport(base.Artifact[MixtureReportManifest]):
    """A verified mixture-report artifact."""


def open(directory: str | os.PathLike, *, full: bool | None = None) -> MixtureReport:
    root, manifest, raw = base.verified(directory, MixtureReportManifest, full=full)
    return MixtureReport(root, manifest, raw)
