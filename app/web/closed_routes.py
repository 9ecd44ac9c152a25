"""Chainlit routes the chat does not use, closed: each answers 404, as a route that does not
exist would.

- **Its own thread sharing.** Chainlit 2.12 shares a thread through its metadata: ``PUT
  /project/thread/share`` (the author, signed in) sets ``is_shared``, and from then on ``GET
  /project/share/{thread_id}`` gives the whole thread, steps and files, to anyone who has the
  id, without login (``chainlit/server.py``, ``share_thread`` and ``get_shared_thread``). The
  chat shares through links of its own (``/share``, ``app/pages/share_page.py``), which
  ``/unshare`` takes back; Chainlit's flag it cannot see, so a thread shared that way stayed
  readable after ``/unshare``.
- **Token renewal.** ``POST /auth/jwt`` answers any valid login token with a new one: a token
  renewed before its logout, not revoked by it, could be renewed for ever
  (``app/auth/auth_sessions.py`` revokes the token a logout names). Only Chainlit's copilot
  widget calls it; the chat's page never does.

tests/browser/test_share.py and tests/stack/test_sessions.py perform the attacks.
"""

from __future__ import annotations

from chainlit.server import app
from fastapi import HTTPException

ROUTES = (("PUT", "/project/thread/share"), ("GET", "/project/share/{thread_id:path}"),
          ("POST", "/auth/jwt"))


async def closed():
    raise HTTPException(status_code=404, detail="Not Found")


def install() -> None:
    """Before Chainlit's routes for the same paths (routes match in order)."""
    for method, path in ROUTES:
        app.add_api_route(path, closed, methods=[method])
        app.router.routes.insert(0, app.router.routes.pop())
