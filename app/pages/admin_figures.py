"""The admin page's figures: users, chats, messages, tokens and errors per day (UTC).

Summed where they live:

- with saved chats (ERNIE_CHAT_DB), everything in the chat database, by one GROUP BY per
  question, the same SQL on SQLite and PostgreSQL (``createdAt`` and ``at`` are ISO texts in
  both, so their first ten characters are the UTC day and a text comparison selects the days):
  messages and chats on Chainlit's tables, replies, tokens and errors on ``usage_records``,
  which every worker of every machine writes (server/chat_records.py); and the newest
  ``audit_records``;
- without, the usage log (ERNIE_USAGE_LOG) of this machine: a line per reply with its token
  counts and per error shown, each with the login name, read as a stream, in a thread (the
  caller's).

A user's messages are the ones they sent; their chats, those they sent a message in that
day; the day's users, those with a message or a reply that day.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable, Optional

from server.chat_records import AUDIT_SHOWN, ERRORS_SQL, RECENT_AUDIT_SQL, REPLIES_SQL
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
class AuditRecord:
    at: str
    action: str
    name: str
    address: str
    detail: str


@dataclass
class Report:
    days: list[Day]                 # newest first, every day of the period
    busiest: list[BusyChat]
    saved_chats: bool               # False: no ERNIE_CHAT_DB, so no chats, messages or audit
    audit: list[AuditRecord] = field(default_factory=list)  # newest first

    def as_json(self) -> dict:
        return {"days": [{"day": d.day, "users": len(d.users), "chats": d.total("chats"),
                          "messages": d.total("messages"), "replies": d.total("replies"),
                          "prompt_tokens": d.total("prompt_tokens"),
                          "reply_tokens": d.total("reply_tokens"), "errors": d.errors,
                          "per_user": [asdict(u) for u in d.users]} for d in self.days],
                "busiest_chats": [asdict(c) for c in self.busiest],
                "saved_chats": self.saved_chats, "audit": [asdict(a) for a in self.audit]}


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


def stored_usage_sums(reply_rows: Iterable[dict], error_rows: Iterable[dict]) -> UsageSums:
    """The usage of the chat database's sums (server/chat_records.py, REPLIES_SQL and ERRORS_SQL)."""
    sums = UsageSums()
    for r in reply_rows:
        row = sums.per_user.setdefault((r["day"], r["name"]), UserDay(r["name"]))
        row.replies, row.prompt_tokens = int(r["replies"]), int(r["prompt_tokens"] or 0)
        row.reply_tokens = int(r["reply_tokens"] or 0)
    for r in error_rows:
        sums.per_user.setdefault((r["day"], r["name"]), UserDay(r["name"])).errors += int(r["errors"])
        sums.errors[r["day"]][r["kind"]] += int(r["errors"])
    return sums


def read_usage_sums(path: Path, since: str) -> UsageSums:
    """Blocking: call in a thread."""
    return sum_usage(lines(path), since) if path.exists() else UsageSums()


def report(period: list[str], message_rows: Iterable[dict], busiest_rows: Iterable[dict],
           usage: UsageSums, saved_chats: bool, audit: Iterable[AuditRecord] = ()) -> Report:
    """Both sources, merged per day and user; users by name in each day."""
    rows: dict[tuple[str, str], UserDay] = dict(usage.per_user)
    for r in message_rows:
        row = rows.setdefault((r["day"], r["name"] or UNKNOWN_USER), UserDay(r["name"] or UNKNOWN_USER))
        row.messages, row.chats = int(r["messages"]), int(r["chats"])
    days = [Day(day, sorted((u for (d, _), u in rows.items() if d == day), key=lambda u: u.user),
                dict(sorted(usage.errors.get(day, {}).items()))) for day in period]
    busiest = [BusyChat(r["title"] or "", r["name"] or UNKNOWN_USER, int(r["messages"]),
                        r["last_at"] or "") for r in busiest_rows]
    return Report(days, busiest, saved_chats, list(audit))


@dataclass
class Stored:
    """What the chat database holds for a period."""

    messages: list[dict]
    busiest: list[dict]
    usage: UsageSums
    audit: list[AuditRecord]


async def stored(engine, since: str) -> Stored:
    """The period's figures and the newest audit records, from the chat database."""
    from sqlalchemy import text

    async with engine.connect() as db:
        async def rows(query: str, **values) -> list[dict]:
            return [dict(r) for r in (await db.execute(text(query), values)).mappings().all()]
        return Stored(await rows(MESSAGES_SQL, since=since), await rows(BUSIEST_SQL, since=since, limit=BUSIEST),
                      stored_usage_sums(await rows(REPLIES_SQL, since=since), await rows(ERRORS_SQL, since=since)),
                      [AuditRecord(**r) for r in await rows(RECENT_AUDIT_SQL, limit=AUDIT_SHOWN)])
