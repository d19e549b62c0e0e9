"""`trainer.inference.load_model` (the evals seam): log-probs on CPU from a training checkpoint."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from tests.trainer.trainer_testlib import losses, run_ranks, tiny_config

SCRIPT = """
import json, sys
import numpy as np, torch
from trainer.data import synthetic_stream
from trainer.inference import load_model
model = load_model(sys.argv[1])
data, seed = model.config.data, model.config.run.seed
stream = synthetic_stream(data.synthetic_documents, data.synthetic_vocab, seed)
tokens = torch.from_numpy(stream[: 4 * 33].reshape(4, 33))
logprobs = model.logprobs(tokens)
print(json.dumps({"shape": list(logprobs.shape), "nll": float(-logprobs.mean()),
                  "max": float(logprobs.max()), "step": model.step,
                  "vocab": model.vocab_size, "tokenizer": model.tokenizer_sha256}))
"""


def _logprobs(checkpoint) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(checkpoint)],
        capture_output=True,
        text=True,
        timeout=200,
        check=False,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(240)
def test_load_model_gives_next_token_logprobs_of_the_trained_model(reference_run):
    run_dir, _ = reference_run
    result = _logprobs(run_dir / "checkpoints" / "iter_0000006")
    assert result["shape"] == [4, 32]
    assert result["max"] <= 0 and result["step"] == 6 and result["vocab"] == 128
    assert result["tokenizer"] is None  # synthetic data names no tokenizer
    assert result["nll"] < math.log(128)  # better than uniform: it learned the progressions


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_async_tp2_checkpoints_with_rollback_reload_resharded(tmp_path, reference_run):
    _, expected = reference_run
    run_dir = tmp_path / "async"
    config = tiny_config(
        run_dir,
        checkpoint={"async_save": True},
        parallel={"tensor": 2, "gpus_per_node": 2},
    )
    run_ranks(config, 2, callbacks={"NanLossAtStep": [4]})
    per_step = losses(run_dir)
    assert [per_step[s] for s in (1, 2, 3)] == pytest.approx([expected[s] for s in (1, 2, 3)])
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == [
        "iter_0000002",
        "iter_0000004",
        "iter_0000006",
    ]
    result = _logprobs(run_dir / "checkpoints" / "iter_0000006")  # TP=2 -> one process
    assert result["shape"] == [4, 32] and result["nll"] < math.log(128)
