"""What the pure ASGI middlewares that wrap Chainlit's server add to or put in place of its
answers: a header on its HTML pages (app/web/boot_cookie.py, app/web/page_policy.py), a header on one
response (app/auth/login.py), and a JSON refusal of its own (app/auth/login.py, app/auth/auth_sessions.py,
app/web/upload_limit.py)."""

from __future__ import annotations

import json


def with_header(message: dict, name: bytes, value: bytes) -> dict:
    """An ``http.response.start`` message with one more header."""
    return {**message, "headers": [*message.get("headers", ()), (name, value)]}


def add_to_html(send, name: bytes, value: bytes):
    """``send`` with the header ``name: value`` on a response that is an HTML page."""
    async def sending(message):
        if message["type"] == "http.response.start":
            headers = dict(message.get("headers") or ())
            if headers.get(b"content-type", b"").startswith(b"text/html"):
                message = with_header(message, name, value)
        await send(message)
    return sending


async def send_refusal(send, status: int, detail: str, *headers: tuple[bytes, bytes]) -> None:
    """The answer FastAPI gives an HTTPException (``{"detail": ...}``), sent by a middleware."""
    body = json.dumps({"detail": detail}, ensure_ascii=False).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json; charset=utf-8"),
                            (b"content-length", str(len(body)).encode()), *headers]})
    await send({"type": "http.response.body", "body": body})
