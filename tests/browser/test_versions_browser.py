"""Earlier versions in a real Chromium against the real engine (demo model): Regenerate and
Edit keep them, ◀ k/N ▶ switches, the model, /export and a reopened saved chat get the
version shown, and a forged click is refused."""

from __future__ import annotations

import json


from tests.support.accessibility import violations
from tests.support.screenshots import screenshot_path
from tests.support.browser import ASSISTANT, USER, log_in, open_chat, reopen, send
from tests.support.settings import SHORT_REPLY
from tests.support.browser import (body, edit_the_first_of_two, figures, finished_replies,
    regenerate_button, regenerated, replies, saved_rows, user_prompt)


def switcher(page, k: int, n: int):
    return page.get_by_role("button", name=f"{k}/{n}", exact=True)


def prev_button(page):
    return page.get_by_role("button", name="◀", exact=True)


def next_button(page):
    return page.get_by_role("button", name="▶", exact=True)


def last_reply(page) -> str:
    return replies(page)[-1]


def settled(page, k: int, n: int) -> str:
    """Wait for the switcher to say k/n and the chat to be idle; the last reply's text."""
    switcher(page, k, n).wait_for(timeout=120_000)
    page.locator("#stop-button").wait_for(state="detached", timeout=120_000)
    return last_reply(page)


def test_regenerate_keeps_the_first_reply_and_switches_in_place(page_factory, short_app, tmp_path):
    page = open_chat(page_factory, short_app)
    first, second = regenerated(page)
    assert page.locator(ASSISTANT).filter(has_text="reply tokens").count() == 1, "one reply, in place"

    prev_button(page).click()
    switcher(page, 1, 2).wait_for(timeout=30_000)
    assert body(last_reply(page)) == body(first)
    page.screenshot(path=screenshot_path("versions.png", tmp_path))
    next_button(page).click()
    switcher(page, 2, 2).wait_for(timeout=30_000)
    assert body(last_reply(page)) == body(second)

    # The model gets the shown version: back to the first, then the next prompt holds it.
    prev_button(page).click()
    switcher(page, 1, 2).wait_for(timeout=30_000)
    send(page, "And coffee?")
    third = finished_replies(page, 2)[-1]
    assert figures(third)[0] > figures(first)[0] + SHORT_REPLY
    assert regenerate_button(page).count() == 1


def test_edit_keeps_the_earlier_message_and_what_followed(page_factory, short_app):
    page = open_chat(page_factory, short_app)
    edit_the_first_of_two(page, "Tell me about green tea.")
    edited = settled(page, 2, 2)
    assert figures(edited) == (user_prompt(short_app, "Tell me about green tea."), SHORT_REPLY)
    assert [t.strip() for t in page.locator(USER).all_inner_texts()] == ["Tell me about green tea."]

    prev_button(page).click()
    switcher(page, 1, 2).wait_for(timeout=30_000)
    page.wait_for_function(f"document.querySelectorAll('{USER}').length === 2", timeout=30_000)
    assert [t.strip() for t in page.locator(USER).all_inner_texts()] == ["Tell me about tea.", "And coffee?"]
    assert page.locator(ASSISTANT).filter(has_text="reply tokens").count() == 2

    next_button(page).click()
    switcher(page, 2, 2).wait_for(timeout=30_000)
    page.wait_for_function(f"document.querySelectorAll('{USER}').length === 1", timeout=30_000)
    assert [t.strip() for t in page.locator(USER).all_inner_texts()] == ["Tell me about green tea."]
    assert body(last_reply(page)) == body(edited)


def exported_json(page) -> dict:
    send(page, "/export")
    link = page.locator("a.inline-file").filter(has_text=".json").last
    link.wait_for(timeout=30_000)
    with page.expect_download() as download:
        link.click()
    return json.loads(open(download.value.path(), encoding="utf-8").read())


def test_export_holds_the_version_shown(page_factory, short_app):
    page = open_chat(page_factory, short_app)
    first, _ = regenerated(page)
    prev_button(page).click()
    switcher(page, 1, 2).wait_for(timeout=30_000)
    data = exported_json(page)
    assert [m["role"] for m in data["messages"]] == ["system", "user", "assistant"]
    assert body(data["messages"][2]["content"]) == body(first)


def test_a_reopened_saved_chat_has_its_versions(page_factory, saved_chats_app):
    page = page_factory(saved_chats_app.app_url)
    log_in(page, "alice", "wonderland")
    first, second = regenerated(page)
    prev_button(page).click()
    switcher(page, 1, 2).wait_for(timeout=30_000)

    reopen(page, "Tell me about tea.")
    switcher(page, 1, 2).wait_for(timeout=30_000)
    assert body(last_reply(page)) == body(first)
    assert violations(page) == []  # with the list of saved chats beside it
    next_button(page).click()
    switcher(page, 2, 2).wait_for(timeout=30_000)
    assert body(last_reply(page)) == body(second)
    saved = saved_rows(saved_chats_app.chat_db, (  # this chat's replies: the database is the session's
        "SELECT metadata FROM steps WHERE type = 'assistant_message' AND output LIKE "
        "'%reply tokens%' AND \"threadId\" = (SELECT \"threadId\" FROM steps WHERE type = "
        "'user_message' AND output = 'Tell me about tea.' ORDER BY \"createdAt\" DESC LIMIT 1)"),
        ready=lambda rows: rows and json.loads(rows[-1][0])["versions"]["shown"] == 1)
    assert len(saved) == 1 and json.loads(saved[0][0])["versions"]["shown"] == 1


FORGE = """async ({request, action}) => {
    const body = {...request, action: {...request.action, ...action}};
    const response = await fetch('/project/action', {method: 'POST', credentials: 'include',
        headers: {'Content-Type': 'application/json'}, body: JSON.stringify(body)});
    return response.status;
}"""


def test_a_forged_switch_is_refused(page_factory, short_app):
    page = open_chat(page_factory, short_app)
    first, second = regenerated(page)
    with page.expect_request("**/project/action") as clicked:
        prev_button(page).click()
    request = clicked.value.post_data_json
    switcher(page, 1, 2).wait_for(timeout=30_000)
    shown = body(last_reply(page))
    turn, reply_id = request["action"]["payload"]["turn"], request["action"]["forId"]
    forged = [{"payload": {"turn": turn, "to": 1}, "forId": "another-message"},
              {"payload": {"turn": "another-chats-message", "to": 1}},
              {"payload": {"turn": turn, "to": 2}}, {"payload": {"turn": turn, "to": -1}},
              {"payload": {"turn": turn, "to": 10**20}}, {"payload": {"turn": turn, "to": "1"}},
              {"payload": {"turn": turn, "to": True}}, {"payload": {"turn": [turn], "to": 1}},
              {"payload": {"turn": turn, "to": 1, "more": 1}}, {"payload": {}}]
    for action in forged:
        page.evaluate(FORGE, {"request": request, "action": action})
    page.wait_for_timeout(1000)
    assert switcher(page, 1, 2).count() == 1 and body(last_reply(page)) == shown == body(first)
    # The same request, made right, is taken: the refusals above were for what they forged.
    page.evaluate(FORGE, {"request": request, "action": {"payload": {"turn": turn, "to": 1},
                                                         "forId": reply_id}})
    switcher(page, 2, 2).wait_for(timeout=30_000)
    assert body(last_reply(page)) == body(second)
