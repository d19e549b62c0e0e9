"""The ablation's decision (`decide`), applied by the report and again by the launch gate: healthy
runs only (`run_health`), seed outliers refuse; the best-ranked recipe passes when its paired
interval (trainer/gate_stats.py) against EACH alternative clears `min_improvement` and every
constraint holds; the verdict says which case holds."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from trainer.config import CriteriaConfig
from trainer.gate_stats import describe, false_pass_rate, paired_effect, pct, selection_confidence

LOWER_IS_BETTER_PREFIXES = ("bpb", "loss", "ppl", "perplexity", "nll")
CRITERIA_DEFAULTS: dict[str, Any] = CriteriaConfig().model_dump()
OUTLIER_Z = 10.0
"""A seed is an outlier when |value - its recipe's median| > OUTLIER_Z x 1.4826 x MAD, the MAD
pooled over every recipe of that proxy (a modified z-score, Iglewicz and Hoaglin 1993). Not their
3.5: from 3 to 16 distances the MAD is itself noisy, and with normal seed noise 3.5 flags a seed
in 6-11% of sweeps of 2-8 recipes x 2-5 seeds, 10 in under 1% (simulated, 20k sweeps each). The
sweep's untrained checkpoint scored z ~ 65."""
OUTLIER_RULE = (
    f"|value - recipe median| > {OUTLIER_Z} x 1.4826 x MAD of the seeds' distances from their "
    "recipe's median, pooled over the proxy's recipes"
)
VERDICT_SHOWN = "shown better than every alternative"
VERDICT_BASE_BEST = "base shown best"
VERDICT_KEEP_BASE = "no recipe shown better than base"
VERDICT_UNDECIDED = "not decided"


def domain_metrics(runs: Sequence[Mapping[str, Any]]) -> list[str]:
    """`bpb/<domain>/<lang>` of every eval set the runs were scored on."""
    return sorted(
        {m for run in runs for m in run["metrics"] if m.count("/") == 2 and m.startswith("bpb/")}
    )


def lower_is_better(metric: str) -> bool:
    """bpb / loss / perplexity fall as models improve; accuracies rise."""
    return metric.split("/")[0].lower().startswith(LOWER_IS_BETTER_PREFIXES)


def criteria_from(values: Mapping[str, Any]) -> dict[str, Any]:
    """The decision criteria (defaults filled in) from a config section (ablation or gate)."""
    criteria = dict(CRITERIA_DEFAULTS)
    criteria.update({k: v for k, v in values.items() if k in CRITERIA_DEFAULTS})
    for key in ("metric", "min_improvement", "confidence", "require_seed_spread"):
        if criteria[key] is None:
            criteria[key] = CRITERIA_DEFAULTS[key]
    criteria["lower_is_better"] = lower_is_better(criteria["metric"])
    criteria["false_pass_rate"] = false_pass_rate(float(criteria["confidence"]))
    return criteria


# ----- run health and outliers -------------------------------------------------------------------
def run_health(run: Mapping[str, Any], min_token_fraction: float) -> list[str]:
    """Why a run is not evidence (empty: healthy). `health` is what evals/proxy.py records."""
    health = run.get("health")
    if not isinstance(health, Mapping):
        return ["records no run health (scored step, steps and tokens trained): run it again"]
    problems = []
    scored, trained = health.get("scored_step"), health.get("trained_steps")
    if scored is None or scored != trained:
        problems.append(f"scored at step {scored}, but trained to step {trained}")
    tokens, planned = health.get("tokens_trained") or 0, health.get("planned_tokens") or 0
    if not planned or tokens < float(min_token_fraction) * planned:
        share = f"{tokens / planned:.1%}" if planned else "?"
        problems.append(
            f"trained {tokens} of {planned} planned tokens ({share} < min_token_fraction "
            f"{min_token_fraction})"
        )
    return problems


def run_label(run: Mapping[str, Any]) -> str:
    return f"{run.get('recipe_name')} / {run.get('proxy')} / seed {run.get('seed')}"


