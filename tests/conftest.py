"""Shared fixtures: ONE real vLLM (CPU build, demo model), ONE PostgreSQL server and ONE
Chromium per test process (a full run has two: tests/support/schedule.py), each started at
its first use; and the apps that the tests of more than one folder use.

The engine is started by the supervisor's own code (``Stack.start_engine``), so
these tests also cover the environment setup, the demo
model build and the readiness wait that ``./scripts/up`` uses.

A test's folder says what it starts, and marks it (README, "Tests"): tests/unit/ starts
nothing; tests/app/ an app, the session's engine or PostgreSQL; tests/browser/ drives
Chromium; tests/engine/ vLLM itself or another server; tests/stack/ the whole stack;
tests/models/ several models; tests/network/ reaches a package registry; tests/deploy/ builds
the CPU image and runs it and compose.yaml with podman.  Helpers shared by the tests are in
tests/support/.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from server import chat_db
from server.paths import ROOT  # noqa: E402  (one definition of the root)
from server.passwords import hash_password
from server.settings import load_settings
from server.stack import engine_env, provision
from server.stack.processes import free_port
from server.stack.supervisor import Stack
from tests.support import openai_standin, postgres, schedule
from tests.support.admin import REPLY_TOKENS, TOO_LONG, USERS, XSS, chat, login
from tests.support.browser import CHROMIUM, CHROMIUM_ARGS
from tests.support.login import login_app_settings
from tests.support.search import write_chats
from tests.support.settings import APP_MAX_TOKENS, engine_settings, start_app

TESTS = Path(__file__).resolve().parent
GROUPS = pytest.StashKey[Path]()  # the file where the workers write the groups
# The folders, each its marker (pyproject.toml, [tool.pytest.ini_options]).
TIERS = ("unit", "app", "browser", "engine", "stack", "models", "network", "deploy")
# Seconds per module of the last full run (tests/support/schedule.py).
DURATIONS = TESTS / "data" / "durations.json"
# tests/deploy/ waits for the image ./scripts/test builds in the background: from nothing
# (a new machine, CI) that takes 6-10 minutes of a run, so its module goes out once the two
# processes have been given this many seconds of other modules.
IMAGE_BUILT_AFTER_S = 900


def pytest_addoption(parser):
    parser.addoption("--quick", action="store_true",
                     help="only the unit tests (tests/unit/): no vLLM, app, database, balancer, browser "
                          "or network")
    parser.addoption("--store-durations", action="store_true",
                     help=f"after a run of both processes (./scripts/test), write each module's seconds "
                          f"to {DURATIONS.relative_to(ROOT)}")


def pytest_configure(config):
    if hasattr(config, "workerinput"):
        return
    if config.getoption("--store-durations"):
        config.pluginmanager.register(schedule.Durations(DURATIONS), "durations")
    if getattr(config.option, "dist", "no") == "loadscope":
        config.stash[GROUPS] = Path(tempfile.mkdtemp(prefix="ernie-test-groups-")) / "groups.json"
        config.pluginmanager.register(schedule.Timeline(), "timeline")


def pytest_unconfigure(config):
    if GROUPS in config.stash:
        shutil.rmtree(config.stash[GROUPS].parent, ignore_errors=True)


def pytest_configure_node(node):
    """pytest-xdist, in the controller: where each worker writes the groups it found."""
    if GROUPS in node.config.stash:
        node.workerinput["groups_file"] = str(node.config.stash[GROUPS])


def pytest_xdist_make_scheduler(config, log):
    if GROUPS in config.stash:
        return schedule.ByConfiguration(config, log, config.stash[GROUPS])
    return None


def tier_of(path: Path) -> str | None:
    """The tier folder ``path`` is in (or is), if any."""
    try:
        first = Path(path).resolve().relative_to(TESTS).parts[0]
    except (ValueError, IndexError):
        return None
    return first if first in TIERS else None


def pytest_ignore_collect(collection_path, config):
    """``--quick`` collects tests/unit/ alone."""
    if config.getoption("--quick") and tier_of(collection_path) not in (None, "unit"):
        return True
    return None


def pytest_collection_modifyitems(config, items):
    for item in items:
        tier = tier_of(item.path)
        if tier:
            item.add_marker(tier)
    groups_file = getattr(config, "workerinput", {}).get("groups_file")
    if groups_file:
        share_out(items, Path(groups_file))


def share_out(items: list[pytest.Item], groups_file: Path) -> None:
    """The tests in their groups' order, longest first, and the groups for the controller
    (tests/support/schedule.py)."""
    module = {item: schedule.module_of(item.nodeid) for item in items}
    group = schedule.groups([(module[item], item.fixturenames) for item in items])
    # What needs no engine environment fills the other process's wait while it builds.
    fillers = {group[module[item]] for item in items if tier_of(item.path) in ("unit", "network")}
    late = frozenset(group[module[item]] for item in items if tier_of(item.path) == "deploy")
    ranked = schedule.order(group, schedule.load_seconds(DURATIONS), fillers, late, IMAGE_BUILT_AFTER_S)
    rank = {name: i for i, name in enumerate(ranked)}
    items.sort(key=lambda item: rank[group[module[item]]])  # a group keeps its order
    schedule.write_groups(groups_file, group)


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


# --- the engine, and the apps on it -------------------------------------------------------

@pytest.fixture(scope="session")
def engine_python() -> Path:
    """The engine environment's Python, installed as `up` installs it."""
    return engine_env.ensure_engine_env(Path(".venv-engine"), "cpu", ROOT, load_settings().torch_index_url)


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


# --- PostgreSQL: one server, a database for each module ------------------------------------

@pytest.fixture(scope="session")
def postgres_server():
    """The run's PostgreSQL server (tests/support/postgres.py), started at its first use."""
    yield from postgres.serve(free_port())


