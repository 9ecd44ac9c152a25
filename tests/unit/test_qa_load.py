"""`ernie-chat qa-load`: its figures on hand-made chats, then 100 real chats at once.

The live tests drive the real app (Chainlit, the session's CPU vLLM, demo model)
through its websocket (tests/app/test_qa_load.py).  The figures tests need nothing
running, so they are here, in the quick runs (``--quick``).
"""

from __future__ import annotations

import asyncio
import time
from contextlib import asynccontextmanager

import pytest
import socketio
import uvicorn

from server import cli
from server.loadtest.chat import qa_load
from server.loadtest.chat import processes as qa_processes
from server.loadtest.chat.qa_load import count_crossed, summarize_sessions
from server.loadtest.lib import chat_record, chat_socket
from server.loadtest.lib.chat_record import SessionRecord
from server.stack.processes import free_port


FIGURES = "\n\n*⏱ 95 ms to first token · 40.0 tok/s · 20 prompt + 16 reply tokens*"


def chat(index: int, *, streamed: str = "Hello there", final: str | None = None,
         ttft_s: float = 0.1, total_s: float = 0.5, ids=(), tags=()) -> SessionRecord:
    """A chat that got a reply: by default the streamed text plus the figures, as the app sends it."""
    record = SessionRecord(index, f"[qa abcdef s{index:03d}]", "prompt", welcomed=True,
                           ttft_s=ttft_s, total_s=total_s, streamed=streamed,
                           final=streamed + FIGURES if final is None else final)
    record.message_ids = set(ids) or {f"welcome-{index}", f"reply-{index}"}
    record.tags_seen = set(tags)
    return record


def lost(index: int, error: str) -> SessionRecord:
    return SessionRecord(index, f"[qa abcdef s{index:03d}]", "prompt", welcomed=True, error=error)


# --- figures on hand-made chats -------------------------------------------------

def test_limit_and_busy_answers_are_counted_apart_and_fail_nothing():
    limited = lost(1, "")
    limited.refused, limited.notice = chat_record.LIMITED, "⏳ ... Try again in 20 s."
    refused = lost(2, "")
    refused.refused = chat_record.BUSY_REFUSED
    waited = chat(3)
    waited.busy_waited = True
    s = summarize_sessions([chat(0), limited, refused, waited], wall_s=1.0)
    assert s["ok"] and (s["limited"], s["busy_refused"], s["busy_waited"], s["lost"]) == (1, 1, 1, 0)
    assert [r.outcome for r in (limited, refused, waited)] == ["limited", "busy_refused", "busy_waited"]
    assert "limited 1   busy_refused 1" in qa_load.render({"summary": s, "url": "u"})


def test_all_good_chats_pass_with_percentiles_of_their_times():
    records = [chat(i, ttft_s=(i + 1) / 10, total_s=(i + 1) / 2) for i in range(10)]  # 0.1 .. 1.0 s
    s = summarize_sessions(records, wall_s=3.0)
    assert s["ok"] and s["complete"] == 10
    assert (s["lost"], s["crossed"], s["incomplete"], s["errors"]) == (0, 0, 0, 0)
    assert s["ttft_ms"]["median"] == pytest.approx(550)     # between the 5th and 6th value
    assert s["ttft_ms"]["p99"] == pytest.approx(991)        # 900 + 0.91 x 100, numpy's rule
    assert s["total_ms"]["median"] == pytest.approx(2750)
    assert s["wall_s"] == 3.0


def test_a_chat_without_reply_is_lost_and_has_no_total_time():
    s = summarize_sessions([chat(0), lost(1, "no reply within --timeout-s 5")], 5.0)
    assert (s["lost"], s["replied"], s["errors"]) == (1, 1, 1)
    assert s["error_reasons"] == {"no reply within --timeout-s 5": 1}
    assert s["ttft_ms"]["median"] == s["ttft_ms"]["p99"] == pytest.approx(100)
    assert not s["ok"]


