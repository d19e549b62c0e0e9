"""Plan a mixture: sequences per phase, per-batch allocations, epoch caps, re-plans. A component
has S = (tokens - 1) // L sequences per epoch (mixtures.dataset); epoch caps count sequences
drawn / S, summed over phases."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mixtures import sampler
from mixtures.boundaries import allocate_batches
from mixtures.recipe import MixtureConfig, Phase, resolved_phases
from mixtures.schedule import ScheduleError
from mixtures.selection import select_sha256
from pretrain.artifacts import mixture as mixture_kind
from pretrain.artifacts.mixture import Mixture
from pretrain.errors import ConfigError
from pretrain.manifest import manifest_sha256

EPOCH_SLACK = 1e-9


class InfeasibleMixture(ConfigError):
    """One line per short component; keeps its line breaks (unlike other PretrainErrors)."""

    def __init__(self, lines: list[str]) -> None:
        Exception.__init__(self, "\n  ".join(lines))


@dataclass
class PhasePlan:
    name: str
    seq_length: int
    weights: dict[str, float]
    sequences_per_epoch: list[int]
    counts: np.ndarray
    """(new batches, K) allocation of the re-allocated (or whole) part of the phase."""
    kept: np.ndarray | None = None
    """The consumed prefix of the old index that a re-plan keeps verbatim."""

    @property
    def num_sequences(self) -> int:
        kept = 0 if self.kept is None else self.kept.size
        return kept + int(self.counts.sum())

    def draws(self) -> np.ndarray:
        kept = (
            np.zeros(len(self.weights), np.int64)
            if self.kept is None
            else sampler.draws_per_component(self.kept, len(self.weights))
        )
        return kept + self.counts.sum(axis=0).astype(np.int64)


@dataclass
class Plan:
    seed: int
    global_batch: int
    phases: list[PhasePlan]
    summary: dict[str, Any] = field(default_factory=dict)
    replan_report: dict[str, Any] | None = None

    def index(self, number: int) -> np.ndarray:
        phase = self.phases[number]
        weights = list(phase.weights.values())
        return sampler.build_index(
            phase.counts, weights, phase.sequences_per_epoch, self.seed, number, phase.kept
        )

    def counts(self) -> dict[str, int]:
        return {
            "sequences": sum(p.num_sequences for p in self.phases),
            "tokens": sum(p.num_sequences * p.seq_length for p in self.phases),
        }


def load_old(config: MixtureConfig) -> Mixture:
    """The mixture a re-plan continues from, checked for compatibility."""
    assert config.replan is not None
    directory = Path(config.replan.mixture)
    old = mixture_kind.open(directory)
    manifest = old.raw
    where = f"replan.mixture ({directory})"
    if (
        manifest["global_batch"] != config.build.global_batch
        or manifest["seed"] != config.build.seed
    ):
        raise ConfigError(
            f"{where} was built with global_batch {manifest['global_batch']} and "
            f"seed {manifest['seed']}; a re-plan must keep both: set build."
            "global_batch and build.seed to those values"
        )
    if manifest["encoded_manifest_sha256"] != manifest_sha256(config.build.encoded):
        raise ConfigError(
            f"{where} was built from other encoded data; a re-plan must use the "
            f"same build.encoded as the run"
        )
    old_selects = [(c["name"], c["select_sha256"]) for c in manifest["components"]]
    new_selects = [(c.name, select_sha256(c)) for c in config.recipe.components]
    if old_selects != new_selects:
        raise ConfigError(
            f"{where}: the components or their selections changed; a re-plan may "
            "change weights, epoch caps and the budget only"
        )
    return old


def make_plan(config: MixtureConfig, docs: list[np.ndarray], old: Mixture | None) -> Plan:
    """Allocate every phase; refuse infeasible epoch caps with one line per short component."""
    width = config.build.global_batch
    names = [c.name for c in config.recipe.components]
    consumed = 0 if config.replan is None else config.replan.consumed_sequences
    if consumed % width:
        raise ConfigError(
            f"replan.consumed_sequences = {consumed} is not a whole number of "
            f"global batches of {width}; pass the trainer's consumed samples"
        )
    phases, offset, report = [], 0, []
    for number, phase in enumerate(resolved_phases(config)):
        planned, kept_from_old = _plan_phase(config, number, phase, docs, old, consumed - offset)
        if kept_from_old and planned.kept is not None:  # a consumed prefix was kept
            kept = sampler.draws_per_component(planned.kept, len(names))
            entry = {
                "phase": phase.name,
                "kept_sequences": int(planned.kept.size),
                "reallocated_sequences": int(planned.counts.sum()),
                "kept_per_component": dict(zip(names, kept.tolist(), strict=True)),
            }
            report.append(entry)
            offset += kept_from_old
        phases.append(planned)
    if old is not None and consumed > offset:
        raise ConfigError(
            f"replan.consumed_sequences = {consumed} exceeds the {offset} sequences"
            f" of {old.directory}; pass the trainer's consumed samples"
        )
    plan = Plan(config.build.seed, width, phases)
    _check_epochs(config, plan, docs)
    plan.summary = _summary(config, plan, docs)
    if old is not None:
        plan.replan_report = {
            "from_build_sha256": old.fields.build_sha256,
            "consumed_sequences": consumed,
            "phases": report,
        }
    return plan


def _plan_phase(
    config: MixtureConfig,
    number: int,
    phase: Phase,
    docs: list[np.ndarray],
    old: Mixture | None,
    consumed: int,
) -> tuple[PhasePlan, int]:
    """One phase's allocation (a re-plan keeps the old phase's consumed prefix), and the old
    phase's size when it was (partly) consumed, else 0."""
    width, names = config.build.global_batch, [c.name for c in config.recipe.components]
    seq_length = int(phase.seq_length)
    per_epoch = [max(int(d["tokens"].sum()) - 1, 0) // seq_length for d in docs]
    weights = [phase.weights[n] for n in names]
    for name, weight, size in zip(names, weights, per_epoch, strict=True):
        if weight > 0 and size == 0:
            raise ConfigError(
                f"component {name} is empty for phase {phase.name}: its documents hold "
                f"fewer than seq_length + 1 = {seq_length + 1} tokens; loosen its "
                "select or set its weight to 0"
            )
    batches = max(1, round(config.build.total_tokens * phase.share / (seq_length * width)))
    kept, old_size = None, 0
    if old is not None and number < len(old.raw["phases"]) and consumed > 0:
        kept, batches = _kept_prefix(old, number, phase.name, seq_length, consumed, batches, width)
        old_size = int(old.raw["phases"][number]["num_sequences"])
    try:
        counts = (
            allocate_batches(weights, batches, width)
            if batches
            else np.zeros((0, len(names)), np.int32)
        )
    except ScheduleError as exc:
        raise ConfigError(
            f"phase {phase.name!r}: {exc}; a slightly different build.global_batch or weight "
            "avoids it"
        ) from exc
    weight_map = dict(zip(names, weights, strict=True))
    return PhasePlan(phase.name, seq_length, weight_map, per_epoch, counts, kept), old_size


def _kept_prefix(
    old: Mixture,
    number: int,
    name: str,
    seq_length: int,
    consumed: int,
    batches: int,
    width: int,
) -> tuple[np.ndarray, int]:
    """(kept prefix of old phase `number`, new batches to allocate after it)."""
    old_phase = old.raw["phases"][number]
    if old_phase["name"] != name or old_phase["seq_length"] != seq_length:
        raise ConfigError(
            f"recipe.phases[{number}] is {name} (seq_length {seq_length}) but the "
            f"run consumed phase {old_phase['name']} (seq_length "
            f"{old_phase['seq_length']}); keep consumed phases unchanged"
        )
    kept_size = min(consumed, old_phase["num_sequences"])
    kept = np.array(old.index(number)[:kept_size])
    if kept_size == old_phase["num_sequences"]:
        return kept, 0
    remaining = batches - kept_size // width
    if remaining < 0:
        raise ConfigError(
            f"phase {name}: the run already consumed {kept_size} sequences but the "
            f"new budget gives the phase only {batches * width}; raise "
            "build.total_tokens or the phase's share"
        )
    return kept, remaining


def _check_epochs(config: MixtureConfig, plan: Plan, docs: list[np.ndarray]) -> None:
    lines = []
    for k, comp in enumerate(config.recipe.components):
        epochs = _epochs_used(plan, k)
        if epochs <= comp.max_epochs * (1 + EPOCH_SLACK):
            continue
        available = int(docs[k]["tokens"].sum())
        needed = sum(int(p.draws()[k]) * p.seq_length for p in plan.phases)
        lines.append(
            f"{comp.name}: needs {needed:,} tokens = {epochs:.3f} epochs of its "
            f"{available:,} available tokens, max_epochs is {comp.max_epochs:g}; raise "
            f"max_epochs to {math.ceil(epochs * 100) / 100:g}, lower its weight, widen "
            f"its select, or lower build.total_tokens to about "
            f"{int(config.build.total_tokens * comp.max_epochs / epochs):,}"
        )
    if lines:
        raise InfeasibleMixture(
            [f"recipe infeasible: {len(lines)} component(s) short of data:", *lines]
        )


def _epochs_used(plan: Plan, k: int) -> float:
    total = 0.0
    for phase in plan.phases:
        draws = int(phase.draws()[k])
        if draws:
            total += (
                draws / phase.sequences_per_epoch[k] if phase.sequences_per_epoch[k] else math.inf
            )
    return total


def _summary(config: MixtureConfig, plan: Plan, docs: list[np.ndarray]) -> dict[str, Any]:
    comps = config.recipe.components
    phases = []
    for phase in plan.phases:
        draws = phase.draws()
        phases.append(
            {
                "name": phase.name,
                "seq_length": phase.seq_length,
                "num_sequences": phase.num_sequences,
                "num_batches": phase.num_sequences // plan.global_batch,
                "tokens": phase.num_sequences * phase.seq_length,
                "components": [
                    {
                        "name": c.name,
                        "weight": phase.weights[c.name],
                        "quota_per_batch": phase.weights[c.name] * plan.global_batch,
                        "sequences": int(draws[k]),
                        "tokens": int(draws[k]) * phase.seq_length,
                        "sequences_per_epoch": phase.sequences_per_epoch[k],
                        "epochs": draws[k] / phase.sequences_per_epoch[k]
                        if phase.sequences_per_epoch[k]
                        else 0.0,
                    }
                    for k, c in enumerate(comps)
                ],
            }
        )
    components = [
        {
            "name": c.name,
            "documents": int(docs[k].size),
            "available_tokens": int(docs[k]["tokens"].sum()),
            "max_epochs": c.max_epochs,
            "tokens": sum(p["components"][k]["tokens"] for p in phases),
            "epochs": _epochs_used(plan, k),
        }
        for k, c in enumerate(comps)
    ]
    return {
        "recipe": config.recipe.name,
        "global_batch": plan.global_batch,
        "seed": plan.seed,
        "total_tokens_requested": config.build.total_tokens,
        "total_tokens": sum(p["tokens"] for p in phases),
        "phases": phases,
        "components": components,
    }
