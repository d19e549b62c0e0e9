"""`pretrain ablate CONFIG`'s config and plan: a base recipe plus explicit and Dirichlet (RegMix)
variants, each trained per proxy and seed (evals/ablation_run.py); a run is keyed by what makes it
(recipe hash, proxy, seed, budget, train template, eval set, data), never by its directory name.
"""

from __future__ import annotations

import os
from typing import Any, Literal

import numpy as np
from pydantic import Field

from pretrain.config import StrictModel, config_dict, read_yaml
from pretrain.errors import ConfigError
from pretrain.manifest import canonical_json, sha256_bytes
from trainer.config import CriteriaConfig


class Variant(StrictModel):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    weights: dict[str, float]
    """Component name -> weight; missing components get 0; rescaled to sum to 1."""


class DirichletConfig(StrictModel):
    """RegMix-style random recipes: Dirichlet(concentration * base weights), seeded."""

    count: int = Field(0, ge=0)
    concentration: float = Field(10.0, gt=0)
    """Higher stays closer to the base weights."""
    seed: int = 0
    min_weight: float = Field(0.0, ge=0, lt=1)
    """Weights below this are set to 0 (then renormalised): sparse recipes, as in RegMix. A sample
    with every weight below it keeps its largest one (a one-component recipe)."""


class ProxyConfig(StrictModel):
    """One proxy size: overrides of the train template (`model.*`, `batch.*`, `optim.*`, ...)."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    overrides: dict[str, Any] = Field(default_factory=dict)
    """Dotted keys of the train config, e.g. {"model.hidden_size": 64, "model.num_layers": 1}."""
    token_budget: int | None = Field(None, ge=1)
    """Tokens per run for this proxy; defaults to the sweep's token_budget."""


class EvalRunConfig(StrictModel):
    max_docs: int | None = Field(None, ge=1)
    batch_size: int = Field(8, ge=1)


class AblationConfig(StrictModel):
    """`pretrain ablate` config (example: configs/ablation.yaml)."""

    name: str = "ablation"
    out: str = "runs/ablation"
    mixture: str
    """The base mixture config (YAML, `pretrain mixture build` format): its recipe is the base."""
    train: str
    """The proxy train config template (YAML, `pretrain launch` format)."""
    eval_sets: str
    """An `evalset` artifact (`pretrain eval build`): the fixed eval sets every run is scored on."""
    tokenizer: str | None = None
    """Tokenizer artifact for evaluation; default: the mixture's build.tokenizer."""
    variants: list[Variant] = Field(default_factory=list)
    dirichlet: DirichletConfig = Field(default_factory=DirichletConfig)
    proxies: list[ProxyConfig] = Field(min_length=1, max_length=2)
    token_budget: int = Field(ge=1)
    seeds: list[int] = Field(default_factory=lambda: [1], min_length=1)
    full_run_tokens: int | None = Field(None, ge=1)
    """The full run's token budget: for the epochs-per-component check (None: skipped)."""
    criteria: CriteriaConfig = Field(default_factory=CriteriaConfig)
    eval: EvalRunConfig = Field(default_factory=EvalRunConfig)
    parallel: Literal["auto", "sequential", "pool", "ray"] = "auto"
    """pool: runs side by side on this machine (each its own process, one torch thread);
    ray: Ray tasks (a cluster, fractional GPUs); auto: ray with ray_address, else pool when the
    CPUs fit >= 2 runs (cpus_per_run each), else sequential."""
    max_parallel: int | None = Field(None, ge=1)
    """Runs at once (pool); default: CPUs // cpus_per_run."""
    cpus_per_run: float = Field(1.0, gt=0)
    gpus_per_run: float = Field(0.0, ge=0)
    """GPUs a Ray task reserves for one proxy run (its launch sees only those); fractions put
    several proxies on one GPU (0.25: four)."""
    unhealthy: Literal["rerun", "refuse"] = "rerun"
    """An unhealthy proxy run (trainer.gate_rule.run_health): `rerun` it once from scratch
    (a cached one too); `refuse`: keep it. Either way a run still unhealthy is left out of every
    decision, listed, and the report does not pass."""
    confirm_predictions: bool = True
    """When the regression predicts a recipe better than every recipe run, train it (same
    proxies, seeds) before anything is chosen; the report shows predicted vs measured."""
    ray_address: str | None = None
    launch_args: list[str] = Field(default_factory=list)
    """Extra `pretrain launch` arguments for every proxy run (e.g. --in-process)."""
    timeout_s: int = Field(3600, ge=1)
    """Limit for one proxy run's process (its training and evaluation)."""


def normalise(weights: dict[str, float], names: list[str], where: str) -> dict[str, float]:
    unknown = sorted(set(weights) - set(names))
    if unknown:
        raise ConfigError(
            f"{where}: unknown component(s) {', '.join(unknown)}; the base recipe's "
            f"components are {', '.join(names)}"
        )
    if not all(w >= 0 for w in weights.values()) or not sum(weights.values()) > 0:  # nan too
        raise ConfigError(f"{where}: weights must be >= 0 with a positive sum")
    total = sum(weights.values())
    return {name: round(weights.get(name, 0.0) / total, 6) for name in names}


def _fix_sum(weights: dict[str, float]) -> dict[str, float]:
    """Put the rounding remainder on the largest weight so the sum is exactly 1."""
    largest = max(weights, key=lambda k: (weights[k], k))
    weights[largest] = round(weights[largest] + 1.0 - sum(weights.values()), 6)
    return weights


