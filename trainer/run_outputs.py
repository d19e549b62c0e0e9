"""What a run leaves in its run.out_dir, and the check that the folder is one of our runs.

`check_run_dir`: every entry point that writes run.out_dir (`pretrain launch`, `--smoke`,
`--in-process`, every rank's `trainer.worker.run`) refuses, in one line before anything is written,
a folder a run would write over someone else's files in. At the end of a run rank 0 writes the
run manifest and summary.json (`write_outputs`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pretrain.artifacts import run as run_kind
from pretrain.artifacts.base import write_artifact
from pretrain.config import config_dict
from pretrain.errors import ArtifactError
from pretrain.manifest import MANIFEST
from pretrain.output_check import (
    manifest_kind,
    refuse,
    refuse_foreign,
    refuse_not_a_directory,
    temporary_file,
)
from pretrain.storage import write_json

if TYPE_CHECKING:  # torch and megatron: the launcher's out_dir check must not wait for them
    from trainer.loop import Trainer


SMOKE_DIR = "smoke"
"""`pretrain launch --smoke` runs in RUN/smoke/ (its writer lock: RUN/.smoke.lock)."""
OWN_NAMES = ("launch.json", "launch/", "checkpoints/", "metrics.jsonl", SMOKE_DIR + "/")
"""What marks a folder as one of our runs (named in the refusal; see `_is_own_entry`). A run also
writes manifest.json (kind run), summary.json, loss.png, tensorboard/, mlruns/, wandb/ and .logs/,
which do not count on their own: another tool's folder may hold files of those names."""
_CHECKPOINT = re.compile(r"iter_\d{7}(\.tmp)?")


def check_run_dir(out_dir: str | Path, flag: str = "run.out_dir") -> None:
    """Refuse, in one line, an out_dir a run must not write in: a file or a path below one; a
    folder holding another kind of artifact (its manifest.json would be replaced); a non-empty
    folder holding none of a run's own files (`OWN_NAMES`), where a run would append to a
    metrics.jsonl and replace launch.json and loss.png that are not ours. A new or empty folder
    (but for logs and temporary files), or one of our runs (a resume), passes. Also refused: an
    empty value (the current directory) and a URL (a run writes a local folder: `s3://b/x` was a
    folder named `s3:` here)."""
    text = str(out_dir)
    if not text.strip() or "://" in text:
        what = "is empty" if not text.strip() else "is a URL"
        refuse(f"{flag} {text!r} {what}; a run writes a local directory: name one")
    out_dir = Path(text)
    refuse_not_a_directory(out_dir, flag)
    if not out_dir.is_dir():
        return
    found = manifest_kind(out_dir)
    if found is not None and found != run_kind.KIND:
        refuse(
            f"{flag} {str(out_dir)!r} holds a {found!r} artifact ({MANIFEST}), not a run; "
            "choose a new or empty directory",
            ArtifactError,
        )
    if not is_own_run(out_dir):
        refuse_foreign(
            out_dir,
            flag,
            f"run of ours ({', '.join(OWN_NAMES)})",
            lambda name: temporary_file(name) or name == f".{SMOKE_DIR}.lock",
        )


def is_own_run(folder: Path) -> bool:
    """`folder` holds one of a run's own files (`OWN_NAMES`, `_is_own_entry`) or a run manifest."""
    return manifest_kind(folder) == run_kind.KIND or any(
        _is_own_entry(folder / name.rstrip("/")) for name in OWN_NAMES
    )


