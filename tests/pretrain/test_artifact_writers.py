"""Every artifact kind is written by its builder through `pretrain.artifacts.<kind>.write` and read
back through that kind's `open()`: the typed manifest holds exactly what the builder wrote, with the
command `pretrain.program.run` captured. A tampered manifest (a byte flipped at the same size, a field
added, a pickle planted in its place or in a listed file) is refused by `open()`, one line, and no
pickle is ever loaded."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml

from pretrain.artifacts import (
    ablation,
    base,
    dedup_index,
    encoded,
    eval_results,
    evalset,
    export,
    mixture,
    model,
    run,
    shards,
    tokenizer,
    tokenizer_eval,
)
from pretrain.errors import ArtifactError
from pretrain.manifest import MANIFEST, Manifest, load_manifest
from pretrain.provenance import capture

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # the builders: ~1 min on 2 cores

# kind -> (its open(), its Fields model)
KINDS: dict[str, tuple[Any, type[base.Fields]]] = {
    "shards": (shards.open, shards.ShardsFields),
    "tokenizer": (tokenizer.open, tokenizer.TokenizerFields),
    "tokenizer-eval": (tokenizer_eval.open, tokenizer_eval.TokenizerEvalFields),
    "encoded": (encoded.open, encoded.EncodedFields),
    "evalset": (evalset.open, evalset.EvalsetFields),
    "mixture": (mixture.open, mixture.MixtureFields),
    "ablation": (ablation.open, ablation.AblationFields),
    "dedup-index": (dedup_index.open, dedup_index.DedupIndexFields),
    "fasttext-model": (lambda d: model.open(d, model.FASTTEXT_KIND), model.FasttextFields),
    "kenlm-model": (lambda d: model.open(d, model.KENLM_KIND), model.KenlmFields),
    "run": (run.open, run.RunFields),
    "checkpoint": (base.Artifact[run.CheckpointFields].open, run.CheckpointFields),
    "hf_export": (export.open, export.ExportFields),
    "eval": (eval_results.open, eval_results.EvalFields),
}
CHEAP = ["shards", "tokenizer", "tokenizer-eval", "encoded", "evalset", "mixture", "ablation"]
CHEAP += ["dedup-index"]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, list[str]]]:
    """Each cheap kind built by its real builder, as `pretrain ...` would: kind -> (dir, command)."""
    from data_pipeline.dedup.config import DedupConfig
    from data_pipeline.dedup.index import save_index
    from mixtures.build import build_mixture
    from mixtures.recipe import MixtureConfig
    from pretrain.config import parse_config
    from tests.evals.chain import build_chain, records
    from tests.evals.conftest import make_report, synthetic_runs
    from tokenizer.evaluate import evaluate

    root = tmp_path_factory.mktemp("writers")
    command = ["build", "chain"]
    with capture(command):
        chain = build_chain(root)
        evaluate(chain["tokenizer"], chain["shards"], out=root / "tok-eval", baseline=False)
        data = yaml.safe_load(chain["mixture_config"].read_text())
        build_mixture(parse_config(MixtureConfig, data))
        make_report(root / "ablation", synthetic_runs(recipes=2, seeds=2))
        docs = records(40)
        table = pa.table({"id": [d["id"] for d in docs], "text": [d["text"] for d in docs]})
        save_index(root / "index", [table], DedupConfig(), partitions=2)
    where = {
        "shards": chain["shards"],
        "tokenizer": chain["tokenizer"],
        "tokenizer-eval": root / "tok-eval",
        "encoded": chain["encoded"],
        "evalset": chain["evalsets"],
        "mixture": root / "mixture",
        "ablation": root / "ablation",
        "dedup-index": root / "index",
    }
    recorded = {kind: ["pretrain", *command] for kind in where}
    recorded["shards"] = ["tests.tokenizer.synthetic.write_shards"]  # what that builder records
    return {kind: (path, recorded[kind]) for kind, path in where.items()}


def assert_round_trips(kind: str, directory: Path, command: list[str]) -> Any:
    """`open()` returns the kind's typed manifest holding every field the builder wrote."""
    opener, fields = KINDS[kind]
    art = opener(directory)
    raw = json.loads((directory / MANIFEST).read_text())
    assert art.manifest.kind == kind and art.manifest.manifest_version == 2
    assert art.manifest.command == command
    own = set(raw) - set(Manifest.model_fields)
    assert own <= set(fields.model_fields), f"{kind} wrote fields its model lacks: {own}"
    typed = art.fields.model_dump(mode="json", exclude_unset=True)
    for name in own:
        assert typed[name] == raw[name], (kind, name)  # nothing dropped or changed on the way
    assert art.manifest.seal == raw["seal"]
    assert {rel: entry.model_dump() for rel, entry in art.manifest.files.items()} == raw["files"]
    return art


