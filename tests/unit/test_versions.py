"""app/conversation/versions.py: the versions a regeneration or an edit keeps, which one the history
holds, and the switcher's payloads, which come from the browser and are checked."""

from __future__ import annotations

import json

import pytest

from app.conversation import versions
from app.conversation.history import Conversation, Turn
from app.kept.saved_chats import conversation_from_thread
from app.texts import FIGURES_MARK as MARK


def chat(*exchanges: tuple[str, str]) -> Conversation:
    """A conversation whose user messages have the ids m0, m1, ..."""
    conversation = Conversation("system")
    for number, (user, assistant) in enumerate(exchanges):
        conversation.ask(f"m{number}", user)
        conversation.add(user, assistant)
    return conversation


def answer_again(book, conversation: Conversation, message_id: str, user: str, assistant: str,
                 reply_id: str = "r") -> versions.Versions:
    """What the chat does for a regeneration or an edit of ``message_id``."""
    versions.snapshot(book, conversation, message_id)
    conversation.ask(message_id, user)
    conversation.add(user, assistant)
    return versions.settle(book, conversation, message_id, reply_id)


def replies(conversation: Conversation) -> list[str]:
    return [turn.assistant for turn in conversation.turns]


# --- keeping versions -----------------------------------------------------------------

def test_a_first_answer_has_no_versions():
    book, conversation = {}, Conversation("system")
    versions.snapshot(book, conversation, "m0")
    conversation.ask("m0", "tea?")
    conversation.add("tea?", "green")
    assert versions.settle(book, conversation, "m0", "r0") is None
    assert book == {}


def test_a_regeneration_keeps_the_first_reply():
    book, conversation = {}, chat(("tea?", "green"))
    entry = answer_again(book, conversation, "m0", "tea?", "black", "r1")
    assert [v[0].assistant for v in entry.versions] == ["green", "black"]
    assert entry.shown == 1 and entry.label() == (2, 2) and entry.reply_id == "r1"
    assert replies(conversation) == ["black"]


def test_three_regenerations_make_three_versions():
    book, conversation = {}, chat(("tea?", "green"))
    answer_again(book, conversation, "m0", "tea?", "black")
    entry = answer_again(book, conversation, "m0", "tea?", "oolong")
    assert [v[0].assistant for v in entry.versions] == ["green", "black", "oolong"]
    assert entry.label() == (3, 3)


def test_an_edit_keeps_the_old_message_and_what_followed():
    book, conversation = {}, chat(("tea?", "green"), ("coffee?", "arabica"))
    entry = answer_again(book, conversation, "m0", "green tea?", "sencha")
    old, new = entry.versions
    assert [(t.user, t.assistant) for t in old] == [("tea?", "green"), ("coffee?", "arabica")]
    assert [(t.user, t.assistant) for t in new] == [("green tea?", "sencha")]
    assert replies(conversation) == ["sencha"]


def test_a_failed_new_reply_offers_no_switcher_yet():
    book, conversation = {}, chat(("tea?", "green"))
    versions.snapshot(book, conversation, "m0")
    conversation.ask("m0", "tea?")  # the engine failed: no turn
    assert versions.settle(book, conversation, "m0", "r") is None
    conversation.ask("m0", "tea?")
    conversation.add("tea?", "black")
    entry = versions.settle(book, conversation, "m0", "r")
    assert [v[0].assistant for v in entry.versions] == ["green", "black"]


def test_the_oldest_versions_go_past_the_limit():
    book, conversation = {}, chat(("tea?", "v0"))
    for number in range(1, versions.MAX_VERSIONS + 5):
        entry = answer_again(book, conversation, "m0", "tea?", f"v{number}")
    assert len(entry.versions) == versions.MAX_VERSIONS
    assert entry.versions[-1][0].assistant == f"v{versions.MAX_VERSIONS + 4}"
    assert entry.shown == versions.MAX_VERSIONS - 1


def test_versions_are_copies_not_the_history_itself():
    book, conversation = {}, chat(("tea?", "green"))
    entry = answer_again(book, conversation, "m0", "tea?", "black")
    conversation.turns[0].figures["line"] = "changed"
    assert entry.versions[1][0].figures == {}


def test_the_turn_of_a_failed_message_is_not_its_own():
    conversation = Conversation("system")
    conversation.ask("m0", "tea?")  # failed: no turn
    conversation.ask("m1", "coffee?")
    conversation.add("coffee?", "arabica")
    assert versions.turn_index(conversation, "m0") is None
    assert versions.turn_index(conversation, "m1") == 0
    assert versions.turn_index(conversation, "nobody") is None


