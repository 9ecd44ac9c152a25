"""Chats without a database kept on disk (app/kept/chat_files.py): private files named by a hash of
the client-chosen session id, bounded, owned by the chat's user, swept when their worker died."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from app.conversation import in_flight
from app.conversation.chat_settings import ChatParams
from app.conversation.history import Conversation
from app.conversation.in_flight import Marker, wait_for_quiet
from app.kept import chat_files
from app.kept.chat_files import ChatFolder, chat_record, file_key

SESSION = "0b7d3c52-5f1e-4a43-9d6e-2a9c1f0e7b11"
PARAMS = ChatParams("Be brief.", 0.3, 0.8, 200, seed=7)


def conversation(*turns: tuple[str, str]) -> Conversation:
    talk = Conversation("Be brief.")
    for i, (user, assistant) in enumerate(turns):
        talk.ask(f"u{i}", user)
        talk.add(user, assistant, {"line": f"figures {i}"})
    return talk


def keeper(text: str, reply_id: str = "r1", asked=("u9", "Tell me a story.")):
    """What a store reads of a Keeper: the reply's id and text, and what it answers."""
    return SimpleNamespace(reply=SimpleNamespace(id=reply_id, content=text), asked=asked)


def marker(owner: str = "dead0001", at: float = 1000.0) -> Marker:
    return Marker(owner, at, 1.0, 0.3, 0.8, 200)


def mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_folder_and_every_file_are_the_owners_alone(tmp_path):
    folder = tmp_path / "live"
    folder.mkdir(mode=0o755)
    chats = ChatFolder(folder).open()
    chat = chats.chat(SESSION, None)
    chat.keep(conversation(("Hi", "Hello.")), PARAMS)
    asyncio.run(chat.save(keeper("Once upon"), marker()))
    assert mode(folder) == 0o700
    assert {p.name for p in folder.iterdir()} == {f"{file_key(SESSION)}.chat", f"{file_key(SESSION)}.reply"}
    assert all(mode(p) == 0o600 for p in folder.iterdir())


@pytest.mark.parametrize("hostile", ["../../x", "/etc/passwd", "..", "a/b", "x\0y", "é" * 300])
def test_a_hostile_session_id_never_names_a_file(tmp_path, hostile):
    chats = ChatFolder(tmp_path / "live").open()
    chats.chat(hostile, None).keep(conversation(("Hi", "Hello.")), PARAMS)
    files = list(tmp_path.rglob("*"))
    assert files == [tmp_path / "live", tmp_path / "live" / f"{file_key(hostile)}.chat"]
    assert len(file_key(hostile)) == 64 and file_key(hostile) != file_key(SESSION)
    assert chats.chat(hostile, None).restore() is not None


def test_the_history_and_settings_come_back_for_the_same_user_only(tmp_path):
    chats = ChatFolder(tmp_path).open()
    talk = conversation(("Hi", "Hello."), ("More?", "Sure."))
    chats.chat(SESSION, "alice").keep(talk, PARAMS)
    kept = chats.chat(SESSION, "alice").restore()
    assert kept.conversation == talk and kept.params == PARAMS
    assert kept.conversation.messages("Next")[-3:] == [
        {"role": "user", "content": "More?"}, {"role": "assistant", "content": "Sure."},
        {"role": "user", "content": "Next"}]
    # Another user, or none, who brings alice's session id gets nothing of her chat.
    assert chats.chat(SESSION, "mallory").restore() is None
    assert chats.chat(SESSION, None).restore() is None
    assert chats.chat("another-session", "alice").restore() is None


def test_a_reply_in_flight_is_an_orphan_for_another_process_until_it_ends(tmp_path):
    chats = ChatFolder(tmp_path).open()
    chat = chats.chat(SESSION, None)
    asyncio.run(chat.save(keeper("Once upon"), marker("dead0001")))
    found = chat.orphan(boot_id="alive0002")
    assert (found.step_id, found.text, found.asked_id, found.asked) == (
        "r1", "Once upon", "u9", "Tell me a story.")
    assert found.marker == marker("dead0001")
    assert chat.orphan(boot_id="dead0001") is None              # its own writer's: not an orphan
    assert chats.chat(SESSION, "mallory").orphan(boot_id="alive0002") is None
    asyncio.run(chat.ended(keeper("Once upon a time.", reply_id="other")))
    assert chat.reply_file.exists()                              # another reply's end: not this one's
    asyncio.run(chat.ended(keeper("Once upon a time.")))
    assert not chat.reply_file.exists() and chat.orphan(boot_id="alive0002") is None


