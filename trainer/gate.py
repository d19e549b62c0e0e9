"""The gate on full-size launches: `check_gate` refuses (GateRefused, naming what is missing) a
`run.kind: full` config unless the ablation report used the same tokenizer and data as its
mixture, chose its recipe hash, and passes the `gate` criteria recomputed by `decide`
(trainer/gate_rule.py) from the report's per-run results, not from its `passed` flag."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pretrain.artifacts import ablation as ablation_artifact
from pretrain.artifacts import mixture as mixture_artifact
from pretrain.artifacts import tokenizer as tokenizer_artifact
from pretrain.errors import ArtifactError, GateRefused
from trainer.gate_rule import CRITERIA_DEFAULTS, decide

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
        mixture = mixture_artifact.open(mixture_dir)
    except ArtifactError as exc:
        raise GateRefused(f"data.mixture_dir = {mixture_dir}: {exc}") from None
    identity = {"mixture_dir": str(mixture_dir), **mixture.identity}
    if data.get("tokenizer_dir"):
        try:
            pinned = tokenizer_artifact.open(data["tokenizer_dir"]).sha256
        except ArtifactError as exc:
            raise GateRefused(f"data.tokenizer_dir = {data['tokenizer_dir']}: {exc}") from None
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
        report = ablation_artifact.open(root)
        return report.report_json, report.manifest_sha256
    except ArtifactError as exc:
        raise GateRefused(f"gate.report_dir = {root}: {exc}") from None
    except (ValueError, TypeError) as exc:  # report.json not JSON, or not an object
        raise _edited(root, exc) from None


def _edited(report_dir: str | Path, exc: Exception) -> GateRefused:
    """The refusal of a report whose fields are not what `pretrain ablate` writes (a report
    edited, its hash and seal redone, or written by something else): never a traceback."""
    return GateRefused(
        f"gate.report_dir = {report_dir}: report.json does not hold what `pretrain ablate` "
        f"writes ({type(exc).__name__}: {exc}); it was edited or damaged: {ABLATE_HINT} again"
    )


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
    primary = report["primary_proxy"]
    criteria = {
        **dict(report.get("criteria") or {}),
        **{k: v for k, v in gate.items() if k in CRITERIA_DEFAULTS},
    }
    criteria["metric"] = metric
    # Every run, health recomputed here; agreement between scales is the report's table (hashed
    # by its manifest) as recorded.
    scale = report.get("scale_agreement")
    decision = decide(
        report.get("runs", []),
        summary[primary],
        report["base_recipe_sha256"],
        criteria,
        scale,
        primary,
    )
    if not decision["passed"]:
        raise GateRefused(
            f"ablation report {root} does not pass the gate criteria: {decision['refusal']}; "
            "rerun unhealthy runs, run more seeds, eval documents or recipes, relax "
            "gate.min_improvement / gate.confidence / the constraints, or --override-gate"
        )
    if decision["chosen"]["recipe_sha256"] != report["chosen_recipe_sha256"]:
        raise GateRefused(
            f"the gate's criteria (gate.metric = {metric!r}) choose "
            f"{decision['chosen']['recipe_name']}, but the report chose "
            f"{report.get('chosen_recipe_name')} on {report.get('target_metric')}; align "
            "gate.* with the ablation's criteria"
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
    try:
        _check_match(report, identity, str(report_dir))
        decision = _check_criteria(report, gate, str(report_dir))
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        raise _edited(str(report_dir), exc) from None
    return {
        "status": "passed",
        "verdict": decision["verdict"],
        "report_dir": str(Path(report_dir).resolve()),
        "report_manifest_sha256": report_sha,
        "chosen_recipe_sha256": report["chosen_recipe_sha256"],
        "tokenizer_sha256": report["tokenizer_sha256"],
        "data_manifest_sha256": report["data_manifest_sha256"],
        "criteria": decision["criteria"],
        "improvement": decision["improvement"],
        "interval": decision["interval"],
        "pairs": [
            {"pair": c["pair"], "interval": c["interval"], "passed": c["passed"]}
            for c in decision["comparisons"]
        ],
        "evidence": decision["evidence"],
    }
