"""A data run's Ray Data jobs step their streaming executor at most every
`ray_job.EXECUTOR_WAIT_S`, not Ray's 0.1 s: each step waits for every running task, so at Ray's
default the driver ran ten full scheduling steps a second whatever happened (CPU a 2-core run's
workers lacked). The setting is the run's only: it is Ray's again afterwards."""

from __future__ import annotations

from pathlib import Path

import pytest

from data_pipeline import ray_job
from data_pipeline.config import PipelineConfig
from data_pipeline.runner import run_pipeline

DATA = Path(__file__).resolve().parents[1] / "data" / "data_pipeline"
pytestmark = [pytest.mark.ray, pytest.mark.timeout(240)]


def test_the_executor_waits_longer_between_steps_during_a_run_only(ray_local, tmp_path) -> None:
    from ray.data._internal.execution import streaming_executor as executor
    from ray.data._internal.execution import streaming_executor_state as state

    ray_default = state.WAIT_FOR_TASK_COMPLETION_TIMEOUT_S
    seen: list[float] = []
    step = executor.process_completed_tasks

    def recording(*args, **kwargs):  # what each scheduling step of the run waited
        seen.append(state.WAIT_FOR_TASK_COMPLETION_TIMEOUT_S)
        return step(*args, **kwargs)

    config = PipelineConfig.model_validate(
        {"inputs": [str(DATA)], "output": str(tmp_path / "out"), "ray": {"timeout_s": 200}}
    )
    executor.process_completed_tasks = recording
    try:
        result = run_pipeline(config, progress=False)
    finally:
        executor.process_completed_tasks = step
    assert result.shards  # the run went through
    assert seen and set(seen) == {ray_job.EXECUTOR_WAIT_S}, sorted(set(seen))
    assert ray_default < ray_job.EXECUTOR_WAIT_S
    assert ray_default == state.WAIT_FOR_TASK_COMPLETION_TIMEOUT_S
