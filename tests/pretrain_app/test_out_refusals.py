"""The other commands that write a folder (audit for `pretrain tokenizer train/encode` deleting
a user's files, tests/tokenizer/test_out_foreign.py). An output that is a file is one line
(exit 2), not a NotADirectoryError/FileExistsError traceback; `pretrain eval run` and
`pretrain ablate`, which had no check, refuse a non-empty folder they did not write before any
work, and nothing there changes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from pretrain import progress
from pretrain.manifest import load_manifest, verify
from pretrain_app.cli import main

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def _snapshot(root: Path) -> dict[str, bytes]:
    """Every file's bytes (dot-files included), but the writer lock beside an output."""
    files = (p for p in root.rglob("*") if p.is_file() and not p.name.endswith(".lock"))
    return {str(p.relative_to(root)): p.read_bytes() for p in files}


def _user_folder(tmp_path: Path) -> Path:
    """A folder of someone else's files, named like what our commands write there."""
    user = tmp_path / "user"
    (user / "raw").mkdir(parents=True)
    (user / "raw" / "crawl.warc.gz").write_bytes(b"the user's raw data")
    (user / "run").mkdir()
    (user / "run" / "notes.md").write_bytes(b"my run notes")
    for name in ("results.jsonl", "report.json", "capability.png", "chosen_mixture.yaml"):
        (user / name).write_bytes(b"mine")
    return user


def _one_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "choose" in err and "Traceback" not in err, err
    return err


@pytest.mark.parametrize(
    "command",
    [
        ["data", "train-lm", str(CONFIGS / "lm.yaml")],
        ["data", "train-classifier", str(CONFIGS / "classifier_quality.yaml")],
        ["eval", "build", str(CONFIGS / "eval.yaml")],
    ],
    ids=lambda command: "-".join(command[:2]).replace("/", ""),
)
def test_an_output_that_is_a_file_is_one_line(tmp_path: Path, capsys, command: list[str]) -> None:
    afile = tmp_path / "afile"
    afile.write_bytes(b"not a directory\n")
    err = _one_line(capsys, [*command, "--set", f"out={afile}"])
    assert str(afile) in err and "is a file" in err
    assert afile.read_bytes() == b"not a directory\n"


def test_eval_run_refuses_an_out_it_did_not_write(tmp_path: Path, capsys) -> None:
    run = tmp_path / "run"
    (run / "checkpoints" / "iter_0000001").mkdir(parents=True)  # never loaded: refused first
    user = _user_folder(tmp_path)
    before = _snapshot(user)
    argv = ["eval", "run", str(run), "--sets", str(tmp_path / "sets"), "--out", str(user)]
    err = _one_line(capsys, argv)
    assert "--out" in err and str(user) in err
    assert _snapshot(user) == before


def test_ablate_refuses_an_out_it_did_not_write(tmp_path: Path, capsys) -> None:
    user = _user_folder(tmp_path)
    before = _snapshot(user)
    config = yaml.safe_load((CONFIGS / "ablation.yaml").read_text())
    path = tmp_path / "ablation.yaml"
    path.write_text(yaml.safe_dump({**config, "out": str(user)}))
    err = _one_line(capsys, ["ablate", str(path), "--dry-run"])
    assert "out =" in err and str(user) in err
    assert _snapshot(user) == before


@pytest.mark.parametrize("dry_run", [True, False])
def test_a_refused_data_run_leaves_no_log_in_the_folder(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch, dry_run: bool
) -> None:
    """The log of a refused `pretrain data run` stays in the temp directory: before, it was
    moved into `<output>/.logs/` of the user's folder whenever anything had written to it (an
    empty log is dropped, so the chatter is written here, standing in for Ray's or pyarrow's)."""
    import data_pipeline.runner as runner

    real = runner.output_path

    def chatty(output):  # called by the run's checks, before the refusal, old code and new
        print("library chatter on stderr", file=sys.stderr)
        return real(output)

    monkeypatch.setattr(runner, "output_path", chatty)
    user = _user_folder(tmp_path)
    output = user
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_text('{"text": "one document of a few words"}\n')
    config = tmp_path / "job.yaml"
    config.write_text(
        f"inputs: [{tmp_path / 'in'}]\noutput: '{output}'\nstages: {{extract: {{}}}}\n"
    )
    before = _snapshot(user)
    err = _one_line(capsys, ["data", "run", str(config), *(["--dry-run"] if dry_run else [])])
    assert "output =" in err and str(output) in err
    assert _snapshot(user) == before  # no .logs/ folder left in the user's directory
    log = progress.log_path()
    assert log is not None and user not in log.parents
    assert "library chatter" in log.read_text()


