"""app/web/chainlit_speed.py: building a Chainlit Message or Step no longer blocks the event loop;
app/serve.py: a worker's event loop keeps asyncio's C tasks."""

from __future__ import annotations

import subprocess
import sys
import time

import chainlit as cl
from chainlit.context import ChainlitContextException
import pytest

import app.web.chainlit_speed as speed
from app.conversation.personas import chat_profiles
from server.paths import ROOT


def build_both() -> None:
    # Outside a chat there is no Chainlit context: the constructors fail after their sleep.
    for build in (lambda: cl.Message(content="x"), lambda: cl.Step(name="s")):
        with pytest.raises(ChainlitContextException):
            build()


def test_chainlit_sleeps_in_every_message_and_step_and_the_app_takes_it_out(monkeypatch):
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    for name in speed.MODULES:                            # Chainlit as shipped
        monkeypatch.setattr(sys.modules[name], "time", time)
    build_both()
    assert slept == [0.001, 0.001], "Chainlit no longer sleeps here: drop app/web/chainlit_speed.py"
    slept.clear()
    for name in speed.MODULES:                            # as app/chat.py imports it
        monkeypatch.setattr(sys.modules[name], "time", speed.NO_SLEEP)
    build_both()
    assert slept == []


def loop_classes(entry: str) -> str:
    """The Task and Future classes of a loop in a fresh process that imported ``entry``."""
    code = (f"import {entry}, asyncio\n"
            "async def main():\n"
            "    return type(asyncio.current_task()).__module__, type(asyncio.get_running_loop().create_future()).__module__\n"
            "print(*asyncio.run(main()))")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          cwd=ROOT).stdout.strip()


def test_chainlits_cli_makes_the_loop_pure_python_and_the_workers_entry_point_does_not():
    assert loop_classes("chainlit.cli") != "_asyncio _asyncio", \
        "chainlit.cli no longer applies nest_asyncio: app/serve.py can go"
    assert loop_classes("app.serve") == "_asyncio _asyncio"


def test_the_personas_override_no_config():
    # Without nest_asyncio Chainlit cannot ask set_chat_profiles for config_overrides
    # inside the loop (app/serve.py) and keeps its global config: right only while none has any.
    assert all(profile.config_overrides is None for lang in ("en", "zh") for profile in chat_profiles(lang))
