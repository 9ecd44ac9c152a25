"""Sharing a saved chat: the owner-only scenario on a chat database, and reading QR codes back."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from app.pages import share_links
from app.kept.saved_chats import data_layer
from server import chat_db


# What content must never run on the shared page: a script, an event handler, a script link.
XSS = ("**bold** <script>window.pwned = 1</script> <img src=x onerror=\"window.pwned = 1\"> "
       "[click](javascript:window.pwned=1)")


def decoded(png: Path) -> str:
    """What a real QR decoder reads in the image."""
    zbarimg = shutil.which("zbarimg")
    assert zbarimg, "zbarimg is missing: apt-get install zbar-tools (./scripts/test does)"
    run = subprocess.run([zbarimg, "--quiet", "--raw", str(png)], capture_output=True, text=True, timeout=30)
    assert run.returncode == 0, run.stderr
    return run.stdout.strip()


# --- the store, on real chat databases: SQLite and PostgreSQL ------------------------

async def owner_only_scenario(target: str) -> None:
    from chainlit.user import User

    chat_db.prepare_db(target)
    layer = data_layer(target)
    alice = await layer.create_user(User(identifier="alice"))
    thread = str(uuid.uuid4())
    await layer.update_thread(thread, name="apricots", user_id=alice.id)

    with pytest.raises(share_links.NotOwner):
        await share_links.share(layer, thread, "bob", "http://x")
    with pytest.raises(share_links.NotOwner):
        await share_links.unshare(layer, thread, "bob")
    with pytest.raises(share_links.NothingToShare):
        await share_links.share(layer, str(uuid.uuid4()), "alice", "http://x")
    with pytest.raises(share_links.NothingToShare):
        await share_links.share(layer, None, "alice", "http://x")

    shared = await share_links.share(layer, thread, "alice", "http://x")
    assert share_links.TOKEN.fullmatch(shared.token) and shared.owner == "alice"
    assert shared.thread_id == thread
    assert await share_links.share(layer, thread, "alice", "http://y") == shared  # one link per chat
    assert await share_links.find(layer, shared.token) == shared
    assert await share_links.find(layer, "A" * 43) is None
    assert await share_links.find(layer, "'; DROP TABLE shares; --") is None
    assert await share_links.unshare(layer, thread, "alice") is True
    assert await share_links.find(layer, shared.token) is None
    assert await share_links.unshare(layer, thread, "alice") is False
    again = await share_links.share(layer, thread, "alice", "http://x")
    assert again.token != shared.token  # a new link: the old one stays dead
    await layer.engine.dispose()
