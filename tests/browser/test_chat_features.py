"""The chat's features in a real Chromium against the real engine (demo model).

Regenerate, editing a sent message, attached files, export, a message sent the
instant the chat opens, and the README's picture.  Stop during an edited re-run is
in tests/browser/test_browser.py with the other Stop test.
"""

from __future__ import annotations

import json
import re
import socket
import socketserver
import threading
from contextlib import contextmanager

import httpx
import pytest

from app.conversation.attachments import Attachment, prompt_with
from tests.support.screenshots import screenshot_path
from tests.support import sample_files as files
from tests.support.settings import start_app, SHORT_REPLY
from tests.support.browser import (
    ASSISTANT, USER, a_stopped_long_reply, log_in, new_chat, open_chat, send, wait_until_vllm_is_idle,
    body, edit_the_first_of_two, figures, finished_replies, regenerate, regenerate_button, regenerated,
    send_with_files, user_prompt)
from server.stack.processes import free_port


# --- Regenerate -----------------------------------------------------------------------

def test_regenerate_replaces_the_reply_in_the_history(page_factory, short_app):
    page = open_chat(page_factory, short_app)
    first, second = regenerated(page)
    assert page.locator(ASSISTANT).filter(has_text="reply tokens").count() == 1, "the new one took its place"
    # The same history went to the model: the first reply is not in the new prompt.
    assert figures(second) == figures(first) == (user_prompt(short_app, "Tell me about tea."), SHORT_REPLY)
    regenerate_button(page).wait_for(timeout=30_000)
    assert regenerate_button(page).count() == 1, "only the last reply can be regenerated"

    # The next question's prompt holds the regenerated reply, not both.
    send(page, "And coffee?")
    third = finished_replies(page, 2)[-1]
    assert figures(second)[0] + SHORT_REPLY < figures(third)[0] < figures(second)[0] + 2 * SHORT_REPLY
    regenerate_button(page).wait_for(timeout=30_000)
    assert regenerate_button(page).count() == 1


class Relay(socketserver.ThreadingTCPServer):
    """Passes bytes between a port and the engine: "the engine comes back" on demand.

    Not a fake: every byte of every answer comes from the real vLLM.
    """

    daemon_threads = allow_reuse_address = True

    def __init__(self, port: int, target: tuple[str, int]):
        self.target = target
        super().__init__(("127.0.0.1", port), RelayHandler)


class RelayHandler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        upstream = socket.create_connection(self.server.target)

        def pump(source, sink):
            try:
                while data := source.recv(65536):
                    sink.sendall(data)
            except OSError:
                pass
            finally:
                sink.close()
        threading.Thread(target=pump, args=(upstream, self.request), daemon=True).start()
        pump(self.request, upstream)


def test_regenerate_after_an_engine_error(page_factory, engine, tmp_path):
    settings, _ = engine
    port = free_port()
    with contextmanager(start_app)(tmp_path, engine_url=f"http://127.0.0.1:{port}", ignore_eos=True,
                                   max_tokens=SHORT_REPLY) as app:
        page = page_factory(app.app_url)
        page.get_by_text(re.compile("is not reachable")).first.wait_for(timeout=30_000)
        send(page, "Tell me about tea.")
        page.get_by_text(re.compile("is not reachable")).nth(1).wait_for(timeout=30_000)
        relay = Relay(port, ("127.0.0.1", settings.engine_port))
        threading.Thread(target=relay.serve_forever, daemon=True).start()
        try:
            regenerate_button(page).click()  # under the error
            reply = finished_replies(page, 1)[-1]
        finally:
            relay.shutdown()
            relay.server_close()
    assert figures(reply) == (user_prompt(settings, "Tell me about tea."), SHORT_REPLY)


def test_regenerate_can_be_stopped(page_factory, engine, chat_app):
    """Regenerate runs outside Chainlit's message handling; Stop must still reach it."""
    settings, _ = engine
    page = a_stopped_long_reply(page_factory, chat_app)
    regenerate_button(page).click()  # under the stop notice, which goes with the stopped reply
    page.get_by_text("Stopped. The text above is kept.").wait_for(state="detached", timeout=30_000)
    page.locator("#stop-button").wait_for(timeout=30_000)
    page.wait_for_function(
        f"[...document.querySelectorAll('{ASSISTANT}')].at(-1).innerText.length > 20", timeout=60_000)
    page.locator("#stop-button").evaluate("button => button.click()")
    page.get_by_text("Stopped. The text above is kept.").wait_for(timeout=60_000)
    wait_until_vllm_is_idle(settings)
    texts = page.locator(ASSISTANT).all_inner_texts()
    assert not any("tok/s" in t for t in texts), "a reply ran to its end: Stop did not stop it"
    assert "Task manually stopped" not in page.content(), "Chainlit's English notice is shown"


