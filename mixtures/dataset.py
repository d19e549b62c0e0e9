"""`MixtureDataset`: the map-style dataset the trainer reads. Sample i of a phase's index is
(component k, sequence s = epoch * S + j): window j (L + 1 tokens from j * L) of k's documents
concatenated (EOD kept) in that epoch's seeded order, read with Megatron-Core's IndexedDataset."""

from __future__ import annotations

import os
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np

from pretrain.artifacts import encoded as encoded_artifact
from pretrain.artifacts import mixture as mixture_artifact
from pretrain.errors import ConfigError

EPOCH_CACHE = 16


class MixtureDataset:
    """One phase of a mixture, `[i] -> {"tokens": int64[L + 1], "component": k}`, sample i at
    global step i // global_batch; the mixture and the encoded artifact it recorded verified."""

    def __init__(
        self,
        mixture_dir: str | os.PathLike,
        phase: int = 0,
        encoded_dir: str | os.PathLike | None = None,
    ) -> None:
        self.directory = Path(mixture_dir)
        mixture = mixture_artifact.open(self.directory)
        manifest = mixture.raw
        self.phase = _phase_number(manifest, phase, self.directory)
        info = manifest["phases"][self.phase]
        self.phase_name: str = info["name"]
        self.seq_length: int = int(info["seq_length"])
        self.global_batch: int = int(manifest["global_batch"])
        self.build_sha256: str = manifest["build_sha256"]
        self.recipe_sha256: str = manifest["recipe_sha256"]
        self.tokenizer_sha256: str = manifest["tokenizer"]["sha256"]
        self.component_names: list[str] = [c["name"] for c in manifest["components"]]
        self._seed = int(manifest["seed"])
        self.encoded_dir = Path(encoded_dir) if encoded_dir else mixture.recorded_encoded()
        encoded = encoded_artifact.open(
            self.encoded_dir, sha256=mixture.fields.encoded_manifest_sha256
        )
        self._prefixes = [str(p) for p in encoded.prefix_paths()]
        self._index_path = mixture.path(info["index"])
        self._docs = [
            np.load(mixture.path(f"components/{name}.npy"), allow_pickle=False)
            for name in self.component_names
        ]
        self.sequences_per_epoch = [
            max(int(d["tokens"].sum()) - 1, 0) // self.seq_length for d in self._docs
        ]
        self._open()

    def _open(self) -> None:
        self._index = np.load(self._index_path, mmap_mode="r", allow_pickle=False)
        self._readers: dict[int, Any] = {}
        self._epochs: OrderedDict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = OrderedDict()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for key in ("_index", "_readers", "_epochs"):
            state.pop(key)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._open()

    def __len__(self) -> int:
        return int(self._index.shape[0])

    def __getitem__(self, i: int) -> dict[str, Any]:
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"sample {i} out of range for a phase of {n} sequences")
        row = self._index[i]
        component, sequence = int(row["component"]), int(row["sequence"])
        epoch, window = divmod(sequence, self.sequences_per_epoch[component])
        tokens = self._window(component, epoch, window * self.seq_length, self.seq_length + 1)
        return {"tokens": tokens, "component": component}

    def _epoch_layout(self, component: int, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        key = (component, epoch)
        if key in self._epochs:
            self._epochs.move_to_end(key)
            return self._epochs[key]
        docs = self._docs[component]
        # the documents' seeded order in this epoch (the trailing 1: not the sequences' stream)
        rng = np.random.default_rng([self._seed, self.phase, component, epoch, 1])
        order = docs[rng.permutation(docs.size)]
        starts = np.concatenate([[0], np.cumsum(order["tokens"], dtype=np.int64)])
        self._epochs[key] = (order, starts)
        if len(self._epochs) > EPOCH_CACHE:
            self._epochs.popitem(last=False)
        return order, starts

    def _reader(self, prefix: int) -> Any:
        if prefix not in self._readers:
            from megatron.core.datasets.indexed_dataset import IndexedDataset

            self._readers[prefix] = IndexedDataset(self._prefixes[prefix])
        return self._readers[prefix]

    def _window(self, component: int, epoch: int, start: int, length: int) -> np.ndarray:
        order, starts = self._epoch_layout(component, epoch)
        out = np.empty(length, dtype=np.int64)
        position = int(np.searchsorted(starts, start, side="right")) - 1
        filled, offset = 0, start - int(starts[position])
        while filled < length:
            doc = order[position]
            take = min(int(doc["tokens"]) - offset, length - filled)
            piece = self._reader(int(doc["prefix"])).get(int(doc["doc"]), offset, take)
            out[filled : filled + take] = piece
            filled, offset, position = filled + take, 0, position + 1
        return out


def _phase_number(manifest: dict[str, Any], phase: int, directory: Path) -> int:
    names = [p["name"] for p in manifest["phases"]]
    if not 0 <= phase < len(names):
        raise ConfigError(
            f"phase {phase} is out of range for mixture {directory} with "
            f"{len(names)} phase(s) ({', '.join(names)})"
        )
    return phase
