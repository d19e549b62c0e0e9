"""A model loaded in the caller's own process (evals, export checks, notebooks) leaves nothing
behind that breaks the caller's next child: no rendezvous variable in os.environ.

The bug this guards: inference opened its one-rank group through MASTER_PORT, set that variable
in the caller's environment and kept the store listening until exit; every training child the
caller started afterwards inherited MASTER_PORT and died with EADDRINUSE."""

from __future__ import annotations

import os

RENDEZVOUS = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK")


def test_in_process_load_leaves_no_rendezvous_variable_or_port(reference_run):
    from trainer.inference import load_model

    run_dir, _ = reference_run
    before = {name: os.environ.get(name) for name in RENDEZVOUS}
    model = load_model(run_dir / "checkpoints" / "iter_0000006")
    assert model.step == 6
    assert {name: os.environ.get(name) for name in RENDEZVOUS} == before
