"""Where `pretrain data run` may write. An output that is a file, lies below a file, or is a
directory of someone else's files (a misspelt `output` naming a project folder: the run's
dataset card would replace its README.md, its ledger.json a file of the same name) is refused
in one line, by `--dry-run` and by the real run before Ray starts, and nothing there changes."""

from __future__ import annotations

from pathlib import Path

import pytest

from pretrain_app.cli import main


def _config(tmp_path: Path, output: str) -> Path:
    (tmp_path / "in").mkdir(exist_ok=True)
    (tmp_path / "in" / "a.jsonl").write_text('{"text": "one document of a few words"}\n')
    config = tmp_path / "job.yaml"
    config.write_text(
        f"inputs: [{tmp_path / 'in'}]\noutput: '{output}'\nstages: {{extract: {{}}}}\n"
    )
    return config


def _snapshot(root: Path) -> dict[str, bytes]:
    """Every file's bytes, but the writer lock every command holds beside its output."""
    files = (p for p in root.rglob("*") if p.is_file() and not p.name.endswith(".lock"))
    return {str(p.relative_to(root)): p.read_bytes() for p in files}


@pytest.mark.parametrize("dry_run", [True, False])
@pytest.mark.parametrize("case", ["file", "below_file", "foreign_dir", "foreign_dir_overwrite"])
def test_an_output_holding_files_we_did_not_write_is_refused_and_left_alone(
    tmp_path: Path, capsys, case: str, dry_run: bool
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "README.md").write_text("my notes\n")
    (project / "ledger.json").write_text('{"mine": true}\n')
    (project / "afile").write_text("not a directory\n")
    output = {
        "file": project / "afile",
        "below_file": project / "afile" / "shards",
        "foreign_dir": project,
        "foreign_dir_overwrite": project,
    }[case]
    before = _snapshot(project)
    argv = ["data", "run", str(_config(tmp_path, str(output)))]
    argv += ["--set", "overwrite=true"] if case.endswith("overwrite") else []
    argv += ["--dry-run"] if dry_run else []
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "output" in err and "choose" in err, err
    assert "Traceback" not in err
    assert _snapshot(project) == before
    names = sorted(p.name for p in project.iterdir() if not p.name.endswith(".lock"))
    assert names == ["README.md", "afile", "ledger.json"]


def test_an_empty_output_is_a_config_error_not_the_current_directory(
    tmp_path: Path, capsys
) -> None:
    assert main(["data", "run", str(_config(tmp_path, "")), "--dry-run"]) == 2
    assert "output" in capsys.readouterr().err


@pytest.mark.parametrize("prepare", ["absent", "empty", "logs_only"])
def test_a_new_or_empty_output_passes_the_dry_run(tmp_path: Path, capsys, prepare: str) -> None:
    output = tmp_path / "out"
    if prepare != "absent":
        output.mkdir()
    if prepare == "logs_only":  # what the command itself creates before its checks
        (output / ".logs").mkdir()
        (output / ".logs" / "data-run.log").write_text("")
    assert main(["data", "run", str(_config(tmp_path, str(output))), "--dry-run"]) == 0
