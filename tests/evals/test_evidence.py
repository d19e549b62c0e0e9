"""What counts as evidence (issue 36): run health, the verdict on every alternative, seed outliers,
small eval sets and confidence levels printed as computed. Synthetic runs whose truth is known;
the sweep's own rerun of an unhealthy run through evals.ablation_run.execute."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from evals.ablation_plan import AblationConfig
from evals.ablation_run import execute
from evals.report import build_report, print_report, summarize, write_report
from pretrain.errors import GateRefused
from tests.evals.conftest import ENCODED, TOKENIZER, make_mixture
from tests.evals.simulate import simulate
from trainer.gate import check_gate
from trainer.gate_rule import decide
from trainer.gate_stats import describe, pct, selection_confidence

BASE = "base".ljust(64, "0")
IDENTITY = {"tokenizer_sha256": TOKENIZER, "data_manifest_sha256": ENCODED}
SIZES = {"1.4M": 1.4e6, "5M": 5.05e6}


def _issue_sweep(rng_seed: int = 0) -> list[dict]:
    """The sweep of issue 36, simulated: three recipes, two scales, three seeds; code-heavy is
    truly best at both scales. Run code-heavy / 5M / seed 2 scored its step-1 checkpoint."""
    shifts = {"base": 0.0, "code-heavy": -0.08, "prose-heavy": 0.05}
    runs = simulate(np.random.default_rng(rng_seed), shifts, seed_sd=0.01, proxy="1.4M")
    runs += simulate(np.random.default_rng(rng_seed + 1), shifts, seed_sd=0.01, proxy="5M")
    broken = next(
        r for r in runs if (r["recipe_name"], r["proxy"], r["seed"]) == ("code-heavy", "5M", 2)
    )
    broken["metrics"] = {k: v + 1.27 for k, v in broken["metrics"].items()}
    broken["documents"]["nll"] = [n * 1.5 for n in broken["documents"]["nll"]]
    broken["health"] = {
        **broken["health"],
        "scored_step": 1,
        "trained_steps": 194,
        "planned_steps": 195,
        "tokens_trained": 194 * 1024,
        "planned_tokens": 195 * 1024,
        "rollbacks": 1,
        "skipped_batches": [11],
        "ended": "data exhausted",
    }
    return runs


def _report(runs: list[dict], **criteria) -> dict:
    return build_report(
        runs, base_sha=BASE, identity=IDENTITY, criteria=criteria, proxy_sizes=SIZES
    )


def test_a_run_scored_at_an_earlier_step_is_left_out_listed_and_refuses(tmp_path, capsys):
    runs = _issue_sweep()
    report = _report(runs)
    (bad,) = report["unhealthy_runs"]
    assert bad["run"] == "code-heavy / 5M / seed 2" and bad["ended"] == "data exhausted"
    assert bad["problems"] == ["scored at step 1, but trained to step 194"]
    # left out of every decision: the ranking, the scale table and the decision's intervals
    code = next(r for r in report["ranking"]["5M"] if r["recipe_name"] == "code-heavy")
    assert code["n_seeds"] == 2 and code["rank"] == 1
    pair = next(
        p for p in report["scale_agreement"]["pairs"] if "code-heavy" in (p["a_name"], p["b_name"])
    )
    assert pair["large_effect"]["n_seeds"] == 2
    assert report["passed"] is False
    assert "unhealthy run left out: code-heavy / 5M / seed 2" in report["decision"]["refusal"]
    # on the terminal, first
    print_report(report, "out")
    out = capsys.readouterr().out.splitlines()
    assert out[0] == report["headline"]  # report.json holds the same top line
    assert (
        out[0].startswith("decision: ")
        and "left out (unhealthy): code-heavy / 5M / seed 2 (scored at step 1" in out[0]
    )
    assert any("unhealthy, left out: code-heavy / 5M / seed 2: scored at step 1" in x for x in out)
    # the gate recomputes health from the runs and refuses, naming the run
    write_report(tmp_path / "report", report)
    mixture = make_mixture(tmp_path / "mix", report["chosen_recipe_sha256"])
    config = {
        "data": {"mixture_dir": str(mixture)},
        "gate": {"report_dir": str(tmp_path / "report")},
    }
    with pytest.raises(GateRefused, match="unhealthy run left out: code-heavy / 5M / seed 2"):
        check_gate(config)


def test_a_run_that_trained_materially_fewer_tokens_is_unhealthy():
    runs = _issue_sweep()
    broken = next(r for r in runs if r["health"]["scored_step"] == 1)
    broken["health"]["scored_step"] = 194  # scored at its last step, but 30% short
    broken["health"]["tokens_trained"] = 136 * 1024
    report = _report(runs)
    (bad,) = report["unhealthy_runs"]
    assert bad["problems"][0].startswith("trained 139264 of 199680 planned tokens (69.7%")
    assert _report(runs, min_token_fraction=0.6)["unhealthy_runs"] == []
    legacy = [{k: v for k, v in r.items() if k != "health"} for r in _issue_sweep()]
    assert len(_report(legacy[:-1] + [_issue_sweep()[-1]])["unhealthy_runs"]) == len(legacy) - 1


def test_with_the_broken_run_left_out_both_scales_pick_code_heavy():
    """The issue's clean evidence: with the bad run out, code-heavy leads at both scales."""
    report = _report(_issue_sweep())
    assert report["decision"]["leader"]["recipe_name"] == "code-heavy"
    assert [r["recipe_name"] for r in report["ranking"]["1.4M"]][0] == "code-heavy"


def _verdict(shifts: dict, seed_sd: float = 0.02, seeds: int = 3, **criteria) -> dict:
    runs = simulate(np.random.default_rng(5), shifts, seeds=seeds, seed_sd=seed_sd)
    return decide(runs, summarize(runs, "bpb")["p"], BASE, criteria)


