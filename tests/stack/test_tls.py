"""HTTPS for the chat, with real clients: curl, httpx, a socket.io client and Chromium against
the real HAProxy in front of real app workers (no engine: none of this needs one).

The chat exposed without a certificate gets one of a local CA made here; a loopback chat
given the team's certificate serves that one.  Bad certificates stop `up` before anything
starts.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import re
import socket
import ssl
import subprocess
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from server.stack import balancer, tls
from server.stack.balancer import STICKY_COOKIE
from server.stack.processes import free_port
from server.stack.supervisor import Stack
from server.paths import ROOT
from tests.support.settings import engine_settings
from tests.support.browser import ASSISTANT, CHROMIUM, CHROMIUM_ARGS, log_in, send
from tests.support.certificates import names, team_certificate

USER, PASSWORD = "alice", "tls-wonderland-17"


def spki_hash(pem: bytes) -> str:
    """Chromium's --ignore-certificate-errors-spki-list entry for a certificate."""
    spki = x509.load_pem_x509_certificate(pem).public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return base64.b64encode(hashlib.sha256(spki).digest()).decode()


def served_certificate(url: str) -> bytes:
    parts = urlsplit(url)
    return ssl.get_server_certificate((parts.hostname, parts.port)).encode()


# --- real clients against the real HAProxy and app ---------------------------------------

def start_front(settings, certificate: tls.ChatCertificate):
    stack = Stack(settings, root=ROOT)
    stack.certificate = certificate
    stack.plan()
    stack.start_balancer()
    stack.start_app()
    return stack


@pytest.fixture(scope="module")
def tls_app(tmp_path_factory):
    """The chat exposed (0.0.0.0) with login, one worker, its certificate made here; no engine."""
    tmp = tmp_path_factory.mktemp("tls")
    settings = engine_settings(tmp, engine_url=f"http://127.0.0.1:{free_port()}", app_host="0.0.0.0",
                               app_workers=1, users=f"{USER}:{PASSWORD}")
    certificate = tls.prepare(settings, tmp / "tls")
    stack = start_front(settings, certificate)
    try:
        yield settings, certificate
    finally:
        stack.stop()


def trusting(ca: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(ca))


def curl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code} %{redirect_url}",
                           *args], capture_output=True, text=True, timeout=30)


def test_curl_trusts_the_chat_only_with_its_ca(tls_app):
    settings, certificate = tls_app
    assert settings.app_url.startswith("https://")
    assert curl("--cacert", str(certificate.ca), settings.app_url + "/").stdout.startswith("200")
    refused = curl(settings.app_url + "/")
    assert refused.returncode == 60, refused  # curl: the peer's certificate cannot be verified
    # The names it was made for: localhost, too.
    local = settings.app_url.replace("127.0.0.1", "localhost")
    assert curl("--cacert", str(certificate.ca), local + "/").stdout.startswith("200")


def test_plain_http_on_the_chat_port_redirects_to_https(tls_app):
    settings, _ = tls_app
    plain = settings.app_url.replace("https://", "http://")
    answer = httpx.get(plain + "/login?next=1", follow_redirects=False)
    assert answer.status_code == 308
    assert answer.headers["location"] == settings.app_url + "/login?next=1"
    assert STICKY_COOKIE not in answer.headers.get("set-cookie", "")  # nothing reaches a worker


def test_cookies_are_secure_and_hsts_is_sent(tls_app):
    settings, certificate = tls_app
    with httpx.Client(base_url=settings.app_url, verify=trusting(certificate.ca), timeout=30) as http:
        page = http.get("/")
        login = http.post("/login", data={"username": USER, "password": PASSWORD})
    assert login.status_code == 200, login.text
    assert page.headers["strict-transport-security"] == f"max-age={balancer.HSTS_MAX_AGE_S}"
    port = urlsplit(settings.app_url).port
    local = httpx.get(settings.app_url + "/", headers={"Host": f"localhost:{port}"},
                      verify=trusting(certificate.ca))
    assert local.status_code == 200 and "strict-transport-security" not in local.headers
    cookies = page.headers.get_list("set-cookie") + login.headers.get_list("set-cookie")
    by_name = {c.split("=", 1)[0]: c for c in cookies}
    assert {"access_token", STICKY_COOKIE} <= by_name.keys(), cookies
    for cookie in cookies:
        assert len(re.findall(r";\s*secure", cookie, re.I)) == 1, cookie


async def test_the_chat_socket_works_over_wss(tls_app):
    settings, certificate = tls_app
    import aiohttp
    import socketio
    http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=trusting(certificate.ca)))
    client = socketio.AsyncClient(reconnection=False, http_session=http)
    try:
        login = httpx.post(f"{settings.app_url}/login", verify=trusting(certificate.ca),
                           data={"username": USER, "password": PASSWORD})
        token = login.cookies["access_token"]
        await client.connect(settings.app_url, headers={"Origin": settings.app_url,
                                                        "Cookie": f"access_token={token}"},
                             transports=["websocket"], socketio_path="/ws/socket.io", wait_timeout=15,
                             auth={"sessionId": str(uuid.uuid4()), "clientType": "webapp"})
        assert client.connected and client.transport() == "websocket"
        # Quiet longer than the TLS frontend's client timeout (pings come every 25 s): an
        # open socket has the tunnel's hour, not the handshake's 10 s.
        await asyncio.sleep(12)
        assert client.connected
    finally:
        await client.disconnect()
        await http.close()


