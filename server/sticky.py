"""Which app worker a browser is pinned to: the cookie HAProxy sets and both sides read.

With several app workers the balancer inserts this cookie into a browser's first
answer and sends every later request of that browser to the same worker, where
its chat lives (``server.stack.balancer``).  A worker that receives a browser
pinned to another worker knows that worker stopped and the balancer moved the
chat (``app/chat.py`` tells the user).
"""

from __future__ import annotations

from typing import Optional

COOKIE = "ERNIE_WORKER"


def cookie_value(index: int) -> str:
    return f"w{index}"


def pinned_worker(cookie_header: Optional[str]) -> Optional[int]:
    """The worker index in a Cookie header, or None when the browser is not pinned yet."""
    for part in (cookie_header or "").split(";"):
        name, _, value = part.strip().partition("=")
        if name == COOKIE and value.startswith("w") and value[1:].isdigit():
            return int(value[1:])
    return None


def moved(cookie_header: Optional[str], my_index: Optional[int]) -> bool:
    """True when the browser was pinned to another worker than this one."""
    pinned = pinned_worker(cookie_header)
    return my_index is not None and pinned is not None and pinned != my_index
