"""Sharing a saved chat by link and QR code (app/pages/share_links.py, app/pages/share_page.py).

The store and the page's rendering run here against a real SQLite chat database
through Chainlit's own data layer; the whole path (``/share`` in the chat, the page
in a browser without login, ``/unshare``) in a real Chromium against the real app
and engine.  QR codes are read back with a real decoder, zbar's ``zbarimg``
(Debian's zbar-tools, installed by ./scripts/test).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib

import pytest

from app.pages import share_links, share_qr
from app.conversation.history import Conversation, Turn
from app.pages.share_page import POLICY, REFRESH_S, SCRIPT, Pages, not_found_html, page_html, shown_turns, too_many_html
from server.settings import load_settings
from tests.support.settings import error_for
from tests.support.share import decoded, owner_only_scenario, XSS


# --- the page's rendering ----------------------------------------------------------

def test_content_is_rendered_as_markdown_and_nothing_in_it_can_run():
    conversation = Conversation("")
    conversation.add(XSS, "A reply with `code` and <b onmouseover=alert(1)>html</b>")
    html = page_html("en", "<script>title()</script>", conversation, "demo", "t" * 43)
    assert "<strong>bold</strong>" in html and "<code>code</code>" in html
    assert html.lower().count("<script") == 1 and f"<script>{SCRIPT}</script>" in html  # the page's own
    assert "<img src=\"x\"" not in html and "<b " not in html and 'href="javascript:' not in html
    assert "&lt;script&gt;window.pwned" in html
    # The policy lets no script run but the page's own, whatever slipped through, and only
    # this page's style.
    script_hash = base64.b64encode(hashlib.sha256(SCRIPT.encode()).digest()).decode()
    assert f"script-src 'sha256-{script_hash}';" in POLICY and POLICY.count("sha256-") == 2
    assert "default-src 'none'" in POLICY and "unsafe" not in POLICY


def test_the_page_follows_the_chat_until_told_to_stop_and_starts_in_the_chats_default_theme():
    conversation = Conversation("")
    conversation.add("Hello", "Hi")
    following = page_html("en", "A chat", conversation, "demo", "t" * 43, theme="dark")
    assert f'data-theme="dark" data-refresh="{REFRESH_S}"' in following
    assert f'<a href="{"t" * 43}?follow=0">Stop following</a>' in following
    still = page_html("en", "A chat", conversation, "demo", "t" * 43, theme="light", follow=False)
    assert 'data-theme="light">' in still and "data-refresh" not in still
    assert f'<a href="{"t" * 43}">Follow it</a>' in still and "as it was when this page was loaded" in still
    assert "http-equiv" not in following + still  # axe's meta-refresh: a reload the reader cannot stop


def test_the_not_found_page_is_the_same_for_every_token_and_in_chinese():
    assert "taken back" in not_found_html("en")
    assert "收回" in not_found_html("zh")


def test_the_link_uses_the_public_url_else_the_owners_page_never_a_bad_origin():
    assert share_links.origin_for("https://chat.example.com", "http://evil.example", "x") == "https://chat.example.com"
    assert share_links.origin_for("", "http://10.0.0.5:8080", "x") == "http://10.0.0.5:8080"
    assert share_links.origin_for("", "http://a/b\"><script>", "http://127.0.0.1:8080") == "http://127.0.0.1:8080"
    assert share_links.origin_for("", None, "http://127.0.0.1:8080") == "http://127.0.0.1:8080"
    share = share_links.Share("t" * 43, "id", "alice", "http://10.0.0.5:8080")
    assert share.link() == "http://10.0.0.5:8080/shared/" + "t" * 43
    assert share.link("https://chat.example.com").startswith("https://chat.example.com/shared/")


@pytest.mark.parametrize("value", ["chat.example.com", "https://chat.example.com/app", "https://*.example.com"])
def test_a_public_url_must_be_an_origin(monkeypatch, value):
    assert "ERNIE_PUBLIC_URL" in error_for(monkeypatch, "ERNIE_PUBLIC_URL", value)
    assert "is not an origin" in error_for(monkeypatch, "ERNIE_PUBLIC_URL", value)


def test_the_public_url_is_kept_as_browsers_write_origins(monkeypatch):
    monkeypatch.setenv("ERNIE_PUBLIC_URL", "https://Chat.example.com:8443/")
    assert load_settings().public_url == "https://chat.example.com:8443"


def test_the_qr_code_decodes_to_the_link(tmp_path):
    link = "https://chat.example.com/shared/" + "A" * 43
    (tmp_path / "qr.png").write_bytes(share_qr.png(link))
    assert decoded(tmp_path / "qr.png") == link


def test_only_the_owner_shares_and_unshares_and_a_taken_back_token_finds_nothing(tmp_path):
    asyncio.run(owner_only_scenario(str(tmp_path / "chats.db")))


def test_the_page_shows_the_latest_exchanges_that_fit():
    turns = [Turn(f"q{i}" * 10, f"a{i}" * 40) for i in range(10)]   # 100 characters each
    shown, left_out = shown_turns(turns, max_chars=350)
    assert [t.user[:2] for t in shown] == ["q7", "q8", "q9"] and left_out == 7
    assert shown_turns(turns, max_chars=10_000) == (turns, 0)
    [huge], left_out = shown_turns([Turn("u" * 1000, "r" * 1000)], max_chars=300)
    assert (len(huge.user), len(huge.assistant), left_out) == (150, 150, 0)   # cut, never empty


async def test_a_page_is_rendered_once_however_many_ask_for_it():
    rendered = []

    def render():
        rendered.append(1)
        return "<html>"
    pages = Pages(kept=2)
    assert await asyncio.gather(*(pages.get("v1", render) for _ in range(10))) == ["<html>"] * 10
    assert len(rendered) == 1
    await pages.get("v2", render)
    await pages.get("v3", render)                   # v1 is the oldest of three: let go
    await pages.get("v1", render)
    assert len(rendered) == 4


def test_too_many_requests_say_when_to_come_back_in_either_language():
    assert "try again in 3 s" in too_many_html("en", 3)
    assert "3 秒后再试" in too_many_html("zh", 3)
    assert too_many_html("en", 3).count("<script") == 1 and 'data-theme="dark"' in too_many_html("en", 3)


def test_the_shared_pages_rate_serves_twenty_watchers_behind_one_address():
    per_watcher = 2 * 60 / REFRESH_S  # the page and its QR code at every reload
    assert load_settings().shared_requests_per_min == 20 * per_watcher