def test_an_edit_above_forgets_the_versions_below():
    book, conversation = {}, chat(("tea?", "green"), ("coffee?", "arabica"))
    answer_again(book, conversation, "m1", "coffee?", "robusta")
    answer_again(book, conversation, "m0", "water?", "still")
    assert set(book) == {"m0"}


# --- choosing a version -----------------------------------------------------------------

def test_choosing_the_first_reply_puts_it_back_in_the_history():
    book, conversation = {}, chat(("tea?", "green"))
    answer_again(book, conversation, "m0", "tea?", "black")
    chosen = versions.choose(book, conversation, "m0", 0)
    assert [t.assistant for t in chosen] == ["green"]
    assert replies(conversation) == ["green"] and book["m0"].shown == 0
    versions.choose(book, conversation, "m0", 1)
    assert replies(conversation) == ["black"]


def test_choosing_an_edit_brings_back_the_message_and_what_followed():
    book, conversation = {}, chat(("tea?", "green"), ("coffee?", "arabica"))
    answer_again(book, conversation, "m0", "green tea?", "sencha")
    chosen = versions.choose(book, conversation, "m0", 0)
    assert [t.user for t in chosen] == ["tea?", "coffee?"]
    assert replies(conversation) == ["green", "arabica"]
    assert conversation.last_asked() == ("m0", "tea?"), "the later messages' ids went with them"
    versions.asked_again(conversation, "new1", 1, "coffee?")
    assert conversation.last_asked() == ("new1", "coffee?")
    assert [m["content"] for m in conversation.messages("next")][1:] == [
        "tea?", "green", "coffee?", "arabica", "next"]


def test_what_followed_the_shown_version_is_kept_when_switching_away():
    book, conversation = {}, chat(("tea?", "green"))
    answer_again(book, conversation, "m0", "tea?", "black")
    conversation.ask("m1", "why?")
    conversation.add("why?", "because")
    versions.choose(book, conversation, "m0", 0)
    assert replies(conversation) == ["green"]
    chosen = versions.choose(book, conversation, "m0", 1)
    assert [t.assistant for t in chosen] == ["black", "because"]


def test_a_regeneration_after_a_switch_keeps_every_version():
    book, conversation = {}, chat(("tea?", "green"))
    answer_again(book, conversation, "m0", "tea?", "black")
    versions.choose(book, conversation, "m0", 0)
    entry = answer_again(book, conversation, "m0", "tea?", "oolong")
    assert [v[0].assistant for v in entry.versions] == ["green", "black", "oolong"]
    assert entry.shown == 2


def test_choosing_forgets_the_versions_of_the_turns_after():
    book, conversation = {}, chat(("tea?", "green"), ("coffee?", "arabica"))
    answer_again(book, conversation, "m1", "coffee?", "robusta")
    versions.snapshot(book, conversation, "m0")
    conversation.ask("m0", "water?")
    conversation.add("water?", "still")
    versions.settle(book, conversation, "m0", "r0")
    versions.choose(book, conversation, "m0", 0)
    assert set(book) == {"m0"}


def test_buttons_point_one_step_either_way_and_stay_in_range():
    entry = versions.Versions("r", [[Turn("a", "1")], [Turn("a", "2")], [Turn("a", "3")]], 0)
    assert [versions.payload("m0", entry, step)["to"] for step in (-1, 0, 1)] == [0, 0, 1]
    entry.shown = 2
    assert [versions.payload("m0", entry, step)["to"] for step in (-1, 0, 1)] == [1, 2, 2]
    assert versions.payload("m0", entry, 1)["turn"] == "m0"


# --- the browser's payloads ---------------------------------------------------------------

@pytest.fixture
def two_versions():
    book, conversation = {}, chat(("tea?", "green"))
    answer_again(book, conversation, "m0", "tea?", "black", "r1")
    return book, conversation


def test_an_offered_click_is_taken(two_versions):
    book, conversation = two_versions
    assert versions.checked({"turn": "m0", "to": 0}, "r1", book, conversation) == ("m0", 0)


