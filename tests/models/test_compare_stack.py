"""``/compare`` (app/conversation/compare.py) against two real vLLMs and a real Chromium.

The engines are the models tier's pair (tests/models/conftest.py): A the demo model (4096
tokens), B the smaller demo model (1024 tokens), whose replies differ from A's; the app is this
module's own.  Which engines answered, and that Stop ended their requests, is read from
the engines' own /metrics, never from the app's texts.
"""

from __future__ import annotations

import re
import time

import httpx
import pytest

from app.texts import text
from server.usage_log import read_usage
from tests.support.metrics import metric, metric_from_text
from tests.support.accessibility import PHONE, THEMES, choose_theme, overflow, violations
from tests.support.screenshots import screenshot_path
from tests.support.browser import ASSISTANT, USER, log_in, send, BODY, COLUMN, FIGURES_LINE, NAME, NOTE
from tests.support.browser import send_with_files
from tests.support.models import SMALL_WINDOW, app_on, long_text, requests_of, requests_when

REPLY_TOKENS = 48
FIGURES = re.compile(rf"\d+ ms to first token · [\d.]+ tok/s · (\d+) prompt \+ {REPLY_TOKENS} reply tokens")
QUESTION = "Why is the sky blue, and why are sunsets red?"
HOSTILE = '<img src="x" onerror="window.pwned = 1">'


