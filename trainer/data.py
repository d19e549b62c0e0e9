"""Where training sequences come from: `TrainData` gives the tokens of a global batch, over a
mixture artifact's phases (`mixture_data`) or a learnable synthetic corpus (`synthetic_data`);
and the checks a resume makes on the data, model and batch order (`check_resume`)."""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from pretrain.artifacts import base as base_artifact
from pretrain.artifacts import tokenizer as tokenizer_artifact
from pretrain.errors import ArtifactError, ConfigError, LockMismatch

if TYPE_CHECKING:
    from trainer.config import TrainConfig


@dataclass(frozen=True)
class Phase:
    name: str
    seq_length: int
    num_batches: int


class PhaseDataset(Protocol):
    def __len__(self) -> int: ...
    def __getitem__(self, index: int) -> dict[str, Any]: ...


class TrainData:
    """Global batches over one dataset per phase (shared by both sources)."""

    def __init__(
        self,
        datasets: list[PhaseDataset],
        phases: list[Phase],
        global_batch: int,
        component_names: list[str],
        identity: dict[str, Any],
        vocab_size: int,
    ) -> None:
        self.datasets, self.phases, self.global_batch = datasets, phases, global_batch
        self.component_names = component_names
        self.identity = identity
        self.vocab_size = vocab_size
        self._starts = np.cumsum([0] + [p.num_batches for p in phases]).tolist()

    @property
    def num_batches(self) -> int:
        return self._starts[-1]

    def locate(self, batch: int) -> tuple[int, int]:
        """(phase index, batch number within that phase) of global batch `batch`."""
        if not 0 <= batch < self.num_batches:
            raise IndexError(f"batch {batch} outside [0, {self.num_batches})")
        phase = bisect.bisect_right(self._starts, batch) - 1
        return phase, batch - self._starts[phase]

    def sample_ids(self, batch: int) -> tuple[int, int, int]:
        """(phase, first sample index, end sample index) of a global batch, for logs."""
        phase, local = self.locate(batch)
        return phase, local * self.global_batch, (local + 1) * self.global_batch

    def seq_length(self, batch: int) -> int:
        return self.phases[self.locate(batch)[0]].seq_length

    def rank_batch(self, batch: int, dp_rank: int, dp_size: int) -> tuple[np.ndarray, np.ndarray]:
        """This data-parallel rank's share of a global batch: tokens [n, S+1], components [n]."""
        phase, local = self.locate(batch)
        per_rank = self.global_batch // dp_size
        start = local * self.global_batch + dp_rank * per_rank
        dataset = self.datasets[phase]
        items = [dataset[i] for i in range(start, start + per_rank)]
        tokens = np.stack([np.asarray(item["tokens"], dtype=np.int64) for item in items])
        components = np.asarray([int(item["component"]) for item in items], dtype=np.int64)
        return tokens, components


class _WindowDataset:
    """Fixed windows of `seq_length + 1` tokens over a token stream, in a seeded order."""

    def __init__(self, stream: np.ndarray, seq_length: int, num_samples: int, seed: int) -> None:
        windows = (len(stream) - 1) // seq_length
        if windows < 1:
            raise ConfigError(
                f"synthetic data: {len(stream)} tokens cannot fill one sequence of "
                f"{seq_length}; raise data.synthetic_documents"
            )
        self.stream, self.seq_length, self.num_samples = stream, seq_length, num_samples
        self.order = np.random.default_rng(seed).permutation(windows)

    def __len__(self) -> int:
        return self.num_samples

    def __getitem__(self, index: int) -> dict[str, Any]:
        window = int(self.order[index % len(self.order)])
        start = window * self.seq_length
        return {"tokens": self.stream[start : start + self.seq_length + 1], "component": 0}


def synthetic_stream(documents: int, vocab: int, seed: int) -> np.ndarray:
    """Learnable documents (arithmetic progressions mod vocab, each ended by EOD = 0), joined: the
    same on every rank and at every resume, from the seed alone."""
    rng = np.random.default_rng(seed)
    docs = []
    for _ in range(documents):
        length = int(rng.integers(64, 512))
        start, stride = int(rng.integers(1, vocab)), int(rng.integers(1, 8))
        docs.append(np.append(1 + (start + stride * np.arange(length)) % (vocab - 1), 0))
    return np.concatenate(docs).astype(np.int64)


