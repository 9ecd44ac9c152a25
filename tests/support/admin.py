"""The admin page's tests: their users, the chats they hold, and the admin's figures read back."""

from __future__ import annotations

import time

import httpx

from server.loadtest.lib.chat_record import SessionRecord
from server.loadtest.lib.chat_socket import ChatSession

USERS = {"alice": "wonderland", "bob": "builder", "carol": "sweet"}
REPLY_TOKENS = 24  # every reply runs to it: ignore_eos
# A chat's title is its first message: anyone's text, on the admin's page.
XSS = '<img src=x onerror="document.title=\'pwned\'"><script>document.title="pwned"</script>'
TOO_LONG = "lorem ipsum dolor " * 2000  # over the test engine's 4,096-token window


# --- a real app, real chats ------------------------------------------------------------

def login(url: str, user: str) -> str:
    response = httpx.post(f"{url}/login", data={"username": user, "password": USERS[user]}, timeout=60)
    assert response.status_code == 200, response.text
    return response.cookies["access_token"]


async def chat(url: str, token: str, messages: list[str]) -> list[str]:
    """One chat of several messages; the replies as the user saw them."""
    session = ChatSession(SessionRecord(0, "", messages[0]))
    replies = []
    try:
        assert await session.open(url, headers={"Cookie": f"access_token={token}"}), session.record.error
        for message in messages:
            session.next_turn(message)
            await session.ask()
            if session.record.final is not None:
                replies.append(session.record.final)
    finally:
        await session.close()
    return replies


MESSAGES = 7  # what the chats of the `chatted` fixture send, its two commands included
REPLIES = 4


def admin_json(settings, token, days="14", until=lambda figures: True) -> dict:
    """The figures once every message and reply is saved, and ``until`` holds: Chainlit writes
    steps in tasks of their own, the app its usage and audit records in batches."""
    deadline = time.monotonic() + 30
    while True:
        response = httpx.get(f"{settings.app_url}/admin.json", params={"days": days},
                             cookies={"access_token": token}, timeout=30)
        assert response.status_code == 200, response.text
        figures = response.json()
        today = figures["days"][0]
        if (today["messages"] >= MESSAGES and today["replies"] >= REPLIES and until(figures)
                or time.monotonic() > deadline):
            return figures
        time.sleep(0.5)
