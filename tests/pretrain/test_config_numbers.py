"""A config number that is not finite, or a time limit past what a lock wait takes, is a one-line
config error (exit 2), never a silent off-switch or a traceback after the run has started."""

import pytest

from pretrain_app.cli import main

PIPELINE = "configs/pipeline.yaml"


@pytest.mark.parametrize(
    "item",
    [
        # a NaN threshold compares false with everything: the rule silently never fired
        "stages.rules.gopher_repetition.dup_line_frac=.nan",
        # thread.join(inf) / thread.join(1e300): OverflowError once the stream had run
        "ray.timeout_s=.inf",
        "ray.timeout_s=1e300",
        "stages.extract.timeout_s=1e999",
        "stages.dedup.task_timeout_s=.inf",
    ],
)
def test_a_number_that_cannot_work_is_refused_in_one_line(item, capsys):
    assert main(["data", "run", PIPELINE, "--set", item, "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    key = item.split("=")[0].rsplit(".", 1)[-1]
    assert len(err.splitlines()) == 1 and key in err, err
    assert "finite" in err or "less than or equal" in err, err


def test_finite_time_limits_still_pass(capsys):
    assert main(["data", "run", PIPELINE, "--set", "ray.timeout_s=86400", "--dry-run"]) == 0
    assert "timeout_s: 86400" in capsys.readouterr().out
