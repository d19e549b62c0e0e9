"""Run (cached; here or on Ray) and report the proxy runs an ablation plans (evals.ablation_plan):
the sweep of `pretrain ablate`."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from evals.ablation_plan import (
    AblationConfig,
    ProxyConfig,
    check_metric,
    choose_parallel,
    load_inputs,
    parallel_runs,
    plan_recipes,
    predicted_plan,
    run_key,
)
from evals.proxy import execute_run, load_finished
from evals.report import build_report, epoch_table, write_report
from pretrain.artifacts import ablation as ablation_artifact
from pretrain.artifacts import evalset as evalset_artifact
from pretrain.config import apply_overrides, config_dict, config_sha256, read_yaml
from pretrain.errors import ConfigError, PretrainError
from pretrain.locking import output_lock
from pretrain.manifest import manifest_sha256
from pretrain.output_check import require_own_output
from pretrain.storage import write_atomic
from trainer.gate_rule import lower_is_better, run_health, run_label


def runs_dir(config: AblationConfig) -> Path:
    """Proxy runs live beside the report (not inside it: the report artifact hashes its files)."""
    return Path(f"{config.out.rstrip('/')}-runs")


def _merged(train: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    return apply_overrides(train, [f"{k}={v}" for k, v in overrides.items()])


def proxy_parameters(train: dict[str, Any], overrides: dict[str, Any]) -> float:
    """Non-embedding parameters, ~12 * layers * hidden^2: which proxy is larger."""
    model = _merged(train, overrides).get("model") or {}
    return 12.0 * int(model.get("num_layers", 2)) * int(model.get("hidden_size", 128)) ** 2


def _proxy_steps(train: dict[str, Any], proxy: ProxyConfig, budget: int) -> tuple[int, int, int]:
    """(sequence length, global batch, steps) of a proxy at its token budget."""
    merged = _merged(train, proxy.overrides)
    seq = int((merged.get("model") or {}).get("seq_length", 256))
    batch = int((merged.get("batch") or {}).get("global_batch_size", 8))
    steps = budget // (seq * batch)
    if steps < 1:
        raise ConfigError(
            f"token_budget = {budget} is less than one global batch of proxy {proxy.name} "
            f"({batch} x {seq} tokens); raise it"
        )
    return seq, batch, steps


IDENTITY = ("train_template_sha256", "evalset_sha256", "encoded_manifest_sha256", "eval")


def make_specs(config: AblationConfig) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Specs of the planned recipes, and the context (inputs, identity) more specs are made in.
    First: `out` is new, empty or an ablation report (not a folder of someone else's files)."""
    require_own_output(Path(config.out), "out =", ablation_artifact.KIND)
    mixture, train = load_inputs(config)
    check_metric(config, evalset_artifact.open(config.eval_sets))
    identity = {
        "train_template_sha256": config_sha256(train),
        "evalset_sha256": manifest_sha256(config.eval_sets),
        "encoded_manifest_sha256": manifest_sha256(mixture["build"]["encoded"]),
        "eval": config_dict(config.eval),
    }
    common = {
        "train_config": str(config.train),
        "eval_sets": str(config.eval_sets),
        "tokenizer": config.tokenizer or mixture["build"].get("tokenizer"),
        "eval": config_dict(config.eval),
        "launch_args": config.launch_args,
        "timeout_s": config.timeout_s,
    }
    sizes = {p.name: proxy_parameters(train, p.overrides) for p in config.proxies}
    context = {"mixture": mixture, "train": train, "common": common, "sizes": sizes, **identity}
    return specs_for(config, plan_recipes(config, mixture), context), context


