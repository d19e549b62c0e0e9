"""Helpers for the trainer tests: a tiny synthetic-data config, reading a run's losses, and
`run_ranks`: training on N ranks the way `pretrain launch` starts them (torchrun), or one rank
as `pretrain launch --in-process` runs it (the same `trainer.worker` function, no agent)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def tiny_config(run_dir: Path, **sections: dict[str, Any]) -> dict[str, Any]:
    """A 2-layer GQA/SwiGLU/RMSNorm/RoPE GPT on synthetic data; `sections` update the defaults."""
    config: dict[str, Any] = {
        "run": {"out_dir": str(run_dir), "train_steps": 6, "seed": 7},
        "model": {
            "num_layers": 2,
            "hidden_size": 64,
            "num_attention_heads": 4,
            "num_query_groups": 2,
            "ffn_hidden_size": 128,
            "seq_length": 64,
            "make_vocab_size_divisible_by": 64,
        },
        "optim": {"lr": 3e-3, "warmup_steps": 1},
        "batch": {"micro_batch_size": 2, "global_batch_size": 4},
        "data": {
            "source": "synthetic",
            "synthetic_documents": 64,
            "synthetic_vocab": 128,
            "phases": [{"name": "main", "seq_length": 64}],
        },
        "checkpoint": {"every": 2, "keep_last": 3},
        "metrics": {"trackers": [], "peak_flops": 1e11},
    }
    for name, values in sections.items():
        config[name] = {**config.get(name, {}), **values}
    return config


def losses(run_dir: Path) -> dict[int, float]:
    """Loss per step from metrics.jsonl (the last record of a step wins, as after a resume)."""
    result: dict[int, float] = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if "loss" in record and record.get("event") is None:
            result[record["step"]] = record["loss"]
    return result


def checkpoint_hashes(run_dir: Path) -> dict[str, str]:
    """Each checkpoint's manifest sha256, by name: what a refused resume must leave as it was."""
    from pretrain.manifest import manifest_sha256
    from trainer.checkpoint import list_checkpoints

    return {path.name: manifest_sha256(path) for _, path in list_checkpoints(run_dir)}


def events(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r.get("event")]


class RanksFailed(Exception):
    """torchrun's ranks failed: `exit_codes` (the failed ranks' exit codes, each once), `stderr`
    (the agent's and the ranks' output)."""

    def __init__(self, exit_codes: set[int], stderr: str) -> None:
        super().__init__(f"ranks failed with exit codes {exit_codes}: {stderr[-3000:]}")
        self.exit_codes, self.stderr = exit_codes, stderr


def run_ranks(
    config: dict[str, Any],
    world: int,
    callbacks: dict[str, list[Any]] | None = None,
    timeout_s: float = 300,
    how: str = "",
) -> subprocess.CompletedProcess[str] | None:
    """Train `config` on `world` ranks. `how`: "torchrun" (the default for several ranks) starts
    them as `pretrain launch` does (torchrun on 127.0.0.1 -> trainer.worker's entry,
    trainer/launch.py's command); "here" (the default for one rank) calls the function every
    rank runs, `trainer.worker.run`, in this process, a world of one as `launch --in-process`
    runs it; "process" runs that one rank in a process of its own without torchrun's agent (for
    a test that reads the rank's output or kills it). No launcher holds the run's lock (rank 0
    takes it). `callbacks`: tests/trainer/faults.py classes by name -> their arguments, added to
    every rank's trainer (tests/trainer/rank_entry.py). Raises RanksFailed when a rank fails
    (a PretrainError is the one line `trainer.worker.main` prints); a process is killed after
    `timeout_s` (torchrun's ranks with its agent: PR_SET_PDEATHSIG)."""
    how = how or ("torchrun" if world > 1 else "here")
    if how == "here":
        _run_here(config, callbacks or {})
        return None
    from trainer.launch import torchrun_command

    folder = Path(tempfile.mkdtemp(prefix="ranks-"))
    config_json, callbacks_json = folder / "config.json", folder / "callbacks.json"
    config_json.write_text(json.dumps(config))
    callbacks_json.write_text(json.dumps(callbacks or {}))
    entry = ["tests.trainer.rank_entry", str(config_json), str(callbacks_json)]
    command = [sys.executable, "-m", *entry]
    if how == "torchrun":
        command = torchrun_command(
            SimpleNamespace(rdzv_endpoint=None, smoke=False), world, "1", config_json
        )
        worker = command.index("trainer.worker")
        command[worker : worker + 2] = entry
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "PRETRAIN_"))},
        "PYTHONPATH": str(REPO),
        "GLOO_SOCKET_IFNAME": "lo",
        "OMP_NUM_THREADS": "1",
    }
    proc = subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout_s, check=False
    )
    if proc.returncode != 0:
        codes = {int(code) for code in re.findall(r"exitcode\s*:\s*(-?\d+)", proc.stderr)}
        raise RanksFailed(codes or {proc.returncode}, proc.stdout[-2000:] + proc.stderr)
    return proc


def _run_here(config: dict[str, Any], callbacks: dict[str, list[Any]]) -> None:
    from pretrain.config import parse_config
    from pretrain.errors import PretrainError
    from tests.trainer import faults
    from trainer import worker
    from trainer.config import TrainConfig

    installed = [getattr(faults, name)(*args) for name, args in callbacks.items()]
    try:
        worker.run(parse_config(TrainConfig, config), callbacks=installed)
    except PretrainError as exc:
        raise RanksFailed({2}, f"pretrain launch: error: {exc}") from exc