def phase_counts(fractions: list[float], total_batches: int) -> list[int]:
    """Global batches per synthetic phase: each phase's share of the total, the rest last."""
    counts = [max(1, round(total_batches * f / sum(fractions))) for f in fractions]
    counts[-1] = max(1, total_batches - sum(counts[:-1]))
    return counts


def synthetic_data(config: TrainConfig) -> TrainData:
    """The synthetic corpus as a TrainData: the steps plus room for the guard's skips."""
    data = config.data
    stream = synthetic_stream(data.synthetic_documents, data.synthetic_vocab, config.run.seed)
    total_batches = synthetic_batches(config)
    counts = phase_counts([phase.fraction for phase in config.data.phases], total_batches)
    phases, datasets = [], []
    for index, (spec, count) in enumerate(zip(config.data.phases, counts, strict=True)):
        phases.append(Phase(spec.name, spec.seq_length, count))
        datasets.append(
            _WindowDataset(
                stream,
                spec.seq_length,
                count * config.batch.global_batch_size,
                config.run.seed + index,
            )
        )
    return TrainData(
        datasets,
        phases,
        config.batch.global_batch_size,
        ["synthetic"],
        {"build_sha256": None, "recipe_sha256": None, "tokenizer_sha256": None},  # no mixture
        config.data.synthetic_vocab,
    )


def mixture_data(config: TrainConfig) -> TrainData:
    """The mixture artifact's phases as a TrainData, with its identity hashes."""
    from mixtures.dataset import MixtureDataset

    if not config.data.mixture_dir:
        raise ConfigError(
            "data.mixture_dir is not set; point it at a `pretrain mixture build` "
            "output or set data.source=synthetic"
        )
    first = MixtureDataset(config.data.mixture_dir, phase=0, encoded_dir=config.data.encoded_dir)
    if first.global_batch != config.batch.global_batch_size:
        raise ConfigError(
            f"batch.global_batch_size = {config.batch.global_batch_size} but the "
            f"mixture was built for a global batch of {first.global_batch}; set "
            f"batch.global_batch_size={first.global_batch} or rebuild the mixture"
        )
    from pretrain.artifacts import mixture as mixture_artifact

    # the bytes were verified by MixtureDataset just above: sizes only here
    mixture = mixture_artifact.open(config.data.mixture_dir, deep=False)
    datasets, phases = _open_phases(config, first, [p.name for p in mixture.fields.phases])
    identity = {
        "build_sha256": first.build_sha256,
        "recipe_sha256": first.recipe_sha256,
        "tokenizer_sha256": first.tokenizer_sha256,
        "tokenizer": mixture.raw.get("tokenizer"),  # as the mixture records it
    }
    tokenizer = mixture.fields.tokenizer
    vocab = int(tokenizer.vocab_size or 0) if tokenizer else 0
    return TrainData(
        datasets, phases, first.global_batch, list(first.component_names), identity, vocab
    )


def _open_phases(
    config: TrainConfig, first: Any, names: list[str]
) -> tuple[list[Any], list[Phase]]:
    """One dataset per mixture phase, each checked to hold at least one global batch."""
    from mixtures.dataset import MixtureDataset

    datasets, phases, encoded = [], [], config.data.encoded_dir
    for index, name in enumerate(names or ["main"]):
        dataset = first if index == 0 else MixtureDataset(first.directory, index, encoded)
        if dataset.seq_length > config.model.seq_length:
            raise ConfigError(
                f"model.seq_length = {config.model.seq_length} is shorter than "
                f"mixture phase {index}'s {dataset.seq_length}; raise it"
            )
        num_batches = len(dataset) // first.global_batch
        if num_batches < 1:  # a phase with no sequences would never advance
            raise ArtifactError(
                f"mixture phase {index} of {config.data.mixture_dir} holds "
                f"{len(dataset)} sequences, less than one global batch; rebuild"
            )
        datasets.append(dataset)
        phases.append(Phase(name, dataset.seq_length, num_batches))
    return datasets, phases


# ----- opening a run's data and deciding its vocabulary (the rank's build and the launcher) ---
def synthetic_batches(config: TrainConfig) -> int:
    """Global batches the synthetic source provides: the steps plus room for guard skips."""
    if not config.run.train_steps:
        raise ConfigError("run.train_steps is not set; synthetic data needs an explicit step count")
    guard = config.guard
    return config.run.train_steps + (guard.max_rollbacks + 1) * guard.skip_batches


