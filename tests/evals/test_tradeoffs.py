"""Per-domain trade-offs (intervals, Pareto front, the no-domain-worse-than-X constraint) and the
decision accuracy between two proxy scales, on simulated runs whose truth is known."""

from __future__ import annotations

import numpy as np
import pytest

from evals.report import build_report, summarize, write_report
from evals.tradeoffs import domain_table, pareto_front, scale_agreement
from pretrain.errors import GateRefused
from tests.evals.conftest import ENCODED, TOKENIZER, make_mixture
from tests.evals.simulate import simulate
from trainer.gate import check_gate
from trainer.gate_rule import decide

BASE = "base".ljust(64, "0")
# code-heavy: much better on code, a little worse on prose; prose-heavy: the reverse;
# worse-everywhere is dominated by the base.
SHIFTS = {
    "base": 0.0,
    "code-heavy": {"code": -0.3, "prose": 0.04},
    "prose-heavy": {"code": 0.1, "prose": -0.05},
    "worse-everywhere": {"code": 0.05, "prose": 0.05},
}


def _runs(seed: int = 0, **kwargs) -> list[dict]:
    return simulate(np.random.default_rng(seed), SHIFTS, seed_sd=0.005, **kwargs)


def test_domain_table_has_intervals_and_the_pareto_front():
    table = domain_table(_runs())["p"]
    rows = {row["recipe_name"]: row for row in table}
    assert set(rows["base"]["domains"]) == {"code/en", "prose/en"}
    code = rows["code-heavy"]["domains"]["code/en"]
    assert code["lower"] < code["effect"] < code["upper"] and code["n_documents"] == 60
    assert code["effect"] < rows["base"]["domains"]["code/en"]["lower"]
    front = {name for name, row in rows.items() if row["pareto"]}
    assert front == {"base", "code-heavy", "prose-heavy"}


def test_pareto_front_of_plain_points():
    points = [{"a": 1, "b": 3}, {"a": 2, "b": 2}, {"a": 3, "b": 3}, {"a": 1, "b": 3}]
    assert pareto_front(points) == {0, 1, 3}


def test_no_domain_worse_than_x_names_the_failing_constraint():
    runs = _runs()
    ranking = summarize(runs, "bpb")["p"]
    assert ranking[0]["recipe_name"] == "code-heavy"
    free = decide(runs, ranking, BASE, {})
    assert free["passed"] is True
    bound = decide(runs, ranking, BASE, {"max_domain_regression": 0.01})
    assert bound["passed"] is False
    # checked against every alternative: worse on prose than the base and than prose-heavy
    assert [f.split(":")[0] for f in bound["failed_constraints"]] == [
        "code-heavy vs base",
        "code-heavy vs prose-heavy",
    ]
    assert "constraint max_domain_regression 0.01 failed on prose/en" in bound["refusal"]
    prose = next(row for row in bound["domains"] if row["domain"] == "prose/en")
    assert prose["regression"] == pytest.approx(0.04, abs=0.01)
    assert decide(runs, ranking, BASE, {"max_domain_regression": 0.2})["passed"] is True


def test_gate_names_the_failing_domain(tmp_path):
    report = build_report(
        _runs(),
        base_sha=BASE,
        identity={"tokenizer_sha256": TOKENIZER, "data_manifest_sha256": ENCODED},
    )
    write_report(tmp_path / "report", report)
    mixture = make_mixture(tmp_path / "mix", report["chosen_recipe_sha256"])
    config = {
        "run": {"kind": "full"},
        "data": {"mixture_dir": str(mixture)},
        "gate": {"report_dir": str(tmp_path / "report"), "max_domain_regression": 0.01},
    }
    with pytest.raises(GateRefused, match="max_domain_regression 0.01 failed on prose/en"):
        check_gate(config)


def _two_scales(flip: bool) -> list[dict]:
    small = simulate(np.random.default_rng(1), SHIFTS, seed_sd=0.005, proxy="small")
    large_shifts = dict(SHIFTS)
    if flip:  # at the larger scale prose-heavy overtakes code-heavy
        large_shifts["prose-heavy"] = {"code": -0.3, "prose": -0.2}
    return small + simulate(np.random.default_rng(2), large_shifts, seed_sd=0.005, proxy="large")


def test_scale_agreement_counts_pairs_and_flags_a_flip():
    agreeing = scale_agreement(_two_scales(flip=False), ["small", "large"], "bpb")
    assert agreeing["n_pairs"] == 6 and agreeing["accuracy"] == 1.0
    assert agreeing["noise"]["small"]["seed_sd_median"] > 0
    flipped = scale_agreement(_two_scales(flip=True), ["small", "large"], "bpb")
    bad = [p for p in flipped["pairs"] if not p["agree"]]
    assert all("rank flips between scales" in p["flags"] for p in bad)
    # prose-heavy loses to base and code-heavy at the small scale, beats both at the large one
    assert {frozenset((p["a_name"], p["b_name"])) for p in bad} == {
        frozenset(("code-heavy", "prose-heavy")),
        frozenset(("base", "prose-heavy")),
    }
    assert flipped["accuracy"] == pytest.approx(4 / 6)


def test_noise_inside_margin_is_flagged():
    runs = simulate(np.random.default_rng(3), {"base": 0.0, "twin": 0.0}, proxy="small")
    runs += simulate(np.random.default_rng(4), {"base": 0.0, "twin": 0.0}, proxy="large")
    (pair,) = scale_agreement(runs, ["small", "large"], "bpb")["pairs"]
    assert pair["small_inside_noise"] and "small-scale margin inside the noise" in pair["flags"]


def test_the_gate_requires_scale_agreement_on_every_pair_of_the_chosen_recipe(tmp_path):
    """Two scales ran: by default every pair with the chosen recipe must agree at both. Here the
    large scale puts prose-heavy first, the small one put it last: refused, naming the pair
    (before: passed, agreement off by default and checked on the runner-up pair only)."""
    report = build_report(
        _two_scales(flip=True),
        base_sha=BASE,
        identity={"tokenizer_sha256": TOKENIZER, "data_manifest_sha256": ENCODED},
        proxy_sizes={"small": 1e5, "large": 1e6},
    )
    assert report["chosen_recipe_name"] == "prose-heavy" and report["passed"] is False
    assert (
        "prose-heavy vs code-heavy: require_scale_agreement: rank flips"
        in (report["decision"]["refusal"])
    )
    write_report(tmp_path / "report", report)
    mixture = make_mixture(tmp_path / "mix", report["chosen_recipe_sha256"])
    train = {"run": {"kind": "full"}, "data": {"mixture_dir": str(mixture)}}
    gate = {"report_dir": str(tmp_path / "report")}
    with pytest.raises(GateRefused, match="prose-heavy vs base: require_scale_agreement: rank"):
        check_gate({**train, "gate": gate})
    waived = check_gate({**train, "gate": {**gate, "require_scale_agreement": False}})
    assert waived["verdict"] == "prose-heavy shown better than every alternative"
    assert [p["pair"] for p in waived["pairs"]] == [
        "prose-heavy vs code-heavy",
        "prose-heavy vs base",
        "prose-heavy vs worse-everywhere",
    ]
    # at the deciding (large) scale prose-heavy is no worse than 0.05 on any domain than any
    # alternative: the constraint holds on every pair
    relaxed = {**gate, "require_scale_agreement": False, "max_domain_regression": 0.05}
    assert check_gate({**train, "gate": relaxed})["status"] == "passed"
