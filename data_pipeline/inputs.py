"""Turn the config's `inputs` (files, directories, globs, URIs) into the list of files to read."""

from __future__ import annotations

import contextlib
import glob
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyarrow import fs as pafs

from data_pipeline.formats import READABLE, InputFile, detect_format, filesystem_for
from pretrain.errors import InputError

BYTECODE_DIR = "__pycache__"
"""A folder Python writes bytecode into (importing the embedded sample, a package, makes one):
never data, so a directory input neither reads nor lists it, and `skipped_files` does not depend
on whether the interpreter had imported the package."""


def _skip_reason(name: str) -> str | None:
    """Why a file found inside a directory input is not read (None: it is read)."""
    if name.startswith("."):
        return "hidden file (name starts with '.')"
    if detect_format(name) is None:
        suffix = name[name.find(".") :] if "." in name else "(none)"
        return f"unsupported format: suffix {suffix}; readable: {READABLE}"
    return None


NOT_UTF8 = "file name is not valid UTF-8 (shown escaped); rename it (e.g. with convmv) to read it"


def _utf8(path: str) -> bool:
    """Whether `path` (from the OS: undecodable bytes kept as surrogates) is valid UTF-8: shard
    names, ids and the ledger must hold it, and pyarrow cannot open any other."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def shown(path: str) -> str:
    """`path` as text a JSON file can hold: bytes that are not UTF-8 escaped (`\\xe9`)."""
    return os.fsencode(path).decode("utf-8", "backslashreplace") if "://" not in path else path


def _not_read(path: str) -> str:
    """Why a path found while walking a local directory is not a file to read."""
    if not os.path.exists(path):
        return "symbolic link that points to nothing"
    return "not a regular file (a FIFO, socket or device)"


def _walk_local(
    root: str, skipped: list[dict[str, str]], walked: dict[tuple[int, int], str] | None = None
) -> list[str]:
    """Regular files under a local directory, following links to directories once each: a link
    to a directory already walked, and a path that is not a regular file (reading a FIFO would
    block), go to `skipped`. Each directory walked goes into `walked` ((device, inode) -> path)."""
    found, odd, seen = [], [], set()

    def refuse(exc: OSError) -> None:
        raise InputError(f"input {root}: cannot list {exc.filename} ({exc.strerror})")

    for dirpath, dirnames, filenames in os.walk(root, followlinks=True, onerror=refuse):
        info = os.stat(dirpath)
        if (info.st_dev, info.st_ino) in seen:
            odd.append(
                {"path": shown(dirpath), "reason": "symbolic link to a directory already read"}
            )
            dirnames[:] = []
            continue
        seen.add((info.st_dev, info.st_ino))
        if walked is not None:
            walked.setdefault((info.st_dev, info.st_ino), dirpath)
        dirnames[:] = [name for name in dirnames if name != BYTECODE_DIR]
        for name in filenames:
            path = os.path.join(dirpath, name)
            if os.path.isfile(path):
                found.append(path)
            else:
                odd.append({"path": shown(path), "reason": _not_read(path)})
    files = _keep_readable(sorted(found), skipped, root=root.rstrip("/") or "/")
    skipped.extend(sorted(odd, key=lambda item: item["path"]))
    return files


def _glob_root(entry: str) -> str:
    """The folder a glob's matches lie under, its part before the first wildcard's component:
    `documents/*/part-0000.json.gz` -> `documents`, `*.jsonl` -> `` (the working directory)."""
    head = entry[: min(entry.find(c) for c in "*?[" if c in entry)]
    return head.rpartition("/")[0] or ("/" if entry.startswith("/") else "")


def _glob_local(entry: str, skipped: list[dict[str, str]]) -> list[str]:
    """A local glob; `**` descends only a tree without symbolic link loops (glob follows
    them forever), else a one-line error naming the link."""
    if "**" in entry:
        static = _glob_root(entry)
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
    skipped.extend({"path": shown(path), "reason": _not_read(path)} for path in odd)
    return files


def _expand(
    entry: str, skipped: list[dict[str, str]], walked: dict[tuple[int, int], str] | None = None
) -> tuple[list[str], str | None]:
    """Files named by one entry (a file, a directory, a local glob or a URI) and the folder they
    are named relative to (None for a file named directly); files not read go to `skipped`."""
    if not _utf8(entry):
        raise InputError(f"input {shown(entry)}: {NOT_UTF8}")
    if "://" not in entry and any(ch in entry for ch in "*?["):
        return _glob_local(entry, skipped), _glob_root(entry)
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
        return [entry], None
    if info.type != pafs.FileType.Directory:
        raise InputError(
            f"input {entry} is not a regular file or directory (a FIFO, socket or device); "
            "copy its records to a file"
        )
    if "://" not in entry:
        return _walk_local(path, skipped, walked), path
    selector = pafs.FileSelector(path, recursive=True)
    prefix = entry.split("://", 1)[0] + "://" if "://" in entry else ""
    found = [
        prefix + i.path for i in filesystem.get_file_info(selector) if i.type == pafs.FileType.File
    ]
    return _keep_readable(sorted(found), skipped, root=path), path.rstrip("/")


def _keep_readable(
    paths: list[str], skipped: list[dict[str, str]], root: str | None = None
) -> list[str]:
    """The readable `paths`; the others go to `skipped` (a hidden directory as one entry)."""
    keep, hidden_dirs = [], {}
    for path in paths:
        inside = path.split("://", 1)[-1]
        relative = inside[len(root) :].lstrip("/") if root and inside.startswith(root) else ""
        parts = relative.split("/")[:-1]
        if BYTECODE_DIR in parts:
            continue
        hidden = next((i for i, part in enumerate(parts) if part.startswith(".")), None)
        if hidden is not None:
            folder = (
                path[: len(path) - len(relative)].rstrip("/") + "/" + "/".join(parts[: hidden + 1])
            )
            hidden_dirs[folder] = hidden_dirs.get(folder, 0) + 1
            continue
        reason = _skip_reason(path.rsplit("/", 1)[-1]) if _utf8(path) else NOT_UTF8
        if reason is None:
            keep.append(path)
        else:
            skipped.append({"path": shown(path), "reason": reason})
    for folder, count in sorted(hidden_dirs.items()):
        skipped.append(
            {"path": shown(folder), "reason": f"hidden directory ({count} files not read)"}
        )
    return keep


FOLDER_SEPARATOR = "__"
"""Joins the folders of a file below its input directory into its stem (`/` cannot be in one)."""

MAX_STEM_BYTES = 180
"""The longest stem (UTF-8). A file name may have 255 bytes (NAME_MAX); the job's longest are
about 50 more than the stem (a global stage's map table in scratch:
`<stem>-00000.perplexity.parquet.<pid>.<thread>`), so a plugin's table name has room."""