def open_data(config: TrainConfig) -> TrainData:
    """The run's TrainData: the mixture's, or the synthetic corpus."""
    return mixture_data(config) if config.data.source == "mixture" else synthetic_data(config)


def lineage_tokenizer(directory: Path, depth: int = 3) -> Path | None:
    """The tokenizer artifact an artifact was (transitively) made from, via manifest lineage
    (a run -> its mixture -> encoded -> tokenizer; an HF export lists its tokenizer)."""
    try:
        manifest = base_artifact.peek(directory)
    except ArtifactError:
        return None
    for entry in manifest.inputs:  # a tokenizer it names itself first
        if entry.kind == tokenizer_artifact.KIND:
            return Path(entry.path)
    for entry in manifest.inputs if depth > 0 else []:
        found = lineage_tokenizer(Path(entry.path), depth - 1)
        if found is not None:
            return found
    return None


def tokenizer_dir(config: TrainConfig) -> Path | None:
    if config.data.tokenizer_dir:
        return Path(config.data.tokenizer_dir)
    if config.data.source == "mixture" and config.data.mixture_dir:
        return lineage_tokenizer(Path(config.data.mixture_dir))
    return None


def resolve_vocab(config: TrainConfig, data: TrainData | Any) -> int:
    """model.vocab_size, else the tokenizer's (pinned or found through lineage), else the data's."""
    if config.model.vocab_size:
        return config.model.vocab_size
    directory = tokenizer_dir(config)
    if directory is not None and directory.is_dir():
        from tokenizer.lock import load_locked

        return int(load_locked(directory).vocab_size)
    if data.vocab_size:
        return int(data.vocab_size)
    raise ConfigError(
        "model.vocab_size is not set and no tokenizer was found for the mixture; "
        "set model.vocab_size or data.tokenizer_dir"
    )


def check_resume(
    config: TrainConfig,
    data: TrainData | Any,
    recorded: dict[str, Any] | None,
    vocab: int,
    name: str,
) -> None:
    """Refuse this run's data, model or batch order where they differ from the pinned ones or
    from checkpoint `name`'s (its state.json `recorded`; None: a fresh start): the launcher's
    preflight and every rank's restore ask the same checks."""
    check_identity(config, data, recorded)
    check_resume_model(config, recorded, vocab, name)
    check_resume_order(config, recorded, name)


def check_identity(config: TrainConfig, data: TrainData, recorded: dict[str, Any] | None) -> None:
    """Refuse when the tokenizer or mixture build differs from the pinned or checkpointed one."""
    identity = data.identity
    if config.data.tokenizer_dir and config.data.source == "mixture":  # synthetic data has none
        from tokenizer.lock import check_match, load_locked

        locked = load_locked(config.data.tokenizer_dir)
        check_match(
            identity.get("tokenizer_sha256"), locked.sha256, f"mixture {config.data.mixture_dir}"
        )
    pinned = config.data.expect_build_sha256
    if pinned and pinned != identity.get("build_sha256"):
        raise LockMismatch(
            f"data.expect_build_sha256 = {pinned[:12]}... but mixture "
            f"{config.data.mixture_dir} has build {str(identity['build_sha256'])[:12]}"
            "...; pin the new build hash or point at the mixture you meant"
        )
    for key in ("tokenizer_sha256", "build_sha256"):
        if recorded is None or recorded.get(key) == identity.get(key):
            continue
        what = "tokenizer" if key.startswith("tokenizer") else "mixture build"
        refusal = (
            f"resume refused: the checkpoint was trained on {what} "
            f"{str(recorded.get(key))[:12]}..., the data now has "
            f"{str(identity.get(key))[:12]}..."
        )
        if key == "build_sha256" and config.data.mixture_dir:
            check_replan(Path(config.data.mixture_dir), recorded, data.global_batch, refusal)
            continue
        raise LockMismatch(f"{refusal}; restore the original data or start a new run directory")


