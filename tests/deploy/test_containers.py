"""The CPU image (deploy/Containerfile) and compose.yaml, built and run for real with Debian's
podman and podman-compose (tests/support/containers.py says how, on machines without an
image registry). `up` as PID 1 serves chats sent by `qa-load`, stops on SIGTERM with nothing
left and keeps its state in volumes; compose.yaml, brought up on those volumes, serves the same
chats behind a login and HTTPS and reopens the one saved by the first container. Skipped where
podman cannot be installed (not root, or no apt-get).

The first container talks to this run's engine (ERNIE_ENGINE_URL, as with vLLM on another
machine); compose starts the image's own vLLM, so its container is the one whose processes are
checked. One vLLM start in a container, not two: each cost about 30 CPU-seconds of a run.

`./scripts/test` installs podman with the other Debian packages and builds the image in the
background while the first tests run (its output in .cache/setup-image.log); the test waits
for that build and builds what it left (podman's layer cache keeps the rest). The demo model
goes into the state volume from this checkout's .cache (the suite builds it anyway), as a first
start would have left it: building it in the container costs minutes."""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from server.loadtest.lib.login import PASSWORD_ENV
from server.passwords import hash_password
from server.paths import ROOT
from server.stack.processes import free_port
from tests.support import containers
from tests.support.stack_process import alive

PASSWORD = "wonderland"
SESSIONS = 3
STOP_GRACE_S = 120  # compose.yaml's stop_grace_period
# What `up` may leave in the container's own layer: scratch (/tmp: vLLM's and torch's), the
# uploads' folder (each upload is deleted once read), the engine environment's lock file.
SCRATCH = ("/tmp/", "/opt/ernie-chat/.files", "/opt/ernie-chat/.venv-engine.lock")
VOLUMES = {"data": "/opt/ernie-chat/data", "run": "/opt/ernie-chat/run",
           "state": "/opt/ernie-chat/.cache", "models": "/home/ernie/.cache"}


@pytest.fixture(scope="module")
def podman_env():
    if reason := containers.why_no_podman():
        pytest.skip(reason)
    return containers.environment()


@pytest.fixture(scope="module")
def image(podman_env) -> str:
    return containers.build_image(podman_env)


@pytest.fixture(scope="module")
def users() -> str:
    return f"alice:{hash_password(PASSWORD)}"


