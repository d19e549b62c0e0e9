"""Ablation planning and caching: recipes, Dirichlet samples, run keys, cached results, report.

The proxy runner here is a deterministic function of the weights (the real runner, which trains
with `pretrain launch`, is exercised in test_ablate_e2e.py); what is tested is the orchestration.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from evals.ablation_plan import AblationConfig, DirichletConfig, dirichlet_recipes, plan_recipes
from evals.ablation_run import make_specs, run_sweep, runs_dir
from evals.proxy import load_finished
from pretrain.config import parse_config
from pretrain.errors import ConfigError
from pretrain.manifest import verify, write_manifest
from pretrain.storage import write_json
from tests.evals.conftest import healthy

MIXTURE = {
    "recipe": {
        "name": "mix",
        "components": [
            {"name": "web", "select": {"domain": ["web"]}, "weight": 0.6},
            {"name": "code", "select": {"domain": ["code"]}, "weight": 0.4},
        ],
    },
    "build": {
        "encoded": None,
        "tokenizer_sha256": "a" * 64,
        "total_tokens": 10**6,
        "seq_length": 32,
        "global_batch": 4,
    },
    "out": "mix-out",
}


def _setup(tmp_path: Path, **overrides) -> AblationConfig:
    encoded = tmp_path / "encoded"
    encoded.mkdir()
    (encoded / "x.bin").write_bytes(b"tokens")
    write_manifest(encoded, "encoded")
    evalset = tmp_path / "evalset"
    (evalset / "sets").mkdir(parents=True)
    write_manifest(evalset, "evalset", extra={"sets": []})
    mixture = {**MIXTURE, "build": {**MIXTURE["build"], "encoded": str(encoded)}}
    (tmp_path / "mix.yaml").write_text(yaml.safe_dump(mixture))
    train = {
        "run": {"kind": "proxy"},
        "model": {"seq_length": 32, "hidden_size": 32},
        "batch": {"global_batch_size": 4},
    }
    (tmp_path / "train.yaml").write_text(yaml.safe_dump(train))
    data = {
        "out": str(tmp_path / "ablation"),
        "mixture": str(tmp_path / "mix.yaml"),
        "train": str(tmp_path / "train.yaml"),
        "eval_sets": str(evalset),
        "variants": [{"name": "code-heavy", "weights": {"web": 1, "code": 3}}],
        "dirichlet": {"count": 3, "seed": 7, "concentration": 5},
        "proxies": [
            {"name": "tiny", "overrides": {"model.hidden_size": 16}},
            {"name": "small", "overrides": {"model.hidden_size": 64}},
        ],
        "token_budget": 4 * 32 * 10,
        "seeds": [1, 2],
        "full_run_tokens": 10**6,
        "parallel": "sequential",
        **overrides,
    }
    return parse_config(AblationConfig, data)


class Runner:
    """bpb falls with the code weight, a little with model size, plus seed noise."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, spec: dict) -> dict:
        self.calls += 1
        width = 1.0 if spec["proxy"]["name"] == "small" else 0.0
        bpb = 2.0 - spec["weights"]["code"] - 0.1 * width + 0.001 * spec["seed"]
        result = {
            "run_key": spec["run_key"],
            "status": "finished",
            "recipe_sha256": spec["recipe_sha256"],
            "recipe_name": spec["recipe_name"],
            "weights": spec["weights"],
            "proxy": spec["proxy"]["name"],
            "seed": spec["seed"],
            "token_budget": spec["token_budget"],
            "tokenizer_sha256": "a" * 64,
            "data_manifest_sha256": "e" * 64,
            "components": [
                {"name": "web", "weight": spec["weights"]["web"], "available_tokens": 10**5},
                {"name": "code", "weight": spec["weights"]["code"], "available_tokens": 10**5},
            ],
            "metrics": {"bpb": bpb},
            "health": healthy(spec["train_steps"], spec["build"]["total_tokens"]),
        }
        Path(spec["run_dir"]).mkdir(parents=True, exist_ok=True)
        write_json(Path(spec["run_dir"]) / "result.json", result)
        return result


def test_recipes_base_first_variants_normalised_dirichlet_seeded(tmp_path):
    config = _setup(tmp_path)
    plans = plan_recipes(config, MIXTURE)
    assert [p["name"] for p in plans[:2]] == ["base", "code-heavy"]
    assert plans[1]["weights"] == {"web": 0.25, "code": 0.75}
    assert all(abs(sum(p["weights"].values()) - 1) < 1e-9 for p in plans)
    assert all(p["recipe"]["name"] == "mix" for p in plans)  # recipe hash matches the user's
    again = dirichlet_recipes({"web": 0.6, "code": 0.4}, DirichletConfig(count=3, seed=7))
    assert again == dirichlet_recipes({"web": 0.6, "code": 0.4}, DirichletConfig(count=3, seed=7))
    assert again != dirichlet_recipes({"web": 0.6, "code": 0.4}, DirichletConfig(count=3, seed=8))


