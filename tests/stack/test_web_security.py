"""Attacks on the chat's HTTP and socket surface, made against the real app behind HAProxy.

Another site's page calling the API or opening a chat socket with the user's cookies
(app/web/origins.py), an upload larger than the limit or of unbounded length
(app/web/upload_limit.py), and an uploaded HTML page served back into our origin
(app/web/served_files.py).  The app runs with two workers behind HAProxy, as a GPU
machine runs it, and without an engine: none of this needs one.
"""

from __future__ import annotations

import json
import socket
import uuid
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
import socketio

from server.stack.balancer import STICKY_COOKIE
from server.stack.processes import free_port
from server.stack.supervisor import Stack
from server.worker_drain import PATH, TOKEN_ENV
from server.paths import ROOT
from tests.support.settings import engine_settings

PARTNER = "http://partner.example"
EVIL = "http://evil.example"
SOCKET_PATH = "/ws/socket.io"
MB = 2**20
LIMIT_MB = 10  # .chainlit/config.toml, [features.spontaneous_file_upload] max_size_mb
HTML_PAGE = b"<html><body><script>fetch('/stolen?' + document.cookie)</script>hello</body></html>"


@pytest.fixture(scope="module")
def web_stack(tmp_path_factory):
    """Two Chainlit workers behind HAProxy; one partner origin allowed."""
    settings = engine_settings(tmp_path_factory.mktemp("web"), engine_url=f"http://127.0.0.1:{free_port()}",
                               app_workers=2, allowed_origins=PARTNER)
    stack = Stack(settings, root=ROOT)
    try:
        stack.plan()
        stack.start_balancer()
        stack.start_app()
        yield stack
    finally:
        stack.stop()


@pytest.fixture(scope="module")
def balanced_app(web_stack):
    return web_stack.settings


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


# --- uploads: their size ------------------------------------------------------------

def raw_upload(base_url: str, head: bytes, chunks, read_timeout_s: float = 20) -> bytes:
    """Send an upload's request line and headers, then ``chunks`` (stopping early if the server
    answers or closes); return what the server answered (b"" if nothing in time)."""
    parts = urlsplit(base_url)
    with socket.create_connection((parts.hostname, parts.port), timeout=read_timeout_s) as sock:
        sock.sendall(head)
        try:
            for chunk in chunks:
                sock.sendall(chunk)
        except OSError:  # the server answered and closed while the body was still coming
            pass
        try:
            return sock.recv(65536)
        except (TimeoutError, ConnectionResetError):
            return b""


PART_HEAD = (b'--x\r\nContent-Disposition: form-data; name="file"; filename="big.csv"\r\n'
             b"Content-Type: text/csv\r\n\r\n")


def upload_head(base_url: str, length_header: bytes, lang: str = "en-US") -> bytes:
    host = urlsplit(base_url).netloc.encode()
    return (b"POST /project/file?session_id=none HTTP/1.1\r\nHost: " + host + b"\r\n"
            b"Content-Type: multipart/form-data; boundary=x\r\nAccept-Language: " + lang.encode()
            + b"\r\n" + length_header + b"\r\n\r\n")


def test_an_upload_declared_too_big_is_refused_before_its_body(balanced_app):
    """60 MB announced and not one byte sent: the answer must come without waiting for it."""
    answer = raw_upload(balanced_app.app_url,
                        upload_head(balanced_app.app_url, b"Content-Length: %d" % (60 * MB)), [])
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert "larger than 10 MB" in detail(answer)
    zh = raw_upload(balanced_app.app_url,
                    upload_head(balanced_app.app_url, b"Content-Length: %d" % (60 * MB), "zh-CN"), [])
    assert "超过 10 MB" in detail(zh)


def detail(answer: bytes) -> str:
    return json.loads(answer.partition(b"\r\n\r\n")[2])["detail"]


def test_a_chunked_upload_is_stopped_as_it_passes_the_limit(balanced_app):
    """No length announced: 12 MB sent in chunks, the body never ended. The server must answer
    413 from what it counted, not wait for (and buffer) the rest."""
    def chunks():
        for number in range(LIMIT_MB + 2):
            piece = PART_HEAD * (number == 0) + b"a" * MB
            yield b"%x\r\n" % len(piece) + piece + b"\r\n"
    answer = raw_upload(balanced_app.app_url,
                        upload_head(balanced_app.app_url, b"Transfer-Encoding: chunked"), chunks())
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert "larger than 10 MB" in detail(answer)