def split_health(
    runs: Sequence[Mapping[str, Any]], criteria: Mapping[str, Any]
) -> tuple[list[Mapping[str, Any]], list[dict[str, Any]]]:
    """(healthy runs, one row per unhealthy run: who, why, how it ended)."""
    fraction = float(criteria.get("min_token_fraction") or CRITERIA_DEFAULTS["min_token_fraction"])
    healthy, unhealthy = [], []
    for run in runs:
        problems = run_health(run, fraction)
        if not problems:
            healthy.append(run)
            continue
        recorded = run.get("health")
        health: Mapping[str, Any] = recorded if isinstance(recorded, Mapping) else {}
        unhealthy.append(
            {
                "run": run_label(run),
                "run_key": run.get("run_key"),
                "recipe_sha256": run.get("recipe_sha256"),
                "problems": problems,
                "ended": health.get("ended"),
                "rollbacks": health.get("rollbacks"),
                "skipped_batches": health.get("skipped_batches"),
            }
        )
    return healthy, unhealthy


def seed_outliers(runs: Sequence[Mapping[str, Any]], metric: str) -> list[dict[str, Any]]:
    """Runs whose `metric` sits far outside the seed spread (`OUTLIER_RULE`), per proxy."""
    grouped: dict[str, dict[str, list[Mapping[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for run in runs:
        if metric in run["metrics"]:
            grouped[run["proxy"]][run["recipe_sha256"]].append(run)
    found = []
    for proxy, by_recipe in sorted(grouped.items()):
        distances: list[float] = []
        rows: list[tuple[Mapping[str, Any], float, float]] = []
        for recipe_runs in by_recipe.values():
            if len(recipe_runs) < 2:
                continue
            values = np.array([float(r["metrics"][metric]) for r in recipe_runs])
            median = float(np.median(values))
            gaps = np.abs(values - median)
            # with an odd count the median seed is at distance 0 by construction: not a spread
            distances += sorted(gaps.tolist())[1:] if len(values) % 2 else gaps.tolist()
            rows += [(run, value, median) for run, value in zip(recipe_runs, values.tolist())]
        mad = float(np.median(distances)) if distances else 0.0
        if mad <= 0:
            continue
        for run, value, median in rows:
            z = abs(value - median) / (1.4826 * mad)
            if z > OUTLIER_Z:
                found.append(
                    {
                        "run": run_label(run),
                        "run_key": run.get("run_key"),
                        "recipe_sha256": run["recipe_sha256"],
                        "proxy": proxy,
                        "value": value,
                        "recipe_median": median,
                        "modified_z": round(z, 2),
                    }
                )
    return found


# ----- one pair ----------------------------------------------------------------------------------
def _runs_of(runs: Sequence[Mapping[str, Any]], sha: str) -> list[Mapping[str, Any]]:
    return [run for run in runs if run["recipe_sha256"] == sha]


def _improvement_check(
    effect: dict[str, Any] | None, criteria: Mapping[str, Any]
) -> tuple[bool, str]:
    if effect is None:
        return False, "the two recipes share no seed with a result: nothing to compare"
    if effect["n_seeds"] < 2 and criteria["require_seed_spread"]:
        return False, (
            "one seed per recipe: the seed noise is unknown (run >= 2 seeds, or set "
            "require_seed_spread: false to accept a documents-only interval)"
        )
    bound, margin = effect["lower"], float(criteria["min_improvement"])
    passed = bound > margin
    return passed, (
        f"improvement {describe(effect)}: lower bound {bound:.4f} "
        f"{'>' if passed else '<='} min_improvement {margin}"
    )


def _domain_checks(
    chosen: Sequence[Mapping[str, Any]],
    other: Sequence[Mapping[str, Any]],
    criteria: Mapping[str, Any],
) -> tuple[list[dict[str, Any]], list[str]]:
    """Per eval set: chosen minus alternative bpb (positive: chosen worse), and the failures of
    `max_domain_regression` (its upper bound above the limit)."""
    limit = criteria.get("max_domain_regression")
    rows, failures = [], []
    for metric in domain_metrics(chosen):
        effect = paired_effect(chosen, other, metric, float(criteria["confidence"]))
        if effect is None:
            continue
        regression = {
            "domain": metric[4:],
            "regression": -effect["effect"],
            "upper": -effect["lower"],
            "lower": -effect["upper"],
            "n_documents": effect["n_documents"],
            "n_seeds": effect["n_seeds"],
        }
        rows.append(regression)
        if limit is not None and regression["upper"] > float(limit):
            failures.append(
                f"constraint max_domain_regression {limit} failed on {regression['domain']}: "
                f"chosen worse by {regression['regression']:.4f} bpb "
                f"(upper end of the {pct(effect['confidence'])} two-sided interval "
                f"{regression['upper']:.4f})"
            )
    return rows, failures


def _scale_check(
    scale: Mapping[str, Any] | None, chosen: str, other: str, criteria: Mapping[str, Any]
) -> str | None:
    """A failure line when require_scale_agreement is set, two scales ran, and this pair's
    decision flips between them or its small-scale margin is inside the noise (or it did not run
    at both scales)."""
    if not criteria.get("require_scale_agreement") or not scale:
        return None
    pair = next((p for p in scale.get("pairs") or [] if {p["a"], p["b"]} == {chosen, other}), None)
    if pair is None:
        return "require_scale_agreement: the pair did not run at both scales"
    if pair["flags"]:
        small, large = scale["proxies"][:2]
        return (
            f"require_scale_agreement: {'; '.join(pair['flags'])} ({small} picks "
            f"{pair['small_winner_name']}, {large} picks {pair['large_winner_name']})"
        )
    return None


def _compare(
    chosen: Mapping[str, Any],
    other: Mapping[str, Any],
    runs: Sequence[Mapping[str, Any]],
    level: float,
    criteria: Mapping[str, Any],
    scale: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The chosen recipe against one alternative: interval, domains, scale agreement."""
    chosen_runs = _runs_of(runs, chosen["recipe_sha256"])
    other_runs = _runs_of(runs, other["recipe_sha256"])
    effect = paired_effect(
        chosen_runs, other_runs, criteria["metric"], level, criteria["lower_is_better"]
    )
    cleared, why = _improvement_check(effect, criteria)
    domains, failures = _domain_checks(chosen_runs, other_runs, criteria)
    scale_failure = _scale_check(scale, chosen["recipe_sha256"], other["recipe_sha256"], criteria)
    failures += [scale_failure] if scale_failure else []
    return {
        "pair": f"{chosen['recipe_name']} vs {other['recipe_name']}",
        "alternative": other["recipe_name"],
        "alternative_sha256": other["recipe_sha256"],
        "interval": effect,
        "cleared": cleared,
        "passed": bool(cleared and not failures),
        "why": why,
        "failed_constraints": failures,
        "domains": domains,
    }


def _beats_base(
    ranking: Sequence[Mapping[str, Any]],
    base: Mapping[str, Any],
    runs: Sequence[Mapping[str, Any]],
    level: float,
    criteria: Mapping[str, Any],
) -> list[str]:
    """Names of the recipes whose paired interval over the base clears min_improvement."""
    names = []
    for row in ranking:
        if row is base:
            continue
        effect = paired_effect(
            _runs_of(runs, row["recipe_sha256"]),
            _runs_of(runs, base["recipe_sha256"]),
            criteria["metric"],
            level,
            criteria["lower_is_better"],
        )
        if _improvement_check(effect, criteria)[0]:
            names.append(row["recipe_name"])
    return names


# ----- the decision ------------------------------------------------------------------------------
def _verdict(
    chosen: Mapping[str, Any], base: Mapping[str, Any], shown: bool, beat_base: list[str]
) -> str:
    if shown:
        return VERDICT_BASE_BEST if chosen is base else f"{chosen['recipe_name']} {VERDICT_SHOWN}"
    return VERDICT_UNDECIDED if beat_base else VERDICT_KEEP_BASE


def _refusal(
    verdict: str,
    leader: Mapping[str, Any],
    comparisons: Sequence[Mapping[str, Any]],
    beat_base: list[str],
    bad: Sequence[str],
) -> str:
    """One line: what was (not) decided and on which pairs."""
    failing = [c for c in comparisons if not c["passed"]]
    pairs = "; ".join(
        f"{c['pair']}: {(c['failed_constraints'] or [c['why']])[0]}"
        if c["cleared"]
        else f"{c['pair']}: {c['why']}"
        for c in failing
    )
    if verdict == VERDICT_KEEP_BASE:
        head = f"{verdict} (and {leader['recipe_name']}, first, not shown best)"
    elif verdict == VERDICT_UNDECIDED:
        head = (
            f"{verdict}: {', '.join(beat_base)} shown better than base, but "
            f"{leader['recipe_name']} not shown better than every alternative"
        )
    else:
        head = f"{verdict}, but the evidence is not sound"
    return "; ".join([head, *bad, *([pairs] if pairs else [])])


def decide(
    runs: Sequence[Mapping[str, Any]],
    ranking: Sequence[Mapping[str, Any]],
    base_sha: str,
    criteria: Mapping[str, Any],
    scale: Mapping[str, Any] | None = None,
    primary: str | None = None,
) -> dict[str, Any]:
    """Test the best-ranked recipe against every alternative, on healthy runs only.

    `runs`: every run of the sweep (all proxies; unhealthy ones are found here and refuse);
    `ranking`: the `primary` proxy's recipes, best first (from healthy runs); `scale`: the
    report's scale-agreement table (None with one proxy). Passed when the leader's paired
    interval against each alternative clears min_improvement with every constraint holding,
    and no run is unhealthy or a seed outlier.
    """
    criteria = criteria_from(criteria)
    healthy, unhealthy = split_health(runs, criteria)
    outliers = seed_outliers(healthy, criteria["metric"])
    deciding = [r for r in healthy if primary is None or r["proxy"] == primary]
    leader = ranking[0]
    base = next((row for row in ranking if row["recipe_sha256"] == base_sha), None)
    result: dict[str, Any] = {
        "chosen": leader,
        "leader": leader,
        "base": base,
        "criteria": criteria,
        "passed": False,
        "verdict": VERDICT_UNDECIDED,
        "comparisons": [],
        "improvement": None,
        "interval": None,
        "domains": [],
        "failed_constraints": [],
        "unhealthy_runs": unhealthy,
        "outliers": outliers,
    }
    evidence = [
        f"{leader['recipe_name']} ranks first on {criteria['metric']}: mean "
        f"{leader['mean']:.4f} over {leader['n_seeds']} seed(s)"
    ]
    bad = [f"unhealthy run left out: {u['run']}: {'; '.join(u['problems'])}" for u in unhealthy]
    bad += [
        f"seed outlier: {o['run']}: {criteria['metric']} {o['value']:.4f} against its recipe's "
        f"median {o['recipe_median']:.4f} (modified z {o['modified_z']} > {OUTLIER_Z})"
        for o in outliers
    ]
    if base is None or len(ranking) < 2:
        why = (
            "the base recipe has no healthy runs"
            if base is None
            else "only the base recipe ran: nothing to compare"
        )
        return {**result, "evidence": [*evidence, *bad, why], "refusal": "; ".join([why, *bad])}
    level = selection_confidence(float(criteria["confidence"]), len(ranking))
    comparisons = [
        _compare(leader, other, deciding, level, criteria, scale) for other in ranking[1:]
    ]
    shown = all(c["passed"] for c in comparisons)
    beat_base = _beats_base(ranking, base, deciding, level, criteria) if not shown else []
    verdict = _verdict(leader, base, shown, beat_base)
    chosen = base if verdict == VERDICT_KEEP_BASE else leader
    first = next((c for c in comparisons if c["alternative_sha256"] == base_sha), comparisons[0])
    evidence += [f"{c['pair']}: {c['why']}" for c in comparisons]
    evidence += [f"{c['pair']}: {f}" for c in comparisons for f in c["failed_constraints"]]
    evidence += bad
    passed = shown and not bad
    evidence.append(
        f"verdict: {verdict}"
        + (f" ({len(comparisons)} pair(s))" if passed else "")
        + (f"; keeping {base['recipe_name']}" if verdict == VERDICT_KEEP_BASE else "")
    )
    return {
        **result,
        "chosen": chosen,
        "passed": passed,
        "verdict": verdict,
        "comparisons": comparisons,
        "alternative": next(
            r for r in ranking if r["recipe_sha256"] == first["alternative_sha256"]
        ),
        "improvement": first["interval"]["effect"] if first["interval"] else None,
        "interval": first["interval"],
        "domains": first["domains"],
        "failed_constraints": [
            f"{c['pair']}: {f}" for c in comparisons for f in c["failed_constraints"]
        ],
        "evidence": evidence,
        "refusal": None if passed else _refusal(verdict, leader, comparisons, beat_base, bad),
    }
