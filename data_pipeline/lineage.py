"""The job's lineage: the artifact directories (holding a manifest.json) its local inputs lie in,
and those its stages read (`Stage.models()`: a model, the dedup index it deduplicates against)."""

from __future__ import annotations

import os
from pathlib import Path

from data_pipeline.formats import InputFile
from data_pipeline.stages.base import Stage


def input_artifacts(files: list[InputFile]) -> list[str]:
    """Artifact directories (with a manifest.json) that hold input files: the job's lineage.
    Each folder is resolved and looked at once for all the files in or below it (a million
    inputs in a few folders cost a few stats, not one per parent folder of every file)."""
    dirs: list[str] = []
    resolved: dict[str, Path] = {}
    holder: dict[Path, Path | None] = {}
    for item in files:
        if "://" in item.path:
            continue
        if os.path.islink(item.path):  # a linked file's lineage is where it leads
            folder = Path(item.path).resolve().parent
        else:
            parent = os.path.dirname(item.path) or "."
            folder = resolved.get(parent) or resolved.setdefault(parent, Path(parent).resolve())
        found = _artifact_holding(folder, holder)
        if found is not None and str(found) not in dirs:
            dirs.append(str(found))
    return dirs


def _artifact_holding(folder: Path, holder: dict[Path, Path | None]) -> Path | None:
    """The nearest folder at or above `folder` with a manifest.json (None: no such folder);
    `holder` remembers the answer for every folder looked at."""
    walked: list[Path] = []
    found: Path | None = None
    for candidate in (folder, *folder.parents):
        if candidate in holder:
            found = holder[candidate]
            break
        walked.append(candidate)
        if (candidate / "manifest.json").is_file():
            found = candidate
            break
    for candidate in walked:
        holder[candidate] = found
    return found


def stage_artifacts(stages: list[Stage]) -> list[str]:
    """The artifact directories the stages read (`Stage.models()` that hold a manifest.json),
    each once, in stage order: inputs of the job beside its data."""
    found: list[str] = []
    for stage in stages:
        for path in stage.models().values():
            if (path / "manifest.json").is_file() and str(path) not in found:
                found.append(str(path))
    return found
