"""Every package's demo step is typed against the one context Protocol (no `Any`, no import up)."""

from __future__ import annotations

import typing
from pathlib import Path

from pretrain import demostep
from pretrain_app.demo import DEMO_STEPS, DemoContext


def test_every_demo_step_takes_the_context_protocol() -> None:
    for name, step in DEMO_STEPS:
        hints = typing.get_type_hints(step)
        assert hints.pop("return") is str, name
        assert list(hints.values()) == [demostep.DemoContext], (name, hints)


def test_the_demo_context_has_what_the_protocol_names() -> None:
    """The dataclass the demo builds carries every member the steps may use."""
    ctx = DemoContext(out=Path("/nonexistent-demo"))
    members = typing.get_type_hints(demostep.DemoContext)
    assert set(members) == {"out", "force", "artifacts"}
    for member in (*members, "reuse"):
        assert hasattr(ctx, member), member
    assert ctx.reuse(ctx.out) is False
