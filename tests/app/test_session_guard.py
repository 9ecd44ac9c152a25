"""The session-id attack, performed on the real chat: an id that is a path must not reach Chainlit.

A raw socket.io client chooses its own session id, as an attacker's would.  Without
app/web/session_guard.py, Chainlit 2.12 stores ``../../x`` or ``/abs/path`` as the id, deletes
that directory when the session is cleared, and writes uploads into it.
"""

from __future__ import annotations

import asyncio
import secrets
import shutil
import uuid

import httpx
import pytest
import socketio

from server.paths import ROOT

SOCKET_PATH = "/ws/socket.io"


def auth(session_id: str) -> dict:
    return {"sessionId": session_id, "clientType": "webapp", "userEnv": "{}", "threadId": ""}


async def open_session(url: str, session_id: str) -> socketio.AsyncClient | None:
    """The connected client, or None when the chat refused the connection."""
    client = socketio.AsyncClient(reconnection=False)
    try:
        await client.connect(url, socketio_path=SOCKET_PATH, transports=["websocket"],
                             auth=auth(session_id), wait_timeout=10)
    except socketio.exceptions.ConnectionError:
        return None
    return client


async def clear_and_leave(client: socketio.AsyncClient) -> None:
    await client.emit("clear_session")
    await asyncio.sleep(0.3)
    await client.disconnect()
    await asyncio.sleep(1.0)  # Chainlit clears the session in its disconnect handler


@pytest.fixture
def victims(tmp_path):
    """Two directories with a file each, and the ids that point at them from the files folder.

    The worker's files folder is ``<root>/.files/worker-<pid>``, so ``../../.cache/x`` is
    ``<root>/.cache/x``; an absolute id replaces the base altogether.
    """
    name = f"victim-{secrets.token_hex(4)}"
    relative = ROOT / ".cache" / name
    absolute = tmp_path / "victim-abs"
    for folder in (relative, absolute):
        folder.mkdir(parents=True)
        (folder / "keep.txt").write_text("precious")
    yield {f"../../.cache/{name}": relative, str(absolute): absolute}
    shutil.rmtree(relative, ignore_errors=True)


def intact(folder) -> bool:
    return sorted(p.name for p in folder.iterdir()) == ["keep.txt"]


async def test_a_session_id_that_is_a_path_cannot_delete_a_directory(app_without_engine, victims):
    url = app_without_engine.app_url
    # The client works: a UUID opens a session as the browser's does.
    honest = await open_session(url, str(uuid.uuid4()))
    assert honest is not None, "the chat refused an ordinary session: the test's client is broken"
    await honest.disconnect()

    for session_id, folder in victims.items():
        client = await open_session(url, session_id)
        if client is not None:
            await clear_and_leave(client)
        assert folder.is_dir() and intact(folder), f"session id {session_id!r} reached {folder}"
        assert client is None, f"the chat accepted the session id {session_id!r}"


async def test_an_upload_cannot_name_a_path_as_its_session(app_without_engine, victims):
    url = app_without_engine.app_url
    for session_id, folder in victims.items():
        client = await open_session(url, session_id)  # refused: no such session can exist
        async with httpx.AsyncClient(timeout=10) as http:
            answer = await http.post(f"{url}/project/file", params={"session_id": session_id},
                                     files={"file": ("evil.txt", b"planted", "text/plain")})
        if client is not None:
            await client.disconnect()
        assert intact(folder), f"an upload for session {session_id!r} wrote into {folder}"
        assert answer.status_code == 400 and "session id" in answer.json()["detail"]

    # An ordinary session still uploads, into its own folder under the files directory.
    session_id = str(uuid.uuid4())
    client = await open_session(url, session_id)
    async with httpx.AsyncClient(timeout=10) as http:
        answer = await http.post(f"{url}/project/file", params={"session_id": session_id},
                                 files={"file": ("notes.txt", b"fine", "text/plain")})
    await client.disconnect()
    assert answer.status_code == 200, answer.text