def test_keeping_the_base_unproven_is_not_base_shown_best():
    shown = _verdict({"base": -0.3, "a": 0.0, "b": 0.05})
    assert shown["verdict"] == "base shown best" and shown["passed"] is True
    unproven = _verdict({"base": -0.01, "a": 0.0, "b": 0.2}, seed_sd=0.05)
    assert unproven["verdict"] == "no recipe shown better than base"
    assert unproven["passed"] is False and unproven["chosen"]["recipe_name"] == "base"
    assert unproven["refusal"].startswith("no recipe shown better than base")


def test_the_leader_must_clear_every_alternative_not_only_the_base():
    """a and b both beat the base clearly and tie with each other: 'not decided', naming the
    pair of the two (before: passed, the leader was compared with the base only)."""
    decision = _verdict({"base": 0.3, "a": 0.0, "b": 0.0}, seed_sd=0.02)
    leader = decision["leader"]["recipe_name"]
    other = "b" if leader == "a" else "a"
    assert decision["verdict"] == "not decided" and decision["passed"] is False
    passed = {c["pair"]: c["passed"] for c in decision["comparisons"]}
    assert passed == {f"{leader} vs {other}": False, f"{leader} vs base": True}
    assert f"{leader} vs {other}: improvement" in decision["refusal"]
    assert decision["refusal"].startswith("not decided: ")


def test_a_seed_far_outside_the_others_spread_is_flagged_and_refuses(capsys):
    runs = simulate(np.random.default_rng(2), {"base": 0.0, "a": -0.2, "b": 0.1}, seed_sd=0.01)
    odd = next(r for r in runs if (r["recipe_name"], r["seed"]) == ("b", 3))
    odd["metrics"]["bpb"] += 0.8  # healthy by its record; its score is not
    report = build_report(runs, base_sha=BASE, identity=IDENTITY)
    (flag,) = report["outliers"]
    assert flag["run"] == "b / p / seed 3" and flag["modified_z"] > 10
    assert (
        report["passed"] is False
        and "seed outlier: b / p / seed 3" in report["decision"]["refusal"]
    )
    print_report(report, "out")
    assert "rule: |value - recipe median| > 10.0 x 1.4826 x MAD" in capsys.readouterr().out


def test_a_small_eval_set_is_warned_about_with_its_interval(capsys):
    runs = simulate(np.random.default_rng(3), {"base": 0.0, "a": -0.2}, docs_per_set=10)
    report = build_report(runs, base_sha=BASE, identity=IDENTITY)
    assert [w.split(":")[0] for w in report["warnings"]] == [
        "eval set code/en",
        "eval set prose/en",
    ]
    assert "10 documents (< 50): its bpb is known to +-0." in report["warnings"][0]
    print_report(report, "out")
    assert "! eval set code/en: 10 documents" in capsys.readouterr().out
    big = simulate(np.random.default_rng(3), {"base": 0.0, "a": -0.2}, docs_per_set=60)
    assert build_report(big, base_sha=BASE, identity=IDENTITY)["warnings"] == []


def test_confidence_levels_print_as_computed():
    level = selection_confidence(0.95, 3)
    assert level == pytest.approx(0.975) and pct(level) == "97.5%"
    effect = {"effect": 0.1, "lower": 0.0, "upper": 0.2, "confidence": level}
    assert "97.5% two-sided interval" in describe({**effect, "n_documents": 0, "n_seeds": 3})
    assert pct(1 - 0.05 / 3) == "98.33%" and pct(0.95) == "95%"


def _spec(root: Path, seed: int) -> dict:
    return {
        "run_key": f"{seed:064d}",
        "run_dir": str(root / f"run-{seed}"),
        "recipe_name": "base",
        "proxy": {"name": "p"},
        "seed": seed,
    }


def _result(spec: dict, scored: int) -> dict:
    health = {"scored_step": scored, "trained_steps": 12, "tokens_trained": 100}
    return {
        "run_key": spec["run_key"],
        "status": "finished",
        "recipe_name": "base",
        "proxy": "p",
        "seed": spec["seed"],
        "metrics": {"bpb": 2.0},
        "health": {**health, "planned_tokens": 100},
    }


@pytest.mark.parametrize("policy", ["rerun", "refuse"])
def test_the_sweep_reruns_an_unhealthy_run_from_scratch_or_keeps_it(tmp_path, policy):
    """`unhealthy: rerun`: a cached unhealthy result and a fresh one each run once more, their
    old directory set aside (a resume would find its checkpoints); `refuse`: kept as they are."""
    config = AblationConfig(
        mixture="m",
        train="t",
        eval_sets="e",
        proxies=[{"name": "p"}],
        token_budget=1,
        parallel="sequential",
        unhealthy=policy,
    )
    cached, fresh = _spec(tmp_path, 1), _spec(tmp_path, 2)
    Path(cached["run_dir"]).mkdir()
    (Path(cached["run_dir"]) / "result.json").write_text(json.dumps(_result(cached, 1)))
    calls: list[int] = []

    def runner(spec: dict) -> dict:
        calls.append(spec["seed"])
        first = calls.count(spec["seed"]) == 1 and spec["seed"] == 2
        Path(spec["run_dir"]).mkdir(exist_ok=True)
        return _result(spec, 1 if first else 12)

    results = execute(config, [cached, fresh], runner)
    scored = sorted((r["seed"], r["health"]["scored_step"]) for r in results)
    if policy == "rerun":
        assert sorted(calls) == [1, 2, 2] and scored == [(1, 12), (2, 12)]
        assert (tmp_path / "run-1.unhealthy" / "result.json").is_file()
    else:
        assert calls == [2] and scored == [(1, 1), (2, 1)]
