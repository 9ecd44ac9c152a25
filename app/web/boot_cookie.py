"""Which app process served a browser its page: a chat that reconnects to another one lost
its process (a worker died and the balancer moved it, or the supervisor restarted the app).

Each app process makes a random id when it starts and sets it as a cookie on the
pages it serves (the HTML, not the API calls an old page keeps making).  When a
browser's socket reconnects, it still carries the id of the process that served
its page; a different id means that process is gone, and with it the chat's
state in memory: the chat says so (app/kept/carry_over.py), and carries on from what was kept
of it, its history and any reply it was streaming (app/conversation/in_flight.py).
A page loaded afresh gets the new id first, so a chat opened or resumed by the
user from the sidebar is never taken for a moved one.
"""

from __future__ import annotations

import secrets
from http.cookies import SimpleCookie
from typing import Optional

from app.web.asgi_headers import add_to_html

COOKIE = "ernie_app_boot"
BOOT_ID = secrets.token_hex(8)


def page_cookie_header() -> bytes:
    return f"{COOKIE}={BOOT_ID}; Path=/; HttpOnly; SameSite=Lax".encode()


def lost_its_process(cookie_header: Optional[str], boot_id: str = BOOT_ID) -> bool:
    """True when the browser's page came from another app process than this one."""
    if not cookie_header:
        return False
    cookies = SimpleCookie()
    try:
        cookies.load(cookie_header)
    except Exception:  # a malformed Cookie header from the browser: not ours to judge
        return False
    page_id = cookies.get(COOKIE)
    return page_id is not None and page_id.value != boot_id


class BootCookie:
    """Pure ASGI middleware: the boot cookie on every HTML page this process serves."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "GET":
            await self.app(scope, receive, send)
            return
        await self.app(scope, receive, add_to_html(send, b"set-cookie", page_cookie_header()))


def install() -> None:
    from chainlit.server import app
    app.add_middleware(BootCookie)
