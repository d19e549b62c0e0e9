"""Compare an HF export with the project's own model: `python -m tests.trainer.export_check
EXPORT_DIR CHECKPOINT_DIR TOKENIZER_DIR` prints one JSON line (run in a clean subprocess).

Documents are real text (the embedded demo sample: kernel docs and man pages in English and
Chinese, Python source), encoded by our locked tokenizer; transformers reads only EXPORT_DIR.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import torch

SAMPLE = Path(__file__).resolve().parents[2] / "pretrain" / "sample"


def real_documents(count: int = 6) -> list[str]:
    import pyarrow.parquet as pq

    with gzip.open(SAMPLE / "prose.jsonl.gz", "rt", encoding="utf-8") as handle:
        prose = [json.loads(line)["text"] for line in handle]
    code = pq.read_table(SAMPLE / "code.parquet", columns=["text"]).column("text").to_pylist()
    long_prose = [t for t in prose if len(t) > 400]
    chinese = [t for t in long_prose if any("\u4e00" <= c <= "\u9fff" for c in t[:200])]
    english = [t for t in long_prose if t not in chinese]
    return english[: count // 2] + chinese[:1] + code[: count - count // 2 - 1]


def our_greedy(loaded, prompt: list[int], new: int) -> list[int]:
    from trainer.cpu_compat import device_context

    tokens = list(prompt)
    with torch.no_grad(), device_context():
        for _ in range(new):
            inputs = torch.tensor([tokens])
            positions = torch.arange(len(tokens)).unsqueeze(0)
            logits = loaded.model(inputs, positions, None)
            tokens.append(int(logits[0, -1].argmax()))
    return tokens[len(prompt) :]


def main(export_dir: str, checkpoint: str, tokenizer_dir: str) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tokenizer.lock import load_locked
    from trainer.inference import load_model

    loaded = load_model(checkpoint)
    ours_tok = load_locked(tokenizer_dir).tokenizer
    hf_tok = AutoTokenizer.from_pretrained(export_dir, local_files_only=True)
    hf = AutoModelForCausalLM.from_pretrained(
        export_dir, local_files_only=True, dtype=torch.float32
    )
    hf.eval()
    length = loaded.seq_length
    docs = real_documents()
    ids = [ours_tok.encode(d, add_special_tokens=False).ids[:length] for d in docs]
    same_ids = all(hf_tok(d)["input_ids"][:length] == i for d, i in zip(docs, ids, strict=True))
    tokens = torch.tensor([i for i in ids if len(i) == length])
    ours = loaded.logprobs(tokens)
    with torch.no_grad():
        logits = hf(tokens).logits[:, :-1].float()
    theirs = torch.log_softmax(logits, -1).gather(-1, tokens[:, 1:, None]).squeeze(-1)
    prompt = ids[0][:12]
    with torch.no_grad():
        generated = hf.generate(
            torch.tensor([prompt]), max_new_tokens=8, do_sample=False, pad_token_id=1
        )[0, len(prompt) :].tolist()
    print(
        json.dumps(
            {
                "documents": int(tokens.shape[0]),
                "max_abs_diff": float((ours - theirs).abs().max()),
                "mean_logprob": float(ours.mean()),
                "same_ids": same_ids,
                "hf_generated": generated,
                "our_generated": our_greedy(loaded, prompt, 8),
                "model_max_length": hf_tok.model_max_length,
                "hf_class": type(hf).__name__,
                "eos": hf.config.eos_token_id,
                "tied": bool(hf.config.tie_word_embeddings),
            }
        )
    )


if __name__ == "__main__":
    main(*sys.argv[1:4])