@pytest.mark.parametrize("final", [
    "Hello",                                        # the end of the stream never came
    "Hello there",                                  # no figures line: the reply did not finish
    "Hello there, and more\n\n*⏱ 40.0 tok/s*",      # text the stream never showed
    "Hello there\n\nMore.\n\n*⏱ 40.0 tok/s*",         # a paragraph the stream never showed
    "Hullo there\n\n*⏱ 40.0 tok/s*",                # a token changed on the way
])
def test_a_reply_that_differs_from_its_stream_is_incomplete(final):
    s = summarize_sessions([chat(0, final=final)], 1.0)
    assert (s["incomplete"], s["complete"], s["lost"]) == (1, 0, 0)
    assert not s["ok"]


def test_an_empty_reply_is_incomplete_not_complete():
    assert not chat(0, streamed="").complete


def test_a_reply_continued_on_another_engine_is_complete_and_says_so():
    record = chat(0, final="Hello there\n\n*⏱ 40.0 tok/s · 3 + 12 reply tokens · "
                           "↻ continued after its engine stopped*")
    assert record.complete and record.continued and record.reply_tokens == 12
    assert not chat(0).continued and chat(0).as_dict()["continued"] is False


def test_a_message_id_in_two_chats_is_crossed_once():
    records = [chat(0, ids={"w0", "r0"}), chat(1, ids={"w1", "r1", "r0"}), chat(2)]
    assert count_crossed(records) == 1
    records.append(chat(3, ids={"w3", "r0"}))
    assert count_crossed(records) == 2   # three chats saw r0: two of them wrongly
    assert not summarize_sessions(records, 1.0)["ok"]


def test_another_chats_tag_in_the_text_is_crossed_its_own_is_not():
    own = chat(0, tags={"[qa abcdef s000]"})
    foreign = chat(1, tags={"[qa abcdef s001]", "[qa abcdef s002]"})
    assert count_crossed([own]) == 0
    assert count_crossed([own, foreign]) == 1


def opening_events(welcome: dict) -> list[tuple[str, dict]]:
    """What the app emits when a chat opens (seen on the real app, see qa_load's docstring)."""
    run = {"id": "start-run", "type": "run", "metadata": {}, "output": ""}
    return [("task_end", {}), ("clear_ask", {}), ("task_start", {}), ("new_message", run),
            ("new_message", welcome), ("update_message", run), ("task_end", {})]


def reply_events(reply_id: str, text: str) -> list[tuple[str, dict]]:
    """What the app emits for one answered message."""
    run = {"id": "message-run", "type": "run", "metadata": {}, "output": ""}
    reply = {"id": reply_id, "type": "assistant_message", "metadata": {"kind": "reply"}}
    return [("task_start", {}), ("first_interaction", {"interaction": "[qa abcdef s000] hi"}),
            ("new_message", run), ("stream_start", {**reply, "output": "Hello"}),
            ("stream_token", {"id": reply_id, "token": " there", "isSequence": False}),
            ("new_message", {**reply, "output": text}), ("update_message", run),
            ("task_end", {})]


def feed(session: chat_socket.ChatSession, events: list[tuple[str, dict]]) -> None:
    for event, data in events:
        session._on_event(event, data)


def test_a_chat_follows_the_apps_events_to_a_complete_reply():
    session = chat_socket.ChatSession(SessionRecord(0, "[qa abcdef s000]", "prompt"))
    welcome = {"id": "w", "metadata": {"kind": "welcome"}, "output": "Hi"}
    opening = opening_events(welcome)
    feed(session, opening[:-1])
    assert session.record.welcomed and not session.opened.is_set(), "on_chat_start is not over"
    feed(session, opening[-1:])
    assert session.opened.is_set() and not session.turn_done.is_set()
    session.sent_at = time.perf_counter()  # as ask() does when it emits the message
    feed(session, reply_events("r", "Hello there" + FIGURES))
    record = session.record
    assert session.turn_done.is_set() and record.complete and not record.error
    assert (record.reply_id, record.streamed) == ("r", "Hello there")
    assert 0 <= record.ttft_s <= record.total_s
    assert record.message_ids == {"start-run", "w", "message-run", "r"}
    assert record.tags_seen == {"[qa abcdef s000]"} and count_crossed([record]) == 0


