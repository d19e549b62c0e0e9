"""No code runs from a checkpoint we are handed: a payload planted in each loadable file (with the
manifest re-written so hashes match, as a crafted checkpoint would be) never executes on resume,
`pretrain eval run`, `trainer.inference.load_model` or `pretrain verify`; a corrupt `.metadata`
falls back to the previous checkpoint like a corrupt shard does."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import pytest
import torch

from pretrain.errors import ArtifactError
from pretrain.manifest import load_manifest, write_manifest
from pretrain_app.cli import main
from tests.trainer.trainer_testlib import events, losses, tiny_config
from trainer.checkpoint import list_checkpoints, newest_valid

LOADABLE = [".metadata", "common.pt", "rng/rank_00000.pt"]


class Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"open({str(self.marker)!r}, 'w').write('ran')",))


def _plant(checkpoint: Path, rel: str, marker: Path) -> None:
    """Replace one file with a pickle that writes `marker` when unpickled; re-sign the manifest."""
    target = checkpoint / rel
    if target.suffix == ".pt":
        torch.save({"state": Payload(marker)}, target)
    else:
        target.write_bytes(pickle.dumps(Payload(marker)))
    old = load_manifest(checkpoint)
    write_manifest(checkpoint, "checkpoint", config=old["config"], counts=old["counts"])


def _copy_run(reference: Path, dest: Path, steps: list[int] | None = None) -> Path:
    shutil.copytree(reference, dest)
    for step, path in list_checkpoints(dest):
        if steps is not None and step not in steps:
            shutil.rmtree(path)
    return dest


@pytest.mark.timeout(300)
@pytest.mark.parametrize("rel", LOADABLE)
def test_planted_payload_never_runs(tmp_path, reference_run, rel, capsys):
    reference, _ = reference_run
    run = _copy_run(reference, tmp_path / "run")
    newest_step, newest = list_checkpoints(run)[-1]
    marker = tmp_path / "marker"
    _plant(newest, rel, marker)

    path, skipped = newest_valid(run)  # what resume does: the planted checkpoint is skipped
    assert path.name != newest.name and [s["step"] for s in skipped] == [newest_step]
    assert "refused" in skipped[0]["reason"] or "not part of" in skipped[0]["reason"]

    assert main(["verify", str(newest)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and rel.split("/")[-1] in err[0], err

    from trainer.inference import load_model

    with pytest.raises(ArtifactError):
        load_model(newest)
    assert not marker.exists()


@pytest.mark.timeout(300)
def test_guarded_readers_refuse_even_without_our_precheck(tmp_path, reference_run):
    """Second line of defence: torch's DCP reader and megatron's common.pt load themselves."""
    from megatron.core.dist_checkpointing.strategies.common import TorchCommonLoadStrategy
    from torch.distributed.checkpoint import FileSystemReader

    from pretrain.safeload import UnsafePickle, guard_torch_loading

    reference, _ = reference_run
    checkpoint = tmp_path / "ckpt"
    shutil.copytree(list_checkpoints(reference)[-1][1], checkpoint)
    marker = tmp_path / "marker"
    _plant(checkpoint, ".metadata", marker)
    _plant(checkpoint, "common.pt", marker)
    guard_torch_loading()
    with pytest.raises(UnsafePickle, match="builtins.exec"):
        FileSystemReader(str(checkpoint)).read_metadata()
    with pytest.raises(Exception, match="exec"):
        TorchCommonLoadStrategy().load_common(str(checkpoint))
    assert not marker.exists()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_resume_falls_back_past_planted_and_corrupt_metadata(tmp_path, reference_run):
    from tests.trainer.trainer_testlib import run_ranks

    reference, expected = reference_run
    run = _copy_run(reference, tmp_path / "run")
    steps = [step for step, _ in list_checkpoints(run)]
    assert len(steps) >= 3
    marker = tmp_path / "marker"
    _plant(list_checkpoints(run)[-1][1], ".metadata", marker)
    corrupt = list_checkpoints(run)[-2][1]
    (corrupt / ".metadata").write_bytes(b"\x80\x04not a pickle at all")
    old = load_manifest(corrupt)
    write_manifest(corrupt, "checkpoint", config=old["config"], counts=old["counts"])

    proc = run_ranks(tiny_config(run), 1, how="process")  # its output is read
    assert proc is not None
    out, err = proc.stdout, proc.stderr
    skipped = [e for e in events(run) if e["event"] == "checkpoint_skipped"]
    assert [e["step"] for e in skipped] == steps[-1:-3:-1]
    resumed = [e for e in events(run) if e["event"] == "resume"]
    assert resumed[-1]["step"] == steps[-3]
    lines = [line for line in (out + err).splitlines() if "is corrupt, skipped" in line]
    assert len(lines) == 2, lines
    assert "Traceback" not in out + err
    assert losses(run) == expected
    assert not marker.exists()
