"""app/chainlit_speed.py: building a Chainlit Message or Step no longer blocks the event loop."""

from __future__ import annotations

import time

import sys

import chainlit as cl
from chainlit.context import ChainlitContextException
import pytest

import app.chainlit_speed as speed


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
    assert slept == [0.001, 0.001], "Chainlit no longer sleeps here: drop app/chainlit_speed.py"
    slept.clear()
    for name in speed.MODULES:                            # as app/chat.py imports it
        monkeypatch.setattr(sys.modules[name], "time", speed.NO_SLEEP)
    build_both()
    assert slept == []
