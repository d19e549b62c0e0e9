"""lm-evaluation-harness's own command line with a training checkpoint as a model:

    python -m evals.lm_eval_cli --model pretrain \
        --model_args checkpoint=RUN/checkpoints/iter_NNNNNNN[,tokenizer=TOKENIZER_DIR] \
        --tasks TASK [--include_path DIR] ...

Every argument is lm-eval's (`lm_eval --help`). lm-eval finds a model only in its own registry
(`lm_eval/models/__init__.py`; it reads no entry points for models, and `--include_path` adds
tasks only), so this wrapper registers `pretrain` (`CheckpointLM`) and hands its arguments to
lm-eval's `cli_evaluate`. The tokenizer defaults to the one in the run's lineage (as `pretrain
eval run`). A refusal of ours (a checkpoint that does not verify, a tokenizer that does not match)
is one line and exit 2.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import lm_eval.models  # noqa: F401  (lm-eval's own models: it fills its registry only when empty)
from lm_eval.api.registry import register_model

from evals.commands import find_tokenizer
from evals.lm_eval_model import ProjectLM
from pretrain.errors import PretrainError


@register_model("pretrain")
class CheckpointLM(ProjectLM):  # type: ignore[misc]
    """A `checkpoints/iter_NNNNNNN` directory of `pretrain launch` as an lm-eval model."""

    def __init__(
        self,
        checkpoint: str,
        tokenizer: str | None = None,
        batch_size: int | str = 8,
        **lm_eval_options: Any,  # device, max_batch_size: a CPU model ignores them
    ) -> None:
        from tokenizer.lock import check_match, load_locked
        from trainer.inference import load_model

        path = Path(checkpoint)
        locked = load_locked(tokenizer or find_tokenizer(path.parent.parent))
        model = load_model(path)
        if model.tokenizer_sha256:
            check_match(model.tokenizer_sha256, locked, f"checkpoint {path}")
        size = int(batch_size) if str(batch_size).isdigit() else 8  # "auto": our default
        super().__init__(model, locked, model.seq_length, batch_size=size)


def main(argv: list[str] | None = None) -> int:
    from lm_eval.__main__ import cli_evaluate

    sys.argv = ["lm_eval", *(sys.argv[1:] if argv is None else argv)]
    try:
        cli_evaluate()
    except PretrainError as exc:
        print(f"lm_eval --model pretrain: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