def specs_for(
    config: AblationConfig, plans: list[dict[str, Any]], context: dict[str, Any]
) -> list[dict[str, Any]]:
    """One spec per (recipe plan, proxy, seed), with its cache key and run directory."""
    from mixtures.recipe import Recipe, recipe_sha256

    mixture, train = context["mixture"], context["train"]
    identity = {k: context[k] for k in IDENTITY}
    specs = []
    for plan in plans:
        recipe_hash = recipe_sha256(Recipe.model_validate(plan["recipe"]))
        for proxy in config.proxies:
            budget = proxy.token_budget or config.token_budget
            seq, batch, steps = _proxy_steps(train, proxy, budget)
            for seed in config.seeds:
                key = run_key(recipe_hash, proxy, seed, budget, identity)
                build = {
                    **mixture["build"],
                    "total_tokens": steps * seq * batch,
                    "seq_length": seq,
                    "global_batch": batch,
                    "seed": seed,
                    # Proxies never train on near-copies of what they are scored on.
                    "decontaminate": sorted(
                        {*mixture["build"].get("decontaminate", []), str(config.eval_sets)}
                    ),
                }
                specs.append(
                    {
                        **context["common"],
                        "run_key": key,
                        "recipe_name": plan["name"],
                        "recipe_sha256": recipe_hash,
                        "weights": plan["weights"],
                        "recipe": plan["recipe"],
                        "build": build,
                        "proxy": config_dict(proxy),
                        "seed": seed,
                        "token_budget": budget,
                        "train_steps": steps,
                        "run_dir": str(runs_dir(config) / key[:20]),
                    }
                )
    return specs


def _call(runner: Callable[[dict[str, Any]], dict[str, Any]], spec: dict[str, Any]) -> dict:
    """`runner(spec)`: a runner may be any callable, and ray.remote takes only functions."""
    return runner(spec)


def _run_all(
    config: AblationConfig, todo: list[dict[str, Any]], log: Callable, runner: Callable
) -> list[dict]:
    """The results of `todo`, in its order. Every run is its own processes, so a thread per run
    in flight suffices: up to `parallel_runs` side by side here (`sequential`: one), or with
    `ray`, each run a Ray task holding cpus_per_run CPUs (its processes are children of it) and
    the cluster's resources deciding how many run at once."""
    from concurrent.futures import ThreadPoolExecutor, as_completed

    if not todo:
        return []
    call, workers = runner, parallel_runs(config)
    if choose_parallel(config) == "ray":
        import ray

        from pretrain import rayinit

        rayinit.connect(config.ray_address)  # local: loopback only, ends with this process
        remote = ray.remote(
            num_cpus=config.cpus_per_run, num_gpus=config.gpus_per_run, max_retries=0
        )(_call)
        call, workers = (lambda spec: ray.get(remote.remote(runner, spec))), len(todo)
    results: dict[str, dict] = {}
    pool = ThreadPoolExecutor(max_workers=workers)
    try:  # a runner's bug stops the runs not yet started
        futures = {pool.submit(call, spec): spec for spec in todo}
        for future in as_completed(futures):
            spec = futures[future]
            results[spec["run_key"]] = future.result()
            log(spec, results[spec["run_key"]])
    finally:
        pool.shutdown(cancel_futures=True)
    return [results[spec["run_key"]] for spec in todo]


def _problems(config: AblationConfig, result: dict[str, Any]) -> list[str]:
    """Why a finished run is no evidence (trainer.gate_rule.run_health); [] for a failed one."""
    if result.get("status") != "finished":
        return []
    return run_health(result, config.criteria.min_token_fraction)


def _set_aside(spec: dict[str, Any]) -> None:
    """Move an unhealthy run's directory to RUN.unhealthy (kept to inspect, replacing an older
    one), so its rerun starts from step 0 rather than resuming from its checkpoints."""
    import shutil

    run_dir = Path(spec["run_dir"])
    aside = run_dir.with_name(run_dir.name + ".unhealthy")
    shutil.rmtree(aside, ignore_errors=True)
    if run_dir.exists():
        run_dir.rename(aside)


def _unhealthy_specs(config: AblationConfig, specs: list[dict], results: list[dict]) -> list[dict]:
    """`unhealthy: rerun`: the specs of the unhealthy results, their directories set aside."""
    if config.unhealthy != "rerun":
        return []
    by_key = {spec["run_key"]: spec for spec in specs}
    again = []
    for result in results:
        problems = _problems(config, result)
        if problems and result["run_key"] in by_key:
            print(f"[ablate] rerun of unhealthy {run_label(result)}: {problems[0]}", flush=True)
            _set_aside(by_key[result["run_key"]])
            again.append(by_key[result["run_key"]])
    return again


