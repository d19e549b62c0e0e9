"""A model loaded in the caller's own process (evals, export checks, notebooks) leaves nothing
behind that breaks the caller's next child: no rendezvous variable in os.environ.

The bug this guards: inference opened its one-rank group through MASTER_PORT, set that variable
in the caller's environment and kept the store listening until exit; every training child the
caller started afterwards inherited MASTER_PORT and died with EADDRINUSE.

A rank in the caller's process (`pretrain launch --in-process`, the ablation's proxies) holds no
port for a store (an in-memory one) and its gloo device listeners are on 127.0.0.1 only."""

from __future__ import annotations

import os
from typing import Any

import psutil

from trainer.callbacks import Callback

RENDEZVOUS = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK")


def _listening() -> set[tuple[str, int]]:
    """(address, port) of every socket this process is listening on."""
    return {
        (conn.laddr.ip, conn.laddr.port)
        for conn in psutil.Process().net_connections(kind="inet")
        if conn.status == psutil.CONN_LISTEN
    }


class _ListenProbe(Callback):
    """What the rank is listening on mid-run (same process: no timing involved)."""

    def __init__(self) -> None:
        self.seen: set[tuple[str, int]] = set()
        self.environ: dict[str, str] = {}

    def on_step_end(self, trainer: Any, record: dict[str, Any]) -> None:
        self.seen |= _listening()
        self.environ = dict(os.environ)


def test_in_process_rank_listens_on_loopback_only(tmp_path):
    """The one rank of `run()` in this process: an in-memory store (no port, nothing for a child to
    inherit) and gloo's device listeners on 127.0.0.1 only."""
    from pretrain.config import parse_config
    from tests.trainer.trainer_testlib import tiny_config
    from trainer.config import TrainConfig
    from trainer.local_torchrun import loopback_interface
    from trainer.model import close_distributed
    from trainer.worker import run

    close_distributed()  # a model loaded in-process by an earlier test keeps its group
    config = parse_config(TrainConfig, tiny_config(tmp_path / "run", run={"train_steps": 1}))
    before, gloo_before = _listening(), os.environ.get("GLOO_SOCKET_IFNAME")
    rendezvous_before = {name: os.environ.get(name) for name in RENDEZVOUS}
    probe = _ListenProbe()
    run(config, callbacks=[probe])
    opened = probe.seen - before
    assert opened, "gloo's device listener was not seen"  # the probe works
    assert {address for address, _ in opened} == {"127.0.0.1"}, opened
    # this host's name may resolve to 127.0.0.1 anyway: gloo was also TOLD to use loopback
    assert probe.environ["GLOO_SOCKET_IFNAME"] == (gloo_before or loopback_interface())
    assert {name: probe.environ.get(name) for name in RENDEZVOUS} == rendezvous_before
    assert os.environ.get("GLOO_SOCKET_IFNAME") == gloo_before  # left as it was found
    assert {name: os.environ.get(name) for name in RENDEZVOUS} == rendezvous_before


def test_in_process_load_leaves_no_rendezvous_variable_or_port(reference_run):
    from trainer.inference import load_model

    run_dir, _ = reference_run
    before = {name: os.environ.get(name) for name in RENDEZVOUS}
    model = load_model(run_dir / "checkpoints" / "iter_0000006")
    assert model.step == 6
    assert {name: os.environ.get(name) for name in RENDEZVOUS} == before
