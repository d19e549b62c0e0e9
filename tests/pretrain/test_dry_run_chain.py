"""`--dry-run` of tokenizer train/encode, eval build, mixture build and ablate on a real artifact
chain (tests/evals/chain.py): a good config passes and writes nothing; a config the real run would
refuse exits 2 with the real run's line, before any work."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from pretrain_app.cli import main


@pytest.fixture(scope="module")
def chain(tmp_path_factory) -> dict[str, Path]:
    from tests.evals.chain import build_chain

    return build_chain(tmp_path_factory.mktemp("chain"))


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err.strip()


def _same_refusal(capsys, *argv, one_line: bool = True) -> str:
    """The dry run and the real run refuse with the same single line; returns it."""
    dry = _run(capsys, *argv, "--dry-run")
    real = _run(capsys, *argv)
    assert dry[0] == 2 and dry[1] == "" and ("\n" not in dry[2] or not one_line), dry
    assert real[0] == 2 and real[2] == dry[2], (dry, real)
    return dry[2]


def _flip_byte(path: Path) -> None:
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    path.write_bytes(bytes(raw))


def _tampered_copy(source: Path, dest: Path, pattern: str) -> Path:
    shutil.copytree(source, dest)
    _flip_byte(sorted(dest.glob(pattern))[0])
    return dest


def _yaml(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


def test_tokenizer_train_dry_run(chain, tmp_path, capsys):
    config = _yaml(
        tmp_path / "tok.yaml", {"data": str(chain["shards"]), "out": str(tmp_path / "t")}
    )
    code, out, _ = _run(capsys, "tokenizer", "train", config, "--dry-run")
    assert code == 0 and "# checked: 2 shards verified" in out and not (tmp_path / "t").exists()
    bad = _tampered_copy(chain["shards"], tmp_path / "shards", "data/*.parquet")
    line = _same_refusal(capsys, "tokenizer", "train", config, "--set", f"data={bad}")
    assert str(bad) in line
    line = _same_refusal(capsys, "tokenizer", "train", config, "--set", f"out={chain['encoded']}")
    assert "holds a 'encoded' artifact" in line


def test_tokenizer_encode_dry_run(chain, tmp_path, capsys):
    args = ["tokenizer", "encode", chain["tokenizer"], "--data", chain["shards"], "--no-ray"]
    code, out, _ = _run(capsys, *args, "--out", tmp_path / "enc", "--dry-run")
    assert code == 0 and "2 shards verified" in out and not (tmp_path / "enc").exists()
    bad = _tampered_copy(chain["tokenizer"], tmp_path / "tok", "tokenizer.json")
    args[2] = bad
    line = _same_refusal(capsys, *args, "--out", tmp_path / "enc")
    assert str(bad) in line and not (tmp_path / "enc").exists()


def test_eval_build_dry_run(chain, tmp_path, capsys):
    config = _yaml(tmp_path / "eval.yaml", {"shards": str(chain["shards"]), "out": str(tmp_path)})
    line = _same_refusal(capsys, "eval", "build", config)  # out holds other files
    assert "holds no evalset artifact" in line
    good = ["eval", "build", config, "--set", f"out={tmp_path / 'sets'}"]
    code, out, _ = _run(capsys, *good, "--dry-run")
    assert code == 0 and "shard files verified" in out and not (tmp_path / "sets").exists()
    line = _same_refusal(capsys, *good, "--set", f"train_shards=[{chain['encoded']}]")
    assert "'encoded' artifact, this needs a 'shards'" in line


def test_mixture_build_dry_run(chain, tmp_path, capsys):
    config = chain["mixture_config"]
    out = ["--set", f"out={tmp_path / 'mix'}"]
    code, stdout, _ = _run(capsys, "mixture", "build", config, *out, "--dry-run")
    assert code == 0 and "quotas feasible" in stdout and not (tmp_path / "mix").exists()
    # infeasible epoch caps, found by the plan the real build makes (one line per component)
    line = _same_refusal(
        capsys,
        "mixture",
        "build",
        config,
        *out,
        "--set",
        "recipe.components.1.max_epochs=0.01",
        one_line=False,
    )
    assert "code: needs" in line and "max_epochs is 0.01" in line
    # a tokenizer mismatch between the pin and the encoded data
    line = _same_refusal(
        capsys, "mixture", "build", config, *out, "--set", "build.tokenizer_sha256=" + "0" * 64
    )
    assert "tokenizer" in line
    bad = _tampered_copy(chain["encoded"], tmp_path / "enc", "*.idx")
    line = _same_refusal(capsys, "mixture", "build", config, *out, "--set", f"build.encoded={bad}")
    assert str(bad) in line
    assert not (tmp_path / "mix").exists()


def test_ablate_dry_run(chain, tmp_path, capsys):
    ablation = {
        "mixture": str(chain["mixture_config"]),
        "train": str(chain["train"]),
        "eval_sets": str(chain["evalsets"]),
        "out": str(tmp_path / "abl"),
        "proxies": [{"name": "p0", "overrides": {"model.hidden_size": 32}}],
        "token_budget": 2560,
        "dirichlet": {"count": 1},
        "seeds": [1, 2],
    }
    config = _yaml(tmp_path / "abl.yaml", ablation)
    code, out, _ = _run(capsys, "ablate", config, "--dry-run")
    assert code == 0 and "4 proxy runs planned" in out and not (tmp_path / "abl").exists()
    assert _run(capsys, "ablate", config, "--dry-run", "--set", "proxies.0.nme=x")[0] == 2
    line = _same_refusal(capsys, "ablate", config, "--set", f"eval_sets={chain['shards']}")
    assert "this needs a 'evalset'" in line


def test_encode_with_relative_paths(chain, monkeypatch, capsys):
    """The README walkthrough passes relative paths (runs/tokenizer, runs/shards)."""
    monkeypatch.chdir(chain["shards"].parent)
    args = ["tokenizer", "encode", "tokenizer", "--data", "shards", "--out", "enc-rel", "--no-ray"]
    assert main(args) == 0
    assert "encoded 240 documents" in capsys.readouterr().out
