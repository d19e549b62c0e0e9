"""The shape of a manifest's common fields, checked as it is read (before anything uses them).

A manifest is JSON anyone can edit: a `files` that is a list, a file entry that is a string, a
lineage entry that is a number would otherwise surface as a Python traceback in `verify`, `show`
or whichever consumer first touched the field, before the seal check could refuse the edit. The
types are those of `pretrain.artifacts.base.Manifest` (which every typed reader parses with);
a field a version did not write may be absent.
"""

from __future__ import annotations

from typing import Any

from pretrain.errors import ArtifactError

_TOP: dict[str, tuple[type, ...]] = {
    "kind": (str,),
    "files": (dict,),
    "inputs": (list,),
    "counts": (dict,),
    "config": (dict,),
    "command": (list,),
    "git": (dict,),
    "created_unix": (int, float, type(None)),
    "config_sha256": (str, type(None)),
    "seal": (str, type(None)),
}
_INPUT_KEYS = ("path", "kind", "manifest_sha256")


def _problem(manifest: dict[str, Any]) -> str | None:
    """What is wrong with the common fields' types, or None."""
    for key, types in _TOP.items():
        if key in manifest and not _is(manifest[key], types):
            return f"field {key!r} is {_name(manifest[key])}"
    for rel, entry in manifest["files"].items():
        if not isinstance(entry, dict):
            return f"files entry {rel!r} is {_name(entry)}, not {{bytes, sha256}}"
        if not _is(entry.get("bytes"), (int,)) or not isinstance(entry.get("sha256"), str):
            return f"files entry {rel!r} lacks an integer 'bytes' or a string 'sha256'"
    for position, entry in enumerate(manifest.get("inputs", [])):
        if not isinstance(entry, dict):
            return f"inputs entry {position} is {_name(entry)}, not an artifact reference"
        bad = [key for key in _INPUT_KEYS if key in entry and not isinstance(entry[key], str)]
        if bad:
            return f"inputs entry {position} has {_name(entry[bad[0]])} as {bad[0]!r}"
    if not all(isinstance(part, str) for part in manifest.get("command", [])):
        return "field 'command' holds something other than strings"
    return None


def check_shape(path: object, manifest: dict[str, Any]) -> None:
    """Refuse, in one line, a manifest whose common fields have types no writer wrote."""
    problem = _problem(manifest)
    if problem is not None:
        raise ArtifactError(
            f"{path}: {problem}, which no version wrote: the manifest was edited or damaged; "
            "rebuild the artifact"
        )


def _is(value: object, types: tuple[type, ...]) -> bool:
    """isinstance, except that a JSON true/false is no number."""
    return isinstance(value, types) and not (isinstance(value, bool) and bool not in types)


def _name(value: object) -> str:
    return {dict: "an object", list: "a list", str: "a string", type(None): "null"}.get(
        type(value), "a boolean" if isinstance(value, bool) else "a number"
    )
