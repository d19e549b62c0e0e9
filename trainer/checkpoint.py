"""Full-state checkpoints: megatron dist_checkpointing for model + optimizer, plus our state.

Layout: `RUN/checkpoints/iter_<step:07d>/` holding the dist_checkpointing files, `rng/rank_*.pt`
(every rank's RNG states), `state.json` (step, data position, tokens seen, sequences per component,
schedule, guard history, config and lock hashes) and a `manifest.json` hashing every file. A save
goes to `iter_<step>.tmp` and is renamed only when complete, so a crash never leaves a directory that
looks finished; resume takes the newest checkpoint whose manifest verifies and skips a corrupt one
with a warning.
"""

from __future__ import annotations

import functools
import json
import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pretrain.artifacts import run as run_kind
from pretrain.artifacts.base import write_artifact
from pretrain.errors import ArtifactError
from pretrain.manifest import load_manifest, verify
from pretrain.safeload import check_checkpoint, guard_torch_loading, torch_load
from pretrain.storage import write_json
from trainer.cpu_compat import device_context

_ITER = re.compile(r"^iter_(\d{7})$")


def checkpoint_dir(run_dir: Path, step: int) -> Path:
    return run_dir / "checkpoints" / f"iter_{step:07d}"


def list_checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """Finished checkpoints (renamed from .tmp), oldest first."""
    root = run_dir / "checkpoints"
    found = []
    for path in root.iterdir() if root.is_dir() else ():
        match = _ITER.match(path.name)
        if match and path.is_dir():
            found.append((int(match.group(1)), path))
    return sorted(found)


def newest_valid(
    run_dir: Path, found: list[tuple[int, Path]] | None = None
) -> tuple[Path | None, list[dict[str, Any]]]:
    """The newest checkpoint whose files match its manifest and whose loadable files open the
    safe way (pretrain.safeload), and the corrupt ones skipped (the caller logs one line each).
    `found`: (step, directory) pairs to choose from instead of the run's, oldest first."""
    skipped = []
    for step, path in reversed(list_checkpoints(run_dir) if found is None else found):
        try:
            manifest = verify(path, deep=True)
            check_checkpoint(path, manifest)
            read_state(path)
            return path, skipped
        except (ArtifactError, OSError, ValueError) as exc:
            skipped.append({"checkpoint": path.name, "step": step, "reason": str(exc)})
    return None, skipped


def resume_point(run_dir: Path) -> Path | None:
    """The checkpoint a resume loads: the newest that verifies (`newest_valid`), or None for a run
    without checkpoints. Refused in one line when RUN/checkpoints/ holds checkpoints and none
    verifies: the run would train again from step 0 beside its old metrics and its first saves
    would replace the damaged checkpoints (what a user would restore). A line says what
    checkpoints/ holds that no resume reads (Megatron-LM's latest_checkpointed_iteration.txt, a
    foreign file) and which checkpoint is taken instead."""
    path, skipped = newest_valid(run_dir)
    root = run_dir / "checkpoints"
    if path is None and skipped:
        raise none_verifies(run_dir, skipped)
    entries = root.iterdir() if root.is_dir() else ()
    unread = sorted(p.name for p in entries if not _ITER.match(p.name.removesuffix(".tmp")))
    if unread:
        taken = f"the newest that verifies, {path.name}" if path else "none: there is none"
        print(
            f"[launch] note: {root} holds {', '.join(unread)}, which a resume does not read; "
            f"it resumes from {taken}"
        )
    return path


def init_point(source: Path, what: str = "checkpoint.init_from") -> Path:
    """The checkpoint `what` (`checkpoint.init_from`, export's RUN_DIR) names: a checkpoint
    directory that verifies, or a run directory's newest valid checkpoint; one line when there
    is none."""
    if (source / "state.json").is_file():
        path, skipped = newest_valid(source, [(0, source)])
    else:
        path, skipped = newest_valid(source)
    if path is not None and load_manifest(path)["kind"] != run_kind.CHECKPOINT_KIND:
        path, skipped = None, [{"reason": f"{path} is not a checkpoint"}]
    if path is None:
        reason = skipped[0]["reason"].split("; ")[0] if skipped else "no checkpoint found"
        raise ArtifactError(
            f"{what} {source}: {reason}; name a RUN/checkpoints/iter_NNNNNNN "
            "directory (or a run directory) whose checkpoint verifies"
        )
    return path


