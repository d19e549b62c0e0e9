"""`raw`: input files gathered as an artifact (the demo's copy of the embedded sample), so the
data job's lineage starts at a hashed input."""

from __future__ import annotations

import os
from typing import ClassVar

from pretrain.artifacts import base

KIND = "raw"


class RawFields(base.Fields):
    """Raw inputs record only the common fields (config: where they came from)."""

    KIND: ClassVar[str] = KIND


class RawManifest(RawFields, base.Manifest):
    """A raw artifact's manifest, as `open` reads it."""


write = base.Writer(RawFields)
"""Write the manifest of a directory of raw input files."""


class Raw(base.Artifact[RawManifest]):
    """A verified raw artifact."""

    @property
    def total_bytes(self) -> int:
        return sum(entry.bytes for entry in self.manifest.files.values())


def open(directory: str | os.PathLike, *, full: bool | None = None) -> Raw:
    root, manifest, raw = base.verified(directory, RawManifest, full=full)
    return Raw(root, manifest, raw)
