"""Turn the config's `inputs` (files, directories, globs, URIs) into the list of files to read."""

from __future__ import annotations

import glob
import os
from pathlib import Path

import pyarrow as pa
from pyarrow import fs as pafs

from data_pipeline.formats import READABLE, InputFile, check_magic, detect_format, filesystem_for
from pretrain.errors import InputError


def _skip_reason(name: str) -> str | None:
    """Why a file found inside a directory input is not read (None: it is read)."""
    if name.startswith("."):
        return "hidden file (name starts with '.')"
    if detect_format(name) is None:
        suffix = name[name.find(".") :] if "." in name else "(none)"
        return f"unsupported format: suffix {suffix}; readable: {READABLE}"
    return None


def _not_read(path: str) -> str:
    """Why a path found while walking a local directory is not a file to read."""
    if not os.path.exists(path):
        return "symbolic link that points to nothing"
    return "not a regular file (a FIFO, socket or device)"


def _walk_local(root: str, skipped: list[dict[str, str]]) -> list[str]:
    """Regular files under a local directory, following links to directories once each: a link
    to a directory already walked (a loop, or a second path to it) is listed in `skipped`, as
    is a path that is not a regular file (reading a FIFO would block)."""
    found, odd, seen = [], [], set()

    def refuse(exc: OSError) -> None:
        raise InputError(f"input {root}: cannot list {exc.filename} ({exc.strerror})")

    for dirpath, dirnames, filenames in os.walk(root, followlinks=True, onerror=refuse):
        info = os.stat(dirpath)
        if (info.st_dev, info.st_ino) in seen:
            odd.append({"path": dirpath, "reason": "symbolic link to a directory already read"})
            dirnames[:] = []
            continue
        seen.add((info.st_dev, info.st_ino))
        for name in filenames:
            path = os.path.join(dirpath, name)
            if os.path.isfile(path):
                found.append(path)
            else:
                odd.append({"path": path, "reason": _not_read(path)})
    files = _keep_readable(sorted(found), skipped, root=root.rstrip("/") or "/")
    skipped.extend(sorted(odd, key=lambda item: item["path"]))
    return files


def _glob_local(entry: str, skipped: list[dict[str, str]]) -> list[str]:
    """A local glob; `**` descends only a tree without symbolic link loops (glob follows
    them forever), else a one-line error naming the link."""
    if "**" in entry:
        static = entry[: min(entry.find(c) for c in "*?[" if c in entry)].rsplit("/", 1)[0]
        loops: list[dict[str, str]] = []
        if os.path.isdir(static or "."):
            _walk_local(static or ".", loops)
        loop = next((s for s in loops if "already read" in s["reason"]), None)
        if loop is not None:
            raise InputError(
                f"input {entry}: {loop['path']} is a symbolic link loop (to a directory above "
                "or beside it); `**` would follow it forever: remove the link or name the "
                "directory itself (a directory input reads each file once)"
            )
    matched = sorted(glob.glob(entry, recursive=True))
    odd = [p for p in matched if not os.path.isfile(p) and not os.path.isdir(p)]
    files = _keep_readable([p for p in matched if os.path.isfile(p)], skipped)
    skipped.extend({"path": path, "reason": _not_read(path)} for path in odd)
    return files


def _expand(entry: str, skipped: list[dict[str, str]]) -> list[str]:
    """Files named by one entry: a file, a directory (recursive), a local glob, or a URI. Files
    of a directory or glob that are not read go to `skipped` with their reason."""
    if "://" not in entry and any(ch in entry for ch in "*?["):
        return _glob_local(entry, skipped)
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
    if info.type != pafs.FileType.Directory:
        raise InputError(
            f"input {entry} is not a regular file or directory (a FIFO, socket or device); "
            "copy its records to a file"
        )
    if "://" not in entry:
        return _walk_local(path, skipped)
    selector = pafs.FileSelector(path, recursive=True)
    prefix = entry.split("://", 1)[0] + "://" if "://" in entry else ""
    found = [
        prefix + i.path for i in filesystem.get_file_info(selector) if i.type == pafs.FileType.File
    ]
    return _keep_readable(sorted(found), skipped, root=path)


