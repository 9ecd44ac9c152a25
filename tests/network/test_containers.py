"""The CPU image (deploy/Containerfile) and compose.yaml, built and run for real with Debian's
podman and podman-compose (tests/support/containers.py says how, on machines without an
image registry): `up` as PID 1 serves chats sent by `qa-load`, stops on SIGTERM with nothing
left, keeps its state in volumes, and a new container on the same volumes reopens the saved
chats. Run with --containers (./scripts/test --containers); skipped where podman cannot be
installed (not root, or no apt-get).

The demo model goes into the state volume from this checkout's .cache (the suite builds it
anyway), as a first start would have left it: building it in the container costs minutes."""

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
def podman_env(tmp_path_factory, pytestconfig):
    if not pytestconfig.getoption("--containers"):
        # Building the image from nothing takes 9-15 minutes on 2 cores: more than the
        # rest of a full run may add to it.
        pytest.skip("the container images are built with --containers (./scripts/test --containers)")
    if reason := containers.why_no_podman():
        pytest.skip(reason)
    return containers.environment(tmp_path_factory.mktemp("podman"))


@pytest.fixture(scope="module")
def image(podman_env, tmp_path_factory) -> str:
    return containers.build_image(podman_env, tmp_path_factory.mktemp("build"))


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


def assert_unprivileged_and_no_zombies(env: dict[str, str], name: str) -> list[int]:
    processes = containers.container_processes(env, name)
    assert len(processes) > 3, processes  # up, vLLM and its engine core, the chat worker ...
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


def reopened(url: str, thread_id: str, verify: bool | ssl.SSLContext = True) -> dict:
    with httpx.Client(base_url=url, timeout=30, verify=verify) as http:
        assert http.post("/login", data={"username": "alice", "password": PASSWORD}).status_code == 200
        response = http.get(f"/project/thread/{thread_id}")
    assert response.status_code == 200, response.text
    return response.json()


def test_the_image_serves_stops_on_sigterm_keeps_its_state_and_reopens_chats(
        image, podman_env, users, demo_model, tmp_path):
    env, name = podman_env, f"ernie-chat-test-{os.getpid()}"
    volumes = {key: f"{name}-{key}" for key in VOLUMES}
    containers.seed_volume(env, volumes["state"], demo_model, "demo-model")
    app_port, engine_port, metrics_port = free_port(), free_port(), free_port()
    run = ["run", "-d", "--name", name, "--network", "host",
           "-e", "ERNIE_MODEL=demo", "-e", f"ERNIE_USERS={users}", "-e", "ERNIE_CHAT_DB=data/chats.db",
           "-e", f"ERNIE_APP_PORT={app_port}", "-e", f"ERNIE_ENGINE_PORT={engine_port}",
           "-e", f"ERNIE_METRICS_PORT={metrics_port}",
           *[arg for key, path in VOLUMES.items() for arg in ("-v", f"{volumes[key]}:{path}")], image]
    url = f"http://127.0.0.1:{app_port}"
    try:
        containers.podman(env, *run)
        logs = wait_for_chat(env, name)
        assert "building the demo model" not in logs  # the seeded one was current
        assert "Serving the built-in DEMO model" in logs
        # The image's HEALTHCHECK, run as podman's timer would (no systemd here to run one);
        # podman fails on an unhealthy answer.
        containers.podman(env, "healthcheck", "run", name)
        result = qa_load(url)
        thread_id = result["sessions"][0]["thread_id"]
        assert thread_id
        pids = assert_unprivileged_and_no_zombies(env, name)
        stop_with_sigterm(env, name, pids)

        # Every file `up` keeps is in a volume: the container's own layer holds scratch only.
        added = [line.split(" ", 1)[1] for line in containers.podman(env, "diff", name).splitlines()
                 if line.startswith("A ")]
        assert added and [path for path in added if not path.startswith(SCRATCH)] == []
        data, state = containers.volume_path(env, volumes["data"]), containers.volume_path(env, volumes["state"])
        assert (data / "chats.db").stat().st_size > 0 and (data / "usage.jsonl").exists()
        assert (containers.volume_path(env, volumes["run"]) / "llm.log").exists()
        assert (state / "chainlit-auth-secret").exists()

        # A new container of the image on the same volumes: the saved chat reopens.
        containers.podman(env, "rm", name)
        containers.podman(env, *run)
        wait_for_chat(env, name)
        thread = reopened(url, thread_id)
        messages = [step["output"] for step in thread["steps"] if step["type"] == "user_message"]
        assert messages == [result["sessions"][0]["prompt"]], thread["steps"]
        stop_with_sigterm(env, name, [pid for pid, _ in containers.container_processes(env, name)])
    finally:
        subprocess.run(["podman", "rm", "-f", "-t", "0", name], env=env, capture_output=True)
        subprocess.run(["podman", "volume", "rm", "-f", *volumes.values()], env=env, capture_output=True)


def test_compose_up_serves_an_exposed_chat_with_login_and_https(image, podman_env, users, demo_model, tmp_path):
    """compose.yaml as it is, its image built above: the chat on the container's every address,
    published on the host's loopback only here, behind a login and HTTPS with the local CA."""
    project, app_port = f"ernie-chat-compose-{os.getpid()}", free_port()
    env = {**podman_env, "ERNIE_USERS": users, "ERNIE_MODEL": "demo", "ERNIE_APP_PORT": str(app_port),
           "PUBLISH_ADDRESS": "127.0.0.1"}
    compose = ["podman-compose", "-p", project, "-f", str(containers.COMPOSE_FILE)]
    containers.seed_volume(env, f"{project}_state", demo_model, "demo-model")
    try:
        done = subprocess.run([*compose, "up", "-d", "--no-build"], env=env, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        name = containers.podman(env, "ps", "-a", "--filter", f"label=io.podman.compose.project={project}",
                                 "--format", "{{.Names}}")
        logs = wait_for_chat(env, name)
        url = f"https://127.0.0.1:{app_port}"
        assert f"Chat:   {url}" in logs
        containers.podman(env, "healthcheck", "run", name)  # compose's check, on HTTPS
        assert httpx.get(f"http://127.0.0.1:{app_port}/").status_code == 308  # plain HTTP: a redirect
        ca = tmp_path / "ca.pem"  # the local CA made at the first start, in the state volume
        ca.write_bytes((containers.volume_path(env, f"{project}_state") / "tls" / "ca.pem").read_bytes())
        result = qa_load(url, ("SSL_CERT_FILE", str(ca)))
        assert reopened(url, result["sessions"][0]["thread_id"], verify=ssl.create_default_context(cafile=ca))["steps"]
        stop_with_sigterm(env, name, [pid for pid, _ in containers.container_processes(env, name)])
        assert (containers.volume_path(env, f"{project}_data") / "chats.db").stat().st_size > 0
    finally:
        subprocess.run([*compose, "down", "-v"], env=env, capture_output=True, timeout=300)
        subprocess.run(["podman", "network", "rm", "-f", f"{project}_default"], env=env, capture_output=True)
        subprocess.run(["podman", "volume", "rm", "-f", *[f"{project}_{key}" for key in VOLUMES]],
                       env=env, capture_output=True)
