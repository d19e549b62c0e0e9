"""The eval plot: bytes per token per group, ours vs the SentencePiece baseline (PNG, Agg)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plot_compression(report: dict[str, Any], path: Path) -> None:
    """Horizontal grouped bars of bytes/token for every group in the report."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = list(report["ours"]["groups"])
    ours = [report["ours"]["groups"][g]["bytes_per_token"] for g in groups]
    base_groups = report.get("sentencepiece", {}).get("groups", {})
    height = 0.4
    fig, ax = plt.subplots(figsize=(8, 1.0 + 0.45 * len(groups)))
    positions = range(len(groups))
    ax.barh(
        [p + height / 2 for p in positions],
        ours,
        height,
        label=report["tokenizer"]["id"],
        color="tab:blue",
    )
    if base_groups:
        base = [base_groups.get(g, {}).get("bytes_per_token", 0) for g in groups]
        ax.barh(
            [p - height / 2 for p in positions],
            base,
            height,
            label="SentencePiece BPE (same sample, vocab)",
            color="tab:orange",
        )
    ax.set_yticks(list(positions), groups)
    ax.invert_yaxis()
    ax.set_xlabel("bytes per token (higher = better compression)")
    ax.set_title("Tokenizer compression on " + report["eval_source"][:60], fontsize=9)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
