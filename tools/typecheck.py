"""Type-check the packages with mypy against a checked-in baseline that may only shrink.

    .venv/bin/python tools/typecheck.py           # fail on any error not in the baseline
    .venv/bin/python tools/typecheck.py --shrink  # drop baseline entries that no longer occur

The files and settings are pyproject.toml's [tool.mypy]. A baseline entry is `path: message [code]`
without the line number, so an edit elsewhere in a file does not disturb it; the baseline counts
repeats. A new error fails with its line; a baseline entry that no longer occurs also fails until
`--shrink` removes it, so fixed errors cannot come back. `--shrink` never adds: accepting an error
means adding its line to the baseline by hand, where review sees it.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASELINE = ROOT / "tools" / "typecheck-baseline.txt"
ERROR = re.compile(r"^(?P<path>[^:\n]+):(?P<line>\d+)(?::\d+)?: error: (?P<message>.*)$")


def mypy_errors(args: Sequence[str] = ()) -> dict[str, list[str]]:
    """Run mypy (in-process) and return {baseline entry: [the full error lines]}."""
    from mypy import api

    stdout, stderr, status = api.run(list(args))
    if status not in (0, 1):
        raise SystemExit(f"mypy failed to run (status {status}):\n{stderr or stdout}")
    found: dict[str, list[str]] = {}
    for line in stdout.splitlines():
        match = ERROR.match(line)
        if match:
            key = f"{match['path']}: {match['message']}"
            found.setdefault(key, []).append(line)
    return found


def read_baseline(path: Path) -> Counter[str]:
    if not path.is_file():
        return Counter()
    lines = path.read_text(encoding="utf-8").splitlines()
    return Counter(line for line in lines if line.strip() and not line.startswith("#"))


def write_baseline(path: Path, entries: Counter[str]) -> None:
    header = "# mypy errors accepted for now (tools/typecheck.py); this list may only shrink.\n"
    path.write_text(header + "".join(f"{e}\n" for e in sorted(entries.elements())), "utf-8")


def compare(current: dict[str, list[str]], baseline: Counter[str]) -> tuple[list[str], Counter]:
    """(error lines beyond the baseline, baseline entries that no longer occur)."""
    counts = Counter({key: len(lines) for key, lines in current.items()})
    new = [line for key in sorted(counts - baseline) for line in current[key][baseline[key] :]]
    return new, baseline - counts


def check(baseline_path: Path, shrink: bool, mypy_args: Sequence[str] = ()) -> int:
    current = mypy_errors(mypy_args)
    baseline = read_baseline(baseline_path)
    new, stale = compare(current, baseline)
    if shrink and stale:
        write_baseline(baseline_path, baseline - stale)
        print(f"typecheck: removed {sum(stale.values())} fixed entries from {baseline_path.name}")
        stale = Counter()
    for line in new:
        print(line)
    if new:
        print(f"typecheck: {len(new)} new mypy error(s) beyond {baseline_path.name}; fix them")
    if stale:
        print(
            f"typecheck: {sum(stale.values())} baseline entries no longer occur; run "
            "`.venv/bin/python tools/typecheck.py --shrink` to lock the fix in"
        )
    if new or stale:
        return 1
    total = sum(baseline.values())
    print(f"typecheck: no new errors ({total} accepted in {baseline_path.name})")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shrink", action="store_true", help="drop entries that no longer occur")
    parser.add_argument("--baseline", type=Path, default=BASELINE)
    args = parser.parse_args(argv)
    os.chdir(ROOT)  # mypy reads [tool.mypy] from ./pyproject.toml and reports relative paths
    return check(args.baseline.resolve(), args.shrink)


if __name__ == "__main__":
    sys.exit(main())
