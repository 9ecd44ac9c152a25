"""The unit tests start nothing: no process of the stack (vLLM, an app, HAProxy, Prometheus),
no PostgreSQL, no Chromium, no stand-in server.  One that does fails here, saying where it
belongs: the folder of what it starts (README, "Tests")."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _starts_nothing(monkeypatch):
    from playwright.sync_api import BrowserType

    from server.stack.processes import ManagedProcess
    from tests.support import openai_standin, postgres

    def refuse(what):
        def fail(*args, **kwargs):
            pytest.fail(f"a unit test starts no {what}: move it to the folder of what it starts "
                        "(tests/app/, tests/browser/, tests/stack/ ...)", pytrace=False)
        return fail
    monkeypatch.setattr(ManagedProcess, "start", refuse("process of the stack"))
    monkeypatch.setattr(postgres, "serve", refuse("PostgreSQL"))
    monkeypatch.setattr(BrowserType, "launch", refuse("browser"))
    monkeypatch.setattr(openai_standin, "running", refuse("stand-in server"))
