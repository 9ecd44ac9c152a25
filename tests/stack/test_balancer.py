"""The real HAProxy with the configuration the supervisor writes, in front of small HTTP
servers whose health answers can be made slow on demand (a real vLLM cannot be made to
answer /health late at will; on a saturated 2-core machine it does so by itself)."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import httpx
import pytest

from server.settings import Settings
from server.stack import balancer
from server.stack.engine_args import EngineCopy
from server.stack.processes import free_port
from server.stack.topology import ModelEngine, Topology, balancer_config
from tests.support.balancer import Handler, Upstream


@pytest.fixture
def upstreams():
    servers = [Upstream(("127.0.0.1", 0), Handler) for _ in range(2)]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    yield servers
    for server in servers:
        server.shutdown()
        server.server_close()


def start_haproxy(upstreams, tmp_path, **front_kind):
    port = free_port()
    front = balancer.Frontend(front_kind.pop("name", "engine"), "127.0.0.1", port, health_path="/health",
                              servers=tuple(balancer.Backend("127.0.0.1", s.server_port) for s in upstreams),
                              **front_kind)
    config = balancer.BalancerConfig((front,), max_connections=balancer.max_connections(balancer.open_files_limit()))
    process = balancer.managed_haproxy(config, tmp_path / "haproxy.cfg", tmp_path / "haproxy.log",
                                       tmp_path)
    process.start()
    url = f"http://127.0.0.1:{port}"
    wait_listening(url)
    return url, process


def wait_listening(url: str) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            httpx.get(url + "/", timeout=1)
            break
        except httpx.TransportError:
            time.sleep(0.1)


@pytest.fixture
def haproxy(upstreams, tmp_path):
    url, process = start_haproxy(upstreams, tmp_path, replay=True)
    yield url
    process.stop()


@pytest.fixture
def sticky_haproxy(upstreams, tmp_path):
    """The chat's frontend: browsers pinned to their worker by a cookie."""
    url, process = start_haproxy(upstreams, tmp_path, name="chat", sticky=True)
    yield url
    process.stop()


def logged(log: Path, *patterns: str, timeout_s: float = 60) -> str:
    """HAProxy's log once it has every pattern (it logs each change of a server's state)."""
    deadline = time.monotonic() + timeout_s
    while not all(re.search(p, text := log.read_text() if log.exists() else "") for p in patterns):
        assert time.monotonic() < deadline, f"not logged in {timeout_s} s: {patterns}\n{text}"
        time.sleep(0.1)
    return text


def served_by(url: str, n: int = 6) -> set[str]:
    return {httpx.get(url + "/", timeout=10).text for _ in range(n)}


def test_servers_whose_checks_time_out_still_get_the_requests(upstreams, haproxy, tmp_path):
    for server in upstreams:
        server.health_delay_s = 5          # past `timeout check 2s`: both are marked down
    logged(tmp_path / "haproxy.log", r"/engine0 is DOWN", r"/engine1 is DOWN")
    replies = [httpx.get(haproxy + "/", timeout=10) for _ in range(6)]
    assert {r.status_code for r in replies} == {200}, [r.text for r in replies]
    assert {r.text for r in replies} == {f"served by {s.server_port}" for s in upstreams}


def test_a_pinned_browser_keeps_its_worker_while_every_check_times_out(upstreams, sticky_haproxy, tmp_path):
    """A chat lives in one worker's memory: a saturated machine (every check late) must not
    scatter a browser's page, socket and uploads over the workers ("Session not found")."""
    browsers = [httpx.Client(base_url=sticky_haproxy, timeout=10) for _ in range(2)]
    first = [b.get("/").text for b in browsers]
    assert len(set(first)) == 2, first
    for server in upstreams:
        server.health_delay_s = 5
    logged(tmp_path / "haproxy.log", r"/chat0 is DOWN", r"/chat1 is DOWN")
    for browser, server in zip(browsers, first):
        assert {browser.get("/").text for _ in range(6)} == {server}
    newcomer = httpx.Client(base_url=sticky_haproxy, timeout=10)
    assert len({newcomer.get("/").text for _ in range(6)}) == 1


def test_a_dead_server_leaves_rotation_and_the_other_takes_everything(upstreams, haproxy, tmp_path):
    assert len(served_by(haproxy)) == 2
    dead = upstreams[0]
    dead.shutdown()
    dead.server_close()
    logged(tmp_path / "haproxy.log", r"/engine0 is DOWN")  # two failed checks 1 s apart
    assert served_by(haproxy) == {f"served by {upstreams[1].server_port}"}


def post_chats(url: str, n: int = 4) -> list[httpx.Response]:
    body = {"messages": [{"role": "user", "content": "x" * 4000}], "stream": True}
    return [httpx.post(url + "/v1/chat/completions", json=body, timeout=10) for _ in range(n)]


def test_a_request_its_server_drops_unanswered_is_answered_by_another(upstreams, haproxy):
    """A chat request (a POST with its body) on a copy that closes the connection before any
    byte of the answer (an engine dying under it): HAProxy sends it to the other copy."""
    upstreams[0].drop_posts = True
    replies = post_chats(haproxy)
    assert [r.status_code for r in replies] == [200] * 4, [r.text for r in replies]
    assert {r.text for r in replies} == {f"served by {upstreams[1].server_port}"}


def test_a_server_that_refuses_connections_is_down_at_once_not_after_its_checks(
        upstreams, haproxy, tmp_path):
    dead = upstreams[0]
    dead.shutdown()
    dead.server_close()
    replies = post_chats(haproxy)
    assert [r.status_code for r in replies] == [200] * 4, [r.text for r in replies]
    log = (tmp_path / "haproxy.log").read_text()
    # "Health analyze": taken down by what the requests met, before two checks could fail.
    assert re.search(r"engine0 is DOWN, reason: Health analyze.*L4 unsuccessful connection", log), log


def test_each_models_frontend_asks_for_the_key_and_reaches_only_its_own_server(upstreams, tmp_path):
    """ERNIE_MODELS exposed: one keyed frontend per model (server/stack/topology.py), each in
    front of its model's server alone."""
    key = "k" * 43
    ports = [free_port(), free_port()]
    models = tuple(ModelEngine(name, port, EngineCopy("127.0.0.1", server.server_port))
                   for name, port, server in zip(("a", "b"), ports, upstreams))
    topology = Topology("cpu", 1, (models[0].copy,), (), "127.0.0.1", 8080, "127.0.0.2", ports[0],
                        engine_exposed=True, models=models)
    config = balancer_config(topology, Settings(_env_file=None),
                             balancer.max_connections(balancer.open_files_limit()))
    process = balancer.managed_haproxy(config, tmp_path / "haproxy.cfg", tmp_path / "haproxy.log",
                                       tmp_path, key)
    process.start()
    try:
        for port, server in zip(ports, upstreams):
            url = f"http://127.0.0.2:{port}"
            wait_listening(url)
            assert httpx.get(url + "/health", timeout=10).status_code == 200    # for monitors
            for method, path in (("GET", "/v1/models"), ("GET", "/metrics"), ("POST", "/tokenize"),
                                 ("POST", "/v1/chat/completions")):
                assert httpx.request(method, url + path, json={}, timeout=10).status_code == 401
                mine = httpx.request(method, url + path, json={}, timeout=10,
                                     headers={"Authorization": f"Bearer {key}"})
                assert (mine.status_code, mine.text) == (200, f"served by {server.server_port}")
    finally:
        process.stop()
