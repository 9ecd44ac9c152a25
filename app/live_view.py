"""A live view for presenters: ``/live``, a page of plots fed by ``/live/data`` every second.

The page (app/public/live.html and live.js, no outside files: nothing outside is
reachable on our machines) draws on canvases itself.  The data come from vLLM's
/metrics (where the server has them) and from the app's own recent replies
(``app/live_stats.LIVE``).  With login on, the data need the chat's login cookie;
the page itself holds nothing and says so when it gets no data.

Chainlit's catch-all ``GET /{full_path:path}`` is registered before this module
runs, so new GET routes would never be reached: ``install`` moves it back to the
end (docs/notes.md, "Chainlit 2.12").
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Optional

import httpx
from fastapi import Depends, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse

from app.live_stats import LIVE
from app.server_info import read_metrics
from app.texts import lang_of, text
from server.settings import auth_headers

PAGE = "/live"
DATA = "/live/data"
SCRIPT = "/live/live.js"
PUBLIC = Path(__file__).parent / "public"
LABELS = ("title", "tokens", "requests", "kv", "chats", "ttft", "no_metrics", "engine_down",
          "login", "app_down")


def page_html(lang: str) -> str:
    config = {"lang": lang, "data": DATA, "texts": {k: text(lang, f"live_{k}") for k in LABELS}}
    # JSON inside <script>: "</" must not end the element.
    blob = json.dumps(config, ensure_ascii=False).replace("</", "<\\/")
    return ((PUBLIC / "live.html").read_text(encoding="utf-8")
            .replace("__LANG__", "zh-CN" if lang == "zh" else "en")
            .replace("__TITLE__", text(lang, "live_title"))
            .replace("__CONFIG__", blob).replace("__SCRIPT__", SCRIPT))


def connected_chats() -> int:
    """Browser tabs (and other clients) with a chat's socket open now."""
    from chainlit.server import sio
    return len(sio.eio.sockets)


def _holds_catch_all(route) -> bool:
    if getattr(route, "path", "").endswith("/{full_path:path}"):  # FastAPI that flattens routers
        return True
    inner = getattr(route, "original_router", None)  # FastAPI 0.16x keeps the included router
    return inner is not None and any(getattr(r, "path", "").endswith("/{full_path:path}")
                                     for r in inner.routes)


def _catch_all_last(app) -> None:
    tail = [route for route in app.router.routes if _holds_catch_all(route)]
    for route in tail:
        app.router.routes.remove(route)
    app.router.routes.extend(tail)


def install(engine_url: str, api_key: Optional[str]) -> None:
    """Add the live view's routes to Chainlit's server; call at import time of the app."""
    from chainlit.auth import get_current_user
    from chainlit.server import app

    # Its own client: a hung engine must cost a poll seconds, not the chat's minute.
    http = httpx.AsyncClient(timeout=3, headers=auth_headers(api_key))

    @app.get(PAGE, include_in_schema=False)
    async def live_page(request: Request) -> HTMLResponse:
        return HTMLResponse(page_html(lang_of(request.headers.get("accept-language"))),
                            headers={"cache-control": "no-store"})

    @app.get(SCRIPT, include_in_schema=False)
    async def live_script() -> FileResponse:
        return FileResponse(PUBLIC / "live.js", media_type="text/javascript")

    # get_current_user lets everyone through when login is off, and answers 401 without
    # the chat's login cookie when it is on.
    @app.get(DATA, include_in_schema=False, dependencies=[Depends(get_current_user)])
    async def live_data() -> JSONResponse:
        try:
            metrics, engine_up = await read_metrics(http, engine_url), True
        except httpx.HTTPError:
            metrics, engine_up = None, False
        figures = LIVE.snapshot(time.monotonic(), metrics, connected_chats())
        return JSONResponse({**figures, "server": engine_url, "engine_up": engine_up},
                            headers={"cache-control": "no-store"})

    _catch_all_last(app)
