"""HTTPS for the chat, with real clients: curl, httpx, a socket.io client and Chromium against
the real HAProxy in front of real app workers (no engine: none of this needs one).

The chat exposed without a certificate gets one of a local CA made here; a loopback chat
given the team's certificate serves that one.  Bad certificates stop `up` before anything
starts.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import hashlib
import re
import socket
import ssl
import stat
import subprocess
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from server.settings import load_settings
from server.stack import balancer, tls
from server.stack.balancer import STICKY_COOKIE
from server.stack.processes import free_port
from server.stack.supervisor import Stack
from server.stack.topology import balancer_config, plan_topology
from tests.conftest import ROOT, engine_settings
from tests.test_browser import ASSISTANT, CHROMIUM, CHROMIUM_ARGS, log_in, send

USER, PASSWORD = "alice", "tls-wonderland-17"
DAY = datetime.timedelta(days=1)
NOW = datetime.datetime(2026, 6, 1, tzinfo=datetime.timezone.utc)


def names(*dns: str, ips=("127.0.0.1",)) -> tls.HostNames:
    import ipaddress
    return tls.HostNames(tuple(dns), tuple(ipaddress.ip_address(a) for a in ips))


def team_certificate(folder: Path, expired: bool = False) -> tuple[Path, Path, Path]:
    """A certificate for 127.0.0.1 from a CA of the test's own: (CA, certificate, key) files."""
    now = tls.now_utc()
    ca, ca_key = tls.issue_ca(now - 500 * DAY)
    # Issued long ago, an expired one is past its end (397 days).
    cert, key = tls.issue_server(ca, ca_key, names("localhost"), now - (400 if expired else 0) * DAY)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "team-ca.pem").write_bytes(tls.cert_pem(ca))
    (folder / "team.crt").write_bytes(tls.cert_pem(cert))
    (folder / "team.key").write_bytes(tls.key_pem(key))
    return folder / "team-ca.pem", folder / "team.crt", folder / "team.key"


def spki_hash(pem: bytes) -> str:
    """Chromium's --ignore-certificate-errors-spki-list entry for a certificate."""
    spki = x509.load_pem_x509_certificate(pem).public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return base64.b64encode(hashlib.sha256(spki).digest()).decode()


def served_certificate(url: str) -> bytes:
    parts = urlsplit(url)
    return ssl.get_server_certificate((parts.hostname, parts.port)).encode()


# --- settings and the plan (pure) -----------------------------------------------------

@pytest.mark.usefixtures("clean_env")
def test_exposed_chat_is_https_and_loopback_stays_plain():
    exposed = load_settings(app_host="0.0.0.0", open_chat=True, app_port=8080)
    assert exposed.chat_tls and exposed.app_url == "https://127.0.0.1:8080"
    assert not load_settings().chat_tls and load_settings().app_url.startswith("http://")
    assert load_settings(tls_cert="/x.pem").chat_tls  # given: on loopback too
    assert not load_settings(app_host="0.0.0.0", open_chat=True, tls="off").chat_tls


@pytest.mark.usefixtures("clean_env")
def test_contradicting_tls_settings_are_refused():
    with pytest.raises(Exception, match="ERNIE_TLS_KEY is set without ERNIE_TLS_CERT"):
        load_settings(tls_key="/k.pem")
    with pytest.raises(Exception, match="ERNIE_TLS=off and ERNIE_TLS_CERT contradict"):
        load_settings(tls="off", tls_cert="/c.pem")


@pytest.mark.usefixtures("clean_env")
def test_one_https_worker_is_behind_haproxy_with_secure_cookies():
    s = load_settings(tls_cert="/x.pem", app_workers=1)
    topology = plan_topology(s, "cpu", 2, iter(range(9000, 9100)).__next__)
    assert topology.balanced_app and topology.worker_ports != (s.app_port,)
    text = balancer.render_haproxy(balancer_config(topology, s, tls_pem="/c/chat.pem"))
    assert f"bind 127.0.0.1:{s.app_port}\n" in text and "crt /c/chat.pem" in text
    assert "redirect scheme https code 308" in text
    assert "X-Forwarded-Proto https" in text and "Strict-Transport-Security" in text
    assert f"cookie {STICKY_COOKIE} insert indirect nocache httponly secure" in text
    plain = balancer.render_haproxy(balancer_config(topology, s))
    assert "ssl" not in plain and "Secure" not in plain and "secure" not in plain


# --- the team's certificate: checked before anything starts ----------------------------

def test_given_certificate_and_key_are_used_as_given(tmp_path):
    _, cert, key = team_certificate(tmp_path)
    got = tls.given_certificate(cert, key, tmp_path / "out")
    assert got.pem.read_bytes() == cert.read_bytes() + key.read_bytes()
    assert stat.S_IMODE(got.pem.stat().st_mode) == 0o600 and got.ca is None
    both = tmp_path / "both.pem"  # HAProxy's own crt form: certificate and key in one file
    both.write_bytes(cert.read_bytes() + key.read_bytes())
    assert tls.given_certificate(both, None, tmp_path / "out2").pem.read_bytes() == both.read_bytes()