def set_seed(page, seed: str) -> None:
    page.locator("#chat-settings-open-modal").click()
    page.locator("#seed").fill(seed)
    page.get_by_role("button", name=re.compile("Confirm|确认")).click()


def test_a_seed_from_the_settings_panel_repeats_the_reply(page_factory, short_app):
    """QA: with a seed, Regenerate (same message, same history) gives the same reply."""
    page = open_chat(page_factory, short_app)
    set_seed(page, "abc")
    page.get_by_text("Settings not applied: the seed abc is not a whole number").wait_for(timeout=30_000)
    set_seed(page, "42")
    send(page, "Tell me about tea.")
    first = finished_replies(page, 1)[-1]
    assert "· seed 42" in first
    second = regenerate(page)
    assert body(second) == body(first) and "· seed 42" in second


def test_an_edited_message_is_answered_from_where_it_was(page_factory, short_app):
    page = open_chat(page_factory, short_app)
    edit_the_first_of_two(page, "Tell me about green tea.")
    page.wait_for_function(f"document.querySelectorAll('{USER}').length === 1", timeout=30_000)
    reply = finished_replies(page, 1)[-1]
    # Only the edited text went to the model: the old exchanges were forgotten.
    assert figures(reply) == (user_prompt(short_app, "Tell me about green tea."), SHORT_REPLY)
    assert page.locator(USER).all_inner_texts()[0].strip() == "Tell me about green tea."
    assert "And coffee?" not in page.content()


NOTES = "Meeting notes\n- budget approved\n- launch on Monday\n"


def test_attached_files_go_into_the_prompt_counted_exactly(page_factory, short_app):
    page = open_chat(page_factory, short_app)
    send_with_files(page, "Summarise these files.", [
        ("notes.md", "text/markdown", NOTES.encode()),
        ("report.pdf", "application/pdf", files.pdf_with_text()),
        ("prices.csv", "text/csv", files.CP1252_TEXT.encode("cp1252")),
        ("中文.txt", "text/plain", files.GBK_TEXT.encode("gbk")),
    ])
    page.get_by_text("prices.csv is not UTF-8; it was read as cp1252").wait_for(timeout=30_000)
    page.get_by_text("中文.txt is not UTF-8; it was read as gb18030").wait_for(timeout=30_000)
    reply = finished_replies(page, 1)[-1]
    expected = prompt_with("Summarise these files.", [
        Attachment("notes.md", NOTES, "utf-8"), Attachment("report.pdf", files.PDF_TEXT, "pdf"),
        Attachment("prices.csv", files.CP1252_TEXT, "cp1252"), Attachment("中文.txt", files.GBK_TEXT, "gb18030")])
    assert figures(reply) == (user_prompt(short_app, expected), SHORT_REPLY)


def test_files_still_upload_after_another_app_of_the_same_checkout_stopped(
        page_factory, short_app, engine, tmp_path):
    """A stopping Chainlit deletes its files directory: it must not be the other workers'."""
    page = open_chat(page_factory, short_app)
    settings, _ = engine
    for _ in start_app(tmp_path, engine_url=settings.engine_base_url):
        pass  # started and stopped
    send_with_files(page, "Summarise this.", [("notes.md", "text/markdown", NOTES.encode())])
    reply = finished_replies(page, 1)[-1]
    expected = prompt_with("Summarise this.", [Attachment("notes.md", NOTES, "utf-8")])
    assert figures(reply) == (user_prompt(short_app, expected), SHORT_REPLY)


def test_bad_files_are_refused_by_name_and_the_typed_text_stays(page_factory, short_app):
    page = open_chat(page_factory, short_app)
    # An empty file never reaches the chat: the upload itself is refused (app/web/upload_check.py).
    page.locator("#upload-button-input").set_input_files(
        [{"name": "empty.txt", "mimeType": "text/plain", "buffer": b""}])
    page.get_by_text("Failed to upload empty.txt: empty.txt is empty").wait_for(timeout=30_000)
    send_with_files(page, "Here are my files.", [
        ("photo.png", "image/png", files.png()),
        ("archive.gz", "application/gzip", files.gzip_bytes()),
        ("blank.txt", "text/plain", b" \n\n "),
        ("scan.pdf", "application/pdf", files.scanned_pdf()),
    ])
    error = page.locator(ASSISTANT).filter(has_text="Not sent to the model")
    error.wait_for(timeout=30_000)
    message = error.inner_text()
    for expected in ("photo.png is an image", "archive.gz is not text", "blank.txt is empty",
                     "scan.pdf has no text layer"):
        assert expected in message, message
    assert "Here are my files." in page.locator(USER).last.inner_text()  # beside the files' chips
    assert not any("reply tokens" in t for t in page.locator(ASSISTANT).all_inner_texts())


