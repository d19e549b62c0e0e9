"""Simulated proxy runs with per-document results whose true effects are known.

bits of document d for (recipe r, seed s) = bytes_d * (difficulty_d + shift_r[domain_d] + seed_rs
+ noise_rsd): documents differ a lot in difficulty (shared by every run, which is why pairing
helps), each run has its own seed offset (training noise, as large as the effects), and each
(run, document) a little independent noise.
"""

from __future__ import annotations

import math

import numpy as np

from tests.evals.conftest import healthy

SETS = {"prose__en": ("prose", "en"), "code__en": ("code", "en")}


def simulate(
    rng: np.random.Generator,
    shifts: dict[str, float | dict[str, float]],
    seeds: int = 3,
    docs_per_set: int = 60,
    seed_sd: float = 0.02,
    doc_noise: float = 0.05,
    proxy: str = "p",
) -> list[dict]:
    """Runs of each recipe in `shifts` (name -> bpb shift, or per-domain shifts)."""
    names = [name for name in SETS for _ in range(docs_per_set)]
    sizes = rng.integers(200, 2000, size=len(names)).astype(float)
    difficulty = rng.normal(2.5, 0.5, size=len(names))
    runs = []
    for recipe, shift in shifts.items():
        per_domain = shift if isinstance(shift, dict) else {d: shift for d, _ in SETS.values()}
        offset = np.array([per_domain.get(SETS[n][0], 0.0) for n in names])
        for seed in range(1, seeds + 1):
            rate = difficulty + offset + rng.normal(0, seed_sd)
            rate = rate + rng.normal(0, doc_noise, size=len(names))
            nll = rate * sizes * math.log(2.0)
            runs.append(_run(recipe, seed, proxy, names, sizes, nll))
    return runs


def _run(recipe: str, seed: int, proxy: str, names: list, sizes: np.ndarray, nll: np.ndarray):
    metrics = {"bpb": float(nll.sum() / sizes.sum() / math.log(2.0))}
    for name, (domain, lang) in SETS.items():
        mask = np.array([n == name for n in names])
        metrics[f"bpb/{domain}/{lang}"] = float(nll[mask].sum() / sizes[mask].sum() / math.log(2))
    return {
        "recipe_sha256": recipe.ljust(64, "0"),
        "recipe_name": recipe,
        "weights": {"prose": 0.5, "code": 0.5},
        "proxy": proxy,
        "seed": seed,
        "health": healthy(),
        "metrics": metrics,
        "documents": {
            "sets": {n: {"domain": d, "lang": lang} for n, (d, lang) in SETS.items()},
            "set": names,
            "id": [f"doc-{i}" for i in range(len(names))],
            "nll": nll.tolist(),
            "bytes": sizes.astype(int).tolist(),
        },
    }
