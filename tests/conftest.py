"""Shared fixtures: ONE real vLLM (CPU build, demo model) per test session, and the app.

The engine is started by the supervisor's own code (``Stack.prepare_engine`` /
``start_engine``), so these tests also cover the environment setup, the demo
model build and the readiness wait that ``./scripts/up`` uses.
"""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from server import provision
from server.processes import free_port
from server.settings import load_settings
from server.supervisor import Stack

ROOT = Path(__file__).resolve().parent.parent
# Small enough that the context-fitting tests hit the limit with short texts.
TEST_MAX_MODEL_LEN = 1024


def engine_settings(tmp: Path, **overrides):
    values = dict(
        model="demo",
        engine_port=free_port(),
        app_port=free_port(),
        log_file=tmp / "llm.log",
        max_model_len=TEST_MAX_MODEL_LEN,
        kv_cache_gib=1,
        max_tokens=64,
        startup_timeout_s=900,
    )
    values.update(overrides)
    return load_settings(**values)


@pytest.fixture(autouse=True, scope="session")
def _isolated_env():
    """A developer's .env or ERNIE_* variables must not change what the tests run."""
    saved = {k: v for k, v in os.environ.items() if k.startswith("ERNIE_")}
    for key in saved:
        del os.environ[key]
    cwd = os.getcwd()
    os.chdir(ROOT / "tests")  # no .env here
    yield
    os.chdir(cwd)
    os.environ.update(saved)


@pytest.fixture(scope="session")
def engine_python() -> Path:
    """The engine environment's Python, installed as `up` installs it."""
    return provision.ensure_engine_env(Path(".venv-engine"), "cpu", ROOT)


@pytest.fixture(scope="session")
def demo_model(engine_python) -> Path:
    return provision.ensure_demo_model(ROOT / ".cache" / "demo-model", engine_python, ROOT)


@pytest.fixture(scope="session")
def engine(tmp_path_factory):
    """A running vLLM serving the demo model: yields (settings, stack)."""
    tmp = tmp_path_factory.mktemp("engine")
    settings = engine_settings(tmp)
    stack = Stack(settings, root=ROOT)
    stack.engine = stack.prepare_engine()
    try:
        stack.start_engine()
        yield settings, stack
    finally:
        stack.stop()


@pytest.fixture(scope="session")
def chat_app(engine, tmp_path_factory):
    """The Chainlit app, started by the supervisor's code, talking to the session engine."""
    settings, _ = engine
    tmp = tmp_path_factory.mktemp("app")
    app_settings = engine_settings(tmp, engine_url=settings.engine_base_url,
                                   engine_port=settings.engine_port)
    stack = Stack(app_settings, root=ROOT)
    stack.app = stack.prepare_app()
    try:
        stack.start_app()
        yield app_settings
    finally:
        stack.stop()


def metric(base_url: str, name: str) -> float:
    """Sum of a Prometheus gauge/counter over its label sets, read from /metrics."""
    from prometheus_client.parser import text_string_to_metric_families
    body = httpx.get(f"{base_url}/metrics", timeout=5).text
    total, seen = 0.0, False
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            if sample.name == name:
                total += sample.value
                seen = True
    if not seen:
        raise KeyError(f"{name} not in /metrics")
    return total
