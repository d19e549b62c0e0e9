"""moto's S3 server, one request at a time (as tests/data_pipeline/moto_serial.py), that answers
`500 InternalError` to the first conditional PUT of a lock object (`If-None-Match`) AFTER it was
applied, and then creates the file MARKER: `python -m tests.pretrain.moto_lost_reply HOST PORT
MARKER`.

AWS S3 documents that a 500 may come after the request took effect; the client retries it, and
the retried conditional write is refused (412), because the first one already created the object.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import run_simple

ERROR = b"<Error><Code>InternalError</Code><Message>injected after the write</Message></Error>"


def main(host: str, port: int, marker: str) -> None:
    app = DomainDispatcherApplication(create_backend_app)
    one_at_a_time = threading.Lock()
    pending = [True]

    def serve(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        answer: list[Any] = []
        with one_at_a_time:
            body = list(app(environ, lambda *args: answer.append(args)))
            target = (
                environ["REQUEST_METHOD"] == "PUT"
                and environ["PATH_INFO"].endswith(".lock")
                and pending
                and "HTTP_IF_NONE_MATCH" in environ
                and str(answer[0][0]).startswith("200")
            )
            if target:
                pending.clear()
                Path(marker).touch()
                start_response("500 Internal Server Error", [("Content-Type", "application/xml")])
                return [ERROR]
        start_response(*answer[0])
        return body

    run_simple(host, port, serve, threaded=True, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