def none_verifies(run_dir: Path, skipped: list[dict[str, Any]]) -> ArtifactError:
    """The one-line refusal of a resume whose every checkpoint is corrupt (`newest_valid`)."""
    root = run_dir / "checkpoints"
    reason = skipped[0]["reason"].split("; ")[0]  # the finding, without verify's own remedy
    return ArtifactError(
        f"resume refused: none of the {len(skipped)} checkpoint(s) in {root} verifies "
        f"(newest: {reason}); restore them, or move {root} aside to train this run "
        "again from step 0"
    )


def read_state(path: Path) -> dict[str, Any]:
    """A checkpoint's state.json (step, data position, identity, config)."""
    state: dict[str, Any] = json.loads((path / "state.json").read_text())
    return state


def _sharded_state(model: Any, optimizer: Any | None, is_loading: bool, prefix: str = "") -> dict:
    state = {"model": model.sharded_state_dict(prefix=prefix)}
    if optimizer is not None:
        state["optimizer"] = optimizer.sharded_state_dict(
            dict(state["model"]),
            is_loading=is_loading,
            metadata={"distrib_optim_sharding_type": "dp_reshardable"},
        )
    return state


def rng_state() -> dict[str, Any]:
    """This rank's RNG states: python, numpy, torch, CUDA and megatron's tracker."""
    from megatron.core.tensor_parallel import get_cuda_rng_tracker

    state = {
        "python": random.getstate(),
        "numpy": _numpy_state_as_tensors(np.random.get_state()),
        "torch": torch.get_rng_state(),
        "tracker": get_cuda_rng_tracker().get_states(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def _numpy_state_as_tensors(state: tuple) -> tuple:
    """numpy's state with its key array as a tensor, so `torch.load(weights_only=True)` reads it:
    a checkpoint from elsewhere is never unpickled."""
    name, keys, pos, has_gauss, cached = state
    return (name, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(cached))


def set_rng_state(state: dict[str, Any]) -> None:
    from megatron.core.tensor_parallel import get_cuda_rng_tracker

    random.setstate(state["python"])
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    get_cuda_rng_tracker().set_states(state["tracker"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


class AsyncSaver:
    """Megatron's async checkpoint queue: shards are written by a forked process while training
    continues; our finish (state.json, manifest, rename, pruning) runs when the write is done."""

    def __init__(self) -> None:
        from megatron.core.dist_checkpointing.strategies.async_utils import AsyncCallsQueue

        self.queue = AsyncCallsQueue()

    def poll(self, blocking: bool = False) -> None:
        """Finish completed saves (all ranks must call it at the same points)."""
        with device_context():
            self.queue.maybe_finalize_async_calls(blocking=blocking)

    def close(self) -> None:
        self.poll(blocking=True)
        self.queue.close()


def save(
    run_dir: Path,
    step: int,
    model: Any,
    optimizer: Any,
    state: dict[str, Any],
    keep: tuple[int, int | None],
    saver: AsyncSaver | None = None,
) -> None:
    """Save on every rank (collective) into iter_<step>.tmp; when the shards are written, rank 0
    writes state.json and the manifest and renames it to iter_<step> (now, or later with `saver`)."""
    from megatron.core import dist_checkpointing

    rank = torch.distributed.get_rank()
    final = checkpoint_dir(run_dir, step)
    tmp = final.with_name(final.name + ".tmp")
    if rank == 0:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    torch.distributed.barrier()
    with device_context():
        request = dist_checkpointing.save(
            _sharded_state(model, optimizer, False), str(tmp), async_sharded_save=saver is not None
        )
    (tmp / "rng").mkdir(exist_ok=True)
    torch.save(rng_state(), tmp / "rng" / f"rank_{rank:05d}.pt")
    finish = functools.partial(_finish, run_dir, step, state, keep)
    if saver is None:
        finish()
    else:
        request.add_finalize_fn(finish)
        with device_context():
            saver.queue.schedule_async_request(request)


def _finish(run_dir: Path, step: int, state: dict[str, Any], keep: tuple[int, int | None]) -> None:
    final = checkpoint_dir(run_dir, step)
    tmp = final.with_name(final.name + ".tmp")
    torch.distributed.barrier()
    if torch.distributed.get_rank() == 0:
        write_json(tmp / "state.json", state)
        write_artifact(
            tmp, run_kind.CheckpointFields(), config={"step": step}, counts={"step": step}
        )
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        prune(run_dir, *keep)
    torch.distributed.barrier()


def prune(run_dir: Path, keep_last: int, keep_every: int | None) -> None:
    """Delete checkpoints that are neither among the last `keep_last` nor a multiple of K."""
    found = list_checkpoints(run_dir)
    keep = {step for step, _ in found[-keep_last:]}
    for step, path in found:
        if step not in keep and not (keep_every and step % keep_every == 0):
            shutil.rmtree(path, ignore_errors=True)


def load(path: Path, model: Any, optimizer: Any | None, prefix: str = "") -> dict[str, Any]:
    """Load model (+ optimizer) shards and this rank's RNG; returns state.json. `prefix`:
    "module." for a model not wrapped in megatron DDP (trainer.inference), as the keys were saved."""
    from megatron.core import dist_checkpointing

    guard_torch_loading()
    adams = _distributed_torch_adams(optimizer)
    for adam in adams:
        _fill_empty_state(adam)
    with device_context():
        loaded = dist_checkpointing.load(_sharded_state(model, optimizer, True, prefix), str(path))
    # megatron DDP's shard keys start with "module."; its load_state_dict forwards unprefixed
    model.load_state_dict({k.removeprefix("module."): v for k, v in loaded["model"].items()})
    if optimizer is not None:
        # no_grad: with fp32 params the distributed optimizer's main params are views of the
        # model's, and its parameter-state load copies into them in place
        with device_context(), torch.no_grad():
            optimizer.load_state_dict(loaded["optimizer"])
    for adam in adams:
        _restore_steps(adam)
    rank = torch.distributed.get_rank()
    rng_file = path / "rng" / f"rank_{rank:05d}.pt"
    if optimizer is not None and rng_file.is_file():
        set_rng_state(torch_load(rng_file))
    return read_state(path)


# megatron-core 0.16.1's distributed optimizer over torch's Adam (no TransformerEngine or Apex:
# this CPU build) keeps Adam's step per parameter, and three places assume otherwise. Its
# state_dict() asserts one step among the params' states, so a fresh optimizer (no state yet)
# cannot build the load template; its load_state_dict() gives every param ONE shared step tensor,
# which torch's per-param `step += 1` then advances once per param; and its parameter-state load
# copies the template's step over the restored one. These two helpers bracket the load.
def _distributed_torch_adams(optimizer: Any | None) -> list[torch.optim.Optimizer]:
    """The torch Adam(W) inside each of megatron's distributed optimizers (none with TE/Apex,
    whose FusedAdam keeps the step in its param groups, or without the distributed optimizer)."""
    from megatron.core.optimizer import distrib_optimizer

    if optimizer is None or distrib_optimizer.HAVE_APEX_OR_TE:
        return []
    chained = getattr(optimizer, "chained_optimizers", [optimizer])
    return [o.optimizer for o in chained if isinstance(o, distrib_optimizer.DistributedOptimizer)]


def _fill_empty_state(adam: torch.optim.Optimizer) -> None:
    """Adam's state for every param, as its first step makes it (the load overwrites it)."""
    for group in adam.param_groups:
        for param in group["params"]:
            if not adam.state[param]:
                adam.state[param] = {
                    "step": torch.tensor(0.0),
                    "exp_avg": torch.zeros_like(param),
                    "exp_avg_sq": torch.zeros_like(param),
                }


def _restore_steps(adam: torch.optim.Optimizer) -> None:
    """Each param its own step tensor, at the checkpoint's step: megatron saves the common step
    as its param groups' `step`, which the load puts back into `adam.param_groups`."""
    for group in adam.param_groups:
        for param in group["params"]:
            adam.state[param]["step"] = torch.tensor(float(group["step"]))
