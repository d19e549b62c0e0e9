"""`pretrain show DIR`: what an artifact is, what made it, where it came from, what it holds.

Each artifact's manifest records its inputs as (path, kind, manifest sha256). `show` follows them
back to the raw inputs, verifying every ancestor as it goes (the files against the manifest, the
manifest against the hash its child recorded), and marks one that is missing, changed or
tampered with. An ancestor that moved is looked for by name next to the artifact shown (a copied
`runs/` tree) and accepted only when its manifest hash is the recorded one.
"""

from __future__ import annotations

import json
import shlex
import time
from pathlib import Path
from typing import Any

from pretrain.artifacts.ablation import AblationFields
from pretrain.artifacts.base import Fields, fields_of
from pretrain.artifacts.encoded import EncodedFields
from pretrain.artifacts.mixture import MixtureFields
from pretrain.artifacts.run import METRICS_FILE, RunFields
from pretrain.artifacts.shards import ShardsFields
from pretrain.artifacts.tokenizer import TokenizerFields
from pretrain.errors import ArtifactError
from pretrain.manifest import MANIFEST, load_manifest, manifest_sha256, verify

MAX_DEPTH = 12
FIGURED = (ShardsFields, TokenizerFields, EncodedFields, MixtureFields, RunFields, AblationFields)
"""The kinds whose fields `_figures` reads; any other kind shows its counts."""


def _typed(manifest: dict[str, Any], root: Path) -> Fields | None:
    """The kind's fields, or None: a kind `_figures` does not read, or fields of another shape."""
    model = next((f for f in FIGURED if manifest.get("kind") == f.KIND), None)
    try:
        return fields_of(model, manifest, root) if model else None
    except ArtifactError:
        return None


def _made_by(manifest: dict[str, Any]) -> dict[str, Any]:
    git = manifest.get("git") or {}
    created = manifest.get("created_unix")
    return {
        # quoted as a shell would need it, so a path with a space can be pasted back
        "command": shlex.join(str(part) for part in manifest.get("command") or []),
        "config_sha256": manifest.get("config_sha256"),
        "git_commit": git.get("commit"),
        "git_dirty": git.get("dirty"),
        "created_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(created))
        if created
        else None,
    }


