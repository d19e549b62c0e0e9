"""`pretrain mixture build` end to end through the CLI on synthetic encoded artifacts."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from pretrain.manifest import load_manifest
from pretrain_app.cli import main
from tests.mixtures.conftest import TOKENIZER_SHA, make_encoded, max_deviation, mixture_config

pytestmark = pytest.mark.timeout(120)


def _write(tmp_path: Path, config: dict, name: str = "mix.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(config))
    return str(path)


def _build(tmp_path: Path, config: dict, *extra: str) -> int:
    return main(["mixture", "build", _write(tmp_path, config), *extra])


def _error_line(capsys: pytest.CaptureFixture) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_build_writes_contract_manifest_and_exact_quotas(
    tmp_path: Path, encoded_dir: Path, capsys: pytest.CaptureFixture
) -> None:
    config = mixture_config(encoded_dir, tmp_path / "mix")
    assert _build(tmp_path, config) == 0
    assert "tokens" in capsys.readouterr().out
    manifest = load_manifest(tmp_path / "mix")
    assert manifest["kind"] == "mixture"
    for key in (
        "recipe_sha256",
        "build_sha256",
        "tokenizer",
        "encoded_manifest_sha256",
        "global_batch",
        "phases",
        "components",
    ):
        assert key in manifest
    assert manifest["tokenizer"]["sha256"] == TOKENIZER_SHA
    phase = manifest["phases"][0]
    assert phase["num_sequences"] == 16 * 20 and phase["seq_length"] == 32
    assert [c["name"] for c in manifest["components"]] == ["web", "code", "books_hq"]
    assert all(c["available_tokens"] > 0 for c in manifest["components"])
    index = np.load(tmp_path / "mix" / phase["index"])
    weights = [0.5, 0.3, 0.2]
    assert max_deviation(index["component"], weights, 16) < 1 + 1e-9


def test_same_config_same_index_and_hashes(tmp_path: Path, encoded_dir: Path) -> None:
    first = mixture_config(encoded_dir, tmp_path / "a")
    second = mixture_config(encoded_dir, tmp_path / "b")
    reseeded = mixture_config(encoded_dir, tmp_path / "c", seed=8)
    for i, cfg in enumerate((first, second, reseeded)):
        assert _build(tmp_path, cfg, f"--set=build.global_batch={16}") == 0, i
    a, b, c = (load_manifest(tmp_path / n) for n in "abc")
    assert a["build_sha256"] == b["build_sha256"] != c["build_sha256"]
    assert a["recipe_sha256"] == c["recipe_sha256"]
    rel = a["phases"][0]["index"]
    assert (tmp_path / "a" / rel).read_bytes() == (tmp_path / "b" / rel).read_bytes()
    assert (tmp_path / "a" / rel).read_bytes() != (tmp_path / "c" / rel).read_bytes()


def test_tokenizer_mismatch_is_refused_naming_both_hashes(
    tmp_path: Path, encoded_dir: Path, capsys: pytest.CaptureFixture
) -> None:
    pinned = "ab" * 32
    config = mixture_config(encoded_dir, tmp_path / "mix", tokenizer_sha256=pinned)
    assert _build(tmp_path, config) == 2
    line = _error_line(capsys)
    assert "mismatch" in line and TOKENIZER_SHA[:12] in line and pinned[:12] in line
    assert "pretrain tokenizer encode" in line
    assert not (tmp_path / "mix").exists()


def test_infeasible_recipe_lists_each_short_component(
    tmp_path: Path, encoded_dir: Path, capsys: pytest.CaptureFixture
) -> None:
    config = mixture_config(encoded_dir, tmp_path / "mix", total_tokens=16 * 32 * 400)
    config["recipe"]["components"][2]["max_epochs"] = 100
    assert _build(tmp_path, config) == 2
    err = capsys.readouterr().err
    assert "2 component(s) short" in err
    lines = [line.strip() for line in err.splitlines()[1:]]
    assert [line.split(":")[0] for line in lines] == ["web", "code"]
    assert all(
        "needs" in line and "max_epochs is 4" in line and "raise max_epochs to" in line
        for line in lines
    )


@pytest.mark.parametrize(
    ("change", "expect"),
    [
        ({"weight": 0.6}, "sum to 1.1, not 1"),
        ({"select": {"domain": "wbe"}}, "unknown tag value(s) wbe"),
        ({"select": {"colour": "red"}}, "unknown tag 'colour': no stage declares it; the tags are"),
        (
            {"select": {"domain": "web", "quality_score": {"min": 2.0}}},
            "matches no training document",
        ),
        ({"select": {"domain": ["web", "code"]}}, "overlaps component 'web'"),
    ],
)
def test_bad_recipes_are_one_line_errors(
    tmp_path: Path, encoded_dir: Path, capsys: pytest.CaptureFixture, change: dict, expect: str
) -> None:
    config = mixture_config(encoded_dir, tmp_path / "mix")
    config["recipe"]["components"][0].update(change)
    assert _build(tmp_path, config) == 2
    assert expect in _error_line(capsys)


def test_eval_split_never_selected(tmp_path: Path, encoded_dir: Path) -> None:
    config = mixture_config(encoded_dir, tmp_path / "mix")
    assert _build(tmp_path, config) == 0
    import pyarrow.parquet as pq

    for comp in ("web", "code", "books_hq"):
        docs = np.load(tmp_path / "mix" / "components" / f"{comp}.npy")
        for prefix in np.unique(docs["prefix"]):
            side = pq.read_table(encoded_dir / f"part-{prefix:05d}.docs.parquet").to_pandas()
            rows = side.iloc[docs["doc"][docs["prefix"] == prefix]]
            assert (rows["split"] == "train").all()
            if comp == "web":
                assert (rows["domain"] == "web").all() and (rows["lang"] == "en").all()
            if comp == "books_hq":
                assert (rows["quality_score"] >= 0.3).all()


def test_phases_and_tokens_per_parameter_warning(
    tmp_path: Path, encoded_dir: Path, capsys: pytest.CaptureFixture
) -> None:
    config = mixture_config(encoded_dir, tmp_path / "mix", model_params=1000)
    config["recipe"]["phases"] = [
        {"name": "main", "share": 0.75},
        {
            "name": "anneal",
            "share": 0.25,
            "seq_length": 16,
            "weights": {"web": 0.2, "code": 0.2, "books_hq": 0.6},
        },
    ]
    assert _build(tmp_path, config) == 0
    out = capsys.readouterr()
    assert "tokens per parameter is outside 15-30" in out.err
    manifest = load_manifest(tmp_path / "mix")
    assert [(p["name"], p["seq_length"]) for p in manifest["phases"]] == [
        ("main", 32),
        ("anneal", 16),
    ]
    anneal = np.load(tmp_path / "mix" / manifest["phases"][1]["index"])
    assert max_deviation(anneal["component"], [0.2, 0.2, 0.6], 16) < 1 + 1e-9


def test_replan_keeps_consumed_prefix_and_reports(tmp_path: Path, encoded_dir: Path) -> None:
    config = mixture_config(encoded_dir, tmp_path / "run")
    assert _build(tmp_path, config) == 0
    consumed = 16 * 7
    new = mixture_config(encoded_dir, tmp_path / "replanned")
    for comp, weight in zip(new["recipe"]["components"], (0.2, 0.3, 0.5), strict=True):
        comp["weight"] = weight
    new["replan"] = {"mixture": str(tmp_path / "run"), "consumed_sequences": consumed}
    assert _build(tmp_path, new, "--set=build.total_tokens=12288") == 0
    old_index = np.load(tmp_path / "run" / "index" / "0-main.npy")
    new_index = np.load(tmp_path / "replanned" / "index" / "0-main.npy")
    assert new_index[:consumed].tobytes() == old_index[:consumed].tobytes()
    assert new_index.size == 12288 // 32
    rest = new_index[consumed:]
    assert max_deviation(rest["component"], [0.2, 0.3, 0.5], 16) < 1 + 1e-9
    report = json.loads((tmp_path / "replanned" / "replan.json").read_text())
    assert report["consumed_sequences"] == consumed
    kept = report["phases"][0]["kept_per_component"]
    assert sum(kept.values()) == consumed
    assert report["from_build_sha256"] == load_manifest(tmp_path / "run")["build_sha256"]


def test_dry_run_prints_resolved_config(
    tmp_path: Path, encoded_dir: Path, capsys: pytest.CaptureFixture
) -> None:
    config = mixture_config(encoded_dir, tmp_path / "mix")
    assert _build(tmp_path, config, "--dry-run", "--set=build.seed=99") == 0
    out = capsys.readouterr().out
    assert "seed: 99" in out and "config_sha256" in out
    assert not (tmp_path / "mix").exists()


def test_example_config_validates(repo_root: Path, tmp_path: Path) -> None:
    from mixtures.recipe import MixtureConfig, check_recipe
    from pretrain.config import load_config

    config = load_config(MixtureConfig, repo_root / "configs" / "mixture.yaml")
    check_recipe(config)
    assert config.build.global_batch > 0


def test_encoded_with_other_tokenizer_needs_matching_pin(tmp_path: Path) -> None:
    other = {"name": "bpe-other", "sha256": "cd" * 32, "id": "bpe-other@cdcdcd"}
    encoded = make_encoded(tmp_path / "enc", prefixes=1, docs=90, tokenizer=other)
    config = mixture_config(encoded, tmp_path / "mix", tokenizer_sha256="cd" * 32)
    assert _build(tmp_path, config) == 0
    assert load_manifest(tmp_path / "mix")["tokenizer"]["id"] == "bpe-other@cdcdcd"


@pytest.mark.parametrize(
    ("change", "expect"),
    [
        ({"build.seed": 8}, "a re-plan must keep both"),
        ({"replan.consumed_sequences": 20}, "not a whole number of global batches"),
        ({"replan.consumed_sequences": 16 * 40}, "exceeds the 320 sequences"),
        ({"select": {"domain": "web"}}, "the components or their selections changed"),
    ],
)
def test_replan_refuses_incompatible_changes(
    tmp_path: Path, encoded_dir: Path, capsys: pytest.CaptureFixture, change: dict, expect: str
) -> None:
    assert _build(tmp_path, mixture_config(encoded_dir, tmp_path / "run")) == 0
    new = mixture_config(encoded_dir, tmp_path / "new")
    new["replan"] = {"mixture": str(tmp_path / "run"), "consumed_sequences": 32}
    if "select" in change:
        new["recipe"]["components"][0]["select"] = change["select"]
        extra = []
    else:
        extra = [f"--set={key}={value}" for key, value in change.items()]
    capsys.readouterr()
    assert _build(tmp_path, new, *extra) == 2
    assert expect in _error_line(capsys)


def test_replan_across_a_phase_boundary_keeps_the_finished_phase(
    tmp_path: Path, encoded_dir: Path
) -> None:
    phases = [{"name": "main", "share": 0.5}, {"name": "anneal", "share": 0.5}]
    config = mixture_config(encoded_dir, tmp_path / "run")
    config["recipe"]["phases"] = phases
    assert _build(tmp_path, config) == 0
    old = load_manifest(tmp_path / "run")
    first = old["phases"][0]["num_sequences"]
    new = mixture_config(encoded_dir, tmp_path / "new")
    new["recipe"]["phases"] = [
        phases[0],
        {**phases[1], "weights": {"web": 0.1, "code": 0.1, "books_hq": 0.8}},
    ]
    new["replan"] = {"mixture": str(tmp_path / "run"), "consumed_sequences": first + 2 * 16}
    assert _build(tmp_path, new) == 0
    manifest = load_manifest(tmp_path / "new")
    for number, kept in ((0, first), (1, 2 * 16)):
        rel = manifest["phases"][number]["index"]
        old_index = np.load(tmp_path / "run" / rel)
        new_index = np.load(tmp_path / "new" / rel)
        assert new_index[:kept].tobytes() == old_index[:kept].tobytes()
    assert manifest["phases"][0]["num_sequences"] == first
    rest = np.load(tmp_path / "new" / manifest["phases"][1]["index"])[2 * 16 :]
    assert max_deviation(rest["component"], [0.1, 0.1, 0.8], 16) < 1 + 1e-9
    report = json.loads((tmp_path / "new" / "replan.json").read_text())
    assert [p["kept_sequences"] for p in report["phases"]] == [first, 2 * 16]
