"""The app's own GET routes beside Chainlit's: its catch-all goes back to the end.

Chainlit's catch-all ``GET /{full_path:path}`` (its page, for any path) is registered
before the app's modules add their routes, so theirs would never be reached; each
module that adds GET routes calls :func:`catch_all_last` after (docs/notes.md,
"Chainlit 2.12").
"""

from __future__ import annotations


def _holds_catch_all(route) -> bool:
    if getattr(route, "path", "").endswith("/{full_path:path}"):  # FastAPI that flattens routers
        return True
    inner = getattr(route, "original_router", None)  # FastAPI 0.16x keeps the included router
    return inner is not None and any(getattr(r, "path", "").endswith("/{full_path:path}")
                                     for r in inner.routes)


def catch_all_last(app) -> None:
    tail = [route for route in app.router.routes if _holds_catch_all(route)]
    for route in tail:
        app.router.routes.remove(route)
    app.router.routes.extend(tail)
