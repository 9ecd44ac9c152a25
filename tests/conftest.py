"""Shared fixtures: ONE real vLLM (CPU build, demo model) per test session, and the app.

The engine is started by the supervisor's own code (``Stack.start_engine``), so
these tests also cover the environment setup, the demo
model build and the readiness wait that ``./scripts/up`` uses.
"""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from server.auth_store import PostgresStore, SqliteStore
from server.paths import ROOT  # noqa: E402  (one definition of the root)
from server.settings import load_settings
from server.stack import provision
from server.stack.processes import free_port
from server.stack.supervisor import Stack
from tests import postgres

# Fixtures that start real processes (vLLM, a Chainlit app, PostgreSQL, HAProxy, Chromium,
# another server) or reach a registry: a test that uses one, even through another fixture, is
# in the full tier only.  `./scripts/test --quick` runs the rest (README, "Tests"); a test that
# starts a process through a fixture not named here is skipped there by `_quick_tier_guard`.
ENGINE_FIXTURES = {"engine", "engine_python", "demo_model"}
NETWORK_FIXTURES = {"pypi", "app_envs", "oidc_package"}
PROCESS_FIXTURES = {
    "chat_app", "saved_chats_app", "app_without_engine", "short_app", "showcase_app",
    "short_replies_app", "login_app", "balanced_login_app", "app_on_plain_server", "app_with_login",
    "chat_on_plain_server", "chat_on_transformers", "transformers_server", "plain_server",
    "llamacpp_server", "database", "stack", "browser", "page_factory", "stand_in_index", "fresh_box",
    "scripted", "listening_port", "workers", "changed_app", "balanced_app", "guarded_app",
    "oidc_app", "tls_app", "team_tls_app", "searching_app",
}
TIER_MARKERS = ("engine", "browser", "stack", "network")


def pytest_addoption(parser):
    parser.addoption("--quick", action="store_true",
                     help="only the unit tests: no vLLM, app, database, balancer, browser or network")


def pytest_collection_modifyitems(config, items):
    for item in items:
        used = set(item.fixturenames)
        for marker, fixtures in (("engine", ENGINE_FIXTURES), ("stack", PROCESS_FIXTURES),
                                 ("network", NETWORK_FIXTURES)):
            if used & fixtures:
                item.add_marker(marker)
    if not config.getoption("--quick"):
        return
    quick = [i for i in items if not any(i.get_closest_marker(m) for m in TIER_MARKERS)]
    config.hook.pytest_deselected(items=[i for i in items if i not in quick])
    items[:] = quick


@pytest.fixture(autouse=True, scope="session")
def _quick_tier_guard(request):
    """In the quick tier, whatever starts one of the stack's processes or PostgreSQL skips its test."""
    if not request.config.getoption("--quick"):
        yield
        return
    from server.stack.processes import ManagedProcess
    from tests import postgres

    def refuse(what):
        def skip(*args, **kwargs):
            pytest.skip(f"the quick tier starts no {what}: mark the fixture in tests/conftest.py")
        return skip
    patch = pytest.MonkeyPatch()
    patch.setattr(ManagedProcess, "start", refuse("process of the stack"))
    patch.setattr(postgres, "start", refuse("PostgreSQL"))
    yield
    patch.undo()


# Long enough for replies that outlast a slow /metrics poll on 2 busy cores (the demo
# model decodes ~400 tokens/s here), small enough for the fitting tests to reach.
TEST_MAX_MODEL_LEN = 4096


def engine_settings(tmp: Path, **overrides):
    values = dict(
        model="demo",
        engine_port=free_port(),
        app_port=free_port(),
        metrics_port=free_port(),  # the app's /metrics: several apps run at once
        log_file=tmp / "llm.log",
        auth_db=tmp / "auth.db",  # each app its own login counts, not the checkout's data/
        live_chats_dir=tmp / "live-chats",
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


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    """No ERNIE_* variable and no .env of the developer's may reach a test that reads settings:
    a module takes it with ``pytestmark = pytest.mark.usefixtures("clean_env")``."""
    for key in list(os.environ):
        if key.startswith("ERNIE_"):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)


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
    try:
        stack.start_engine()
        yield settings, stack
    finally:
        stack.stop()


def start_app(tmp: Path, **overrides):
    """A Chainlit app started by the supervisor's code; yields its settings."""
    settings = engine_settings(tmp, **overrides)
    stack = Stack(settings, root=ROOT)
    try:
        stack.start_app()
        yield settings
    finally:
        stack.stop()


def start_balanced_app(tmp: Path, **overrides):
    """App workers (``app_workers``) behind HAProxy, which tells them each client's address
    (forwardfor); yields their settings."""
    stack = Stack(engine_settings(tmp, **overrides), root=ROOT)
    try:
        stack.plan()
        stack.start_balancer()
        stack.start_app()
        yield stack.settings
    finally:
        stack.stop()


# Replies of a known length: ignore_eos makes every reply run to max_tokens.
APP_MAX_TOKENS = 3000


@pytest.fixture(scope="session")
def chat_app(engine, tmp_path_factory):
    """The chat, talking to the session engine."""
    settings, _ = engine
    yield from start_app(tmp_path_factory.mktemp("app"), engine_url=settings.engine_base_url,
                         ignore_eos=True, max_tokens=APP_MAX_TOKENS)


@pytest.fixture(scope="session")
def saved_chats_app(engine, tmp_path_factory):
    """The chat with login and saved chats on a real SQLite file."""
    settings, _ = engine
    tmp = tmp_path_factory.mktemp("saved")
    yield from start_app(tmp, engine_url=settings.engine_base_url, ignore_eos=True,
                         max_tokens=24, chat_db=tmp / "chats.db", users="alice:wonderland")


@pytest.fixture(scope="session")
def app_without_engine(tmp_path_factory):
    """The chat pointed at a port where nothing listens: the engine is down."""
    yield from start_app(tmp_path_factory.mktemp("down"),
                         engine_url=f"http://127.0.0.1:{free_port()}")


@pytest.fixture(scope="module")
def database():
    """A PostgreSQL server of the module's own."""
    yield from postgres.start(free_port())


@pytest.fixture(params=["sqlite", "postgres"])
def new_store(request, tmp_path):
    """Makes login stores (each a worker's connections) on one SQLite file or one PostgreSQL
    database."""
    if request.param == "sqlite":
        return lambda: SqliteStore(tmp_path / "auth.db")
    url = request.getfixturevalue("database")
    return lambda: PostgresStore(url)


def metric(base_url: str, name: str, **labels: str) -> float:
    """Sum of a Prometheus series over the label sets that match ``labels``, from /metrics."""
    return metric_from_text(httpx.get(f"{base_url}/metrics", timeout=5).text, name, **labels)


async def metric_async(base_url: str, name: str, **labels: str) -> float:
    async with httpx.AsyncClient(timeout=5) as http:
        return metric_from_text((await http.get(f"{base_url}/metrics")).text, name, **labels)


def metric_from_text(body: str, name: str, **labels: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families
    total, seen = 0.0, False
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
                seen = True
    if not seen:
        raise KeyError(f"{name} {labels or ''} not in /metrics")
    return total