def _keep_readable(
    paths: list[str], skipped: list[dict[str, str]], root: str | None = None
) -> list[str]:
    """The readable `paths`; the others go to `skipped` (a hidden directory as one entry)."""
    keep, hidden_dirs = [], {}
    for path in paths:
        inside = path.split("://", 1)[-1]
        relative = inside[len(root) :].lstrip("/") if root and inside.startswith(root) else ""
        parts = relative.split("/")[:-1]
        hidden = next((i for i, part in enumerate(parts) if part.startswith(".")), None)
        if hidden is not None:
            folder = (
                path[: len(path) - len(relative)].rstrip("/") + "/" + "/".join(parts[: hidden + 1])
            )
            hidden_dirs[folder] = hidden_dirs.get(folder, 0) + 1
            continue
        reason = _skip_reason(path.rsplit("/", 1)[-1])
        if reason is None:
            keep.append(path)
        else:
            skipped.append({"path": path, "reason": reason})
    for folder, count in sorted(hidden_dirs.items()):
        skipped.append({"path": folder, "reason": f"hidden directory ({count} files not read)"})
    return keep


def plan_inputs(
    entries: tuple[str, ...] | list[str], skipped: list[dict[str, str]] | None = None
) -> list[InputFile]:
    """Input files in a stable order, each with its format and the stem its shards are named by.
    Files of directory or glob inputs that are not read are appended to `skipped` (path,
    reason); a file named directly must be readable."""
    skipped = [] if skipped is None else skipped
    files: list[InputFile] = []
    stems: dict[str, str] = {}
    for entry in entries:
        paths = _expand(entry, skipped)
        if not paths:
            raise InputError(f"input {entry}: no {READABLE} files found; fix inputs in the config")
        for path in paths:
            detected = detect_format(path)
            if detected is None:
                raise InputError(f"input {path}: unknown format; expected {READABLE}")
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


def _inside(path: str, folder: str) -> bool:
    if "://" in path or "://" in folder:
        return (path.rstrip("/") + "/").startswith(folder.rstrip("/") + "/")
    resolved, container = Path(path).resolve(), Path(folder).resolve()
    return resolved == container or container in resolved.parents


def check_output_apart(
    entries: tuple[str, ...] | list[str], output: str, files: list[InputFile]
) -> None:
    """Refuse an output inside a directory input, or an input file inside the output: the next
    run would read the job's own shards as input documents (a second copy of each)."""
    for entry in entries:
        if not any(ch in entry for ch in "*?[") and _inside(output, entry):
            raise InputError(
                f"output {output} lies inside the input directory {entry}: a re-run would read "
                "its own shards as input; write the output outside every input directory"
            )
    for item in files:
        if _inside(item.path, output):
            raise InputError(
                f"input {item.path} lies inside the output {output}: the job would read its own "
                "shards as input; write the output elsewhere or name the inputs apart from it"
            )


def check_openable(item: InputFile, text_field: str) -> None:
    """Fail fast, in the driver, on a file that cannot be read at all (one line naming it)."""
    filesystem, path = filesystem_for(item.path)
    try:
        if item.format == "parquet":
            import pyarrow.parquet as pq

            with filesystem.open_input_file(path) as handle:
                names = pq.ParquetFile(handle).schema_arrow.names
            if text_field.split(".")[0] not in names:
                raise InputError(
                    f"input {item.path}: Parquet file has no {text_field!r} column "
                    f"(columns: {', '.join(names)}); set text_field or fix the file"
                )
            return
        with filesystem.open_input_stream(path, compression=None) as handle:
            head = handle.read(4)
    except InputError:
        raise
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise InputError(
            f"input {item.path}: cannot be read ({exc}); fix or remove it, or set "
            "on_unreadable=reject"
        ) from None
    check_magic(item.path, head)


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
