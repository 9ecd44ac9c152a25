"""Attacks on the chat's HTTP and socket surface, made against the real app behind HAProxy.

Another site's page calling the API or opening a chat socket with the user's cookies
(app/origins.py).  The app runs with two workers behind HAProxy, as a GPU machine
runs it, and without an engine: none of this needs one.
"""

from __future__ import annotations

import uuid
from urllib.parse import urlsplit

import httpx
import pytest
import socketio

from server.stack.processes import free_port
from server.stack.supervisor import Stack
from tests.conftest import ROOT, engine_settings

PARTNER = "http://partner.example"
EVIL = "http://evil.example"
SOCKET_PATH = "/ws/socket.io"


@pytest.fixture(scope="module")
def balanced_app(tmp_path_factory):
    """Two Chainlit workers behind HAProxy; one partner origin allowed."""
    settings = engine_settings(tmp_path_factory.mktemp("web"), engine_url=f"http://127.0.0.1:{free_port()}",
                               app_workers=2, allowed_origins=PARTNER)
    stack = Stack(settings, root=ROOT)
    try:
        stack.plan()
        stack.start_balancer()
        stack.start_app()
        yield settings
    finally:
        stack.stop()


# --- other origins: CORS and the socket ------------------------------------------------

def test_another_sites_page_gets_no_cors_grant(balanced_app):
    url = f"{balanced_app.app_url}/project/translations?language=en-US"
    evil = httpx.get(url, headers={"Origin": EVIL, "Cookie": "access_token=x"})
    assert evil.status_code == 200
    # Without Allow-Origin the browser hides the answer (Starlette's CORS middleware sends
    # Allow-Credentials on every answer; alone it grants nothing).
    assert "access-control-allow-origin" not in evil.headers
    preflight = httpx.options(url, headers={"Origin": EVIL, "Access-Control-Request-Method": "POST"})
    assert preflight.headers.get("access-control-allow-origin") is None
    # The configured partner keeps its grant, with credentials.
    partner = httpx.get(url, headers={"Origin": PARTNER})
    assert partner.headers["access-control-allow-origin"] == PARTNER
    assert partner.headers["access-control-allow-credentials"] == "true"


def handshake(base_url: str, origin: str, host: str | None = None) -> httpx.Response:
    """engine.io's first request, as a browser's socket.io client sends it."""
    headers = {"Origin": origin} | ({"Host": host} if host else {})
    return httpx.get(f"{base_url}{SOCKET_PATH}/", params={"EIO": "4", "transport": "polling"},
                     headers=headers)


def test_the_socket_refuses_other_origins_and_takes_its_own(balanced_app):
    url = balanced_app.app_url
    port = urlsplit(url).port
    assert handshake(url, EVIL).status_code == 400
    # A look-alike host or another port of the same host is another origin too.
    assert handshake(url, f"http://127.0.0.1:{port + 1}").status_code == 400
    assert handshake(url, f"http://127.0.0.1.evil.example:{port}").status_code == 400
    # The chat's own origin, under each name it is reached by (HAProxy passes the Host on).
    assert handshake(url, f"http://127.0.0.1:{port}").status_code == 200
    assert handshake(url, f"http://localhost:{port}", host=f"localhost:{port}").status_code == 200
    assert handshake(url, PARTNER).status_code == 200


async def connect_socket(base_url: str, origin: str, session_id: str) -> socketio.AsyncClient:
    client = socketio.AsyncClient(reconnection=False)
    await client.connect(base_url, headers={"Origin": origin}, transports=["websocket"],
                         socketio_path=SOCKET_PATH, wait_timeout=15,
                         auth={"sessionId": session_id, "clientType": "webapp"})
    return client


async def test_a_socket_io_client_with_a_foreign_origin_is_refused(balanced_app):
    with pytest.raises(socketio.exceptions.ConnectionError):
        await connect_socket(balanced_app.app_url, EVIL, str(uuid.uuid4()))
    own = await connect_socket(balanced_app.app_url, balanced_app.app_url, str(uuid.uuid4()))
    assert own.connected
    await own.disconnect()