def test_a_takeover_waits_for_the_writer_to_be_quiet_and_leaves_a_live_one_alone(tmp_path):
    chat = ChatFolder(tmp_path).open().chat(SESSION, None)
    asyncio.run(chat.save(keeper("Once"), marker(at=1000.0)))
    partial = chat.orphan(boot_id="me")
    waited = []

    async def sleep(seconds):  # the clock below stands still: no real wait
        waited.append(seconds)
    asyncio.run(chat.save(keeper("Once upon a"), marker(at=1000.0)))  # same writer, same save round
    resumed = asyncio.run(wait_for_quiet(partial, chat, sleep=sleep, clock=lambda: 1001.0))
    assert waited == [in_flight.QUIET_SAVES * 1.0 - 1.0]
    assert resumed.text == "Once upon a"                         # the text as it was last kept
    asyncio.run(chat.save(keeper("Once upon a time"), marker(at=1003.0)))  # it wrote again: alive
    assert asyncio.run(wait_for_quiet(partial, chat, sleep=sleep, clock=lambda: 1001.0)) is None
    asyncio.run(chat.ended(keeper("Once upon a time.")))
    assert asyncio.run(wait_for_quiet(partial, chat, sleep=sleep, clock=lambda: 1001.0)) is None


def test_a_history_over_the_bound_keeps_its_newest_turns_and_what_they_were_asked(tmp_path):
    talk = conversation(*[(f"question {i} " + "x" * 400, f"answer {i} " + "y" * 400) for i in range(10)])
    data = chat_record(talk, PARAMS, None, max_bytes=3000)
    assert len(data) <= 3000
    kept = chat_files.kept_of(json.loads(data))
    assert 0 < len(kept.conversation.turns) < 10
    assert kept.conversation.turns[-1].user.startswith("question 9")
    # The newest message is still known by its id (Regenerate, an edit), counted from the kept turns.
    assert kept.conversation.asked["u9"] == (len(kept.conversation.turns) - 1, talk.asked["u9"][1])
    assert "u0" not in kept.conversation.asked
    assert chat_record(Conversation("s" * 5000), PARAMS, None, max_bytes=3000) is None


def test_no_file_over_the_bound_is_written_or_read(tmp_path):
    chats = ChatFolder(tmp_path, max_bytes=2000).open()
    chat = chats.chat(SESSION, None)
    asyncio.run(chat.save(keeper("z" * 3000), marker()))
    assert not chat.reply_file.exists()
    chat.reply_file.write_text(json.dumps({"pad": "z" * 3000}))
    assert chat.orphan(boot_id="me") is None
    os.symlink(tmp_path / "elsewhere.json", chat.chat_file)      # not followed
    (tmp_path / "elsewhere.json").write_text("{}")
    assert chat_files.read_record(chat.chat_file, 2000) is None


def test_a_session_that_ends_takes_its_files_unless_another_worker_writes_them(tmp_path):
    chats = ChatFolder(tmp_path).open()
    mine, theirs = chats.chat(SESSION, None), chats.chat("other-session", None)
    mine.keep(conversation(("Hi", "Hello.")), PARAMS)
    asyncio.run(mine.save(keeper("Once"), marker()))
    theirs.chat_file.write_text(json.dumps({"writer": "another-worker", "pid": 1, "user": None}))
    mine.forget()
    theirs.forget()
    assert not mine.chat_file.exists() and not mine.reply_file.exists()
    assert theirs.chat_file.exists()


def test_the_sweep_removes_old_files_of_dead_workers_only(tmp_path):
    chats = ChatFolder(tmp_path).open()
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "chainlit"])
    try:
        deadline = time.monotonic() + 10  # its command line shows once it has started
        while not chat_files.is_worker(worker.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        def old(name: str, pid: int) -> None:
            path = tmp_path / name
            path.write_text(json.dumps({"writer": "w", "pid": pid, "user": None}))
            os.utime(path, (time.time() - 7200, time.time() - 7200))
        old("dead.chat", 2**22 + 17)                  # no such process
        old("alive.chat", worker.pid)                 # a live worker's chat, idle for long
        old("torn.chat.1a2b3c4d.part", 0)             # a write its process never renamed
        (tmp_path / "young.reply").write_text(json.dumps({"writer": "w", "pid": 2**22 + 17}))
        gone = chats.sweep(older_than_s=3600)
    finally:
        worker.kill()
        worker.wait()
    assert sorted(p.name for p in gone) == ["dead.chat", "torn.chat.1a2b3c4d.part"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["alive.chat", "young.reply"]


def test_when_chainlit_ends_a_session_its_chats_files_go(tmp_path, monkeypatch):
    from chainlit.session import WebsocketSession
    monkeypatch.setattr(WebsocketSession, "delete", WebsocketSession.delete)  # put back after
    chats = ChatFolder(tmp_path).open()
    chat_files.install(chats)
    chats.chat(SESSION, None).keep(conversation(("Hi", "Hello.")), PARAMS)
    session = WebsocketSession(id=SESSION, socket_id="sid-1", emit=None, emit_call=None, user_env={},
                               client_type="webapp")
    asyncio.run(session.delete())
    assert list(tmp_path.iterdir()) == []
