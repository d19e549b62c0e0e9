"""`pretrain eval run` argument errors are one line with the fix (the real checkpoint path is in
test_ablate_e2e.py, slow)."""

from __future__ import annotations

from evals.cli import find_checkpoints, find_tokenizer
from pretrain.manifest import write_manifest
from pretrain_app.cli import main


def test_a_directory_without_checkpoints_is_refused(tmp_path, capsys):
    (tmp_path / "sets").mkdir()
    assert main(["eval", "run", str(tmp_path), "--sets", str(tmp_path / "sets")]) == 2
    assert "holds no checkpoints/iter_NNNNNNN" in capsys.readouterr().err


def test_checkpoints_are_found_in_step_order_and_tokenizer_through_lineage(tmp_path):
    run = tmp_path / "run"
    for step in (20, 5, 10):
        (run / "checkpoints" / f"iter_{step:07d}").mkdir(parents=True)
    run_dir, found = find_checkpoints(run)
    assert run_dir == run and [s for s, _ in found] == [5, 10, 20]
    assert find_checkpoints(run / "checkpoints" / "iter_0000010")[1][0][0] == 10
    tokenizer = tmp_path / "tok"
    tokenizer.mkdir()
    write_manifest(tokenizer, "tokenizer")
    encoded = tmp_path / "enc"
    encoded.mkdir()
    write_manifest(encoded, "encoded", inputs=[tokenizer], config={"data": "shards"})
    mixture = tmp_path / "mix"
    mixture.mkdir()
    write_manifest(mixture, "mixture", inputs=[encoded])
    write_manifest(run, "run", inputs=[mixture], config={"data": {"mixture_dir": str(mixture)}})
    assert find_tokenizer(run) == tokenizer


def test_counts_below_one_are_refused_before_any_checkpoint_is_loaded(tmp_path, capsys):
    """--batch-size 0 crashed in range() after the checkpoint was loaded, and
    --max-docs -1 silently dropped the last document of every set (texts[:-1])."""
    import pytest

    run = tmp_path / "run"
    (run / "checkpoints" / "iter_0000001").mkdir(parents=True)  # not loadable: never reached
    argv = ["eval", "run", str(run), "--sets", str(tmp_path / "none")]
    for flag, value in [
        ("--batch-size", "0"),
        ("--max-docs", "-1"),
        ("--max-docs", "0"),
    ]:
        capsys.readouterr()
        with pytest.raises(SystemExit) as info:
            main([*argv, flag, value])
        assert info.value.code == 2
        last = capsys.readouterr().err.strip().splitlines()[-1]
        assert last == f"pretrain eval run: error: argument {flag}: {value}: must be 1 or more"


def test_two_task_files_with_one_name_are_refused(tmp_path, capsys):
    """Metrics are keyed task/<file stem>/...: a second `mc.jsonl` overwrote the first's."""
    import shutil
    from pathlib import Path

    tiny = Path(__file__).resolve().parents[1] / "data" / "evals" / "tiny_mc.jsonl"
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        shutil.copy(tiny, tmp_path / folder / "mc.jsonl")
    run = tmp_path / "run"
    (run / "checkpoints" / "iter_0000001").mkdir(parents=True)  # not loadable: never reached
    argv = ["eval", "run", str(run), "--sets", str(tmp_path / "none"), "--tasks"]
    capsys.readouterr()
    assert main([*argv, str(tmp_path / "a" / "mc.jsonl"), str(tmp_path / "b" / "mc.jsonl")]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("pretrain eval run: error:") and "task name 'mc'" in last, last
