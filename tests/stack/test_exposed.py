"""A stack exposed to the network (ERNIE_ENGINE_HOST and ERNIE_APP_HOST 0.0.0.0), attacked for
real: `ernie-chat up` with the real HAProxy and vLLM, reached over raw HTTP and sockets.

What exposure must not allow: the engine's paths outside /v1 (/tokenize, /invocations,
/metrics) used without its key; a client that sends its headers a byte at a time, or opens
connection after connection, holding the chat or the engine; an exposed chat without login;
the chats, logs and uploads readable by every account of the machine; a crashed worker's
uploads left on disk for good; an exposed chat on plain HTTP unless asked for.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import stat
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Optional

import httpx
import pytest

from server.paths import ROOT
from server.stack import balancer, balancer_runtime
from server.stack.processes import free_port
from tests.support.stack_process import Up, descendants, KEY_FILE, command_line, network_address
from tests.support.chat import PASSWORD, USER, chats, login_cookie, run

FILES = ROOT / ".files"
LIMIT = 4  # ERNIE_CONNECTIONS_PER_CLIENT: small, so the test can go past it
HEADER_TIMEOUT_S = int(balancer.HEADER_TIMEOUT.removesuffix("s"))
REQUEST = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"


def finished_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("exposed")
    # What an older version left readable by every account: `up` must tighten it.
    for name in ("llm.log", "usage.jsonl"):
        (tmp / name).write_text("")
        (tmp / name).chmod(0o644)
    orphan = FILES / f"worker-{finished_pid()}"   # a worker that crashed long ago
    orphan.mkdir(parents=True, exist_ok=True)
    up = Up(tmp, ERNIE_ENGINE_HOST="0.0.0.0", ERNIE_APP_HOST="0.0.0.0", ERNIE_APP_WORKERS="2",
            ERNIE_USERS=f"{USER}:{PASSWORD}", ERNIE_CHAT_DB=str(tmp / "chats.db"),
            ERNIE_USAGE_LOG=str(tmp / "usage.jsonl"), ERNIE_CONNECTIONS_PER_CLIENT=str(LIMIT),
            # Plain HTTP, so the chat's load clients need no CA; HTTPS is tests/stack/test_tls.py's.
            ERNIE_MAX_TOKENS="24", ERNIE_TLS="off")
    up.tmp, up.orphan = tmp, orphan
    try:
        up.wait_for(r"^Chat: ", timeout_s=1200)
        yield up
    finally:
        up.stop()


def engine_url(stack: Up) -> str:
    return f"http://{network_address() or '127.0.0.1'}:{stack.engine_port}"


def answered(source: str, port: int, host: str = "127.0.0.1") -> Optional[socket.socket]:
    """A connection from ``source`` that HAProxy served (left open), or None when refused."""
    sock = socket.socket()
    sock.settimeout(5)
    sock.bind((source, 0))
    try:
        sock.connect((host, port))
        sock.sendall(REQUEST)
        if sock.recv(12).startswith(b"HTTP/1.1 "):
            return sock
    except OSError:
        pass
    sock.close()
    return None


def held_open(source: str, port: int, host: str = "127.0.0.1") -> socket.socket:
    sock = socket.socket()
    sock.bind((source, 0))
    sock.connect((host, port))
    return sock


def seconds_until_cut(port: int) -> float:
    """Send a request's headers one byte a second (slowloris); when HAProxy ends it."""
    header = b"GET / HTTP/1.1\r\nHost: x\r\nUser-Agent: " + b"s" * 60
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.settimeout(1)
        for byte in header:
            try:
                sock.sendall(bytes([byte]))
                if not sock.recv(100).startswith(b"HTTP/1.1 200"):
                    return time.monotonic() - started   # closed, or 408 Request Time-out
            except socket.timeout:
                continue
            except OSError:
                return time.monotonic() - started
    return float("inf")


# --- the engine: the key on every path ---------------------------------------------------------

ENGINE_PATHS = [("GET", "/metrics", None), ("GET", "/v1/models", None),
                ("POST", "/tokenize", {"model": "ernie-4.5-0.3b", "prompt": "hello"}),
                ("POST", "/invocations", {"model": "ernie-4.5-0.3b", "prompt": "hello", "max_tokens": 2})]


