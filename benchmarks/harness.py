"""The one benchmark harness: a claim runs its workload under named contenders (ours, a peer
library, ours at an earlier git revision), each in its own process, with the same measures:

- CPU-seconds of the contender's whole process tree (every descendant sampled, Ray's daemons
  included; a child that exits between samples is still counted through the kernel's rusage of
  reaped children, whichever is larger);
- peak memory of every process (RSS and PSS per process, and the tree's largest total PSS);
- wall time with start-up apart: a contender that prints a line starting with `READY` marks the
  end of its start-up (imports, Ray start, input preparation); work wall = exit - READY;
- an output check: the claim's `check` reads each contender's last JSON line (what it reports of
  its output) and says what differs, or nothing.

A claim is a short spec (benchmarks/claims.py). `python -m benchmarks.run [CLAIM ...]` runs them
and fails loudly (exit 1, the contender's stderr tail) when a contender cannot start or fails.
"""

from __future__ import annotations

import json
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import CORPUS_ENV, RESULTS
from benchmarks.proctree import TreeSampler

__all__ = ["CORPUS_ENV", "Claim", "Contender", "ContenderFailed", "run_claim", "tiny_corpus"]

REPO = Path(__file__).resolve().parents[1]
READY = "READY"
WARNING = re.compile(r"Warning|warnings\.warn\(")
"""stderr lines left out of a failed contender's tail (libraries' warnings hide the error)."""


class ContenderFailed(RuntimeError):
    """A contender did not start or exited non-zero: the claim has no measurement."""


@dataclass(frozen=True)
class Contender:
    """One way to do the claim's work: `argv` after the Python interpreter, formatted with the
    claim's placeholders ({corpus}, {work}, {out}, {size}); `rev` runs it in a checkout of
    that git revision (ours before a change), with this interpreter and environment."""

    name: str
    argv: tuple[str, ...]
    rev: str | None = None


@dataclass(frozen=True)
class Claim:
    """What is claimed (one line), the contenders, the figure compared and the target.

    `size` / `smoke_size` fill {size} (the full run / a tiny run that only shows the spec
    starts). `ratio` = (measure, ours, baseline): `measure` is a key of a run's measures or of
    the contender's reported JSON; the ratio is baseline / ours for costs (cpu_s, wall_s,
    work_s, peak_total_pss_mb) and ours / baseline for any other figure (a rate, a score).
    A claim whose one contender compares inside its own process (a quality score) has ratio
    None and its target in `what`."""

    name: str
    what: str
    contenders: tuple[Contender, ...]
    size: str = ""
    smoke_size: str | None = ""
    """None: no tiny input exists (a demo to run first, a sweep of proxies): a smoke run only
    shows that each contender's command starts (`--help`)."""
    prepare: tuple[str, ...] = ()
    """A command run first, unmeasured (the input every contender reads: shards, a tokenizer)."""
    ratio: tuple[str, str, str] | None = None
    target: float | None = None
    check: Callable[[dict[str, dict]], str | None] | None = None
    gpu: bool = False


COSTS = ("cpu_s", "wall_s", "work_s", "startup_s", "peak_total_pss_mb", "max_peak_rss_mb")


