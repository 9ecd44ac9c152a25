"""Sharing a saved chat by link and QR code (app/pages/share_links.py, app/pages/share_page.py).

The store and the page's rendering run here against a real SQLite chat database
through Chainlit's own data layer; the whole path (``/share`` in the chat, the page
in a browser without login, ``/unshare``) in a real Chromium against the real app
and engine.  QR codes are read back with a real decoder, zbar's ``zbarimg``
(Debian's zbar-tools, installed by ./scripts/test).
"""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import uuid
from pathlib import Path

import httpx
import pytest

from app.conversation.history import Conversation
from app.kept.saved_chats import data_layer
from app.pages import share_links, share_qr
from app.pages.share_page import POLICY, not_found_html, page_html
from server import chat_db
from server.settings import load_settings
from server.stack.processes import free_port
from tests.screenshots import screenshot_path
from tests import postgres
from tests.conftest import start_app
from tests.test_settings import error_for
from tests.test_browser import (  # noqa: F401 (browser and page_factory are fixtures)
    ASSISTANT, USER, browser, log_in, page_factory, send)
from tests.test_chat_features import finished_replies

# What content must never run on the shared page: a script, an event handler, a script link.
XSS = ("**bold** <script>window.pwned = 1</script> <img src=x onerror=\"window.pwned = 1\"> "
       "[click](javascript:window.pwned=1)")
LINK = re.compile(r"https?://[^\s)]+/shared/[A-Za-z0-9_-]{43}")


def command(page, line: str, answer: str):
    """Send a chat command and wait for its answer and for the chat to take input again."""
    send(page, line)
    message = page.locator(ASSISTANT).filter(has_text=answer).last
    message.wait_for(timeout=30_000)
    page.locator("#stop-button").wait_for(state="detached", timeout=30_000)
    return message


def decoded(png: Path) -> str:
    """What a real QR decoder reads in the image."""
    zbarimg = shutil.which("zbarimg")
    assert zbarimg, "zbarimg is missing: apt-get install zbar-tools (./scripts/test does)"
    run = subprocess.run([zbarimg, "--quiet", "--raw", str(png)], capture_output=True, text=True, timeout=30)
    assert run.returncode == 0, run.stderr
    return run.stdout.strip()


# --- the page's rendering ----------------------------------------------------------

def test_content_is_rendered_as_markdown_and_nothing_in_it_can_run():
    conversation = Conversation("")
    conversation.add(XSS, "A reply with `code` and <b onmouseover=alert(1)>html</b>")
    html = page_html("en", "<script>title()</script>", conversation, "demo", "t" * 43)
    assert "<strong>bold</strong>" in html and "<code>code</code>" in html
    assert "<script" not in html.lower()
    assert "<img src=\"x\"" not in html and "<b " not in html and 'href="javascript:' not in html
    assert "&lt;script&gt;window.pwned" in html
    # The policy lets no script run, whatever slipped through, and only this page's style.
    assert "script-src" not in POLICY and "default-src 'none'" in POLICY and "unsafe" not in POLICY


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


# --- the store, on real chat databases: SQLite and PostgreSQL ------------------------

async def owner_only_scenario(target: str) -> None:
    from chainlit.user import User

    chat_db.prepare_db(target)
    layer = data_layer(target)
    alice = await layer.create_user(User(identifier="alice"))
    thread = str(uuid.uuid4())
    await layer.update_thread(thread, name="apricots", user_id=alice.id)

    with pytest.raises(share_links.NotOwner):
        await share_links.share(layer, thread, "bob", "http://x")
    with pytest.raises(share_links.NotOwner):
        await share_links.unshare(layer, thread, "bob")
    with pytest.raises(share_links.NothingToShare):
        await share_links.share(layer, str(uuid.uuid4()), "alice", "http://x")
    with pytest.raises(share_links.NothingToShare):
        await share_links.share(layer, None, "alice", "http://x")

    shared = await share_links.share(layer, thread, "alice", "http://x")
    assert share_links.TOKEN.fullmatch(shared.token) and shared.owner == "alice"
    assert shared.thread_id == thread
    assert await share_links.share(layer, thread, "alice", "http://y") == shared  # one link per chat
    assert await share_links.find(layer, shared.token) == shared
    assert await share_links.find(layer, "A" * 43) is None
    assert await share_links.find(layer, "'; DROP TABLE shares; --") is None
    assert await share_links.unshare(layer, thread, "alice") is True
    assert await share_links.find(layer, shared.token) is None
    assert await share_links.unshare(layer, thread, "alice") is False
    again = await share_links.share(layer, thread, "alice", "http://x")
    assert again.token != shared.token  # a new link: the old one stays dead
    await layer.engine.dispose()


