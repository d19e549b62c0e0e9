"""Launching the distributed dedup's steps as Ray tasks (1 CPU each) and waiting for them with a
timeout; every all-to-all step's pieces go through files (data_pipeline.dedup.exchange).
data_pipeline.dedup.aggregate says which steps run, in what order.
"""

from __future__ import annotations

import time
from typing import Any

from data_pipeline import throughput
from data_pipeline.dedup import exchange
from data_pipeline.dedup.config import DedupConfig
from pretrain.errors import PretrainError
from pretrain.storage import OutPath, output_path


class Runner:
    """Launches the step functions as Ray tasks and waits for them with a timeout."""

    def __init__(self, config: DedupConfig, folder: str | OutPath) -> None:
        import ray

        self.ray = ray
        self.exchange: Any = output_path(folder)
        """Folder of the exchange's files (data_pipeline.dedup.exchange)."""
        self.scratch = exchange.Scratch(self.exchange)
        self.producing: list[Any] = []
        """Cost refs of the file producers whose files a consumer launched next may read."""
        self.steps = 0
        self.timeout = config.task_timeout_s
        self.infos: dict[str, list[dict[str, Any]]] = {}
        self.remotes: dict[Any, Any] = {}
        self.costs: list[Any] = []
        """One ref per task: its CPU-seconds and peak RSS (data_pipeline.throughput)."""
        self.timeline: list[tuple[str, float]] = [("start", time.time())]
        """(step, Unix time it finished), in order: where a run's time and memory went."""

    def launch(self, func: Any, num_returns: int, *args: Any) -> list[Any]:
        if self.producing and any(isinstance(a, exchange.Gather) for a in args):
            self.wait(self.producing, "exchange")  # a Gather's files exist once these finish
            self.producing = []
            self.sweep()
        key = (func, num_returns)
        if key not in self.remotes:
            timed = throughput.timed_task(func, num_returns)
            self.remotes[key] = self.ray.remote(num_cpus=1, max_retries=2)(timed)
        *refs, cost = self.remotes[key].options(num_returns=num_returns + 1).remote(*args)
        self.costs.append(cost)
        self.scratch.read_by(args, cost)
        return refs

    def release(self, *columns: Any, lineage: bool) -> None:
        """No task launched from now on reads these pieces (exchange.Scratch.release)."""
        self.scratch.release(columns, lineage)

    def gathers(self, *columns: Any) -> list[Any]:
        """`columns` with only their exchange.Gathers (no object ref): what `release` needs."""
        return [[[g for g in c if isinstance(g, exchange.Gather)] for c in col] for col in columns]

    def sweep(self) -> None:
        self.scratch.sweep(self.ray)

    def scatter(
        self, step: str, func: Any, groups: int, extra: int, partitions: int, producers: list
    ) -> tuple[list[list[list[Any]]], list[list[Any]]]:
        """Launch one producer task per args tuple in `producers`; `func`'s first `groups` x
        `partitions` returns are partition pieces, then `extra` values. Returns (columns, rests):
        columns[g][q] is what a consumer of partition q passes on for group g (one exchange.Gather
        naming the producers' files), rests[i] producer i's extra refs."""
        self.steps += 1
        name = f"{self.steps:04d}-{step}"
        outs = [
            self.launch(
                exchange.producer(func),
                max(1, extra),
                groups,
                partitions,
                (self.exchange, name, i),
                *args,
            )
            for i, args in enumerate(producers)
        ]
        costs = self.costs[len(self.costs) - len(outs) :]  # the producers'
        self.producing += costs
        self.scratch.produced(name, groups, costs)
        columns = [
            [[exchange.Gather(self.exchange, name, g, len(outs), q)] for q in range(partitions)]
            for g in range(groups)
        ]
        return columns, [o[:extra] for o in outs]

    def cost(self) -> dict[str, float]:
        """CPU-seconds and peak RSS of every task launched so far."""
        return throughput.merge_task_costs(self.ray.get(self.costs, timeout=self.timeout))

    def wait(self, refs: list[Any], step: str) -> list[Any]:
        try:
            return self.ray.get(refs, timeout=self.timeout)
        except self.ray.exceptions.GetTimeoutError:
            raise RuntimeError(
                f"dedup step {step!r} waited more than task_timeout_s={self.timeout} s; check "
                "`ray status`: actors may be holding every CPU (see the Ray deadlock note)"
            ) from None
        except self.ray.exceptions.RayTaskError as exc:  # e.g. a changed exchange file: 1 line
            if isinstance(cause := getattr(exc, "cause", None), PretrainError):
                raise type(cause)(str(cause)) from None
            raise

    def get(self, refs: list[Any], step: str) -> list[Any]:
        values = self.wait(refs, step)
        self.sweep()
        self.infos.setdefault(step, []).extend(v for v in values if isinstance(v, dict))
        self.timeline.append((step, time.time()))
        return values


def wait_for_cpu(ray: Any, timeout: float) -> None:
    deadline = time.monotonic() + min(timeout, 60.0)
    while ray.available_resources().get("CPU", 0) < 1:
        if time.monotonic() > deadline:
            raise RuntimeError(
                "dedup: no free CPU on the Ray cluster for 60 s; actors of an "
                "earlier stage hold them all (use fractional num_cpus there)"
            )
        time.sleep(0.5)