def test_unknown_component_in_a_variant_is_a_config_error(tmp_path):
    config = _setup(tmp_path, variants=[{"name": "bad", "weights": {"math": 1.0}}])
    with pytest.raises(ConfigError, match="variants.bad.weights: unknown component"):
        plan_recipes(config, MIXTURE)


@pytest.mark.timeout(120)
def test_sweep_caches_by_key_and_writes_a_gateable_report(tmp_path):
    config = _setup(tmp_path)
    runner = Runner()
    report = run_sweep(config, runner=runner)
    specs, _ = make_specs(config)
    # 5 planned recipes, then the regression's predicted best (more code than any recipe run),
    # trained on the same 2 proxies x 2 seeds before it could be chosen
    assert len(specs) == 5 * 2 * 2 and runner.calls == len(specs) + 4
    (prediction,) = report["predictions"]
    code_heavy = max(specs, key=lambda s: s["weights"]["code"])
    assert prediction["weights"]["code"] > code_heavy["weights"]["code"]
    measured = 2.0 - prediction["weights"]["code"] - 0.1 + 0.0015
    assert prediction["measured"] == pytest.approx(measured) and prediction["n_seeds"] == 2
    assert report["chosen_recipe_name"] == "predicted" and prediction["measured_rank"] == 1
    assert report["primary_proxy"] == "small"
    assert report["scale_agreement"]["accuracy"] == 1.0
    assert report["regression"]["status"] == "fitted"
    assert report["passed"] is True
    assert verify(tmp_path / "ablation")["kind"] == "ablation"
    chosen = yaml.safe_load((tmp_path / "ablation" / "chosen_mixture.yaml").read_text())
    assert chosen["recipe"]["components"][1]["weight"] == prediction["weights"]["code"]
    # the full run (10**6 tokens) repeats both 10**5-token components: flagged
    assert report["epoch_flags"] and "cannot subsample" in report["epoch_flags"][0]

    # Second invocation: everything cached (the predicted recipe too), nothing re-run.
    run_sweep(config, runner=runner)
    assert runner.calls == len(specs) + 4
    # A run directory holding another run's result is not trusted: that run alone re-runs.
    victim = Path(specs[3]["run_dir"]) / "result.json"
    data = json.loads(victim.read_text())
    data["run_key"] = "0" * 64
    victim.write_text(json.dumps(data))
    run_sweep(config, runner=runner)
    assert runner.calls == len(specs) + 5


def test_without_confirmation_the_prediction_is_only_reported(tmp_path):
    config = _setup(tmp_path, confirm_predictions=False)
    runner = Runner()
    report = run_sweep(config, runner=runner)
    assert runner.calls == 5 * 2 * 2 and report["predictions"] == []
    assert report["chosen_recipe_name"] == "code-heavy"


@pytest.mark.timeout(120)
def test_pool_runs_side_by_side_with_the_same_report(tmp_path):
    """parallel: pool (2 at once) gives the same runs and decision as sequential."""
    import threading

    class Tracking(Runner):
        def __init__(self) -> None:
            super().__init__()
            self.active, self.peak, self.lock = 0, 0, threading.Lock()

        def __call__(self, spec: dict) -> dict:
            import time

            with self.lock:
                self.active += 1
                self.peak = max(self.peak, self.active)
            time.sleep(0.05)
            try:
                return super().__call__(spec)
            finally:
                with self.lock:
                    self.active -= 1

    pooled = Tracking()
    config = _setup(tmp_path, parallel="pool", max_parallel=2, confirm_predictions=False)
    report = run_sweep(config, runner=pooled)
    assert pooled.peak == 2 and pooled.calls == 20
    (tmp_path / "seq").mkdir()
    sequential = _setup(tmp_path / "seq", parallel="sequential", confirm_predictions=False)
    again = run_sweep(sequential, runner=Runner())
    assert again["chosen_recipe_name"] == report["chosen_recipe_name"]

    def rows(rep: dict) -> list:
        return [(r["recipe_name"], r["proxy"], r["seed"], r["metrics"]) for r in rep["runs"]]

    assert rows(again) == rows(report)