def test_only_the_owner_shares_and_unshares_and_a_taken_back_token_finds_nothing(tmp_path):
    asyncio.run(owner_only_scenario(str(tmp_path / "chats.db")))


@pytest.fixture(scope="module")
def database():
    yield from postgres.start(free_port())


def test_sharing_works_the_same_on_postgresql(database):
    asyncio.run(owner_only_scenario(database))


# --- the whole path, in a real browser -----------------------------------------------

@pytest.fixture(scope="module")
def sharing_app(engine, tmp_path_factory):
    """Saved chats on SQLite with two users."""
    settings, _ = engine
    tmp = tmp_path_factory.mktemp("share")
    yield from start_app(tmp, engine_url=settings.engine_base_url, ignore_eos=True, max_tokens=24,
                         chat_db=tmp / "chats.db", users="alice:wonderland,bob:builder")


@pytest.mark.engine
@pytest.mark.browser
def test_a_shared_chat_is_read_by_link_and_qr_code_without_login_until_unshared(page_factory, sharing_app,
                                                                                 tmp_path):
    owner = page_factory(sharing_app.app_url)
    log_in(owner, "alice", "wonderland")
    send(owner, XSS)
    finished_replies(owner, 1)
    shared_message = command(owner, "/share", "/unshare")
    link = LINK.search(shared_message.inner_text()).group(0)
    assert link.startswith(sharing_app.app_url + "/shared/")
    qr = shared_message.locator('img[alt="qr.png"]')
    qr.wait_for(timeout=30_000)
    qr.scroll_into_view_if_needed()
    owner.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=qr.element_handle(),
                            timeout=30_000)
    qr.screenshot(path=tmp_path / "qr.png")
    assert decoded(tmp_path / "qr.png") == link

    reader = page_factory(link)  # another browser context: no login cookie
    reader.get_by_text("bold").first.wait_for(timeout=30_000)
    assert reader.locator("main strong").first.inner_text() == "bold"
    assert "<script>window.pwned = 1</script>" in reader.locator("main").inner_text()
    assert reader.locator("main .assistant").count() == 1
    assert reader.evaluate("window.pwned") is None
    assert reader.locator("input, textarea, form, button, #chat-input, script").count() == 0
    reader.screenshot(path=screenshot_path("shared-chat.png", tmp_path), full_page=True)
    assert httpx.post(link, timeout=10).status_code == 405

    live = page_factory(f"{sharing_app.app_url}/live?shared={link.rsplit('/', 1)[1]}")
    live.locator("#shared img").wait_for(timeout=30_000)
    assert live.locator("#shared figcaption").inner_text() == link
    live.locator("#shared img").screenshot(path=tmp_path / "qr-live.png")
    assert decoded(tmp_path / "qr-live.png") == link

    command(owner, "/unshare", "taken back")
    gone = httpx.get(link, timeout=10)
    unknown = httpx.get(link[:-4] + "AAAA", timeout=10)
    assert gone.status_code == unknown.status_code == 404 and gone.text == unknown.text
    assert httpx.get(f"{link}/qr.svg", timeout=10).status_code == 404


@pytest.mark.engine
@pytest.mark.browser
def test_another_user_shares_only_their_own_chat(page_factory, sharing_app):
    alices = page_factory(sharing_app.app_url)
    log_in(alices, "alice", "wonderland")
    send(alices, "Alice's secret plan")
    finished_replies(alices, 1)
    alice_link = LINK.search(command(alices, "/share", "/unshare").inner_text()).group(0)

    bobs = page_factory(sharing_app.app_url)
    log_in(bobs, "bob", "builder")
    command(bobs, "/share", "Nothing to share")  # a chat with nothing in it yet
    send(bobs, "Bob's own question")
    finished_replies(bobs, 1)
    bob_link = LINK.search(command(bobs, "/share", "/unshare").inner_text()).group(0)
    assert bob_link != alice_link
    bob_page = httpx.get(bob_link, timeout=10).text
    assert "own question" in bob_page and "secret plan" not in bob_page
