"""What a `pretrain demo` step is handed: the demo's context, typed for every package's step.

The demo (pretrain_app.demo, the top layer) owns the concrete context and the list of steps; a
package's `demo.step(ctx)` sees only this Protocol, so each step type-checks against it without
importing the layer above its package.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

__all__ = ["DemoContext", "DemoStep"]


class DemoContext(Protocol):
    """The demo's state, shared by its steps in order."""

    out: Path
    """The demo's output directory: each step writes its artifacts under it."""
    force: bool
    """Rebuild every artifact (`pretrain demo --force`), never reuse one."""
    artifacts: dict[str, Path]
    """Artifacts earlier steps made, by name (`raw`, `shards`, `tokenizer`, ...)."""

    def reuse(self, directory: Path) -> bool:
        """True when `directory` is a verified artifact from an earlier demo run (not --force)."""
        ...


DemoStep = Callable[[DemoContext], str]
"""A demo step: builds (or reuses) its artifacts, returns a one-line summary."""
