"""`pretrain mixture report DIR`: target vs realised shares and deviations of a built mixture per
phase and component, in `DIR/report/` (or `--out`); with `--run RUN_DIR`, the trainer's tokens
per component (RUN/metrics.jsonl) against the index."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, TypeAdapter

from mixtures import sampler
from pretrain.artifacts import mixture as mixture_kind
from pretrain.artifacts import mixture_report as report_kind
from pretrain.artifacts.base import write_artifact
from pretrain.artifacts.mixture import Mixture
from pretrain.errors import ArtifactError
from pretrain.locking import output_lock
from pretrain.manifest import require
from pretrain.output_check import require_own_output
from pretrain.publish import publishing
from pretrain.storage import write_json

MAX_PLOTTED_BATCHES = 2000


def phase_report(
    index: np.ndarray, weights: list[float], names: list[str], width: int, seq_length: int
) -> dict[str, Any]:
    """Shares and deviations of one phase's index."""
    w = np.asarray(weights, np.float64)
    counts = sampler.batch_counts(index["component"], len(names), width)
    num_batches = counts.shape[0]
    batch_dev, prefix_dev = sampler.batch_deviations(counts, w, width)
    sample_dev = sampler.sample_prefix_deviations(index["component"], w)
    share = counts / width
    components = []
    for k, name in enumerate(names):
        total = int(counts[:, k].sum())
        components.append(
            {
                "name": name,
                "target_share": float(w[k]),
                "realised_share": total / max(index.size, 1),
                "batch_share_min": float(share[:, k].min()) if num_batches else 0.0,
                "batch_share_max": float(share[:, k].max()) if num_batches else 0.0,
                "max_batch_deviation_sequences": float(batch_dev[k]),
                "max_prefix_deviation_sequences": float(prefix_dev[k]),
                "max_every_sample_prefix_deviation_sequences": float(sample_dev[k]),
                "sequences": total,
                "tokens": total * seq_length,
            }
        )
    window = (
        sampler.max_window_deviation(np.asarray(index["component"]), w, width)
        if index.size <= 50_000_000
        else None
    )
    return {
        "num_sequences": int(index.size),
        "num_batches": num_batches,
        "seq_length": seq_length,
        "max_batch_deviation_share": float(batch_dev.max() / width) if num_batches else 0.0,
        "max_sliding_window_deviation_sequences": window,
        "components": components,
        "_batch_share": share,
    }


def build_report(
    directory: str | os.PathLike, run_dir: str | os.PathLike | None = None
) -> dict[str, Any]:
    """Report of a mixture artifact (verified first), with `compare_run` of `run_dir` when
    given; `_batch_share` arrays are for the plot."""
    mixture = mixture_kind.open(directory)
    root, manifest = mixture.directory, mixture.raw
    names = [c["name"] for c in manifest["components"]]
    width = int(manifest["global_batch"])
    components = _summary_components(mixture)
    # replan.json of a re-planned mixture, read only when listed (never a file planted beside it)
    listed = "replan.json" in manifest["files"]
    replan = dict(json.loads(mixture.path("replan.json").read_text())) if listed else None
    kept = {p["phase"]: int(p["kept_sequences"]) for p in (replan or {}).get("phases", [])}
    phases = []
    for number, info in enumerate(manifest["phases"]):
        weights = [info["weights"][n] for n in names]
        # a re-plan's kept prefix follows the build it re-plans: judged are the new samples
        skip = kept.get(info["name"], 0)
        index = mixture.index(number)[skip:]
        entry = phase_report(index, weights, names, width, int(info["seq_length"]))
        phases.append({"name": info["name"], "kept_sequences": skip, **entry})
    return {
        "mixture": str(root.resolve()),
        "recipe": manifest["recipe_name"],
        "recipe_sha256": manifest["recipe_sha256"],
        "build_sha256": manifest["build_sha256"],
        "global_batch": width,
        "phases": phases,
        "components": components,
        "replan": replan,
        "run": None if run_dir is None else compare_run(mixture, replan, run_dir),
    }


