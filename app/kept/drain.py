"""Draining this worker for `ernie-chat restart`: its chats move to the other workers
once their replies end, so that stopping it cuts no reply.

The supervisor first takes the worker out of HAProxy's rotation (state maint: new
connections, pinned browsers too, go to the other workers), then POSTs ``PATH``.
From then on every chat's socket that is not answering a message is closed, each
as soon as its reply ends: its browser reconnects as after a lost worker, lands
on another one, and the chat carries on there with its history, from the saved
chat or the chat's files on the machine (``app/web/boot_cookie.py``,
``app/kept/carry_over.py``).  ``GET PATH`` says how many replies still stream and how many
sockets are still open; the supervisor stops the worker when both are 0.

Only the supervisor may ask: it hands each worker a token of its own start
(``TOKEN_ENV``), sent as a bearer token.
"""

from __future__ import annotations

import asyncio
import hmac
import os

from fastapi import Request
from fastapi.responses import JSONResponse

from app.engine.recent_replies import RECENT
from server.worker_drain import PATH, TOKEN_ENV

CHECK_EVERY_S = 0.2


def connected_chats() -> int:
    """Browser tabs (and other clients) with a chat's socket open now."""
    from chainlit.server import sio
    return len(sio.eio.sockets)


def idle_sockets() -> list:
    """The engine.io sockets of chats not running a handler (no reply, no start-up)."""
    from chainlit.server import sio
    from chainlit.session import ws_sessions_sid
    from chainlit.user_session import user_sessions
    idle = []
    for sid, session in list(ws_sessions_sid.items()):
        # An edited message's re-run is not Chainlit's current task: the chat keeps it as
        # "task" (app/chat.py, on_message; docs/notes.md, "Chainlit 2.12").
        tasks = (session.current_task, user_sessions.get(session.id, {}).get("task"))
        if any(task is not None and not task.done() for task in tasks):
            continue
        eio_sid = sio.manager.eio_sid_from_sid(sid, "/")
        if eio_sid in sio.eio.sockets:
            idle.append(sio.eio.sockets[eio_sid])
    return idle


async def close_idle_chats() -> None:
    """Close idle chats' sockets as a lost worker would: no goodbye packet, which would tell
    the browser not to reconnect; ending the socket's send queue ends its websocket
    (engineio's AsyncSocket writer stops at None; docs/notes.md, "Chainlit 2.12")."""
    ended: set[str] = set()
    while True:
        for sock in idle_sockets():
            if sock.sid not in ended and not sock.closed:
                ended.add(sock.sid)  # its reader then closes it, and Chainlit saves the chat
                await sock.queue.put(None)
        await asyncio.sleep(CHECK_EVERY_S)


def allowed(request: Request, token: str) -> bool:
    given = request.headers.get("authorization", "")
    return bool(token) and hmac.compare_digest(given.encode(), f"Bearer {token}".encode())


def install() -> None:
    """Add the drain routes; call before ``live_page.install``, which moves Chainlit's
    catch-all GET route behind every route added until then."""
    from chainlit.server import app
    token = os.environ.get(TOKEN_ENV, "")
    draining: list[asyncio.Task] = []

    def figures() -> JSONResponse:
        return JSONResponse({"draining": bool(draining), "streaming": RECENT.streaming,
                             "connected": connected_chats()})

    @app.get(PATH, include_in_schema=False)
    async def drain_state(request: Request) -> JSONResponse:
        return figures() if allowed(request, token) else JSONResponse({}, status_code=403)

    @app.post(PATH, include_in_schema=False)
    async def drain(request: Request) -> JSONResponse:
        if not allowed(request, token):
            return JSONResponse({}, status_code=403)
        if not draining:
            draining.append(asyncio.create_task(close_idle_chats()))
        return figures()
