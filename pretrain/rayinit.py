"""Connecting to Ray: an existing cluster (sending a token when one is found: docs/cluster.md), or a
private local one bound to 127.0.0.1 with no dashboard or telemetry, and a watchdog
(pretrain.rayreaper) that ends its processes if the driver dies."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pretrain.errors import PretrainError
from pretrain.lifetime import stop_on_sigterm

AUTH_MODE = "RAY_AUTH_MODE"
LOCAL_ONLY = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # "0": node address stays 127.0.0.1
_REAPER: subprocess.Popen[bytes] | None = None

QUIET_LOCAL: dict[str, Any] = {
    "enable_metrics_collection": False,
    "task_events_report_interval_ms": 0,
}
"""RayConfig of a local Ray (a caller's own entries win): no metrics and no task events (an
interval of 0). With no dashboard nobody reads them, and on 2 cores recording them took CPU from
the workers; a cluster (`ray start`, an address) keeps them."""
WARM_LOCAL: dict[str, Any] = {"idle_worker_killing_time_threshold_ms": 600_000}
"""Also a local Ray's RayConfig: an idle task worker is kept for 10 minutes (Ray's default: 1 s
once the node has more worker processes than CPUs). A data run's stream holds its stage actors
AND its read tasks' workers, more processes than CPUs, so by the end of the stream Ray had killed
the idle read workers, and the dedup map and merge tasks after it each started a fresh process
(interpreter, Ray and our imports: ~1-2 CPU-s each, 2 of them per phase at 2 CPUs). Kept, those
phases reuse them; the peak number of processes is the stream's, as before."""
QUIET_LOCAL_ENV = {"REPORTER_UPDATE_INTERVAL_MS": "60000"}
"""Read by the dashboard agent a local start spawns: its process-stats loop (default 5,000 ms);
a value the environment sets wins."""

LOCAL_SKIPPED = ("start_api_server", "start_monitor", "start_log_monitor")
"""Head processes a local start does not run (a Ray without one of these `Node` methods starts it
as usual): the dashboard's API server (`ray.init` waits for it, and with no dashboard it serves
only usage stats), the autoscaler's monitor (a fixed node never scales; it polls the GCS every
second) and the log monitor (it tails every worker log ten times a second for the driver, which
`log_to_driver=False` never prints; the files stay in the session's logs)."""

REFUSED = (
    "could not connect to the Ray cluster at {address} ({reason}); check it with "
    "`ray status --address {address}`"
)
NO_TOKEN = (
    "the Ray cluster at {address} refused this driver's token (it uses token authentication, "
    "as `ray start --head` does once a token exists): copy the head's ~/.ray/auth_token to "
    "~/.ray/auth_token here (or set RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH) and set "
    "RAY_AUTH_MODE=token"
)


