"""The page a shared chat's link opens: ``/shared/<token>``, read-only, rendered here.

Live, not a snapshot: each load reads the chat as it is saved now, and the page
reloads itself every ``REFRESH_S`` seconds, so an audience follows a presenter's chat
and a taken-back link stops answering at the next reload.  It shows the chat's
exchanges as the model has them (app/kept/saved_chats.py): a regenerated reply replaces
the old one; a reply still streaming appears once it is finished.

What one view costs does not grow with the audience or the chat: the page is rendered
once per version of the chat (its title, model and exchanges; a cache of recent pages, one
render at a time however many ask), in a thread of its own off the event loop, from at most
``MAX_SHOWN_CHARS`` of the latest exchanges. Rendered on the loop for every view, a chat
of 1 MB of emphasis-heavy Markdown took 3 s a view and held other users' requests meanwhile.

Nothing on it writes, and the one thing that runs is the page's own fixed script
(``SCRIPT``): Markdown rendered with raw HTML escaped and only safe link schemes
(markdown-it), and a Content-Security-Policy that allows no script but that one (by its
hash), no form, no outside image, and only this page's own style.

The script does two things.  It takes the chat's theme: Chainlit keeps a browser's choice
in localStorage (``THEME_KEY``: "light", "dark" or "system", the last following the
system's prefers-color-scheme), which this page of the same origin reads; a browser that
never chose gets Chainlit's ``[UI] default_theme`` (dark unless configured), which the page
is rendered in, so that without the script it looks as the chat does for a new visitor.  And
it reloads the page every ``REFRESH_S`` seconds, where a meta refresh did: a page that
reloads itself by surprise needs a way to stop it (WCAG 2.2.1), the page's "Stop following"
link (``?follow=0``), which serves the page without the reload.  The
referrer is withheld, so a link followed from the chat does not carry the token out.
An unknown, malformed and taken-back token get the same 404.  Only GET is routed:
any other method gets 405.

Anyone with a link may ask, without login, so each client address (the one uvicorn takes
from HAProxy's X-Forwarded-For, as the login throttle does: ERNIE_TRUSTED_PROXIES) gets
ERNIE_SHARED_REQUESTS_PER_MIN requests a minute to the pages and their QR codes, counted
before any look-up, in each worker's memory (``app/auth/user_limits.LocalRate``); past it
429 with Retry-After and a short page.  A page that reloads itself every 10 s asks 12 times
a minute with its QR code, so the default serves 20 watchers behind one NAT.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import math
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from html import escape
from typing import Callable, Optional, Sequence

from fastapi import Request
from fastapi.responses import HTMLResponse, Response
from markdown_it import MarkdownIt

from app.auth.login_throttle import address_key
from app.auth.user_limits import MINUTE_S, LocalRate, Rate
from app.conversation.history import Conversation, Turn
from app.kept.saved_chats import conversation_from_thread
from app.pages import share_links, share_qr
from app.texts import lang_of, text
from app.web.own_routes import catch_all_last

REFRESH_S = 10
# Markdown shown at most, the latest exchanges first: markdown-it renders emphasis-heavy
# Markdown at about 0.1 MB a second on a busy 2-core machine: a page costs a few seconds
# of one thread, once per version of the chat.
MAX_SHOWN_CHARS = 200_000
PAGES_KEPT = 32
# CommonMark with GitHub's tables and strike-through; "html": False escapes raw HTML, and
# markdown-it refuses javascript:, vbscript:, file: and non-image data: links itself.
MARKDOWN = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable(["table", "strikethrough"])
THEME_KEY = "vite-ui-theme"
STYLE = """
html { --ink: #1a1a1a; --ground: #fff; --muted: #555; --line: #ddd; --user: #eef3ff; --reply: #f5f5f5;
       --who: #444; --code: #fff; --cell: #ccc; --link: #0b57d0; }
html[data-theme="dark"] { --ink: #ececec; --ground: #212121; --muted: #b4b4b4; --line: #444; --user: #2b3448;
       --reply: #2f2f2f; --who: #cfcfcf; --code: #181818; --cell: #555; --link: #8ab4f8; color-scheme: dark; }
html { background: var(--ground); }
body { max-width: 52rem; margin: 0 auto; padding: 1rem; color: var(--ink);
       font-family: "Noto Sans", "Noto Sans CJK SC", "Helvetica Neue", Arial, sans-serif; line-height: 1.5; }
a { color: var(--link); }
header { display: flex; gap: 1rem; align-items: center; border-bottom: 1px solid var(--line); }
header img { width: 8rem; height: 8rem; flex: none; }
h1 { font-size: 1.4rem; margin: 0; overflow-wrap: anywhere; }
.note { color: var(--muted); font-size: 0.9rem; }
.turn { margin: 1rem 0; padding: 0.5rem 1rem; border-radius: 0.5rem; overflow-wrap: anywhere; }
.user { background: var(--user); } .assistant { background: var(--reply); }
.who { font-weight: bold; font-size: 0.85rem; color: var(--who); }
pre { overflow-x: auto; background: var(--code); padding: 0.5rem; } table { border-collapse: collapse; }
td, th { border: 1px solid var(--cell); padding: 0.2rem 0.5rem; }
@media (max-width: 30rem) { header img { width: 6rem; height: 6rem; } body { padding: 0.75rem; } }
"""
# The chat's theme, and the reload while the page follows the chat (the module's docstring).
SCRIPT = f"""(() => {{
  const root = document.documentElement;
  let theme = null;
  try {{ theme = localStorage.getItem("{THEME_KEY}"); }} catch (e) {{}}
  if (theme === "system") theme = matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light";
  if (theme === "light" || theme === "dark") root.dataset.theme = theme;
  const seconds = Number(root.dataset.refresh);
  if (seconds > 0) setTimeout(() => location.reload(), seconds * 1000);
}})();"""


def _hash(source: str) -> str:
    return base64.b64encode(hashlib.sha256(source.encode()).digest()).decode()


POLICY = (f"default-src 'none'; style-src 'sha256-{_hash(STYLE)}'; script-src 'sha256-{_hash(SCRIPT)}'; "
          "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'self'")
HEADERS = {"content-security-policy": POLICY, "referrer-policy": "no-referrer",
           "cache-control": "no-store", "x-robots-tag": "noindex", "x-content-type-options": "nosniff"}


def _page(lang: str, title: str, body: str, theme: str, refresh_s: int = 0) -> str:
    """``theme``: the one shown until the script reads the chat's; ``refresh_s``: how often the
    page reloads itself (0: never)."""
    refresh = f' data-refresh="{refresh_s}"' if refresh_s else ""
    return (f'<!doctype html><html lang="{"zh-CN" if lang == "zh" else "en"}" data-theme="{escape(theme)}"'
            f'{refresh}><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<meta name="referrer" content="no-referrer"><title>{escape(title)}</title>'
            f"<style>{STYLE}</style><script>{SCRIPT}</script></head><body>{body}</body></html>")


def shown_turns(turns: Sequence[Turn], max_chars: int = MAX_SHOWN_CHARS) -> tuple[list[Turn], int]:
    """The latest exchanges that fit in ``max_chars`` (the last one cut to fit when it alone
    does not), and how many earlier ones are left out."""
    shown, used = [], 0
    for turn in reversed(turns):
        size = len(turn.user) + len(turn.assistant)
        if used + size > max_chars:
            if not shown:
                room = max(max_chars - len(turn.user[:max_chars // 2]), 0)
                shown.append(Turn(turn.user[:max_chars // 2], turn.assistant[:room]))
            break
        shown.append(turn)
        used += size
    return shown[::-1], len(turns) - len(shown)


def page_html(lang: str, title: str, conversation: Conversation, model: str, token: str,
              theme: str = "dark", follow: bool = True) -> str:
    """The shared chat: its latest exchanges, each side's Markdown rendered inert; ``follow``:
    the page reloads itself, with a link that stops it (else a link back to following)."""
    turns, left_out = shown_turns(conversation.turns)
    cut = f'<p class="note">{escape(text(lang, "share_page_cut", count=left_out))}</p>' if left_out else ""
    sections = "".join(
        f'<section class="turn user"><div class="who">{escape(text(lang, "export_you"))}</div>'
        f'{MARKDOWN.render(turn.user)}</section>'
        f'<section class="turn assistant"><div class="who">{escape(model)}</div>'
        f'{MARKDOWN.render(turn.assistant)}</section>'
        for turn in turns)
    note, link, href = ((text(lang, "share_page_note", seconds=REFRESH_S), text(lang, "share_page_stop"),
                         f"{token}?follow=0") if follow else
                        (text(lang, "share_page_still"), text(lang, "share_page_follow"), token))
    header = (f'<header><img src="{share_links.qr_path(token)}" alt="{escape(text(lang, "share_qr_alt"))}">'
              f'<div><h1>{escape(title)}</h1><p class="note">{escape(note)} '
              f'<a href="{escape(href)}">{escape(link)}</a></p></div></header>')
    return _page(lang, title, f"{header}<main>{cut}{sections}</main>", theme, REFRESH_S if follow else 0)


def version(*parts: object) -> str:
    """What a rendered page depends on, as one key."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(repr(part).encode("utf-8", "surrogatepass"))
        digest.update(b"\0")
    return digest.hexdigest()


class Pages:
    """Rendered pages by version: the recent ones kept, each rendered once however many ask
    meanwhile, one at a time in a thread of their own, off the event loop."""

    def __init__(self, kept: int = PAGES_KEPT):
        self.kept = kept
        self.renders: OrderedDict[str, asyncio.Future] = OrderedDict()
        self.renderer = ThreadPoolExecutor(1, thread_name_prefix="shared-page")

    async def get(self, key: str, render: Callable[[], str]) -> str:
        task = self.renders.get(key)
        if task is None or (task.done() and task.exception() is not None):
            task = asyncio.get_running_loop().run_in_executor(self.renderer, render)
            self.renders[key] = task
        self.renders.move_to_end(key)
        while len(self.renders) > self.kept:
            self.renders.popitem(last=False)
        return await asyncio.shield(task)


def not_found_html(lang: str, theme: str = "dark") -> str:
    message = text(lang, "share_not_found")
    return _page(lang, message, f"<h1>{escape(message)}</h1>", theme)


def too_many_html(lang: str, seconds: int, theme: str = "dark") -> str:
    message = text(lang, "share_too_many", seconds=seconds)
    return _page(lang, message, f"<h1>{escape(message)}</h1>", theme)


def install(public_url: str, model_of: Callable[[dict], str], requests_per_min: int = 0) -> None:
    """Add the shared chats' routes to Chainlit's server (saved chats on); call at import time.
    ``model_of``: the name of a saved chat's (a thread's) model; ``requests_per_min``: what
    one client address may ask of them (0: no limit)."""
    from chainlit.config import config
    from chainlit.data import get_data_layer
    from chainlit.server import app

    theme = config.ui.default_theme or "dark"  # what the chat shows a browser that never chose
    pages = Pages()
    per_address = LocalRate(Rate(requests_per_min, MINUTE_S)) if requests_per_min else None

    def refused(request: Request) -> Optional[HTMLResponse]:
        """The 429 for an address past its requests, before anything is looked up."""
        if per_address is None:
            return None
        wait_s = per_address.take(address_key((request.client or ("unknown",))[0]))
        if not wait_s:
            return None
        seconds = max(1, math.ceil(wait_s))
        return HTMLResponse(too_many_html(lang_of(request.headers.get("accept-language")), seconds, theme),
                            status_code=429, headers={**HEADERS, "retry-after": str(seconds)})

    async def found(token: str) -> Optional[tuple[share_links.Share, dict]]:
        layer = get_data_layer()
        share = await share_links.find(layer, token)
        thread = share and await layer.get_thread(share.thread_id)
        return (share, thread) if thread else None

    def not_found(request: Request) -> HTMLResponse:
        return HTMLResponse(not_found_html(lang_of(request.headers.get("accept-language")), theme),
                            status_code=404, headers=HEADERS)

    @app.get(share_links.PATH + "/{token}", include_in_schema=False)
    async def shared_page(token: str, request: Request, follow: str = "") -> HTMLResponse:
        refusal = refused(request)
        if refusal is not None:
            return refusal
        shared = await found(token)
        if shared is None:
            return not_found(request)
        lang = lang_of(request.headers.get("accept-language"))
        thread = shared[1]
        conversation, _ = conversation_from_thread(thread, "")
        title, model = thread.get("name") or text(lang, "share_untitled"), model_of(thread)
        following = follow != "0"
        key = version(lang, title, model, token, following,
                      [(turn.user, turn.assistant) for turn in conversation.turns])
        html = await pages.get(key, lambda: page_html(lang, title, conversation, model, token, theme, following))
        return HTMLResponse(html, headers=HEADERS)

    @app.get(share_links.qr_path("{token}"), include_in_schema=False)
    async def shared_qr(token: str, request: Request) -> Response:
        refusal = refused(request)
        if refusal is not None:
            return refusal
        shared = await found(token)
        if shared is None:
            return not_found(request)
        return Response(share_qr.svg(shared[0].link(public_url)), media_type="image/svg+xml",
                        headers={"cache-control": "no-store", "x-content-type-options": "nosniff"})

    catch_all_last(app)