def test_every_engine_path_but_health_asks_for_the_key(stack):
    key = KEY_FILE.read_text().strip()
    with httpx.Client(base_url=engine_url(stack), timeout=60) as http:
        for method, path, body in ENGINE_PATHS:
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": key}):
                refused = http.request(method, path, json=body, headers=headers)
                assert refused.status_code == 401, (method, path, headers, refused.text)
            served = http.request(method, path, json=body, headers={"Authorization": f"Bearer {key}"})
            assert served.status_code == 200, (method, path, served.text)
        assert http.get("/health").status_code == 200         # for monitors: up or down, no more
        assert http.post("/health").status_code == 401
    # vLLM itself listens on loopback only, behind HAProxy.
    ready = next(re.search(r"ready at http://([\d.]+):(\d+)", l) for l in stack.lines if "vLLM ready at" in l)
    assert ready.group(1) == "127.0.0.1" and int(ready.group(2)) != stack.engine_port


def test_the_key_is_in_no_command_line_and_no_log(stack):
    key = KEY_FILE.read_text().strip()
    assert all(key not in command_line(pid) for pid in descendants(stack.proc.pid))
    assert key not in "\n".join(stack.lines)
    for log in stack.tmp.glob("*.log"):
        assert key not in log.read_text(errors="replace"), log


def test_the_chat_works_through_the_guarded_engine_and_saves_privately(stack):
    cookie = login_cookie(stack.url)

    async def chat():
        [session] = await chats(stack.url, cookie, ["Tell me about the sea."])
        await session.ask()
        await session.close()
        return session.record
    record = run(chat())
    assert record.complete, record.error
    for log in stack.tmp.glob("app*.log"):
        assert " 401" not in log.read_text(), log     # every engine call of the app had the key
    deadline = time.monotonic() + 30                   # Chainlit saves in background tasks
    while not (stack.tmp / "usage.jsonl").stat().st_size and time.monotonic() < deadline:
        time.sleep(0.5)
    private = [stack.tmp / n for n in ("chats.db", "chats.db-wal", "usage.jsonl", "llm.log", "app.log",
                                       "app-worker1.log", "balancer.log", "engine-state.json")]
    assert {p.name: oct(mode(p)) for p in private} == {p.name: "0o600" for p in private}
    folders = [FILES, *FILES.glob("worker-*")]
    assert {str(f): oct(mode(f)) for f in folders} == {str(f): "0o700" for f in folders}


# --- slow clients and greedy addresses ---------------------------------------------------------

def test_a_slowloris_client_is_cut_after_the_header_timeout(stack):
    with ThreadPoolExecutor(2) as pool:
        chat, engine = pool.map(seconds_until_cut, (stack.app_port, stack.engine_port))
    assert 9 <= chat <= 13 and 9 <= engine <= 13, (chat, engine)
    assert answered("127.0.0.1", stack.app_port), "a normal client after the slowloris"


def connections_counted(stack: Up, front: str, source: str) -> int:
    """A frontend's count of ``source``'s open connections, from HAProxy's own stick table:
    a connection the kernel has accepted may not have reached HAProxy's rules yet."""
    table = balancer_runtime.send(stack.tmp / "haproxy.sock", f"show table {front}")
    counts = re.findall(rf"key=(?:::ffff:)?{re.escape(source)} .*conn_cur=(\d+)", table)
    return int(counts[0]) if counts else 0


