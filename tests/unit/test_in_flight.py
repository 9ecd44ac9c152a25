"""A reply in flight (app/conversation/in_flight.py): the marker it is saved with, which saved reply
another process may take over, and the request that carries it on."""

from __future__ import annotations

import json

from app.conversation import in_flight
from app.conversation.in_flight import Marker, Partial, marker_of, orphan_of, quiet_for
from app.kept.saved_chats import conversation_from_thread

MARK = {"owner": "dead0001", "at": 1000.0, "every_s": 1.0, "temperature": 0.7, "top_p": 0.9,
        "max_tokens": 300}


def thread(*steps: dict) -> dict:
    return {"id": "t", "steps": list(steps)}


def user(step_id: str, text: str, at: str) -> dict:
    return {"id": step_id, "type": "user_message", "output": text, "createdAt": at}


def reply(step_id: str, text: str, at: str, mark=None, as_json=False) -> dict:
    metadata = {"kind": "reply", **({in_flight.MARK: mark} if mark else {})}
    return {"id": step_id, "type": "assistant_message", "output": text, "createdAt": at,
            "metadata": json.dumps(metadata) if as_json else metadata}


def test_a_marker_is_read_from_a_dict_or_the_databases_json_and_a_foreign_one_is_ignored():
    expected = Marker("dead0001", 1000.0, 1.0, 0.7, 0.9, 300)
    assert marker_of({in_flight.MARK: MARK}) == expected
    assert marker_of(json.dumps({"kind": "reply", in_flight.MARK: MARK})) == expected
    assert marker_of({"kind": "reply"}) is None and marker_of("") is None and marker_of(None) is None
    assert marker_of({in_flight.MARK: {"owner": "x"}}) is None


def test_the_last_reply_of_a_gone_process_is_an_orphan_with_the_message_it_answers():
    saved = thread(user("u1", "Hi", "1"), reply("r1", "Hello.", "2"),
                   user("u2", "Tell me more.", "3"), reply("r2", "Once upon", "4", MARK, as_json=True))
    found = orphan_of(saved, boot_id="alive0002")
    assert (found.step_id, found.text, found.asked_id, found.asked) == ("r2", "Once upon", "u2", "Tell me more.")
    assert found.marker.max_tokens == 300


def test_no_orphan_where_this_process_writes_it_it_finished_or_a_newer_message_followed():
    assert orphan_of(thread(user("u", "Hi", "1"), reply("r", "Once", "2", MARK)), boot_id="dead0001") is None
    assert orphan_of(thread(user("u", "Hi", "1"), reply("r", "Once.", "2")), boot_id="x") is None
    assert orphan_of(thread(user("u", "Hi", "1"), reply("r", "Once", "2", MARK),
                            user("u2", "Again", "3")), boot_id="x") is None


def test_a_reply_in_flight_is_not_history_yet():
    saved = thread(user("u1", "Hi", "1"), reply("r1", "Hello.", "2"),
                   user("u2", "More", "3"), reply("r2", "Once upon", "4", MARK))
    conversation, _ = conversation_from_thread(saved, "system")
    assert [(t.user, t.assistant) for t in conversation.turns] == [("Hi", "Hello.")]
    assert conversation.last_asked() == ("u2", "More")


def test_a_crowd_is_saved_less_often_and_a_writer_is_gone_after_a_few_of_its_intervals():
    assert in_flight.save_interval(1) == in_flight.save_interval(50) == in_flight.SAVE_EVERY_S
    assert in_flight.save_interval(200) == 200 / in_flight.SAVES_PER_S  # at most SAVES_PER_S a second
    marker = Marker("x", 1000.0, 2.0, 0.7, 0.9, 300)
    assert quiet_for(marker, 1000.0) == in_flight.QUIET_SAVES * 2.0
    assert quiet_for(marker, 1000.0 + in_flight.QUIET_SAVES * 2.0 + 1) == 0.0