def test_run_keys_change_with_seed_budget_and_proxy_not_with_output_dir(tmp_path):
    config = _setup(tmp_path)
    specs, _ = make_specs(config)
    assert len({s["run_key"] for s in specs}) == len(specs)
    moved = config.model_copy(update={"out": str(tmp_path / "elsewhere")})
    assert [s["run_key"] for s in make_specs(moved)[0]] == [s["run_key"] for s in specs]
    assert runs_dir(moved) != runs_dir(config)
    bigger = config.model_copy(update={"token_budget": config.token_budget * 2})
    assert not {s["run_key"] for s in make_specs(bigger)[0]} & {s["run_key"] for s in specs}
    assert load_finished(Path(specs[0]["run_dir"]), specs[0]["run_key"]) is None


def test_example_configs_validate(repo_root):
    from evals.ablation_plan import AblationConfig as Ablation
    from evals.sets import EvalBuildConfig
    from pretrain.config import load_config

    ablation = load_config(Ablation, repo_root / "configs" / "ablation.yaml")
    assert len(ablation.proxies) == 2 and len(ablation.seeds) >= 2
    evalbuild = load_config(EvalBuildConfig, repo_root / "configs" / "eval.yaml")
    for task in evalbuild.tasks:
        from evals.tasks import load_task

        assert load_task(repo_root / task).examples


@pytest.mark.ray
@pytest.mark.timeout(180)
def test_sweep_runs_through_ray_when_asked(tmp_path, ray_local):
    config = _setup(
        tmp_path,
        parallel="ray",
        cpus_per_run=1,
        dirichlet={"count": 0},
        proxies=[{"name": "tiny", "overrides": {}}],
    )
    report = run_sweep(config, runner=Runner())
    specs, _ = make_specs(config)
    assert len(report["runs"]) == len(specs) == 4
    assert all(load_finished(Path(s["run_dir"]), s["run_key"]) for s in specs)
    assert report["chosen_recipe_name"] == "code-heavy"


def test_base_recipe_hash_is_the_users_even_with_inexact_weights(tmp_path):
    from mixtures.recipe import Recipe, recipe_sha256

    config = _setup(tmp_path)
    mixture = {
        **MIXTURE,
        "recipe": {
            **MIXTURE["recipe"],
            "components": [
                {**MIXTURE["recipe"]["components"][0], "weight": 0.5999999999999999},
                {**MIXTURE["recipe"]["components"][1], "weight": 0.4},
            ],
        },
    }
    plans = plan_recipes(config, mixture)
    users = recipe_sha256(Recipe.model_validate(mixture["recipe"]))
    assert recipe_sha256(Recipe.model_validate(plans[0]["recipe"])) == users


def test_dirichlet_samples_with_every_weight_below_min_weight_keep_their_largest(tmp_path):
    """min_weight zeroed every weight of such a sample: 0 / 0 gave nan weights, and planning
    (`pretrain ablate`, --dry-run too) ended in a pydantic ValidationError traceback."""
    cfg = DirichletConfig(count=8, seed=3, min_weight=0.9)
    recipes = dirichlet_recipes({"web": 0.6, "code": 0.4}, cfg)
    assert all(sorted(r.values()) == [0.0, 1.0] for r in recipes), recipes
    config = _setup(tmp_path, dirichlet=cfg.model_dump())
    specs, _ = make_specs(config)
    sampled = {s["recipe_name"] for s in specs if s["recipe_name"].startswith("dirichlet-")}
    assert 1 <= len(sampled) <= 2  # web-only and code-only at most: the same recipe is run once
    assert all(abs(sum(s["weights"].values()) - 1) < 1e-9 for s in specs)


def test_a_metric_the_eval_sets_do_not_give_is_refused_before_any_run(tmp_path):
    """criteria.metric `bpx` (or a domain without a set) trained every proxy run, then the
    report ended in a KeyError traceback (KeyError: 'small')."""
    evalset = tmp_path / "sets-with-tasks"
    evalset.mkdir()
    sets = [{"name": "web__en", "domain": "web", "lang": "en"}]
    tasks = [{"name": "piqa", "kind": "multiple_choice", "examples": 3}]
    write_manifest(evalset, "evalset", extra={"sets": sets, "tasks": tasks})
    for metric in ("bpx", "bpb/web/de", "task/piqa/bpb", "task/hellaswag/acc"):
        root = tmp_path / metric.replace("/", "_")
        root.mkdir()
        config = _setup(root, criteria={"metric": metric})
        runner = Runner()
        with pytest.raises(ConfigError, match=f"criteria.metric = '{metric}' is not a metric"):
            run_sweep(config.model_copy(update={"eval_sets": str(evalset)}), runner=runner)
        assert runner.calls == 0
    for metric in ("bpb", "loss/web/en", "task/piqa/acc_norm"):
        root = tmp_path / metric.replace("/", "_")
        root.mkdir()
        config = _setup(root, criteria={"metric": metric})
        assert make_specs(config.model_copy(update={"eval_sets": str(evalset)}))[0]
