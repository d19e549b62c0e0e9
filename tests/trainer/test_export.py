"""`pretrain export --format hf`: transformers loads the export offline and computes the same
log-probabilities as our model on real documents, from checkpoints saved at TP=1, TP=2 and PP=2."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pretrain.manifest import load_manifest, verify
from pretrain_app.cli import main
from tests.trainer.export_check import real_documents
from tests.trainer.trainer_testlib import tiny_config

ROOT = Path(__file__).resolve().parents[2]
VOCAB = 384


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "MASTER_", "HF_"))}
    return {**env, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


@pytest.fixture(scope="module")
def sample_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A byte-level BPE trained on the real demo sample (English, Chinese, code)."""
    from tests.tokenizer.synthetic import write_shards
    from tokenizer.config import TokenizerTrainConfig
    from tokenizer.train import train

    root = tmp_path_factory.mktemp("sample_tok")
    records = [{"text": t, "domain": "web", "lang": "en"} for t in real_documents(200)]
    shards = write_shards(root / "shards", records, docs_per_shard=100)
    out = root / "tokenizer"
    train(TokenizerTrainConfig(data=str(shards), out=str(out), vocab_size=VOCAB))
    return out


def train_run(run_dir: Path, world: int = 1, **sections: dict) -> Path:
    from tests.trainer.trainer_testlib import run_ranks

    model = {"vocab_size": VOCAB, **sections.pop("model", {})}
    config = tiny_config(
        run_dir,
        run={"train_steps": 2},
        checkpoint={"every": 2},
        model=model,
        **sections,
    )
    run_ranks(config, world)
    return run_dir


def run_check(module: str, *args: Path) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", module, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
        cwd=ROOT,
        env=clean_env(),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def export_and_compare(run_dir: Path, tokenizer: Path, out: Path) -> dict:
    command = [str(Path(sys.executable).parent / "pretrain"), "export", str(run_dir)]
    command += ["--out", str(out), "--tokenizer", str(tokenizer)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=240, env=clean_env())
    assert done.returncode == 0, done.stderr[-3000:]
    assert "LlamaForCausalLM" in done.stdout
    checkpoint = run_dir / "checkpoints" / "iter_0000002"
    return run_check("tests.trainer.export_check", out, checkpoint, tokenizer)


def assert_equivalent(result: dict) -> None:
    assert result["hf_class"] == "LlamaForCausalLM"
    assert result["documents"] >= 4 and result["same_ids"]
    assert result["max_abs_diff"] < 1e-5, result
    assert result["hf_generated"] == result["our_generated"]
    assert result["model_max_length"] == 64 and result["eos"] == 0


@pytest.fixture(scope="module")
def exported(sample_tokenizer, tmp_path_factory) -> tuple[Path, Path, dict]:
    """A GQA/tied run on the sample tokenizer, its export, and the transformers comparison."""
    root = tmp_path_factory.mktemp("exported")
    run_dir = train_run(root / "run")
    out = root / "hf"
    return run_dir, out, export_and_compare(run_dir, sample_tokenizer, out)


@pytest.mark.timeout(600)
def test_export_gqa_tied_loads_in_transformers_with_equal_logprobs(exported):
    run_dir, out, result = exported
    assert_equivalent(result)
    assert result["tied"]
    verify(out, deep=True)
    manifest = load_manifest(out)
    kinds = {entry["kind"] for entry in manifest["inputs"]}
    assert manifest["kind"] == "hf_export" and kinds == {"run", "checkpoint", "tokenizer"}
    assert manifest["counts"]["step"] == 2
    assert {
        "config.json",
        "model.safetensors",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
    } <= set(os.listdir(out))
    # every exported file is world-readable, the weights too (safetensors writes 0600)
    assert {p.name: p.stat().st_mode & 0o777 for p in out.iterdir() if p.is_file()} == {
        p.name: 0o644 for p in out.iterdir() if p.is_file()
    }


@pytest.fixture(scope="module")
def lm_eval_results(exported, sample_tokenizer) -> dict:
    """lm-eval on the checkpoint (our LM wrapper) and on its export (lm-eval's HFLM), and our
    JSONL scorer beside lm-eval on one file (tests/trainer/lm_eval_check.py, its own process)."""
    run_dir, out, _ = exported
    checkpoint = run_dir / "checkpoints" / "iter_0000002"
    return run_check("tests.trainer.lm_eval_check", out, checkpoint, sample_tokenizer)


