"""`pretrain mixture build`: recipe + encoded data -> the mixture artifact (pretrain/artifacts/
mixture.py), with `summary.json` (per phase and component: quota, sequences, tokens, epochs) and,
of a re-plan, `replan.json` (what was kept and what re-allocated)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mixtures import sequence_plan as planning
from mixtures.recipe import MixtureConfig, build_sha256, check_recipe, recipe_sha256
from mixtures.selection import load_sidecars, select_components, select_sha256
from pretrain.artifacts import encoded as encoded_artifact
from pretrain.artifacts import evalset as evalset_artifact
from pretrain.artifacts import mixture as mixture_kind
from pretrain.artifacts import tokenizer as tokenizer_artifact
from pretrain.artifacts.base import write_artifact
from pretrain.config import config_dict
from pretrain.errors import ArtifactError, ConfigError
from pretrain.locking import output_lock
from pretrain.manifest import load_manifest, manifest_sha256
from pretrain.output_check import require_own_output
from pretrain.progress import Progress
from pretrain.publish import publishing
from pretrain.storage import write_json
from tokenizer.lock import check_match

TOKENS_PER_PARAM = (15.0, 30.0)


@dataclass
class BuildResult:
    directory: Path
    manifest: dict[str, Any]
    summary: dict[str, Any]
    warnings: list[str] = field(default_factory=list)


def index_name(phase_number: int, phase_name: str) -> str:
    return f"index/{phase_number}-{phase_name}.npy"


def verify_encoded(encoded_dir: Path) -> dict[str, Any]:
    """Every file's bytes against the manifest (through the hash cache), prefixes confined."""
    if not encoded_dir.exists():
        raise ArtifactError(
            f"build.encoded: {encoded_dir} does not exist; run `pretrain "
            "tokenizer encode` first or fix the path"
        )
    kind = load_manifest(encoded_dir)["kind"]
    if kind != encoded_artifact.KIND:
        raise ArtifactError(
            f"build.encoded: {encoded_dir} is a {kind!r} artifact, "
            "not 'encoded'; pass the output of `pretrain tokenizer encode`"
        )
    return encoded_artifact.open(encoded_dir).raw


def check_tokenizer(config: MixtureConfig, encoded_manifest: dict[str, Any]) -> dict[str, Any]:
    """The encoded data's tokenizer, after checking it against the pin and the tokenizer dir."""
    recorded = encoded_manifest.get("tokenizer") or {}
    what = f"the encoded data {config.build.encoded}"
    given: list[tuple[str, Any]] = []
    if config.build.tokenizer is not None:
        given.append(("build.tokenizer", tokenizer_artifact.open(config.build.tokenizer).info))
    if config.build.tokenizer_sha256 is not None:
        given.append(("build.tokenizer_sha256", config.build.tokenizer_sha256))
    if not given:
        raise ConfigError(
            f"build.tokenizer_sha256 is not set; pin the tokenizer the mixture is "
            f"built for (the encoded data records {recorded.get('sha256')})"
        )
    for _, value in given:
        check_match(recorded, value, what)
    return dict(recorded)


def tokens_per_parameter(config: MixtureConfig) -> tuple[float | None, str | None]:
    params = config.build.model_params
    if params is None:
        return None, None
    ratio = config.build.total_tokens / params
    low, high = TOKENS_PER_PARAM
    warning = None
    if not low <= ratio <= high:
        warning = (
            f"{ratio:.3g} tokens per parameter is outside {low:g}-{high:g} "
            f"(build.total_tokens={config.build.total_tokens:,}, "
            f"build.model_params={params:,.0f})"
        )
    return ratio, warning


@dataclass
class Prepared:
    """Everything `build_mixture` checks and computes before it writes (`--dry-run` stops here)."""

    encoded_dir: Path
    tokenizer: dict[str, Any]
    exclude: frozenset[str]
    docs: list[np.ndarray]
    old: mixture_kind.Mixture | None
    plan: planning.Plan


def prepare(config: MixtureConfig) -> Prepared:
    """Check `out` (new, empty, or a mixture: replaced), validate the recipe, verify the encoded
    data and tokenizer, select and plan (feasibility). `--dry-run` runs this too."""
    # before any work, and by the dry run
    require_own_output(Path(config.out), "out:", mixture_kind.KIND)
    check_recipe(config)
    encoded_dir = Path(config.build.encoded)
    encoded_manifest = verify_encoded(encoded_dir)
    tokenizer = check_tokenizer(config, encoded_manifest)
    sidecars = load_sidecars(encoded_dir, list(encoded_manifest.get("prefixes") or []))
    # training ids the eval sets found to be near-copies of eval documents
    evalsets = [evalset_artifact.open(d) for d in config.build.decontaminate]
    exclude = frozenset().union(*(evalset.contaminated_ids() for evalset in evalsets))
    docs = select_components(config.recipe.components, sidecars, exclude)
    old = planning.load_old(config) if config.replan is not None else None
    plan = planning.make_plan(config, docs, old)
    return Prepared(encoded_dir, tokenizer, exclude, docs, old, plan)