def check_replan(
    mixture_dir: Path, recorded: dict[str, Any], global_batch: int, refusal: str
) -> None:
    """Accept a resume on another mixture build only when it is a re-plan (`mixture build --set
    'replan={mixture: OLD, consumed_sequences: N}'`) of the checkpoint's build at the checkpoint's
    data position: N = the batches it consumed x the global batch. The re-plan's record is not
    trusted: the mixture it re-plans (found through its lineage, verified, of the checkpoint's
    build) must share its seed, global batch, encoded data and component documents, and every
    sample the checkpoint consumed must be the same in both indexes; the batches after it follow
    the new weights."""
    from pretrain.artifacts import mixture as mixture_artifact

    new = mixture_artifact.open(mixture_dir, deep=False)  # bytes: MixtureDataset verified them
    consumed = int(recorded.get("batch") or 0) * global_batch
    if "replan.json" not in new.raw["files"]:
        raise LockMismatch(
            f"{refusal}, which is not a re-plan of it; restore the original data, re-plan it with "
            f"`pretrain mixture build --set 'replan={{mixture: OLD, consumed_sequences: "
            f"{consumed}}}'`, or start a new run directory"
        )
    record = json.loads(new.path("replan.json").read_text())
    old_build = str(recorded.get("build_sha256"))
    if record.get("from_build_sha256") != old_build:
        raise LockMismatch(
            f"{refusal}, a re-plan of build {str(record.get('from_build_sha256'))[:12]}..., not "
            "of the checkpoint's; re-plan the mixture the run trained on"
        )
    if record.get("consumed_sequences") != consumed:
        raise LockMismatch(
            f"resume refused: mixture {mixture_dir} re-plans build {old_build[:12]}... after "
            f"{record.get('consumed_sequences')} sequences, but the checkpoint consumed "
            f"{consumed} (batch {recorded.get('batch')} x {global_batch}); rebuild it with "
            f"replan.consumed_sequences={consumed}"
        )
    old = _replanned_mixture(new, old_build, mixture_dir)
    _check_same_prefix(new, old, consumed, mixture_dir)


def _replanned_mixture(new: Any, old_build: str, mixture_dir: Path) -> Any:
    """The mixture `new` re-plans, from its lineage, verified byte for byte and by hash."""
    from pretrain.artifacts import mixture as mixture_artifact

    sources = [entry for entry in new.manifest.inputs if entry.kind == mixture_artifact.KIND]
    if len(sources) != 1:
        raise LockMismatch(
            f"resume refused: mixture {mixture_dir} records {len(sources)} mixtures it was "
            "re-planned from, not one; rebuild it with `pretrain mixture build`"
        )
    try:
        old = mixture_artifact.open(sources[0].path, sha256=sources[0].manifest_sha256)
    except ArtifactError as exc:
        raise LockMismatch(
            f"resume refused: mixture {mixture_dir} re-plans {sources[0].path}, which cannot be "
            f"verified ({str(exc).split(';')[0]}); restore it to resume on the re-plan"
        ) from None
    if old.fields.build_sha256 != old_build:
        raise LockMismatch(
            f"resume refused: {sources[0].path} has build {str(old.fields.build_sha256)[:12]}..., "
            f"not the checkpoint's {old_build[:12]}...; re-plan the mixture the run trained on"
        )
    return old


def _check_same_prefix(new: Any, old: Any, consumed: int, mixture_dir: Path) -> None:
    """Same seed, global batch, encoded data and component documents (by their verified bytes'
    sha256), and the first `consumed` samples of every phase identical."""
    a, b = new.fields, old.fields
    keys = ("seed", "global_batch", "encoded_manifest_sha256")
    same = all(getattr(a, key) == getattr(b, key) for key in keys)
    names = [c.name for c in a.components]
    same = same and names == [c.name for c in b.components]
    for name in names if same else ():
        rel = f"components/{name}.npy"
        same = same and new.manifest.files[rel].sha256 == old.manifest.files[rel].sha256
    left = consumed
    for number, old_phase in enumerate(b.phases):
        if not same or left <= 0:
            break
        phase = a.phases[number] if number < len(a.phases) else None
        take = min(left, old_phase.num_sequences)
        same = (
            phase is not None
            and (phase.name, phase.seq_length) == (old_phase.name, old_phase.seq_length)
            and (take < old_phase.num_sequences or phase.num_sequences == take)
            and np.array_equal(new.index(number)[:take], old.index(number)[:take])
        )
        left -= take
    if not same or left > 0:
        raise LockMismatch(
            f"resume refused: mixture {mixture_dir} does not keep the {consumed} samples the "
            "checkpoint consumed (seed, batch, documents or index differ from the mixture it "
            "re-plans); rebuild the re-plan with `pretrain mixture build`"
        )


