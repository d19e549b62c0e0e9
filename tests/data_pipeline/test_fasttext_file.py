"""A fastText model file is checked against its own size before fastText reads it, and `--dry-run`
checks every model file the run will load (#34 items 4 and 6)."""

from __future__ import annotations

import struct
import time
from pathlib import Path

import pytest
import yaml

from data_pipeline.fasttext_file import check_fasttext_file, load_fasttext
from data_pipeline.stages.langid import default_model_path
from pretrain.errors import ArtifactError
from pretrain_app.cli import main

DOCS = Path(__file__).resolve().parents[1] / "data" / "data_pipeline" / "docs.jsonl"
DIM_OFFSET = 8  # magic, version, then Args.dim


def _with_dim(tmp_path: Path, dim: int) -> Path:
    raw = bytearray(default_model_path().read_bytes())
    raw[DIM_OFFSET : DIM_OFFSET + 4] = struct.pack("<i", dim)
    path = tmp_path / f"dim{dim}.ftz"
    path.write_bytes(bytes(raw))
    return path


def test_lid176_passes_and_loads() -> None:
    check_fasttext_file(default_model_path())
    assert load_fasttext(default_model_path()).get_dimension() == 16


@pytest.mark.timeout(60)
@pytest.mark.parametrize("dim", [2**30, 9_000])
def test_a_declared_huge_dimension_is_refused_before_loading(tmp_path, dim) -> None:
    """dim 2**30 cost fastText 176 CPU-s before it failed; 9,000 is in range but its matrix does
    not fit in the file. Both are one line naming the file, at once."""
    path = _with_dim(tmp_path, dim)
    started = time.process_time()
    with pytest.raises(ArtifactError) as refused:
        load_fasttext(path)
    assert time.process_time() - started < 2
    assert str(path) in str(refused.value) and "\n" not in str(refused.value)


@pytest.mark.parametrize(
    "content",
    [b"", b"garbage, not a model\n" * 100, default_model_path().read_bytes()[:5000]],
    ids=["empty", "garbage", "truncated"],
)
def test_dry_run_checks_every_model_file_the_run_loads(tmp_path, capsys, content) -> None:
    """Before: --dry-run with a garbage model printed 'models verified' and exited 0, and the real
    run died with a 79-line traceback. Now both refuse with the same one line, exit 2."""
    model = tmp_path / "lid.bin"
    model.write_bytes(content)
    config = tmp_path / "pipeline.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "inputs": [str(DOCS)],
                "output": str(tmp_path / "out"),
                "stages": {"extract": {}, "langid": {"model": str(model)}, "rules": {}},
            }
        )
    )
    lines = []
    for extra in (["--dry-run"], []):
        code = main(["data", "run", str(config), *extra])
        captured = capsys.readouterr()
        err = captured.err.strip()
        assert code == 2 and str(model) in err and "\n" not in err, err
        assert "models verified" not in captured.out
        lines.append(err)
    assert lines[0] == lines[1]
    assert not (tmp_path / "out").exists()
