"""The per-user limits' tests: the limit and what each message met."""

from __future__ import annotations

from server.loadtest.users.chats import AppChat

LIMIT = 3  # messages a minute: one comes back every 20 s


def outcomes(chats: list[AppChat]) -> list[str]:
    return [chat.session.record.outcome for chat in chats]
