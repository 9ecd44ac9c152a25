"""One more response header on the chat's HTML pages, for the pure ASGI middlewares that wrap
Chainlit's server (app/boot_cookie.py, app/page_policy.py)."""

from __future__ import annotations


def add_to_html(send, name: bytes, value: bytes):
    """``send`` with the header ``name: value`` on a response that is an HTML page."""
    async def sending(message):
        if message["type"] == "http.response.start":
            headers = dict(message.get("headers") or ())
            if headers.get(b"content-type", b"").startswith(b"text/html"):
                message = {**message, "headers": [*message.get("headers", ()), (name, value)]}
        await send(message)
    return sending
