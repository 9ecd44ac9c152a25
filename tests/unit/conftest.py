"""The unit tests start nothing: no process of the stack (vLLM, an app, HAProxy, Prometheus),
no PostgreSQL, no Chromium, no stand-in server.  One that does, itself or through a fixture,
fails here, saying where it belongs: the folder of what it starts (README, "Tests")."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def refuse(what: str):
    def fail(*args, **kwargs):
        pytest.fail(f"a unit test starts no {what}: move it to the folder of what it starts "
                    "(tests/app/, tests/browser/, tests/stack/ ...)", pytrace=False)
    return fail


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Around the whole test, its fixtures' set-up included (a fixture of a wider scope is set
    up before any of the test's own).  pytest calls this hook for every test of the run, not
    only for those below this conftest, so it leaves the other folders' tests alone."""
    if HERE not in item.path.parents:
        yield
        return
    from playwright.sync_api import BrowserType

    from server.stack.processes import ManagedProcess
    from tests.support import openai_standin, postgres

    patch = pytest.MonkeyPatch()
    patch.setattr(ManagedProcess, "start", refuse("process of the stack"))
    patch.setattr(postgres, "serve", refuse("PostgreSQL"))
    patch.setattr(BrowserType, "launch", refuse("browser"))
    patch.setattr(openai_standin, "running", refuse("stand-in server"))
    try:
        yield
    finally:
        patch.undo()