MODELS = {
    "train-lm": (["data", "train-lm", str(CONFIGS / "lm.yaml")], ["order=3", "max_tokens=60000"]),
    "train-classifier": (
        ["data", "train-classifier", str(CONFIGS / "classifier_quality.yaml")],
        ["fasttext.dim=16", "fasttext.bucket=20000", "fasttext.epoch=10"],
    ),
}


def _model_argv(command: str, out: Path, dry_run: bool = False) -> list[str]:
    argv, small = MODELS[command]
    sets = [arg for value in [f"out={out}", *small] for arg in ("--set", value)]
    return [*argv, *sets, *(["--dry-run"] if dry_run else [])]


@pytest.mark.parametrize("command", sorted(MODELS))
def test_a_model_trains_into_a_folder_holding_only_its_own_earlier_logs(
    tmp_path: Path, command: str
) -> None:
    """What an earlier run that was refused, failed or was killed before its first model file
    left in `out` (its .logs/) does not refuse the re-run: before, every re-run there was `not
    empty`. (Training runs in the scratch folder beside `out`, so nothing else lands in it.)"""
    out = tmp_path / "model"
    (out / ".logs").mkdir(parents=True)
    (out / ".logs" / f"pretrain-data-{command}-20261203T000000-1.log").write_text("killed\n")
    assert main(_model_argv(command, out)) == 0
    kind = "kenlm-model" if command == "train-lm" else "fasttext-model"
    assert load_manifest(out)["kind"] == kind
    verify(out)


@pytest.mark.parametrize("dry_run", [True, False])
@pytest.mark.parametrize("command", sorted(MODELS))
def test_a_model_refuses_a_folder_it_did_not_write_dry_run_too(
    tmp_path: Path, capsys, command: str, dry_run: bool
) -> None:
    """Still refused, and left alone: a folder of the user's files (before: the dry run passed,
    only the real run refused)."""
    user = _user_folder(tmp_path)
    before = _snapshot(user)
    err = _one_line(capsys, _model_argv(command, user, dry_run))
    assert "out =" in err and str(user) in err and "not empty" in err
    assert _snapshot(user) == before


def _out_case(tmp_path: Path, case: str) -> tuple[Path, Path]:
    """(the user's folder, the out given): `file`, `below_file` or `foreign` (their folder)."""
    user = _user_folder(tmp_path)
    out = {"file": user / "report.json", "below_file": user / "report.json" / "x"}
    return user, out.get(case, user)


@pytest.mark.parametrize("dry_run", [True, False])
@pytest.mark.parametrize("case", ["file", "below_file", "foreign"])
def test_mixture_build_refuses_a_file_or_a_folder_it_did_not_write(
    tmp_path: Path, capsys, case: str, dry_run: bool
) -> None:
    """One line (exit 2) naming `out:`, before the encoded data is read, and by --dry-run too
    (before, the dry run passed: it never looked at `out`); the user's files are unchanged."""
    from tests.mixtures.conftest import make_encoded, mixture_config

    encoded = make_encoded(tmp_path / "enc")
    user, out = _out_case(tmp_path, case)
    before = _snapshot(user)
    config = tmp_path / "mixture.yaml"
    config.write_text(yaml.safe_dump(mixture_config(encoded, out)))
    err = _one_line(capsys, ["mixture", "build", str(config), *(["--dry-run"] if dry_run else [])])
    assert str(out) in err  # below a file the writer lock refuses first (real run), in its words
    assert ("out: " in err) if case != "below_file" or dry_run else True
    assert ("is a file" in err) if case == "file" else True
    assert _snapshot(user) == before