def execute(
    config: AblationConfig,
    specs: list[dict[str, Any]],
    runner: Callable[[dict[str, Any]], dict[str, Any]] = execute_run,
) -> list[dict]:
    """Results of every spec: finished runs from the cache, the rest run now; with `unhealthy:
    rerun`, an unhealthy result (cached or fresh) is run once more from scratch."""
    found = [load_finished(Path(spec["run_dir"]), spec["run_key"]) for spec in specs]
    cached: list[dict] = [result for result in found if result is not None]
    todo = [spec for spec, result in zip(specs, found) if result is None]
    mode = choose_parallel(config)
    shown = f"pool of {parallel_runs(config)}" if mode == "pool" else mode
    print(
        f"[ablate] {len(specs)} runs: {len(cached)} cached, {len(todo)} to run "
        f"({shown if todo else 'nothing to run'})",
        flush=True,
    )
    total, done = [len(todo)], [0]

    def log(spec: dict[str, Any], result: dict[str, Any]) -> None:
        done[0] += 1
        problems = _problems(config, result)
        status = f"UNHEALTHY ({'; '.join(problems)})" if problems else result["status"]
        metric = (result.get("metrics") or {}).get(config.criteria.metric)
        shown = (
            f"{config.criteria.metric} {metric:.4f}"
            if metric is not None
            else result.get("error", "")
        )
        print(
            f"[ablate] {done[0]}/{total[0]} {spec['recipe_name']} {spec['proxy']['name']} "
            f"seed {spec['seed']}: {status} {shown}",
            flush=True,
        )

    results = cached + _run_all(config, todo, log, runner)
    unhealthy = _unhealthy_specs(config, specs, results)
    total[0] += len(unhealthy)
    again = _run_all(config, unhealthy, log, runner)  # once, the same way as the first time
    rerun = {result["run_key"]: result for result in again}
    return [rerun.get(result["run_key"], result) for result in results]


def _check_bound(results: list[dict], specs: list[dict]) -> None:
    expected = {spec["run_key"]: spec["recipe_sha256"] for spec in specs}
    for result in results:
        if (
            result["status"] == "finished"
            and result["recipe_sha256"] != expected[result["run_key"]]
        ):
            raise PretrainError(
                f"run {result['run_key'][:12]} trained recipe "
                f"{result['recipe_sha256'][:12]}, the sweep planned "
                f"{expected[result['run_key']][:12]}; the mixtures package hashes "
                "recipes differently: delete the run directory and re-run"
            )


def _epochs(config: AblationConfig, finished: list[dict]) -> list[dict[str, Any]]:
    rows, seen = [], set()
    for result in finished:
        if result["recipe_sha256"] in seen or not result.get("components"):
            continue
        seen.add(result["recipe_sha256"])
        for row in epoch_table(
            result["components"], config.full_run_tokens, result["token_budget"]
        ):
            rows.append({"recipe_name": result["recipe_name"], **row})
    return rows


def _shared_identity(finished: list[dict], failed: list[dict], base: str) -> tuple[str, str]:
    """The (tokenizer, encoded data) hashes every finished run shares; refuse otherwise."""
    if not any(r["recipe_sha256"] == base for r in finished):
        first = failed[0]["error"] if failed else "none"
        raise PretrainError(
            f"no run of the base recipe finished ({len(failed)} failed; first error: {first})"
        )
    hashes = {(r["tokenizer_sha256"], r["data_manifest_sha256"]) for r in finished}
    if len(hashes) != 1:
        raise PretrainError(
            f"proxy runs disagree on tokenizer / data hashes {sorted(hashes)}; "
            "the sweep must run on one encoded data set: rebuild and re-run"
        )
    return hashes.pop()


def _write_chosen(out: Path, specs: list[dict], mixture: dict, chosen_sha: str) -> None:
    """chosen_mixture.yaml: the base mixture config with the chosen recipe (same recipe hash)."""
    chosen = next(s for s in specs if s["recipe_sha256"] == chosen_sha)
    build = {**mixture["build"], "decontaminate": chosen["build"]["decontaminate"]}
    text = yaml.safe_dump({**mixture, "recipe": chosen["recipe"], "build": build}, sort_keys=False)
    write_atomic(out / "chosen_mixture.yaml", text.encode())


