"""Where every file of a shards artifact lives: `data/*.parquet` (the kept documents, the only
`.parquet` files), `_rejects/*.pq`, `ledger.json`, `README.md` (a dataset card), `.parts/` (work
area; `.parts/global/`, a resume cache no manifest lists). pretrain/CONTRACTS.md (`shards`)."""

from __future__ import annotations

from collections.abc import Iterable

LAYOUT_VERSION = 2
DATA_DIR = "data"
OTHER_PARQUET = ".pq"
"""Suffix of every Parquet file in DIR that is not kept documents (rejects, the global map side)."""
REJECTS_DIR = "_rejects"
REJECTS_SUFFIX = OTHER_PARQUET
LEDGER = "ledger.json"
CARD = "README.md"
DATA_GLOB = f"{DATA_DIR}/*.parquet"
PARTS_DIR = ".parts"
GLOBAL_MAP_DIR = f"{PARTS_DIR}/global"
"""About a second copy of the tagged corpus while global stages run: a cache no manifest lists
(pretrain.manifest.UNLISTED_DIRS), removable whenever no run is writing."""
OUTPUT_ENTRIES = (DATA_DIR, REJECTS_DIR, LEDGER, CARD)
"""What a run writes at the top of its output, hidden work area aside."""


def data_file(shard: str) -> str:
    """The kept documents of one shard, relative to the artifact directory."""
    return f"{DATA_DIR}/{shard}.parquet"


def rejects_file(shard: str) -> str:
    """The hard rejects of one shard, relative to the artifact directory."""
    return f"{REJECTS_DIR}/{shard}{REJECTS_SUFFIX}"


def shard_name(relative: str) -> str:
    """`data/web-00003.parquet` (or a rejects file) -> `web-00003`."""
    name = relative.rsplit("/", 1)[-1]
    return name.removesuffix(".parquet").removesuffix(REJECTS_SUFFIX)


def kept_files(listed: Iterable[str]) -> list[str]:
    """The kept-document files among a manifest's listed files, sorted."""
    return sorted(n for n in listed if n.startswith(f"{DATA_DIR}/") and n.endswith(".parquet"))


def dataset_card() -> str:
    """README.md of the artifact: a Hugging Face dataset card with two configs over the data files,
    split by the per-document `split` column (datasets' Parquet `filters`): `load_dataset(DIR)`
    gives the training documents as `train` (no `split == eval` row), `load_dataset(DIR, "eval")`
    the held-out ones as `eval`. One call cannot give both: a config's filter holds for all its
    splits, and a shard file holds both kinds."""
    return (
        "---\n"
        "configs:\n"
        "- config_name: default\n"
        "  data_files:\n"
        "  - split: train\n"
        f"    path: {DATA_GLOB}\n"
        "  filters:\n"
        "  - [split, '!=', eval]\n"
        "- config_name: eval\n"
        "  data_files:\n"
        "  - split: eval\n"
        f"    path: {DATA_GLOB}\n"
        "  filters:\n"
        "  - [split, '==', eval]\n"
        "---\n"
        "# Tagged documents (`pretrain data run`, shards layout 2)\n\n"
        f"- `{DATA_GLOB}`: the kept documents, training and held-out (`split` column).\n"
        "  `load_dataset(DIR)` gives the training ones (`train`), `load_dataset(DIR, 'eval')`\n"
        "  the held-out ones (`eval`); a glob over the files gives both.\n"
        f"- `{REJECTS_DIR}/*{REJECTS_SUFFIX}`: hard rejects (Parquet), `{LEDGER}`: the accounting,\n"
        "  `manifest.json`: lineage and the sha256 of every file.\n"
    )
