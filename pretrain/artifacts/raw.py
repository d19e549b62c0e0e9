"""`raw`: input files gathered as an artifact (the demo's copy of the embedded sample), so the
data job's lineage starts at a hashed input."""

from __future__ import annotations

from typing import ClassVar

from pretrain.artifacts import base

KIND = "raw"


class RawFields(base.Fields):
    """Raw inputs record only the common fields (config: where they came from)."""

    KIND: ClassVar[str] = KIND


class Raw(base.Artifact[RawFields]):
    """A verified raw artifact."""

    @property
    def total_bytes(self) -> int:
        return sum(entry.bytes for entry in self.manifest.files.values())


open = Raw.open
