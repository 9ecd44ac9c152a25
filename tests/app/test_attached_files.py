"""Attacks through attached files on the real app (login on, the engine down: files are read
before the engine is asked): slow PDFs sent at once, and uploads past the caps."""

from __future__ import annotations

import asyncio
import time
from contextlib import AsyncExitStack

import httpx

from app.conversation.file_readers import AT_ONCE, WAITING
from tests.support import sample_files as files
from tests.support.chat import until
from tests.support.login import USERS, login
from tests.support.uploads import SocketChat

MESSAGES = 8
NAMED = 5  # times each message names the one upload: the most files a message may have


def signed_in(app, user: str) -> dict:
    status, _, answer = login(app, user, USERS[user])
    assert status == 200, answer.text
    return dict(answer.cookies)


async def other_user_waits(url: str, chat: SocketChat, messages: int) -> list[float]:
    """Another user's login and GET /user, timed one after the other until the chat's
    ``messages`` have all been dealt with."""
    waits = []
    while chat.messages_ended < messages:
        async with httpx.AsyncClient(base_url=url, timeout=120) as other:
            started = time.perf_counter()
            login = await other.post("/login", data={"username": "dave", "password": USERS["dave"]})
            logged_in = time.perf_counter()
            assert login.status_code == 200 and (await other.get("/user")).status_code == 200
            waits += [logged_in - started, time.perf_counter() - logged_in]
    return waits


def test_slow_pdfs_sent_at_once_keep_another_users_login_fast(login_app):
    """A 13 KB PDF that unpacks to 8 MB of text operators (its read runs to the app's 4 s PDF
    limit), named five times in each of eight messages sent at once. Read on the event loop's
    default threads, those reads held the threads that the password check and every request's
    session check wait for: another user's GET /user took 52 s."""
    url = login_app.app_url

    async def attack() -> tuple[list[str], list[float]]:
        async with SocketChat(url, signed_in(login_app, "carol")) as chat:
            uploaded = await chat.upload("slow.pdf", "application/pdf", files.inflating_pdf(8))
            assert uploaded.status_code == 200, uploaded.text
            await asyncio.gather(*(chat.send(f"Read this ({i}).", [uploaded.json()["id"]] * NAMED)
                                   for i in range(MESSAGES)))
            return chat.errors, await other_user_waits(url, chat, MESSAGES)
    errors, waits = asyncio.run(attack())
    print(f"another user's login and GET /user during the attack: {len(waits) // 2} of each, "
          f"slowest {max(waits):.2f} s")
    assert len(waits) >= 6 and max(waits) < 1.0, [f"{w:.2f}" for w in waits]
    # Two read (once each, however often named), two waited for them and found the file read
    # and deleted, and the rest were refused at once instead of queueing.
    busy = [e for e in errors if "busy reading other attached files" in e]
    assert len(errors) == MESSAGES and len(busy) == MESSAGES - AT_ONCE - WAITING, errors
    assert sum("took longer than 4 s" in e for e in errors) == AT_ONCE, errors
    assert sum("slow.pdf** is no longer on the server" in e for e in errors) == WAITING, errors


def test_uploads_past_the_caps_are_refused_and_a_read_file_is_deleted(login_app):
    """30 uploads of 2 MiB sent at once into one chat: Chainlit kept every one, for an hour after
    the browser left. The chat holds ERNIE_UPLOAD_FILES_PER_CHAT (10) at most, the user's chats
    ERNIE_UPLOAD_FILES_PER_USER (30); a file read into a message is deleted, and only files not
    sent yet count."""
    url, cookies = login_app.app_url, signed_in(login_app, "alice")
    notes = b"A line of the meeting notes.\n" * (2 * 2**20 // 29)

    async def attack() -> None:
        async with AsyncExitStack() as chats:
            chat, *others = [await chats.enter_async_context(SocketChat(url, cookies)) for _ in range(4)]
            answers = await asyncio.gather(*(chat.upload(f"notes{i}.txt", "text/plain", notes)
                                             for i in range(30)))
            taken = [a.json()["id"] for a in answers if a.status_code == 200]
            refused = [a for a in answers if a.status_code != 200]
            assert len(taken) == 10 and len(chat.stored()) == 10, [a.text for a in refused]
            assert {a.status_code for a in refused} == {413}
            assert refused[0].json()["detail"] == (
                "This chat already holds 10 attached files not sent yet, the most it may hold: send "
                "them with a message, or start a new chat, then attach more."), refused[0].text

            sent = await chat.send("Summarise these notes.", taken[:1])
            await chat.ended(1, 60)
            assert "is not reachable" in chat.errors[0], chat.errors  # read, then off to the engine
            assert chat.stored(f"{taken[0]}*") == [], "the file read into the message is still on disk"
            assert (await chat.http.get(f"/project/file/{taken[0]}",
                                        params={"session_id": chat.session_id})).status_code == 404
            await chat.edit(sent, "Summarise them again.")  # the file's text is the chat's: not gone
            await chat.ended(2, 60)
            assert "is not reachable" in chat.errors[1], chat.errors
            assert (await chat.upload("more.txt", "text/plain", b"room again")).status_code == 200

            for other in others[:2]:
                for i in range(10):
                    assert (await other.upload(f"n{i}.txt", "text/plain", b"n")).status_code == 200
            over = await others[2].upload("one-too-many.txt", "text/plain", b"n")
            assert over.status_code == 413 and over.json()["detail"].startswith(
                "Your chats already hold 30 attached files not sent yet, the most one user may hold"), over.text
            for other in others[:2]:  # as the browser's "new chat" does: their files go
                await other.close()
                await until(lambda: not other.stored(), 30)
            assert (await others[2].upload("now-fits.txt", "text/plain", b"n")).status_code == 200
    asyncio.run(attack())
