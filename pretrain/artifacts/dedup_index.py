"""`dedup-index`: a MinHash LSH index (partitioned band tables); `dedup` holds the settings a run
that dedups against it must share."""

from __future__ import annotations

from typing import Any, ClassVar

from pretrain.artifacts import base

KIND = "dedup-index"


class DedupIndexFields(base.Fields):
    KIND: ClassVar[str] = KIND
    dedup: dict[str, Any]


open = base.Artifact[DedupIndexFields].open
