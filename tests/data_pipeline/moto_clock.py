"""moto's S3 server with a stopped clock for one bucket: `python -m tests.data_pipeline.moto_clock
HOST PORT BUCKET`.

Every object written to BUCKET gets Last-Modified FROZEN, whatever the time: two writes of one key
then always land "within the same second" of the store's clock, which a test of the same-second
rewrite needs (on moto's real clock two uploads cross a second boundary at random, more often under
load). Objects of other buckets, and everything else, are moto unchanged.
"""

from __future__ import annotations

import datetime
import sys
from typing import Any

FROZEN = datetime.datetime(2026, 1, 1, 12, 0, 0)
"""The Last-Modified of every object in the frozen bucket (naive UTC, as moto keeps it)."""


def freeze(bucket: str) -> None:
    """From now on, objects written to `bucket` in this process carry Last-Modified FROZEN."""
    from moto.s3 import models

    original = models.FakeKey.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        if kwargs.get("bucket_name") == bucket:
            self.last_modified = FROZEN

    models.FakeKey.__init__ = init  # type: ignore[method-assign]


def main(host: str, port: int, bucket: str) -> None:
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import run_simple

    freeze(bucket)
    app = DomainDispatcherApplication(create_backend_app)
    run_simple(host, port, app, threaded=True, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
