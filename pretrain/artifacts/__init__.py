"""Typed artifacts: the seams between the packages.

One generic type, `base.Artifact[Fields]`, and one writer, `base.write_artifact(dir, fields, ...)`,
for every kind. A kind module holds its typed `Fields` model (what that kind records) and, where
readers need more than the fields, its `Artifact[ItsFields]` subclass with the reader methods;
`open(dir)` verifies the artifact (pretrain.manifest.require: kind, identity, every byte, the
manifest's seal) and returns the typed reader. A package reads another package's output only
through these readers:

- `shards`: tagged Parquet shards (`pretrain data run`)
- `model`: fastText / KenLM model artifacts (`pretrain data train-classifier` / `train-lm`)
- `tokenizer`: a locked tokenizer (`pretrain tokenizer train`)
- `encoded`: Megatron .bin/.idx with tag sidecars (`pretrain tokenizer encode`)
- `evalset`: decontaminated eval sets (`pretrain eval build`)
- `mixture`: a sample index over encoded data (`pretrain mixture build`)
- `mixture_report`: its target vs realised shares (`pretrain mixture report`)
- `run`: a training run (`pretrain launch`)
- `ablation`: the decision report (`pretrain ablate`)
- `export`: a Hugging Face export (`pretrain export`)
- `run` also: `checkpoint` (`RUN/checkpoints/iter_*`, written by the trainer)
- `tokenizer_eval`: a tokenizer's compression report (`pretrain tokenizer eval`)
- `eval_results`: checkpoints scored on an evalset (`pretrain eval run`)
- `dedup_index`: a MinHash LSH index (the dedup stage)
- `raw`: gathered input files (the demo's copy of the sample)

Import the kind module (`from pretrain.artifacts import shards`); this package imports none of
them itself, so reading one kind does not import pyarrow or the others.
"""
