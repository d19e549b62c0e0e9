"""The gate on full-size launches: a `run.kind: full` config must be cleared by an ablation report.

`check_gate(train_config_dict, report_dir)` refuses (GateRefused, naming what is missing) unless the
report (a) used the same tokenizer hash and the same data artifacts as the config's mixture,
(b) chose the recipe hash of the config's mixture, and (c) passes the config's `gate` criteria,
recomputed from the report's per-seed results (not trusted from its `passed` flag).

`decide` is the decision rule itself: the ablation report (evals/report.py) applies it to choose
and record a recipe, the gate applies it again here under the launch config's criteria. It lives
with the launcher so that `pretrain launch` reads the ablation artifact without importing evals.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pretrain.errors import ArtifactError, GateRefused
from pretrain.manifest import manifest_sha256, require

LOWER_IS_BETTER_PREFIXES = ("bpb", "loss", "ppl", "perplexity", "nll")


def lower_is_better(metric: str) -> bool:
    """bpb / loss / perplexity fall as models improve; accuracies rise."""
    return metric.split("/")[0].lower().startswith(LOWER_IS_BETTER_PREFIXES)


def _criterion(
    improvement: float, spread: float, min_improvement: float, require_seed_spread: bool
) -> tuple[bool, str]:
    """Whether the improvement over the base clears min_improvement (+ the seed spread)."""
    if not (require_seed_spread or min_improvement > 0):
        return True, "criteria do not require a margin over the alternative"
    if require_seed_spread and math.isnan(spread):
        return False, "one seed per recipe: the seed spread is unknown (run >= 2 seeds)"
    margin = min_improvement + (spread if require_seed_spread else 0.0)
    passed = improvement > margin
    return passed, (
        f"improvement {improvement:.4f} {'>' if passed else '<='} required "
        f"{margin:.4f} (min_improvement {min_improvement} + seed spread "
        f"{spread if require_seed_spread else 0.0:.4f})"
    )


def decide(
    ranking: Sequence[Mapping[str, Any]],
    base_sha: str,
    metric: str,
    min_improvement: float = 0.0,
    require_seed_spread: bool = True,
) -> dict[str, Any]:
    """Choose the best-ranked recipe and test it against the base (the runner-up when the base
    itself is chosen).

    Passed when the criteria ask for no margin (min_improvement 0, no seed spread required), or
    when the chosen recipe beats that alternative by more than min_improvement plus the seed spread
    (the larger sample standard deviation over seeds of the two recipes).
    """
    chosen = ranking[0]
    base = next((row for row in ranking if row["recipe_sha256"] == base_sha), None)
    criteria = {
        "metric": metric,
        "min_improvement": min_improvement,
        "require_seed_spread": require_seed_spread,
        "lower_is_better": lower_is_better(metric),
    }
    evidence: list[str] = [
        f"{chosen['recipe_name']} ranks first on {metric}: mean "
        f"{chosen['mean']:.4f} over {chosen['n_seeds']} seed(s)"
    ]
    if base is None:
        return {
            "chosen": chosen,
            "base": None,
            "criteria": criteria,
            "passed": False,
            "improvement": None,
            "spread": None,
            "evidence": evidence + ["the base recipe has no finished runs"],
        }
    # The chosen recipe must beat its alternative: the base, or (when the base is chosen) the
    # runner-up, so that keeping the base is also a decision the seeds support.
    other = base if chosen is not base else (ranking[1] if len(ranking) > 1 else None)
    if other is None:
        passed, why, improvement, spread = (
            False,
            "only the base recipe ran: nothing to compare",
            None,
            float("nan"),
        )
    else:
        improvement = (1.0 if lower_is_better(metric) else -1.0) * (other["mean"] - chosen["mean"])
        stds = (chosen["std"], other["std"])
        spread = float("nan") if None in stds else max(stds)
        passed, why = _criterion(improvement, spread, min_improvement, require_seed_spread)
        if chosen is base:
            why = f"base kept over runner-up {other['recipe_name']}: {why}"
    evidence.append(f"base {base['recipe_name']}: mean {base['mean']:.4f}, rank {base['rank']}")
    evidence.append(why)
    return {
        "chosen": chosen,
        "base": base,
        "criteria": criteria,
        "passed": bool(passed),
        "improvement": improvement,
        "spread": None if math.isnan(spread) else spread,
        "evidence": evidence,
    }


ABLATE_HINT = "run `pretrain ablate configs/ablation.yaml` on this mixture's data"


def _mixture_identity(config: Mapping[str, Any]) -> dict[str, Any]:
    data = config.get("data") or {}
    mixture_dir = data.get("mixture_dir")
    if not mixture_dir:
        raise GateRefused(
            "data.mixture_dir is not set; a full launch must train on a mixture "
            "artifact the ablation report chose (set data.mixture_dir)"
        )
    try:
        manifest = require(mixture_dir, kind="mixture")
    except ArtifactError as exc:
        raise GateRefused(f"data.mixture_dir = {mixture_dir}: {exc}") from None
    tokenizer = manifest.get("tokenizer") or {}
    identity = {
        "mixture_dir": str(mixture_dir),
        "recipe_sha256": manifest.get("recipe_sha256"),
        "build_sha256": manifest.get("build_sha256"),
        "tokenizer_sha256": tokenizer.get("sha256"),
        "data_manifest_sha256": manifest.get("encoded_manifest_sha256"),
    }
    if data.get("tokenizer_dir"):
        lock = Path(data["tokenizer_dir"]) / "lock.json"
        if lock.is_file():
            from pretrain.manifest import sha256_file

            pinned = sha256_file(lock)
            if identity["tokenizer_sha256"] and pinned != identity["tokenizer_sha256"]:
                raise GateRefused(
                    f"data.tokenizer_dir = {data['tokenizer_dir']} pins tokenizer "
                    f"{pinned[:12]}..., the mixture was encoded with "
                    f"{identity['tokenizer_sha256'][:12]}...; re-encode or fix the pin"
                )
    return identity


def _load_report(report_dir: str | Path | None) -> tuple[dict[str, Any], str]:
    if not report_dir:
        raise GateRefused(
            f"gate.report_dir is not set and no report was given: a full launch "
            f"needs an ablation report; {ABLATE_HINT}, then set gate.report_dir"
        )
    root = Path(report_dir)
    if not (root / "manifest.json").is_file():
        raise GateRefused(
            f"no ablation report at gate.report_dir = {root} (missing "
            f"manifest.json); {ABLATE_HINT}, or pass --override-gate REASON"
        )
    try:
        require(root, kind="ablation")
    except ArtifactError as exc:
        raise GateRefused(f"gate.report_dir = {root}: {exc}") from None
    report = json.loads((root / "report.json").read_text())
    return report, manifest_sha256(root)


def _short(sha: str | None) -> str:
    return f"{sha[:12]}..." if sha else "none"


def _check_match(report: Mapping[str, Any], identity: Mapping[str, Any], root: str) -> None:
    pairs = (
        (
            "tokenizer_sha256",
            "tokenizer hash",
            "re-run the ablation with this tokenizer or "
            "build the mixture with the tokenizer the ablation used",
        ),
        (
            "data_manifest_sha256",
            "data artifact (encoded manifest sha256)",
            "re-run the ablation on this mixture's encoded data",
        ),
    )
    for key, what, fix in pairs:
        if identity.get(key) != report.get(key):
            raise GateRefused(
                f"{what} mismatch: ablation report {root} used {_short(report.get(key))}, "
                f"data.mixture_dir = {identity['mixture_dir']} has "
                f"{_short(identity.get(key))}; {fix}"
            )
    if identity.get("recipe_sha256") != report.get("chosen_recipe_sha256"):
        raise GateRefused(
            f"recipe mismatch: ablation report {root} chose recipe "
            f"{_short(report.get('chosen_recipe_sha256'))} "
            f"({report.get('chosen_recipe_name')}), data.mixture_dir = "
            f"{identity['mixture_dir']} was built from recipe "
            f"{_short(identity.get('recipe_sha256'))}; build the mixture from the "
            "chosen recipe or re-run the ablation including this recipe"
        )


def _check_criteria(report: Mapping[str, Any], gate: Mapping[str, Any], root: str) -> dict:
    metric = gate.get("metric") or report.get("target_metric")
    summary = (report.get("summary") or {}).get(metric)
    if not summary:
        raise GateRefused(
            f"gate.metric = {metric!r}: the ablation report {root} has no results "
            f"for it (it has {', '.join(sorted(report.get('summary') or {}))}); "
            "set gate.metric to one of those or re-run the ablation"
        )
    ranking = summary[report["primary_proxy"]]
    decision = decide(
        ranking,
        report["base_recipe_sha256"],
        metric,
        float(gate.get("min_improvement", 0.0)),
        bool(gate.get("require_seed_spread", True)),
    )
    if decision["chosen"]["recipe_sha256"] != report["chosen_recipe_sha256"]:
        raise GateRefused(
            f"gate.metric = {metric!r} ranks {decision['chosen']['recipe_name']} "
            f"first, but the report chose {report.get('chosen_recipe_name')} on "
            f"{report.get('target_metric')}; align gate.metric with the ablation"
        )
    if not decision["passed"]:
        raise GateRefused(
            f"ablation report {root} does not pass the gate criteria: "
            f"{decision['evidence'][-1]}; run more seeds or recipes, relax "
            "gate.min_improvement / gate.require_seed_spread, or --override-gate"
        )
    return decision


def check_gate(train_config_dict: Mapping[str, Any], report_dir: str | Path | None = None) -> dict:
    """Clear a full-size launch or raise GateRefused naming what is missing.

    Returns what the run's manifest should record under `gate`: the report's manifest sha256, the
    chosen recipe, tokenizer and data hashes, the criteria and the evidence.
    """
    gate = train_config_dict.get("gate") or {}
    report_dir = report_dir if report_dir is not None else gate.get("report_dir")
    report, report_sha = _load_report(report_dir)
    identity = _mixture_identity(train_config_dict)
    _check_match(report, identity, str(report_dir))
    decision = _check_criteria(report, gate, str(report_dir))
    return {
        "status": "passed",
        "report_dir": str(Path(report_dir).resolve()),
        "report_manifest_sha256": report_sha,
        "chosen_recipe_sha256": report["chosen_recipe_sha256"],
        "tokenizer_sha256": report["tokenizer_sha256"],
        "data_manifest_sha256": report["data_manifest_sha256"],
        "criteria": decision["criteria"],
        "improvement": decision["improvement"],
        "spread": decision["spread"],
        "evidence": decision["evidence"],
    }
