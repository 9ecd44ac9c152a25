"""HAProxy's runtime API on a real HAProxy in front of small HTTP servers, and a process taken
in turn by the watch loop and a restart."""

from __future__ import annotations

import csv
import stat
import threading
import time

import httpx
import pytest

from server.stack import balancer, balancer_runtime
from server.stack.processes import free_port
from tests.support.balancer import Handler, Upstream
from tests.support.settings import settings


def checked(sock) -> bool:
    """Whether every checked server has passed its first health check (`show stat`)."""
    rows = list(csv.DictReader(balancer_runtime.send(sock, "show stat").lstrip("# ").splitlines()))
    checked = [row for row in rows if row["check_status"]]
    return len(checked) == 2 and all(row["check_status"] == "L7OK" for row in checked)


@pytest.fixture
def haproxy_with_socket(tmp_path):
    servers = [Upstream(("127.0.0.1", 0), Handler) for _ in range(2)]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    port, sock = free_port(), tmp_path / "haproxy.sock"
    front = balancer.Frontend("engine", "127.0.0.1", port, health_path="/health",
                              servers=tuple(balancer.Backend("127.0.0.1", s.server_port) for s in servers))
    config = balancer.BalancerConfig((front,), max_connections=1000, stats_socket=str(sock))
    process = balancer.managed_haproxy(config, tmp_path / "haproxy.cfg", tmp_path / "haproxy.log", tmp_path)
    process.start()
    deadline = time.monotonic() + 10
    while not (sock.exists() and checked(sock)) and time.monotonic() < deadline:
        time.sleep(0.1)  # the socket, then the first health checks
    yield f"http://127.0.0.1:{port}", sock, servers
    process.stop()
    for server in servers:
        server.shutdown()
        server.server_close()


def test_a_drained_server_gets_no_new_request_and_comes_back_when_ready(haproxy_with_socket):
    url, sock, servers = haproxy_with_socket
    assert stat.S_IMODE(sock.stat().st_mode) == 0o600

    def served() -> set[str]:
        return {httpx.get(url + "/x", timeout=5).text for _ in range(6)}
    both = {f"served by {s.server_port}" for s in servers}
    assert served() == both
    balancer_runtime.set_state(sock, "engine", 0, "drain")
    assert served() == {f"served by {servers[1].server_port}"}
    assert balancer_runtime.sessions(sock, "engine", 0) == 0
    balancer_runtime.set_state(sock, "engine", 0, "ready")
    assert served() == both


def test_the_watch_loop_and_a_restart_take_a_process_in_turn(tmp_path):
    """A process held by the restart is not the watch loop's to restart, and one that is down
    (the watch loop restarting it after a crash) is not the restart's to take."""
    from server.stack.processes import ManagedProcess
    from server.stack.supervisor import Stack
    stack = Stack(settings(log_file=tmp_path / "llm.log"), root=tmp_path, out=lambda _: None)
    proc = ManagedProcess("app", ["sleep", "30"], tmp_path / "app.log")
    assert not stack.holds.hold("app", proc)  # never started: down
    proc.start()
    try:
        assert stack.holds.hold("app", proc)
        assert not stack.holds.hold("app", proc)  # one holder at a time
        stack.holds.release("app")
        assert stack.holds.hold("app", proc)
    finally:
        proc.stop(grace_s=1)