def wait_for_chat(env: dict[str, str], name: str, timeout_s: float = 900) -> str:
    """The container's output once `up` prints the chat's address."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        logs = containers.podman(env, "logs", name)
        if "\nChat: " in logs:
            return logs
        state = containers.podman(env, "inspect", "--format", "{{.State.Status}}", name)
        assert state == "running", f"the container is {state}:\n{logs[-3000:]}"
        time.sleep(1)
    raise AssertionError(f"no chat after {timeout_s} s:\n{containers.podman(env, 'logs', name)[-3000:]}")


def qa_load(url: str, *extra_env: tuple[str, str]) -> dict:
    """`ernie-chat qa-load` as a user runs it, logged in: every chat's reply checked."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), PASSWORD_ENV: PASSWORD, **dict(extra_env)}
    done = subprocess.run([sys.executable, "-m", "server.cli", "qa-load", "--url", url, "--login", "alice",
                           "--sessions", str(SESSIONS), "--timeout-s", "300", "--json"],
                          env=env, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert (result["summary"]["complete"], result["summary"]["crossed"]) == (SESSIONS, 0), result["summary"]
    return result


def assert_unprivileged_and_no_zombies(env: dict[str, str], name: str, at_least: int) -> list[int]:
    processes = containers.container_processes(env, name)
    assert len(processes) >= at_least, processes
    assert [p for p, state in processes if state == "Z"] == []
    for pid, _ in processes:
        uid = Path(f"/proc/{pid}/status").read_text().split("\nUid:")[1].split()[0]
        assert uid == str(containers.USER_ID), (pid, uid)
    return [pid for pid, _ in processes]


def stop_with_sigterm(env: dict[str, str], name: str, pids: list[int]) -> str:
    """SIGTERM to PID 1, as `docker stop` sends it; `up` must unwind before the grace ends."""
    started = time.monotonic()
    containers.podman(env, "stop", "--time", str(STOP_GRACE_S), name, timeout=STOP_GRACE_S + 30)
    took = time.monotonic() - started
    logs = containers.podman(env, "logs", name)
    assert containers.podman(env, "inspect", "--format", "{{.State.ExitCode}}", name) == "0", logs[-3000:]
    assert took < STOP_GRACE_S - 10 and logs.rstrip().endswith("Stopped."), (took, logs[-2000:])
    assert [pid for pid in pids if alive(pid)] == []
    return logs


def assert_only_scratch_added(env: dict[str, str], name: str) -> None:
    """Every file `up` keeps is in a volume: the container's own layer holds scratch only."""
    added = [line.split(" ", 1)[1] for line in containers.podman(env, "diff", name).splitlines()
             if line.startswith("A ")]
    assert added and [path for path in added if not path.startswith(SCRATCH)] == []


def reopened(url: str, thread_id: str, verify: bool | ssl.SSLContext = True) -> dict:
    with httpx.Client(base_url=url, timeout=30, verify=verify) as http:
        assert http.post("/login", data={"username": "alice", "password": PASSWORD}).status_code == 200
        response = http.get(f"/project/thread/{thread_id}")
    assert response.status_code == 200, response.text
    return response.json()


def test_the_image_serves_and_stops_then_compose_on_its_volumes_serves_its_chats_over_https(
        image, podman_env, users, demo_model, engine, tmp_path):
    """One life of the state volumes: `podman run` as a user runs the image (plain HTTP on this
    host), then compose.yaml as it is on the same volumes, the way compose names a project's
    (`<project>_data`, ...): the chat on the container's every address, published on the host's
    loopback only here, behind a login and HTTPS with the local CA made at its first start, and
    the image's own vLLM behind it."""
    settings, _ = engine
    env, project = podman_env, f"ernie-chat-test-{os.getpid()}"
    volumes = {key: f"{project}_{key}" for key in VOLUMES}
    containers.seed_volume(env, volumes["state"], demo_model, "demo-model")
    name, app_port = project, free_port()
    run = ["run", "-d", "--name", name, "--network", "host",
           "-e", "ERNIE_MODEL=demo", "-e", f"ERNIE_USERS={users}", "-e", "ERNIE_CHAT_DB=data/chats.db",
           "-e", f"ERNIE_APP_PORT={app_port}", "-e", f"ERNIE_ENGINE_URL={settings.engine_base_url}",
           "-e", f"ERNIE_METRICS_PORT={free_port()}",
           *[arg for key, path in VOLUMES.items() for arg in ("-v", f"{volumes[key]}:{path}")], image]
    compose = ["podman-compose", "-p", project, "-f", str(containers.COMPOSE_FILE)]
    compose_env = {**env, "ERNIE_USERS": users, "ERNIE_MODEL": "demo", "ERNIE_APP_PORT": str(app_port),
                   "PUBLISH_ADDRESS": "127.0.0.1"}
    try:
        containers.podman(env, *run)
        wait_for_chat(env, name)
        # The image's HEALTHCHECK, run as podman's timer would (no systemd here to run one);
        # podman fails on an unhealthy answer.
        containers.podman(env, "healthcheck", "run", name)
        first = qa_load(f"http://127.0.0.1:{app_port}")
        saved = first["sessions"][0]
        assert saved["thread_id"]
        stop_with_sigterm(env, name, assert_unprivileged_and_no_zombies(env, name, 2))  # up, the chat

        assert_only_scratch_added(env, name)
        data, state = containers.volume_path(env, volumes["data"]), containers.volume_path(env, volumes["state"])
        assert (data / "chats.db").stat().st_size > 0 and (data / "usage.jsonl").exists()
        assert (state / "chainlit-auth-secret").exists()
        containers.podman(env, "rm", name)

        done = subprocess.run([*compose, "up", "-d", "--no-build"], env=compose_env, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        name = containers.podman(env, "ps", "-a", "--filter", f"label=io.podman.compose.project={project}",
                                 "--format", "{{.Names}}")
        logs = wait_for_chat(env, name)
        assert "building the demo model" not in logs  # the seeded one was current
        assert "Serving the built-in DEMO model" in logs
        url = f"https://127.0.0.1:{app_port}"
        assert f"Chat:   {url}" in logs
        containers.podman(env, "healthcheck", "run", name)  # compose's check, on HTTPS
        assert httpx.get(f"http://127.0.0.1:{app_port}/").status_code == 308  # plain HTTP: a redirect
        ca = tmp_path / "ca.pem"  # the local CA made at this first exposed start, in the state volume
        ca.write_bytes((state / "tls" / "ca.pem").read_bytes())
        verify = ssl.create_default_context(cafile=ca)
        second = qa_load(url, ("SSL_CERT_FILE", str(ca)))
        assert reopened(url, second["sessions"][0]["thread_id"], verify)["steps"]
        # The chat saved by the first container, reopened from the same volume.
        thread = reopened(url, saved["thread_id"], verify)
        messages = [step["output"] for step in thread["steps"] if step["type"] == "user_message"]
        assert messages == [saved["prompt"]], thread["steps"]
        # up, vLLM and its engine core, the chat, HAProxy and its TLS front
        stop_with_sigterm(env, name, assert_unprivileged_and_no_zombies(env, name, 5))
        assert_only_scratch_added(env, name)  # vLLM's caches too
        assert (containers.volume_path(env, volumes["run"]) / "llm.log").exists()
    finally:
        subprocess.run(["podman", "rm", "-f", "-t", "0", project], env=env, capture_output=True)
        subprocess.run([*compose, "down"], env=compose_env, capture_output=True, timeout=300)
        subprocess.run(["podman", "network", "rm", "-f", f"{project}_default"], env=env, capture_output=True)
        subprocess.run(["podman", "volume", "rm", "-f", *volumes.values()], env=env, capture_output=True)
