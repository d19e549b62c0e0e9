"""The gate on full launches: refusals name what is missing; a matching, passing report clears."""

from __future__ import annotations

import json

import pytest

from pretrain.errors import GateRefused
from tests.evals.conftest import ENCODED, make_mixture, make_report, synthetic_runs
from trainer.gate import check_gate


def _config(mixture, report, **gate) -> dict:
    return {
        "run": {"kind": "full"},
        "data": {"mixture_dir": str(mixture)},
        "gate": {"report_dir": str(report), "metric": "bpb", **gate},
    }


def _chosen(report_dir) -> str:
    return json.loads((report_dir / "report.json").read_text())["chosen_recipe_sha256"]


def test_matching_report_clears_and_returns_what_to_record(ablation_dir, tmp_path):
    mixture = make_mixture(tmp_path / "mix", _chosen(ablation_dir))
    result = check_gate(_config(mixture, ablation_dir))
    assert result["status"] == "passed"
    assert result["chosen_recipe_sha256"] == _chosen(ablation_dir)
    assert len(result["report_manifest_sha256"]) == 64
    assert result["improvement"] > result["interval"]["lower"] > 0


def test_missing_report_is_refused(tmp_path):
    mixture = make_mixture(tmp_path / "mix", "c" * 64)
    with pytest.raises(GateRefused, match="no ablation report at gate.report_dir"):
        check_gate(_config(mixture, tmp_path / "nowhere"))
    with pytest.raises(GateRefused, match="gate.report_dir is not set"):
        check_gate({"data": {"mixture_dir": str(mixture)}, "gate": {}})


def test_mismatched_tokenizer_is_refused(ablation_dir, tmp_path):
    mixture = make_mixture(tmp_path / "mix", _chosen(ablation_dir), tokenizer="f" * 64)
    with pytest.raises(GateRefused, match="tokenizer hash mismatch.*ffffffffffff"):
        check_gate(_config(mixture, ablation_dir))


def test_different_data_artifact_is_refused(ablation_dir, tmp_path):
    mixture = make_mixture(tmp_path / "mix", _chosen(ablation_dir), encoded="0" * 64)
    with pytest.raises(GateRefused, match="data artifact"):
        check_gate(_config(mixture, ablation_dir))


def test_different_recipe_is_refused(ablation_dir, tmp_path):
    runs = synthetic_runs()
    other = next(r["recipe_sha256"] for r in runs if r["recipe_sha256"] != _chosen(ablation_dir))
    mixture = make_mixture(tmp_path / "mix", other)
    with pytest.raises(GateRefused, match=f"recipe mismatch.*{other[:12]}"):
        check_gate(_config(mixture, ablation_dir))


def test_criteria_from_the_config_are_recomputed(ablation_dir, tmp_path):
    mixture = make_mixture(tmp_path / "mix", _chosen(ablation_dir))
    with pytest.raises(GateRefused, match="does not pass the gate criteria"):
        check_gate(_config(mixture, ablation_dir, min_improvement=5.0))
    with pytest.raises(GateRefused, match="no results"):
        check_gate(_config(mixture, ablation_dir, metric="task/none/acc"))


def test_a_report_that_failed_its_criteria_is_refused(tmp_path):
    runs = synthetic_runs(recipes=3, seeds=1, proxies=("p",))
    report = make_report(tmp_path / "r", runs)
    # nothing was shown better than the base: the report keeps it, the gate refuses saying so
    assert json.loads((report / "report.json").read_text())["chosen_recipe_name"] == "base"
    mixture = make_mixture(tmp_path / "mix", _chosen(report))
    with pytest.raises(GateRefused, match="no recipe shown better than base.*seed noise"):
        check_gate(_config(mixture, report))
    # the gate's own criteria choose v1 where the report (under its criteria) kept the base
    with pytest.raises(GateRefused, match="choose v1, but the report chose base"):
        check_gate(_config(mixture, report, require_seed_spread=False))
    waived = make_report(tmp_path / "w", runs, require_seed_spread=False)
    mixture = make_mixture(tmp_path / "mix-w", _chosen(waived))
    relaxed = check_gate(_config(mixture, waived, require_seed_spread=False))
    assert relaxed["status"] == "passed"


def test_tampered_report_is_refused(ablation_dir, tmp_path):
    import shutil

    copy = tmp_path / "report"
    shutil.copytree(ablation_dir, copy)
    data = json.loads((copy / "report.json").read_text())
    data["passed"] = True
    data["data_manifest_sha256"] = ENCODED.replace("e", "d")
    (copy / "report.json").write_text(json.dumps(data))
    mixture = make_mixture(tmp_path / "mix", _chosen(ablation_dir))
    with pytest.raises(GateRefused, match="file report.json"):
        check_gate(_config(mixture, copy))


def _edit_and_reseal(ablation_dir, copy, edit) -> None:
    """A report.json edited with its manifest entry and seal redone: only its content is off."""
    import hashlib
    import shutil

    from pretrain.manifest import SEAL, seal_of

    shutil.copytree(ablation_dir, copy)
    data = json.loads((copy / "report.json").read_text())
    raw = json.dumps(edit(data)).encode()
    (copy / "report.json").write_bytes(raw)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["files"]["report.json"] = {
        "bytes": len(raw),
        "sha256": hashlib.sha256(raw).hexdigest(),
    }
    manifest.pop(SEAL)
    manifest[SEAL] = seal_of(manifest)
    (copy / "manifest.json").write_text(json.dumps(manifest))


def _set(data: dict, **fields) -> dict:
    return {**data, **fields}


EDITS = {
    "a run's metrics a number": lambda r: _set(
        r, runs=[{**run, "metrics": 5} for run in r["runs"]]
    ),
    "a run's seed a string": lambda r: _set(r, runs=[{**run, "seed": "x"} for run in r["runs"]]),
    "summary a number": lambda r: _set(r, summary=5),
    "a proxy's ranking a list": lambda r: _set(
        r, summary={**r["summary"], "bpb": {proxy: [] for proxy in r["summary"]["bpb"]}}
    ),
    "report.json a list": lambda r: [1, 2],
}


@pytest.mark.parametrize("edit", list(EDITS))
def test_a_resealed_report_with_wrong_types_is_refused_in_one_line(ablation_dir, tmp_path, edit):
    copy = tmp_path / "report"
    _edit_and_reseal(ablation_dir, copy, EDITS[edit])
    mixture = make_mixture(tmp_path / "mix", _chosen(ablation_dir))
    with pytest.raises(GateRefused, match="edited or damaged") as refused:
        check_gate(_config(mixture, copy))
    assert "\n" not in str(refused.value)
