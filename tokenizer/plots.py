"""The eval plot: bytes per token per domain and language, ours vs the SentencePiece baseline."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

MAX_BARS = 30


def plot_groups(report: dict[str, Any]) -> list[str]:
    """`all`, then each domain, then each language (the domain x language cells stay in JSON)."""
    groups = report["ours"]["groups"]
    ordered = [
        "all",
        *sorted(k for k in groups if k.startswith("domain=")),
        *sorted((k for k in groups if k.startswith("lang=")), key=lambda k: -groups[k]["bytes"]),
    ]
    return [k for k in ordered if k in groups][:MAX_BARS]


def plot_compression(report: dict[str, Any], path: Path) -> None:
    """Horizontal grouped bars of bytes/token (PNG, Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = plot_groups(report)
    ours = report["ours"]["groups"]
    base = report.get("sentencepiece", {}).get("groups", {})
    height = 0.4
    fig, ax = plt.subplots(figsize=(8, 1.6 + 0.42 * len(groups)))
    positions = list(range(len(groups)))
    ax.barh(
        [p - height / 2 for p in positions],
        [ours[g]["bytes_per_token"] for g in groups],
        height,
        label=report["tokenizer"]["id"],
        color="tab:blue",
    )
    if base:
        ax.barh(
            [p + height / 2 for p in positions],
            [base.get(g, {}).get("bytes_per_token", 0) for g in groups],
            height,
            label="SentencePiece BPE (same sample and vocab size)",
            color="tab:orange",
        )
    ax.set_yticks(positions, [f"{g} ({ours[g]['documents']} docs)" for g in groups])
    ax.invert_yaxis()
    ax.set_xlabel("bytes per token (higher = better compression)")
    source = textwrap.shorten(report["eval_source"], 110, placeholder=" ...")
    ax.set_title("Compression on " + "\n".join(textwrap.wrap(source, 80)), fontsize=8)
    ax.legend(
        loc="upper center",
        bbox_to_anchor=(0.5, -0.35 / max(len(groups), 1) - 0.08),
        ncol=2,
        fontsize=8,
        frameon=False,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
