"""The device cookie: a browser's proof that a user logged in from it before.

After a successful login the browser gets a cookie naming the user and a random device
id, signed with a key derived from the secret that signs Chainlit's login tokens.  Its
next attempts at that user are throttled on that device alone (``app/auth/login_throttle.py``),
so someone guessing the user's password elsewhere never slows or locks them out there.
It grants no access by itself: a stolen one only gives its thief the device's own
(throttled) attempts.  HttpOnly (scripts cannot read it) and SameSite=Lax.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass
from http.cookies import SimpleCookie
from typing import Optional

COOKIE = "ernie_device"
MAX_AGE_S = 365 * 24 * 3600
_PURPOSE = b"ernie-chat device cookie"


@dataclass(frozen=True)
class DeviceCookies:
    """Makes and checks device cookies with one install's secret."""

    secret: str

    def _signature(self, payload: bytes) -> bytes:
        key = hmac.new(self.secret.encode(), _PURPOSE, hashlib.sha256).digest()
        return hmac.new(key, payload, hashlib.sha256).digest()

    def make(self, user: str, device: Optional[str] = None, now: Optional[float] = None) -> str:
        """A cookie value for ``user`` on ``device`` (a new device id when None)."""
        claims = {"u": user, "d": device or secrets.token_hex(16), "t": int(now or time.time())}
        payload = json.dumps(claims, separators=(",", ":")).encode()
        return f"{_b64(payload)}.{_b64(self._signature(payload))}"

    def device_of(self, value: Optional[str], user: str, now: Optional[float] = None) -> Optional[str]:
        """The device id when ``value`` is a valid, unexpired cookie of ``user``; else None."""
        payload_text, _, signature = (value or "").partition(".")
        try:
            payload = _unb64(payload_text)
            if not hmac.compare_digest(_unb64(signature), self._signature(payload)):
                return None
            claims = json.loads(payload)
        except ValueError:  # not base64, not JSON: not ours
            return None
        fresh = (now or time.time()) < claims.get("t", 0) + MAX_AGE_S
        return claims.get("d") if claims.get("u") == user and fresh else None

    def set_cookie_header(self, value: str) -> bytes:
        return f"{COOKIE}={value}; Path=/; Max-Age={MAX_AGE_S}; HttpOnly; SameSite=Lax".encode()


def from_cookie_header(header: str) -> Optional[str]:
    """The device cookie's value in a request's Cookie header, if any."""
    cookies = SimpleCookie()
    try:
        cookies.load(header)
    except Exception:  # a malformed Cookie header: no device cookie
        return None
    found = cookies.get(COOKIE)
    return found.value if found is not None else None


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
