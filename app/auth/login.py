"""Password login for the chat, throttled so that guessing is slow and locks nobody out.

Chainlit's ``POST /login`` hands the auth callback only the user name and the
password, not the request (docs/notes.md, "Login").  A pure ASGI middleware runs in
the same task as the endpoint, so it passes the client address and the device cookie
(``app/auth/device_cookie.py``) to the callback in a ContextVar, and the callback waits out
``LoginThrottle``'s delay before it checks the password.  The check is a bcrypt hash
(0.2-0.4 s of CPU) and runs on threads of its own: a callback on the event loop would stall
every chat meanwhile, and on the loop's default executor it waited behind whatever else ran
there (slow file reads held logins for seconds, once).

The callback cannot shape the response (Chainlit turns any exception there into 401),
so it marks the attempt and the middleware rewrites the response: 429 with
Retry-After for an attempt the throttle refused outright, and a (new or renewed)
device cookie on a success.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Optional

import chainlit as cl

from app import chat_metrics, chat_records
from app.auth import device_cookie
from app.auth.auth_sessions import Sessions
from app.auth.device_cookie import DeviceCookies
from app.auth.login_throttle import LoginThrottle, Policies
from app.texts import lang_of, text
from app.web.asgi_headers import send_refusal, with_header
from server.chat_records import SIGN_IN, SIGN_IN_REFUSED, tried_name
from server.passwords import check_password, plain_warning
from server.settings import Settings

log = logging.getLogger(__name__)


@dataclass
class Attempt:
    """One POST /login, as the middleware sees it."""

    address: str
    lang: str = "en"
    device_cookie: Optional[str] = None     # the browser's, as it came
    refused_for_s: Optional[float] = None   # set when the throttle refused it outright
    new_device_cookie: Optional[str] = None  # set on a success


_ATTEMPT: ContextVar[Optional[Attempt]] = ContextVar("login_attempt", default=None)
# bcrypt is CPU work that releases the GIL: more threads than cores would not check faster.
_PASSWORD_CHECKS = ThreadPoolExecutor(os.cpu_count() or 1, thread_name_prefix="password-check")


class LoginGuard:
    """Pure ASGI middleware: address and device cookie in; 429, or the device cookie, out."""

    def __init__(self, app, cookies: DeviceCookies):
        self.app, self.cookies = app, cookies

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != "/login":
            await self.app(scope, receive, send)
            return
        # Behind a proxy on 127.0.0.1, uvicorn already put X-Forwarded-For's address here.
        headers = dict(scope.get("headers") or ())
        attempt = Attempt(address=chat_records.address(scope),
                          lang=lang_of(headers.get(b"accept-language", b"").decode("latin-1")),
                          device_cookie=device_cookie.from_cookie_header(
                              headers.get(b"cookie", b"").decode("latin-1")))
        token = _ATTEMPT.set(attempt)
        try:
            await self.app(scope, receive, self._answering(attempt, send))
        finally:
            _ATTEMPT.reset(token)

    def _answering(self, attempt: Attempt, send):
        """``send``, with a refused attempt's 401 turned into 429 and a success's cookie added."""
        async def wrapped(message):
            if attempt.refused_for_s is None:
                if message["type"] == "http.response.start" and attempt.new_device_cookie:
                    cookie = self.cookies.set_cookie_header(attempt.new_device_cookie)
                    message = with_header(message, b"set-cookie", cookie)
                await send(message)
            elif message["type"] == "http.response.start":
                seconds = math.ceil(attempt.refused_for_s)
                await send_refusal(send, 429, text(attempt.lang, "login_throttled", seconds=seconds),
                                   (b"retry-after", str(seconds).encode()))
            # the original body of a refused attempt is dropped
        return wrapped


def make_auth(settings: Settings, throttle: LoginThrottle, cookies: DeviceCookies, sessions: Sessions):
    users = settings.user_passwords

    async def password_auth(username: str, password: str) -> Optional[cl.User]:
        attempt = _ATTEMPT.get() or Attempt(address="unknown")
        device = cookies.device_of(attempt.device_cookie, username)
        plan = throttle.plan(username, attempt.address, device)
        decision = await throttle.reserve(plan)
        if decision.wait_s is None:
            attempt.refused_for_s = decision.retry_after_s
            log.warning("login refused without a check: too many failures (user %r, address %s, %s)",
                        username[:64], attempt.address, "known device" if device else "new device")
            chat_metrics.login_failed("throttled")
            chat_records.audit(SIGN_IN_REFUSED, tried_name(username, users), attempt.address, "throttled")
            return None
        await asyncio.sleep(decision.wait_s)
        name = await asyncio.get_running_loop().run_in_executor(_PASSWORD_CHECKS, check_password,
                                                                users, username, password)
        if name is None:
            log.warning("failed login (user %r, address %s)", username[:64], attempt.address)
            chat_metrics.login_failed("password")
            chat_records.audit(SIGN_IN_REFUSED, tried_name(username, users), attempt.address, "password")
            return None
        await throttle.succeeded(plan)
        attempt.new_device_cookie = cookies.make(name, device)
        chat_records.audit(SIGN_IN, name, attempt.address, "password")
        return cl.User(identifier=name, metadata=sessions.user_metadata(name))
    return password_auth


def install(settings: Settings, sessions: Sessions) -> None:
    """Turn on password login; call at import time of the Chainlit app, after
    ``auth_sessions.start``."""
    from chainlit.server import app

    if warning := plain_warning(settings.user_passwords):
        log.warning(warning)
    cookies = DeviceCookies(sessions.auth_secret)
    policies = Policies.from_delays(settings.login_delay_base_s, settings.login_delay_max_s,
                                    settings.login_delay_half_life_s)
    app.add_middleware(LoginGuard, cookies=cookies)
    cl.password_auth_callback(make_auth(settings, LoginThrottle(sessions.store, policies), cookies, sessions))