def wait_for_count(stack: Up, front: str, source: str, wanted: int, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while (count := connections_counted(stack, front, source)) != wanted:
        assert time.monotonic() < deadline, f"HAProxy counts {count} connections of {source}, not {wanted}"
        time.sleep(0.1)


@contextmanager
def holding_the_limit(stack: Up, front: str, source: str, port: int, host: str = "127.0.0.1"):
    """LIMIT connections from ``source``, open and counted by HAProxy. Yields the time until
    which they surely stay open: HAProxy cuts a connection that sends no request after the
    header timeout, and on a busy machine counting them can take a good part of it.

    The connections of a check before must be gone from HAProxy's count first: it may accept
    new ones before it has handled the old ones' close, and would refuse them all."""
    wait_for_count(stack, front, source, 0)
    opened = time.monotonic()
    held = [held_open(source, port, host) for _ in range(LIMIT)]
    try:
        wait_for_count(stack, front, source, LIMIT)
        yield opened + HEADER_TIMEOUT_S - 2
    finally:
        for sock in held:
            sock.close()


def refused_past_the_limit(stack: Up, front: str, source: str, port: int, host: str = "127.0.0.1") -> bool:
    """Whether one connection more than the limit is refused, asked while the limit's own
    connections were surely open (tried again when counting them took too long)."""
    for _ in range(3):
        with holding_the_limit(stack, front, source, port, host) as until:
            extra = answered(source, port, host)
            in_time = time.monotonic() < until
        if extra:
            extra.close()
        if in_time:
            return extra is None
    pytest.fail(f"counting {LIMIT} connections took longer than the header timeout, three times")


def test_one_address_cannot_take_every_connection_of_the_chat(stack):
    assert refused_past_the_limit(stack, "chat", "127.0.0.1", stack.app_port), "one connection past the limit"
    with holding_the_limit(stack, "chat", "127.0.0.1", stack.app_port):
        other = answered("127.0.0.2", stack.app_port)
        assert other is not None, "another address still gets in"
        other.close()
    wait_for_count(stack, "chat", "127.0.0.1", 0)
    assert answered("127.0.0.1", stack.app_port), "back under the limit, the address is served"


def test_one_address_cannot_take_every_connection_of_the_engine(stack):
    address = network_address()
    if address is None:
        pytest.skip("this machine has no address but loopback")
    assert refused_past_the_limit(stack, "engine", address, stack.engine_port, address), \
        "one connection past the limit"
    with holding_the_limit(stack, "engine", address, stack.engine_port, address):
        # The chat's own connections come from loopback, a crowd's worth: never limited.
        more = [answered("127.0.0.1", stack.engine_port) for _ in range(LIMIT + 2)]
        assert all(more)
        for sock in more:
            sock.close()


# --- a crashed worker's uploads ---------------------------------------------------------------

def test_a_crashed_workers_folder_is_removed_at_the_next_start_a_live_ones_kept(stack):
    assert not stack.orphan.exists(), "the folder of a worker gone before `up`"
    workers = sorted(p for p in descendants(stack.proc.pid) if "app.serve" in command_line(p))
    victim, survivor = workers
    assert (FILES / f"worker-{victim}").is_dir() and (FILES / f"worker-{survivor}").is_dir()
    mark = len(stack.lines)
    os.kill(victim, signal.SIGKILL)          # no clean-up of its own
    stack.wait_for(r"\[app 1\] restarting|\[app\] restarting", after=mark, timeout_s=30)
    deadline = time.monotonic() + 120
    while (FILES / f"worker-{victim}").exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not (FILES / f"worker-{victim}").exists()
    assert (FILES / f"worker-{survivor}").is_dir()


# --- an exposed chat: login or an explicit opt-out ----------------------------------------------

def test_an_exposed_chat_without_login_is_refused_with_what_to_set():
    env = {**os.environ, "ERNIE_APP_HOST": "0.0.0.0", "ERNIE_APP_PORT": str(free_port()),
           "ERNIE_ENGINE_URL": f"http://127.0.0.1:{free_port()}"}
    try:
        done = subprocess.run([sys.executable, "-m", "server.cli", "up"], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("an exposed chat without login started")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "ERNIE_USERS=" in done.stderr and "ERNIE_OPEN_CHAT=true" in done.stderr, done.stderr


def test_plain_http_by_choice_is_warned_about(stack):
    output = "\n".join(stack.lines)
    assert "passwords and session cookies" in output.lower() and "UNENCRYPTED" in output
    assert "ERNIE_TLS=off" in output and "ERNIE_APP_HOST=127.0.0.1" in output


def test_an_open_exposed_chat_starts_behind_haproxy_on_https(tmp_path):
    up = Up(tmp_path, ERNIE_APP_HOST="0.0.0.0", ERNIE_OPEN_CHAT="true",
            ERNIE_ENGINE_URL=f"http://127.0.0.1:{free_port()}")
    try:
        up.wait_for(r"^Chat: ", timeout_s=180)
        output = "\n".join(up.lines)
        assert f"Chat:   https://127.0.0.1:{up.app_port}" in output
        ca = ROOT / ".cache" / "tls" / "ca.pem"
        assert f"[security]   {ca}" in output and "ERNIE_TLS_CERT=" in output
        assert "UNENCRYPTED" not in output
        assert "HAProxy in front of the app workers" in output       # even with one worker
        worker = re.search(r"\[app\] Chainlit ready at http://([\d.]+):(\d+)", output)
        assert worker.group(1) == "127.0.0.1" and int(worker.group(2)) != up.app_port
        trusted = subprocess.run(["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "--cacert",
                                  str(ca), f"https://127.0.0.1:{up.app_port}/"], capture_output=True,
                                 text=True, timeout=30)
        assert trusted.stdout == "200", trusted.stderr
        assert httpx.get(f"{up.url}/").status_code == 308
        assert seconds_until_cut(up.app_port) <= 13
    finally:
        up.stop()
