"""Paired statistics for proxy ablations: how sure is "recipe A beats recipe B"?

Two recipes are scored on the same eval documents with the same seeds, so they are compared
document by document. On bits per byte, the effect of A over B for seed s is
`sum_d (nll_B[s, d] - nll_A[s, d]) / ln 2 / sum_d bytes_d`, exactly `bpb_B,s - bpb_A,s`; the effect
is its mean over seeds (positive: A is better). Its uncertainty has two sources:

- documents (which documents the eval set happens to hold): a paired bootstrap over documents,
  one resample shared by both recipes and every seed, gives a standard error `se_documents`;
- seeds (training noise): the spread of the per-seed effects gives `se_seeds` (n - 1 degrees of
  freedom). Not a bootstrap over seeds: over 3 seeds a bootstrap has 10 distinct resamples and
  its interval is too narrow (tests/evals/test_stats.py measures its false-pass rate).

The interval is `effect +- t * sqrt(se_documents^2 + se_seeds^2)`, t from Student's distribution
with Welch-Satterthwaite degrees of freedom: n - 1 when the seed noise dominates (with 2 seeds t
is 12.7 at 95%, as it should be), many when the documents do. With one seed the seed noise is
unknown: the interval covers documents only and says so (`method`). Metrics without
per-document results (task accuracies) use the per-seed differences alone.

The gate picks the best of K recipes and then tests it, so the test it makes is one of K - 1
comparisons in either direction: `selection_confidence` widens the interval (Bonferroni) so that
with equal recipes the gate passes at most 1 - confidence of the time.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

LN2 = math.log(2.0)
RESAMPLES = 1000


def false_pass_rate(confidence: float) -> float:
    """How often the gate passes equal recipes at most (either direction, any K)."""
    return 1.0 - confidence


def selection_confidence(confidence: float, recipes: int) -> float:
    """Two-sided interval level for testing the best of `recipes` against one alternative:
    Bonferroni over the recipes - 1 comparisons the choice could have made."""
    return 1.0 - (1.0 - confidence) / max(recipes - 1, 1)


def metric_sets(metric: str, sets: Mapping[str, Mapping[str, str]]) -> list[str] | None:
    """The eval sets a bpb metric covers (`bpb`: all; `bpb/<domain>/<lang>`: that one); None for
    metrics per-document results cannot give (task accuracies, loss per token)."""
    parts = metric.split("/")
    if parts[0] != "bpb":
        return None
    if len(parts) == 1:
        return sorted(sets)
    if len(parts) == 3:
        return sorted(n for n, s in sets.items() if (s["domain"], s["lang"]) == tuple(parts[1:]))
    return None


def _docs(run: Mapping[str, Any], wanted: set[str]) -> dict[tuple[str, str], tuple[float, int]]:
    docs = run.get("documents") or {}
    return {
        (name, doc_id): (nll, size)
        for name, doc_id, nll, size in zip(
            docs.get("set", []), docs.get("id", []), docs.get("nll", []), docs.get("bytes", [])
        )
        if name in wanted
    }


def document_matrix(
    runs: Sequence[Mapping[str, Any]], metric: str
) -> tuple[np.ndarray, np.ndarray, list[tuple[str, str]]] | None:
    """(nll [runs x documents] in nats, bytes [documents], keys) on the documents every run
    scored for `metric`; None when a run has no per-document results or the metric is not bpb."""
    if not runs or any(not run.get("documents") for run in runs):
        return None
    names = metric_sets(metric, runs[0]["documents"].get("sets", {}))
    if not names:
        return None
    tables = [_docs(run, set(names)) for run in runs]
    keys = sorted(set.intersection(*(set(t) for t in tables)))
    if not keys:
        return None
    nll = np.array([[table[k][0] for k in keys] for table in tables], dtype=np.float64)
    sizes = np.array([tables[0][k][1] for k in keys], dtype=np.float64)
    return nll, sizes, keys


def _bootstrap_se(values: np.ndarray, sizes: np.ndarray, resamples: int, seed: int) -> float:
    """Standard error of sum(mean-over-seeds values) / sum(bytes) / ln 2 over documents."""
    rng = np.random.default_rng(seed)
    mean = values.mean(axis=0)
    count = len(sizes)
    weights = rng.multinomial(count, np.full(count, 1.0 / count), size=resamples)
    replicates = (weights @ mean) / (weights @ sizes) / LN2
    return float(np.std(replicates, ddof=1))


def combine(
    effects: Sequence[float],
    se_documents: float,
    n_documents: int,
    confidence: float,
    method: str,
) -> dict[str, Any]:
    """Interval from per-seed effects and a document standard error (Welch-Satterthwaite)."""
    from scipy.stats import t as student_t

    n = len(effects)
    effect = float(np.mean(effects))
    se_seeds = float(np.std(effects, ddof=1) / math.sqrt(n)) if n > 1 else float("nan")
    parts = [(se_documents**2, max(n_documents - 1, 1))]
    if n > 1:
        parts.append((se_seeds**2, n - 1))
    variance = sum(v for v, _ in parts)
    denominator = sum(v * v / df for v, df in parts)
    df = variance * variance / denominator if denominator > 0 else float(n - 1 or 1)
    quantile = float(student_t.ppf(1.0 - (1.0 - confidence) / 2, df)) if variance > 0 else 0.0
    half = quantile * math.sqrt(variance)
    if n == 1:
        method += ", one seed: seed noise not measured"
    return {
        "effect": effect,
        "lower": effect - half,
        "upper": effect + half,
        "confidence": confidence,
        "se_documents": se_documents,
        "se_seeds": None if math.isnan(se_seeds) else se_seeds,
        "df": float(df),
        "n_documents": n_documents,
        "n_seeds": n,
        "per_seed": [float(e) for e in effects],
        "method": method,
    }


def _by_seed(runs: Sequence[Mapping[str, Any]]) -> dict[int, Mapping[str, Any]]:
    return {int(run["seed"]): run for run in runs}


def paired_effect(
    runs_a: Sequence[Mapping[str, Any]],
    runs_b: Sequence[Mapping[str, Any]],
    metric: str,
    confidence: float = 0.9,
    lower_is_better: bool = True,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> dict[str, Any] | None:
    """How much A beats B on `metric` (positive: A better), over the seeds both ran, with its
    interval; None when they share no seed with a finite result."""
    a, b = _by_seed(runs_a), _by_seed(runs_b)
    seeds = sorted(s for s in set(a) & set(b) if _finite(a[s], metric) and _finite(b[s], metric))
    if not seeds:
        return None
    pairs = [a[s] for s in seeds] + [b[s] for s in seeds]
    matrix = document_matrix(pairs, metric)
    if matrix is None:
        sign = 1.0 if lower_is_better else -1.0
        effects = [sign * (b[s]["metrics"][metric] - a[s]["metrics"][metric]) for s in seeds]
        return {**combine(effects, 0.0, 0, confidence, "seeds (no per-document results)")}
    nll, sizes, _ = matrix
    diff = nll[len(seeds) :] - nll[: len(seeds)]
    effects = diff.sum(axis=1) / sizes.sum() / LN2
    se_docs = _bootstrap_se(diff, sizes, resamples, seed)
    result = combine(effects.tolist(), se_docs, len(sizes), confidence, "paired documents + seeds")
    result["seeds"] = seeds
    return result


def recipe_interval(
    runs: Sequence[Mapping[str, Any]],
    metric: str,
    confidence: float = 0.9,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> dict[str, Any] | None:
    """A recipe's own bpb on `metric` (mean over seeds) with its interval (documents + seeds)."""
    usable = [r for r in runs if _finite(r, metric)]
    matrix = document_matrix(usable, metric)
    if matrix is None:
        if not usable:
            return None
        values = [float(r["metrics"][metric]) for r in usable]
        return combine(values, 0.0, 0, confidence, "seeds (no per-document results)")
    nll, sizes, _ = matrix
    values = nll.sum(axis=1) / sizes.sum() / LN2
    se_docs = _bootstrap_se(nll, sizes, resamples, seed)
    return combine(values.tolist(), se_docs, len(sizes), confidence, "documents + seeds")


def _finite(run: Mapping[str, Any], metric: str) -> bool:
    value = (run.get("metrics") or {}).get(metric)
    return value is not None and math.isfinite(float(value))


def pct(level: float) -> str:
    """A confidence level as computed: 0.975 is `97.5%` (never rounded up to `98%`), 0.98333...
    `98.33%`."""
    return f"{100 * float(level):.4g}%"


def describe(result: Mapping[str, Any], unit: str = "") -> str:
    """`0.0123 bpb (97.5% two-sided interval 0.0040..0.0206; 600 documents, 3 seeds)`."""
    docs = f"{result['n_documents']} documents, " if result["n_documents"] else ""
    return (
        f"{result['effect']:.4f}{unit} ({pct(result['confidence'])} two-sided interval "
        f"{result['lower']:.4f}..{result['upper']:.4f}; {docs}{result['n_seeds']} seed(s))"
    )