class _SummaryComponent(BaseModel, strict=True):
    """What `mixture build` writes per component in summary.json (other keys pass through)."""

    name: str
    tokens: int
    available_tokens: int
    epochs: float
    max_epochs: float


def _summary_components(mixture: Mixture) -> list[dict[str, Any]]:
    """summary.json's components, refused in one line when their fields are not what `mixture
    build` writes (an edited file whose hash and seal were redone): never a traceback."""
    try:
        summary = json.loads(mixture.path("summary.json").read_bytes())
        components: list[dict[str, Any]] = summary["components"]
        TypeAdapter(list[_SummaryComponent]).validate_python(components)
    except (ValueError, TypeError, KeyError):  # pydantic's ValidationError is a ValueError
        raise ArtifactError(
            f"{mixture.directory}/summary.json does not hold what `pretrain mixture build` writes (components "
            f"with {', '.join(_SummaryComponent.model_fields)}): it was edited or damaged; "
            "rebuild the mixture"
        ) from None
    return components


def compare_run(
    mixture: Mixture, replan: dict[str, Any] | None, run_dir: str | os.PathLike
) -> dict[str, Any]:
    """Trainer's realised tokens per component (last `tokens_per_component` record of
    RUN/metrics.jsonl) vs what the mixture's index holds for the same consumed batches."""
    metrics = Path(run_dir) / "metrics.jsonl"
    if not metrics.is_file():
        raise ArtifactError(f"--run: {metrics} does not exist; pass a training run directory")
    records, unreadable = _run_records(metrics)
    if not records:
        raise ArtifactError(f"--run: {metrics} has no step record with tokens_per_component")
    line, last = records[-1]
    batch, tokens = last["batch"], last["tokens_per_component"]
    if (
        not _is_count(batch)
        or not isinstance(tokens, dict)
        or not all(map(_is_count, tokens.values()))
    ):
        raise ArtifactError(
            f"--run: {metrics} line {line}: `batch` and `tokens_per_component` are not the "
            "counts the trainer writes (a whole number, and component -> whole number); "
            "restore the file or pass the run directory it came from"
        )
    names = [c["name"] for c in mixture.raw["components"]]
    expected = _mixture_tokens(mixture, batch + 1)
    trained = [int(tokens.get(name, 0)) for name in names]
    rows = [
        {"name": n, "mixture_tokens": int(e), "trained_tokens": t, "difference": t - int(e)}
        for n, e, t in zip(names, expected, trained, strict=True)
    ]
    return {
        "run": str(Path(run_dir).resolve()),
        "batches": batch + 1,
        "match": all(r["difference"] == 0 for r in rows),
        "components": rows,
        "segments": _segments(mixture, replan, records, batch + 1, expected, trained),
        "unreadable_lines": unreadable,
    }