@asynccontextmanager
async def live_session(base_url: str):
    """A chat session as the browser opens one: its socket, and an HTTP client on the same
    worker (HAProxy's stickiness cookie, which the browser gets with the page)."""
    async with httpx.AsyncClient(base_url=base_url) as http:
        await http.get("/")
        session_id = str(uuid.uuid4())
        cookie = "; ".join(f"{name}={value}" for name, value in http.cookies.items())
        client = socketio.AsyncClient(reconnection=False)
        await client.connect(base_url, headers={"Origin": base_url, "Cookie": cookie},
                             transports=["websocket"], socketio_path=SOCKET_PATH, wait_timeout=15,
                             auth={"sessionId": session_id, "clientType": "webapp"})
        try:
            yield session_id, http
        finally:
            await client.disconnect()


async def upload(http: httpx.AsyncClient, session_id: str, name: str, mime: str, data: bytes) -> httpx.Response:
    return await http.post("/project/file", params={"session_id": session_id}, files={"file": (name, data, mime)})


async def test_an_upload_within_the_limit_still_works(balanced_app):
    async with live_session(balanced_app.app_url) as (session_id, http):
        response = await upload(http, session_id, "notes.txt", "text/plain", b"x" * (LIMIT_MB * MB - 10))
    assert response.status_code == 200, response.text


# --- uploads: served back -----------------------------------------------------------

async def upload_and_fetch(base_url: str, name: str, mime: str, data: bytes) -> httpx.Response:
    async with live_session(base_url) as (session_id, http):
        uploaded = await upload(http, session_id, name, mime, data)
        assert uploaded.status_code == 200, uploaded.text
        return await http.get(f"/project/file/{uploaded.json()['id']}", params={"session_id": session_id})


@pytest.mark.parametrize("name, mime", [("page.html", "text/html"), ("logo.svg", "image/svg+xml"),
                                        ("feed.xml", "application/xml"), ("app.js", "text/javascript")])
async def test_an_uploaded_page_is_served_as_an_inert_download(balanced_app, name, mime):
    served = await upload_and_fetch(balanced_app.app_url, name, mime, HTML_PAGE)
    assert served.status_code == 200 and served.content == HTML_PAGE
    assert served.headers["content-type"] == "application/octet-stream"
    assert served.headers["content-disposition"] == "attachment"
    assert served.headers["x-content-type-options"] == "nosniff"
    assert served.headers["content-security-policy"] == "sandbox"


async def test_an_uploaded_picture_still_shows_inline(balanced_app):
    from tests.support.sample_files import png
    served = await upload_and_fetch(balanced_app.app_url, "photo.png", "image/png", png())
    assert served.headers["content-type"] == "image/png"
    assert served.headers["content-disposition"] == "inline"
    assert served.headers["x-content-type-options"] == "nosniff"


# --- draining a worker (app/kept/drain.py): the supervisor's alone ----------------------------------

def drain_tokens(stack: Stack) -> list[str]:
    """Each of this stack's workers' drain token, from its environment (as root, the test can
    read it; other tests' workers run beside these in the same suite)."""
    tokens = []
    for worker in stack.apps.workers:
        env = Path(f"/proc/{worker.proc.pid}/environ").read_bytes().split(b"\0")
        tokens += [v.split(b"=", 1)[1].decode() for v in env if v.startswith(TOKEN_ENV.encode() + b"=")]
    return tokens


def test_no_one_but_the_supervisor_can_drain_a_worker(web_stack):
    """A client that drained workers would close every chat's socket: each attempt through
    HAProxy, to each worker, without the token, with a wrong one or the other worker's, is
    refused, and no worker starts draining."""
    tokens = drain_tokens(web_stack)
    assert len(tokens) == 2 and tokens[0] != tokens[1]
    url = web_stack.settings.app_url + PATH
    for worker in ("w0", "w1"):
        pin = {"Cookie": f"{STICKY_COOKIE}={worker}"}
        for auth in ({}, {"Authorization": "Bearer"}, {"Authorization": "Bearer x" * 3},
                     {"Authorization": tokens[0] + tokens[1]}, {"Authorization": tokens[0]}):
            for method in ("POST", "GET"):
                refused = httpx.request(method, url, headers=pin | auth)
                assert refused.status_code == 403 and refused.json() == {}, (worker, auth, method)
        answers = [httpx.get(url, headers=pin | {"Authorization": f"Bearer {t}"}) for t in tokens]
        # Its own token reads it (not draining); the other worker's is refused, to drain too.
        assert sorted(a.status_code for a in answers) == [200, 403], (worker, answers)
        own = next(a for a in answers if a.status_code == 200)
        assert own.json()["draining"] is False
        other = tokens[[a.status_code for a in answers].index(403)]
        assert httpx.post(url, headers=pin | {"Authorization": f"Bearer {other}"}).status_code == 403
