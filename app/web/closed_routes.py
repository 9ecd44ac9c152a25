"""Chainlit's own thread sharing, closed: its routes answer 404.

Chainlit 2.12 shares a thread through its metadata: ``PUT /project/thread/share`` (the
author, signed in) sets ``is_shared``, and from then on ``GET /project/share/{thread_id}``
gives the whole thread, steps and files, to anyone who has the id, without login
(``chainlit/server.py``, ``share_thread`` and ``get_shared_thread``). The chat shares
through links of its own instead (``/share``, ``app/pages/share_page.py``), which
``/unshare`` takes back; Chainlit's flag it cannot see, so a thread shared that way stayed
readable after ``/unshare``. The app uses neither route, so both answer 404, as a route
that does not exist would (tests/browser/test_share.py performs the attack).
"""

from __future__ import annotations

from chainlit.server import app
from fastapi import HTTPException

ROUTES = (("PUT", "/project/thread/share"), ("GET", "/project/share/{thread_id:path}"))


async def closed():
    raise HTTPException(status_code=404, detail="Not Found")


def install() -> None:
    """Before Chainlit's routes for the same paths (routes match in order)."""
    for method, path in ROUTES:
        app.add_api_route(path, closed, methods=[method])
        app.router.routes.insert(0, app.router.routes.pop())