def _mixture_tokens(mixture: Mixture, batches: int) -> np.ndarray:
    """Tokens per component in the first `batches` global batches of the mixture's index."""
    names = [c["name"] for c in mixture.raw["components"]]
    width, remaining = int(mixture.raw["global_batch"]), batches
    expected = np.zeros(len(names), dtype=np.int64)
    for number, info in enumerate(mixture.raw["phases"]):
        take = min(remaining, info["num_sequences"] // width)
        index = mixture.index(number)
        counts = np.bincount(index["component"][: take * width], minlength=len(names))
        expected += counts * int(info["seq_length"])
        remaining -= take
    return expected


def _segments(
    mixture: Mixture,
    replan: dict[str, Any] | None,
    records: list[tuple[int, dict[str, Any]]],
    batches: int,
    expected: np.ndarray,
    trained: list[int],
) -> list[dict[str, Any]]:
    """A re-planned mixture trained past its re-plan: the batches before it (the build it
    re-plans, whose samples it kept) and after it (the new weights), each with the mixture's and
    the run's tokens per component and their shares. One segment otherwise."""
    manifest = mixture.raw
    names = [c["name"] for c in manifest["components"]]
    width = int(manifest["global_batch"])
    cut = int(replan["consumed_sequences"]) // width if replan else 0
    if replan is None or not 0 < cut < batches:
        return [_segment(manifest["build_sha256"], 0, batches, names, expected, trained)]
    before = _mixture_tokens(mixture, cut)
    at_cut = [r for _, r in records if r["batch"] == cut - 1]
    trained_before = (
        [int(at_cut[-1]["tokens_per_component"].get(n, 0)) for n in names] if at_cut else None
    )
    trained_after = (
        [t - b for t, b in zip(trained, trained_before, strict=True)] if trained_before else None
    )
    return [
        _segment(replan["from_build_sha256"], 0, cut, names, before, trained_before),
        _segment(manifest["build_sha256"], cut, batches, names, expected - before, trained_after),
    ]


def _segment(
    build: str,
    start: int,
    stop: int,
    names: list[str],
    mixture: np.ndarray,
    trained: list[int] | None,
) -> dict[str, Any]:
    total = max(int(mixture.sum()), 1)
    done = max(sum(trained), 1) if trained is not None else 1
    return {
        "build_sha256": build,
        "batches": [start, stop],
        "components": [
            {
                "name": name,
                "mixture_tokens": int(mixture[k]),
                "mixture_share": int(mixture[k]) / total,
                "trained_tokens": None if trained is None else trained[k],
                "trained_share": None if trained is None else trained[k] / done,
            }
            for k, name in enumerate(names)
        ],
    }


def _segment_lines(segments: list[dict[str, Any]]) -> list[str]:
    lines = []
    for label, segment in zip(("before the re-plan", "after the re-plan"), segments, strict=True):
        start, stop = segment["batches"]
        lines.append(f"  {label}: batches {start}-{stop - 1}, build {segment['build_sha256'][:12]}")
        for c in segment["components"]:
            trained = "?" if c["trained_share"] is None else f"{c['trained_share']:.4f}"
            lines.append(
                f"    {c['name']:<16} mixture share {c['mixture_share']:.4f} trained {trained}"
            )
    return lines


def _run_records(metrics: Path) -> tuple[list[tuple[int, dict[str, Any]]], list[int]]:
    """(line number, record) of every step record with tokens per component, and the numbers of
    the lines that are not JSON: a run killed (or out of disk) mid-write leaves its last line
    torn, and a resumed run appends after it; those lines are skipped and reported, not fatal."""
    records, unreadable = [], []
    text = metrics.read_text(encoding="utf-8", errors="replace")
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            unreadable.append(number)
            continue
        if isinstance(record, dict) and "tokens_per_component" in record and "batch" in record:
            records.append((number, record))
    return records, unreadable


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def write_report(
    directory: str | os.PathLike,
    out: str | os.PathLike | None = None,
    run_dir: str | os.PathLike | None = None,
) -> dict[str, Any]:
    """Write report.json and report.png; returns the report (without plot arrays)."""
    target = Path(out) if out is not None else Path(directory) / "report"
    # checked before the lock is taken: the lock file sits beside `target`, inside the mixture,
    # and must not create a folder in a missing or unfinished one
    require(directory, kind="mixture", deep=False)
    # the mixture's own writer lock too: a `mixture build` must not replace it mid-read
    with output_lock(directory), output_lock(target):
        # new, empty, or an earlier report (replaced); else one line, before any work
        flag = "--out" if out is not None else "the report folder"
        require_own_output(target, flag, report_kind.KIND)
        report = build_report(directory, run_dir)
        # built in the mixture's unlisted .pretrain-staging/ and published in one rename
        with publishing(target) as building:
            plot(report, building / "report.png")
            for phase in report["phases"]:
                phase.pop("_batch_share")
            report["files"] = {
                "json": str(target / "report.json"),
                "png": str(target / "report.png"),
            }
            write_json(building / "report.json", report)
            # an artifact of its own: inside the mixture (the default) no unlisted file there
            write_artifact(
                building,
                report_kind.MixtureReportFields(build_sha256=report["build_sha256"]),
                config={"run": None if run_dir is None else str(run_dir)},
                inputs=[directory],
                counts={"phases": len(report["phases"])},
            )
    return report


def plot(report: dict[str, Any], path: Path) -> None:
    """Per phase: target vs realised share (bars) and the per-batch share of each component."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    phases = report["phases"]
    fig, axes = plt.subplots(2, len(phases), figsize=(6 * len(phases), 7), squeeze=False)
    for col, phase in enumerate(phases):
        comps = phase["components"]
        names = [c["name"] for c in comps]
        x = np.arange(len(names))
        bars = axes[0, col]
        bars.bar(x - 0.2, [c["target_share"] for c in comps], 0.4, label="target")
        bars.bar(x + 0.2, [c["realised_share"] for c in comps], 0.4, label="realised")
        bars.set_xticks(x, names, rotation=30, ha="right")
        bars.set_title(f"{phase['name']}: share per component")
        bars.legend()
        lines = axes[1, col]
        share = phase["_batch_share"]
        step = max(1, share.shape[0] // MAX_PLOTTED_BATCHES)
        batches = np.arange(0, share.shape[0], step)
        for k, comp in enumerate(comps):
            line = lines.plot(batches, share[::step, k], lw=0.8, label=comp["name"])[0]
            lines.axhline(comp["target_share"], color=line.get_color(), ls="--", lw=0.6)
        lines.set_xlabel(f"global batch (W = {report['global_batch']})")
        lines.set_ylabel("share of batch")
        lines.set_title(f"max per-batch deviation {phase['max_batch_deviation_share']:.4f}")
        lines.legend(fontsize="small")
    fig.suptitle(f"mixture {report['recipe']} ({report['build_sha256'][:12]})")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def format_report(report: dict[str, Any]) -> str:
    """The lines `pretrain mixture report` prints."""
    lines = [
        f"mixture {report['recipe']} build {report['build_sha256'][:12]} "
        f"(W = {report['global_batch']})"
    ]
    for phase in report["phases"]:
        kept = phase.get("kept_sequences") or 0
        lines.append(
            f"  phase {phase['name']}: {phase['num_sequences']:,} sequences"
            + (f" after the {kept:,} kept by the re-plan" if kept else "")
            + f", max per-batch deviation {phase['max_batch_deviation_share']:.4f} of a batch"
        )
        lines.append(
            f"    {'component':<16} {'target':>8} {'realised':>9} {'batch min':>9} "
            f"{'batch max':>9} {'tokens':>14}"
        )
        for c in phase["components"]:
            lines.append(
                f"    {c['name']:<16} {c['target_share']:>8.4f} {c['realised_share']:>9.4f}"
                f" {c['batch_share_min']:>9.4f} {c['batch_share_max']:>9.4f} "
                f"{c['tokens']:>14,}"
            )
    for c in report["components"]:
        lines.append(
            f"  {c['name']:<16} {c['tokens']:,} tokens, {c['epochs']:.3f} epochs "
            f"(cap {c['max_epochs']:g}) of {c['available_tokens']:,} available"
        )
    run = report.get("run")
    if run:
        state = "matches" if run["match"] else "DIFFERS FROM"
        lines.append(f"  training run after {run['batches']} batches {state} the mixture:")
        if run.get("unreadable_lines"):
            shown = ", ".join(map(str, run["unreadable_lines"][:5]))
            lines.append(
                f"    ({len(run['unreadable_lines'])} unreadable line(s) of metrics.jsonl skipped:"
                f" line {shown}; a write cut short, e.g. a killed run)"
            )
        for c in run["components"]:
            lines.append(
                f"    {c['name']:<16} trained {c['trained_tokens']:>14,} mixture "
                f"{c['mixture_tokens']:>14,} difference {c['difference']:+,}"
            )
        if len(run["segments"]) > 1:
            lines += _segment_lines(run["segments"])
    lines.append(f"  -> {report['files']['json']}, {report['files']['png']}")
    return "\n".join(lines)
