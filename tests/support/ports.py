"""Free ports for servers that take several in a row."""

from __future__ import annotations

import socket

from server.stack.processes import free_port, port_free


def free_ports(count: int) -> int:
    """A port whose next ``count - 1`` are free too: the next models listen there."""
    while not all(port_free("127.0.0.1", (port := free_port()) + i) for i in range(1, count)):
        pass
    return port


def free_port_pair() -> int:
    """A port P with P + 1 free too: ERNIE_MODELS' second engine listens on the next port."""
    while True:
        port = free_port()
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