def check_init_from(
    config: TrainConfig, data: TrainData | Any, recorded: dict[str, Any], vocab_size: int, name: str
) -> None:
    """Refuse `checkpoint.init_from` of another model or tokenizer (its embeddings would stand for
    other tokens), before its shards are loaded."""
    ours = data.identity.get("tokenizer_sha256")
    if recorded.get("tokenizer_sha256") != ours:
        raise LockMismatch(
            f"checkpoint.init_from {name} was trained with tokenizer "
            f"{str(recorded.get('tokenizer_sha256'))[:12]}..., the data has {str(ours)[:12]}...; "
            "start from a checkpoint of the same tokenizer"
        )
    check_resume_model(config, recorded, vocab_size, name, "checkpoint.init_from refused")


def check_resume_model(
    config: TrainConfig,
    recorded: dict[str, Any] | None,
    vocab_size: int,
    checkpoint: str,
    refusal: str = "resume refused",
) -> None:
    """Refuse a resume whose checkpoint holds another model (architecture or vocabulary), before
    its shards are loaded: megatron would fail deep in the load on the first tensor's shape."""
    if not recorded:
        return
    from pretrain.config import config_sha256

    what = None
    if recorded.get("model_sha256") != config_sha256(config.model):
        what = "a different model architecture (model.*) than the config"
    elif recorded["vocab_size"] != vocab_size:
        what = f"a vocabulary of {recorded['vocab_size']} tokens, the config's has {vocab_size}"
    if what:
        raise LockMismatch(
            f"{refusal}: checkpoint {checkpoint} holds {what}; restore the config it was "
            "trained with or use a new run.out_dir"
        )


LAYOUT = "run.train_steps, guard.max_rollbacks, guard.skip_batches (the synthetic phase lengths)"


def _batch_order(config: dict[str, Any]) -> dict[str, Any]:
    """The settings of a config dict that decide which samples global batch b holds. A mixture's
    order is its build (compared by hash in check_identity) and its global batch; synthetic data's
    is its corpus, seed, phases and every phase length but the last (which may grow)."""
    run, data, guard = config.get("run", {}), config.get("data", {}), config.get("guard", {})
    source = data.get("source")
    order: dict[str, Any] = {
        "data.source": source,
        "batch.global_batch_size": config.get("batch", {}).get("global_batch_size"),
    }
    if source != "synthetic":
        return order
    phases = data.get("phases") or []
    for name in ("synthetic_documents", "synthetic_vocab", "phases"):
        order[f"data.{name}"] = data.get(name)
    order["run.seed"] = run.get("seed")
    if len(phases) > 1 and run.get("train_steps"):
        rollbacks, skips = guard.get("max_rollbacks", 0), guard.get("skip_batches", 1)
        total = run["train_steps"] + (rollbacks + 1) * skips
        order[LAYOUT] = phase_counts([p.get("fraction", 1.0) for p in phases], total)[:-1]
    return order


def resume_order_changes(config: TrainConfig, recorded: dict[str, Any]) -> list[str]:
    """`name: was -> now` for each batch-order setting the config changes from the recorded
    config (a checkpoint's state.json `config`); [] when the saved batch index still holds."""
    from pretrain.config import config_dict

    was, now = _batch_order(recorded), _batch_order(config_dict(config))
    return [f"{k}: {was.get(k)} -> {now[k]}" for k in now if was.get(k) != now[k]]


def check_resume_order(config: TrainConfig, recorded: dict[str, Any] | None, name: str) -> None:
    """Refuse a resume that would make the saved batch index point at other samples. Settings
    that only change training from here on (train_steps on one phase, lr and the schedule,
    logging, checkpoint cadence, micro batch, parallel layout, eval) stay allowed."""
    if not recorded:
        return
    changes = resume_order_changes(config, recorded["config"])
    if changes:
        raise LockMismatch(
            f"resume refused: checkpoint {name} was trained with other batch-order settings "
            f"({'; '.join(changes)}), so its saved batch index would point at other samples; "
            "restore them or use a new run.out_dir"
        )
