"""A live view for presenters: ``/live``, a page of plots fed by ``/live/data`` every second.

The page (app/public/live.html and live.js, no outside files: nothing outside is
reachable on our machines) draws on canvases itself.  The data come from vLLM's
/metrics (where the server has them) and from the app's own recent replies
(``app/live_stats.LIVE``).  ``/live?shared=<token>`` also shows a shared chat's
QR code (app/share_links.py), for the audience to follow it on their phones.  With login on, the data need the chat's login cookie;
the page itself holds nothing and says so when it gets no data.

New GET routes go before Chainlit's catch-all (app/own_routes.py).
"""

from __future__ import annotations

import json
import time
from html import escape
from pathlib import Path
from typing import Optional

import httpx
from fastapi import Depends, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse

from app import share_links
from app.live_stats import LIVE
from app.own_routes import catch_all_last
from app.server_info import read_metrics
from app.texts import lang_of, text
from server.settings import auth_headers

PAGE = "/live"
DATA = "/live/data"
SCRIPT = "/live/live.js"
PUBLIC = Path(__file__).parent / "public"
LABELS = ("title", "tokens", "requests", "kv", "chats", "ttft", "no_metrics", "engine_down",
          "login", "app_down")


def shared_block(lang: str, share: Optional[share_links.Share], public_url: str) -> str:
    """A shared chat's QR code and link in the header (``/live?shared=<token>``), for an
    audience to scan; nothing for a token that shares nothing."""
    if share is None:
        return ""
    link = escape(share.link(public_url))
    return (f'<figure id="shared"><img src="{share_links.qr_path(share.token)}" '
            f'alt="{escape(text(lang, "share_qr_alt"))}"><figcaption>{link}</figcaption></figure>')


def page_html(lang: str, shared: str = "") -> str:
    config = {"lang": lang, "data": DATA, "texts": {k: text(lang, f"live_{k}") for k in LABELS}}
    # JSON inside <script>: "</" must not end the element.
    blob = json.dumps(config, ensure_ascii=False).replace("</", "<\\/")
    return ((PUBLIC / "live.html").read_text(encoding="utf-8")
            .replace("__LANG__", "zh-CN" if lang == "zh" else "en")
            .replace("__TITLE__", text(lang, "live_title"))
            .replace("__SHARED__", shared)
            .replace("__CONFIG__", blob).replace("__SCRIPT__", SCRIPT))


def connected_chats() -> int:
    """Browser tabs (and other clients) with a chat's socket open now."""
    from chainlit.server import sio
    return len(sio.eio.sockets)


def server_label(engine_url: str, models: list[str]) -> str:
    """The page's server line: the engine its figures come from, and with several models served
    (ERNIE_MODELS) their names, the first being the one the engine figures are of."""
    return f"{engine_url} · {', '.join(models)}" if models else engine_url


def install(engine_url: str, api_key: Optional[str], public_url: str, models: list[str]) -> None:
    """Add the live view's routes to Chainlit's server; call at import time of the app.
    ``models``: the served models' names when there are several, else empty."""
    from chainlit.auth import get_current_user
    from chainlit.data import get_data_layer
    from chainlit.server import app

    # Its own client: a hung engine must cost a poll seconds, not the chat's minute.
    http = httpx.AsyncClient(timeout=3, headers=auth_headers(api_key))

    @app.get(PAGE, include_in_schema=False)
    async def live_page(request: Request, shared: str = "") -> HTMLResponse:
        lang = lang_of(request.headers.get("accept-language"))
        layer = get_data_layer() if shared else None  # shares need saved chats
        share = layer and await share_links.find(layer, shared)
        return HTMLResponse(page_html(lang, shared_block(lang, share, public_url)),
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
        return JSONResponse({**figures, "server": server_label(engine_url, models), "engine_up": engine_up},
                            headers={"cache-control": "no-store"})

    catch_all_last(app)
