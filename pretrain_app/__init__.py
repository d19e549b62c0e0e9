"""The `pretrain` program, the top layer: the root CLI (cli.py).

It composes the packages below it (pretrain < data_pipeline < tokenizer < mixtures < trainer <
evals) and holds no capability of its own; nothing in them imports it (pyproject's layers
contract, tests/test_layers.py).
"""
