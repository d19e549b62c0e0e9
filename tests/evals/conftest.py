"""Synthetic ablation artifacts for the evals tests: results with known structure, so ranking,
regression, decision and gate outcomes are known in advance."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from evals.report import build_report, write_report
from pretrain.manifest import write_manifest
from tests.conftest import built_once

TOKENIZER = "a" * 64
ENCODED = "e" * 64
COMPONENTS = ("web", "code", "books")


def healthy(steps: int = 10, tokens: int = 1000) -> dict:
    """The run health of a proxy scored at its last step after training its whole budget."""
    return {
        "scored_step": steps,
        "trained_steps": steps,
        "planned_steps": steps,
        "tokens_trained": tokens,
        "planned_tokens": tokens,
        "rollbacks": 0,
        "skipped_batches": [],
        "ended": "completed",
    }


def recipe_sha(weights: dict[str, float]) -> str:
    from pretrain.manifest import canonical_json, sha256_bytes

    return sha256_bytes(canonical_json({"weights": weights}))


def synthetic_runs(
    recipes: int = 8,
    seeds: int = 3,
    noise: float = 0.001,
    proxies: tuple[str, ...] = ("p-small", "p-large"),
) -> list[dict]:
    """bpb = 1.5 - 0.4*code + 0.1*books + noise (lower is better): more code is better."""
    rng = np.random.default_rng(0)
    weights_list = [{"web": 0.6, "code": 0.2, "books": 0.2}]
    weights_list += [
        dict(zip(COMPONENTS, map(float, rng.dirichlet([6, 2, 2]).round(4))))
        for _ in range(recipes - 1)
    ]
    runs = []
    for i, weights in enumerate(weights_list):
        for proxy_index, proxy in enumerate(proxies):
            for seed in range(seeds):
                bpb = (
                    1.5
                    - 0.2 * proxy_index
                    - 0.4 * weights["code"]
                    + 0.1 * weights["books"]
                    + rng.normal(0, noise)
                )
                runs.append(
                    {
                        "recipe_sha256": recipe_sha(weights),
                        "recipe_name": "base" if i == 0 else f"v{i}",
                        "weights": weights,
                        "proxy": proxy,
                        "seed": seed,
                        "token_budget": 1000,
                        "health": healthy(),
                        "metrics": {"bpb": bpb, "bpb/web/en": bpb + 0.1, "loss": bpb * 2},
                    }
                )
    return runs


def make_report(out: Path, runs: list[dict], **kwargs) -> Path:
    base = next(r["recipe_sha256"] for r in runs if r["recipe_name"] == "base")
    identity = {"tokenizer_sha256": TOKENIZER, "data_manifest_sha256": ENCODED}
    report = build_report(
        runs,
        base_sha=base,
        identity=identity,
        criteria={"metric": "bpb", **kwargs},
        proxy_sizes={"p-small": 1e5, "p-large": 1e6},
    )
    write_report(out, report)
    return out


def make_mixture(
    out: Path, recipe: str, tokenizer: str = TOKENIZER, encoded: str = ENCODED
) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    (out / "index.npy").write_bytes(b"synthetic")
    write_manifest(
        out,
        "mixture",
        extra={
            "recipe_sha256": recipe,
            "build_sha256": "b" * 64,
            "tokenizer": {"sha256": tokenizer, "id": "bpe@aaaaaa"},
            "encoded_manifest_sha256": encoded,
        },
    )
    return out


@pytest.fixture(scope="session")
def ablation_dir(tmp_path_factory) -> Path:
    """A passing synthetic ablation report (8 recipes x 2 proxies x 3 seeds)."""
    return make_report(tmp_path_factory.mktemp("ablation") / "report", synthetic_runs())


@pytest.fixture(scope="session")
def chain(tmp_path_factory) -> dict[str, Path]:
    """Real shards -> tokenizer -> encoded -> mixture config -> eval sets (tests/evals/chain.py)."""
    from tests.evals.chain import build_chain, chain_paths

    return chain_paths(built_once(tmp_path_factory, "chain", build_chain))