def token_available() -> bool:
    """True if a Ray auth token can be found here (env var, token path, or ~/.ray/auth_token)."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return True
    path = os.environ.get("RAY_AUTH_TOKEN_PATH") or str(Path.home() / ".ray" / "auth_token")
    try:
        return bool(Path(path).read_text().strip())
    except OSError:
        return False


def _use_token_if_available() -> None:
    """Ray sends a token to an explicit address only with RAY_AUTH_MODE=token, though `ray start
    --head` turns authentication on whenever a token exists: unset and a token here, send it."""
    if os.environ.get(AUTH_MODE) is not None or not token_available():
        return
    os.environ[AUTH_MODE] = "token"
    try:  # Ray caches its config in C++; refresh it like `ray.init()` does for a local cluster
        import ray._raylet

        ray._raylet.Config.initialize("")  # type: ignore[attr-defined]
    except (ImportError, AttributeError):  # pragma: no cover - a Ray without token auth
        pass


def connect(
    address: str | None,
    *,
    num_cpus: int | None = None,
    object_store_mb: int | None = None,
    **init_kwargs: Any,
) -> bool:
    """Connect to `address` or start a local loopback-only Ray; True if this call initialised it.

    Already initialised (a test session, `ray job submit`'s driver with RAY_ADDRESS): reuse it."""
    import ray

    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address:
        _connect_existing(ray, address, init_kwargs)
        return True
    import ray._private.ray_constants as constants
    from ray._private import node

    system_config = {**QUIET_LOCAL, **WARM_LOCAL, **init_kwargs.pop("_system_config", {})}
    quiet = {name: os.environ.get(name, value) for name, value in QUIET_LOCAL_ENV.items()}
    started = time.time()
    for attempt in range(1, LOCAL_START_ATTEMPTS + 1):
        try:
            # every Ray process started here reads LOCAL_ONLY (its node address stays loopback,
            # so its servers bind 127.0.0.1 only); this process imported Ray already
            with (
                environ(**quiet, **{LOCAL_ONLY: "0"}),
                patched(constants, ENABLE_RAY_CLUSTER=False),
                patched(node.Node, **dict.fromkeys(LOCAL_SKIPPED, _not_started)),
            ):
                ray.init(
                    # "local": never the head `ray start` left in /tmp/ray/ray_current_cluster,
                    # which a plain ray.init() joins (and then refuses num_cpus)
                    address="local",
                    num_cpus=num_cpus or os.cpu_count(),
                    include_dashboard=False,
                    dashboard_host="127.0.0.1",
                    _node_ip_address="127.0.0.1",
                    log_to_driver=False,
                    object_store_memory=object_store_mb * 2**20 if object_store_mb else None,
                    # a copy per attempt: Ray writes the session's spill directory into it
                    **{**init_kwargs, "_system_config": dict(system_config)},
                )
            _connected(ray)
            break
        except Exception as exc:
            _end_failed_start(ray, started)
            # Ray waits a fixed 30 s for its raylet to register; a busy machine can miss it.
            if "timed out during startup" not in str(exc) or attempt == LOCAL_START_ATTEMPTS:
                raise _start_failed(exc, attempt) from None
    _start_reaper(started)
    return True


LOCAL_START_ATTEMPTS = 3


def _connected(ray: Any) -> None:
    """After `ray.init`: SIGTERM stops the command again (Ray made it `sys.exit(15)`), and no
    Ray call after `shutdown` starts a Ray of its own (Ray Data's threads, still stopping after a
    Ctrl-C or SIGTERM, called `ray.init()` in the background: a second, non-loopback Ray)."""
    stop_on_sigterm()
    hook = getattr(ray._private, "auto_init_hook", None)
    if hook is not None:
        hook.enable_auto_connect = False


def _start_failed(exc: BaseException, attempts: int) -> PretrainError:
    """One line for a local Ray that did not start (Ray raises ValueError, Exception, ...)."""
    reason = " ".join(f"{type(exc).__name__}: {exc}".split())[:400]
    tries = f" after {attempts} attempts" if attempts > 1 else ""
    return PretrainError(
        f"could not start a local Ray{tries} ({reason}); check ray.num_cpus and "
        "ray.object_store_mb against this machine's CPUs and memory, free memory (/dev/shm) "
        "or CPU, or start a cluster (`ray start --head`) and set ray.address"
    )


def _end_failed_start(ray: Any, since: float) -> None:
    """Stop what a local start that timed out left running, before trying again."""
    import psutil

    from pretrain import rayreaper

    seen: dict[int, Any] = {}
    rayreaper.record(psutil.Process(), since - 1.0, seen)
    ray.shutdown()
    rayreaper.sweep(seen)


def _probe(address: str) -> None:
    """Fail in one line, fast, when nothing accepts connections at host:port (Ray itself retries
    for minutes); `ray://` and `auto` addresses are left to Ray."""
    import socket

    host, sep, port = address.rpartition(":")
    if "://" in address or not sep or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=10).close()
    except OSError as exc:
        raise PretrainError(
            REFUSED.format(address=address, reason=f"nothing accepts connections there: {exc}")
        ) from None