def _report(
    config: AblationConfig, specs: list[dict], results: list[dict], context: dict[str, Any]
) -> dict[str, Any]:
    _check_bound(results, specs)
    finished = [r for r in results if r["status"] == "finished"]
    failed = [r for r in results if r["status"] != "finished"]
    base = specs[0]["recipe_sha256"]
    tokenizer_sha, data_sha = _shared_identity(finished, failed, base)
    report = build_report(
        finished,
        base_sha=base,
        identity={
            "tokenizer_sha256": tokenizer_sha,
            "data_manifest_sha256": data_sha,
            "evalset_sha256": context["evalset_sha256"],
            "sweep": config.name,
        },
        criteria=config_dict(config.criteria),
        proxy_sizes=context["sizes"],
        recipes={
            s["recipe_sha256"]: {"name": s["recipe_name"], "weights": s["weights"]} for s in specs
        },
        epochs=_epochs(config, finished),
    )
    report["failed_runs"] = failed
    return report


def _prediction_to_confirm(report: dict[str, Any]) -> dict[str, Any] | None:
    """The regression's predicted best when it is no recipe run and beats every one run."""
    regression = report["regression"]
    if regression.get("status") != "fitted" or regression["predicted_best"]["observed"]:
        return None
    best = report["ranking"][report["primary_proxy"]][0]["mean"]
    predicted = regression["predicted_best"]["predicted"]
    better = predicted < best if lower_is_better(report["target_metric"]) else predicted > best
    return regression["predicted_best"] if better else None


def _confirm(
    config: AblationConfig,
    specs: list[dict],
    results: list[dict],
    context: dict[str, Any],
    runner: Callable,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Train the predicted best (same proxies, seeds) before anything can be chosen; the report
    keeps predicted vs measured."""
    report = _report(config, specs, results, context)
    prediction = _prediction_to_confirm(report) if config.confirm_predictions else None
    if prediction is None:
        report["predictions"] = []
        return report, specs
    plan = predicted_plan(context["mixture"], prediction["weights"])
    extra = [
        s
        for s in specs_for(config, [plan], context)
        if s["run_key"] not in {t["run_key"] for t in specs}
    ]
    specs = specs + extra
    results = results + execute(config, extra, runner)
    report = _report(config, specs, results, context)
    rows = report["ranking"][report["primary_proxy"]]
    measured = next((r for r in rows if r["recipe_name"] == "predicted"), None)
    report["predictions"] = [
        {
            "recipe_name": "predicted",
            "weights": plan["weights"],
            "predicted": prediction["predicted"],
            "measured": measured["mean"] if measured else None,
            "measured_rank": measured["rank"] if measured else None,
            "n_seeds": measured["n_seeds"] if measured else 0,
        }
    ]
    return report, specs


def preflight(config: AblationConfig) -> str:
    """The sweep's own pre-work checks: mixture and train configs, eval sets, data, recipes."""
    from mixtures.build import check_tokenizer, verify_encoded
    from mixtures.recipe import MixtureConfig

    specs, _ = make_specs(config)
    mixture = MixtureConfig.model_validate(read_yaml(config.mixture))
    check_tokenizer(mixture, verify_encoded(Path(mixture.build.encoded)))
    return f"{len(specs)} proxy runs planned; mixture, train template and eval sets verified"


def run_sweep(
    config: AblationConfig, runner: Callable[[dict[str, Any]], dict[str, Any]] = execute_run
) -> dict[str, Any]:
    """Run what is not cached (and a predicted best), then write the `ablation` report at
    config.out; returns the report."""
    with output_lock(config.out):
        start = time.perf_counter()
        specs, context = make_specs(config)
        results = execute(config, specs, runner)
        report, specs = _confirm(config, specs, results, context, runner)
        report["sweep_wall_s"] = round(time.perf_counter() - start, 2)
        out = Path(config.out)
        out.mkdir(parents=True, exist_ok=True)
        _write_chosen(out, specs, context["mixture"], report["chosen_recipe_sha256"])
        write_report(
            out,
            report,
            config=config_dict(config),
            inputs=[config.eval_sets, context["mixture"]["build"]["encoded"]],
        )
        return report
