"""`pretrain mixture build` SIGKILLed at exact steps of replacing a finished mixture, then run
again (tests/pretrain_app/killpoints.py). Before, the build ran `rmtree(out)` and then renamed
its staging folder into place: a kill inside the delete left a part of the old mixture (its
manifest still there, components/code.npy gone: every reader refused it, the old finished
mixture was lost) while the new one sat finished beside it, to be deleted by the re-run; the
old code fails the kill points 1 and 4 and the fallback's. Now the folders are swapped in one
step (pretrain.publish): at every kill point `out` is the old finished mixture or the new one,
and the re-run ends byte-identical to an uninterrupted build, with nothing left beside `out`."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from pretrain.manifest import MANIFEST
from pretrain.publish import retired_dir, scratch_dir
from tests.data_pipeline.raytools import REPO, clean_env
from tests.mixtures.conftest import make_encoded, mixture_config
from tests.pretrain_app.killpoints import finished_state, run_killed
from tests.pretrain_app.killtools import PRETRAIN, contents, listing, run

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The encoded data, an old mixture (seed 8) and the reference new one (seed 7)."""
    root = tmp_path_factory.mktemp("mixkill")
    encoded = make_encoded(root / "enc")
    made = {"root": root, "encoded": encoded}
    for name, seed in (("old", 8), ("new", 7)):
        config = root / f"{name}.yaml"
        config.write_text(yaml.safe_dump(mixture_config(encoded, root / name, seed=seed)))
        done = run(["mixture", "build", str(config)], root, name)
        assert done.returncode == 0, done.stderr[-3000:]
        made[name] = root / name
    return made


def _argv(built: dict[str, Path], out: Path) -> list[str]:
    config = out.parent / "build.yaml"
    config.write_text(yaml.safe_dump(mixture_config(built["encoded"], out, seed=7)))
    return ["mixture", "build", str(config)]


def _nothing_beside(out: Path) -> None:
    assert not scratch_dir(out).exists() and not retired_dir(out).exists()


def _rerun_matches(built: dict[str, Path], out: Path, tmp: Path) -> None:
    again = run(_argv(built, out), tmp, "rerun")
    assert again.returncode == 0, again.stderr[-3000:]
    assert contents(out) == contents(built["new"]) and listing(out) == listing(built["new"])
    _nothing_beside(out)


def _kill_and_rerun(
    built: dict[str, Path],
    tmp: Path,
    after: int,
    *,
    phase: str = MANIFEST,
    no_exchange: bool = False,
    rerun: bool = True,
) -> str | None:
    """Replace the old mixture, killed before the `after`-th folder change once the new build's
    `phase` file exists; check the state it left and the re-run. None: it was not killed."""
    tmp.mkdir()
    out = tmp / "mix"
    shutil.copytree(built["old"], out)
    argv = _argv(built, out)
    done = run_killed(argv, tmp, scratch_dir(out) / phase, after, no_exchange=no_exchange)
    if done.returncode == 0:
        assert finished_state(out, built["old"], built["new"]) == "new"
        _nothing_beside(out)
        return None
    assert done.returncode == -9, done.stderr[-3000:]
    state = finished_state(out, built["old"], built["new"])
    if rerun:
        _rerun_matches(built, out, tmp)
    return state


# kill points after the new manifest: 0 the swap, 1 the first delete of the old mixture after it,
# 4 one further into that delete (the fallback: 0 and 1 its two renames, 2 the first delete)
@pytest.mark.parametrize(
    ("after", "no_exchange", "expected"),
    [(0, False, "old"), (1, False, "new"), (4, False, "new"), (1, True, "retired")],
)
def test_a_kill_while_replacing_leaves_the_old_or_the_new_mixture(
    built: dict[str, Path], tmp_path: Path, after: int, no_exchange: bool, expected: str
) -> None:
    assert _kill_and_rerun(built, tmp_path / "k", after, no_exchange=no_exchange) == expected


@pytest.mark.slow
@pytest.mark.parametrize("no_exchange", [False, True], ids=["exchange", "two-renames"])
def test_every_kill_point_of_the_replace_leaves_the_old_or_the_new_mixture(
    built: dict[str, Path], tmp_path: Path, no_exchange: bool
) -> None:
    """Every step from the new manifest to the end (the swap, the delete of the old mixture,
    the command's log), each killed; the re-run after the first three and every other one."""
    states: list[str] = []
    for after in range(60):
        # re-run after every other kill point (each state's first is among them: the delete of
        # the old folder is one state, kill after kill); the others check the state left
        case = tmp_path / f"k{after}"
        state = _kill_and_rerun(
            built, case, after, no_exchange=no_exchange, rerun=after % 2 == 0 or after < 3
        )
        if state is None:
            break
        states.append(state)
    assert states[0] == "old" and states[-1] == "new"
    assert set(states) == ({"old", "retired", "new"} if no_exchange else {"old", "new"})


def test_a_build_killed_while_writing_keeps_the_old_mixture(
    built: dict[str, Path], tmp_path: Path
) -> None:
    assert _kill_and_rerun(built, tmp_path / "k", 0, phase="index") == "old"


def test_a_first_build_killed_before_its_rename_leaves_nothing_a_reader_takes(
    built: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "mix"
    done = run_killed(_argv(built, out), tmp_path, scratch_dir(out) / MANIFEST, 0)
    assert done.returncode == -9, done.stderr[-3000:]
    assert not out.exists()  # nothing a reader could take for the mixture
    refused = run(["mixture", "report", str(out)], tmp_path, "report")
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert not out.exists()  # the refused report created nothing (it left mix/.report.lock)
    _rerun_matches(built, out, tmp_path)


def test_two_builds_into_one_out_at_once_one_is_refused_naming_the_holder(
    built: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "mix"
    shutil.copytree(built["old"], out)
    argv = _argv(built, out)
    started = [
        subprocess.Popen(
            [*PRETRAIN, *argv],
            cwd=REPO,
            env=clean_env(home),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for home in (tmp_path / "h1", tmp_path / "h2")
    ]
    results = [(p.wait(300), p.stderr.read() if p.stderr else "") for p in started]
    codes = sorted(code for code, _ in results)
    assert codes in ([0, 0], [0, 2]), results
    for code, err in results:
        if code == 2:
            assert len(err.strip().splitlines()) == 1 and "pid" in err, err
    assert finished_state(out, built["old"], built["new"]) == "new"
    _nothing_beside(out)
