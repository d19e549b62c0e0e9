"""`dedup-index` (the dedup stage's `save_index`): a MinHash LSH index of a corpus's documents.

Partitioned band tables; the manifest records the settings the index was built with under
`dedup` (the MinHash/LSH settings, `bands`, `rows`, `partitions`), which a pipeline run that
dedups against it must share.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pretrain.artifacts import base

KIND = "dedup-index"


class DedupIndexFields(base.Fields):
    KIND: ClassVar[str] = KIND
    dedup: dict[str, Any]


open = base.Artifact[DedupIndexFields].open
