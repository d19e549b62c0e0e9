"""Commands that belong to no single package: `demo` and `verify`."""

from __future__ import annotations

import argparse
import json
from typing import Any

from pretrain.cli_utils import add_command


def _verify(args: argparse.Namespace) -> int:
    from pretrain.manifest import manifest_sha256, verify

    manifest = verify(args.directory)
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


def _demo(args: argparse.Namespace) -> int:
    from pretrain.demo import run_demo

    return run_demo(args.out, force=args.force)


def register(sub: Any) -> None:
    demo = add_command(sub, ["demo"], _demo, "run the main job end to end on the embedded sample")
    demo.add_argument("--out", default="demo_out", help="where the demo's artifacts go")
    demo.add_argument("--force", action="store_true", help="rebuild artifacts that already exist")
    verify = add_command(sub, ["verify"], _verify, "re-hash an artifact against its manifest")
    verify.add_argument("directory", metavar="DIR")
    verify.add_argument("--json", action="store_true", help="print a JSON summary")
