"""The engine's command line as the supervisor builds it, for the tests."""

from __future__ import annotations

from server.settings import load_settings
from server.stack.engine_args import engine_command

PYTHON = "/opt/engine/bin/python"
MODEL = "baidu/ERNIE-4.5-0.3B-PT"


def command(device: str, **overrides):
    return engine_command(load_settings(**overrides), MODEL, device, PYTHON)
