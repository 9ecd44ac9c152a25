"""The admin page's figures: users, chats, messages, tokens and errors per day (UTC).

Two sources, each summed where it lives:

- the saved chats (ERNIE_CHAT_DB), by one GROUP BY per question on Chainlit's tables, the
  same SQL on SQLite and PostgreSQL (``createdAt`` is an ISO text in both, so its first
  ten characters are the UTC day and a text comparison selects the days);
- the usage log (ERNIE_USAGE_LOG): a line per reply with its token counts and per error
  shown, each with the login name, read as a stream, in a thread (the caller's).

A user's messages are the ones they sent; their chats, those they sent a message in that
day; the day's users, those with a message or a reply that day.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable, Optional

from server.usage_log import ERROR, is_error, is_request, lines

DEFAULT_DAYS, MAX_DAYS = 14, 366
BUSIEST = 10  # chats listed by their messages in the period
UNKNOWN_USER = ""  # the user of a usage-log line written before it named one, or without login

# One row per day and user: the user's messages and the chats they were in.
MESSAGES_SQL = """
SELECT substr(s."createdAt", 1, 10) AS day, t."userIdentifier" AS name,
       count(*) AS messages, count(DISTINCT s."threadId") AS chats
FROM steps s JOIN threads t ON t."id" = s."threadId"
WHERE s."type" = 'user_message' AND s."createdAt" >= :since
GROUP BY 1, 2
"""
BUSIEST_SQL = """
SELECT t."name" AS title, t."userIdentifier" AS name, count(*) AS messages,
       max(s."createdAt") AS last_at
FROM steps s JOIN threads t ON t."id" = s."threadId"
WHERE s."type" = 'user_message' AND s."createdAt" >= :since
GROUP BY t."id", t."name", t."userIdentifier"
ORDER BY messages DESC, last_at DESC
LIMIT :limit
"""


class BadDays(ValueError):
    """?days= is not a whole number in 1..MAX_DAYS."""


def parse_days(raw: Optional[str]) -> int:
    if raw is None or raw == "":
        return DEFAULT_DAYS
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_DAYS:
        raise BadDays(raw)
    return int(raw)


def day_range(today: dt.date, days: int) -> list[str]:
    """The period's days, newest first, as ISO dates."""
    return [(today - dt.timedelta(days=n)).isoformat() for n in range(days)]


@dataclass
class UserDay:
    user: str
    chats: int = 0
    messages: int = 0
    replies: int = 0
    prompt_tokens: int = 0
    reply_tokens: int = 0
    errors: int = 0


@dataclass
class Day:
    day: str
    users: list[UserDay] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)

    def total(self, name: str) -> int:
        return sum(getattr(u, name) for u in self.users)


@dataclass
class BusyChat:
    title: str
    user: str
    messages: int
    last_at: str


@dataclass
class Report:
    days: list[Day]                 # newest first, every day of the period
    busiest: list[BusyChat]
    saved_chats: bool               # False: no ERNIE_CHAT_DB, so no chats or messages

    def as_json(self) -> dict:
        return {"days": [{"day": d.day, "users": len(d.users), "chats": d.total("chats"),
                          "messages": d.total("messages"), "replies": d.total("replies"),
                          "prompt_tokens": d.total("prompt_tokens"),
                          "reply_tokens": d.total("reply_tokens"), "errors": d.errors,
                          "per_user": [asdict(u) for u in d.users]} for d in self.days],
                "busiest_chats": [asdict(c) for c in self.busiest],
                "saved_chats": self.saved_chats}


@dataclass
class UsageSums:
    """The usage log's part, by (day, user) and by day."""

    per_user: dict[tuple[str, str], UserDay] = field(default_factory=dict)
    errors: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))


def sum_usage(records: Iterable[Optional[dict]], since: str) -> UsageSums:
    sums = UsageSums()
    for record in records:
        if record is None or not isinstance(record.get("time"), str) or record["time"] < since:
            continue
        day, user = record["time"][:10], str(record.get("user") or UNKNOWN_USER)
        if is_request(record):
            row = sums.per_user.setdefault((day, user), UserDay(user))
            row.replies += 1
            row.prompt_tokens += record["prompt_tokens"]
            row.reply_tokens += record["completion_tokens"]
        elif is_error(record):
            sums.per_user.setdefault((day, user), UserDay(user)).errors += 1
            sums.errors[day][record[ERROR]] += 1
    return sums


def read_usage_sums(path: Path, since: str) -> UsageSums:
    """Blocking: call in a thread."""
    return sum_usage(lines(path), since) if path.exists() else UsageSums()


def report(period: list[str], message_rows: Iterable[dict], busiest_rows: Iterable[dict],
           usage: UsageSums, saved_chats: bool) -> Report:
    """Both sources, merged per day and user; users by name in each day."""
    rows: dict[tuple[str, str], UserDay] = dict(usage.per_user)
    for r in message_rows:
        row = rows.setdefault((r["day"], r["name"] or UNKNOWN_USER), UserDay(r["name"] or UNKNOWN_USER))
        row.messages, row.chats = int(r["messages"]), int(r["chats"])
    days = [Day(day, sorted((u for (d, _), u in rows.items() if d == day), key=lambda u: u.user),
                dict(sorted(usage.errors.get(day, {}).items()))) for day in period]
    busiest = [BusyChat(r["title"] or "", r["name"] or UNKNOWN_USER, int(r["messages"]),
                        r["last_at"] or "") for r in busiest_rows]
    return Report(days, busiest, saved_chats)


async def chat_rows(engine, since: str) -> tuple[list[dict], list[dict]]:
    """(messages per day and user, busiest chats) from the saved chats' database."""
    from sqlalchemy import text
    async with engine.connect() as db:
        messages = (await db.execute(text(MESSAGES_SQL), {"since": since})).mappings().all()
        busiest = (await db.execute(text(BUSIEST_SQL), {"since": since, "limit": BUSIEST})).mappings().all()
    return [dict(r) for r in messages], [dict(r) for r in busiest]
