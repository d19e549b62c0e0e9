"""Run every benchmark claim (benchmarks/claims.py), or those named:

    python -m benchmarks.run [CLAIM ...] [--corpus DIR] [--smoke] [--list]
    python -m benchmarks.run CLAIM --size "--docs 5000 --workers 2"   # one claim, another size
    make bench [CLAIM=name]

Each claim's contenders run in their own processes under the same measures (benchmarks/
harness.py); its result goes to benchmarks/results/<claim>.json and one line to the terminal.
`--smoke` runs each spec on a tiny corpus built from the test fixtures (it only shows that every
contender starts; nothing is written to results/). A claim that cannot start or whose contender
fails is reported with the contender's error and the run exits 1 after trying the others.
A GPU claim is skipped where no GPU is visible (nvidia-smi).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import sys
import tempfile
import traceback
from pathlib import Path

from benchmarks.claims import CLAIMS
from benchmarks.harness import CORPUS_ENV, ContenderFailed, run_claim, summary, tiny_corpus


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("claims", nargs="*", metavar="CLAIM")
    parser.add_argument("--corpus", type=Path, default=os.environ.get(CORPUS_ENV) or None)
    parser.add_argument("--smoke", action="store_true", help="tiny input: does each spec start")
    parser.add_argument("--list", action="store_true", help="the claims, one a line")
    parser.add_argument("--size", help="one claim's size arguments instead of its spec's")
    args = parser.parse_args(argv)
    by_name = {claim.name: claim for claim in CLAIMS}
    if args.list:
        for claim in CLAIMS:
            print(f"{claim.name:18} {claim.what}")
        return 0
    unknown = [name for name in args.claims if name not in by_name]
    if unknown:
        parser.error(f"no claim {', '.join(unknown)} (known: {', '.join(by_name)})")
    claims = [by_name[name] for name in args.claims] if args.claims else list(CLAIMS)
    if args.size is not None:
        if len(args.claims) != 1:
            parser.error("--size goes with one named claim")
        claims = [dataclasses.replace(claims[0], size=args.size)]
    scratch = Path(tempfile.mkdtemp(prefix="bench-corpus-"))
    try:
        if args.smoke:
            corpus = tiny_corpus(scratch / "corpus")
        elif args.corpus is None or not args.corpus.is_dir():
            parser.error(f"pass --corpus DIR or set {CORPUS_ENV} (BENCHMARKS.md, 'Input')")
        else:
            corpus = args.corpus.resolve()
        failed = []
        for claim in claims:
            if claim.gpu and not args.smoke and shutil.which("nvidia-smi") is None:
                print(f"{claim.name}: skipped, no GPU visible", flush=True)
                continue
            print(f"== {claim.name}: {claim.what}", flush=True)
            try:
                print(summary(run_claim(claim, corpus, args.smoke)), flush=True)
            except ContenderFailed as exc:
                failed.append(claim.name)
                print(f"FAILED {exc}", file=sys.stderr, flush=True)
            except Exception:  # a bug in a spec or in the harness: say it, try the next claim
                failed.append(claim.name)
                traceback.print_exc()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if failed:
        print(f"bench: {len(failed)} claim(s) failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
