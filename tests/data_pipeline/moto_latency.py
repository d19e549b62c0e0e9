"""moto's S3 server with a store's round-trip latency, counting the requests it holds at once:
`python -m tests.data_pipeline.moto_latency HOST PORT DELAY_MS`.

On loopback moto answers a small GET in about a millisecond of its own CPU; a real object store
answers it after ~10-30 ms of waiting (first byte), which is what a client hides by keeping
several requests in flight. Each request here waits `DELAY_MS` before moto serves it (requests
wait side by side: the server is threaded). `GET /__in_flight__` answers {"max": the most
requests held at once since the last such call, "served": requests since then} and starts the
count again (`?delay_ms=N` also sets the delay from then on): a test sees whether a client
overlapped its requests without timing anything.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from urllib.parse import parse_qs
from urllib.request import urlopen

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import run_simple

from tests.data_pipeline.raytools import free_port
from tests.data_pipeline.s3tools import serve

PROBE = "/__in_flight__"


def main(host: str, port: int, delay_ms: float) -> None:
    app = DomainDispatcherApplication(create_backend_app)
    lock = threading.Lock()
    count = {"now": 0, "max": 0, "served": 0}
    delay = [delay_ms]

    def delayed(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == PROBE:
            query = parse_qs(environ.get("QUERY_STRING", ""))
            with lock:
                if "delay_ms" in query:
                    delay[0] = float(query["delay_ms"][0])
                body = json.dumps({"max": count["max"], "served": count["served"]}).encode()
                count["max"], count["served"] = count["now"], 0
            start_response("200 OK", [("Content-Type", "application/json")])
            return [body]
        with lock:
            count["now"] += 1
            count["served"] += 1
            count["max"] = max(count["max"], count["now"])
        try:
            time.sleep(delay[0] / 1000)
            return list(app(environ, start_response))
        finally:
            with lock:
                count["now"] -= 1

    run_simple(host, port, delayed, threaded=True, request_handler=MotoRequestHandler)


@contextlib.contextmanager
def latency_server(delay_ms: float) -> Iterator[str]:
    """The endpoint URL of a fresh delayed moto server (module docstring), stopped on exit."""
    port = free_port()
    argv = ["-m", "tests.data_pipeline.moto_latency", "127.0.0.1", str(port), str(delay_ms)]
    with serve(argv, port) as endpoint:
        yield endpoint


def in_flight(endpoint: str, delay_ms: float | None = None) -> dict[str, int]:
    """{max, served} since the last call (module docstring); `delay_ms`: from now on, this delay."""
    query = "" if delay_ms is None else f"?delay_ms={delay_ms}"
    with urlopen(f"{endpoint}{PROBE}{query}", timeout=30) as answer:
        counted: dict[str, int] = json.loads(answer.read())
    return counted


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]))