def test_a_welcome_sent_after_on_chat_start_ended_opens_the_chat():
    """The app's order (app/web/session_tasks.py): on_chat_start's task_end, then the welcome."""
    session = chat_socket.ChatSession(SessionRecord(0, "[qa abcdef s000]", "prompt"))
    opening = opening_events({"id": "w", "metadata": {"kind": "welcome"}, "output": "Hi"})
    welcome = opening.pop(4)
    feed(session, opening)
    assert not session.opened.is_set(), "no welcome yet"
    feed(session, [welcome])
    assert session.opened.is_set() and session.record.welcomed


def test_an_error_shown_by_the_app_fails_the_chat():
    session = chat_socket.ChatSession(SessionRecord(0, "[qa abcdef s000]", "prompt"))
    feed(session, opening_events({"id": "e", "metadata": {"kind": "error"},
                                  "output": "The engine at http://x is not reachable."}))
    assert session.opened.is_set() and not session.record.welcomed
    assert session.record.error.endswith("not reachable.")


def test_tags_are_unique_per_chat_and_per_run():
    first, second = qa_load.make_records(["a", "b"], 3), qa_load.make_records(["a"], 3)
    tags = [r.tag for r in first + second]
    assert len(set(tags)) == 6 and all(chat_record.TAG.fullmatch(t) for t in tags)
    assert [r.prompt for r in first] == [f"{first[0].tag} a", f"{first[1].tag} b", f"{first[2].tag} a"]


def test_prompts_file_takes_non_empty_lines(tmp_path):
    path = tmp_path / "prompts.txt"
    path.write_text("first\n\n  second  \n", encoding="utf-8")
    assert chat_socket.read_prompts(path) == ["first", "second"]
    path.write_text("\n \n", encoding="utf-8")
    with pytest.raises(chat_socket.QaLoadError):
        chat_socket.read_prompts(path)


def test_bounds_are_refused_before_anything_is_sent():
    assert cli.main(["qa-load", "--url", "http://127.0.0.1:9", "--sessions", "0"]) == 2
    assert cli.main(["qa-load", "--url", "http://127.0.0.1:9", "--sessions",
                     str(qa_load.MAX_SESSIONS + 1)]) == 2


async def test_an_app_that_is_not_there_is_reported_before_any_chat_opens():
    with pytest.raises(qa_load.QaLoadError, match="No chat app answers"):
        await qa_load.run_load(f"http://127.0.0.1:{free_port()}", ["hi"], 3, timeout_s=20)


def test_chats_are_shared_over_client_processes_one_apart_at_most():
    assert qa_processes.shares(1000, 4) == [250] * 4
    assert qa_processes.shares(10, 4) == [3, 3, 2, 2]
    with pytest.raises(chat_socket.QaLoadError, match="more than --sessions 2"):
        qa_processes.shares(2, 3)
    with pytest.raises(chat_socket.QaLoadError, match="between 1 and 16"):
        qa_processes.shares(100, 17)


def test_client_processes_results_are_judged_as_one_run():
    """A reply that reached a chat of each of two processes is crossed, as within one."""
    def result(records, wall_s):
        return {"summary": {"wall_s": wall_s}, "sessions": [r.as_dict() for r in records]}
    first = result([chat(0), chat(1, ids={"w1", "shared"})], 3.0)
    second = result([chat(0, ids={"w0b", "shared"}), chat(1)], 4.5)
    merged = qa_load.merge([first, second], "http://app")
    s = merged["summary"]
    assert (merged["processes"], s["sessions"], s["crossed"], s["wall_s"], s["ok"]) == (2, 4, 1, 4.5, False)
    assert [c["index"] for c in merged["sessions"]] == [0, 1, 2, 3]
    assert merged["sessions"][2]["message_ids"] == ["shared", "w0b"]
    assert qa_load.merge([first], "http://app")["summary"]["ok"]


