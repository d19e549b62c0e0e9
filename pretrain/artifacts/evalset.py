"""`evalset` (`pretrain eval build`): `sets/<domain>__<lang>.parquet`, `tasks/*.jsonl`, and
`contaminated.parquet`, the training ids a mixture excludes (`build.decontaminate`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from pretrain.artifacts import base

KIND = "evalset"
CONTAMINATED_FILE = "contaminated.parquet"


class SetEntry(base.Record):
    name: str
    domain: str
    lang: str
    documents: int | None = None
    bytes: int | None = None


class EvalsetFields(base.Fields):
    KIND: ClassVar[str] = KIND
    sets: list[SetEntry] = Field(default_factory=list)
    tasks: list[dict[str, Any]] = Field(default_factory=list)


class Evalset(base.Artifact[EvalsetFields]):
    """A verified evalset artifact."""

    def set_path(self, entry: SetEntry) -> Path:
        return self.path(f"sets/{entry.name}.parquet")

    def contaminated_ids(self) -> set[str]:
        """Training document ids a mixture must exclude to keep these sets held out."""
        import pyarrow.parquet as pq

        table = pq.read_table(self.path(CONTAMINATED_FILE), columns=["train_id"])
        return set(table.column("train_id").to_pylist())

    def task_paths(self) -> list[Path]:
        return sorted(
            self.path(rel)
            for rel in self.raw["files"]
            if rel.startswith("tasks/") and rel.endswith(".jsonl")
        )


open = Evalset.open
