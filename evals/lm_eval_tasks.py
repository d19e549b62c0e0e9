"""lm-evaluation-harness tasks from local files, offline: `pretrain eval run ... --lm-eval NAME=FILE`.

Each standard task is lm-eval's own published config, `include:`d, with its documents from the
user's file (tasks and fields: docs/evals.md); `jsonl_mc` runs our multiple-choice format. Every
document is rendered before the checkpoint loads, so a wrong file fails in seconds.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from pretrain.errors import InputError

STANDARD = {
    "boolq": "super_glue/boolq/default.yaml",
    "piqa": "piqa/piqa.yaml",
    "hellaswag": "hellaswag/hellaswag.yaml",
    "arc_easy": "arc/arc_easy.yaml",
    "arc_challenge": "arc/arc_challenge.yaml",
    "lambada_openai": "lambada/lambada_openai.yaml",
}
_BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}
SPLIT = "local"


@dataclass
class LmEvalTasks:
    """Validated lm-eval tasks: their names, TaskManager, data files and documents as rendered
    (`{id, context, continuation}`: the prompt, then the correct choice or target)."""

    names: list[str]
    manager: Any
    files: dict[str, str]
    examples: dict[str, list[dict[str, str]]]
    num_fewshot: int | None = None


def parse_spec(spec: str) -> tuple[str, Path]:
    """`NAME=FILE` -> (name, an existing file of a published format), or a one-line refusal."""
    name, sep, file = spec.partition("=")
    if not sep or not name or not file:
        raise InputError(
            f"--lm-eval {spec!r}: write NAME=FILE (NAME one of {', '.join(STANDARD)}) "
            "or TASK.yaml=FILE"
        )
    path = Path(file)
    if not path.is_file():
        raise InputError(f"--lm-eval {name}: data file {path} does not exist")
    if path.suffix not in _BUILDERS:
        raise InputError(
            f"--lm-eval {name}: {path} must be .jsonl, .json or .parquet (the published formats)"
        )
    return name, path


JSONL_MC = {
    "output_type": "multiple_choice",
    "doc_to_text": "{{context}}",
    "doc_to_choice": "{{choices}}",
    "doc_to_target": "{{answer}}",
    "target_delimiter": "",
    "metric_list": [
        {"metric": "acc", "aggregation": "mean", "higher_is_better": True},
        {"metric": "acc_norm", "aggregation": "mean", "higher_is_better": True},
    ],
    "metadata": {"version": 1.0},
}


def _task_yaml(name: str, data: Path, tasks_root: Path) -> tuple[str, dict[str, Any]]:
    if name == "jsonl_mc":
        base, task = None, f"{data.stem}_local"
    elif name in STANDARD:
        base, task = tasks_root / STANDARD[name], f"{name}_local"
    elif name.endswith((".yaml", ".yml")) and Path(name).is_file():
        base, task = Path(name).resolve(), f"{Path(name).stem}_local"
    else:
        raise InputError(
            f"--lm-eval {name}: unknown task; use one of {', '.join(STANDARD)} or the path of "
            "an lm-eval task YAML"
        )
    source = {"include": str(base)} if base is not None else dict(JSONL_MC)
    return task, {
        **source,
        "task": task,
        "tag": [],
        "dataset_path": _BUILDERS[data.suffix],
        "dataset_name": None,
        "dataset_kwargs": {"data_files": {SPLIT: str(data.resolve())}},
        "training_split": None,
        "validation_split": None,
        "test_split": SPLIT,
        "fewshot_split": SPLIT,
    }


def _render_all(name: str, task: Any, data: Path) -> list[dict[str, str]]:
    """Render every document as lm-eval will; a failure names the task, file and row."""
    docs = list(task.eval_docs)
    if not docs:
        raise InputError(f"--lm-eval {name}: {data} has no rows")
    examples = []
    for index, doc in enumerate(docs):
        try:
            context = task.doc_to_text(doc)
            target = task.doc_to_target(doc)
            if task.OUTPUT_TYPE == "multiple_choice":
                choices = task.doc_to_choice(doc)
                if not isinstance(target, int) or not 0 <= target < len(choices):
                    raise ValueError(
                        f"target {target!r} is not an index into {len(choices)} choices"
                    )
                target = choices[target]
        except Exception as exc:  # lm-eval raises KeyError, TypeError, jinja2 errors
            raise InputError(
                f"--lm-eval {name.removesuffix('_local')}: {data} row {index + 1} does not fit the "
                f"task's published format ({type(exc).__name__}: {exc}); see docs/evals.md for the fields"
            ) from None
        examples.append({"id": str(index), "context": str(context), "continuation": f" {target}"})
    return examples


def load_lm_eval_tasks(specs: list[str], num_fewshot: int | None = None) -> LmEvalTasks:
    """Parse `NAME=FILE` specs, write the task YAMLs, load and validate every document."""
    for key in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        os.environ[key] = "1"
    parsed = [parse_spec(spec) for spec in specs]
    import lm_eval.tasks
    from lm_eval.tasks import TaskManager

    tasks_root = Path(lm_eval.tasks.__file__).parent
    directory = Path(tempfile.mkdtemp(prefix="pretrain-lm-eval-"))
    names, files = [], {}
    for name, data in parsed:
        task_name, config = _task_yaml(name, data, tasks_root)
        (directory / f"{task_name}.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        names.append(task_name)
        files[task_name] = str(data)
    manager = TaskManager(include_path=str(directory), include_defaults=False)
    loaded = {}
    for task_name in names:
        try:  # lm-eval renders a first document while building the task
            loaded.update(manager.load([task_name])["tasks"])
        except Exception as exc:
            raise InputError(
                f"--lm-eval {task_name.removesuffix('_local')}: {files[task_name]} does not fit "
                f"the task's published format ({type(exc).__name__}: {exc}); see "
                "docs/evals.md for the fields"
            ) from None
    examples = {n: _render_all(n, task, Path(files[n])) for n, task in loaded.items()}
    for task_name, task in loaded.items():
        _check_fewshot(task_name, task, files[task_name], len(examples[task_name]), num_fewshot)
    return LmEvalTasks(names, manager, files, examples, num_fewshot)


def rendered_tasks(specs: list[str]) -> list[Any]:
    """Each task's rendered documents as `evals.tasks.Task`s of kind `lm_eval` (one cloze example
    per document), for the eval build's contamination check (evals/task_overlap.py)."""
    from evals.tasks import Task

    loaded = load_lm_eval_tasks(specs)
    return [Task(n.removesuffix("_local"), "lm_eval", e) for n, e in loaded.examples.items()]


