"""ERNIE_MODELS served for real, on an address other machines reach: `ernie-chat up` with three
real vLLMs (the demo model at two lengths, `demo` and `demo-copy`, and the other built-in model
`demo-small`) and the real HAProxy, each model's port reached over the network address of
this machine.

What it must do: each model answers on its own port under its served name with its own
length, `status` and `doctor` cover each, a killed model restarts while the others keep
answering, SIGTERM leaves no process of any model, and a set that does not fit is refused
before any vLLM starts. What it must not allow: any path of a model but GET /health used
without the API key, or a vLLM reachable around HAProxy. What must keep working: the chat on
each model (the app reaches them through HAProxy with the key), the load tools (`bench`,
`capacity --through engine`) with the key `up` made, and a Prometheus with `scrape-config`'s,
whose dashboard panels show each model, all of them or the one chosen.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from server.loadtest.lib.chat_record import SessionRecord
from server.loadtest.lib.chat_socket import ChatSession
from server.paths import ROOT
from server.stack.processes import free_port, port_free
from tests.support.metrics import metric
from tests.support.stack_process import Up, alive, descendants, serving
from tests.support.stack_process import KEY_FILE, command_line, network_address
from tests.support.prometheus import Prometheus, assert_vllm_panels_show_each_model, drawn, vllm_queries
from tests.support.chat import run

# demo-small, the smaller built-in demo model, takes ERNIE_MAX_MODEL_LEN (4096 in Up).
LENGTHS = {"demo": 1024, "demo-copy": 2048, "demo-small": 4096}
MODELS = tuple(LENGTHS)
REQUESTS = "vllm:request_success_total"


@pytest.fixture(scope="module")
def exposed_models(tmp_path_factory, demo_model):
    address = network_address()
    if address is None:
        pytest.skip("this machine has no address but loopback")
    tmp = tmp_path_factory.mktemp("models-exposed")
    other = tmp / "demo-copy"  # the same weights under another name: served as "demo-copy"
    shutil.copytree(demo_model, other)
    up = Up(tmp, ERNIE_MODELS=f"demo:{LENGTHS['demo']},{other}:{LENGTHS['demo-copy']},demo-small",
            ERNIE_ENGINE_HOST=address, ERNIE_API_KEY=None,
            ERNIE_ENGINE_PORT=str(free_port(len(MODELS))), ERNIE_KV_CACHE_GIB=None, ERNIE_MODEL=None,
            ERNIE_MAX_TOKENS="8")
    up.address, up.engine_port = address, int(up.env["ERNIE_ENGINE_PORT"])
    yield from serving(up)


def model_url(up: Up, served: str) -> str:
    """Where other machines reach the model: HAProxy on the network address."""
    return f"http://{up.address}:{up.engine_port + MODELS.index(served)}"


def vllm_port(up: Up, served: str) -> int:
    """The port its vLLM says it is ready at."""
    ready = next(re.search(r"ready at http://([\d.]+):(\d+)", line) for line in up.lines
                 if f"[engine {served}] vLLM ready at" in line)
    assert ready.group(1) == "127.0.0.1", ready.group(0)
    return int(ready.group(2))


def keyed() -> dict[str, str]:
    return {"Authorization": f"Bearer {KEY_FILE.read_text().strip()}"}


def listed(up: Up, served: str) -> dict:
    """The model's own entry in its /v1/models, through HAProxy with the key."""
    return httpx.get(f"{model_url(up, served)}/v1/models", headers=keyed(), timeout=10).json()["data"][0]