@pytest.mark.parametrize("kind", CHEAP)
def test_each_builder_writes_through_its_kind_and_reads_back_typed(built, kind: str) -> None:
    directory, command = built[kind]
    assert_round_trips(kind, directory, command)


def test_the_typed_readers_hold_what_consumers_read(built) -> None:
    tok = tokenizer.open(built["tokenizer"][0])
    enc = encoded.open(built["encoded"][0])
    assert enc.tokenizer_sha256 == tok.sha256 == tok.fields.tokenizer.sha256
    mix = mixture.open(built["mixture"][0])
    assert mix.identity["tokenizer_sha256"] == tok.sha256
    assert mix.identity["data_manifest_sha256"] == enc.manifest_sha256
    assert mix.recorded_encoded() == built["encoded"][0].resolve()
    assert [p.seq_length for p in mix.fields.phases] == [64]
    assert tokenizer_eval.open(built["tokenizer-eval"][0]).fields.summary["roundtrip_exact"]
    index = dedup_index.open(built["dedup-index"][0])
    assert index.fields.dedup["partitions"] == 2 and index.manifest.counts["documents"] == 40


def _copy(built: dict, kind: str, tmp_path: Path) -> Path:
    import shutil

    target = tmp_path / kind
    shutil.copytree(built[kind][0], target)
    return target


def _one_line_refusal(kind: str, directory: Path, match: str) -> None:
    with pytest.raises(ArtifactError, match=match) as info:
        KINDS[kind][0](directory)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("kind", CHEAP)
def test_a_manifest_byte_flipped_at_the_same_size_is_refused(built, kind, tmp_path) -> None:
    directory = _copy(built, kind, tmp_path)
    path = directory / MANIFEST
    text = path.read_text()
    at = text.index('"created_unix": ') + len('"created_unix": ')  # a digit: still valid JSON
    flipped = text[:at] + ("1" if text[at] != "1" else "2") + text[at + 1 :]
    path.write_text(flipped)
    assert path.stat().st_size == len(text.encode()) and json.loads(flipped)
    _one_line_refusal(kind, directory, "does not match its seal")


@pytest.mark.parametrize("kind", CHEAP)
def test_a_field_added_to_the_manifest_is_refused(built, kind, tmp_path) -> None:
    directory = _copy(built, kind, tmp_path)
    manifest = load_manifest(directory)
    manifest["approved_by"] = "someone"
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True))
    _one_line_refusal(kind, directory, "does not match its seal")


def test_a_seal_removed_with_the_version_kept_is_refused(built, tmp_path) -> None:
    directory = _copy(built, "mixture", tmp_path)
    manifest = load_manifest(directory)
    del manifest["seal"]
    (directory / MANIFEST).write_text(json.dumps(manifest))
    _one_line_refusal("mixture", directory, "field 'seal'.*edited or damaged")


