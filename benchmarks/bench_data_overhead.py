"""The data job's CPU outside its stages: `pretrain data run configs/pipeline.yaml` on the
corpus's web.warc.gz, whole process tree (Ray's daemons and workers included, sampled by
benchmarks.harness.measure) minus the CPU the manifest's throughput section gives the stages.
`--tree DIR` runs the job from another checkout (ours before a change) with this interpreter.
Target (issue 31): half of the 15.5 CPU-s outside the stages measured at c166a0c.

    python -m benchmarks.bench_data_overhead --corpus DIR [--tree DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from benchmarks.common import add_corpus_argument, corpus_dir, write_result
from benchmarks.harness import REPO, measure

BEFORE_OUTSIDE_CPU_S = 15.5  # c166a0c, 968 records, quiet 2 cores (RESULTS_LOG.md 2026-12-08)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_corpus_argument(parser)
    parser.add_argument("--tree", type=Path, default=REPO, help="the checkout that runs the job")
    args = parser.parse_args()
    warc = corpus_dir(args.corpus) / "web.warc.gz"
    tree = args.tree.resolve()
    with tempfile.TemporaryDirectory(prefix="bench-overhead-") as scratch:
        out = Path(scratch) / "out"
        argv = [sys.executable, "-m", "pretrain_app", "data", "run"]
        argv += [str(tree / "configs" / "pipeline.yaml"), "-q"]
        argv += ["--set", f"inputs=[{warc}]", "--set", f"output={out}"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        run = measure(argv, tree, env, timeout_s=1800)
        manifest = json.loads((out / "manifest.json").read_text())
        documents = json.loads((out / "ledger.json").read_text())["documents_in"]
    stages = {s["stage"]: s["cpu_s"] for s in manifest["throughput"]["stages"]}
    outside = run["cpu_s"] - sum(stages.values())
    write_result(
        "data_overhead",
        {
            "tree": str(tree),
            "documents": documents,
            "cpu_s": run["cpu_s"],
            "wall_s": run["wall_s"],
            "peak_total_pss_mb": run["peak_total_pss_mb"],
            "stage_cpu_s": {k: round(v, 2) for k, v in stages.items()},
            "outside_cpu_s": round(outside, 2),
            "target_met": outside <= BEFORE_OUTSIDE_CPU_S / 2,
        },
    )


if __name__ == "__main__":
    main()