def _check_fewshot(name: str, task: Any, data: str, rows: int, num_fewshot: int | None) -> None:
    """The few-shot examples are drawn from the same file, never the document itself: each
    document needs `num_fewshot` others (lm-eval's sampler raises only once the model runs)."""
    shots = num_fewshot if num_fewshot is not None else task.get_config("num_fewshot")
    short = name.removesuffix("_local")
    if shots is not None and shots < 0:
        raise InputError(f"--lm-eval {short}: --num-fewshot {shots} must be 0 or more")
    if shots and rows <= shots:
        raise InputError(
            f"--lm-eval {short}: {data} has {rows} rows, --num-fewshot {shots} needs at least "
            f"{shots + 1} (the examples come from the same file, never the document itself); "
            "lower --num-fewshot or add rows"
        )


def run_lm_eval(lm: Any, tasks: LmEvalTasks) -> dict[str, float]:
    """Run the tasks with lm-eval's evaluator on `lm` (an lm_eval LM); flat metrics
    `task/<name>/<metric>` (and `<metric>_stderr`), `<name>` without the `_local` suffix."""
    import lm_eval

    results = lm_eval.simple_evaluate(
        model=lm,
        tasks=tasks.names,
        task_manager=tasks.manager,
        num_fewshot=tasks.num_fewshot,
        log_samples=False,
        random_seed=0,
        numpy_random_seed=0,
        torch_random_seed=0,
        fewshot_random_seed=0,
    )
    metrics: dict[str, float] = {}
    for task_name, values in results["results"].items():
        short = task_name.removesuffix("_local")
        for key, value in values.items():
            metric, _, _filter = key.partition(",")
            if isinstance(value, (int, float)) and metric not in ("alias", "sample_len"):
                metrics[f"task/{short}/{metric}"] = float(value)
    return metrics