@pytest.mark.timeout(600)
def test_lm_eval_tasks_on_checkpoint_equal_lm_evals_hflm_on_the_export(lm_eval_results):
    """BoolQ, PIQA, HellaSwag and ARC-Easy in their published formats, offline: lm-eval through
    our LM wrapper on the checkpoint gives lm-eval's own HFLM numbers on the export; our JSONL
    scorer gives lm-eval's numbers on the same file."""
    result = lm_eval_results
    assert result["documents"] == {
        "boolq_local": 4,
        "piqa_local": 4,
        "hellaswag_local": 3,
        "arc_easy_local": 3,
    }
    ours, theirs = result["checkpoint"], result["export"]
    assert set(ours) == set(theirs) and "task/hellaswag/acc_norm" in ours
    for key, value in ours.items():
        assert value == pytest.approx(theirs[key], abs=1e-9), key
    lm_eval_mc = result["lm_eval_on_our_file"]
    assert result["our_scorer"]["acc"] == pytest.approx(lm_eval_mc["task/tiny_mc/acc"])
    assert result["our_scorer"]["acc_norm"] == pytest.approx(lm_eval_mc["task/tiny_mc/acc_norm"])


def test_export_refuses_missing_step_and_missing_tokenizer(tmp_path, capsys, reference_run):
    run_dir, _ = reference_run
    assert main(["export", str(run_dir), "--step", "5", "--out", str(tmp_path / "a")]) == 2
    assert "no checkpoint at step 5" in capsys.readouterr().err
    assert main(["export", str(run_dir), "--out", str(tmp_path / "b")]) == 2
    assert "--tokenizer" in capsys.readouterr().err  # synthetic data: no tokenizer lineage
    assert not (tmp_path / "b" / "manifest.json").exists()


def test_non_llama_shape_is_refused_before_loading(tmp_path):
    from pretrain.errors import ConfigError
    from trainer.config import ModelConfig
    from trainer.hf_mapping import check_llama_shape

    check_llama_shape(ModelConfig())
    with pytest.raises(ConfigError, match="swiglu=false.*LayerNorm"):
        check_llama_shape(ModelConfig(swiglu=False, normalization="LayerNorm"))


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_export_untied_with_biases_from_tensor_parallel_2(sample_tokenizer, tmp_path):
    """Untied embeddings and linear biases (sharded over TP=2): the biases reach the export,
    trained away from their zero init, and transformers gives our log-probabilities."""
    from safetensors import safe_open

    run_dir = train_run(
        tmp_path / "tp2",
        world=2,
        model={"untie_embeddings": True, "add_bias_linear": True},
        parallel={"tensor": 2, "gpus_per_node": 2},
    )
    result = export_and_compare(run_dir, sample_tokenizer, tmp_path / "hf")
    assert_equivalent(result)
    assert not result["tied"]
    with safe_open(str(tmp_path / "hf" / "model.safetensors"), "pt") as tensors:
        biases = {k: tensors.get_tensor(k) for k in tensors.keys() if k.endswith(".bias")}  # noqa: SIM118
    for name in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"):
        found = [v for k, v in biases.items() if f".{name}.bias" in k]
        assert found and all(bool(v.abs().max() > 0) for v in found), name


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_export_from_pipeline_parallel_2(sample_tokenizer, tmp_path):
    run_dir = train_run(tmp_path / "pp2", world=2, parallel={"pipeline": 2, "gpus_per_node": 2})
    result = export_and_compare(run_dir, sample_tokenizer, tmp_path / "hf")
    assert_equivalent(result)
    assert result["tied"]


