"""`pretrain eval build` SIGKILLed at exact steps (tests/pretrain_app/killpoints.py), then run
again. Before, the build deleted the old eval sets and wrote the new ones in place: a kill while
writing left `sets/` without a manifest (the old eval sets gone, nothing finished), which every
reader refused, and the re-run refused too (`out = ... is not empty ... holds no evalset
artifact`): the user had to delete it by hand. Now the sets are built beside `out` and swapped
in (pretrain.publish): `out` is the old finished eval set or the new one at every kill point,
readers refuse a missing one in one line, and the re-run is byte-identical to an uninterrupted
build."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from pretrain.artifacts import evalset
from pretrain.errors import PretrainError
from pretrain.manifest import MANIFEST
from pretrain.publish import retired_dir, scratch_dir
from tests.evals.test_sets import DATA, make_shards
from tests.pretrain_app.killpoints import finished_state, run_killed, same_listing
from tests.pretrain_app.killtools import contents, run
from trainer.scoring import load_eval_sets

pytestmark = pytest.mark.timeout(600)


def _config(root: Path, shards: Path, out: Path, min_docs: int) -> Path:
    config = {
        "shards": str(shards),
        "out": str(out),
        "min_docs_per_set": min_docs,
        "tasks": [str(DATA / "tiny_mc.jsonl")],
    }
    path = root / f"eval-{out.name}-{min_docs}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Shards, an old eval set (min_docs_per_set 1: web/zh kept) and the new reference (2)."""
    root = tmp_path_factory.mktemp("evalkill")
    shards, _ = make_shards(root / "shards")
    made = {"root": root, "shards": shards}
    for name, min_docs in (("old", 1), ("new", 2)):
        done = run(["eval", "build", str(_config(root, shards, root / name, min_docs))], root, name)
        assert done.returncode == 0, done.stderr[-3000:]
        made[name] = root / name
    return made


def _argv(built: dict[str, Path], out: Path) -> list[str]:
    return ["eval", "build", str(_config(out.parent, built["shards"], out, 2))]


def _markers(out: Path, name: str) -> list[Path]:
    """`name` in the building folder, or in `out` itself (where the old code wrote; not the
    manifest, which the old eval set there holds)."""
    return [scratch_dir(out) / name] + ([out / name] if name != MANIFEST else [])


def _rerun_matches(built: dict[str, Path], out: Path, tmp: Path) -> None:
    again = run(_argv(built, out), tmp, "rerun")
    assert again.returncode == 0, again.stderr[-3000:]
    assert contents(out) == contents(built["new"]) and same_listing(out, built["new"])
    assert not scratch_dir(out).exists() and not retired_dir(out).exists()


def _refused_in_one_line(out: Path, tmp: Path) -> None:
    """Every reader of an eval set refuses `out` in one line: eval run's set loader, mixture
    build's contaminated-ids reader, `pretrain verify`."""
    for read in (load_eval_sets, lambda d: evalset.open(d).contaminated_ids()):
        with pytest.raises(PretrainError) as refused:
            read(out)
        assert len(str(refused.value).splitlines()) == 1
    verified = run(["verify", str(out)], tmp, "verify")
    assert verified.returncode == 2 and len(verified.stderr.strip().splitlines()) == 1


# kill points: while writing the sets (the first folder change after sets/ exists), the swap
# (0 after the manifest), the delete of the old sets after it (1, 3)
@pytest.mark.parametrize(
    ("phase", "after", "expected"),
    [("sets", 0, "old"), (MANIFEST, 0, "old"), (MANIFEST, 1, "new"), (MANIFEST, 3, "new")],
)
def test_a_kill_while_replacing_eval_sets_leaves_the_old_or_the_new(
    built: dict[str, Path], tmp_path: Path, phase: str, after: int, expected: str
) -> None:
    out = tmp_path / "evalsets"
    shutil.copytree(built["old"], out)
    done = run_killed(_argv(built, out), tmp_path, _markers(out, phase), after)
    assert done.returncode == -9, done.stderr[-3000:]
    assert finished_state(out, built["old"], built["new"]) == expected
    _rerun_matches(built, out, tmp_path)


@pytest.mark.parametrize("phase", ["sets", "decontamination-index"])
def test_a_first_build_killed_while_writing_is_refused_by_readers_and_redone(
    built: dict[str, Path], tmp_path: Path, phase: str
) -> None:
    out = tmp_path / "evalsets"
    done = run_killed(_argv(built, out), tmp_path, _markers(out, phase), 0)
    assert done.returncode == -9, done.stderr[-3000:]
    _refused_in_one_line(out, tmp_path)
    _rerun_matches(built, out, tmp_path)
