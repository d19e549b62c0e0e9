"""The commands of the shared kernel: `verify` and `show` (what any artifact is, and whether every
byte of it is still what its manifest says), and `unlock` (the writer lock a dead writer left on
an `s3://` output)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from pretrain.program import add_command


def _verify(args: argparse.Namespace) -> int:
    from pretrain.errors import ArtifactError
    from pretrain.manifest import manifest_sha256, unlisted_files, verify

    manifest = verify(args.directory, full=True)
    extra = unlisted_files(args.directory, manifest)
    if extra:
        shown = ", ".join(extra[:5]) + (f" and {len(extra) - 5} more" if len(extra) > 5 else "")
        raise ArtifactError(
            f"{args.directory} holds {len(extra)} file(s) its manifest does not list ({shown}); "
            "no command reads them: remove them, or rebuild the artifact if they belong to it"
        )
    if manifest["kind"] == "checkpoint":
        from pretrain.safeload import check_checkpoint

        check_checkpoint(args.directory, manifest)
    summary = {
        "kind": manifest["kind"],
        "files": len(manifest["files"]),
        "manifest_sha256": manifest_sha256(args.directory),
        "counts": manifest["counts"],
    }
    print(
        json.dumps(summary, indent=2)
        if args.json
        else f"ok: {args.directory} ({summary['kind']}, {summary['files']} files verified, "
        f"manifest {summary['manifest_sha256'][:12]})"
    )
    return 0


def _show(args: argparse.Namespace) -> int:
    from pathlib import Path

    from pretrain.errors import ArtifactError
    from pretrain.manifest import MANIFEST
    from pretrain.show import describe, format_tree, problems

    if not (Path(args.directory) / MANIFEST).is_file():
        raise ArtifactError(
            f"{args.directory} is not an artifact (no {MANIFEST}); pass a directory a "
            "pretrain command wrote"
        )
    tree = describe(args.directory)
    bad = problems(tree)
    if args.json:
        print(json.dumps({**tree, "problems": bad}, indent=2, default=str))
    else:
        print(format_tree(tree))
        for line in bad:
            print(f"NOT OK: {line}")
    return 1 if bad else 0


def _unlock(args: argparse.Namespace) -> int:
    from pretrain.errors import ConfigError
    from pretrain.locking import holder_text, is_object_output, unlock

    if not is_object_output(args.output):
        raise ConfigError(
            f"{args.output}: only an s3:// output has a lock object to remove; a local output's "
            "lock is released by the kernel when its holder exits"
        )
    record = unlock(args.output, args.id)
    print(
        f"pretrain unlock: removed the writer lock of {args.output} held by {holder_text(record)}"
    )
    return 0


def register(sub: Any) -> None:
    verify = add_command(
        sub,
        ["verify"],
        _verify,
        "re-hash every byte of an artifact against its manifest (no cache); refuse unlisted "
        "files and, for checkpoints, files that would need unpickling",
    )
    verify.add_argument("directory", metavar="DIR")
    verify.add_argument("--json", action="store_true", help="print a JSON summary")
    show = add_command(
        sub,
        ["show"],
        _show,
        "what an artifact is: kind, what made it, lineage back to raw inputs (each ancestor "
        "verified), headline figures; exit 1 when anything in the lineage does not verify",
    )
    show.add_argument("directory", metavar="DIR")
    show.add_argument("--json", action="store_true", help="print the tree as JSON")
    unlock = add_command(
        sub,
        ["unlock"],
        _unlock,
        "remove the writer lock a dead writer left on an s3:// output (its id is in the "
        "refusal); until then every writer of that output is refused",
    )
    unlock.add_argument("output", metavar="OUTPUT")
    unlock.add_argument("--id", required=True, help="the lock id the refusal printed")
