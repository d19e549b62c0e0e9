"""Turn the config's `inputs` (files, directories, globs, URIs) into the list of files to read."""

from __future__ import annotations

import glob
from pathlib import Path

import pyarrow as pa
from pyarrow import fs as pafs

from data_pipeline.readers import InputFile, detect_format, filesystem_for
from pretrain.errors import InputError


def _expand(entry: str) -> list[str]:
    """Files named by one entry: a file, a directory (recursive), a local glob, or a URI."""
    if "://" not in entry and any(ch in entry for ch in "*?["):
        return sorted(glob.glob(entry, recursive=True))
    filesystem, path = filesystem_for(entry)
    try:
        info = filesystem.get_file_info(path)
    except OSError as exc:
        raise InputError(
            f"input {entry}: cannot be inspected ({exc}); check the path or credentials"
        ) from None
    if info.type == pafs.FileType.NotFound:
        raise InputError(f"input {entry} does not exist; fix inputs in the config")
    if info.type == pafs.FileType.File:
        return [entry]
    selector = pafs.FileSelector(path, recursive=True)
    prefix = entry.split("://", 1)[0] + "://" if "://" in entry else ""
    found = [
        prefix + i.path
        for i in filesystem.get_file_info(selector)
        if i.type == pafs.FileType.File
        and not i.base_name.startswith(".")
        and detect_format(i.path) is not None
    ]
    return sorted(found)


def plan_inputs(entries: tuple[str, ...] | list[str]) -> list[InputFile]:
    """Input files in a stable order, each with its format and the stem its shards are named by."""
    files: list[InputFile] = []
    stems: dict[str, str] = {}
    for entry in entries:
        paths = _expand(entry)
        if not paths:
            raise InputError(
                f"input {entry}: no WARC, HTML, JSONL or Parquet files found; "
                "fix inputs in the config"
            )
        for path in paths:
            detected = detect_format(path)
            if detected is None:
                raise InputError(
                    f"input {path}: unknown format; expected .warc(.gz), .html, "
                    ".jsonl(.gz) or .parquet"
                )
            fmt, stem = detected
            if stem in stems and stems[stem] != path:
                raise InputError(
                    f"inputs {stems[stem]} and {path} would both write shards "
                    f"named {stem}-*; rename one of them"
                )
            if stem not in stems:
                stems[stem] = path
                files.append(InputFile(path, fmt, stem))
    return files


def check_openable(item: InputFile, text_column: str) -> None:
    """Fail fast, in the driver, on a file that cannot be read at all (one line naming it)."""
    filesystem, path = filesystem_for(item.path)
    try:
        if item.format == "parquet":
            import pyarrow.parquet as pq

            with filesystem.open_input_file(path) as handle:
                names = pq.ParquetFile(handle).schema_arrow.names
            if text_column not in names:
                raise InputError(
                    f"input {item.path}: Parquet file has no {text_column!r} column "
                    f"(columns: {', '.join(names)}); set text_column or fix the file"
                )
            return
        with filesystem.open_input_stream(path, compression=None) as handle:
            head = handle.read(2)
    except InputError:
        raise
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise InputError(
            f"input {item.path}: cannot be read ({exc}); fix or remove it, or set "
            "on_unreadable=reject"
        ) from None
    if item.path.lower().endswith(".gz") and head != b"\x1f\x8b":
        raise InputError(
            f"input {item.path}: not a gzip file (starts with {head!r}); fix the "
            "file or its .gz suffix, or set on_unreadable=reject"
        )


def input_artifacts(files: list[InputFile]) -> list[str]:
    """Artifact directories (with a manifest.json) that hold input files: the job's lineage."""
    dirs: list[str] = []
    for item in files:
        if "://" in item.path:
            continue
        for parent in Path(item.path).resolve().parents:
            if (parent / "manifest.json").is_file():
                if str(parent) not in dirs:
                    dirs.append(str(parent))
                break
    return dirs