def _stem(path: str, root: str | None, name_stem: str) -> str:
    """The stem a file's shards are named by: the folders between the input's folder `root` and
    the file, then its name's stem (`documents/cc/part-0000.json.gz` under `documents` ->
    `cc__part-0000`), so one name in several folders stays apart."""
    if root is None:
        return name_stem
    if "://" in path:
        relative = path.split("://", 1)[1].removeprefix(root.split("://", 1)[-1]).strip("/")
        folders = relative.split("/")[:-1]
    else:
        folders = os.path.relpath(path, root or os.curdir).split(os.sep)[:-1]
    return FOLDER_SEPARATOR.join([*(f for f in folders if f not in ("", ".")), name_stem])


def _file_key(path: str) -> tuple[int, int] | str:
    """What makes two names one file: a local file's device and inode (links, bind mounts),
    else its URI."""
    if "://" in path:
        return _normal_uri(path)
    info = os.stat(path)
    return info.st_dev, info.st_ino


def plan_inputs(
    entries: tuple[str, ...] | list[str],
    skipped: list[dict[str, str]] | None = None,
    walked: dict[tuple[int, int], str] | None = None,
) -> list[InputFile]:
    """Input files in a stable order, each with its format and stem (`_stem`). A file reached twice
    (two entries, a link, a bind mount) is read once; the other names, and the files of directory or
    glob inputs that are not read, go to `skipped` (path, reason). The local directories walked go
    into `walked`, for `check_output_apart`."""
    skipped = [] if skipped is None else skipped
    files: list[InputFile] = []
    stems: dict[str, str] = {}
    seen: dict[tuple[int, int] | str, str] = {}
    for entry in entries:
        paths, root = _expand(entry, skipped, walked)
        if not paths:
            raise InputError(f"input {entry}: no {READABLE} files found; fix inputs in the config")
        for path in paths:
            detected = detect_format(path)
            if detected is None:
                raise InputError(f"input {path}: unknown format; expected {READABLE}")
            key = _file_key(path)
            if key in seen:
                if seen[key] != path:
                    skipped.append({"path": path, "reason": f"the same file as {seen[key]}"})
                continue
            fmt, stem = detected[0], _stem(path, root, detected[1])
            if len(stem.encode("utf-8", "surrogateescape")) > MAX_STEM_BYTES:
                raise InputError(
                    f"input {path}: its shards would be named {stem[:40]}...-* "
                    f"({len(stem.encode('utf-8', 'surrogateescape'))} bytes, at most "
                    f"{MAX_STEM_BYTES}: a file name has 255); name a folder nearer the file as "
                    "the input, or shorten its name or folders"
                )
            if stem in stems:
                raise InputError(
                    f"inputs {stems[stem]} and {path} would both write shards named {stem}-* "
                    f"(a file below an input folder is named by its folders joined by "
                    f"{FOLDER_SEPARATOR!r}); rename one of them or name their common folder"
                )
            seen[key], stems[stem] = path, path
            files.append(InputFile(path, fmt, stem))
    return files


