"""`pretrain tokenizer eval` and a `pretrain tokenizer train` replacing the same tokenizer at once
(the real CLI, clean environment): the second is refused in one line naming the first, and the
first finishes as if alone. The race is exact: the eval is stopped (SIGSTOP,
tests/pretrain_app/killpoints.py) at its first folder change once it holds its locks, the
retrain runs, then the eval goes on.

Before, the eval took only the lock of its eval folder (TOKENIZER/eval) and the train only the
tokenizer's, so a retrain replaced the tokenizer (and moved its eval/ out) under an eval that
had loaded the old one; the eval then failed saying the tokenizer was damaged ("file
tokenizer.json has 27177 bytes, the manifest says 38123 ... restore the file")."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
import yaml

from pretrain.locking import lock_path
from pretrain.manifest import load_manifest
from tests.pretrain_app.killpoints import start_paused
from tests.pretrain_app.killtools import contents, run

pytestmark = pytest.mark.timeout(600)


def _train_argv(tmp: Path, shards: Path, out: Path, vocab_size: int) -> list[str]:
    path = tmp / f"tok-{vocab_size}.yaml"
    data = {"data": str(shards), "out": str(out), "vocab_size": vocab_size}
    path.write_text(yaml.safe_dump({**data, "special_tokens": ["<|user|>"]}))
    return ["tokenizer", "train", str(path)]


def test_a_retrain_while_an_eval_runs_is_refused(shards_dir: Path, tmp_path: Path) -> None:
    tokenizer = tmp_path / "tok"
    done = run(_train_argv(tmp_path, shards_dir, tokenizer, 768), tmp_path, "train")
    assert done.returncode == 0, done.stderr[-3000:]
    before = contents(tokenizer)
    argv = ["tokenizer", "eval", str(tokenizer), "--data", str(shards_dir), "--no-baseline"]
    paused = start_paused(argv, tmp_path, lock_path(tokenizer / "eval"), 0)
    rival = run(_train_argv(tmp_path, shards_dir, tokenizer, 600), tmp_path, "retrain")
    lines = rival.stderr.strip().splitlines()
    assert rival.returncode == 2, (rival.returncode, rival.stderr[-3000:])  # old code: 0
    assert len(lines) == 1 and f"pid {paused.pid} " in lines[0] and "tokenizer eval" in lines[0]
    paused.send_signal(signal.SIGCONT)
    _, err = paused.communicate(timeout=300)
    assert paused.returncode == 0, err[-3000:]
    report = json.loads((tokenizer / "eval" / "report.json").read_text())
    assert report["tokenizer"] == load_manifest(tokenizer)["tokenizer"]  # the one it is in
    kept = {k: v for k, v in contents(tokenizer).items() if not k.startswith(("eval/", "."))}
    assert kept == {k: v for k, v in before.items() if not k.startswith(".")}
