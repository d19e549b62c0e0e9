"""Typed artifacts, one module per kind (pretrain/CONTRACTS.md): import the kind module you read;
this package imports none of them, so reading one kind does not import pyarrow or the others."""
