"""moto's S3 server answering one request at a time: `python -m tests.data_pipeline.moto_serial
HOST PORT`.

AWS S3 applies a conditional write (`If-None-Match: *`, `If-Match`) atomically: of two writers
racing to create one key, exactly one gets 200. moto's threaded server checks the condition and
stores the object in two steps, so two requests landing within the same few milliseconds could
both pass. The writer-lock tests race real writers on purpose; serving requests one by one gives
them the store's documented guarantee (everything else is moto unchanged).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import run_simple


def main(host: str, port: int) -> None:
    app = DomainDispatcherApplication(create_backend_app)
    one_at_a_time = threading.Lock()

    def serial(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        with one_at_a_time:
            return list(app(environ, start_response))

    run_simple(host, port, serial, threaded=True, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
