"""lm-evaluation-harness tasks from local files in their published formats: loaded offline, every
row rendered, and a wrong file refused in one line BEFORE any checkpoint is loaded."""

from __future__ import annotations

from pathlib import Path

import pytest

from pretrain.errors import InputError
from pretrain_app.cli import main

DATA = Path(__file__).resolve().parents[1] / "data" / "evals" / "lm_eval"
pytestmark = pytest.mark.timeout(240)


def test_published_formats_load_offline_through_lm_evals_own_task_configs():
    from evals.lm_eval_tasks import load_lm_eval_tasks

    tasks = load_lm_eval_tasks(
        [
            f"boolq={DATA / 'boolq.jsonl'}",
            f"piqa={DATA / 'piqa.jsonl'}",
            f"hellaswag={DATA / 'hellaswag.jsonl'}",
            f"arc_easy={DATA / 'arc_easy.parquet'}",
        ]
    )
    assert {name: len(examples) for name, examples in tasks.examples.items()} == {
        "boolq_local": 4,
        "piqa_local": 4,
        "hellaswag_local": 3,
        "arc_easy_local": 3,
    }
    hellaswag = tasks.manager.load(["hellaswag_local"])["tasks"]["hellaswag_local"]
    doc = next(iter(hellaswag.eval_docs))
    # lm-eval's own process_docs ran: "activity: ctx_a Ctx_b" and the gold index from the string
    assert hellaswag.doc_to_text(doc) == "Cooking: A man puts a pot of water on the stove. He"
    assert hellaswag.doc_to_target(doc) == 0


def test_a_file_in_another_tasks_format_is_refused_naming_the_row():
    from evals.lm_eval_tasks import load_lm_eval_tasks

    with pytest.raises(InputError, match=r"boolq: .*piqa.jsonl .*does not fit.*'passage'"):
        load_lm_eval_tasks([f"boolq={DATA / 'piqa.jsonl'}"])
    with pytest.raises(InputError, match="unknown task"):
        load_lm_eval_tasks([f"mmlu_pro={DATA / 'piqa.jsonl'}"])
    with pytest.raises(InputError, match="NAME=FILE"):
        load_lm_eval_tasks([str(DATA / "piqa.jsonl")])


def test_eval_run_refuses_bad_task_files_before_loading_the_checkpoint(tmp_path, capsys):
    run = tmp_path / "run"
    (run / "checkpoints" / "iter_0000001").mkdir(parents=True)  # not loadable: never reached
    argv = ["eval", "run", str(run), "--sets", str(tmp_path / "none"), "--tasks"]
    code = main([*argv, "--lm-eval", f"hellaswag={DATA / 'boolq.jsonl'}"])
    assert code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]  # the one-line refusal
    assert "hellaswag" in last and "does not fit" in last and "KeyError" in last
    missing = main([*argv, "--lm-eval", f"piqa={tmp_path / 'absent.jsonl'}"])
    assert missing == 2 and "does not exist" in capsys.readouterr().err


def test_few_shot_beyond_the_files_rows_is_refused_before_loading_the_checkpoint(tmp_path, capsys):
    """The few-shot examples come from the same file, never the document itself: lm-eval's
    sampler raised ValueError('Sample larger than population') AFTER the checkpoint was loaded
    and scored. Refused up front in one line; a file with exactly one spare row still builds."""
    from evals.lm_eval_tasks import load_lm_eval_tasks

    rows = (DATA / "boolq.jsonl").read_text().splitlines()
    two = tmp_path / "boolq2.jsonl"
    two.write_text("\n".join(rows[:2]) + "\n")
    with pytest.raises(InputError, match=r"boolq: .*boolq2.jsonl has 2 rows.*--num-fewshot 2"):
        load_lm_eval_tasks([f"boolq={two}"], num_fewshot=2)
    with pytest.raises(InputError, match="--num-fewshot -1"):
        load_lm_eval_tasks([f"boolq={two}"], num_fewshot=-1)
    tasks = load_lm_eval_tasks([f"boolq={two}"], num_fewshot=1)
    task = tasks.manager.load(["boolq_local"])["tasks"]["boolq_local"]
    task.set_config(key="num_fewshot", value=1)
    task.build_all_requests(limit=None, rank=0, world_size=1)  # lm-eval's own few-shot sampler
    assert len({i.doc_id for i in task.instances}) == 2

    run = tmp_path / "run"
    (run / "checkpoints" / "iter_0000001").mkdir(parents=True)  # not loadable: never reached
    argv = ["eval", "run", str(run), "--sets", str(tmp_path / "none"), "--tasks"]
    assert main([*argv, "--lm-eval", f"boolq={two}", "--num-fewshot", "5"]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("pretrain eval run: error:") and "--num-fewshot 5" in last
