"""A live view for presenters: ``/live``, a page of plots fed by ``/live/data`` every second.

The page (app/pages/public/live.html and live.js, no outside files: nothing outside is
reachable on our machines) draws on canvases itself.  The data come from vLLM's
/metrics (where the server has them) and from the app's own recent replies
(``app/engine/recent_replies.RECENT``).  ``/live?shared=<token>`` also shows a shared chat's
QR code (app/pages/share_links.py), for the audience to follow it on their phones.  With login
on, the data need the chat's login cookie; the page itself holds nothing and says so when it
gets no data.

With several models served (ERNIE_MODELS) every model's engine is read, each on its own, and
the page draws a line per model; ``?model=<served name>`` shows one model only.  That name
comes from the browser: it is only ever compared with the served names, and an unknown one
shows every model with a notice, never the name itself.

New GET routes go before Chainlit's catch-all (app/web/own_routes.py).
"""

from __future__ import annotations

import asyncio
import json
import time
from html import escape
from pathlib import Path
from typing import Optional, Sequence
from urllib.parse import urlencode

import httpx
from fastapi import Depends, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse

from app.engine.model_choice import Engine
from app.engine.recent_replies import RECENT, Reading
from app.engine.server_info import read_metrics
from app.kept.drain import connected_chats
from app.pages import share_links
from app.texts import lang_of, text
from app.web.own_routes import catch_all_last
from server.settings import auth_headers

PAGE = "/live"
DATA = "/live/data"
SCRIPT = "/live/live.js"
PUBLIC = Path(__file__).parent / "public"
LABELS = ("title", "tokens", "requests", "kv", "chats", "ttft", "no_metrics", "engine_down",
          "login", "app_down", "unknown_model")


def shared_block(lang: str, share: Optional[share_links.Share], public_url: str) -> str:
    """A shared chat's QR code and link in the header (``/live?shared=<token>``), for an
    audience to scan; nothing for a token that shares nothing."""
    if share is None:
        return ""
    link = escape(share.link(public_url))
    return (f'<figure id="shared"><img src="{share_links.qr_path(share.token)}" '
            f'alt="{escape(text(lang, "share_qr_alt"))}"><figcaption>{link}</figcaption></figure>')


def data_url(model: Optional[str]) -> str:
    """The page's data route, for one served model's name or for every model (None)."""
    return f"{DATA}?{urlencode({'model': model})}" if model else DATA


def page_html(lang: str, shared: str = "", model: Optional[str] = None, unknown: bool = False) -> str:
    """The page; ``model``: the one served model it shows (else every one), ``unknown``: the
    address asked for a model that is not served here."""
    config = {"lang": lang, "data": data_url(model), "unknown_model": unknown,
              "texts": {k: text(lang, f"live_{k}") for k in LABELS}}
    # JSON inside <script>: "</" must not end the element.
    blob = json.dumps(config, ensure_ascii=False).replace("</", "<\\/")
    return ((PUBLIC / "live.html").read_text(encoding="utf-8")
            .replace("__LANG__", "zh-CN" if lang == "zh" else "en")
            .replace("__TITLE__", text(lang, "live_title"))
            .replace("__SHARED__", shared)
            .replace("__CONFIG__", blob).replace("__SCRIPT__", SCRIPT))


def server_label(shown: Sequence[Engine], several: bool) -> str:
    """The page's server line: the engines its figures come from, each with its model's name
    when several models are served (ERNIE_MODELS)."""
    return ", ".join(f"{engine.name} ({engine.url})" if several else engine.url for engine in shown)


def choose(engines: Sequence[Engine], model: str) -> tuple[Sequence[Engine], bool]:
    """The engines ``?model=`` shows: the one of that served name, else every one; and whether
    a name was given that no served model has."""
    found = [engine for engine in engines if engine.name == model]
    return (found, False) if found else (engines, bool(model))


async def read_engine(http: httpx.AsyncClient, engine: Engine) -> Reading:
    try:
        return Reading(engine.name, await read_metrics(http, engine.url))
    except httpx.HTTPError:  # this engine only: the others' figures still count
        return Reading(engine.name, None, engine_up=False)


async def read_engines(http: httpx.AsyncClient, engines: Sequence[Engine]) -> list[Reading]:
    """Every engine's /metrics, read at once: a hung engine costs a poll one timeout, not one each."""
    return list(await asyncio.gather(*(read_engine(http, engine) for engine in engines)))


def install(engines: Sequence[Engine], api_key: Optional[str], public_url: str) -> None:
    """Add the live view's routes to Chainlit's server; call at import time of the app.
    ``engines``: every served model's, the first being the default model's."""
    from chainlit.auth import get_current_user
    from chainlit.data import get_data_layer
    from chainlit.server import app

    # Its own client: a hung engine must cost a poll seconds, not the chat's minute.
    http = httpx.AsyncClient(timeout=3, headers=auth_headers(api_key))

    @app.get(PAGE, include_in_schema=False)
    async def live_page(request: Request, shared: str = "", model: str = "") -> HTMLResponse:
        lang = lang_of(request.headers.get("accept-language"))
        layer = get_data_layer() if shared else None  # shares need saved chats
        share = layer and await share_links.find(layer, shared)
        shown, unknown = choose(engines, model)
        one = shown[0].name if len(shown) < len(engines) else None  # a served name, not the address's
        return HTMLResponse(page_html(lang, shared_block(lang, share, public_url), one, unknown),
                            headers={"cache-control": "no-store"})

    @app.get(SCRIPT, include_in_schema=False)
    async def live_script() -> FileResponse:
        return FileResponse(PUBLIC / "live.js", media_type="text/javascript")

    # get_current_user lets everyone through when login is off, and answers 401 without
    # the chat's login cookie when it is on.
    @app.get(DATA, include_in_schema=False, dependencies=[Depends(get_current_user)])
    async def live_data(model: str = "") -> JSONResponse:
        shown, unknown = choose(engines, model)
        readings = await read_engines(http, shown)
        figures = RECENT.snapshot(time.monotonic(), readings, connected_chats(), only=len(shown) < len(engines))
        return JSONResponse({**figures, "server": server_label(shown, len(engines) > 1),
                             "engine_up": all(r.engine_up for r in readings), "unknown_model": unknown},
                            headers={"cache-control": "no-store"})

    catch_all_last(app)