class _Payload:
    """Unpickling this creates the file `marker` (what a planted pickle would run)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str, str]]:
        return (open, (str(self.marker), "w"))


@pytest.mark.parametrize("kind", ["tokenizer", "mixture", "evalset"])
def test_a_pickle_planted_as_the_manifest_is_refused_unloaded(built, kind, tmp_path) -> None:
    directory = _copy(built, kind, tmp_path)
    marker = tmp_path / "unpickled"
    (directory / MANIFEST).write_bytes(pickle.dumps(_Payload(marker)))
    _one_line_refusal(kind, directory, "not valid JSON")
    assert not marker.exists()


@pytest.mark.parametrize(
    ("kind", "rel"),
    [("mixture", "index/"), ("encoded", ".idx"), ("evalset", "contaminated.parquet")],
)
def test_a_pickle_planted_in_a_listed_file_at_its_size_is_refused(built, kind, rel, tmp_path):
    directory = _copy(built, kind, tmp_path)
    rel = next(name for name in load_manifest(directory)["files"] if rel in name)
    target = directory / rel
    size = target.stat().st_size
    marker = tmp_path / "unpickled"
    planted = pickle.dumps(_Payload(marker))
    assert len(planted) <= size
    target.write_bytes(planted + b"." * (size - len(planted)))
    assert target.stat().st_size == size and pickle.loads(target.read_bytes()) is not None
    marker.unlink()  # the planted file is a working pickle; open() must never load it
    _one_line_refusal(kind, directory, "does not match its sha256")
    assert not marker.exists()


def test_run_checkpoint_export_and_eval_write_through_their_kinds(built, tmp_path) -> None:
    """`pretrain launch` (its torchrun rank records the launcher's command), `pretrain export`
    and `pretrain eval run`, each its own process with a clean environment."""
    import os
    import subprocess
    import sys

    from tests.trainer.trainer_testlib import tiny_config
    from trainer.checkpoint import list_checkpoints

    run_dir, hf = tmp_path / "run", tmp_path / "hf"
    mixture_dir = built["mixture"][0]
    config = tiny_config(
        run_dir,
        run={"train_steps": 2},
        data={"source": "mixture", "mixture_dir": str(mixture_dir)},
        checkpoint={"every": 2},
    )
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump(config))
    evalsets = built["evalset"][0]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "MASTER_", "HF_"))}
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    pretrain = str(Path(sys.executable).parent / "pretrain")
    launch = ["pretrain", "launch", str(path)]
    to_hf = ["pretrain", "export", str(run_dir), "--out", str(hf)]
    score = ["pretrain", "eval", "run", str(hf), "--sets", str(evalsets), "--max-docs", "5"]
    score.append("--tasks")
    for argv in (launch, to_hf, score):
        done = subprocess.run(
            [pretrain, *argv[1:]], env=env, capture_output=True, text=True, timeout=400
        )
        assert done.returncode == 0, (argv, done.stderr[-3000:])
    art = assert_round_trips("run", run_dir, launch)
    assert art.fields.mixture.build_sha256 == mixture.open(mixture_dir).fields.build_sha256
    assert art.manifest.inputs[0].manifest_sha256 == mixture.open(mixture_dir).manifest_sha256
    step, checkpoint = list_checkpoints(run_dir)[-1]
    assert step == 2 and assert_round_trips("checkpoint", checkpoint, launch).manifest.counts == {
        "step": 2
    }
    exported = assert_round_trips(
        "hf_export", hf, ["pretrain", "export", str(run_dir), "--out", str(hf)]
    )
    assert exported.step == 2
    assert exported.fields.tokenizer.sha256 == tokenizer.open(built["tokenizer"][0]).sha256
    command = ["pretrain", "eval", "run", str(hf), "--sets", str(evalsets)]
    results = assert_round_trips(
        "eval", tmp_path / "hf-evals", [*command, "--max-docs", "5", "--tasks"]
    )
    assert results.fields.evalset_sha256 == evalset.open(evalsets).manifest_sha256
    assert results.fields.final["bpb"] > 0


def test_the_model_builders_write_through_the_model_kind(demo_models) -> None:
    """The fastText and KenLM trainers (on the embedded sample: tests/conftest.py's demo_models)."""
    _, built = demo_models
    for key in ("domain", "quality"):
        art = assert_round_trips("fasttext-model", built[key], ["tests", f"({key} classifier)"])
        assert art.fields.model["sha256"] == art.info["model_sha256"]
    lm = assert_round_trips("kenlm-model", built["lm"], ["tests", "(kenlm)"])
    assert set(lm.fields.model["languages"]) == set(lm.info["languages"])
