"""`python -m trainer.local_torchrun TORCHRUN_ARGS...`: torchrun for a single-node run that listens
on 127.0.0.1 only (and `bind_stores_to_loopback()` / `loopback_interface()` for ranks started
without torchrun, in the caller's own process included).

torch's TCPStore server (the rendezvous store and the store the ranks meet at) binds the wildcard
address whatever host it is given, so `torchrun --standalone` accepts connections from any
machine that can reach this one. Here every TCPStore server is created on a socket we bound to
127.0.0.1 (TCPStore's `master_listen_fd`), and the agent advertises 127.0.0.1 to its ranks.
gloo's own sockets (one listener per device) bind the address the host name resolves to unless
GLOO_SOCKET_IFNAME names an interface: local ranks get the loopback interface's name there.
Multi-node launches use plain torchrun with the rendezvous endpoint the user gives.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import socket
import sys
from typing import Any

import psutil
import torch.distributed as dist

LOOPBACK = "127.0.0.1"
_listening: list[socket.socket] = []  # kept open for the life of the process
_TCPStore = dist.TCPStore


_LOOPBACK_NAMES = {"127.0.0.1", "localhost", "::1"}


class LoopbackTCPStore(_TCPStore):  # type: ignore[misc, valid-type]
    """A TCPStore whose server, when asked to serve on a loopback host, listens on 127.0.0.1 only
    (any other host behaves exactly as torch's TCPStore)."""

    def __init__(self, host_name: str, port: int, *args: Any, **kwargs: Any) -> None:
        is_master = kwargs.get("is_master", args[1] if len(args) > 1 else False)
        loopback = host_name in _LOOPBACK_NAMES
        if loopback and is_master and kwargs.get("master_listen_fd") is None and len(args) < 6:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((LOOPBACK, port))
            sock.listen(1024)
            _listening.append(sock)
            kwargs["master_listen_fd"] = sock.fileno()
            port = sock.getsockname()[1]
        super().__init__(LOOPBACK if loopback else host_name, port, *args, **kwargs)


def bind_stores_to_loopback() -> None:
    """Install LoopbackTCPStore wherever torch creates store servers: torchrun's rendezvous and
    agent stores, and `init_process_group`'s env:// store (MASTER_ADDR=127.0.0.1)."""
    from torch.distributed.elastic.rendezvous import c10d_rendezvous_backend

    # Not `from torch.distributed import rendezvous`: that name is the rendezvous() FUNCTION
    # (torch.distributed re-exports it), and the env:// store then kept listening on "::".
    rendezvous_module = importlib.import_module("torch.distributed.rendezvous")
    dist.TCPStore = LoopbackTCPStore
    rendezvous_module.TCPStore = LoopbackTCPStore  # type: ignore[attr-defined]
    c10d_rendezvous_backend.TCPStore = LoopbackTCPStore


def loopback_interface() -> str:
    """The name of the interface holding 127.0.0.1 ("lo" on Linux), for GLOO_SOCKET_IFNAME."""
    for name, addresses in psutil.net_if_addrs().items():
        if any(address.address == LOOPBACK for address in addresses):
            return name
    return "lo"


def loopback_gloo() -> contextlib.AbstractContextManager[None]:
    """Gloo groups created inside listen on loopback (GLOO_SOCKET_IFNAME, unless the caller set
    it); the caller's environment is left as it was found."""
    from pretrain.rayinit import environ

    return environ(GLOO_SOCKET_IFNAME=os.environ.get("GLOO_SOCKET_IFNAME") or loopback_interface())


def main(argv: list[str] | None = None) -> None:
    bind_stores_to_loopback()
    from torch.distributed.run import main as torchrun_main

    torchrun_main(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