def _is_own_entry(path: Path) -> bool:
    """One of `OWN_NAMES` as a run writes it: a launch.json with the launcher's keys; a
    metrics.jsonl that is empty (a run killed after opening it) or starts with one of our records
    (each has a `step` or an `event`); launch/ holding only
    config.json and error.txt; checkpoints/ holding only iter_NNNNNNN checkpoints (and their
    .tmp); smoke/ that is itself one of our runs. Another tool's folder of one of these names marks nothing."""
    name = path.name
    if name in ("launch.json", "metrics.jsonl"):
        record = _json_object(path, whole=name == "launch.json") if path.is_file() else None
        if name == "launch.json":
            return record is not None and {"torchrun", "config_sha256"} <= set(record)
        return record == {} or (record is not None and bool({"step", "event"} & set(record)))
    if not path.is_dir():
        return False
    if name == SMOKE_DIR:
        return is_own_run(path)
    entries = [p.name for p in path.iterdir() if not temporary_file(p.name)]
    if not entries:  # an empty folder of one of these names marks nothing
        return False
    if name == "launch":
        return set(entries) <= {"config.json", "error.txt"}
    return name == "checkpoints" and all(_CHECKPOINT.fullmatch(entry) for entry in entries)


def _json_object(path: Path, whole: bool) -> dict[str, Any] | None:
    """The JSON object in `path` (`whole`) or on its first line ({} for an empty file); None
    when that is not a JSON object. Reads at most 1 MiB: ours are smaller."""
    with path.open("rb") as handle:
        text = handle.read(1 << 20) if whole else handle.readline(1 << 20)
    if not text.strip():
        return {}
    try:
        record = json.loads(text)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def load_launch_info(run_dir: Path) -> dict[str, Any]:
    """RUN/launch.json as the launcher wrote it (gate decision, command); {} without a launcher."""
    path = run_dir / "launch.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def write_outputs(trainer: Trainer, extra: dict[str, Any]) -> None:
    """summary.json, then the run manifest (written last, it lists summary.json: `pretrain
    verify RUN` refused every finished run for an unlisted one)."""
    import torch

    write_json(trainer.run_dir / "summary.json", summary(trainer, extra))
    launch_info = load_launch_info(trainer.run_dir)
    identity = trainer.data.identity
    data = trainer.config.data
    inputs = [data.mixture_dir] if data.source == "mixture" and data.mixture_dir else []
    if trainer.init_from is not None:  # the checkpoint its weights started from (lineage)
        if (Path(trainer.init_from) / MANIFEST).is_file():
            inputs.append(trainer.init_from)
        else:  # its run pruned it meanwhile: the run's checkpoints still name it (state.json)
            print(
                f"[train] warning: checkpoint.init_from {trainer.init_from} is gone; not in "
                "the run manifest's inputs",
                flush=True,
            )
    fields = run_kind.RunFields(
        tokenizer=identity.get("tokenizer") or {"sha256": identity.get("tokenizer_sha256")},
        mixture=run_kind.MixtureRef(
            build_sha256=identity.get("build_sha256"),
            recipe_sha256=identity.get("recipe_sha256"),
        ),
        gate=launch_info.get("gate"),
        mfu=trainer.throughput.manifest(),
        world_size=torch.distributed.get_world_size(),
        guard={"rollbacks": trainer.guard.rollbacks, "events": trainer.guard.events},
        **extra,
    )
    write_artifact(  # the command: the launcher's (trainer.worker.run records it)
        trainer.run_dir,
        fields,
        config=config_dict(trainer.config),
        inputs=inputs,
        counts={
            "steps": trainer.state.step,
            "tokens_seen": trainer.state.tokens_seen,
            "parameters": trainer.num_params,
        },
    )


def summary(trainer: Trainer, extra: dict[str, Any]) -> dict[str, Any]:
    from trainer.metrics import read_metrics

    last = read_metrics(trainer.run_dir / "metrics.jsonl")
    losses = [r for r in last if "loss" in r]
    return {
        "steps": trainer.state.step,
        "total_steps": trainer.total_steps,
        "tokens_seen": trainer.state.tokens_seen,
        "final_loss": losses[-1]["loss"] if losses else None,
        "rollbacks": trainer.guard.rollbacks,
        "skipped_batches": list(trainer.state.skipped_batches),
        "ended": trainer.ended,
        "parameters": trainer.num_params,
        **extra,
    }