def _normal_uri(uri: str) -> str:
    """`S3://b//x/?region=r` -> `s3://b/x`: the scheme lower-cased, the query, empty path
    components and trailing slashes dropped (pyarrow refuses an empty component in an object
    key, so `b//x` can only be read or written as `b/x`)."""
    scheme, _, rest = uri.partition("://")
    return f"{scheme.lower()}://" + "/".join(p for p in rest.split("?", 1)[0].split("/") if p)


def _local_form(path: str) -> str:
    return path.removeprefix("file://") if path.lower().startswith("file://") else path


class _Containment:
    """Is a path inside `folder`? Locally by resolved path, and by device and inode, so a bind
    mount or a second mount of the same tree is caught; URIs once normalised (`_normal_uri`)."""

    def __init__(self, folder: str) -> None:
        self.folder = _local_form(folder)
        self.identity: tuple[int, int] | None = None
        self.known: dict[Path, Path | None] = {}
        if "://" not in self.folder and os.path.isdir(self.folder):
            info = os.stat(self.folder)
            self.identity = info.st_dev, info.st_ino

    def holds(self, path: str) -> bool:
        path = _local_form(path)
        if "://" in path or "://" in self.folder:
            if "://" not in path or "://" not in self.folder:
                return False  # one local, one in an object store
            return (_normal_uri(path) + "/").startswith(_normal_uri(self.folder) + "/")
        resolved, container = Path(path).resolve(), Path(self.folder).resolve()
        if resolved == container or container in resolved.parents:
            return True
        return (
            self.identity is not None and nearest_above(resolved, self._is, self.known) is not None
        )

    def _is(self, candidate: Path) -> bool:
        """`candidate` is the folder itself (same device+inode)."""
        with contextlib.suppress(OSError):  # a part that does not exist yet
            info = os.stat(candidate)
            return (info.st_dev, info.st_ino) == self.identity
        return False


