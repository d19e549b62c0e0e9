"""Matplotlib (Agg) plots for the ablation report and the capability curves."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def _ranking_plot(report: Mapping[str, Any], path: Path) -> None:
    ranking = report["ranking"]
    fig, axes = plt.subplots(1, len(ranking), figsize=(5 * len(ranking), 3.5), squeeze=False)
    for ax, (proxy, rows) in zip(axes[0], sorted(ranking.items())):
        names = [row["recipe_name"] for row in rows]
        means = [row["mean"] for row in rows]
        errs = [row["std"] or 0.0 for row in rows]
        colors = [
            "tab:green"
            if row["recipe_sha256"] == report["chosen_recipe_sha256"]
            else "tab:gray"
            if row["recipe_sha256"] == report["base_recipe_sha256"]
            else "tab:blue"
            for row in rows
        ]
        ax.barh(names[::-1], means[::-1], xerr=errs[::-1], color=colors[::-1], capsize=3)
        low = min(m - e for m, e in zip(means, errs))
        high = max(m + e for m, e in zip(means, errs))
        pad = (high - low) * 0.2 + 1e-9
        ax.set_xlim(low - pad, high + pad)
        ax.set_title(f"{proxy}: {report['target_metric']} (mean ± std over seeds)")
        ax.set_xlabel(report["target_metric"])
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _regression_plot(report: Mapping[str, Any], path: Path) -> None:
    regression = report.get("regression") or {}
    if regression.get("status") != "fitted":
        return
    primary = [
        r
        for r in report["runs"]
        if r["proxy"] == report["primary_proxy"]
        and r["metrics"].get(report["target_metric"]) is not None
    ]
    observed = [r["metrics"][report["target_metric"]] for r in primary]
    predicted = regression["in_sample_predictions"]
    fig, ax = plt.subplots(figsize=(4.5, 4))
    ax.scatter(observed, predicted)
    lims = [min(observed + predicted), max(observed + predicted)]
    ax.plot(lims, lims, color="gray", linewidth=1)
    fits = regression["models"][regression["selected_model"]]
    ax.set_title(f"{regression['selected_model']} fit, CV R² {fits['cv_r2']}")
    ax.set_xlabel("observed")
    ax.set_ylabel("predicted (in sample)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_ablation(report: Mapping[str, Any], out: Path) -> None:
    """ranking.png, plus regression.png when a regression was fitted."""
    _ranking_plot(report, out / "ranking.png")
    _regression_plot(report, out / "regression.png")


def plot_capability(records: Sequence[Mapping[str, Any]], path: Path) -> None:
    """Capability curves: one line per domain/language metric (e.g. bpb/web/en) over steps."""
    series: dict[str, list[tuple[int, float]]] = defaultdict(list)
    prefix = "bpb/"
    for record in records:
        for key, value in record["metrics"].items():
            if key.startswith(prefix) and value is not None:
                series[key].append((int(record["step"]), float(value)))
    fig, ax = plt.subplots(figsize=(6, 4))
    for key, points in sorted(series.items()):
        points.sort()
        ax.plot(
            [p[0] for p in points], [p[1] for p in points], marker="o", label=key[len(prefix) :]
        )
    ax.set_xlabel("step")
    ax.set_ylabel(prefix.rstrip("/") + " (lower is better)")
    ax.set_title("capability per domain over checkpoints")
    if series:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
