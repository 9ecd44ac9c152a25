"""Password login for the chat, slowed per user and per client address.

Chainlit's ``POST /login`` hands the auth callback only the user name and the
password, not the request (docs/notes.md, "Login").  A pure ASGI middleware runs
in the same task as the endpoint, so it passes the client address to the
callback in a ContextVar, and the callback waits out ``LoginThrottle``'s delay
before it checks the password.  The check is a bcrypt hash (0.2-0.4 s of CPU) and
runs in a thread: a callback on the event loop would stall every chat meanwhile.

An attempt the throttle refuses outright is answered 429 with Retry-After: the
callback cannot do that itself (Chainlit turns any exception there into 401), so
it marks the attempt and the middleware rewrites the response.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Optional

import chainlit as cl

from app.login_throttle import DelayPolicy, LoginThrottle, attempt_keys
from app.texts import lang_of, text
from server.passwords import check_password, plain_warning
from server.settings import Settings

log = logging.getLogger(__name__)


@dataclass
class Attempt:
    """One POST /login, as the middleware sees it."""

    address: str
    lang: str = "en"
    refused_for_s: Optional[float] = None  # set when the throttle refused it outright


_ATTEMPT: ContextVar[Optional[Attempt]] = ContextVar("login_attempt", default=None)


class LoginGuard:
    """Pure ASGI middleware: the client address in, a 429 out for refused attempts."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != "/login":
            await self.app(scope, receive, send)
            return
        # Behind a proxy on 127.0.0.1, uvicorn already put X-Forwarded-For's address here.
        headers = dict(scope.get("headers") or ())
        attempt = Attempt(address=(scope.get("client") or ("unknown",))[0],
                          lang=lang_of(headers.get(b"accept-language", b"").decode("latin-1")))
        token = _ATTEMPT.set(attempt)
        try:
            await self.app(scope, receive, _refusing(attempt, send))
        finally:
            _ATTEMPT.reset(token)


def _refusing(attempt: Attempt, send):
    """``send``, except that a refused attempt's 401 goes out as 429 with Retry-After."""
    async def wrapped(message):
        if attempt.refused_for_s is None:
            await send(message)
        elif message["type"] == "http.response.start":
            seconds = math.ceil(attempt.refused_for_s)
            detail = text(attempt.lang, "login_throttled", seconds=seconds)
            body = json.dumps({"detail": detail}, ensure_ascii=False).encode()
            await send({"type": "http.response.start", "status": 429,
                        "headers": [(b"content-type", b"application/json; charset=utf-8"),
                                    (b"content-length", str(len(body)).encode()),
                                    (b"retry-after", str(seconds).encode())]})
            await send({"type": "http.response.body", "body": body})
        # the original body of a refused attempt is dropped
    return wrapped


def make_auth(settings: Settings, throttle: LoginThrottle):
    users = settings.user_passwords

    async def password_auth(username: str, password: str) -> Optional[cl.User]:
        attempt = _ATTEMPT.get() or Attempt(address="unknown")
        keys = attempt_keys(username, attempt.address)
        wait = throttle.reserve(keys)
        if wait is None:
            attempt.refused_for_s = throttle.retry_after(keys)
            log.warning("login refused without a check: too many failures (user %r, address %s)",
                        username[:64], attempt.address)
            return None
        await asyncio.sleep(wait)
        name = await asyncio.to_thread(check_password, users, username, password)
        if name is None:
            log.warning("failed login (user %r, address %s)", username[:64], attempt.address)
            return None
        throttle.succeeded(keys)
        return cl.User(identifier=name, metadata={"provider": "password"})
    return password_auth


def install(settings: Settings) -> None:
    """Turn on password login; call at import time of the Chainlit app."""
    from chainlit.server import app

    if warning := plain_warning(settings.user_passwords):
        log.warning(warning)
    policy = DelayPolicy(settings.login_delay_base_s, settings.login_delay_max_s,
                         settings.login_delay_half_life_s)
    app.add_middleware(LoginGuard)
    cl.password_auth_callback(make_auth(settings, LoginThrottle(policy)))