@pytest.fixture(scope="module")
def compare_app(model_pair, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("compare")
    yield from app_on(model_pair, tmp, max_tokens=REPLY_TOKENS, usage_log=tmp / "usage.jsonl")


def usage_records(app) -> list[dict]:
    return read_usage(app.usage_log)[0] if app.usage_log.exists() else []


def running_when_idle(urls: list[str], within_s: float) -> list[float]:
    """Each engine's running requests, once none runs or ``within_s`` passed."""
    deadline = time.monotonic() + within_s
    while any(now := [metric(url, "vllm:num_requests_running") for url in urls]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return now


WRITTEN_COLUMNS = ("skip => [...document.querySelectorAll('.compare-text')].slice(skip)"
                   ".filter(t => t.innerText.length > 20).length")


def both_writing(page, urls: list[str], within_s: float) -> bool:
    """Send a comparison; whether, at some moment while it runs, both engines generate and both
    of its columns show text. False once it ended without such a moment."""
    earlier = page.locator(BODY).count()
    send(page, "/compare Tell me a long story.")
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        # Two engines generating on 2 cores answer /metrics slowly: a generous wait.
        running = [metric_from_text(httpx.get(f"{url}/metrics", timeout=30).text, "vllm:num_requests_running")
                   for url in urls]
        written = page.evaluate(WRITTEN_COLUMNS, earlier) == 2
        if written and running == [1] * len(urls):
            return True
        if written and not page.locator("#stop-button").count():
            return False
        time.sleep(0.2)
    return False


def test_compare_streams_both_models_side_by_side_outside_the_history_and_a_reopened_chat_shows_it(
        page_factory, compare_app, tmp_path):
    app, urls, names = compare_app
    page = page_factory(app.app_url)
    log_in(page, "alice", "wonderland")
    send(page, "/compare")
    page.locator(ASSISTANT).filter(has_text="to send one question to every served model").wait_for(timeout=30_000)

    before, logged = requests_of(urls), len(usage_records(app))
    send(page, f"/compare {QUESTION}")
    page.locator(COLUMN).nth(1).wait_for(timeout=60_000)
    assert page.locator(NAME).all_inner_texts() == list(names)
    page.locator(FIGURES_LINE).nth(1).wait_for(timeout=120_000)
    page.locator("#stop-button").wait_for(state="detached", timeout=60_000)
    for column in page.locator(COLUMN).all():
        assert column.locator(BODY).inner_text().strip(), column.inner_text()
        assert FIGURES.search(column.locator(FIGURES_LINE).inner_text()), column.inner_text()
    assert requests_when(urls, [before[0] + 1, before[1] + 1]) == [before[0] + 1, before[1] + 1]
    replies = usage_records(app)[logged:]  # the usage log has a line per model's reply
    assert [(r["completion_tokens"], r.get("user")) for r in replies] == [(REPLY_TOKENS, "alice")] * 2, replies
    # Beside the columns the message's Markdown copy stays hidden.
    assert not page.get_by_text(text("en", "compare_not_history")).is_visible()
    page.set_viewport_size({"width": 1400, "height": 900})
    page.locator(COLUMN).first.scroll_into_view_if_needed()
    page.screenshot(path=screenshot_path("compare.png", tmp_path))
    # On a phone, in either theme: the columns one under the other, nothing wider than the
    # screen, and axe finds nothing serious or critical.
    page.set_viewport_size(PHONE)
    for theme in THEMES:
        choose_theme(page, theme)
        first, second = (page.locator(COLUMN).nth(i).bounding_box() for i in (0, 1))
        assert second["y"] >= first["y"] + first["height"], (first, second)
        assert overflow(page) <= 0 and violations(page) == []

    send(page, "/export")  # the chat's model never saw the comparison: nothing to export
    page.get_by_text(text("en", "export_empty")).wait_for(timeout=30_000)

    page.reload()  # the saved chat: Chainlit's data layer kept the Markdown, not the element
    page.locator(USER).first.wait_for(timeout=60_000)
    saved = page.locator(ASSISTANT).filter(has_text=text("en", "compare_not_history"))
    saved.wait_for(timeout=30_000)
    shown = saved.inner_text()
    assert QUESTION in shown and all(name in shown for name in names), shown
    assert len(FIGURES.findall(shown)) == 2, shown


def prompt_tokens(page, first_column: int, count: int) -> list[int]:
    """The prompt tokens under each of ``count`` columns from ``first_column``, once all ended."""
    page.locator(FIGURES_LINE).nth(first_column + count - 1).wait_for(timeout=120_000)
    page.locator("#stop-button").wait_for(state="detached", timeout=60_000)
    return [int(FIGURES.search(page.locator(FIGURES_LINE).nth(first_column + i).inner_text()).group(1))
            for i in range(count)]


def test_a_file_attached_to_a_compare_reaches_every_model_and_the_title_leaves_it_out(
        page_factory, compare_app):
    """As with a message: each model's prompt grows by the file's text, counted by its own
    tokenizer; the comparison's title shows only the typed question."""
    app, urls, names = compare_app
    page = page_factory(app.app_url)
    log_in(page, "alice", "wonderland")
    send(page, f"/compare {QUESTION}")
    plain = prompt_tokens(page, 0, 2)
    notes = "Meeting notes: the budget is approved and the launch is on Monday. " * 8
    send_with_files(page, f"/compare {QUESTION}", [("notes.md", "text/markdown", notes.encode())])
    with_file = prompt_tokens(page, 2, 2)
    for url, name, before, after in zip(urls, names, plain, with_file):
        counted = httpx.post(f"{url}/tokenize", json={"model": name, "prompt": notes}, timeout=30).json()["count"]
        assert after - before >= counted, (name, before, after, counted)
    shown = page.locator(ASSISTANT).all_text_contents()  # with the comparisons' hidden Markdown
    titles = [t for t in shown if text("en", "compare_not_history") in t]
    assert len(titles) == 2 and not any("budget is approved" in t for t in shown), shown


def test_a_question_too_long_for_one_models_window_ends_its_column_while_the_other_answers(
        page_factory, compare_app):
    app, urls, names = compare_app
    page = page_factory(app.app_url)
    log_in(page, "alice", "wonderland")
    question = long_text(urls[1], names[1], SMALL_WINDOW + 100)  # B's window is A's quarter
    before = requests_of(urls)
    send(page, f"/compare {HOSTILE} {question}")
    page.locator(FIGURES_LINE).first.wait_for(timeout=120_000)
    page.locator("#stop-button").wait_for(state="detached", timeout=60_000)
    a, b = page.locator(COLUMN).all()
    assert FIGURES.search(a.locator(FIGURES_LINE).inner_text()), a.inner_text()
    assert "tokens long" in b.locator(NOTE).inner_text(), b.inner_text()
    assert not b.locator(FIGURES_LINE).count() and not b.locator(BODY).inner_text().strip()
    assert requests_when(urls, [before[0] + 1, before[1]]) == [before[0] + 1, before[1]]
    # The question is in the message's Markdown (hidden beside the columns): as text, never as HTML.
    assert page.evaluate("window.pwned") is None and not page.locator('img[src="x"]').count()
    assert violations(page) == []  # the error's red reads on the chat's ground


def test_stop_ends_every_column_and_each_engines_request(page_factory, compare_app):
    app, urls, names = compare_app
    page = page_factory(app.app_url)
    log_in(page, "alice", "wonderland")
    page.locator("#chat-settings-open-modal").click()
    page.get_by_role("slider").last.focus()
    page.keyboard.press("End")  # the most the model's window allows: the replies run long
    page.get_by_role("button", name=re.compile("Confirm")).click()

    for _ in range(5):
        if both_writing(page, urls, within_s=120):
            break
        # On 2 busy cores the small model can write its whole reply (its window is 1,024
        # tokens) before the other's first words show: nothing left to stop there. Again.
        page.locator("#stop-button").wait_for(state="detached", timeout=60_000)
    else:
        raise AssertionError("both engines should be generating at once; they never were in 5 tries")
    page.locator("#stop-button").evaluate("button => button.click()")
    assert running_when_idle(urls, 3) == [0, 0], "an engine still generates 3 s after Stop"
    columns = page.locator(COLUMN).all()[-2:]
    for column in columns:
        column.locator(NOTE).wait_for(timeout=30_000)
    for column in columns:
        assert "Stopped" in column.locator(NOTE).inner_text()
        assert len(column.locator(BODY).inner_text()) > 20, "a stopped column lost its text"
        assert not column.locator(FIGURES_LINE).count(), "a column ran to its end: Stop did not stop it"
