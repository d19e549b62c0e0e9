"""The held-out report of a classifier artifact: a confusion-matrix PNG beside model.json."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plot_confusion(metrics: dict[str, Any], labels: list[str], path: Path, title: str) -> None:
    """Row = true label, column = predicted label, cells = held-out documents (Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    confusion = metrics.get("confusion", {})
    matrix = np.array([[confusion.get(t, {}).get(p, 0) for p in labels] for t in labels])
    fig, ax = plt.subplots(figsize=(1.2 * len(labels) + 2.5, 1.0 * len(labels) + 2))
    ax.imshow(matrix, cmap="Blues")
    ax.set_xticks(range(len(labels)), labels)
    ax.set_yticks(range(len(labels)), labels)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    for i in range(len(labels)):
        for j in range(len(labels)):
            ax.text(
                j,
                i,
                str(matrix[i, j]),
                ha="center",
                va="center",
                color="white" if matrix[i, j] > matrix.max() / 2 else "black",
            )
    accuracy = metrics.get("accuracy")
    shown = f"{accuracy:.3f}" if accuracy is not None else "n/a"
    ax.set_title(f"{title}: held-out accuracy {shown} ({metrics.get('heldout_documents', 0)} docs)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