def test_each_model_answers_on_its_own_port_with_its_name_and_length(exposed_models):
    up = exposed_models
    for served, length in LENGTHS.items():
        entry = listed(up, served)
        assert (entry["id"], entry["max_model_len"]) == (served, length)
        reply = httpx.post(f"{model_url(up, served)}/v1/chat/completions", headers=keyed(), timeout=120, json={
            "model": served, "max_tokens": 8, "messages": [{"role": "user", "content": "hello"}]})
        assert reply.status_code == 200, reply.text
        assert reply.json()["choices"][0]["message"]["content"]
        assert (up.settings.log_file.with_name(f"llm-{served}.log")).stat().st_size > 0
    # demo-small is the other built-in model: a vocabulary of its own, built beside demo.
    small = listed(up, "demo-small")["root"]
    assert small.endswith("demo-model-small")
    assert json.loads((Path(small) / "config.json").read_text())["vocab_size"] != json.loads(
        (Path(listed(up, "demo")["root"]) / "config.json").read_text())["vocab_size"]
    # The app workers load the same settings, ERNIE_MODELS included: the chat page answers.
    assert httpx.get(up.url, timeout=10).status_code == 200


def paths(served: str) -> list[tuple[str, str, dict | None]]:
    ask = [{"role": "user", "content": "hello"}]
    return [("GET", "/v1/models", None), ("GET", "/metrics", None),
            ("POST", "/v1/chat/completions", {"model": served, "max_tokens": 2, "messages": ask}),
            ("POST", "/tokenize", {"model": served, "prompt": "hello"})]


def test_each_model_asks_for_the_key_on_every_path_but_health(exposed_models):
    up = exposed_models
    key = KEY_FILE.read_text().strip()
    for served in MODELS:
        with httpx.Client(base_url=model_url(up, served), timeout=60) as http:
            for method, path, body in paths(served):
                for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": key},
                                {"Authorization": f"Bearer {key}x"}):
                    refused = http.request(method, path, json=body, headers=headers)
                    assert refused.status_code == 401, (served, method, path, headers, refused.text)
                served_ok = http.request(method, path, json=body, headers=keyed())
                assert served_ok.status_code == 200, (served, method, path, served_ok.text)
            listed = http.get("/v1/models", headers=keyed()).json()["data"]
            assert [entry["id"] for entry in listed] == [served]       # its own vLLM, not another's
            assert http.get("/health").status_code == 200               # for monitors
            assert http.post("/health").status_code == 401
    output = "\n".join(up.lines)
    assert "HAProxy in front of the model engines" in output
    for served in MODELS:
        port = up.engine_port + MODELS.index(served)
        assert f"engine {served} at {up.address}:{port}" in output     # HAProxy's line
        assert f"Engine: http://{up.address}:{port} serves {served} (HAProxy on {up.address}:{port}" in output


