"""A chat database that is down stops `up` before anything starts."""

from __future__ import annotations


import pytest

from server.settings import load_settings
from server.stack.engine_tier import StartupFailed
from server.stack.processes import free_port
from server.stack.supervisor import Stack


def test_a_database_that_is_down_stops_up_at_once_with_a_clear_message(tmp_path):
    port = free_port()
    settings = load_settings(chat_db=f"postgresql://bob:pw-7f3a@127.0.0.1:{port}/chats",
                             users="bob:x", engine_port=free_port(), app_port=free_port())
    with pytest.raises(StartupFailed) as info:
        Stack(settings, root=tmp_path, out=lambda _: None).check_before_start()
    message = str(info.value)
    assert "PostgreSQL cannot be used" in message and f"127.0.0.1:{port}" in message
    assert "pw-7f3a" not in message
