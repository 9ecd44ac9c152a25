"""A size limit on upload requests, enforced while their body arrives.

Chainlit 2.12 checks ``[features.spontaneous_file_upload] max_size_mb`` only after
Starlette has parsed the whole multipart body and its handler has read the file
into memory: a client that skips the browser's check can send any size, and a few
such uploads at once exhaust a worker's memory.  This guard answers HTTP 413 with a
sentence the browser shows ("Failed to upload <name>: ...") before Chainlit's
route runs: at once when Content-Length says too much, and, for a chunked body or
one whose length was not declared, as soon as the bytes received pass the limit.
"""

from __future__ import annotations


from starlette.exceptions import HTTPException

from app.texts import lang_of, text
from app.web.asgi_headers import send_refusal
from app.web.upload_check import PATH

# Room for the multipart framing around the one file: boundaries, part headers, the name.
MULTIPART_OVERHEAD = 64 * 1024


class UploadLimit:
    """Pure ASGI middleware in front of POST /project/file."""

    def __init__(self, app, max_file_bytes: int):
        self.app = app
        self.max_file_bytes = max_file_bytes
        self.max_body = max_file_bytes + MULTIPART_OVERHEAD

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != PATH:
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        refusal = text(lang_of(headers.get(b"accept-language", b"").decode("latin-1")), "upload_too_big",
                       limit_mb=f"{self.max_file_bytes / 2**20:.0f}")
        declared = headers.get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_body:
            # Without reading the body: the connection closes after the answer.
            await send_refusal(send, 413, refusal, (b"connection", b"close"))
            return
        received = 0

        async def counted():
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.max_body:
                # Raised inside the body parser: FastAPI passes an HTTPException on as it is,
                # and Starlette answers it, before the route's handler has run.
                raise HTTPException(status_code=413, detail=refusal)
            return message
        await self.app(scope, counted, send)


def install(max_file_bytes: int) -> None:
    from chainlit.server import app
    app.add_middleware(UploadLimit, max_file_bytes=max_file_bytes)