def test_bad_certificates_get_clear_errors(tmp_path):
    _, cert, key = team_certificate(tmp_path / "a")
    _, _, other_key = team_certificate(tmp_path / "b")
    _, expired, expired_key = team_certificate(tmp_path / "c", expired=True)
    out = tmp_path / "out"
    cases = [
        ((cert, other_key), "does not belong to the certificate"),
        ((tmp_path / "missing.crt", key), r"ERNIE_TLS_CERT=.*missing.crt cannot be read: No such file"),
        ((cert, tmp_path), r"ERNIE_TLS_KEY=.* cannot be read: Is a directory"),
        ((expired, expired_key), r"the certificate expired on \d{4}-\d\d-\d\d"),
        ((key, None), "holds no PEM certificate"),
        ((cert, None), "holds no private key: set ERNIE_TLS_KEY"),
    ]
    for (c, k), message in cases:
        with pytest.raises(tls.TlsError, match=message):
            tls.given_certificate(c, k, out)
    encrypted = tmp_path / "encrypted.key"
    encrypted.write_bytes(serialization.load_pem_private_key(key.read_bytes(), None).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"secret")))
    with pytest.raises(tls.TlsError, match="is encrypted; HAProxy needs it unencrypted"):
        tls.given_certificate(cert, encrypted, out)


@pytest.mark.usefixtures("clean_env")
def test_a_bad_certificate_stops_up_before_anything_starts(tmp_path):
    _, cert, _ = team_certificate(tmp_path / "a")
    _, _, other_key = team_certificate(tmp_path / "b")
    settings = load_settings(tls_cert=cert, tls_key=other_key, engine_url="http://127.0.0.1:9",
                             log_file=tmp_path / "llm.log")
    stack = Stack(settings, root=tmp_path, out=lambda line: None)
    with pytest.raises(tls.TlsError, match="does not belong"):
        stack.start()
    assert stack.apps is None and stack.balancer is None


# --- the certificate made here -----------------------------------------------------------

def test_made_certificate_is_kept_renewed_and_reissued_for_new_names(tmp_path):
    def made(when, *ips: str) -> tuple[bytes, bytes, tls.ChatCertificate]:
        cert = tls.self_signed(tmp_path, names("host", ips=ips or ("127.0.0.1",)), when)
        return cert.ca.read_bytes(), cert.pem.read_bytes(), cert

    ca, pem, first = made(NOW)
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in tmp_path.iterdir())
    assert stat.S_IMODE(tmp_path.stat().st_mode) == 0o700
    assert made(NOW + DAY)[:2] == (ca, pem)  # kept
    # A new address of the machine: a new server certificate, of the same CA (still trusted).
    moved_ca, moved, _ = made(NOW + DAY, "127.0.0.1", "10.1.2.3")
    assert moved != pem and moved_ca == ca
    # Near its end it is renewed, under the same CA.
    renewed_ca, _, renewed = made(first.not_after - DAY)
    assert renewed.not_after > first.not_after and renewed_ca == ca
    # A CA near its end is replaced, and so is everything it signed.
    later_ca, _, later = made(NOW + tls.CA_DAYS * DAY)
    assert later_ca != ca and later.not_after > NOW + tls.CA_DAYS * DAY


def test_made_certificate_names_the_bind_host_and_the_machine():
    found = tls.host_names("0.0.0.0")
    assert "localhost" in found.dns and str(found.ips[0]) == "127.0.0.1"
    assert "0.0.0.0" not in map(str, found.ips)
    assert "10.9.8.7" in map(str, tls.host_names("10.9.8.7").ips)
    assert "chat.example.org" in tls.host_names("chat.example.org").dns


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


def launch_chromium(pw, trusted_pem: bytes = b""):
    args = CHROMIUM_ARGS + ([f"--ignore-certificate-errors-spki-list={spki_hash(trusted_pem)}"]
                            if trusted_pem else [])
    return pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=args)


@pytest.mark.browser
def test_chromium_chats_over_https_and_wss(tls_app):
    """Chromium trusts exactly the chat's certificate (its key's hash), no blanket ignore."""
    from playwright.sync_api import Error, sync_playwright
    settings, certificate = tls_app
    with sync_playwright() as pw:
        stranger = launch_chromium(pw)
        try:
            with pytest.raises(Error, match="ERR_CERT_AUTHORITY_INVALID"):
                stranger.new_page(ignore_https_errors=False).goto(settings.app_url)
        finally:
            stranger.close()
        browser = launch_chromium(pw, served_certificate(settings.app_url))
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


@pytest.mark.usefixtures("clean_env")
def test_start_says_where_the_ca_is_and_how_to_replace_it(tmp_path):
    settings = load_settings(app_host="0.0.0.0", open_chat=True)
    made = tls.prepare(settings, tmp_path)
    text = tls.notice(settings, made)
    assert str(made.ca) in text and tls.fingerprint(made.ca) in text
    assert "ERNIE_TLS_CERT=" in text and "ERNIE_TLS_KEY=" in text and "https://127.0.0.1:8080" in text
    plain = tls.notice(load_settings(app_host="0.0.0.0", open_chat=True, tls="off"), None)
    assert "UNENCRYPTED" in plain
    assert tls.notice(load_settings(), None) is None  # loopback, plain: nothing to say
