"""HAProxy in front of several app workers and several engine copies.

One process of one mature balancer serves both tiers, because both need the same
things: active health checks (a dead worker or engine copy is out of rotation
within seconds, and back when it answers again), ``leastconn`` (requests here
are long streams, so the count of open ones is the load), websocket upgrades,
and hour-long idle timeouts for streams that pause.  HAProxy is a Debian package
and runs in the foreground as one more child of the supervisor.

Chat sessions live in the memory of the worker that opened them (Chainlit's
``cl.user_session``), and not only the websocket needs its worker: action
buttons, file uploads and reconnects are HTTP requests that look the session up
there.  So the chat frontend pins a browser to its worker with a cookie that
HAProxy inserts into the first answer; when that worker is down, ``redispatch``
sends the browser to a live one, where the chat says it was moved (app/web/boot_cookie.py).

The engine frontend has no stickiness: any copy can serve any request, since
the chat sends the whole history every time.

A frontend on an address other machines reach is guarded, since HAProxy is the
only thing between them and the processes behind it.  A client has 10 s to send
a request's headers, so one that sends them a byte at a time (slowloris) holds
a connection no longer; and one address may hold only so many connections at
once (ERNIE_CONNECTIONS_PER_CLIENT), counted in a stick table.  An exposed
engine frontend also asks for the API key on every path: vLLM's own --api-key
guards only /v1, which leaves /tokenize, /invocations, /pooling and /metrics
open.  Only ``GET /health`` answers without it, for monitors: it says no more
than whether the engine is up.  The key reaches HAProxy in its environment
(``KEY_ENV``), which its config names, so it is in neither a file nor ``ps``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from server.errors import ErnieChatError
from server.paths import ROOT
from server.stack.processes import ManagedProcess

# Streams pause while a model thinks or a user reads; an idle stream is not a dead one.
STREAM_TIMEOUT = "1h"
STICKY_COOKIE = "ERNIE_WORKER"
# Down after two failed checks 1 s apart: a dead worker or copy leaves rotation in ~2 s.
CHECK = "check inter 1s fall 2 rise 1"
# A server that fails a request outright (refused, closed before answering, 5xx) is down at
# once, not after two checks; one good check (1 s later) brings a wrongly downed one back.
OBSERVE = " observe layer7 error-limit 1 on-error mark-down"
# A browser or client sends a request's headers in well under a second; a slowloris never does.
HEADER_TIMEOUT = "10s"
KEY_ENV = "ERNIE_ENGINE_KEY"
# A year, the usual; no includeSubDomains: the domain's other hosts are not ours to promise.
HSTS_MAX_AGE_S = 31536000
UNAUTHORIZED = ('{"error": "Unauthorized: send the API key of the engine as Authorization: '
                'Bearer <key> (ERNIE_API_KEY, or .cache/engine-api-key where ernie-chat made one)"}')


class BalancerMissing(ErnieChatError):
    """HAProxy is needed (several workers or engine copies) and is not installed."""


@dataclass(frozen=True)
class Backend:
    host: str
    port: int


@dataclass(frozen=True)
class Frontend:
    """One listening address and the servers behind it."""

    name: str                  # "chat" or "engine": also names the backend
    bind_host: str
    bind_port: int
    servers: tuple[Backend, ...]
    health_path: str           # GET that answers 200 when a server can take requests
    sticky: bool = False       # pin a browser to its server with a cookie
    keyed: bool = False        # every request but GET /health needs the key in KEY_ENV
    per_client: int = 0        # connections at once from one address; 0: no limit
    trusted: tuple[str, ...] = ()  # sources the per-client limit leaves alone
    forwarders: tuple[str, ...] = ()  # sources whose X-Forwarded-For is passed on (trusted proxies)
    replay: bool = False       # a request no server answered goes to another (retry_elsewhere)
    tls_pem: Optional[str] = None  # HTTPS with this chain and key (HAProxy's crt); see tls_front


@dataclass(frozen=True)
class BalancerConfig:
    frontends: tuple[Frontend, ...] = field(default_factory=tuple)
    max_connections: int = 20000
    # At least the app's own idle keep-alive to the engine, so HAProxy never closes a
    # connection the app is about to reuse (docs/notes.md, "Keep-alive race").
    keepalive_s: int = 75
    # HAProxy's runtime API, for `ernie-chat restart` to drain one server at a time
    # (server/stack/balancer_runtime.py); None: no socket.
    stats_socket: Optional[str] = None


def max_connections(open_files_limit: int, wanted: int = 20000) -> int:
    """HAProxy needs two file descriptors per proxied connection and refuses to start
    when the process may not open that many (seen here: a limit of 20,000)."""
    return max(100, min(wanted, (open_files_limit - 200) // 2))


def open_files_limit() -> int:
    import resource
    return resource.getrlimit(resource.RLIMIT_NOFILE)[1]


def bind_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def render_haproxy(config: BalancerConfig) -> str:
    """The haproxy.cfg text for ``config`` (pure: tested without HAProxy)."""
    lines = [
        "# Written by ernie-chat's supervisor at every start; edits are overwritten.",
        "global",
        f"    maxconn {config.max_connections}",
        "    log stderr format raw local0 warning",
        *stats_socket(config.stats_socket),
        "",
        "defaults",
        "    mode http",
        "    log global",
        "    option dontlog-normal",   # errors only: a log line per request costs at a crowd's rate
        "    option redispatch",       # a request for a dead server goes to a live one
        "    retries 2",
        "    timeout connect 5s",
        f"    timeout client {STREAM_TIMEOUT}",
        f"    timeout server {STREAM_TIMEOUT}",
        f"    timeout tunnel {STREAM_TIMEOUT}",  # websockets, once upgraded
        "    timeout check 2s",
        f"    timeout http-request {HEADER_TIMEOUT}",
        f"    timeout http-keep-alive {config.keepalive_s}s",
    ]
    for front in config.frontends:
        address = bind_address(front.bind_host, front.bind_port)
        lines += (tls_front(front) if front.tls_pem
                  else ["", f"frontend {front.name}", f"    bind {address}", *client_limit(front)])
        lines += key_check(front)
        lines += [f"    default_backend {front.name}_servers",
                  "", f"backend {front.name}_servers", "    balance leastconn",
                  f"    option httpchk GET {front.health_path}"]
        if front.sticky:
            # The workers see the browser's own address, for the login throttle (app/auth/login.py).
            # A client's own X-Forwarded-For goes first, unless it is a trusted proxy's: uvicorn
            # trusts the header from loopback, so a client on this machine could name any address.
            unless = f" if !{{ src {' '.join(front.forwarders)} }}" if front.forwarders else ""
            lines += [f"    cookie {STICKY_COOKIE} insert indirect nocache httponly"
                      f"{' secure' if front.tls_pem else ''}",
                      f"    http-request del-header X-Forwarded-For{unless}",
                      "    option forwardfor"]
        lines += retry_elsewhere(front)
        for i, server in enumerate(front.servers):
            lines.append(f"    server {front.name}{i} {bind_address(server.host, server.port)} {CHECK}"
                         f"{OBSERVE if front.replay else ''}{sticky_cookie(front, i)}")
        lines += last_resort(front)
    return "\n".join(lines) + "\n"


def tls_front(front: Frontend) -> list[str]:
    """HTTPS on the frontend's port, and a redirect to it for plain HTTP on the same port.

    One port for both, so that an address people already use (http://host:8080) leads them
    to the encrypted chat instead of failing; a second port would have to be opened, and
    80/443 need root.  A TCP frontend looks at each connection's first bytes: a TLS hello
    goes to the HTTPS frontend, anything else to one that answers only 308 to https://.
    Both sit on abstract sockets (Linux, no file, no port) and learn the client's address
    through the PROXY protocol, for the login throttle and the per-client limit, which
    the TCP frontend applies before either.  A client that sends nothing, or stalls in its
    TLS handshake, is dropped after HEADER_TIMEOUT, like one that sends its headers too slowly.

    Under TLS every cookie the workers set (Chainlit's login token, the device and boot
    cookies) gets ``Secure``, so a browser never sends it over plain HTTP (such as the
    redirect); HSTS makes the browser skip the plain request from the next visit on.
    X-Forwarded-Proto tells the workers (uvicorn trusts it from loopback) the page is https.
    Chainlit 2.12 would make its own cookie Secure only with CHAINLIT_COOKIE_SAMESITE=none
    (chainlit/auth/cookie.py), which would also send it along with other sites' requests.
    """
    address = bind_address(front.bind_host, front.bind_port)
    socket = f"abns@ernie-{front.name}-{front.bind_port}"
    hello = "{ req.ssl_hello_type 1 }"
    return ["", f"frontend {front.name}_sniff", "    mode tcp", f"    bind {address}",
            *client_limit(front),
            f"    tcp-request inspect-delay {HEADER_TIMEOUT}",
            f"    tcp-request content accept if {hello}",
            "    tcp-request content accept if { req.len gt 0 }",
            f"    use_backend {front.name}_tls if {hello}",
            f"    default_backend {front.name}_plain",
            *(line for kind in ("tls", "plain") for line in (
                "", f"backend {front.name}_{kind}", "    mode tcp",
                f"    server {kind} {socket}-{kind} send-proxy-v2")),
            "", f"frontend {front.name}_redirect", f"    bind {socket}-plain accept-proxy",
            "    http-request redirect scheme https code 308",
            "", f"frontend {front.name}", f"    bind {socket}-tls accept-proxy ssl crt {front.tls_pem} "
            "ssl-min-ver TLSv1.2",
            # HAProxy 2.6 bounds a TLS handshake only by this (2.8 has client-hs): a client that
            # stalls in it is a slowloris. Once a request is in, a slow server does not count,
            # and an upgraded socket has the tunnel timeout.
            f"    timeout client {HEADER_TIMEOUT}",
            "    http-request set-header X-Forwarded-Proto https",
            # HSTS holds for a name on every port: for localhost it would force https on every
            # other local server of the browser's machine for a year.
            "    http-request set-var(txn.host) req.hdr(host)",
            f'    http-response set-header Strict-Transport-Security "max-age={HSTS_MAX_AGE_S}" '
            "unless { var(txn.host) -m reg -i ^localhost(:[0-9]+)?$ }",
            # Only where Secure is missing: a cookie set Secure already stays as it is.
            "    http-response replace-header Set-Cookie '^((?:(?!;\\s*[Ss]ecure(;|$)).)*)$' '\\1; Secure'"]


def retry_elsewhere(front: Frontend) -> list[str]:
    """A request whose server refused the connection, closed it or answered 502/503/504
    before any byte of the answer is sent again, to another server; that server leaves
    rotation at once instead of after two failed checks.

    For the engine: a chat request is safe to send twice only while nothing of its answer
    came back (then no token reached anyone, and vLLM aborts a request whose connection is
    gone). HAProxy copies a request for such a retry only when the whole of it, body
    included, is in before the first byte goes to the server (HAProxy 2.6 drops L7 retries
    for a request whose ``msg_state`` is not DONE at that moment), so ``http-buffer-request``
    waits for the body first; a request larger than one buffer (tune.bufsize, 16 kB, less
    its 1 kB reserve) still gets only connection-failure retries, and the app's own retry
    (app/engine/failover.py) covers it. ``redispatch 1``: every retry goes to another server, not
    the dead one again. 500 is not retried: vLLM says that for a request that failed, which
    would fail on the other copy too.
    """
    if not front.replay:
        return []
    return ["    option http-buffer-request",
            "    retry-on conn-failure empty-response response-timeout 0rtt-rejected 502 503 504",
            "    option redispatch 1",
            f"    retries {max(2, len(front.servers))}"]


def stats_socket(path: Optional[str]) -> list[str]:
    """Admin level, since draining a server is an admin command; mode 600, since whoever can
    write to it can take every server out of rotation."""
    return [f"    stats socket {path} mode 600 level admin"] if path else []


def last_resort(front: Frontend) -> list[str]:
    """The same servers again, unchecked, used only while every checked one is down.

    A check that times out on a saturated machine (2 s while vLLM holds every core) is not a
    dead server; without these, HAProxy answers 503 to everyone although the servers would
    have answered. A server that is really dead refuses the connection and `redispatch` moves
    the request on. Each carries its twin's cookie: a chat lives in one worker's memory, and
    a browser whose page, socket and uploads were spread over the workers would lose it.
    """
    return ["    option allbackups"] + [
        f"    server {front.name}{i}-last-resort {bind_address(server.host, server.port)} backup"
        f"{sticky_cookie(front, i)}" for i, server in enumerate(front.servers)]


def sticky_cookie(front: Frontend, index: int) -> str:
    return f" cookie w{index}" if front.sticky else ""


def client_limit(front: Frontend) -> list[str]:
    if not front.per_client:
        return []
    trusted = f" !{{ src {' '.join(front.trusted)} }}" if front.trusted else ""
    return ["    stick-table type ipv6 size 100k expire 30s store conn_cur",
            "    tcp-request connection track-sc0 src",
            f"    tcp-request connection reject if {{ sc0_conn_cur gt {front.per_client} }}{trusted}"]


def key_check(front: Frontend) -> list[str]:
    if not front.keyed:
        return []
    # Double quotes: HAProxy puts the environment variable's value in at start.
    return [f'    acl keyed req.hdr(authorization) -m str "Bearer ${{{KEY_ENV}}}"',
            f"    http-request return status 401 content-type application/json string '{UNAUTHORIZED}' "
            "hdr WWW-Authenticate Bearer unless keyed || { path /health } { method GET HEAD }"]


WITHOUT_BALANCER = "set ERNIE_APP_WORKERS=1 and ERNIE_ENGINE_COPIES=1 to run without one."


def haproxy_path() -> str:
    """The HAProxy binary, or a message that says how to install it."""
    found = shutil.which("haproxy") or ("/usr/sbin/haproxy" if Path("/usr/sbin/haproxy").exists() else None)
    if not found:
        raise BalancerMissing(
            "Several app workers or engine copies need HAProxy as their balancer, and it is not "
            "installed. Install it (Debian/Ubuntu: sudo apt-get install haproxy; Fedora: sudo dnf "
            f"install haproxy; macOS: brew install haproxy), or {WITHOUT_BALANCER}")
    return found


def ensure_haproxy() -> str:
    """HAProxy's path; as root on Debian or Ubuntu, installed with apt first where it is
    missing (as ``./scripts/test`` installs what the tests run), so that ``./scripts/up`` on a
    fresh box needs no step by hand.  Elsewhere the message says how."""
    try:
        return haproxy_path()
    except BalancerMissing:
        if os.geteuid() != 0 or not shutil.which("apt-get"):
            raise
    log = ROOT / ".cache" / "setup-packages.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    print("[setup] installing Debian's haproxy: several app workers or engine copies need it as "
          "their balancer", flush=True)
    with log.open("w") as out:
        done = subprocess.run("apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install "
                              "-y -qq haproxy", shell=True, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise BalancerMissing(f"Installing HAProxy with apt-get failed (its output: {log}). Install it "
                              f"by hand (sudo apt-get install haproxy), or {WITHOUT_BALANCER}")
    return haproxy_path()


def key_env(api_key: Optional[str]) -> dict[str, str]:
    """HAProxy's environment: the key its keyed frontends compare with."""
    return {KEY_ENV: api_key} if api_key else {}


def write_config(config: BalancerConfig, path: Path, haproxy: str, env: Optional[dict] = None) -> Path:
    """Write the config and have HAProxy check it, so a mistake fails here with its reason."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_haproxy(config), encoding="utf-8")
    check = subprocess.run([haproxy, "-c", "-q", "-f", str(path)], capture_output=True, text=True,
                           env={**os.environ, **(env or {})})
    if check.returncode != 0:
        raise ErnieChatError(f"HAProxy refused its configuration {path}:\n{check.stdout}{check.stderr}")
    return path


def haproxy_argv(haproxy: str, config_path: Path) -> list[str]:
    # -db: stay in the foreground, so the supervisor owns it like any other child.
    return [haproxy, "-db", "-f", str(config_path)]


def managed_haproxy(config: BalancerConfig, config_path: Path, log_path: Path,
                    cwd: Path, api_key: Optional[str] = None) -> ManagedProcess:
    """HAProxy as a child like the others, its config checked and written (not started)."""
    if not api_key and any(front.keyed for front in config.frontends):
        raise ErnieChatError("The engine listens where other machines reach it, and no API key is "
                             "set to guard it: set ERNIE_API_KEY (any long random string), or "
                             "ERNIE_ENGINE_HOST=127.0.0.1")
    haproxy = haproxy_path()
    env = key_env(api_key)
    path = write_config(config, config_path, haproxy, env)
    return ManagedProcess("balancer", haproxy_argv(haproxy, path), log_path, env=env, cwd=cwd)