def measure(
    argv: Sequence[str], cwd: Path, env: dict[str, str], timeout_s: float, interval: float = 0.25
) -> dict:
    """Run `argv` in its own process; the measures above and its last JSON line (`reported`),
    its process tree sampled every `interval` seconds (a smoke run's figures are not kept: it
    samples every 2 s, as walking the tree and reading each process's smaps is not free)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    try:
        proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    except OSError as exc:
        raise ContenderFailed(f"{argv[0]}: cannot start: {exc}") from exc
    ready: list[float] = []
    lines: list[str] = []
    err: list[str] = []
    drain = threading.Thread(target=lambda: err.extend(proc.stderr or ()), daemon=True)
    drain.start()
    killer = threading.Timer(timeout_s, proc.kill)  # a contender that hangs holds stdout open
    killer.start()
    with TreeSampler(root=proc.pid, interval=interval) as sampler:
        for line in proc.stdout or ():
            if line.startswith(READY) and not ready:
                ready.append(time.perf_counter() - start)
            lines.append(line)
    proc.wait()
    killer.cancel()
    if time.perf_counter() - start >= timeout_s:
        raise ContenderFailed(f"ran past {timeout_s:.0f} s")
    wall = time.perf_counter() - start
    drain.join(5)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        said = [line for line in err if not WARNING.search(line)] or lines
        tail = "".join(said)[-3000:]
        raise ContenderFailed(f"exit {proc.returncode}:\n{tail}")
    reaped = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    reported: dict[str, Any] = {}
    for line in reversed(lines):
        try:
            reported = json.loads(line) if line.startswith("{") else {}
        except json.JSONDecodeError:  # a dict printed as Python, not JSON
            continue
        if reported:
            break
    procs = sorted(sampler.procs.values(), key=lambda p: -p.peak_rss_mb)
    return {
        "cpu_s": round(max(reaped, sampler.cpu_s()), 2),
        "wall_s": round(wall, 2),
        "startup_s": round(ready[0], 2) if ready else None,
        "work_s": round(wall - ready[0], 2) if ready else None,
        "peak_total_pss_mb": round(sampler.peak_total_pss_mb, 1),
        "max_peak_rss_mb": round(procs[0].peak_rss_mb, 1) if procs else 0.0,
        "processes": [
            {"role": p.role, "command": p.command[:100], "peak_rss_mb": round(p.peak_rss_mb, 1)}
            for p in procs[:12]
        ],
        "reported": reported,
    }


def checkout(rev: str, into: Path) -> Path:
    """A detached worktree of `rev` under `into` (removed with `into`'s temporary directory)."""
    path = into / f"rev-{rev}"
    if not path.is_dir():
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(path), rev],
            check=True,
        )
    return path


def run_claim(claim: Claim, corpus: Path, smoke: bool, timeout_s: float = 7200) -> dict:
    """Every contender of `claim` once; its result (also written to results/<claim>.json unless
    a smoke run, whose contenders' own result files are not written either: BENCH_SMOKE)."""
    work = Path(tempfile.mkdtemp(prefix=f"bench-{claim.name}-"))
    runs: dict[str, dict] = {}
    help_only = smoke and claim.smoke_size is None
    size = (claim.smoke_size if smoke else claim.size) or ""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **({"BENCH_SMOKE": "1"} if smoke else {})}
    interval = 2.0 if smoke else 0.25

    def command(args: tuple[str, ...], out: Path) -> list[str]:
        slots = {"corpus": str(corpus), "work": str(work), "out": str(out)}
        argv = [sys.executable]
        for arg in args:
            argv += size.format(**slots).split() if arg == "{size}" else [arg.format(**slots)]
        return argv + (["--help"] if help_only else [])

    try:
        if claim.prepare and not help_only:
            try:
                measure(
                    command(claim.prepare, work),
                    REPO,
                    {**env, "PYTHONPATH": str(REPO)},
                    timeout_s,
                    interval,
                )
            except ContenderFailed as exc:
                raise ContenderFailed(f"{claim.name} / prepare: {exc}") from None
        for contender in claim.contenders:
            cwd = checkout(contender.rev, work) if contender.rev else REPO
            argv = command(contender.argv, work / contender.name)
            try:
                runs[contender.name] = measure(
                    argv, cwd, {**env, "PYTHONPATH": str(cwd)}, timeout_s, interval
                )
            except ContenderFailed as exc:
                raise ContenderFailed(f"{claim.name} / {contender.name}: {exc}") from None
    finally:
        for rev in {c.rev for c in claim.contenders if c.rev}:
            subprocess.run(
                ["git", "-C", str(REPO), "worktree", "remove", "--force", str(work / f"rev-{rev}")],
                check=False,
                capture_output=True,
            )
        shutil.rmtree(work, ignore_errors=True)
    result: dict[str, Any] = {"claim": claim.name, "what": claim.what, "runs": runs}
    if help_only:
        return result
    if claim.ratio:
        key, ours, base = claim.ratio
        result["ratios"] = {  # ours against every other contender, each cost and the figure
            figure: {
                name: round(_ratio(figure, runs[ours], run), 3)
                for name, run in runs.items()
                if name != ours
            }
            for figure in dict.fromkeys((key, "cpu_s", "peak_total_pss_mb", "wall_s"))
        }
        ratio = result["ratios"][key][base]
        result.update(ratio=ratio, target=claim.target)
        result["met"] = None if claim.target is None else ratio >= claim.target
    elif len(runs) == 1:
        result["met"] = next(iter(runs.values()))["reported"].get("target_met")
    if claim.check:
        result["output_differs"] = claim.check({n: r["reported"] for n, r in runs.items()})
    if not smoke:
        _write(claim.name, result)
    return result


