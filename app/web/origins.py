"""Which web pages may use the chat with the user's cookies: its own, and ERNIE_ALLOWED_ORIGINS.

Chainlit 2.12 lets any: its CORS middleware takes ``allow_origins = ["*"]`` from
.chainlit/config.toml together with ``allow_credentials=True``, so Starlette echoes
whatever Origin comes, with credentials; and it builds its socket.io server with
``cors_allowed_origins=[]``, which python-engineio reads as "check no origin".  Any
page the user visits could then call the chat's API and open a chat socket as them.

``install`` gives both one rule: the chat's own origin (the one in the request's
Host, which HAProxy passes on unchanged, so it holds for every address and port the
chat is reached at) plus the configured origins.  Requests without an Origin are
not browsers' cross-site requests and are left alone, as before.

The same rule guards ``POST /login``, which CORS does not: a form on another site posts
there without asking, and the answer's cookie signs the visitor's browser into the account
the form named (login CSRF), so that what they type next is saved in the attacker's chats.
Browsers send an Origin with every cross-site POST.
"""

from __future__ import annotations

from typing import Optional
from urllib.parse import urlsplit

import chainlit.server
from starlette.middleware.cors import CORSMiddleware

from app.web.asgi_headers import send_refusal


def same_origin(origin: str, environ: dict) -> bool:
    """The page's host and port are the ones the request was sent to (Host, or the
    balancer's X-Forwarded-Host); the scheme is left out, as a TLS proxy in front changes it."""
    hosts = {environ.get("HTTP_HOST", "")}
    hosts.update(h.strip() for h in environ.get("HTTP_X_FORWARDED_HOST", "").split(","))
    return urlsplit(origin).netloc.lower() in {h.lower() for h in hosts if h}


def socket_origin_check(allowed: list[str]):
    """engineio's ``cors_allowed_origins`` as a function: it refuses the others' handshake."""
    def allowed_origin(origin: Optional[str], environ: dict) -> bool:
        return origin is not None and (origin.lower() in allowed or same_origin(origin, environ))
    return allowed_origin


LOGIN_REFUSAL = ("a login must come from the chat's own page: this one was sent from another site "
                 "(add that site to ERNIE_ALLOWED_ORIGINS if it is yours)")


class LoginOriginGuard:
    """Pure ASGI middleware: ``POST /login`` with another site's Origin gets 403."""

    def __init__(self, app, allowed: list[str]):
        self.app, self.allowed = app, allowed

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["method"] == "POST" and scope["path"] == "/login":
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
            origin = headers.get("origin")
            environ = {"HTTP_HOST": headers.get("host", ""),
                       "HTTP_X_FORWARDED_HOST": headers.get("x-forwarded-host", "")}
            if origin is not None and not (origin.lower() in self.allowed or same_origin(origin, environ)):
                await send_refusal(send, 403, LOGIN_REFUSAL)
                return
        await self.app(scope, receive, send)


def install(allowed_origins: str) -> None:
    """Call at import time of the app, before Chainlit's middleware stack is built;
    ``allowed_origins`` is ERNIE_ALLOWED_ORIGINS, checked and in lower case."""
    allowed = [origin for origin in allowed_origins.split(",") if origin]
    chainlit.server.sio.eio.cors_allowed_origins = socket_origin_check(allowed)
    for middleware in chainlit.server.app.user_middleware:
        if middleware.cls is CORSMiddleware:
            # Same-origin requests need no CORS header: only the configured others get one.
            middleware.kwargs["allow_origins"] = allowed
    chainlit.server.app.add_middleware(LoginOriginGuard, allowed=allowed)