def test_a_client_stalling_in_its_tls_handshake_is_cut(tls_app):
    """A TLS slowloris: a ClientHello, then nothing; HAProxy must not wait its hour for it."""
    settings, _ = tls_app
    hello_out = ssl.MemoryBIO()
    client = ssl.create_default_context().wrap_bio(ssl.MemoryBIO(), hello_out, server_hostname="x")
    with pytest.raises(ssl.SSLWantReadError):
        client.do_handshake()
    parts = urlsplit(settings.app_url)
    with socket.create_connection((parts.hostname, parts.port), timeout=1) as sock:
        sock.sendall(hello_out.read())
        started = time.monotonic()
        while time.monotonic() - started < 30:
            try:
                if not sock.recv(65536):
                    break
            except socket.timeout:
                continue
        assert time.monotonic() - started <= 13


class ForgedSite:
    """A real HTTPS server, as a man in the middle who read the chat's CA key would run one:
    it serves a certificate issued with that key for ``served``."""

    def __init__(self, certificate: tls.ChatCertificate, served: tls.HostNames, folder: Path):
        ca = x509.load_pem_x509_certificate(certificate.ca.read_bytes())
        ca_key = serialization.load_pem_private_key((certificate.ca.parent / "ca-key.pem").read_bytes(), None)
        cert, key = tls.issue_server(ca, ca_key, served, tls.now_utc())
        pem = folder / f"forged-{served.dns[0]}.pem"
        pem.write_bytes(tls.cert_pem(cert) + tls.key_pem(key))
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(pem)

        class Hello(BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Hello)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_the_cas_key_cannot_vouch_for_another_site(tls_app, tmp_path):
    """Whoever reads .cache/tls/ca-key.pem can issue certificates, but clients that trust the
    chat's CA accept them only for this machine's names: curl, trusting that CA alone, refuses
    a site that serves one for intranet.example.com, and takes one made for localhost."""
    _, certificate = tls_app
    for name, expected in (("intranet.example.com", "60"), ("localhost", "200")):
        site = ForgedSite(certificate, names(name), tmp_path)
        try:
            done = curl("--cacert", str(certificate.ca), "--resolve", f"{name}:{site.port}:127.0.0.1",
                        f"https://{name}:{site.port}/")
        finally:
            site.close()
        assert (str(done.returncode) if done.returncode else done.stdout[:3]) == expected, (name, done)


def launch_chromium(pw, trusted_pem: bytes = b""):
    args = CHROMIUM_ARGS + ([f"--ignore-certificate-errors-spki-list={spki_hash(trusted_pem)}"]
                            if trusted_pem else [])
    return pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=args)


def test_chromium_chats_over_https_and_wss(tls_app, playwright, new_page):
    """Chromium trusts exactly the chat's certificate (its key's hash), no blanket ignore.

    The session's Chromium is the stranger. The trusting one is a browser of its own: which
    certificate Chromium trusts is a launch flag, and a context's only choice would be
    ``ignore_https_errors``, the blanket ignore this test rules out."""
    from playwright.sync_api import Error
    settings, certificate = tls_app
    with pytest.raises(Error, match="ERR_CERT_AUTHORITY_INVALID"):
        new_page(ignore_https_errors=False).goto(settings.app_url)
    browser = launch_chromium(playwright, served_certificate(settings.app_url))
    try:
        page = browser.new_page(ignore_https_errors=False, locale="en-US")
        sockets = []
        page.on("websocket", lambda ws: sockets.append(ws.url))
        page.goto(settings.app_url.replace("https://", "http://"))  # the redirect leads on
        assert page.url.startswith("https://")
        log_in(page, USER, PASSWORD)
        send(page, "hello over TLS?")
        page.get_by_text(re.compile("is not reachable")).nth(1).wait_for(timeout=30_000)
        assert page.locator(ASSISTANT).count() >= 2
        assert sockets and all(url.startswith("wss://") for url in sockets), sockets
    finally:
        browser.close()


@pytest.fixture(scope="module")
def team_tls_app(tmp_path_factory):
    """A loopback chat given the team's certificate and key: HTTPS there too."""
    tmp = tmp_path_factory.mktemp("team")
    ca, cert, key = team_certificate(tmp)
    settings = engine_settings(tmp, engine_url=f"http://127.0.0.1:{free_port()}", app_workers=1,
                               tls_cert=cert, tls_key=key)
    stack = start_front(settings, tls.prepare(settings, tmp / "tls"))
    try:
        yield settings, ca, cert
    finally:
        stack.stop()


def test_the_given_certificate_is_served(team_tls_app):
    settings, ca, cert = team_tls_app
    assert settings.app_url.startswith("https://127.0.0.1:")
    served = x509.load_pem_x509_certificate(served_certificate(settings.app_url))
    assert served == x509.load_pem_x509_certificate(cert.read_bytes())
    assert curl("--cacert", str(ca), settings.app_url + "/").stdout.startswith("200")
