"""Run lm-evaluation-harness on a checkpoint (our LM wrapper) and on its HF export (lm-eval's own
HFLM), and our JSONL scorer beside lm-eval on the same file: `python -m
tests.trainer.lm_eval_check EXPORT_DIR CHECKPOINT_DIR TOKENIZER_DIR` prints one JSON line."""

from __future__ import annotations

import json
import sys
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data" / "evals"
FIXTURES = {
    "boolq": DATA / "lm_eval" / "boolq.jsonl",
    "piqa": DATA / "lm_eval" / "piqa.jsonl",
    "hellaswag": DATA / "lm_eval" / "hellaswag.jsonl",
    "arc_easy": DATA / "lm_eval" / "arc_easy.parquet",
}


def main(export_dir: str, checkpoint: str, tokenizer_dir: str) -> None:
    from evals.lm_eval_model import ProjectLM, hf_lm, load_export
    from evals.lm_eval_tasks import load_lm_eval_tasks, run_lm_eval
    from evals.tasks import load_task, score_task
    from tokenizer.lock import load_locked
    from trainer.inference import load_model

    tokenizer = load_locked(tokenizer_dir)
    model = load_model(checkpoint)
    ours = ProjectLM(model, tokenizer, model.seq_length, batch_size=4)
    standard = load_lm_eval_tasks([f"{name}={path}" for name, path in FIXTURES.items()])
    hf, hf_tokenizer = load_export(export_dir)
    ours_mc = DATA / "tiny_mc.jsonl"
    jsonl = load_lm_eval_tasks([f"jsonl_mc={ours_mc}"])
    print(
        json.dumps(
            {
                "checkpoint": run_lm_eval(ours, standard),
                "export": run_lm_eval(hf_lm(hf, hf_tokenizer, batch_size=4), standard),
                "documents": {name: len(docs) for name, docs in standard.examples.items()},
                "our_scorer": score_task(model, load_task(ours_mc), tokenizer, model.seq_length),
                "lm_eval_on_our_file": run_lm_eval(ours, jsonl),
            }
        )
    )


if __name__ == "__main__":
    main(*sys.argv[1:4])
