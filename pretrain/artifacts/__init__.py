"""Typed artifacts: the seams between the packages (pretrain/CONTRACTS.md lists every kind).

One generic type, `base.Artifact[Fields]`, and one writer, `base.write_artifact`, for every kind;
a kind module holds its typed `Fields` model and, where readers need more than the fields, its
`Artifact` subclass. Import the kind module (`from pretrain.artifacts import shards`): this
package imports none of them itself, so reading one kind does not import pyarrow or the others.
"""