@pytest.mark.parametrize("case", ["file", "below_file", "foreign"])
def test_export_refuses_a_file_or_a_folder_it_did_not_write_before_reading_the_run(
    tmp_path: Path, capsys, case: str
) -> None:
    """One line (exit 2) naming `--out`; the checkpoint is not read first (the run named here
    does not exist: before, its error came first, after a real run's model load)."""
    user, out = _out_case(tmp_path, case)
    before = _snapshot(user)
    err = _one_line(capsys, ["export", str(tmp_path / "no-run"), "--out", str(out)])
    assert str(out) in err  # below a file the writer lock refuses first, in its own words
    assert ("--out" in err) if case != "below_file" else True
    assert ("is a file" in err) if case == "file" else True
    assert _snapshot(user) == before


@pytest.fixture(scope="module")
def built_mixture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.mixtures.conftest import make_encoded, mixture_config

    root = tmp_path_factory.mktemp("mixture")
    config = root / "mixture.yaml"
    config.write_text(yaml.safe_dump(mixture_config(make_encoded(root / "enc"), root / "mix")))
    assert main(["mixture", "build", str(config)]) == 0
    return root / "mix"


@pytest.mark.parametrize("case", ["file", "foreign", "own_report"])
def test_mixture_report_refuses_a_file_or_a_folder_it_did_not_write(
    tmp_path: Path, capsys, built_mixture: Path, case: str
) -> None:
    """`pretrain mixture report DIR --out X`: a file was a FileExistsError traceback, a user's
    folder lost its report.json (replaced) and got a report.png; now one line, nothing changed.
    An earlier report's folder is still replaced (`own_report`)."""
    argv = ["mixture", "report", str(built_mixture), "--out"]
    if case == "own_report":
        mine = tmp_path / "my-report"
        for _ in range(2):
            assert main([*argv, str(mine)]) == 0
        assert sorted(p.name for p in mine.iterdir()) == [
            "manifest.json",
            "report.json",
            "report.png",
        ]
        return
    user, out = _out_case(tmp_path, case)
    before = _snapshot(user)
    err = _one_line(capsys, [*argv, str(out)])
    assert "--out" in err and str(out) in err
    assert _snapshot(user) == before


@pytest.mark.parametrize("case", ["own_logs", "foreign_manifest"])
def test_eval_build_out_may_hold_its_logs_but_not_someone_elses_artifact(
    tmp_path: Path, capsys, case: str
) -> None:
    """`pretrain eval build`: an out holding only .logs/ (an earlier refused or failed build)
    was refused as not empty; one holding another tool's manifest.json and a sets/ folder
    passed as an eval set and was deleted whole by the build. Now the first builds, the second
    is one line and nothing there changes."""
    from tests.tokenizer.synthetic import write_shards
    from tests.tokenizer.tok_helpers import make_records

    shards = write_shards(tmp_path / "shards", make_records(200), docs_per_shard=100)
    out = tmp_path / "sets"
    if case == "own_logs":
        (out / ".logs").mkdir(parents=True)
        (out / ".logs" / "pretrain-eval-build-20261203T000000-1.log").write_text("refused\n")
    else:
        (out / "sets").mkdir(parents=True)
        (out / "sets" / "mine.txt").write_bytes(b"the user's eval notes")
        (out / "manifest.json").write_bytes(b'{"name": "another tool\'s manifest"}')
    before = _snapshot(out)
    config = yaml.safe_load((CONFIGS / "eval.yaml").read_text())
    path = tmp_path / "eval.yaml"
    path.write_text(yaml.safe_dump({**config, "shards": str(shards), "out": str(out)}))
    argv = ["eval", "build", str(path), "--set", "min_docs_per_set=1"]
    if case == "own_logs":
        assert main(argv) == 0, capsys.readouterr().err
        assert load_manifest(out)["kind"] == "evalset"
        return
    err = _one_line(capsys, argv)
    assert "out =" in err and str(out) in err
    assert _snapshot(out) == before