def test_a_client_process_that_cannot_reach_the_app_stops_the_run_with_its_reason(capsys):
    url = f"http://127.0.0.1:{free_port()}"
    assert cli.main(["qa-load", "--url", url, "--sessions", "4", "--processes", "2"]) == 2
    err = capsys.readouterr().err
    assert "ERROR: client process" in err and "stopped before it was ready: ERROR:" in err, err
    # Users from two processes: each checks the app first, and says why it cannot.
    assert cli.main(["qa-load", "--url", url, "--users", "4", "--processes", "2"]) != 0
    err = capsys.readouterr().err
    assert "users client process" in err and "stopped before it was ready: users client:" in err, err


# --- reconnecting as a browser does, and what became of each message ---------------------

def test_each_message_is_complete_continued_failed_or_lost():
    assert chat_record.outcome_of(chat(0)) == "complete"
    continued = chat(1)
    continued.reconnects = 1
    assert chat_record.outcome_of(continued) == "continued"
    shown = lost(2, chat_record.SHOWN_ERROR + "The engine stopped in the middle of this reply")
    moved = lost(3, "")
    moved.moved = True
    assert chat_record.outcome_of(shown) == chat_record.outcome_of(moved) == "failed"
    assert chat_record.outcome_of(lost(4, "the app closed the connection")) == "lost"
    assert chat_record.outcome_of(lost(5, "")) == "lost"


def test_a_reply_carried_on_after_a_reconnect_is_followed_to_its_end():
    """The socket drops mid-reply; back (same session id), Chainlit's reconnect handler and a
    resume send task_end, which is not the turn's end; the reply then starts again with its
    text so far (attached, or carried on by another worker) and finishes: the frames sent
    while the socket was away are missing, and the final text, which replaces them, counts."""
    session = chat_socket.ChatSession(SessionRecord(0, "[qa abcdef s000]", "prompt"), reconnect=True)
    session.opened.set()
    session.sent_at = time.perf_counter()
    events = reply_events("r", "Hello there, my friend" + FIGURES)
    feed(session, events[:5])  # streaming "Hello there"
    session._on_disconnect("transport close")
    assert session.dropped.is_set() and not session.turn_done.is_set() and not session.record.error
    session.dropped.clear()
    session._rejoining, session.record.reconnects = True, 1  # as _come_back() does
    reply = {"id": "r", "type": "assistant_message", "metadata": {"kind": "reply"}}
    # On another worker: the resume runs as a task of its own, then the reply is carried on.
    feed(session, [("task_end", {}), ("task_start", {}), ("task_end", {}),
                   ("resume_thread", {"id": "t", "steps": [], "metadata": "{}"}), ("task_start", {})])
    assert not session.turn_done.is_set() and not session._rejoined.is_set()
    feed(session, [("stream_start", {**reply, "output": "Hello there,"}),
                   ("stream_token", {"id": "r", "token": " friend", "isSequence": False})])
    assert not session.turn_done.is_set() and session._rejoined.is_set()
    feed(session, events[5:])
    assert session.turn_done.is_set() and session.record.outcome == "continued"


def test_without_reconnecting_a_dropped_socket_ends_the_turn():
    session = chat_socket.ChatSession(SessionRecord(0, "[qa abcdef s000]", "prompt"))
    session.sent_at = time.perf_counter()
    session._on_disconnect("transport close")
    assert session.turn_done.is_set() and session.record.outcome == "lost"


