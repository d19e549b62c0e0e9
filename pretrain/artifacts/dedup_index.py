"""`dedup-index` (the dedup stage's `save_index`): a MinHash LSH index of a corpus's documents.

Partitioned band tables; the manifest records the settings the index was built with under
`dedup` (the MinHash/LSH settings, `bands`, `rows`, `partitions`), which a pipeline run that
dedups against it must share.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

from pretrain.artifacts import base

KIND = "dedup-index"


class DedupIndexFields(base.Fields):
    KIND: ClassVar[str] = KIND
    dedup: dict[str, Any]


class DedupIndexManifest(DedupIndexFields, base.Manifest):
    """A dedup-index artifact's manifest, as `open` reads it."""


write = base.Writer(DedupIndexFields)
"""Write a dedup index's manifest once its band tables are written."""


class DedupIndex(base.Artifact[DedupIndexManifest]):
    """A verified dedup-index artifact."""


def open(directory: str | os.PathLike, *, full: bool | None = None) -> DedupIndex:
    root, manifest, raw = base.verified(directory, DedupIndexManifest, full=full)
    return DedupIndex(root, manifest, raw)
