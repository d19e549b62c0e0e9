"""What a resumed data job must match: the job (config, stage versions, stage models) and each
input file's identity (docs/data.md#resume); the job's lineage (the artifacts its inputs lie in and
its stages read)."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import Any

from pyarrow import fs as pafs

from data_pipeline import parts
from data_pipeline.config import PipelineConfig
from data_pipeline.formats import InputFile, filesystem_for
from data_pipeline.inputs import Unit, nearest_above, pack_units
from data_pipeline.stages.base import Stage
from pretrain import shards_layout as layout
from pretrain.config import config_sha256
from pretrain.errors import ConfigError, InputError
from pretrain.manifest import MANIFEST, manifest_sha256, sha256_file
from pretrain.output_check import refuse_foreign, refuse_not_a_directory
from pretrain.schema import SCHEMA_VERSION
from pretrain.storage import OutPath, remove_tree, write_json

FINGERPRINT = "fingerprint.json"

FULL_HASH_BYTES = 1 << 20
EDGE_BYTES = 64 << 10


def file_identity(item: InputFile) -> dict[str, Any]:
    """{size, mtime_ns, inode, ctime_ns} of a local input, from one os.stat: any write moves its
    ctime, which no restore of the mtime (`cp -p`, `rsync -a`, `touch -d`) undoes, so no byte is
    read. An object has no ctime and its mtime counts whole seconds: {size, mtime_ns, sha256 (up
    to `FULL_HASH_BYTES`) | edges_sha256 (size, first and last `EDGE_BYTES`)[, etag]}, the ETag
    (which the store changes with every write of other bytes) from the answer to its open."""
    filesystem, path = filesystem_for(item.path)
    try:
        if "://" not in item.path:
            info = os.stat(path)
            if not stat.S_ISREG(info.st_mode):
                raise OSError("not a file")
            local = {"inode": info.st_ino, "ctime_ns": info.st_ctime_ns}
            return {"size": info.st_size, "mtime_ns": info.st_mtime_ns, **local}
        entry = filesystem.get_file_info(path)
        if entry.type != pafs.FileType.File:
            raise OSError("not a file")
        size = int(entry.size)
        with filesystem.open_input_file(path) as handle:
            etag = handle.metadata().get("ETag")
            if size <= FULL_HASH_BYTES:
                content = {"sha256": _sha(handle.read())}
            else:
                head = handle.read(EDGE_BYTES)
                handle.seek(size - EDGE_BYTES)
                edges = str(size).encode() + b"\0" + head + handle.read(EDGE_BYTES)
                content = {"edges_sha256": _sha(edges)}
    except OSError as exc:
        raise InputError(
            f"input {item.path}: cannot be read ({exc}); fix or remove it, or set "
            "on_unreadable=reject"
        ) from None
    found = {"size": size, "mtime_ns": entry.mtime_ns, **content}
    return found | ({"etag": etag.decode("utf-8", "replace")} if etag else {})


def input_identities(inputs: list[InputFile]) -> dict[str, dict[str, Any]]:
    """{stem: file_identity} of every input, in input order; in an object store `parts.READ_AHEAD`
    at a time (each is round trips of waiting: ~5 h for a million inputs one by one)."""
    remote = any("://" in item.path for item in inputs)
    found = parts.ordered(file_identity, inputs, parts.READ_AHEAD if remote else 1)
    return {item.stem: identity for item, identity in zip(inputs, found, strict=True)}


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def changed_inputs(recorded: dict[str, Any], current: dict[str, dict[str, Any]]) -> list[str]:
    """Stems whose parts an earlier run wrote but whose file changed or left the inputs."""
    return sorted(stem for stem, old in recorded.items() if old != current.get(stem))


def model_hashes(stages: list[Stage]) -> dict[str, str]:
    """{stage.name: sha256} of every model a stage declares (`Stage.models()`): an artifact
    directory by its manifest's hash, a plain file by its bytes' hash."""
    found: dict[str, str] = {}
    for stage in stages:
        for key, path in stage.models().items():
            if (path / "manifest.json").is_file():
                found[f"{stage.name}.{key}"] = manifest_sha256(path)
            elif path.is_file():
                found[f"{stage.name}.{key}"] = sha256_file(path)
    return found


def job_fingerprint(config: PipelineConfig, stages: list[Stage]) -> dict[str, Any]:
    """What every part of an output shares: config, stage versions and the models stages use
    (each input file's identity is recorded beside it, see `file_identity`)."""
    return {
        "config_sha256": config_sha256(config.fingerprint_dict()),
        "stages": {s.name: s.version for s in stages},
        "models": model_hashes(stages),
        "layout": layout.LAYOUT_VERSION,  # an output of another layout is a different job
        "schema": SCHEMA_VERSION,
    }


def check_output_target(out: OutPath) -> None:
    """Refuse an output the run would write over someone else's files in: a file (an object, not
    a prefix, in a store), or a non-empty directory that holds no run of ours, e.g. a misspelt
    `output` naming the user's project folder. The same rules and words as every other command's
    (pretrain.output_check); a refused run leaves no log in that folder."""
    refuse_not_a_directory(out, OUTPUT_FLAG)
    if (out / parts.PARTS / FINGERPRINT).is_file() or (out / MANIFEST).is_file():
        return
    refuse_foreign(out, OUTPUT_FLAG, "output of `pretrain data run`", _work_area)


OUTPUT_FLAG = "output ="


def _work_area(name: str) -> bool:
    return name == parts.PARTS


def output_is_foreign(config: PipelineConfig, out: OutPath, stages: list[Stage]) -> bool:
    """True when `out` holds parts of a different job; an error unless `overwrite` is set.
    `check_output_target(out)` comes first (runner.preflight runs it before any other check)."""
    path = out / parts.PARTS / FINGERPRINT
    if not path.is_file():
        return False
    job = job_fingerprint(config, stages)
    if {key: parts.load_json(path).get(key) for key in job} == job:
        return False
    if not config.overwrite:
        raise ConfigError(
            f"output = {str(out)!r} holds shards made with a different config, stage "
            "versions or stage models; choose a new output or --set overwrite=true"
        )
    return True


def prepare_output(
    config: PipelineConfig, out: OutPath, stages: list[Stage], inputs: list[InputFile]
) -> tuple[list[str], list[Unit]]:
    """Resume an output written with the same config, stage versions and models; refuse (or with
    overwrite, clear) any other. Returns the stems of the inputs that changed or left, and the units
    of work (inputs.pack_units). A unit with a changed file, whose files are not the ones its read
    record counts, or that no longer names a unit loses its parts."""
    path = out / parts.PARTS / FINGERPRINT
    if output_is_foreign(config, out, stages):
        for sub in (*layout.OUTPUT_ENTRIES, parts.PARTS, "manifest.json"):
            target = out / sub
            remove_tree(target)
    identities = input_identities(inputs)
    recorded = parts.load_json(path).get("inputs", {}) if path.is_file() else {}
    recorded = recorded if isinstance(recorded, dict) else {}
    changed = changed_inputs(recorded, identities)
    sizes = {stem: int(identity["size"]) for stem, identity in identities.items()}
    units = pack_units(
        inputs, sizes, config.small_file_bytes, config.pack_bytes, config.pack_min_files
    )
    gone = set(changed)
    if recorded and recorded != identities:  # files changed, came or left: units may have moved
        heads = [unit.stem for unit in units]
        gone |= set(recorded) - set(heads)  # an earlier unit's name that names none now
        for unit, record in zip(units, parts.read_records(out, heads), strict=True):
            counted = [f.get("stem") for f in (record or {}).get("inputs", [])]
            if record is not None and counted != unit.stems or gone & set(unit.stems):
                gone.add(unit.stem)
    parts.forget_inputs(out, gone)  # before the new identities are recorded
    parts.ensure_dirs(out)
    (out / "manifest.json").unlink(missing_ok=True)
    write_json(path, {**job_fingerprint(config, stages), "inputs": identities})
    return changed, units


# --- lineage: the artifacts the job reads ---------------------------------------------------


def input_artifacts(files: list[InputFile]) -> list[str]:
    """Artifact directories (with a manifest.json) that hold input files: the job's lineage; each
    folder is looked at once for all the files below it."""
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
        found = nearest_above(folder, lambda candidate: (candidate / MANIFEST).is_file(), holder)
        if found is not None and str(found) not in dirs:
            dirs.append(str(found))
    return dirs


def stage_artifacts(stages: list[Stage]) -> list[str]:
    """The artifact directories the stages read (`Stage.models()` that hold a manifest.json),
    each once, in stage order: inputs of the job beside its data."""
    found: list[str] = []
    for stage in stages:
        for path in stage.models().values():
            if (path / "manifest.json").is_file() and str(path) not in found:
                found.append(str(path))
    return found