def listening(pid: int) -> set[tuple[str, int]]:
    """The TCP addresses a process listens on, from its sockets and /proc/net/tcp."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = fd.readlink().as_posix()
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = set()
    for row in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        cols = row.split()
        if cols[3] == "0A" and cols[9] in inodes:  # LISTEN
            host, port = cols[1].split(":")
            found.add((socket.inet_ntoa(bytes.fromhex(host)[::-1]), int(port, 16)))
    ipv6 = [row.split() for row in Path("/proc/net/tcp6").read_text().splitlines()[1:]]
    assert not [c for c in ipv6 if c[3] == "0A" and c[9] in inodes], "a vLLM listens on IPv6"
    return found


def test_the_vllms_listen_on_loopback_only(exposed_models):
    up = exposed_models
    vllms = [pid for pid in descendants(up.proc.pid) if "server.stack.vllm_serve" in command_line(pid)]
    assert len(vllms) >= len(MODELS), vllms
    everything = {p: listening(p) for pid in vllms for p in (pid, *descendants(pid))}
    addresses = set().union(*everything.values())
    assert {port for _, port in addresses} >= {vllm_port(up, served) for served in MODELS}
    assert {host for host, _ in addresses} == {"127.0.0.1"}, everything
    for served in MODELS:
        port = vllm_port(up, served)
        assert port != up.engine_port + MODELS.index(served)
        with pytest.raises(OSError):                     # around HAProxy from the network: nothing
            socket.create_connection((up.address, port), timeout=5).close()


def test_the_chat_reaches_each_model_through_haproxy(exposed_models):
    up = exposed_models
    loopback = {served: f"http://127.0.0.1:{vllm_port(up, served)}" for served in MODELS}
    for served in MODELS:
        before = {name: metric(url, REQUESTS) for name, url in loopback.items()}

        async def chat():
            session = ChatSession(SessionRecord(0, "", "Tell me about the sea."), chat_profile=served)
            assert await session.open(up.url), session.record.error
            await session.ask()
            await session.close()
            return session.record
        record = run(chat())
        assert record.complete, record.error
        after = {name: metric(url, REQUESTS) for name, url in loopback.items()}
        assert after[served] > before[served]                       # the chosen model answered
        assert all(after[name] == before[name] for name in MODELS if name != served)
    for log in up.settings.log_file.parent.glob("app*.log"):
        assert " 401" not in log.read_text(), log                    # the app always sent the key


def test_status_and_doctor_cover_every_model(exposed_models):
    up = exposed_models
    cli = [sys.executable, "-m", "server.cli"]
    # No ERNIE_API_KEY: status sends the key `up` made, as HAProxy asks for it.
    status = subprocess.run([*cli, "status"], cwd=ROOT, env=up.env, capture_output=True, text=True, timeout=60)
    assert status.returncode == 0, status.stdout + status.stderr
    assert [line.split()[1] for line in status.stdout.splitlines()] == list(MODELS), status.stdout
    doctor = subprocess.run([*cli, "doctor"], cwd=ROOT, env=up.env, capture_output=True, text=True, timeout=60)
    for served in MODELS:
        assert f"No known problem found in {up.settings.log_file.with_name(f'llm-{served}.log')}" \
            in doctor.stdout, doctor.stdout


def cli(up: Up, *args: str, **env: str) -> subprocess.CompletedProcess:
    """The command line as a user on this machine runs it beside `up`: the same settings."""
    return subprocess.run([sys.executable, "-m", "server.cli", *args], cwd=ROOT, env={**up.env, **env},
                          capture_output=True, text=True, timeout=180)


def test_load_tools_send_the_generated_key_and_name_a_wrong_one(exposed_models, tmp_path):
    up = exposed_models
    assert "ERNIE_API_KEY" not in up.env
    short = ["--num-prompts", "2", "--concurrency", "1", "--input-len", "8", "--output-len", "4",
             "--warmup", "0", "--no-plots"]
    for served in MODELS:  # each model's engine, reached at the network address `up` listens on
        before = metric(f"http://127.0.0.1:{vllm_port(up, served)}", REQUESTS)
        bench = cli(up, "bench", "--model", served, *short, "--out", str(tmp_path / served))
        assert bench.returncode == 0, bench.stdout + bench.stderr
        assert metric(f"http://127.0.0.1:{vllm_port(up, served)}", REQUESTS) >= before + 2
    wrong = cli(up, "bench", "--api-key", "sk-wrong-key", *short, "--out", str(tmp_path / "wrong"))
    assert wrong.returncode != 0
    assert "refused the API key sent (HTTP 401); the key was --api-key" in wrong.stderr, wrong.stderr
    assert "sk-wrong-key" not in wrong.stdout + wrong.stderr                  # named, never printed
    step = ["--through", "engine", "--model", MODELS[1], "--start-users", "1", "--max-users", "1",
            "--step-s", "6", "--ramp-s", "0.5", "--think-s", "0.2", "--output-len", "4",
            "--objective-ttft-p99-ms", "60000", "--objective-tokens-per-s", "0.1"]
    # Every reply --output-len long (no early EOS), so that each one has a decode rate.
    capacity = cli(up, "capacity", *step, "--out", str(tmp_path / "capacity"), ERNIE_IGNORE_EOS="true")
    assert capacity.returncode == 0, capacity.stdout + capacity.stderr
    refused = cli(up, "capacity", *step, "--api-key", "sk-wrong-key", "--out", str(tmp_path / "refused"))
    assert refused.returncode != 0 and "the key was --api-key" in refused.stderr, refused.stderr


def test_prometheus_scrapes_each_models_engine_and_the_dashboard_shows_each_and_the_one_chosen(
        exposed_models, tmp_path):
    up = exposed_models
    printed = cli(up, "scrape-config")
    assert printed.returncode == 0, printed.stderr
    assert str(KEY_FILE) in printed.stdout                       # the generated key, by its file
    prometheus = Prometheus(tmp_path, printed.stdout.replace("scrape_interval: 15s", "scrape_interval: 1s"))
    try:
        def every_model_up() -> bool:
            found = prometheus.query('up{job="ernie-chat-vllm"}')["result"]
            return {series["metric"]["model"]: series["value"][1] for series in found} \
                == {served: "1" for served in MODELS}
        prometheus.wait_for(every_model_up, "scraping every model's engine")
        for served in MODELS:  # each target is its own model's vLLM
            assert prometheus.value(f'sum(vllm:num_requests_running{{model="{served}", '
                                    f'model_name="{served}"}})') is not None, served
        for served in MODELS:  # a request each while scraped: rates and latencies of its own
            reply = httpx.post(f"{model_url(up, served)}/v1/chat/completions", timeout=120,
                               headers=keyed(),
                               json={"model": served, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]})
            assert reply.status_code == 200, reply.text
        assert_vllm_panels_show_each_model(prometheus, list(MODELS))
        # Drawn for one model chosen: each vLLM query draws its series alone, one fewer than for All.
        _, every = drawn(prometheus, tmp_path / "all.png")
        _, one = drawn(prometheus, tmp_path / "demo-small.png", "--model", "demo-small")
        assert every - one == (len(MODELS) - 1) * len(vllm_queries()), (every, one)
    finally:
        prometheus.stop()


def test_a_killed_model_restarts_while_the_others_keep_answering(exposed_models):
    up = exposed_models
    mark = len(up.lines)
    os.kill(up.pid_of("--served-model-name\0demo-copy"), signal.SIGKILL)
    up.wait_for(r"^\[engine demo-copy\] exited", timeout_s=30, after=mark)
    deadline = time.monotonic() + 600
    while not any("[engine demo-copy] vLLM ready" in line for line in up.lines[mark:]):
        for other in ("demo", "demo-small"):
            assert listed(up, other)["id"] == other, "another model stopped answering"
        assert time.monotonic() < deadline and up.proc.poll() is None, up.output()
        time.sleep(1)
    assert listed(up, "demo-copy")["max_model_len"] == LENGTHS["demo-copy"]
    assert not any(line.startswith(("[engine demo]", "[engine demo-small]"))
                   for line in up.lines[mark:]), up.output()


def test_sigterm_leaves_no_process_of_any_model(exposed_models):
    """Runs last in this module: it ends the stack."""
    up = exposed_models
    tree = descendants(up.proc.pid)
    assert len(tree) >= 5, "expected three engines, HAProxy and the app below the supervisor"
    up.stop()
    assert up.proc.returncode == 0
    deadline = time.monotonic() + 10
    while any(alive(p) for p in tree) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p for p in tree if alive(p)], "processes left behind after SIGTERM"
    assert all(port_free(up.address, up.engine_port + i) for i in range(len(MODELS)))


def test_up_refuses_a_set_that_does_not_fit_before_any_vllm_starts(tmp_path, demo_model):
    other = tmp_path / "demo-two"
    shutil.copytree(demo_model, other)
    env = {**os.environ, "ERNIE_MODELS": f"demo:999999,{other}:1024",
           "ERNIE_ENGINE_PORT": str(free_port(2)), "ERNIE_APP_PORT": str(free_port()),
           "ERNIE_METRICS_PORT": str(free_port()), "ERNIE_LOG_FILE": str(tmp_path / "llm.log")}
    result = subprocess.run([sys.executable, "-m", "server.cli", "up"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "do not fit" in result.stdout and "demo: " in result.stdout, result.stdout
    assert "max_position_embeddings" in result.stdout, result.stdout
    assert not (tmp_path / "llm-demo.log").exists() and not (tmp_path / "llm-demo-two.log").exists()
