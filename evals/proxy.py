"""One proxy run of an ablation: build its mixture, then train and evaluate in one fresh process
(evals/proxy_worker.py: no Megatron state or NVTE_* variable survives into the next run);
`RUN/result.json`, written last, marks it finished.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from pretrain.artifacts import mixture as mixture_kind
from pretrain.errors import ArtifactError, PretrainError
from pretrain.manifest import manifest_sha256
from pretrain.provenance import recorded
from pretrain.storage import write_json

RESULT = "result.json"


def _json_object(path: Path) -> dict[str, Any]:
    """The JSON object in `path`; {} when it is missing, torn or not an object."""
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def load_finished(run_dir: Path, key: str) -> dict[str, Any] | None:
    """The result of a finished run with this key, else None (failed or foreign runs re-run)."""
    result = _json_object(run_dir / RESULT)
    finished = result.get("run_key") == key and result.get("status") == "finished"
    return result if finished else None


def read_documents(eval_dir: Path, step: int) -> dict[str, Any] | None:
    """The final checkpoint's per-document NLL (nats) and bytes, as columns (None when the eval
    wrote no documents.parquet): the paired gate statistic compares runs document by document."""
    path = eval_dir / "documents.parquet"
    if not path.is_file():
        return None
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    if table.num_rows == 0:
        return None
    rows = table.filter(pc.field("step") == step).to_pydict()
    sets = zip(rows["set"], rows["domain"], rows["lang"], strict=True)
    return {
        "sets": {name: {"domain": domain, "lang": lang} for name, domain, lang in sets},
        **{column: rows[column] for column in ("set", "id", "nll", "bytes")},
    }


def run_health(spec: dict[str, Any], train_dir: Path, scored_step: int) -> dict[str, Any]:
    """What the run trained and how it ended (its summary.json) beside the step `eval run`
    scored: trainer.gate_rule.run_health judges it (a run scored at an earlier checkpoint, or
    short of its token budget, is no evidence)."""
    summary = _json_object(train_dir / "summary.json")
    return {
        "scored_step": scored_step,
        "trained_steps": summary.get("steps"),
        "planned_steps": spec["train_steps"],
        "tokens_trained": summary.get("tokens_seen"),
        "planned_tokens": spec["build"]["total_tokens"],
        "rollbacks": summary.get("rollbacks"),
        "skipped_batches": summary.get("skipped_batches"),
        "ended": summary.get("ended"),
    }


def _build_mixture(spec: dict[str, Any], out: Path) -> dict[str, Any]:
    from mixtures.build import build_mixture
    from mixtures.recipe import MixtureConfig
    from pretrain.config import parse_config

    data = {"recipe": spec["recipe"], "build": spec["build"], "out": str(out)}
    config = parse_config(MixtureConfig, data, source=f"ablation run {spec['run_key'][:12]}")
    if (out / "manifest.json").is_file():
        try:
            built = mixture_kind.open(out)
        except ArtifactError:  # edited or damaged since: build it again
            built = None
        if built and built.manifest.config == json.loads(
            json.dumps(config.model_dump(mode="json"))
        ):
            return built.raw
    with recorded(["pretrain", "ablate", "(proxy mixture)"]):
        return build_mixture(config).manifest


def _train_and_evaluate(commands: dict[str, list[str]], run_dir: Path, timeout: int) -> None:
    """`pretrain` argv of the training and the evaluation, run in one fresh process."""
    write_json(run_dir / "commands.json", commands)
    argv = [sys.executable, "-m", "evals.proxy_worker", str(run_dir / "commands.json")]
    log, what = run_dir / "run.log", "proxy training + evaluation (`pretrain launch`, `eval run`)"
    env = {
        **os.environ,
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
        "PYTHONUNBUFFERED": "1",
    }
    with open(log, "w") as handle:
        try:
            proc = subprocess.run(
                argv, stdout=handle, stderr=subprocess.STDOUT, env=env, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired:
            raise PretrainError(
                f"{what} ran past timeout_s = {timeout}; raise timeout_s or "
                f"shrink the proxy (log: {log})"
            ) from None
    if proc.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-3:]
        raise PretrainError(
            f"{what} failed with exit code {proc.returncode}: {' | '.join(tail)} (log: {log})"
        )


def _train_argv(spec: dict[str, Any], mixture_dir: Path, train_dir: Path) -> list[str]:
    steps = spec["train_steps"]
    sets = {
        "run.kind": "proxy",
        "run.name": f"proxy-{spec['run_key'][:8]}",
        "run.out_dir": str(train_dir),
        "run.seed": spec["seed"],
        "run.train_steps": steps,
        "data.mixture_dir": str(mixture_dir),
        "data.source": "mixture",
        "checkpoint.every": steps,
        "checkpoint.keep_last": 1,
        **spec["proxy"]["overrides"],
    }
    argv = ["launch", spec["train_config"]]
    for key, value in sets.items():
        argv += ["--set", f"{key}={json.dumps(value) if not isinstance(value, str) else value}"]
    return argv + list(spec["launch_args"])


def _eval_argv(spec: dict[str, Any], train_dir: Path, eval_dir: Path) -> list[str]:
    argv = ["eval", "run", str(train_dir)]
    argv += ["--sets", spec["eval_sets"], "--out", str(eval_dir)]
    argv += ["--batch-size", str(spec["eval"]["batch_size"])]
    if spec.get("tokenizer"):
        argv += ["--tokenizer", spec["tokenizer"]]
    if spec["eval"].get("max_docs"):
        argv += ["--max-docs", str(spec["eval"]["max_docs"])]
    return argv


def execute_run(spec: dict[str, Any]) -> dict[str, Any]:
    """Build, train, evaluate one (recipe, proxy, seed); write and return its result."""
    run_dir = Path(spec["run_dir"])
    run_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    result = {
        key: spec[key] for key in ("run_key", "recipe_name", "weights", "seed", "token_budget")
    }
    result["proxy"] = spec["proxy"]["name"]
    try:
        mixture = _build_mixture(spec, run_dir / "mixture")
        train_dir, eval_dir = run_dir / "train", run_dir / "eval"
        commands = {
            "train": _train_argv(spec, run_dir / "mixture", train_dir),
            "eval": _eval_argv(spec, train_dir, eval_dir),
        }
        _train_and_evaluate(commands, run_dir, spec["timeout_s"])
        lines = (eval_dir / "results.jsonl").read_text().strip().splitlines()
        final = json.loads(lines[-1])
    except PretrainError as exc:
        result.update(
            {"status": "failed", "error": str(exc), "wall_s": round(time.perf_counter() - start, 2)}
        )
        write_json(run_dir / RESULT, result)
        return result
    result.update(
        {
            "status": "finished",
            "recipe_sha256": mixture["recipe_sha256"],
            "mixture_build_sha256": mixture["build_sha256"],
            "tokenizer_sha256": (mixture.get("tokenizer") or {}).get("sha256"),
            "data_manifest_sha256": mixture.get("encoded_manifest_sha256"),
            "components": mixture.get("components", []),
            "run_manifest_sha256": manifest_sha256(train_dir)
            if (train_dir / "manifest.json").is_file()
            else None,
            "step": final["step"],
            "health": run_health(spec, train_dir, final["step"]),
            "metrics": final["metrics"],
            "documents": read_documents(eval_dir, final["step"]),
            "wall_s": round(time.perf_counter() - start, 2),
        }
    )
    write_json(run_dir / RESULT, result)
    return result
