"""`up` with ERNIE_MODELS: one real vLLM per model, each on its port under its served name."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from server.stack.processes import free_port, port_free
from server.paths import ROOT
from tests.support.stack_process import Up, alive, descendants, serving
from tests.support.ports import free_ports

# demo-small, the smaller built-in demo model, takes ERNIE_MAX_MODEL_LEN (4096 in Up).
LENGTHS = {"demo": 1024, "demo-copy": 2048, "demo-small": 4096}


@pytest.fixture(scope="module")
def two_models(tmp_path_factory, demo_model):
    tmp = tmp_path_factory.mktemp("models")
    other = tmp / "demo-copy"  # the same weights under another name: served as "demo-copy"
    shutil.copytree(demo_model, other)
    up = Up(tmp, ERNIE_MODELS=f"demo:{LENGTHS['demo']},{other}:{LENGTHS['demo-copy']},demo-small",
            ERNIE_ENGINE_PORT=str(free_ports(len(LENGTHS))), ERNIE_KV_CACHE_GIB=None, ERNIE_MODEL=None)
    up.engine_port = int(up.env["ERNIE_ENGINE_PORT"])
    yield from serving(up)


def engine_url(up: Up, served: str) -> str:
    return f"http://127.0.0.1:{up.engine_port + list(LENGTHS).index(served)}"


def listed(up: Up, served: str) -> dict:
    return httpx.get(f"{engine_url(up, served)}/v1/models", timeout=10).json()["data"][0]


def test_each_model_answers_on_its_own_port_with_its_name_and_length(two_models):
    up = two_models
    for served, length in LENGTHS.items():
        entry = listed(up, served)
        assert (entry["id"], entry["max_model_len"]) == (served, length)
        reply = httpx.post(f"{engine_url(up, served)}/v1/chat/completions", timeout=120, json={
            "model": served, "max_tokens": 8, "messages": [{"role": "user", "content": "hello"}]})
        assert reply.status_code == 200, reply.text
        assert reply.json()["choices"][0]["message"]["content"]
        assert f"Engine: {engine_url(up, served)} serves {served}" in up.lines
        assert (up.settings.log_file.with_name(f"llm-{served}.log")).stat().st_size > 0
    # demo-small is the other built-in model: a vocabulary of its own, built beside demo.
    small = listed(up, "demo-small")["root"]
    assert small.endswith("demo-model-small")
    assert json.loads((Path(small) / "config.json").read_text())["vocab_size"] != json.loads(
        (Path(listed(up, "demo")["root"]) / "config.json").read_text())["vocab_size"]
    # The app workers load the same settings, ERNIE_MODELS included: the chat page answers.
    assert httpx.get(up.url, timeout=10).status_code == 200


def test_status_and_doctor_cover_every_model(two_models):
    up = two_models
    cli = [sys.executable, "-m", "server.cli"]
    status = subprocess.run([*cli, "status"], cwd=ROOT, env=up.env, capture_output=True, text=True,
                            timeout=60)
    assert status.returncode == 0, status.stdout + status.stderr
    assert [line.split()[1] for line in status.stdout.splitlines()] == list(LENGTHS), status.stdout
    doctor = subprocess.run([*cli, "doctor"], cwd=ROOT, env=up.env, capture_output=True, text=True,
                            timeout=60)
    for served in LENGTHS:
        assert f"No known problem found in {up.settings.log_file.with_name(f'llm-{served}.log')}" \
            in doctor.stdout, doctor.stdout


def test_a_killed_model_restarts_while_the_other_keeps_answering(two_models):
    up = two_models
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


def test_sigterm_leaves_no_process_of_any_model(two_models):
    up = two_models
    tree = descendants(up.proc.pid)
    assert len(tree) >= 4, "expected three engines and the app below the supervisor"
    up.stop()
    assert up.proc.returncode == 0
    deadline = time.monotonic() + 10
    while any(alive(p) for p in tree) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p for p in tree if alive(p)], "processes left behind after SIGTERM"
    assert all(port_free("127.0.0.1", up.engine_port + i) for i in range(len(LENGTHS)))


def test_up_refuses_a_set_that_does_not_fit_before_any_vllm_starts(tmp_path, demo_model):
    other = tmp_path / "demo-two"
    shutil.copytree(demo_model, other)
    env = {**os.environ, "ERNIE_MODELS": f"demo:999999,{other}:1024",
           "ERNIE_ENGINE_PORT": str(free_ports(2)), "ERNIE_APP_PORT": str(free_port()),
           "ERNIE_METRICS_PORT": str(free_port()), "ERNIE_LOG_FILE": str(tmp_path / "llm.log")}
    result = subprocess.run([sys.executable, "-m", "server.cli", "up"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "do not fit" in result.stdout and "demo: " in result.stdout, result.stdout
    assert "max_position_embeddings" in result.stdout, result.stdout
    assert not (tmp_path / "llm-demo.log").exists() and not (tmp_path / "llm-demo-two.log").exists()