def test_a_chat_moved_without_saved_chats_fails_its_reply_with_the_apps_word():
    """Back on another worker that has no saved chat to resume: the app starts a new chat and
    says the chat moved, so the reply in flight is gone and the message failed, not lost."""
    session = chat_socket.ChatSession(SessionRecord(0, "[qa abcdef s000]", "prompt"), reconnect=True)
    session.opened.set()
    session.sent_at = time.perf_counter()
    feed(session, reply_events("r", "")[:4])
    session._on_disconnect("transport close")
    session.dropped.clear()
    session._rejoining, session.record.resumed = True, False  # as _come_back() does
    feed(session, [("task_end", {}), ("task_start", {}),
                   ("new_message", {"id": "m", "metadata": {"kind": "moved"}, "output": "moved"})])
    assert session.turn_done.is_set() and session.record.outcome == "failed"
    assert "lost the reply" in session.record.error


def test_a_chat_moved_without_saved_chats_but_kept_follows_its_reply_to_the_end():
    """Back on another worker that found the chat's files (app/kept/chat_files.py): the app says the
    chat moved with its history kept, and carries the reply on in the same message: continued."""
    session = chat_socket.ChatSession(SessionRecord(0, "[qa abcdef s000]", "prompt"), reconnect=True)
    session.opened.set()
    session.sent_at = time.perf_counter()
    events = reply_events("r", "Hello there, my friend" + FIGURES)
    feed(session, events[:5])
    session._on_disconnect("transport close")
    session.dropped.clear()
    session._rejoining, session.record.resumed, session.record.reconnects = True, False, 1
    moved = {"id": "m", "metadata": {"kind": "moved", "kept": True}, "output": "moved, kept"}
    feed(session, [("task_end", {}), ("task_start", {}), ("new_message", moved), ("task_end", {}),
                   ("task_start", {})])
    assert not session.turn_done.is_set() and not session.record.error and session.record.moved
    feed(session, [("stream_start", {"id": "r", "type": "assistant_message", "metadata": {"kind": "reply"},
                                     "output": "Hello there,"})])
    assert session._rejoined.is_set()
    feed(session, events[5:])
    assert session.turn_done.is_set() and session.record.outcome == "continued"


def test_a_chat_started_again_between_two_messages_does_not_end_the_next_one():
    """The socket dropped while the user read the reply; back on a worker that starts the chat
    anew (no saved chat to resume), Chainlit runs on_chat_start: its task_start, the notice
    that the chat moved and its task_end belong to no message. Taken for the next message's
    turn (the last one's sent time still set), they failed it before its reply came."""
    session = chat_socket.ChatSession(SessionRecord(0, "[qa abcdef s000]", "prompt"), reconnect=True)
    feed(session, opening_events({"id": "w", "metadata": {"kind": "welcome"}, "output": "Hi"}))
    session.sent_at = time.perf_counter()
    feed(session, reply_events("r1", "Hello there" + FIGURES))
    assert session.record.outcome == "complete"
    session.next_turn("[qa abcdef s000] again")
    session._on_disconnect("transport close")
    session.opened.clear()
    session.dropped.clear()
    session._rejoining = True  # as _back_between_turns() and _come_back() do
    run = {"id": "start-run-2", "type": "run", "metadata": {}, "output": ""}
    moved = {"id": "m", "metadata": {"kind": "moved"}, "output": "moved"}
    feed(session, [("task_end", {}), ("clear_ask", {}), ("task_start", {}), ("new_message", run),
                   ("new_message", moved)])
    assert not session.opened.is_set(), "on_chat_start is not over"
    feed(session, [("update_message", run), ("task_end", {})])
    assert session.opened.is_set() and not session.turn_done.is_set() and not session.record.error
    session._rejoining, session.record.reconnects = False, 0
    session.sent_at = time.perf_counter()
    feed(session, [("new_message", {"id": "w2", "metadata": {"kind": "welcome"}, "output": "Hi"})])
    assert not session.turn_done.is_set()
    feed(session, reply_events("r2", "Hello there" + FIGURES))
    assert session.turn_done.is_set() and session.record.outcome == "complete"