@pytest.fixture(scope="module")
def database(postgres_server):
    """A new database of the module's own on the run's server: its URL."""
    return postgres_server.new_database()


# --- Chromium: one browser, a new context for each page -----------------------------------

class _Playwright:
    """Playwright's sync API, started once: between its calls it marks its event loop as
    running in this thread, where ``asyncio.run`` (and pytest-asyncio) then refuse to run.
    The loop is marked only while a test holds the browser (``hold``), as it was while a
    module's own ``sync_playwright()`` ran."""

    def __init__(self):
        from playwright.sync_api import sync_playwright
        self.manager = sync_playwright()
        self.pw = self.manager.start()
        self.loop = asyncio.get_running_loop()  # marked by Playwright, this thread's
        try:
            self.browser = self.pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        except BaseException:
            self.manager.__exit__()
            raise
        finally:
            self.release()

    def hold(self) -> None:
        asyncio._set_running_loop(self.loop)

    def release(self) -> None:
        asyncio._set_running_loop(None)

    def stop(self) -> None:
        self.hold()
        try:
            self.browser.close()
        finally:
            self.manager.__exit__()
            self.release()


@pytest.fixture(scope="session")
def _chromium():
    chromium = _Playwright()
    yield chromium
    chromium.stop()


@pytest.fixture
def playwright(_chromium):
    """The session's Playwright (for a browser of other launch flags), held for this test."""
    _chromium.hold()
    yield _chromium.pw
    _chromium.release()


@pytest.fixture
def browser(_chromium, playwright):
    """The session's Chromium: a test opens contexts of its own (``new_context``) and closes them."""
    return _chromium.browser


@pytest.fixture
def page_factory(browser):
    contexts = []

    def make(url, locale="en-US"):
        context = browser.new_context(locale=locale, viewport={"width": 1100, "height": 800})
        contexts.append(context)
        page = context.new_page()
        page.goto(url)
        return page
    yield make
    for context in contexts:
        context.close()


@pytest.fixture
def new_page(browser):
    """``browser.new_page(**options)``: a page in a new context of its own, closed after the test."""
    pages = []

    def make(**options):
        pages.append(browser.new_page(**options))
        return pages[-1]
    yield make
    for page in pages:
        page.context.close()


# --- apps whose tests are in several folders (an app's HTTP side, and its page) ---------------

@pytest.fixture(scope="session", params=["sqlite", "postgres"])
def chatted(request, engine, tmp_path_factory):
    """An app with login (alice the admin) and saved chats, after bob's and carol's chats (bob
    shares his first one and takes the link back): (settings of each app, the tokens, the replies
    each user saw).  On PostgreSQL carol chats on a second app, as on another machine (a usage log
    of its own)."""
    engine_settings, _ = engine
    tmp = tmp_path_factory.mktemp(f"admin-{request.param}")
    chat_db = tmp / "chats.db" if request.param == "sqlite" else request.getfixturevalue("postgres_server").new_database()
    users = ",".join(f"{n}:{hash_password(p, rounds=4)}" for n, p in USERS.items())

    def app(folder: Path):
        folder.mkdir(exist_ok=True)
        return contextmanager(start_app)(folder, engine_url=engine_settings.engine_base_url, ignore_eos=True,
                                         max_tokens=REPLY_TOKENS, chat_db=chat_db, users=users, admins="alice",
                                         usage_log=folder / "usage.jsonl")
    with ExitStack() as stack:
        apps = [stack.enter_context(app(tmp / "first"))]
        if request.param == "postgres":
            apps.append(stack.enter_context(app(tmp / "second")))
        tokens = {name: login(apps[0].app_url, name) for name in USERS}

        async def chats():
            bob = await chat(apps[0].app_url, tokens["bob"], ["hello there", "and again", "/share", "/unshare"])
            bob += await chat(apps[0].app_url, tokens["bob"], ["a second chat"])
            carol = await chat(apps[-1].app_url, tokens["carol"], [XSS, TOO_LONG])
            return {"bob": bob, "carol": carol}
        # A thread of its own: Playwright's sync API holds this thread's event loop.
        with ThreadPoolExecutor(1) as pool:
            replies = pool.submit(asyncio.run, chats()).result()
        yield apps, tokens, replies


@pytest.fixture(scope="session", params=["sqlite", "postgres"])
def searching_app(request, tmp_path_factory):
    """The app with login and saved chats (no engine: searching needs none), and the personas of
    tests/data/personas-two.toml: (settings, ids)."""
    tmp = tmp_path_factory.mktemp(f"search-{request.param}")
    target = str(tmp / "chats.db") if request.param == "sqlite" else request.getfixturevalue("postgres_server").new_database()
    chat_db.prepare_db(target)
    with ThreadPoolExecutor(1) as pool:  # Playwright's sync API may hold this thread's event loop
        ids = pool.submit(asyncio.run, write_chats(target)).result()
    users = ",".join(f"{n}:{p}" for n, p in USERS.items())
    for settings in start_app(tmp, engine_url=f"http://127.0.0.1:{free_port()}", chat_db=target, users=users,
                              personas_file=TESTS / "data" / "personas-two.toml"):
        yield settings, ids


@pytest.fixture(scope="session")
def app_on_plain_server(tmp_path_factory):
    with openai_standin.running("plain", 4096) as url:
        yield from start_app(tmp_path_factory.mktemp("live-plain"), engine_url=url, max_tokens=64)


@pytest.fixture(scope="session")
def login_app(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("login")
    # PDFs read for 4 s at most: tests/app/test_attached_files.py sends PDFs that take longer.
    yield from start_app(tmp, **login_app_settings(tmp, chat_db=tmp / "chats.db", pdf_timeout_s=4))