def build_mixture(config: MixtureConfig) -> BuildResult:
    """Validate, select, plan, write the artifact; returns its manifest and summary."""
    with output_lock(config.out):
        prepared = prepare(config)
        encoded_dir, tokenizer, exclude = prepared.encoded_dir, prepared.tokenizer, prepared.exclude
        docs, old, plan = prepared.docs, prepared.old, prepared.plan
        out = Path(config.out)
        with publishing(out) as staging:  # at every instant `out` is the old mixture or the new
            (staging / "index").mkdir()
            (staging / "components").mkdir()
            _write_body(staging, config, docs, plan)
            encoded_sha = manifest_sha256(encoded_dir)
            build_hash = build_sha256(
                config,
                tokenizer_sha256=tokenizer.get("sha256", ""),
                encoded_sha256=encoded_sha,
                replan_from=old.fields.build_sha256 if old else None,
            )
            fields = _manifest_fields(
                config, tokenizer, encoded_sha, build_hash, docs, plan, len(exclude)
            )
            inputs = [encoded_dir] + ([Path(config.replan.mixture)] if config.replan else [])
            inputs += [Path(d) for d in config.build.decontaminate]
            manifest = write_artifact(
                staging, fields, config=config_dict(config), inputs=inputs, counts=plan.counts()
            )
        ratio, warning = tokens_per_parameter(config)
        summary = plan.summary
        summary["tokens_per_parameter"] = ratio
        return BuildResult(out, manifest, summary, [warning] if warning else [])


def _write_body(
    staging: Path, config: MixtureConfig, docs: list[np.ndarray], plan: planning.Plan
) -> None:
    for component, selected in zip(config.recipe.components, docs, strict=True):
        np.save(staging / "components" / f"{component.name}.npy", selected)
    phases = list(enumerate(plan.phases))
    for number, phase in Progress(
        phases,
        desc="mixture index",
        unit="phase",
        disable=plan.counts()["sequences"] < 10_000_000,
    ):
        np.save(staging / index_name(number, phase.name), plan.index(number))
    write_json(staging / "summary.json", plan.summary)
    if plan.replan_report is not None:
        write_json(staging / "replan.json", plan.replan_report)


def _manifest_fields(
    config: MixtureConfig,
    tokenizer: dict[str, Any],
    encoded_sha: str,
    build_hash: str,
    docs: list[np.ndarray],
    plan: planning.Plan,
    excluded: int,
) -> mixture_kind.MixtureFields:
    return mixture_kind.MixtureFields(
        recipe_sha256=recipe_sha256(config.recipe),
        build_sha256=build_hash,
        tokenizer=tokenizer,
        encoded_manifest_sha256=encoded_sha,
        global_batch=config.build.global_batch,
        seed=config.build.seed,
        recipe_name=config.recipe.name,
        phases=[
            mixture_kind.Phase(
                name=p.name,
                seq_length=p.seq_length,
                num_sequences=p.num_sequences,
                index=index_name(i, p.name),
                weights=p.weights,
            )
            for i, p in enumerate(plan.phases)
        ],
        components=[
            mixture_kind.Component(
                name=c.name,
                weight=c.weight,
                max_epochs=c.max_epochs,
                available_tokens=int(d["tokens"].sum()),
                documents=int(d.size),
                select_sha256=select_sha256(c),
            )
            for c, d in zip(config.recipe.components, docs, strict=True)
        ],
        decontaminated={
            "evalsets": [manifest_sha256(d) for d in config.build.decontaminate],
            "excluded_ids": excluded,
        },
    )


def format_summary(result: BuildResult) -> str:
    """The human-readable lines `pretrain mixture build` prints."""
    lines = []
    extra = result.manifest
    lines.append(
        f"mixture {extra['recipe_name']}: recipe {extra['recipe_sha256'][:12]} build "
        f"{extra['build_sha256'][:12]} tokenizer {extra['tokenizer'].get('id')}"
    )
    for phase in result.summary["phases"]:
        lines.append(
            f"  phase {phase['name']}: {phase['num_sequences']:,} sequences x "
            f"{phase['seq_length']} = {phase['tokens']:,} tokens"
        )
        for comp in phase["components"]:
            lines.append(
                f"    {comp['name']:<16} weight {comp['weight']:.4f} sequences "
                f"{comp['sequences']:>10,} epochs {comp['epochs']:.3f}"
            )
    ratio = result.summary.get("tokens_per_parameter")
    if ratio is not None:
        lines.append(f"  tokens per parameter: {ratio:.3g}")
    lines.append(f"  -> {result.directory}")
    return "\n".join(lines)
