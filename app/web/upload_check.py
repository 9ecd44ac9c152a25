"""A check in front of Chainlit's upload endpoint, for what it mishandles.

Chainlit 2.12 fails on an empty upload with HTTP 500 ("Either path or content must be
provided", in its own code), and the browser can only say "Upload failed".  This route
answers the same request first: an empty file gets HTTP 400 with a sentence naming it,
which the browser shows as "Failed to upload <name>: <sentence>".  A ``session_id`` that
is not a UUID gets HTTP 400 too: Chainlit would use it as a path (app/web/session_guard.py).
Every other upload goes on to Chainlit's own handler, with its own checks (docs/notes.md,
"Chainlit 2.12").
"""

from __future__ import annotations

from typing import Optional

from chainlit.server import UserParam, app, upload_file
from fastapi import HTTPException, Request, UploadFile

from app.texts import lang_of, text
from app.web.session_guard import REFUSAL, valid_session_id

PATH = "/project/file"


async def upload_checked(request: Request, current_user: UserParam, session_id: str,
                         file: UploadFile, ask_parent_id: Optional[str] = None):
    if not valid_session_id(session_id):
        raise HTTPException(status_code=400, detail=REFUSAL)
    if not file.size:
        lang = lang_of(request.headers.get("accept-language"))
        raise HTTPException(status_code=400, detail=text(lang, "upload_empty", name=file.filename))
    return await upload_file(current_user, session_id, file, ask_parent_id)


def install() -> None:
    """Put the check before Chainlit's route for the same path (routes match in order)."""
    app.add_api_route(PATH, upload_checked, methods=["POST"])
    app.router.routes.insert(0, app.router.routes.pop())
