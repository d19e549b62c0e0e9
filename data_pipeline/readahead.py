"""Bounded read-ahead for the driver's per-part reads of an output in an object store.

The driver reads one small record per part (ledger fragments, read records, part costs) in the
resume scan and when it assembles the ledger and the manifest. Each read is a round trip of
waiting, not CPU: at 2M parts and ~5-12 ms a request, reading them one at a time takes hours.
`ordered` keeps up to `in_flight` reads running in threads and yields their results in the
order of the items, so what the driver computes from them (the ledger, the manifest) is the same,
byte for byte, as reading them in turn. At most `in_flight` results wait to be consumed: the
driver's memory stays bounded by that window, not by the part count. Local outputs are read in
turn (a local read is a system call, not a wait).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from pretrain.storage import ObjectPath, OutPath

READ_AHEAD = 16
"""Reads in flight at once on an object store (as `fingerprint.IDENTITY_THREADS`): enough to hide
a request's latency, few enough that a store's per-client request rate is not the limit."""

Item = TypeVar("Item")
Result = TypeVar("Result")


def in_flight_for(out: OutPath) -> int:
    """READ_AHEAD for an output in an object store, 1 (in turn, no threads) for a local one."""
    return READ_AHEAD if isinstance(out, ObjectPath) else 1


def ordered(
    read: Callable[[Item], Result], items: Iterable[Item], in_flight: int = READ_AHEAD
) -> Iterator[Result]:
    """`read(item)` of every item, in the items' order, with up to `in_flight` reads at once.
    An exception raised by a read is raised when its result is reached (the same first error as
    reading in turn); reads started past it are cancelled or their results dropped."""
    if in_flight <= 1:
        yield from map(read, items)
        return
    pool = ThreadPoolExecutor(in_flight, thread_name_prefix="read-ahead")
    pending: deque[Future[Result]] = deque()
    try:
        for item in items:
            pending.append(pool.submit(read, item))
            if len(pending) >= in_flight:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
