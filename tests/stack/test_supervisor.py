"""`ernie-chat up` as a user runs it: a real vLLM, a real Chainlit, then SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx

from server.stack.processes import free_port, port_free
from server.paths import ROOT
from tests.support.stack_process import alive, descendants

API_KEY_SECRET, PASSWORD_SECRET = "KEY-7f3a9c", "PW-b81e44"


def test_up_serves_chat_and_engine_then_sigterm_leaves_nothing(tmp_path):
    engine_port, app_port = free_port(), free_port()
    env = {**os.environ, "ERNIE_MODEL": "demo", "ERNIE_ENGINE_PORT": str(engine_port),
           "ERNIE_APP_PORT": str(app_port), "ERNIE_LOG_FILE": str(tmp_path / "llm.log"),
           "ERNIE_METRICS_PORT": str(free_port()), "ERNIE_MAX_MODEL_LEN": "2048", "ERNIE_KV_CACHE_GIB": "1",
           # Secrets that must reach vLLM and Chainlit but no log or terminal.
           "ERNIE_API_KEY": f"sk-{API_KEY_SECRET}", "ERNIE_CHAT_DB": str(tmp_path / "chats.db"),
           "ERNIE_USERS": f"alice:{PASSWORD_SECRET}"}
    proc = subprocess.Popen([sys.executable, "-m", "server.cli", "up"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 900
        while not any(l.startswith("Engine:") for l in lines):
            assert time.monotonic() < deadline and proc.poll() is None, "\n".join(lines[-30:])
            line = proc.stdout.readline()
            if line:
                lines.append(line.rstrip())
        output = "\n".join(lines)
        assert f"Chat:   http://127.0.0.1:{app_port}" in lines, output
        assert f"Engine: http://127.0.0.1:{engine_port}" in lines, output
        assert "KV cache:" in output and "max-model-len 2048" in output, output
        # One app worker, no HAProxy: the start-up line names only what loaded meanwhile.
        assert "engine (the app loading meanwhile)" in output and "HAProxy" not in output, output

        page = httpx.get(f"http://127.0.0.1:{app_port}", timeout=10)
        assert page.status_code == 200 and "<html" in page.text.lower()
        engine = f"http://127.0.0.1:{engine_port}/v1/models"
        assert httpx.get(engine, timeout=10).status_code == 401, "vLLM must require the API key"
        models = httpx.get(engine, headers={"Authorization": f"Bearer sk-{API_KEY_SECRET}"},
                           timeout=10).json()
        assert models["data"][0]["max_model_len"] == 2048

        tree = descendants(proc.pid)
        assert len(tree) >= 2, "expected the engine and the app below the supervisor"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    deadline = time.monotonic() + 10
    while any(alive(p) for p in tree) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p for p in tree if alive(p)], "processes left behind after SIGTERM"
    assert port_free("127.0.0.1", engine_port) and port_free("127.0.0.1", app_port)
    logs = "\n".join(lines) + (tmp_path / "llm.log").read_text() + (tmp_path / "app.log").read_text()
    assert API_KEY_SECRET not in logs and PASSWORD_SECRET not in logs, "a secret reached a log"


def test_up_refuses_a_taken_port_and_names_it(tmp_path):
    import socket
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        env = {**os.environ, "ERNIE_MODEL": "demo", "ERNIE_ENGINE_PORT": str(port),
               "ERNIE_APP_PORT": str(free_port()), "ERNIE_LOG_FILE": str(tmp_path / "llm.log")}
        result = subprocess.run([sys.executable, "-m", "server.cli", "up"], cwd=ROOT, env=env,
                                capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert f"Port {port}" in result.stdout and "ERNIE_ENGINE_PORT" in result.stdout
    assert f"pid {os.getpid()}" in result.stdout


def test_invalid_setting_stops_up_with_a_clear_message():
    env = {**os.environ, "ERNIE_GPU_MEMORY_UTILIZATION": "1.5"}
    result = subprocess.run([sys.executable, "-m", "server.cli", "up"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "ERNIE_GPU_MEMORY_UTILIZATION='1.5'" in result.stderr
    assert "at most 1" in result.stderr


def test_the_warm_up_covers_a_crowds_batches_only_on_a_gpu():
    from server.stack import warmup
    crowd = [size for size in warmup.bursts("cuda") if size > 64]  # vLLM's other top-p variant
    assert any(size % 16 for size in crowd) and any(size % 16 == 0 for size in crowd)
    assert max(warmup.bursts("cpu")) <= 16, "the CPU build has no Triton: a short warm-up"