def test_a_50_mb_file_is_stopped_by_the_browser_and_by_the_server(page_factory, short_app, tmp_path):
    page = open_chat(page_factory, short_app)
    big = tmp_path / "big.csv"
    with big.open("wb") as f:
        f.truncate(50 * 10**6)
    page.locator("#upload-button-input").set_input_files(str(big))
    page.get_by_text("File is larger than 10 MB").wait_for(timeout=30_000)
    page.locator("#chat-input").fill("still here")
    assert page.locator("#chat-input").input_value() == "still here"

    # A client that skips the browser's check meets the server's (same session), before the
    # body is read (app/web/upload_limit.py; tests/stack/test_web_security.py sends bodies that lie).
    session = next(c["value"] for c in page.context.cookies() if c["name"] == "X-Chainlit-Session-id")
    response = httpx.post(f"{short_app.app_url}/project/file", params={"session_id": session},
                          files={"file": ("big.csv", big.read_bytes(), "text/csv")}, timeout=60)
    assert response.status_code == 413
    assert response.json()["detail"].startswith("This upload is larger than 10 MB")


def test_a_message_with_files_too_long_for_the_window_is_refused(page_factory, short_app):
    page = open_chat(page_factory, short_app)
    send_with_files(page, "Read this.", [("long.txt", "text/plain", ("weather " * 6000).encode())])
    message = page.get_by_text(re.compile(r"Your message with its attached file\(s\) is \d+ tokens long"))
    message.wait_for(timeout=60_000)
    count, limit = map(int, re.findall(r"\d+", message.inner_text())[:2])
    assert count > limit


# --- export -----------------------------------------------------------------------------

def test_export_downloads_markdown_and_json(page_factory, short_app):
    page = open_chat(page_factory, short_app)
    send(page, "Tell me about tea.")
    finished_replies(page, 1)
    kept = regenerate(page)
    send(page, "/export")
    links = page.locator("a.inline-file")
    links.nth(1).wait_for(timeout=30_000)
    downloaded = {}
    for i in range(2):
        with page.expect_download() as download:
            links.nth(i).click()
        downloaded[download.value.suggested_filename.rsplit(".", 1)[1]] = \
            open(download.value.path(), encoding="utf-8").read()

    assert set(downloaded) == {"md", "json"}
    data = json.loads(downloaded["json"])
    assert data["settings"]["max_tokens"] == SHORT_REPLY
    assert [m["role"] for m in data["messages"]] == ["system", "user", "assistant"]
    assert data["messages"][1]["content"] == "Tell me about tea."
    reply = data["messages"][2]
    assert body(reply["content"]) == body(kept), "the export must hold the reply the history kept"
    assert reply["figures"]["completion_tokens"] == SHORT_REPLY
    assert reply["figures"]["prompt_tokens"] == figures(kept)[0]
    assert "## 1. You\n\nTell me about tea." in downloaded["md"]
    assert reply["figures"]["line"] in downloaded["md"]


# --- the first message of a chat ----------------------------------------------------------

def test_a_message_sent_the_instant_the_chat_opens_is_answered(page_factory, short_app):
    """The composer appears only when the chat can send (public/chat.css, session_tasks)."""
    for attempt in range(3):
        page = page_factory(short_app.app_url)
        page.locator("#chat-input").fill(f"Hello number {attempt}")  # waits until it is visible
        page.keyboard.press("Enter")
        page.locator(USER).first.wait_for(timeout=10_000)
        assert page.locator(USER).first.inner_text().strip() == f"Hello number {attempt}"
        finished_replies(page, 1)


# --- the README's picture ------------------------------------------------------------------

@pytest.fixture(scope="session")
def showcase_app(engine, tmp_path_factory):
    """The chat as a presenter runs it: saved chats and login; replies end on their own."""
    settings, _ = engine
    tmp = tmp_path_factory.mktemp("showcase")
    yield from start_app(tmp, engine_url=settings.engine_base_url, max_tokens=256,
                         chat_db=tmp / "chats.db", users="presenter:demo")


def test_a_normal_exchange_for_the_readme(page_factory, showcase_app, tmp_path):
    """The README's first picture: saved chats, a conversation, replies that end on their own.

    To re-shoot it: tests/support/screenshots.py.
    """
    page = page_factory(showcase_app.app_url)
    log_in(page, "presenter", "demo")
    send(page, "今天天气怎么样？")
    finished_replies(page, 1)
    new_chat(page)
    page.locator(ASSISTANT).first.wait_for(timeout=30_000)
    send(page, "What is a KV cache?")
    finished_replies(page, 1)
    send(page, "Why does it grow with the conversation?")
    answers = finished_replies(page, 2)
    assert all(figures(reply)[1] < 256 for reply in answers), "a reply did not end on its own"
    page.locator("#thread-history").get_by_text("今天天气怎么样？").wait_for(timeout=30_000)
    page.mouse.move(0, 0)
    # Chainlit scrolls the last question to the top; show the whole conversation.
    page.locator(USER).first.evaluate("question => question.scrollIntoView({block: 'start'})")
    page.screenshot(path=screenshot_path("chat.png", tmp_path))
