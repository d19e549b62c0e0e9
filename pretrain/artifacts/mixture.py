"""`mixture` (`pretrain mixture build`): per phase a sample index `index/<phase>-<name>.npy`
(component and draw per sample, sample i consumed at step i // global_batch), `components/*.npy`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import Field

from pretrain.artifacts import base
from pretrain.errors import ArtifactError

if TYPE_CHECKING:
    import numpy as np

KIND = "mixture"


class Phase(base.Record):
    name: str
    seq_length: int
    num_sequences: int
    index: str
    weights: dict[str, float] = Field(default_factory=dict)


class Component(base.Record):
    name: str
    weight: float | None = None
    max_epochs: float | None = None
    available_tokens: int | None = None
    documents: int | None = None
    select_sha256: str | None = None


class MixtureFields(base.Fields):
    KIND: ClassVar[str] = KIND
    recipe_sha256: str | None = None
    build_sha256: str | None = None
    tokenizer: base.TokenizerRef | None = None
    encoded_manifest_sha256: str | None = None
    global_batch: int | None = None
    seed: int = 0
    recipe_name: str | None = None
    phases: list[Phase] = Field(default_factory=list)
    components: list[Component] = Field(default_factory=list)
    decontaminated: dict[str, Any] = Field(default_factory=dict)


class Mixture(base.Artifact[MixtureFields]):
    """A verified mixture artifact."""

    @property
    def identity(self) -> dict[str, Any]:
        """The hashes a run and the launch gate bind to."""
        m = self.fields
        return {
            "recipe_sha256": m.recipe_sha256,
            "build_sha256": m.build_sha256,
            "tokenizer_sha256": m.tokenizer.sha256 if m.tokenizer else None,
            "data_manifest_sha256": m.encoded_manifest_sha256,
        }

    def index(self, phase: int) -> np.ndarray:
        """Phase number `phase`'s sample index (a listed file), memory-mapped."""
        import numpy as np

        path = self.path(self.fields.phases[phase].index)
        return np.load(path, mmap_mode="r", allow_pickle=False)

    def recorded_encoded(self) -> Path:
        """The encoded artifact the mixture was built from (its lineage entry)."""
        entry = self.manifest.input_of("encoded")
        if entry is None:
            raise ArtifactError(
                f"{self.directory} records no encoded input; pass the encoded directory"
            )
        return Path(entry.path)


open = Mixture.open
