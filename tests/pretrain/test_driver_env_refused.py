"""A user's runtime_env may not set the writer-lock variable pretrain hands its job's workers:
from `ray job submit --runtime-env-json` (Ray hands the driver the job's config in
RAY_JOB_CONFIG_JSON_ENV_VAR) or from runtime_env passed to the connect call, it is a one-line
refusal. Before, a user's value went to the job's workers unchecked when pretrain set none (a
local output), and beside ours Ray's merge of the two failed (ray/_private/worker.py: with a
shared env_vars key `_merge_runtime_env` returns None and ray.init raises a ValueError)."""

from __future__ import annotations

import json

import pytest

from pretrain.errors import PretrainError
from pretrain.objectlock import FENCE_ENV
from pretrain.rayinit import JOB_CONFIG_ENV, with_driver_env

OURS = json.dumps({"output": "s3://bucket/out", "id": "ours"})


def test_a_submitted_jobs_runtime_env_setting_the_lock_variable_is_refused(monkeypatch):
    job = {"runtime_env": {"env_vars": {FENCE_ENV: "theirs", "AWS_REGION": "x"}}}
    monkeypatch.setenv(JOB_CONFIG_ENV, json.dumps(job))
    monkeypatch.setenv(FENCE_ENV, OURS)
    with pytest.raises(PretrainError, match="ray job submit --runtime-env-json") as refused:
        with_driver_env({})
    assert "\n" not in str(refused.value) and FENCE_ENV in str(refused.value)


def test_a_runtime_env_passed_in_setting_the_lock_variable_is_refused(monkeypatch):
    monkeypatch.delenv(JOB_CONFIG_ENV, raising=False)
    monkeypatch.delenv(FENCE_ENV, raising=False)  # a local output: no lock variable of ours
    with pytest.raises(PretrainError, match="passed to ray.init"):
        with_driver_env({"runtime_env": {"env_vars": {FENCE_ENV: "theirs"}}})


def test_other_user_variables_are_kept_beside_ours(monkeypatch):
    job = {"runtime_env": {"env_vars": {"AWS_REGION": "x"}, "working_dir": "."}}
    monkeypatch.setenv(JOB_CONFIG_ENV, json.dumps(job))
    monkeypatch.setenv(FENCE_ENV, OURS)
    kwargs = with_driver_env({"runtime_env": {"env_vars": {"HF_HOME": "/h"}}})
    assert kwargs["runtime_env"]["env_vars"] == {"HF_HOME": "/h", FENCE_ENV: OURS}
