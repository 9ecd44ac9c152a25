"""A check in front of Chainlit's upload endpoint, for what it mishandles.

Chainlit 2.12 fails on an empty upload with HTTP 500 ("Either path or content must be
provided", in its own code), and the browser can only say "Upload failed".  This route
answers the same request first: an empty file gets HTTP 400 with a sentence naming it,
which the browser shows as "Failed to upload <name>: <sentence>".  A ``session_id`` that
is not a UUID gets HTTP 400 too: Chainlit would use it as a path (app/web/session_guard.py).
An upload past a chat's or a user's caps, or onto a disk almost full, is refused with what
to do (app/web/upload_caps.py).  Every other upload goes on to Chainlit's own handler, with
its own checks (docs/notes.md, "Chainlit 2.12").
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Callable, Optional

import chainlit.config
from chainlit.server import UserParam, app, upload_file
from chainlit.session import WebsocketSession
from fastapi import HTTPException, Request, UploadFile
from fastapi.responses import JSONResponse

from app.texts import lang_of, text
from app.web.session_guard import REFUSAL, valid_session_id
from app.web.upload_caps import Caps, UploadRefused, Uploads

PATH = "/project/file"


def stored_path(session_id: str, answer: JSONResponse) -> Optional[Path]:
    """Where Chainlit wrote the upload it answered for; None if its chat ended meanwhile."""
    session = WebsocketSession.get_by_id(session_id)
    upload = session and session.files.get(json.loads(answer.body)["id"])
    return Path(upload["path"]) if upload else None


def install(caps: Caps, user_key: Callable[[Optional[str], str], str]) -> None:
    """Put the check before Chainlit's route for the same path (routes match in order).
    ``user_key``: whom the caps count, from the login name (None with login off) and the
    client's address."""
    # Read at each upload: app/web/files_dir.py points it at this worker's own folder.
    uploads = Uploads(caps, lambda: shutil.disk_usage(chainlit.config.FILES_DIRECTORY).free)

    async def upload_checked(request: Request, current_user: UserParam, session_id: str,
                             file: UploadFile, ask_parent_id: Optional[str] = None):
        if not valid_session_id(session_id):
            raise HTTPException(status_code=400, detail=REFUSAL)
        lang = lang_of(request.headers.get("accept-language"))
        if not file.size:
            raise HTTPException(status_code=400, detail=text(lang, "upload_empty", name=file.filename))
        user = user_key(current_user.identifier if current_user else None,
                        (request.client or ("unknown",))[0])
        try:
            key = uploads.reserve(session_id, user, file.size)
        except UploadRefused as refused:
            raise HTTPException(status_code=refused.status,
                                detail=text(lang, refused.reason, **refused.values)) from None
        answer = None
        try:
            answer = await upload_file(current_user, session_id, file, ask_parent_id)
            return answer
        finally:
            uploads.written(key, stored_path(session_id, answer) if answer is not None else None)

    app.add_api_route(PATH, upload_checked, methods=["POST"])
    app.router.routes.insert(0, app.router.routes.pop())
