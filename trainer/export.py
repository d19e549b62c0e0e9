"""`pretrain export RUN_DIR --out DIR`: a checkpoint as an `hf_export` artifact (LlamaForCausalLM
config and safetensors, the tokenizer files, lineage) that transformers loads offline; the
weights mapping is trainer/hf_mapping.py."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from pretrain.artifacts import export as export_kind
from pretrain.artifacts.base import write_artifact
from pretrain.errors import ArtifactError
from pretrain.output_check import require_own_output
from pretrain.publish import publishing
from pretrain.storage import write_atomic
from trainer.checkpoint import checkpoint_dir, init_point, list_checkpoints, read_state


def pick_checkpoint(run_or_checkpoint: Path, step: int | None) -> Path:
    """RUN_DIR's checkpoint at `step` (default: the newest that verifies), or a checkpoint dir."""
    if step is None or (run_or_checkpoint / "state.json").is_file():
        return init_point(run_or_checkpoint, "RUN_DIR")
    path = checkpoint_dir(run_or_checkpoint, step)
    if not path.is_dir():
        steps = [s for s, _ in list_checkpoints(run_or_checkpoint)]
        raise ArtifactError(
            f"{run_or_checkpoint} has no checkpoint at step {step} (it has {steps or 'none'}); "
            "pick one of those with --step"
        )
    return path


def resolve_tokenizer(config: Any, state: dict[str, Any], given: str | None) -> Any:
    """The run's locked tokenizer: --tokenizer, else data.tokenizer_dir / the mixture lineage;
    refused when it is not the one the checkpoint records, or larger than the embedding.
    Needs only state.json, so a refusal comes before the checkpoint load."""
    from tokenizer.lock import check_match, load_locked
    from trainer.data import tokenizer_dir

    directory = Path(given) if given else tokenizer_dir(config)
    if directory is None or not directory.is_dir():
        raise ArtifactError(
            "no tokenizer artifact found for this run (synthetic data or no lineage); pass "
            "--tokenizer TOKENIZER_DIR"
        )
    locked = load_locked(directory)
    if state.get("tokenizer_sha256"):
        check_match(state["tokenizer_sha256"], locked, "the checkpoint")
    if locked.vocab_size > int(state["vocab_size"]):
        raise ArtifactError(
            f"tokenizer {locked.id} has {locked.vocab_size} tokens but the model's vocabulary "
            f"has {state['vocab_size']}; pass the tokenizer the run was trained with"
        )
    return locked


def _write_tokenizer(out: Path, locked: Any, seq_length: int) -> None:
    from tokenizer.hf import hf_file_bytes
    from tokenizer.lock import TOKENIZER_FILE

    shutil.copyfile(locked.directory / TOKENIZER_FILE, out / TOKENIZER_FILE)
    for name, data in hf_file_bytes(locked.lock, seq_length).items():
        write_atomic(out / name, data)


def _json(obj: Any) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode()


def export_hf(
    run_dir: str | Path,
    out: str | Path,
    step: int | None = None,
    tokenizer: str | None = None,
    dtype: str = "float32",
) -> dict[str, Any]:
    """Write the HF export of one checkpoint; return its manifest."""
    import torch
    from safetensors.torch import save_file

    from trainer.hf_mapping import check_llama_shape, hf_config, hf_state_dict
    from trainer.inference import _cpu_config, load_model

    run_dir, out = Path(run_dir), Path(out)
    # new, empty or an export (replaced); a file or someone else's folder is one line, before
    # the checkpoint is read
    require_own_output(out, "--out", export_kind.KIND)
    checkpoint = pick_checkpoint(run_dir, step)
    state = read_state(checkpoint)
    config = _cpu_config(state)
    check_llama_shape(config.model)  # refusals come before the checkpoint load
    locked = resolve_tokenizer(config, state, tokenizer)
    loaded = load_model(checkpoint)
    model_config = loaded.config.model
    padded = int(loaded.model.embedding.word_embeddings.weight.shape[0])
    tensors = hf_state_dict(loaded.model.state_dict(), model_config, getattr(torch, dtype))
    # built out of sight, then moved in (manifest last): a kill leaves no export that
    # transformers would load half-written, and the re-run replaces what it left
    with publishing(out) as files:
        save_file(tensors, str(files / "model.safetensors"), metadata={"format": "pt"})
        os.chmod(files / "model.safetensors", 0o644)  # safetensors writes 0600; the rest is 0644
        hf = hf_config(model_config, padded, locked.eod_id, locked.pad_id, dtype)
        write_atomic(files / "config.json", _json(hf))
        generation = {"eos_token_id": locked.eod_id, "pad_token_id": locked.pad_id}
        generation["transformers_version"] = hf["transformers_version"]
        write_atomic(files / "generation_config.json", _json(generation))
        _write_tokenizer(files, locked, model_config.seq_length)
        run_root = checkpoint.parent.parent
        inputs = [
            p for p in (run_root, checkpoint, locked.directory) if (p / "manifest.json").is_file()
        ]
        fields = export_kind.ExportFields(
            tokenizer=locked.info,
            architecture="LlamaForCausalLM",
            source={"checkpoint": str(checkpoint.resolve()), "step": loaded.step},
        )
        manifest = write_artifact(
            files,
            fields,
            config={"format": "hf", "step": loaded.step, "dtype": dtype},
            inputs=inputs,
            counts={"parameters": sum(t.numel() for t in tensors.values()), "step": loaded.step},
        )
    return manifest
