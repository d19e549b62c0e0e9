"""A crafted tokenizer.json inside a resealed tokenizer artifact (manifest, identity and seal
redone, as a forger would): refused in one line when loaded, exit 2 from every command, before
the `tokenizers` library compiles or runs what it holds. Before: a regex that does not compile was
a traceback (`Exception: Oniguruma error`, exit 1), and one that backtracks catastrophically
passed and panicked in Rust mid-encode on a document it matched (44 lines, exit 1)."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pretrain.artifacts.tokenizer import identity_of, tokenizer_id
from pretrain.errors import ArtifactError
from pretrain.manifest import SEAL, seal_of
from tests.conftest import clean_env
from tokenizer.lock import load_locked

BACKTRACKS = "(x+x+)+y"  # on "xxx...x": Oniguruma's retry limit, a panic in `tokenizers`


def _regex(pattern: str) -> Callable[[dict[str, Any]], None]:
    def edit(data: dict[str, Any]) -> None:
        data["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = pattern

    return edit


def _set(*path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(data: dict[str, Any]) -> None:
        for key in path[:-1]:
            data = data[key]
        data[path[-1]] = value

    return edit


def _merge(data: dict[str, Any]) -> None:
    data["model"]["merges"].insert(0, ["qqq", "www"])


CASES = {
    "regex that backtracks": (_regex(BACKTRACKS), "pre_tokenizer"),
    "regex that does not compile": (_regex(r"[\p{Han"), "pre_tokenizer"),
    "unknown pre-tokenizer": (_set("pre_tokenizer", "type", value="Nope"), "pre_tokenizer"),
    "normalizer added": (_set("normalizer", value={"type": "Lowercase"}), "normalizer"),
    "decoder changed": (_set("decoder", value={"type": "Fuse"}), "decoder"),
    "id beyond the vocabulary": (_set("model", "vocab", "zz", value=70000), "vocab_size"),
    "merge of unknown tokens": (_merge, "does not load"),
}


def craft(source: Path, out: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    """A copy of the tokenizer artifact `source` with `edit` applied to its tokenizer.json and
    the manifest's file entry, identity and seal redone: only its content can refuse it."""
    shutil.copytree(source, out)
    data = json.loads((out / "tokenizer.json").read_text())
    edit(data)
    raw = json.dumps(data).encode()
    (out / "tokenizer.json").write_bytes(raw)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["files"]["tokenizer.json"] = {
        "bytes": len(raw),
        "sha256": hashlib.sha256(raw).hexdigest(),
    }
    sha = identity_of({name: entry["sha256"] for name, entry in manifest["files"].items()})
    manifest["tokenizer"].update(sha256=sha, id=tokenizer_id(manifest["tokenizer"]["name"], sha))
    manifest.pop(SEAL)
    manifest[SEAL] = seal_of(manifest)
    (out / "manifest.json").write_text(json.dumps(manifest))
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_crafted_tokenizer_json_is_refused_in_one_line(
    tokenizer_dir: Path, tmp_path: Path, case: str
) -> None:
    edit, named = CASES[case]
    crafted = craft(tokenizer_dir, tmp_path / "tok", edit)
    with pytest.raises(ArtifactError) as info:
        load_locked(crafted)
    message = str(info.value)
    assert "\n" not in message and str(crafted / "tokenizer.json") in message
    assert named in message and "pretrain tokenizer train" in message


def test_the_backtracking_regex_is_one_the_library_panics_on(tokenizer_dir: Path) -> None:
    """Why the pipeline is checked before the library sees it: the panic is not an Exception
    (pyo3's PanicException derives from BaseException) and Rust prints it before Python can."""
    from tokenizers import Tokenizer

    data = json.loads((tokenizer_dir / "tokenizer.json").read_text())
    _regex(BACKTRACKS)(data)
    library = Tokenizer.from_str(json.dumps(data))
    with pytest.raises(BaseException, match="retry-limit-in-match") as info:
        library.encode("x" * 60)
    assert not isinstance(info.value, Exception)


@pytest.mark.parametrize("command", ["encode", "eval"])
def test_commands_that_load_it_print_one_line_exit_2(
    tokenizer_dir: Path, shards_dir: Path, tmp_path: Path, command: str
) -> None:
    """`pretrain tokenizer encode` / `eval` on the backtracking tokenizer, in a process of its
    own: one line naming the file and what to do, exit 2 (launch, export and eval run load the
    tokenizer through the same `load_locked`)."""
    crafted = craft(tokenizer_dir, tmp_path / "tok", _regex(BACKTRACKS))
    argv = ["tokenizer", command, str(crafted), "--data", str(shards_dir)]
    argv += ["--out", str(tmp_path / "enc"), "--no-ray"] if command == "encode" else []
    done = subprocess.run(
        [sys.executable, "-m", "pretrain_app", *argv],
        capture_output=True,
        text=True,
        timeout=300,
        env=clean_env(),
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr[-3000:]
    assert lines[0].startswith(f"pretrain tokenizer {command}: error: {crafted / 'tokenizer.json'}")
    assert "retrain it with `pretrain tokenizer train`" in lines[0]
