"""The ablation report on synthetic results whose best recipe and weight effects are known."""

from __future__ import annotations

import json

import pytest

from evals.report import build_report, epoch_table, summarize
from pretrain.manifest import verify
from tests.evals.conftest import make_report, synthetic_runs


@pytest.mark.timeout(60)
def test_report_ranks_regresses_and_decides(ablation_dir):
    report = json.loads((ablation_dir / "report.json").read_text())
    runs = synthetic_runs()
    large = [r for r in runs if r["proxy"] == "p-large"]
    best_code = max(large, key=lambda r: r["weights"]["code"] - 0.25 * r["weights"]["books"])
    assert report["primary_proxy"] == "p-large"
    assert report["chosen_recipe_sha256"] == best_code["recipe_sha256"]
    rows = report["ranking"]["p-large"]
    assert [row["rank"] for row in rows] == list(range(1, len(rows) + 1))
    assert all(row["n_seeds"] == 3 and row["std"] > 0 for row in rows)
    assert report["passed"] is True
    # both proxies see the same weight effect: their decisions agree
    assert report["scale_agreement"]["accuracy"] > 0.8
    regression = report["regression"]
    assert regression["status"] == "fitted"
    assert regression["models"]["linear"]["cv_r2"] > 0.8
    assert regression["models"]["linear"]["coefficients"]["code"] < 0
    # the predicted best recipe leans on the component that lowers bpb
    assert regression["predicted_best"]["weights"]["code"] > 0.2
    assert (ablation_dir / "ranking.png").stat().st_size > 1000
    assert (ablation_dir / "regression.png").is_file()
    manifest = verify(ablation_dir)
    assert manifest["kind"] == "ablation" and manifest["passed"] is True


@pytest.mark.timeout(60)
def test_single_seed_fails_the_spread_criterion_and_few_recipes_skip_regression(tmp_path):
    runs = synthetic_runs(recipes=3, seeds=1, proxies=("p",))
    out = make_report(tmp_path / "r", runs)
    report = json.loads((out / "report.json").read_text())
    assert report["passed"] is False
    assert "seed noise is unknown" in report["decision"]["refusal"]
    assert "too few" in report["regression"]["status"]
    assert report["scale_agreement"] is None


def test_noise_larger_than_effect_does_not_pass():
    runs = synthetic_runs(recipes=4, seeds=3, noise=0.5, proxies=("p",))
    base = next(r["recipe_sha256"] for r in runs if r["recipe_name"] == "base")
    report = build_report(runs, base_sha=base, identity={})
    interval = report["decision"]["interval"]
    assert interval["method"] == "seeds (no per-document results)"
    assert report["passed"] is False and interval["lower"] <= 0 < interval["upper"]


def test_accuracy_metric_ranks_higher_first():
    runs = synthetic_runs(recipes=3, seeds=2, proxies=("p",))
    for run in runs:
        run["metrics"]["task/mc/acc"] = run["weights"]["books"]
    rows = summarize(runs, "task/mc/acc")["p"]
    assert rows[0]["mean"] == max(row["mean"] for row in rows)


def test_epoch_table_flags_repeats_the_proxy_cannot_match():
    components = [
        {"name": "web", "weight": 0.8, "available_tokens": 10**9},
        {"name": "math", "weight": 0.2, "available_tokens": 10**6},
    ]
    rows = epoch_table(components, full_tokens=10**8, proxy_tokens=10**6)
    web, math_row = rows
    assert web["flag"] is None and web["full_epochs"] == pytest.approx(0.08)
    assert math_row["full_epochs"] == pytest.approx(20.0)
    assert math_row["proxy_subset_tokens"] == 10**4
    assert "repeats math 20.00x" in math_row["flag"]


def test_keeping_the_base_needs_a_margin_over_the_runner_up():
    runs = synthetic_runs(recipes=3, seeds=3, proxies=("p",))
    base = next(r["recipe_sha256"] for r in runs if r["recipe_name"] == "base")
    for run in runs:  # make the base clearly best
        if run["recipe_sha256"] == base:
            run["metrics"]["bpb"] -= 1.0
    report = build_report(runs, base_sha=base, identity={})
    assert report["chosen_recipe_sha256"] == base and report["passed"] is True
    assert report["verdict"] == "base shown best"
    assert len(report["decision"]["comparisons"]) == 2  # against each alternative
    only_base = [r for r in runs if r["recipe_sha256"] == base]
    report = build_report(only_base, base_sha=base, identity={})
    assert report["passed"] is False
    assert "nothing to compare" in report["decision"]["evidence"][-1]
