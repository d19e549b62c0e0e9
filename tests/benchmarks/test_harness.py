"""The benchmark harness measures what it says (CPU of the whole process tree, a grandchild that
exits early included; start-up apart at READY; the contender's reported line), fails loudly when
a contender cannot run, and every claim's spec starts on a tiny corpus (slow)."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest

from benchmarks.claims import CLAIMS
from benchmarks.harness import (
    Claim,
    Contender,
    ContenderFailed,
    measure,
    run_claim,
    tiny_corpus,
)

BURN = """
import subprocess, sys, time
def burn(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass
burn({startup})
print("READY", flush=True)
subprocess.run([sys.executable, "-c", "import time\\nend = time.process_time() + {child}\\n"
                "while time.process_time() < end: pass"], check=True)
burn({work})
print('{{"done": true}}')
"""


def _burner(startup: float, work: float, child: float) -> tuple[str, ...]:
    """A contender's argv: braces doubled, as a spec's argv is a format string."""
    code = textwrap.dedent(BURN.format(startup=startup, work=work, child=child))
    return ("-c", code.replace("{", "{{").replace("}", "}}"))


def test_the_whole_tree_is_measured_and_start_up_is_apart(tmp_path: Path) -> None:
    code = _burner(0.2, 0.3, 0.5)[1].format()
    run = measure([sys.executable, "-c", code], tmp_path, dict(os.environ), 120)
    # 1 CPU-s burnt in all, half in a grandchild that is gone before the last sample
    assert 0.95 <= run["cpu_s"] <= 2.5, run
    assert run["startup_s"] is not None and 0 < run["startup_s"] < run["wall_s"]
    assert run["work_s"] == pytest.approx(run["wall_s"] - run["startup_s"], abs=0.02)
    assert run["reported"] == {"done": True}
    assert run["peak_total_pss_mb"] > 0 and run["processes"][0]["peak_rss_mb"] > 0


def test_a_ratio_compares_the_same_figure_between_contenders(tmp_path: Path) -> None:
    claim = Claim(
        "t",
        "half the CPU",
        (Contender("ours", _burner(0, 0.2, 0.1)), Contender("peer", _burner(0, 0.8, 0.1))),
        ratio=("cpu_s", "ours", "peer"),
        target=1.5,
        check=lambda reported: None if len(set(map(str, reported.values()))) == 1 else "differ",
    )
    result = run_claim(claim, tmp_path, smoke=True)
    assert 1.5 <= result["ratio"] <= 5 and result["met"] is True, result
    assert result["output_differs"] is None


def test_a_contender_that_fails_or_cannot_start_fails_the_claim(tmp_path: Path) -> None:
    failing = Claim("t", "x", (Contender("ours", ("-c", "import sys; sys.exit('no input')")),))
    with pytest.raises(ContenderFailed, match="t / ours: exit 1:\nno input"):
        run_claim(failing, tmp_path, smoke=True)
    missing = Claim("t", "x", (Contender("ours", ("-m", "benchmarks.no_such_script")),))
    with pytest.raises(ContenderFailed, match="No module named benchmarks.no_such_script"):
        run_claim(missing, tmp_path, smoke=True)
    with pytest.raises(ContenderFailed, match="ran past 1 s"):  # stdout held open, killed
        measure([sys.executable, "-c", "import time; time.sleep(60)"], tmp_path, {}, 1)


def test_an_earlier_revision_runs_in_its_own_checkout(tmp_path: Path) -> None:
    code = "import json, pathlib; print(json.dumps({'cwd': pathlib.Path.cwd().name}))"
    claim = Claim(
        "t",
        "x",
        (Contender("before", ("-c", code.replace("{", "{{").replace("}", "}}")), rev="HEAD"),),
    )
    result = run_claim(claim, tmp_path, smoke=True)
    assert result["runs"]["before"]["reported"] == {"cwd": "rev-HEAD"}


@pytest.mark.slow
@pytest.mark.parametrize("claim", CLAIMS, ids=[c.name for c in CLAIMS])
def test_every_claim_starts_on_a_tiny_corpus(claim: Claim, tmp_path_factory) -> None:
    corpus = tmp_path_factory.getbasetemp() / "bench-corpus"
    if not corpus.is_dir():
        tiny_corpus(corpus)
    result = run_claim(claim, corpus, smoke=True, timeout_s=900)
    assert set(result["runs"]) == {c.name for c in claim.contenders}
    assert not result.get("output_differs"), result["output_differs"]