@pytest.mark.timeout(600)
def test_a_file_planted_in_an_export_is_refused_before_transformers_reads_it(
    exported, tmp_path, capsys
):
    """transformers reads an export by directory, not by its manifest: an unlisted
    `added_tokens.json` silently re-tokenised every lm-eval request of `eval run EXPORT`."""

    from transformers import AutoTokenizer

    from evals.lm_eval_model import load_export
    from pretrain.artifacts import export as export_artifact
    from pretrain.errors import ArtifactError

    _, out, _ = exported
    planted = tmp_path / "hf"
    shutil.copytree(out, planted)
    (planted / "added_tokens.json").write_text('{"Water": 384}')
    text = "Water boils"
    theirs = AutoTokenizer.from_pretrained(str(planted), local_files_only=True)(text)
    ours = AutoTokenizer.from_pretrained(str(out), local_files_only=True)(text)
    assert theirs["input_ids"] != ours["input_ids"]  # the plant works on transformers itself
    for read in (export_artifact.open, load_export):
        with pytest.raises(ArtifactError, match=r"added_tokens.json.*does not list"):
            read(planted)
    argv = ["eval", "run", str(planted), "--sets", str(tmp_path / "none"), "--tasks"]
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "added_tokens.json" in err[0], err
    assert not (tmp_path / "hf-evals").exists()


@pytest.mark.timeout(600)
def test_a_killed_export_leaves_nothing_transformers_reads_and_the_rerun_replaces_it(
    exported, sample_tokenizer, tmp_path, capsys
):
    """SIGKILL once `model.safetensors` is written (the tokenizer files and manifest not yet).
    Before, the kill left `model.safetensors` (and maybe config.json) in `--out`: a folder
    transformers would load as a model, and the re-run refused as not empty. Now nothing of the
    export is in `--out` (it is built in a scratch folder beside it), our reader refuses it in one line,
    and the re-run ends byte-identical to the uninterrupted export."""
    from pretrain.artifacts import export as export_artifact
    from pretrain.errors import ArtifactError
    from pretrain.publish import scratch_dir
    from tests.pretrain_app.killtools import contents, kill_when, listing, run

    run_dir, reference, _ = exported
    out = tmp_path / "hf"
    argv = ["export", str(run_dir), "--out", str(out), "--tokenizer", str(sample_tokenizer)]
    for _ in range(3):  # the window after model.safetensors is tens of ms: a fast export may win
        status = kill_when(
            argv, tmp_path, lambda: (scratch_dir(out) / "model.safetensors").exists()
        )
        if status == -9:
            break
        shutil.rmtree(out)
    assert status == -9, "the export finished before the kill three times"
    assert not out.exists() or {p.name for p in out.iterdir()} <= {".logs"}
    with pytest.raises(ArtifactError, match="not a finished artifact|does not exist") as refused:
        export_artifact.open(out)
    assert len(str(refused.value).splitlines()) == 1
    capsys.readouterr()
    assert main(["verify", str(out)]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1

    again = run(argv, tmp_path, "rerun")
    assert again.returncode == 0, again.stderr[-3000:]
    assert contents(out) == contents(reference)
    assert listing(out) == listing(reference)
    export_artifact.open(out, full=True)
    assert not scratch_dir(out).exists()


@pytest.mark.timeout(900)
def test_lm_eval_cli_evaluates_a_training_checkpoint(
    exported, sample_tokenizer, lm_eval_results, tmp_path
):
    """`pretrain eval lm-eval CHECKPOINT` (lm-eval's command line, `--model pretrain`) gives the
    numbers lm-eval's HFLM gives on the export of that checkpoint (#33 item 6)."""
    from evals.lm_eval_tasks import load_lm_eval_tasks
    from tests.trainer.lm_eval_check import FIXTURES

    run_dir, _, _ = exported
    include = str(load_lm_eval_tasks([f"boolq={FIXTURES['boolq']}"]).manager.include_path)
    checkpoint = run_dir / "checkpoints" / "iter_0000002"
    command = [sys.executable, "-m", "pretrain_app", "eval", "lm-eval", "--tokenizer"]
    command += [str(sample_tokenizer), str(checkpoint), "--tasks", "boolq_local"]
    command += ["--include_path", include, "--batch_size", "4", "--output_path", str(tmp_path)]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=400, cwd=ROOT, env=clean_env()
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (results,) = tmp_path.rglob("results_*.json")
    ours = json.loads(results.read_text())["results"]["boolq_local"]
    assert ours["acc,none"] == pytest.approx(lm_eval_results["export"]["task/boolq/acc"])
