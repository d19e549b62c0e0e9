"""`pretrain mixture report DIR`: shares, deviations, tokens and epochs, a PNG and JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from pretrain_app.cli import main
from tests.mixtures.conftest import mixture_config

pytestmark = pytest.mark.timeout(120)


def test_report_shows_exact_shares_and_writes_plot(
    tmp_path: Path, encoded_dir: Path, capsys: pytest.CaptureFixture
) -> None:
    config = mixture_config(
        encoded_dir, tmp_path / "mix", global_batch=10, total_tokens=10 * 32 * 30
    )
    (tmp_path / "mix.yaml").write_text(yaml.safe_dump(config))
    assert main(["mixture", "build", str(tmp_path / "mix.yaml")]) == 0
    assert main(["mixture", "report", str(tmp_path / "mix")]) == 0
    out = capsys.readouterr().out
    assert "max per-batch deviation" in out and "epochs" in out
    report = json.loads((tmp_path / "mix" / "report" / "report.json").read_text())
    png = (tmp_path / "mix" / "report" / "report.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    phase = report["phases"][0]
    assert phase["num_batches"] == 30
    by_name = {c["name"]: c for c in phase["components"]}
    # W = 10 with weights 0.5/0.3/0.2: every batch is exactly 5/3/2.
    assert phase["max_batch_deviation_share"] == 0.0
    assert by_name["web"]["batch_share_min"] == by_name["web"]["batch_share_max"] == 0.5
    assert by_name["code"]["realised_share"] == pytest.approx(0.3)
    assert by_name["books_hq"]["tokens"] == 2 * 30 * 32
    epochs = {c["name"]: c["epochs"] for c in report["components"]}
    assert all(0 < e <= 4 for e in epochs.values())


def test_report_of_uneven_quota_stays_within_one_sequence(
    tmp_path: Path, encoded_dir: Path, capsys: pytest.CaptureFixture
) -> None:
    config = mixture_config(encoded_dir, tmp_path / "mix", global_batch=7)
    (tmp_path / "mix.yaml").write_text(yaml.safe_dump(config))
    assert main(["mixture", "build", str(tmp_path / "mix.yaml")]) == 0
    assert main(["mixture", "report", str(tmp_path / "mix"), "--out", str(tmp_path / "r")]) == 0
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    for comp in report["phases"][0]["components"]:
        assert comp["max_batch_deviation_sequences"] < 1
        assert comp["max_prefix_deviation_sequences"] < 1
        assert comp["max_every_sample_prefix_deviation_sequences"] < 1
    assert report["phases"][0]["max_batch_deviation_share"] > 0


def test_report_refuses_a_non_mixture(
    tmp_path: Path, encoded_dir: Path, capsys: pytest.CaptureFixture
) -> None:
    assert main(["mixture", "report", str(encoded_dir)]) == 2
    assert "is a 'encoded' artifact" in capsys.readouterr().err


def test_report_compares_a_training_runs_tokens_per_component(
    tmp_path: Path, encoded_dir: Path, capsys: pytest.CaptureFixture
) -> None:
    config = mixture_config(encoded_dir, tmp_path / "mix")
    config["recipe"]["phases"] = [
        {"name": "main", "share": 0.5},
        {
            "name": "anneal",
            "share": 0.5,
            "seq_length": 16,
            "weights": {"web": 0.1, "code": 0.1, "books_hq": 0.8},
        },
    ]
    (tmp_path / "mix.yaml").write_text(yaml.safe_dump(config))
    assert main(["mixture", "build", str(tmp_path / "mix.yaml")]) == 0
    manifest = json.loads((tmp_path / "mix" / "manifest.json").read_text())
    main_batches = manifest["phases"][0]["num_sequences"] // 16
    # What the trainer logs after all main batches and 3 anneal batches (trainer/loop.py format:
    # per batch, each component's sequences x that phase's seq_length).
    import numpy as np

    first = np.load(tmp_path / "mix" / manifest["phases"][0]["index"])["component"]
    anneal = np.load(tmp_path / "mix" / manifest["phases"][1]["index"])["component"][: 3 * 16]
    tokens = np.bincount(first, minlength=3) * 32 + np.bincount(anneal, minlength=3) * 16
    assert tokens[2] > tokens[1]  # the anneal phase's 0.8 books_hq shows
    trained = dict(zip(["web", "code", "books_hq"], tokens.tolist(), strict=True))
    run = tmp_path / "run"
    run.mkdir()
    record = {"step": main_batches + 3, "batch": main_batches + 2, "tokens_per_component": trained}
    (run / "metrics.jsonl").write_text(
        json.dumps({"event": "start"}) + "\n" + json.dumps(record) + "\n"
    )
    assert main(["mixture", "report", str(tmp_path / "mix"), "--run", str(run)]) == 0
    assert "matches the mixture" in capsys.readouterr().out
    record["tokens_per_component"]["code"] += 32
    (run / "metrics.jsonl").write_text(json.dumps(record) + "\n")
    assert main(["mixture", "report", str(tmp_path / "mix"), "--run", str(run)]) == 0
    report = json.loads((tmp_path / "mix" / "report" / "report.json").read_text())
    assert report["run"]["match"] is False
    assert {c["name"]: c["difference"] for c in report["run"]["components"]}["code"] == 32


def test_report_run_reads_past_a_torn_line_and_refuses_a_bad_record_in_one_line(
    tmp_path: Path, encoded_dir: Path, capsys: pytest.CaptureFixture
) -> None:
    """A run killed mid-write leaves its last metrics line torn (and a resumed run appends after
    it): the report used to end in a JSONDecodeError traceback. Now the torn lines are skipped
    and named; a record whose counts are not numbers is one line, exit 2."""
    (tmp_path / "mix.yaml").write_text(
        yaml.safe_dump(mixture_config(encoded_dir, tmp_path / "mix"))
    )
    assert main(["mixture", "build", str(tmp_path / "mix.yaml")]) == 0
    import numpy as np

    manifest = json.loads((tmp_path / "mix" / "manifest.json").read_text())
    first = np.load(tmp_path / "mix" / manifest["phases"][0]["index"])["component"][:16]
    tokens = dict(zip(["web", "code", "books_hq"], (np.bincount(first, minlength=3) * 32).tolist()))
    good = json.dumps({"step": 1, "batch": 0, "tokens_per_component": tokens})
    run = tmp_path / "run"
    run.mkdir()
    metrics = run / "metrics.jsonl"
    # killed during step 2's line, resumed (appends step 1 again after the torn text), killed again
    metrics.write_text(good + "\n" + '{"step": 2, "ba' + good + "\n" + good + "\n" + '{"st')
    capsys.readouterr()
    assert main(["mixture", "report", str(tmp_path / "mix"), "--run", str(run)]) == 0
    out = capsys.readouterr().out
    assert "matches the mixture" in out and "2 unreadable line(s)" in out
    report = json.loads((tmp_path / "mix" / "report" / "report.json").read_text())
    assert report["run"]["unreadable_lines"] == [2, 4]
    assert report["run"]["match"] is True
    for bad in ({"batch": "0"}, {"batch": True}, {"tokens_per_component": [1]}):
        record = {"step": 1, "batch": 0, "tokens_per_component": tokens, **bad}
        metrics.write_text(json.dumps(record) + "\n")
        assert main(["mixture", "report", str(tmp_path / "mix"), "--run", str(run)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "metrics.jsonl line 1" in err, err


def test_the_report_inside_a_mixture_keeps_the_mixture_verifying(
    tmp_path: Path, encoded_dir: Path, capsys: pytest.CaptureFixture
) -> None:
    """The default report (MIXTURE/report/) was two files the mixture's manifest does not list:
    `pretrain verify MIXTURE` refused every reported mixture, the demo's too. Now the report is
    an artifact of its own (kind mixture-report), nested as TOKENIZER/eval is."""
    (tmp_path / "mix.yaml").write_text(
        yaml.safe_dump(mixture_config(encoded_dir, tmp_path / "mix"))
    )
    assert main(["mixture", "build", str(tmp_path / "mix.yaml")]) == 0
    for _ in range(2):  # a second report replaces the first
        assert main(["mixture", "report", str(tmp_path / "mix")]) == 0
        capsys.readouterr()
        assert main(["verify", str(tmp_path / "mix")]) == 0, capsys.readouterr().err
        assert main(["verify", str(tmp_path / "mix" / "report")]) == 0
    assert "mixture-report" in capsys.readouterr().out


def _reseal_with(mixture: Path, name: str, raw: bytes) -> None:
    """`name` rewritten in `mixture` with its manifest entry and seal redone."""
    import hashlib

    from pretrain.manifest import SEAL, seal_of

    (mixture / name).write_bytes(raw)
    manifest = json.loads((mixture / "manifest.json").read_text())
    manifest["files"][name] = {"bytes": len(raw), "sha256": hashlib.sha256(raw).hexdigest()}
    manifest.pop(SEAL)
    manifest[SEAL] = seal_of(manifest)
    (mixture / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize(
    "components", [5, "x", [{}], [{"name": "web", "tokens": 1, "available_tokens": "x"}]]
)
def test_a_resealed_summary_with_wrong_types_is_one_line(
    tmp_path: Path, encoded_dir: Path, capsys: pytest.CaptureFixture, components: object
) -> None:
    # before: TypeError / KeyError / ValueError tracebacks from format_report
    config = mixture_config(encoded_dir, tmp_path / "mix", global_batch=10, total_tokens=9600)
    (tmp_path / "mix.yaml").write_text(yaml.safe_dump(config))
    assert main(["mixture", "build", str(tmp_path / "mix.yaml")]) == 0
    summary = json.loads((tmp_path / "mix" / "summary.json").read_text())
    _reseal_with(
        tmp_path / "mix", "summary.json", json.dumps({**summary, "components": components}).encode()
    )
    capsys.readouterr()
    assert main(["mixture", "report", str(tmp_path / "mix")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "summary.json does not hold" in err, err


def test_a_replan_json_planted_beside_a_mixture_is_not_read(
    tmp_path: Path, encoded_dir: Path
) -> None:
    config = mixture_config(encoded_dir, tmp_path / "mix", global_batch=10, total_tokens=9600)
    (tmp_path / "mix.yaml").write_text(yaml.safe_dump(config))
    assert main(["mixture", "build", str(tmp_path / "mix.yaml")]) == 0
    (tmp_path / "mix" / "replan.json").write_text('{"planted": true}')
    from mixtures.report import build_report

    assert build_report(tmp_path / "mix")["replan"] is None
