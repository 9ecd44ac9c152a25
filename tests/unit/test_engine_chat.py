"""The app's client code when the engine cannot be reached."""

from __future__ import annotations


import pytest

from app.engine import engine_client as ec
# Imported here, not in a test: Chainlit writes a .chainlit/ folder into the working
# directory it is first imported from, and the tests run in tests/.
from tests.support.chat import ask


async def test_unreachable_engine_is_classified():
    from server.settings import load_settings
    from server.stack.processes import free_port
    client = ec.make_client(load_settings(engine_url=f"http://127.0.0.1:{free_port()}"))
    with pytest.raises(Exception) as info:
        await ask(client, load_settings(), [{"role": "user", "content": "hi"}])
    assert ec.error_kind(info.value) == "unreachable"