def _connect_existing(ray: Any, address: str, init_kwargs: dict[str, Any]) -> None:
    _probe(address)
    _use_token_if_available()
    with _stderr_captured() as captured:
        try:
            ray.init(address=address, log_to_driver=False, **init_kwargs)
            _connected(ray)
            failure = None
        except Exception as exc:
            if not isinstance(exc, ConnectionError) and type(exc).__name__ != "AuthenticationError":
                raise
            failure = exc
    said = "".join(captured)
    if failure is None:
        sys.stderr.write(said)  # nothing Ray printed on a good connection is lost
        return
    if (
        "Unauthenticated" in said
        or "InvalidAuthToken" in said
        or "AuthenticationError" in repr(type(failure))
    ):
        raise PretrainError(NO_TOKEN.format(address=address)) from None
    reason = str(failure).splitlines()[0] if str(failure) else type(failure).__name__
    if failure.__cause__ is not None:  # Ray wraps what went wrong: say it
        reason += f": {str(failure.__cause__).splitlines()[0][:300]}"
    raise PretrainError(REFUSED.format(address=address, reason=reason)) from None


@contextmanager
def _stderr_captured() -> Iterator[list[str]]:
    """Send file descriptor 2 (Ray's C++ client logs there, once a second while it retries) to a
    temporary file for the duration; the yielded list gets its text at the end."""
    import tempfile

    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryDirectory() as tmp:
        path, text = Path(tmp) / "stderr", list[str]()
        with path.open("wb") as sink:
            os.dup2(sink.fileno(), 2)
            try:
                yield text
            finally:
                sys.stderr.flush()
                os.dup2(saved, 2)
                os.close(saved)
                text.append(path.read_text(errors="replace"))


@contextmanager
def patched(target: Any, **values: Any) -> Iterator[None]:
    """`target`'s attributes set to `values` in the block, restored after (an attribute `target`
    does not have, as in another Ray version, is left alone)."""
    saved = {name: getattr(target, name) for name in values if hasattr(target, name)}
    for name in saved:
        setattr(target, name, values[name])
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(target, name, value)


@contextmanager
def environ(**values: str) -> Iterator[None]:
    """Environment variables set for the block (and the processes started in it), then restored:
    a variable unset before is unset after."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _not_started(*args: Any, **kwargs: Any) -> None:
    """Stands in for a head process a local Ray does not start."""


def warm_ray_data() -> None:
    """Run a one-row Ray Data job: Ray Data starts its per-driver actors (stats, autoscaling
    bookkeeping: a fresh Python process each, 1-2 CPU-s of imports) on a driver's first dataset.
    Called right after a local start, that fixed cost is start-up, not CPU taken from the stage
    workers in a job's first seconds (2 workers on 2 cores)."""
    import ray.data

    context = ray.data.DataContext.get_current()
    saved, context.enable_progress_bars = context.enable_progress_bars, False
    try:
        ray.data.range(1, override_num_blocks=1).materialize()
    finally:
        context.enable_progress_bars = saved


def shutdown(started: bool) -> None:
    """Shut down a Ray this process started, then let the watchdog sweep what is left."""
    global _REAPER
    if not started:
        return
    import ray

    ray.shutdown()
    reaper, _REAPER = _REAPER, None
    if reaper is not None:
        reaper.stdin.close()  # type: ignore[union-attr]
        try:
            reaper.wait(30)
        except subprocess.TimeoutExpired:  # pragma: no cover - the sweep is bounded
            reaper.kill()


def _start_reaper(since: float) -> None:
    """A process that outlives this one, and kills the Ray processes it started once it is gone."""
    global _REAPER
    _REAPER = subprocess.Popen(
        [sys.executable, "-m", "pretrain.rayreaper", str(os.getpid()), repr(since - 1.0)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # a Ctrl-C to the driver's group must not kill it first
        close_fds=True,
    )
