"""`pretrain show DIR` on a real chain: shards -> tokenizer -> encoded -> mixture. It names the
kind, the command, the lineage back to raw inputs with headline figures, and marks an ancestor
that was tampered with, replaced or removed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pretrain_app.cli import main


@pytest.fixture(scope="module")
def chain(tmp_path_factory) -> dict[str, Path]:
    from tests.evals.chain import build_chain

    root = tmp_path_factory.mktemp("runs")
    paths = build_chain(root)
    assert main(["-q", "mixture", "build", str(paths["mixture_config"])]) == 0
    paths["mixture"] = root / "mixture"
    return paths


def _show(capsys, directory: Path, *flags: str) -> tuple[int, str]:
    code = main(["show", str(directory), *flags])
    return code, capsys.readouterr().out


def _copy(chain: dict[str, Path], tmp_path: Path) -> dict[str, Path]:
    """The whole chain copied to a new place (the recorded paths still name the original)."""
    root = chain["mixture"].parent
    target = tmp_path / "copy"
    shutil.copytree(root, target)
    return {name: target / path.name for name, path in chain.items()}


def test_show_names_kind_command_lineage_and_figures(chain, capsys):
    code, out = _show(capsys, chain["mixture"])
    assert code == 0, out
    first = out.splitlines()[0]
    assert first.startswith(f"{chain['mixture']}: mixture (manifest ") and first.endswith(" ok")
    assert "made by: pretrain -q mixture build" in out
    assert "recipe prose-code" in out and "shares prose 0.8, code 0.2" in out
    assert "└─ encoded " in out and "tokenizer " in out and "shards " in out
    assert "(shown above)" in out  # the shards reached through encoded and tokenizer
    code, text = _show(capsys, chain["mixture"], "--json")
    tree = json.loads(text)
    assert code == 0 and tree["problems"] == []
    assert tree["kind"] == "mixture" and tree["status"] == "ok"
    (encoded,) = tree["inputs"]
    assert encoded["kind"] == "encoded" and encoded["figures"]["tokens"] > 0
    kinds = {child["kind"]: child for child in encoded["inputs"]}
    assert set(kinds) == {"shards", "tokenizer"}
    assert kinds["shards"]["figures"]["documents_kept"] == 240
    assert kinds["tokenizer"]["figures"]["tokenizer"].startswith("bpe")
    assert tree["made_by"]["config_sha256"] and "git_commit" in tree["made_by"]


def test_show_marks_a_tampered_ancestor(chain, tmp_path, capsys):
    copy = _copy(chain, tmp_path)
    raw = bytearray((copy["tokenizer"] / "tokenizer.json").read_bytes())
    raw[len(raw) // 2] ^= 0x01  # same size, one bit
    (copy["tokenizer"] / "tokenizer.json").write_bytes(bytes(raw))
    # the copy's lineage names the original paths, which still verify: show the copy's tokenizer
    code, out = _show(capsys, copy["tokenizer"])
    assert code == 1 and "TAMPERED" in out.splitlines()[0] and "tokenizer.json" in out


def test_show_marks_a_replaced_or_missing_ancestor_and_finds_a_moved_one(chain, tmp_path, capsys):
    copy = _copy(chain, tmp_path)
    # moved together: the recorded originals are elsewhere, found by name with the same hash
    moved = tmp_path / "moved"
    shutil.copytree(copy["mixture"].parent, moved)
    code, out = _show(capsys, moved / "mixture", "--json")
    tree = json.loads(out)
    assert code == 0 and tree["problems"] == []
    assert tree["inputs"][0]["path"] == str(chain["encoded"])
    # replaced: another artifact where the lineage recorded the encoded data
    shutil.rmtree(moved / "encoded")
    shutil.copytree(chain["shards"], moved / "encoded")
    original = chain["encoded"]
    hidden = tmp_path / "hidden-encoded"
    original.rename(hidden)
    try:
        code, out = _show(capsys, moved / "mixture")
        assert code == 1
        assert "CHANGED: manifest is" in out and "NOT OK:" in out
        shutil.rmtree(moved / "encoded")
        code, out = _show(capsys, moved / "mixture", "--json")
        tree = json.loads(out)
        assert code == 1 and tree["inputs"][0]["status"] == "missing"
        assert tree["inputs"][0]["kind"] == "encoded"
    finally:
        hidden.rename(original)


def test_show_refuses_a_directory_that_is_not_an_artifact(tmp_path, capsys):
    assert main(["show", str(tmp_path)]) == 2
    assert "is not an artifact" in capsys.readouterr().err


def test_show_quotes_the_command_so_it_can_be_pasted_back(tmp_path, capsys):
    """A path with a space (or a shell character) in the command: `made by:` used to join the
    words with spaces, so the line named a different command than the one that ran."""
    import shlex

    import yaml

    from tests.evals.chain import records
    from tests.tokenizer.synthetic import write_shards

    shards = write_shards(tmp_path / "my shards", records(40), docs_per_shard=40)
    config = tmp_path / "tok.yaml"
    config.write_text(yaml.safe_dump({"data": str(shards), "vocab_size": 300}))
    argv = ["-q", "tokenizer", "train", str(config), "--set", f"out={tmp_path}/tok 'ü' $x"]
    assert main(argv) == 0
    code, out = _show(capsys, tmp_path / "tok 'ü' $x")
    assert code == 0, out
    (line,) = [line for line in out.splitlines() if line.startswith("  made by: ")]
    assert shlex.split(line.removeprefix("  made by: ")) == ["pretrain", *argv]