def _last_jsonl(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    try:
        return json.loads(lines[-1]) if lines else {}
    except ValueError:
        return {}


def _figures(manifest: dict[str, Any], root: Path) -> dict[str, Any]:
    """The headline numbers of one artifact, by kind (missing fields are left out), read through
    the kind's field model; a manifest whose fields are not its kind's shows its counts only."""
    counts = dict(manifest.get("counts") or {})
    m = _typed(manifest, root)
    if isinstance(m, ShardsFields):
        keys = ("documents_in", "documents_kept", "documents_dropped", "shards", "text_bytes_kept")
        return {k: counts[k] for k in keys if k in counts}
    if isinstance(m, TokenizerFields | EncodedFields):
        return {"tokenizer": m.tokenizer.id, **counts}
    if isinstance(m, MixtureFields):
        total = sum(c.weight or 0 for c in m.components) or 1
        return {
            "recipe": m.recipe_name,
            "recipe_sha256": (m.recipe_sha256 or "")[:12],
            **counts,
            "shares": {c.name: round((c.weight or 0) / total, 4) for c in m.components},
        }
    if isinstance(m, RunFields):
        last = _last_jsonl(root / METRICS_FILE)
        figures = {**counts, "final_loss": last.get("loss")}
        if m.gate:
            figures["gate"] = m.gate.get("decision") or m.gate.get("status") or m.gate
        return figures
    if manifest.get("kind") == "eval":
        final = manifest.get("final") or {}
        return {**counts, **{k: final[k] for k in ("bpb", "loss", "ppl") if k in final}}
    if isinstance(m, AblationFields):
        return {
            **counts,
            "passed": m.passed,
            "chosen_recipe_sha256": (m.chosen_recipe_sha256 or "")[:12],
            "target_metric": m.target_metric,
        }
    return counts


def _status(root: Path, recorded_sha: str | None) -> tuple[str, str | None, str]:
    """(status, manifest sha256 now, detail): ok | missing | changed | tampered."""
    if not (root / MANIFEST).is_file():
        return "missing", None, f"{root} has no {MANIFEST}" if root.exists() else "not found"
    actual = manifest_sha256(root)
    if recorded_sha is not None and actual != recorded_sha:
        return "changed", actual, f"manifest is {actual[:12]}, recorded {recorded_sha[:12]}"
    try:
        verified = verify(root)
    except ArtifactError as exc:
        return "tampered", actual, str(exc)
    return "ok", actual, f"{len(verified['files'])} files verified"


def _locate(recorded: str, sha: str | None, near: Path) -> Path:
    """The recorded path, or a directory of the same name near the artifact shown whose manifest
    has the recorded hash (artifacts copied or moved together)."""
    path = Path(recorded)
    candidates = [path] + [base / path.name for base in (near.parent, near.parent.parent)]
    present = [c for c in candidates if (c / MANIFEST).is_file()]
    for candidate in present:
        if sha is None or manifest_sha256(candidate) == sha:
            return candidate
    return present[0] if present else path  # reported as changed, or as missing


def describe(
    directory: str | Path,
    recorded_sha: str | None = None,
    *,
    near: Path | None = None,
    seen: dict[str, dict[str, Any]] | None = None,
    depth: int = 0,
) -> dict[str, Any]:
    """The artifact at `directory` and its lineage, as a JSON-ready tree."""
    root = Path(directory)
    seen = {} if seen is None else seen
    status, actual, detail = _status(root, recorded_sha)
    node: dict[str, Any] = {
        "path": str(root),
        "status": status,
        "detail": detail,
        "manifest_sha256": actual or recorded_sha,
    }
    if status == "missing":
        return node
    key = f"{root.resolve()}@{actual}"
    if key in seen:
        return {**node, "kind": seen[key]["kind"], "seen_above": True}
    manifest = load_manifest(root)
    node.update(
        kind=manifest.get("kind"),
        made_by=_made_by(manifest),
        figures=_figures(manifest, root),
    )
    seen[key] = node
    inputs: list[dict[str, Any]] = []
    for entry in manifest.get("inputs") or []:
        if depth >= MAX_DEPTH:
            break
        sha = entry.get("manifest_sha256")
        where = _locate(str(entry.get("path")), sha, near or root)
        child = describe(where, sha, near=near or root, seen=seen, depth=depth + 1)
        child.setdefault("kind", entry.get("kind"))
        inputs.append(child)
    node["inputs"] = inputs
    raw = (manifest.get("config") or {}).get("inputs") if manifest.get("kind") == "shards" else None
    if raw:
        node["raw_inputs"] = [str(item) for item in raw]
    return node


def problems(node: dict[str, Any]) -> list[str]:
    """Every node in the tree that is not ok, as `path: status (detail)`."""
    found = (
        [] if node["status"] == "ok" else [f"{node['path']}: {node['status']} ({node['detail']})"]
    )
    for child in node.get("inputs", []):
        found += problems(child)
    return found


def _value(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in value.items())
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _headline(node: dict[str, Any]) -> str:
    figures = node.get("figures") or {}
    return "; ".join(
        f"{key} {_value(value)}" for key, value in figures.items() if value is not None
    )


def _mark(node: dict[str, Any]) -> str:
    if node["status"] == "ok":
        return "ok"
    return f"{node['status'].upper()}: {node['detail']}"


def format_tree(node: dict[str, Any]) -> str:
    """The text form: the artifact, what made it, its figures, then its lineage as a tree."""
    made = node.get("made_by") or {}
    sha = (node.get("manifest_sha256") or "?")[:12]
    lines = [f"{node['path']}: {node.get('kind', '?')} (manifest {sha}) {_mark(node)}"]
    if made:
        git = (made.get("git_commit") or "?")[:12] + (" (dirty)" if made.get("git_dirty") else "")
        lines.append(f"  made by: {made.get('command') or '?'}")
        lines.append(
            f"  config {(made.get('config_sha256') or '?')[:12]}, git {git}, "
            f"{made.get('created_utc') or '?'} UTC"
        )
    if node.get("figures"):
        lines.append(f"  {_headline(node)}")
    if node.get("inputs") or node.get("raw_inputs"):
        lines.append("  lineage:")
        lines += _branches(node, "  ")
    return "\n".join(lines)


def _branches(node: dict[str, Any], prefix: str) -> list[str]:
    children: list[tuple[str, dict[str, Any] | None]] = [
        (f"raw input {raw}", None) for raw in node.get("raw_inputs", [])
    ]
    children = [(str(c.get("kind")), c) for c in node.get("inputs", [])] + children
    lines = []
    for i, (label, child) in enumerate(children):
        last = i == len(children) - 1
        branch, indent = ("└─ ", "   ") if last else ("├─ ", "│  ")
        if child is None:
            lines.append(f"{prefix}{branch}{label}")
            continue
        sha = (child.get("manifest_sha256") or "?")[:12]
        text = f"{prefix}{branch}{label} {sha} {_mark(child)}  {child['path']}"
        if child.get("seen_above"):
            lines.append(f"{text} (shown above)")
            continue
        headline = _headline(child)
        lines.append(f"{text}" + (f"  [{headline}]" if headline else ""))
        lines += _branches(child, prefix + indent)
    return lines