def nearest_above(
    path: Path, test: Callable[[Path], bool], memo: dict[Path, Path | None]
) -> Path | None:
    """The nearest of `path` and the folders above it that passes `test` (None: none); `memo`
    keeps the answer for every folder looked at, so the paths of one folder cost one walk."""
    walked: list[Path] = []
    found: Path | None = None
    for candidate in (path, *path.parents):
        if candidate in memo:
            found = memo[candidate]
            break
        walked.append(candidate)
        if test(candidate):
            found = candidate
            break
    memo.update(dict.fromkeys(walked, found))
    return found


def check_output_apart(
    entries: tuple[str, ...] | list[str],
    output: str,
    files: list[InputFile],
    walked: dict[tuple[int, int], str] | None = None,
) -> None:
    """Refuse an output inside a directory input, or an input file inside the output: the next
    run would read the job's own shards as input. `walked` also catches an output that a link in an
    input leads to, even before the output exists."""
    for entry in entries:
        is_glob = "://" not in entry and any(ch in entry for ch in "*?[")  # as `_expand`
        if not is_glob and _Containment(entry).holds(output):
            raise InputError(
                f"output {output} lies inside the input directory {entry}: a re-run would read "
                "its own shards as input; write the output outside every input directory"
            )
    reached = _walked_above(output, walked or {})
    if reached is not None:
        raise InputError(
            f"output {output} lies inside {reached}, a directory the inputs reach through a "
            "symbolic link: a re-run would read its own shards as input; remove the link or "
            "write the output outside every input directory"
        )
    container = _Containment(output)
    for item in files:
        if container.holds(item.path):
            raise InputError(
                f"input {item.path} lies inside the output {output}: the job would read its own "
                "shards as input; write the output elsewhere or name the inputs apart from it"
            )


def _walked_above(output: str, walked: dict[tuple[int, int], str]) -> str | None:
    """The walked path of the output folder or of the nearest folder above it that the input
    walk went through, else None (an object-store output: None)."""
    if not walked or "://" in _local_form(output):
        return None
    for candidate in (folder := Path(_local_form(output)).absolute(), *folder.parents):
        with contextlib.suppress(OSError):  # the output (or a folder of it) not made yet
            info = os.stat(candidate)
            if (info.st_dev, info.st_ino) in walked:
                return walked[(info.st_dev, info.st_ino)]
    return None


@dataclass(frozen=True)
class Unit:
    """A unit of work: the input files one read task reads, in order, as one stream of records cut
    into parts (`<stem>-<part:05d>`) by `shard_rows`: a large file alone, or small files packed
    (`pack_units`), named by its first file's stem."""

    stem: str
    files: tuple[InputFile, ...]

    def item(self) -> dict[str, Any]:
        """What a read task is given (data_pipeline.workers.read_files)."""
        return {
            "stem": self.stem,
            "files": [{"path": f.path, "format": f.format, "stem": f.stem} for f in self.files],
        }

    @property
    def stems(self) -> list[str]:
        return [f.stem for f in self.files]


def pack_units(
    files: list[InputFile],
    sizes: dict[str, int],
    small_bytes: int,
    pack_bytes: int,
    min_files: int,
) -> list[Unit]:
    """The units of work of `files`: a file over `small_bytes` alone; the small ones, when there
    are at least `min_files` of them, packed in input order up to `pack_bytes` a unit. The same
    files of the same sizes always give the same units (resume, byte-identical outputs)."""
    if sum(sizes[f.stem] <= small_bytes for f in files) < min_files:
        return [Unit(f.stem, (f,)) for f in files]
    units: list[Unit] = []
    pack: list[InputFile] = []
    packed = 0
    at: dict[str, int] = {}  # the first file's place in input order, to order the units

    def close() -> None:
        if pack:
            units.append(Unit(pack[0].stem, tuple(pack)))

    for place, item in enumerate(files):
        at[item.stem] = place
        size = sizes[item.stem]
        if size > small_bytes:
            units.append(Unit(item.stem, (item,)))
            continue
        if pack and packed + size > pack_bytes:
            close()
            pack, packed = [], 0
        pack.append(item)
        packed += size
    close()
    return sorted(units, key=lambda unit: at[unit.stem])
