"""Typed artifacts: the seams between the packages.

One module per artifact kind, each with a pydantic manifest model, `open(dir)` that verifies the
artifact (pretrain.manifest.require: kind, identity, every byte) and returns a typed reader. The
shards, evalset and ablation modules also have `write(...)`, which checks the kind's fields and
writes the manifest last, recording the command `pretrain.cli.main` captured (pretrain.command);
the other kinds' builders still call pretrain.manifest.write_manifest with that command. A package reads another package's output only
through these readers:

- `shards`: tagged Parquet shards (`pretrain data run`)
- `model`: fastText / KenLM model artifacts (`pretrain data train-classifier` / `train-lm`)
- `tokenizer`: a locked tokenizer (`pretrain tokenizer train`)
- `encoded`: Megatron .bin/.idx with tag sidecars (`pretrain tokenizer encode`)
- `evalset`: decontaminated eval sets (`pretrain eval build`)
- `mixture`: a sample index over encoded data (`pretrain mixture build`)
- `run`: a training run (`pretrain launch`)
- `ablation`: the decision report (`pretrain ablate`)
- `export`: a Hugging Face export (`pretrain export`)

Import the kind module (`from pretrain.artifacts import shards`); this package imports none of
them itself, so reading one kind does not import pyarrow or the others.
"""
