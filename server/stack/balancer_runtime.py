"""HAProxy's runtime API: take one server out of rotation and back, and count its streams.

`ernie-chat restart` drains one engine copy or app worker at a time through the
admin socket that ``balancer.render_haproxy`` declares (``stats socket``, mode
600, in the run folder).  The commands are rendered by pure functions and sent
by one small function over the UNIX socket, one command per connection, as
HAProxy's non-interactive mode expects.

A server and its unchecked twin of last resort (``balancer.last_resort``) change
state together, so that a drained server gets no traffic by that back door either.
"""

from __future__ import annotations

import csv
import socket
from pathlib import Path

from server.errors import ErnieChatError

# The states `set server ... state` takes: drain keeps the connections a server has and
# (for a sticky backend) its pinned clients; maint sends even pinned clients elsewhere.
STATES = ("ready", "drain", "maint")
# sockaddr_un's sun_path is 108 bytes on Linux (104 on macOS), its final NUL included.
MAX_SOCKET_PATH = 104


class RuntimeApiError(ErnieChatError):
    """HAProxy's admin socket could not be reached or refused a command."""


def backend_name(front: str) -> str:
    """As ``render_haproxy`` names a frontend's backend."""
    return f"{front}_servers"


def server_names(front: str, index: int) -> tuple[str, str]:
    """The server and its unchecked twin of last resort, as ``render_haproxy`` names them."""
    return f"{front}{index}", f"{front}{index}-last-resort"


def set_state_commands(front: str, index: int, state: str) -> list[str]:
    if state not in STATES:
        raise ValueError(f"unknown server state {state!r}; one of {', '.join(STATES)}")
    backend = backend_name(front)
    return [f"set server {backend}/{name} state {state}" for name in server_names(front, index)]


def rows_of(stat_csv: str, front: str, index: int) -> dict[str, dict]:
    """`show stat`'s CSV rows of a server and of its twin of last resort, by server name."""
    text = stat_csv.lstrip("# ")
    wanted = {(backend_name(front), name) for name in server_names(front, index)}
    rows = {row["svname"]: row for row in csv.DictReader(text.splitlines())
            if (row.get("pxname"), row.get("svname")) in wanted}
    if not rows:
        raise RuntimeApiError(f"HAProxy's statistics have no server {front}{index} in "
                              f"{backend_name(front)}")
    return rows


def sessions_of(stat_csv: str, front: str, index: int) -> int:
    """Streams a server carries now (``scur``), summed over the server and its twin."""
    return sum(int(row["scur"] or 0) for row in rows_of(stat_csv, front, index).values())


def status_of(stat_csv: str, front: str, index: int) -> str:
    """The checked server's ``status`` as its checks and the admin state make it: UP, DOWN,
    DRAIN, MAINT, or a move between two ("DOWN 1/2")."""
    row = rows_of(stat_csv, front, index).get(server_names(front, index)[0])
    return row["status"] if row else "absent"


def send(socket_path: Path, command: str, timeout_s: float = 5.0) -> str:
    """One command over the admin socket; its answer. An answer that is not empty for a
    `set` command is HAProxy's complaint."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout_s)
            sock.connect(str(socket_path))
            sock.sendall(command.encode() + b"\n")
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
    except OSError as exc:
        raise RuntimeApiError(f"HAProxy's admin socket {socket_path} does not answer ({exc}); "
                              "is `ernie-chat up` running with HAProxy?") from None
    return b"".join(chunks).decode(errors="replace")


def set_state(socket_path: Path, front: str, index: int, state: str) -> None:
    for command in set_state_commands(front, index, state):
        answer = send(socket_path, command).strip()
        if answer:
            raise RuntimeApiError(f"HAProxy refused `{command}`: {answer}")


def sessions(socket_path: Path, front: str, index: int) -> int:
    return sessions_of(send(socket_path, "show stat"), front, index)


def status(socket_path: Path, front: str, index: int) -> str:
    return status_of(send(socket_path, "show stat"), front, index)
