"""A signed-in chat driven over the app's own routes, as a client that skips the browser's
checks would: uploads to ``POST /project/file`` and messages naming them on the socket."""

from __future__ import annotations

import asyncio
import json
import uuid

import httpx
import socketio

from server.loadtest.lib.chat_socket import SOCKET_PATH, user_step
from server.paths import ROOT
from tests.support.chat import until


class SocketChat:
    """One chat of a signed-in user: its uploads, its messages, and the errors the app showed."""

    def __init__(self, url: str, cookies: dict):
        self.url, self.cookies = url, cookies
        self.session_id = str(uuid.uuid4())
        self.errors: list[str] = []
        self.messages_ended = 0  # task_end of each message sent, once the chat has opened
        self.opened = asyncio.Event()
        self.sio = socketio.AsyncClient(reconnection=False)
        self.sio.on("*", self._on_event)
        self.http = httpx.AsyncClient(base_url=url, cookies=cookies, timeout=60)

    def _on_event(self, event: str, data=None) -> None:
        if event == "task_end" and self.opened.is_set():
            self.messages_ended += 1
        if event != "new_message" or not isinstance(data, dict):
            return
        metadata = data.get("metadata")
        metadata = json.loads(metadata) if isinstance(metadata, str) else metadata or {}
        # The welcome, or the error that the engine is down: either comes after on_chat_start.
        if metadata.get("kind") == "error":
            self.errors.append(data.get("output") or "")
        if metadata.get("kind") in ("welcome", "error"):
            self.opened.set()

    async def __aenter__(self) -> "SocketChat":
        cookie = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        await self.sio.connect(self.url, socketio_path=SOCKET_PATH, transports=["websocket"],
                               headers={"Cookie": cookie}, wait_timeout=30,
                               auth={"sessionId": self.session_id, "clientType": "webapp",
                                     "threadId": "", "userEnv": "{}"})
        await self.sio.emit("connection_successful")
        await asyncio.wait_for(self.opened.wait(), 60)
        self.errors.clear()  # the chat's opening: no message's
        return self

    async def __aexit__(self, *exc) -> None:
        await self.http.aclose()
        await self.close()

    async def close(self) -> None:
        """As the browser's "new chat": the app ends this one now, and its files with it."""
        if self.sio.connected:
            await self.sio.call("clear_session", timeout=30)  # handled before the disconnect
            await self.sio.disconnect()

    async def upload(self, name: str, mime: str, data: bytes) -> httpx.Response:
        return await self.http.post("/project/file", params={"session_id": self.session_id},
                                    files={"file": (name, data, mime)})

    async def send(self, text: str, file_ids: list[str]) -> dict:
        """The message as sent (its step), naming the uploads ``file_ids``."""
        step = user_step(text)
        await self.sio.emit("client_message", {"message": step,
                                               "fileReferences": [{"id": i} for i in file_ids]})
        return step

    async def edit(self, step: dict, text: str) -> None:
        """As the browser's edit of a sent message: its files stay the message's."""
        await self.sio.emit("edit_message", {"message": {**step, "output": text}})

    async def ended(self, messages: int, timeout_s: float) -> None:
        await until(lambda: self.messages_ended >= messages, timeout_s)

    def stored(self, pattern: str = "*") -> list:
        """The chat's uploads on disk (the worker's folder, .files/worker-<pid>/, holds a folder
        per chat) whose names match ``pattern`` (an upload's id, and its extension)."""
        while True:
            try:
                return list((ROOT / ".files").glob(f"worker-*/{self.session_id}/{pattern}"))
            except FileNotFoundError:  # the chat's folder went while glob read it: look again
                continue
