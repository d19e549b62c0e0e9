"""End to end on real artifacts: `pretrain ablate` trains each proxy with `pretrain launch` and
scores it with `pretrain eval run` in one process of its own, reports, caches; the gate then clears only a
mixture built from the chosen recipe on the same tokenizer and data."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import yaml

from pretrain.errors import GateRefused
from pretrain.manifest import load_manifest, verify
from pretrain_app.cli import main
from tests.evals.chain import TINY_PROXY
from trainer.gate import check_gate


def _ablation_config(chain: dict[str, Path], root: Path) -> Path:
    config = {
        "name": "e2e",
        "out": str(root / "ablation"),
        "mixture": str(chain["mixture_config"]),
        "train": str(chain["train"]),
        "eval_sets": str(chain["evalsets"]),
        "variants": [{"name": "code-heavy", "weights": {"prose": 0.3, "code": 0.7}}],
        "proxies": [{"name": "tiny", "overrides": TINY_PROXY}],
        "token_budget": 12 * 4 * 64,
        "seeds": [1, 2],
        "parallel": "sequential",
        "launch_args": ["--in-process"],
        "timeout_s": 600,
        "full_run_tokens": 10**7,
    }
    path = root / "ablation.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _full_mixture(chain: dict[str, Path], source: Path, out: Path) -> Path:
    data = yaml.safe_load(source.read_text())
    data["out"] = str(out)
    data["build"]["total_tokens"] = 8192  # a different build, the same recipe
    path = out.parent / f"{out.name}.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["mixture", "build", str(path)]) == 0
    return out


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_ablate_real_proxies_then_gate_and_refuse_an_unhealthy_rerun(chain, tmp_path, capsys):
    config = _ablation_config(chain, tmp_path)
    assert main(["ablate", str(config)]) == 0
    report_dir = tmp_path / "ablation"
    assert verify(report_dir)["kind"] == "ablation"
    report = json.loads((report_dir / "report.json").read_text())
    assert len(report["runs"]) == 4 and not report["failed_runs"]
    for run in report["runs"]:
        run_dir = next(
            p for p in (tmp_path / "ablation-runs").iterdir() if run["run_key"].startswith(p.name)
        )
        assert load_manifest(run_dir / "mixture")["recipe_sha256"] == run["recipe_sha256"]
        assert load_manifest(run_dir / "train")["kind"] == "run"
        assert (run_dir / "eval" / "capability.png").is_file()
        metrics = run["metrics"]
        assert 0 < metrics["bpb"] < 8 and {"bpb/code/en", "bpb/prose/en"} <= set(metrics)
        # per-document results: their NLL and bytes add up to the run's bpb
        docs = run["documents"]
        assert len(docs["nll"]) == len(docs["bytes"]) == len(docs["id"]) > 0
        total = sum(docs["nll"]) / math.log(2) / sum(docs["bytes"])
        assert total == pytest.approx(metrics["bpb"], rel=1e-6)
    interval = report["decision"]["interval"]
    assert interval["method"] == "paired documents + seeds" and interval["n_seeds"] == 2
    assert interval["n_documents"] == len(report["runs"][0]["documents"]["nll"])
    assert interval["lower"] < interval["effect"] < interval["upper"]
    assert report["epoch_flags"]  # 10**7 tokens repeat the ~20k-token components
    capsys.readouterr()

    # Second invocation: every run is cached (bound by key, not re-trained).
    assert main(["ablate", str(config)]) == 0
    assert "[ablate] 4 runs: 4 cached, 0 to run" in capsys.readouterr().out

    chosen = _full_mixture(chain, report_dir / "chosen_mixture.yaml", tmp_path / "full-chosen")
    train = {
        "run": {"kind": "full"},
        "data": {"mixture_dir": str(chosen)},
        "gate": {"report_dir": str(report_dir), "require_seed_spread": False},
    }
    # Two seeds of a 12-step proxy rarely clear the paired interval: the gate agrees with the
    # report's own verdict, and a refusal names the interval it could not clear.
    if report["passed"]:
        assert check_gate(train)["chosen_recipe_sha256"] == report["chosen_recipe_sha256"]
    else:
        with pytest.raises(GateRefused, match="interval"):
            check_gate(train)
    # With a threshold every interval clears, the gate's criteria pick the leader: the launch of
    # the report's chosen recipe passes when that is the leader; when the report kept the base
    # (no recipe shown better than it), the gate says the criteria differ from the report's.
    train["gate"]["min_improvement"] = -100.0
    leader = report["decision"]["leader"]["recipe_sha256"]
    if report["chosen_recipe_sha256"] == leader:
        assert check_gate(train)["chosen_recipe_sha256"] == leader
    else:
        assert report["verdict"] == "no recipe shown better than base"
        with pytest.raises(GateRefused, match="align gate"):
            check_gate(train)

    other = next(r for r in report["runs"] if r["recipe_sha256"] != report["chosen_recipe_sha256"])
    other_cfg = yaml.safe_load(chain["mixture_config"].read_text())
    for component in other_cfg["recipe"]["components"]:
        component["weight"] = other["weights"][component["name"]]
    source = tmp_path / "other-source.yaml"
    source.write_text(yaml.safe_dump(other_cfg))
    other_mix = _full_mixture(chain, source, tmp_path / "full-other")
    with pytest.raises(GateRefused, match="recipe mismatch"):
        check_gate({**train, "data": {"mixture_dir": str(other_mix)}})

    # The same sweep, one run of it now unhealthy (a test of its own would train all 4 again).
    _rerun_one_unhealthy(chain, tmp_path)


FORCED_ROLLBACKS = {
    # a guard that trips on any rise of loss or grad norm: the run keeps rolling back to its only
    # checkpoint (step 1), skipping 2 batches each time, until its data runs out
    "guard.loss_spike_ratio": 1.0001,
    "guard.grad_norm_spike_ratio": 1.0001,
    "guard.min_history": 1,
    "guard.window": 2,
    "guard.max_rollbacks": 100,
    "guard.skip_batches": 2,
}


def _rerun_one_unhealthy(chain: dict[str, Path], root: Path) -> None:
    """Issue 36's failure, reproduced with real proxies on the sweep `root` holds: code-heavy /
    seed 2 (its run deleted) is forced to roll back to its step-1 checkpoint and to run out of
    data. The sweep reruns it once (the default), it is unhealthy again (the same seed trips the
    same way), so it is left out, listed, and the gate refuses naming it; the other runs come
    from the cache. Before: reported finished and scored at step 1, and decided."""
    from evals.ablation_plan import AblationConfig
    from evals.ablation_run import run_sweep
    from evals.proxy import execute_run
    from pretrain.config import parse_config

    config = parse_config(AblationConfig, yaml.safe_load(_ablation_config(chain, root).read_text()))
    before = json.loads((root / "ablation" / "report.json").read_text())
    key = next(
        r["run_key"] for r in before["runs"] if (r["recipe_name"], r["seed"]) == ("code-heavy", 2)
    )
    shutil.rmtree(next(p for p in (root / "ablation-runs").iterdir() if key.startswith(p.name)))
    calls: list[tuple[str, int]] = []

    def runner(spec: dict) -> dict:
        calls.append((spec["recipe_name"], spec["seed"]))
        overrides = {**spec["proxy"]["overrides"], **FORCED_ROLLBACKS}
        return execute_run({**spec, "proxy": {**spec["proxy"], "overrides": overrides}})

    report = run_sweep(config, runner)
    assert calls == [("code-heavy", 2)] * 2  # rerun once; the 3 healthy runs are cached
    (bad,) = report["unhealthy_runs"]
    assert bad["run"] == "code-heavy / tiny / seed 2"
    assert bad["ended"] == "data exhausted" and bad["rollbacks"] >= 1
    assert bad["problems"][0].startswith("trained ")  # short of its budget...
    broken = next(r for r in report["runs"] if r["run_key"] == bad["run_key"])
    assert broken["health"]["scored_step"] == broken["health"]["trained_steps"]  # ...scored last
    code = next(r for r in report["ranking"]["tiny"] if r["recipe_name"] == "code-heavy")
    assert code["n_seeds"] == 1 and report["passed"] is False
    chosen = _full_mixture(chain, root / "ablation" / "chosen_mixture.yaml", root / "full")
    train = {
        "run": {"kind": "full"},
        "data": {"mixture_dir": str(chosen)},
        "gate": {"report_dir": str(root / "ablation"), "min_improvement": -100.0},
    }
    with pytest.raises(GateRefused, match="unhealthy run left out: code-heavy / tiny / seed 2"):
        check_gate(train)