@asynccontextmanager
async def closing_app(closed: set[int]):
    """A socket.io endpoint at the app's path that opens and answers chats with the app's
    events (``opening_events``, ``reply_events``), and closes the connections numbered in
    ``closed`` (from 1) as soon as they opened, as a drained worker closes them (app/kept/drain.py:
    no goodbye). Yields its URL, the connections' socket ids, and ``drop`` that closes one so."""
    sio = socketio.AsyncServer(async_mode="asgi")
    connections: list[str] = []

    async def drop(sid: str) -> None:
        await sio.eio.sockets[sio.manager.eio_sid_from_sid(sid, "/")].queue.put(None)

    @sio.event
    async def connect(sid, environ, auth):
        connections.append(sid)

    @sio.on("connection_successful")
    async def opened(sid):
        if len(connections) in closed:
            await drop(sid)
            return
        for event, data in opening_events({"id": f"w-{sid}", "metadata": {"kind": "welcome"}, "output": "Hi"}):
            await sio.emit(event, data, to=sid)

    @sio.on("client_message")
    async def message(sid, data):
        for event, payload in reply_events(f"r-{len(connections)}", "Hello there" + FIGURES):
            await sio.emit(event, payload, to=sid)

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(socketio.ASGIApp(sio, socketio_path=chat_socket.SOCKET_PATH),
                                           host="127.0.0.1", port=port, log_level="warning"))
    serving = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}", connections, drop
    finally:
        server.should_exit = True
        await serving


@pytest.fixture
def quick_reconnects(monkeypatch):
    """The browser's waits before reconnecting, shortened: the tests wait for no one."""
    monkeypatch.setattr(chat_socket, "RECONNECT_DELAYS_S", (0.05,) * 3)


async def drop_between_turns(url: str, connections: list[str], drop) -> SessionRecord:
    """A chat's first message answered; its socket dropped while the user read; the second
    message asked."""
    session = chat_socket.ChatSession(SessionRecord(0, "[qa abcdef s000]", ""), reconnect=True)
    try:
        assert await session.open(url), session.record.error
        session.next_turn("[qa abcdef s000] first")
        await asyncio.wait_for(session.ask(), 10)
        assert session.record.outcome == "complete", session.record.error
        await drop(connections[0])  # its worker went away while the user read the reply
        await asyncio.wait_for(session.dropped.wait(), 5)
        session.next_turn("[qa abcdef s000] second")
        await asyncio.wait_for(session.ask(), 10)
    finally:
        await session.close()
    return session.record


async def test_a_socket_closed_before_the_chat_opened_again_is_opened_once_more(quick_reconnects):
    """Between two messages the chat's socket dropped; the one opened again closes before the
    chat opened on it, as when the worker it reached is drained right then (``ernie-chat
    restart``). The browser's socket.io client then reconnects once more, and so does qa-load:
    the next message goes out and is answered, one retry counted, no error. No real app closes
    a socket right after it opened on demand, so a small socket.io endpoint stands in for it."""
    async with closing_app(closed={2}) as (url, connections, drop):
        record = await drop_between_turns(url, connections, drop)
    assert not record.error and record.outcome == "complete", record.error
    assert len(connections) == 3 and record.reopen_retries == 1


async def test_sockets_closed_before_the_chat_opened_again_fail_the_message_after_the_last_try(
        quick_reconnects):
    """As above, on every socket opened again: the tries are bounded, then the message fails."""
    async with closing_app(closed=set(range(2, 2 + chat_socket.REOPEN_TRIES))) as (url, connections, drop):
        record = await drop_between_turns(url, connections, drop)
    assert f"closed {chat_socket.REOPEN_TRIES} times in a row" in record.error
    assert record.outcome == "lost" and record.sent_at is None, "the message never went out"
    assert len(connections) == 1 + chat_socket.REOPEN_TRIES
    assert record.reopen_retries == chat_socket.REOPEN_TRIES - 1
