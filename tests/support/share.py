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


async def heavy_shared_chat(target: str, owner: str, url: str, turns: int = 50) -> str:
    """A saved chat of ``owner`` with ``turns`` exchanges of 20 KB of emphasis-heavy Markdown
    each (1 MB in all, the costliest text for the page's renderer), shared: its link."""
    from chainlit.user import User

    layer = data_layer(target)
    try:
        user = await layer.get_user(owner) or await layer.create_user(User(identifier=owner))
        thread = str(uuid.uuid4())
        await layer.update_thread(thread, name="a heavy chat", user_id=user.id)
        text = ("*a* **b** _c_ __d__ ~~e~~ `f` [g](http://x) " * 500)[:10_000]
        # Written as the app's data layer writes steps (Chainlit's create_step needs a chat's context).
        for i in range(turns):
            for kind, metadata in (("user_message", "{}"), ("assistant_message", '{"kind": "reply"}')):
                await layer.execute_sql(
                    'INSERT INTO steps ("id", "name", "type", "threadId", "streaming", "metadata", "output", '
                    '"createdAt") VALUES (:id, :name, :type, :thread, false, :metadata, :output, :at)',
                    {"id": str(uuid.uuid4()), "name": owner, "type": kind, "thread": thread,
                     "metadata": metadata, "output": text,
                     "at": f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}.{len(kind):03d}Z"})
        return (await share_links.share(layer, thread, owner, url)).link(url)
    finally:
        await layer.engine.dispose()