def _ratio(key: str, ours: dict, other: dict) -> float:
    a, b = _figure(ours, key), _figure(other, key)
    return b / a if key in COSTS else a / b


def _figure(run: dict, key: str) -> float:
    value = run[key] if key in run else run["reported"][key]
    if value is None:
        raise ContenderFailed(f"{key}: not measured (a contender printed no READY line?)")
    return float(value)


def _write(name: str, result: dict) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    payload = {
        "unix_time": round(time.time()),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cores": os.cpu_count(),
        "load_1m": round(os.getloadavg()[0], 1),
        **result,
    }
    (RESULTS / f"{name}.json").write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")


def summary(result: dict) -> str:
    """One line: the claim, each contender's CPU / memory / wall, the ratio and the target."""
    parts = [result["claim"]]
    for name, run in result["runs"].items():
        work = f" work {run['work_s']} s" if run["work_s"] is not None else ""
        parts.append(
            f"{name}: {run['cpu_s']} CPU-s, {run['peak_total_pss_mb']} MB, {run['wall_s']} s{work}"
        )
    if "ratio" in result:
        target = "none" if result["target"] is None else f"{result['target']:.3g}"
        parts.append(f"ratio {result['ratio']} (target {target}, met {result['met']})")
    elif "met" in result:
        parts.append(f"target met: {result['met']}")
    if result.get("output_differs"):
        parts.append(f"OUTPUT DIFFERS: {result['output_differs']}")
    return " | ".join(parts)


def ready() -> None:
    """What a contender calls when its start-up is over (see the module docstring)."""
    print(READY, flush=True)


def report(figures: dict[str, Any]) -> None:
    """What a contender calls last: its own figures and what it knows of its output, one line."""
    print(json.dumps(figures, sort_keys=True), flush=True)


def tiny_corpus(into: Path) -> Path:
    """A corpus of the development corpus' shape ({en,zh,code,math,web}.jsonl.gz, html.tar.gz,
    web.warc.gz) from tests/data: enough for every claim's spec to start, nothing more."""
    import gzip
    import io
    import tarfile

    into.mkdir(parents=True, exist_ok=True)
    data = REPO / "tests" / "data"
    docs = [json.loads(line) for line in (data / "dedup" / "docs.jsonl").read_text().splitlines()]
    texts = [d["text"] for d in docs if isinstance(d.get("text"), str) and d["text"].strip()]
    for name in ("en", "zh", "code", "math", "web"):
        with gzip.open(into / f"{name}.jsonl.gz", "wt", encoding="utf-8") as out:
            for i, text in enumerate(texts * 4):
                source = "manpages" if name == "en" else name  # perplexity's reference text
                record = {"text": text, "source": source, "lang": "en", "domain": name, "id": i}
                out.write(json.dumps(record) + "\n")
    shutil.copy(data / "data_pipeline" / "pages.warc.gz", into / "web.warc.gz")
    with tarfile.open(into / "html.tar.gz", "w:gz") as tar:
        for i, text in enumerate(texts[:40]):
            page = f"<html><body><p>{text}</p></body></html>".encode()
            info = tarfile.TarInfo(f"page{i}.html")
            info.size = len(page)
            tar.addfile(info, io.BytesIO(page))
    return into
