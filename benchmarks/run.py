"""Run every benchmark script in benchmarks/ (or those named): `python -m benchmarks.run [name ...]`.

Each `bench_*.py` has a `main()` that writes its JSON result; see BENCHMARKS.md for the table.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    here = Path(__file__).resolve().parent
    names = argv or sorted(p.stem for p in here.glob("bench_*.py"))
    for name in names:
        module = importlib.import_module(f"benchmarks.{name.removesuffix('.py')}")
        print(f"== {name}", flush=True)
        module.main()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
