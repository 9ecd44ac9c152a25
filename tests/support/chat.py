"""Chats as the tests hold them: over the app's socket (as a browser tab would), and straight to the engine."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import httpx
import socketio

from app.web import boot_cookie
from app.engine import engine_client as ec
from app.engine.engine_client import make_client
from app.engine.server_info import ServerInfo, probe
from server.loadtest.lib.chat_record import SessionRecord
from server.loadtest.lib.chat_socket import SOCKET_PATH, ChatSession, user_step
from server.settings import load_settings
from server.stack.balancer import STICKY_COOKIE


async def open_chat(url: str) -> ChatSession:
    chat = ChatSession(SessionRecord(index=0, tag="", prompt=""))
    assert await chat.open(url), chat.record.error
    return chat


async def turn(chat: ChatSession, prompt: str) -> SessionRecord:
    chat.next_turn(prompt)
    await asyncio.wait_for(chat.ask(), 120)
    return chat.record


async def ask(client, settings, messages, **kw):
    stats = ec.ReplyStats()
    pieces = [p async for p in ec.stream_reply(
        client, settings.served_model_name, messages, stats,
        temperature=0.7, top_p=0.9, max_tokens=kw.pop("max_tokens", 48), **kw)]
    return pieces, stats


async def forged_chat(url: str, cookie: str, profile: str) -> list[dict]:
    """A chat over the raw socket whose chatProfile is ``profile``, one message in it; the
    messages the app sent, once the reply came with its figures."""
    shown: list[dict] = []
    welcomed, replied = asyncio.Event(), asyncio.Event()
    client = socketio.AsyncClient(reconnection=False)

    async def on_message(data):
        metadata = data.get("metadata")
        metadata = json.loads(metadata) if isinstance(metadata, str) else metadata or {}
        kind, output = metadata.get("kind"), data.get("output") or ""
        shown.append({"kind": kind, "output": output})
        if kind in ("welcome", "error"):
            welcomed.set()
        if kind == "error" or kind == "reply" and "⏱" in output:
            replied.set()
    client.on("new_message", on_message)
    client.on("update_message", on_message)

    await client.connect(url, socketio_path=SOCKET_PATH, transports=["websocket"], headers={"Cookie": cookie},
                         auth={"sessionId": str(uuid.uuid4()), "clientType": "webapp", "threadId": "",
                               "userEnv": "{}", "chatProfile": profile}, wait_timeout=30)
    try:
        await client.emit("connection_successful")
        await asyncio.wait_for(welcomed.wait(), 60)
        await client.emit("client_message", {"message": user_step("Who answers?"), "fileReferences": []})
        await asyncio.wait_for(replied.wait(), 180)
    finally:
        await client.disconnect()
    return shown

USER, PASSWORD = "alice", "wonderland-4711"


def login_cookie(url: str) -> str:
    """The login's cookies, without the worker pin the balancer set on the login's answer:
    each chat of these tests stands for a browser of its own."""
    with httpx.Client(base_url=url, timeout=30) as http:
        answer = http.post("/login", data={"username": USER, "password": PASSWORD})
        assert answer.status_code == 200, answer.text
        return "; ".join(f"{k}={v}" for k, v in http.cookies.items() if k != STICKY_COOKIE)


def run(coro):
    return asyncio.new_event_loop().run_until_complete(coro)


async def chats(url: str, cookie: str, prompts: list[str], reply_tokens: int = 0) -> list[ChatSession]:
    """Chats opened at once, each to ask its prompt; ``reply_tokens``: their replies' length, as
    each chat's settings panel sets it (else the app's ERNIE_MAX_TOKENS)."""
    sessions = [ChatSession(SessionRecord(i, "", p)) for i, p in enumerate(prompts)]
    opened = await asyncio.gather(*(s.open(url, headers={"Cookie": cookie}) for s in sessions))
    assert all(opened), [s.record.error for s in sessions]
    if reply_tokens:
        await asyncio.gather(*(replies_of(s, reply_tokens) for s in sessions))
    return sessions


async def replies_of(session: ChatSession, tokens: int) -> None:
    """The chat's next replies ``tokens`` long, set as its settings panel does; returns once the
    app has applied it (Socket.IO acknowledges an event when its handler has returned)."""
    await session.sio.call("chat_settings_change", {"max_tokens": tokens}, timeout=60)


def page_of_worker(url: str, worker: int, cookie: str = "") -> str:
    """The cookies a browser pinned to ``worker`` holds after loading the chat page there:
    the login (if any), the pin, and the page's boot id (app/web/boot_cookie.py)."""
    pinned = "; ".join(c for c in (cookie, f"{STICKY_COOKIE}=w{worker}") if c)
    with httpx.Client(base_url=url, timeout=30) as http:
        page = http.get("/", headers={"Cookie": pinned})
        assert page.status_code == 200 and boot_cookie.COOKIE in page.cookies
        return f"{pinned}; {boot_cookie.COOKIE}={page.cookies[boot_cookie.COOKIE]}"


async def until(condition, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def probed(url, **overrides) -> ServerInfo:
    settings = load_settings(engine_url=url, **overrides)
    async with httpx.AsyncClient(timeout=10) as http:
        return await probe(make_client(settings), http, settings)
