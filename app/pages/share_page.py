"""The page a shared chat's link opens: ``/shared/<token>``, read-only, rendered here.

Live, not a snapshot: each load reads the chat as it is saved now, and the page
reloads itself every ``REFRESH_S`` seconds, so an audience follows a presenter's chat
and a taken-back link stops answering at the next reload.  It shows the chat's
exchanges as the model has them (app/kept/saved_chats.py): a regenerated reply replaces
the old one; a reply still streaming appears once it is finished.

Nothing on it runs or writes: no script at all, Markdown rendered with raw HTML
escaped and only safe link schemes (markdown-it), and a Content-Security-Policy that
allows no script, no form, no outside image, and only this page's own style.  The
referrer is withheld, so a link followed from the chat does not carry the token out.
An unknown, malformed and taken-back token get the same 404.  Only GET is routed:
any other method gets 405.
"""

from __future__ import annotations

import base64
import hashlib
from html import escape
from typing import Callable, Optional

from fastapi import Request
from fastapi.responses import HTMLResponse, Response
from markdown_it import MarkdownIt

from app.conversation.history import Conversation
from app.kept.saved_chats import conversation_from_thread
from app.pages import share_links, share_qr
from app.texts import lang_of, text
from app.web.own_routes import catch_all_last

REFRESH_S = 10
# CommonMark with GitHub's tables and strike-through; "html": False escapes raw HTML, and
# markdown-it refuses javascript:, vbscript:, file: and non-image data: links itself.
MARKDOWN = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable(["table", "strikethrough"])
STYLE = """
body { max-width: 52rem; margin: 0 auto; padding: 1rem; color: #1a1a1a; background: #fff;
       font-family: "Noto Sans", "Noto Sans CJK SC", "Helvetica Neue", Arial, sans-serif; line-height: 1.5; }
header { display: flex; gap: 1rem; align-items: center; border-bottom: 1px solid #ddd; }
header img { width: 8rem; height: 8rem; }
h1 { font-size: 1.4rem; margin: 0; }
.note { color: #555; font-size: 0.9rem; }
.turn { margin: 1rem 0; padding: 0.5rem 1rem; border-radius: 0.5rem; overflow-wrap: anywhere; }
.user { background: #eef3ff; } .assistant { background: #f5f5f5; }
.who { font-weight: bold; font-size: 0.85rem; color: #444; }
pre { overflow-x: auto; background: #fff; padding: 0.5rem; } table { border-collapse: collapse; }
td, th { border: 1px solid #ccc; padding: 0.2rem 0.5rem; }
"""
STYLE_HASH = base64.b64encode(hashlib.sha256(STYLE.encode()).digest()).decode()
POLICY = (f"default-src 'none'; style-src 'sha256-{STYLE_HASH}'; img-src 'self' data:; "
          "base-uri 'none'; form-action 'none'; frame-ancestors 'self'")
HEADERS = {"content-security-policy": POLICY, "referrer-policy": "no-referrer",
           "cache-control": "no-store", "x-robots-tag": "noindex", "x-content-type-options": "nosniff"}


def _page(lang: str, title: str, body: str, head: str = "") -> str:
    return (f'<!doctype html><html lang="{"zh-CN" if lang == "zh" else "en"}"><head>'
            '<meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<meta name="referrer" content="no-referrer">{head}<title>{escape(title)}</title>'
            f"<style>{STYLE}</style></head><body>{body}</body></html>")


def page_html(lang: str, title: str, conversation: Conversation, model: str, token: str) -> str:
    """The shared chat: every exchange, each side's Markdown rendered inert."""
    turns = "".join(
        f'<section class="turn user"><div class="who">{escape(text(lang, "export_you"))}</div>'
        f'{MARKDOWN.render(turn.user)}</section>'
        f'<section class="turn assistant"><div class="who">{escape(model)}</div>'
        f'{MARKDOWN.render(turn.assistant)}</section>'
        for turn in conversation.turns)
    header = (f'<header><img src="{share_links.qr_path(token)}" alt="{escape(text(lang, "share_qr_alt"))}">'
              f'<div><h1>{escape(title)}</h1><p class="note">'
              f'{escape(text(lang, "share_page_note", seconds=REFRESH_S))}</p></div></header>')
    return _page(lang, title, f"{header}<main>{turns}</main>",
                 head=f'<meta http-equiv="refresh" content="{REFRESH_S}">')


def not_found_html(lang: str) -> str:
    message = text(lang, "share_not_found")
    return _page(lang, message, f"<h1>{escape(message)}</h1>")


def install(public_url: str, model_of: Callable[[dict], str]) -> None:
    """Add the shared chats' routes to Chainlit's server (saved chats on); call at import time.
    ``model_of``: the name of a saved chat's (a thread's) model."""
    from chainlit.data import get_data_layer
    from chainlit.server import app

    async def found(token: str) -> Optional[tuple[share_links.Share, dict]]:
        layer = get_data_layer()
        share = await share_links.find(layer, token)
        thread = share and await layer.get_thread(share.thread_id)
        return (share, thread) if thread else None

    def not_found(request: Request) -> HTMLResponse:
        return HTMLResponse(not_found_html(lang_of(request.headers.get("accept-language"))),
                            status_code=404, headers=HEADERS)

    @app.get(share_links.PATH + "/{token}", include_in_schema=False)
    async def shared_page(token: str, request: Request) -> HTMLResponse:
        shared = await found(token)
        if shared is None:
            return not_found(request)
        lang = lang_of(request.headers.get("accept-language"))
        thread = shared[1]
        conversation, _ = conversation_from_thread(thread, "")
        title = thread.get("name") or text(lang, "share_untitled")
        return HTMLResponse(page_html(lang, title, conversation, model_of(thread), token), headers=HEADERS)

    @app.get(share_links.qr_path("{token}"), include_in_schema=False)
    async def shared_qr(token: str, request: Request) -> Response:
        shared = await found(token)
        if shared is None:
            return not_found(request)
        return Response(share_qr.svg(shared[0].link(public_url)), media_type="image/svg+xml",
                        headers={"cache-control": "no-store", "x-content-type-options": "nosniff"})

    catch_all_last(app)