@pytest.mark.parametrize("payload", [
    None, [], "m0", {}, {"turn": "m0"}, {"to": 0},
    {"turn": "m0", "to": 0, "extra": 1},
    {"turn": "m9", "to": 0},  # a message this chat never had (another chat's)
    {"turn": "m0", "to": 1},  # the version shown already
    {"turn": "m0", "to": 2}, {"turn": "m0", "to": -1},
    {"turn": "m0", "to": 10**30}, {"turn": "m0", "to": -(10**30)},
    {"turn": "m0", "to": "0"}, {"turn": "m0", "to": 0.0}, {"turn": "m0", "to": False},
    {"turn": "m0", "to": None}, {"turn": "m0", "to": [0]},
    {"turn": 0, "to": 0}, {"turn": ["m0"], "to": 0}, {"turn": {"m0": 1}, "to": 0}, {"turn": None, "to": 0},
])
def test_a_forged_payload_is_refused(two_versions, payload):
    book, conversation = two_versions
    assert versions.checked(payload, "r1", book, conversation) is None


@pytest.mark.parametrize("for_id", ["r0", "other", "", None, 1, ["r1"]])
def test_a_click_under_another_message_is_refused(two_versions, for_id):
    book, conversation = two_versions
    assert versions.checked({"turn": "m0", "to": 0}, for_id, book, conversation) is None


def test_a_refused_click_changes_nothing(two_versions):
    book, conversation = two_versions
    before = (replies(conversation), book["m0"].shown, dict(conversation.asked))
    versions.checked({"turn": "m0", "to": 5}, "r1", book, conversation)
    assert (replies(conversation), book["m0"].shown, dict(conversation.asked)) == before


def test_a_click_on_a_turn_that_left_the_history_is_refused(two_versions):
    book, conversation = two_versions
    conversation.ask("m0", "other")  # an edit is under way: the turn is gone for now
    assert versions.checked({"turn": "m0", "to": 0}, "r1", book, conversation) is None


def test_another_chats_book_does_not_take_this_chats_click(two_versions):
    _, conversation = two_versions
    other_book, other = {}, chat(("hi", "hello"))
    answer_again(other_book, other, "m0", "hi", "hey", "x1")
    assert versions.checked({"turn": "m0", "to": 0}, "r1", other_book, other) is None


# --- in the reply's metadata, and back from a saved chat ---------------------------------------

def test_metadata_round_trips(two_versions):
    book, _ = two_versions
    data = json.loads(json.dumps(versions.to_metadata("m0", book["m0"])))
    message_id, entry = versions.from_metadata(data, "r1")
    assert message_id == "m0" and entry == book["m0"]


@pytest.mark.parametrize("data", [
    None, "x", [], {}, {"turn": "m0", "shown": 0},
    {"turn": "m0", "shown": 1, "list": [[{"user": "a", "assistant": "b"}]]},
    {"turn": "m0", "shown": "0", "list": [[{"user": "a", "assistant": "b"}]]},
    {"turn": 5, "shown": 0, "list": [[{"user": "a", "assistant": "b"}]]},
    {"turn": "m0", "shown": 0, "list": [[]]},
    {"turn": "m0", "shown": 0, "list": [[{"user": "a"}]]},
    {"turn": "m0", "shown": 0, "list": [["text"]]},
    {"turn": "m0", "shown": 0, "list": [[{"user": "a", "assistant": "b"}]] * (versions.MAX_VERSIONS + 1)},
])
def test_broken_metadata_gives_no_versions(data):
    assert versions.from_metadata(data, "r") is None


def step(step_id: str, kind: str, output: str, at: str, metadata=None) -> dict:
    return {"id": step_id, "type": kind, "output": output, "createdAt": at, "metadata": metadata or {}}


def test_a_saved_chat_gives_back_its_versions(two_versions):
    book, _ = two_versions
    reply_meta = {"kind": "reply", versions.KEY: versions.to_metadata("m0", book["m0"])}
    thread = {"steps": [step("m0", "user_message", "tea?", "1"),
                        step("r1", "assistant_message", f"black{MARK}line*", "2", json.dumps(reply_meta))]}
    conversation, saved = conversation_from_thread(thread, "system")
    assert replies(conversation) == ["black"]
    assert set(saved) == {"m0"} and saved["m0"].reply_id == "r1" and saved["m0"].label() == (2, 2)


def test_versions_saved_under_another_message_are_not_taken(two_versions):
    book, _ = two_versions
    reply_meta = {"kind": "reply", versions.KEY: versions.to_metadata("m7", book["m0"])}
    thread = {"steps": [step("m0", "user_message", "tea?", "1"),
                        step("r1", "assistant_message", "black", "2", reply_meta)]}
    _, saved = conversation_from_thread(thread, "system")
    assert saved == {}
