"""Headers on the files Chainlit serves back (uploads, exports) so that none runs in our origin.

Chainlit 2.12 answers ``GET /project/file/{id}`` with the file inline, under the
content type the uploading client claimed.  An uploaded HTML or SVG page with a
script then runs in the chat's origin, with the user's cookies, for anyone who
opens its link.  Every such response here gets ``X-Content-Type-Options: nosniff``
and ``Content-Security-Policy: sandbox`` (a document opened from it has an opaque
origin and runs no script); only the passive types the chat shows inline (raster
images, audio, video) stay inline, every other file is a download
(``Content-Disposition: attachment``) and one that a browser could run (HTML, SVG,
XML, JavaScript...) is also sent as ``application/octet-stream``.
"""

from __future__ import annotations

import re

PATH_PREFIX = "/project/file/"
INLINE = re.compile(rb"(image/(png|jpeg|gif|webp|avif|bmp)|audio/[\w.+-]+|video/[\w.+-]+)(;.*)?")
# Types a browser renders as a document or runs as script.
ACTIVE = re.compile(rb"html|xml|svg|javascript|ecmascript|xsl|text/x?css", re.IGNORECASE)
OWN_HEADERS = {b"content-type", b"content-disposition", b"x-content-type-options",
               b"content-security-policy"}


def safe_headers(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    kind = dict(headers).get(b"content-type", b"application/octet-stream").strip().lower()
    if INLINE.fullmatch(kind):
        disposition = b"inline"
    else:
        disposition = b"attachment"
        kind = b"application/octet-stream" if ACTIVE.search(kind) else kind
    return [*(h for h in headers if h[0].lower() not in OWN_HEADERS),
            (b"content-type", kind), (b"content-disposition", disposition),
            (b"x-content-type-options", b"nosniff"), (b"content-security-policy", b"sandbox")]


class ServedFiles:
    """Pure ASGI middleware: the headers above on every response for a served file."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not scope["path"].startswith(PATH_PREFIX):
            await self.app(scope, receive, send)
            return

        async def sending(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": safe_headers(list(message.get("headers", ())))}
            await send(message)
        await self.app(scope, receive, sending)


def install() -> None:
    from chainlit.server import app
    app.add_middleware(ServedFiles)