def dirichlet_recipes(base: dict[str, float], cfg: DirichletConfig) -> list[dict[str, float]]:
    names = list(base)
    rng = np.random.default_rng(cfg.seed)
    alpha = np.array([max(base[n], 1e-3) for n in names]) * cfg.concentration
    recipes = []
    for sample in rng.dirichlet(alpha, size=cfg.count):
        kept = np.where(sample < cfg.min_weight, 0.0, sample)
        if not kept.any():  # all below min_weight: keep the largest (else 0 / 0)
            kept = np.where(np.arange(sample.size) == np.argmax(sample), sample, 0.0)
        recipes.append(dict(zip(names, (kept / kept.sum()).tolist())))
    return recipes


def plan_recipes(config: AblationConfig, base_mixture: dict[str, Any]) -> list[dict[str, Any]]:
    """[{name, weights, recipe (dict)}] with the base first; duplicates (same weights) dropped.

    Variants change the components' weights (the phases that use them); phases with their own
    `weights` (e.g. an annealing phase) stay as written. The recipe keeps the base's name, so the
    base recipe's hash is the user's and a chosen variant rebuilds to the hash the gate expects.
    """
    recipe = base_mixture["recipe"]
    names = [c["name"] for c in recipe["components"]]
    base = {c["name"]: float(c["weight"]) for c in recipe["components"]}
    wanted = [("base", base)]
    wanted += [
        (v.name, normalise(v.weights, names, f"variants.{v.name}.weights")) for v in config.variants
    ]
    wanted += [
        (f"dirichlet-{i}", normalise(w, names, "dirichlet"))
        for i, w in enumerate(dirichlet_recipes(base, config.dirichlet))
    ]
    plans, seen = [], set()
    for name, weights in wanted:
        weights = dict(base) if name == "base" else _fix_sum(dict(weights))
        key = tuple(round(weights[n], 6) for n in names)
        if key in seen:
            continue
        seen.add(key)
        plans.append(recipe_plan(recipe, name, weights))
    return plans


def recipe_plan(recipe: dict[str, Any], name: str, weights: dict[str, float]) -> dict[str, Any]:
    """{name, weights, recipe}: the base recipe with these component weights (the base itself is
    passed through untouched: its hash must be the user's exactly)."""
    components = [{**c, "weight": weights[c["name"]]} for c in recipe["components"]]
    return {"name": name, "weights": weights, "recipe": {**recipe, "components": components}}


def predicted_plan(base_mixture: dict[str, Any], weights: dict[str, float]) -> dict[str, Any]:
    """The regression's predicted-best weights as a recipe to train (rounded, summing to 1)."""
    recipe = base_mixture["recipe"]
    names = [c["name"] for c in recipe["components"]]
    rounded = _fix_sum(
        normalise({n: round(weights.get(n, 0.0), 4) for n in names}, names, "predicted")
    )
    return recipe_plan(recipe, "predicted", rounded)


def run_key(
    recipe_sha: str, proxy: ProxyConfig, seed: int, budget: int, identity: dict[str, Any]
) -> str:
    """What makes a run: never its directory name."""
    return sha256_bytes(
        canonical_json(
            {
                "recipe_sha256": recipe_sha,
                "proxy": config_dict(proxy),
                "seed": seed,
                "token_budget": budget,
                **identity,
            }
        )
    )


def load_inputs(config: AblationConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    """The base mixture config and the train template, as dicts (validated by their owners)."""
    from mixtures.recipe import MixtureConfig
    from pretrain.config import parse_config
    from trainer.config import TrainConfig

    mixture = read_yaml(config.mixture)
    parse_config(MixtureConfig, mixture, source=config.mixture)
    train = read_yaml(config.train)
    parse_config(TrainConfig, train, source=config.train)
    return mixture, train


def parallel_runs(config: AblationConfig) -> int:
    """Runs at once on this machine (one when `sequential`)."""
    if config.parallel == "sequential":
        return 1
    return config.max_parallel or max(1, int((os.cpu_count() or 1) // config.cpus_per_run))


def choose_parallel(config: AblationConfig) -> str:
    if config.parallel != "auto":
        return config.parallel
    if config.ray_address:
        return "ray"
    return "pool" if parallel_runs(config) >= 2 else "sequential"


SET_METRICS = ("bpb", "loss", "ppl")
"""What `pretrain eval run` reports overall and per set (`bpb/<domain>/<lang>`)."""
TASK_METRICS = {"multiple_choice": ("acc", "acc_norm"), "cloze": ("bpb", "mean_logprob")}
"""What it reports per task file (`task/<name>/<metric>`, evals/tasks.py)."""


def check_metric(config: AblationConfig, evalset: Any) -> None:
    """Refuse, before any proxy trains, a `criteria.metric` the eval sets cannot give (a typo
    `bpx`, a domain with no set)."""
    fields = evalset.fields
    known = list(SET_METRICS)
    known += [f"{m}/{s.domain}/{s.lang}" for s in fields.sets for m in SET_METRICS]
    for task in fields.tasks:
        known += [f"task/{task.get('name')}/{m}" for m in TASK_METRICS.get(task.get("kind"), ())]
    metric = config.criteria.metric
    if metric not in known:
        shown = ", ".join(known[:12]) + (f", ... ({len(known)} in all)" if len(known) > 12 else "")
        raise ConfigError(
            f"criteria.metric = {metric!r} is not a metric of the eval sets {config.eval_sets}; "
            f"they give {shown}"
        )
