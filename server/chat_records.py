"""The usage and audit records in the chat database (ERNIE_CHAT_DB, tables in server/chat_db.py):
what every app worker of every machine writes, so that the admin page's figures and its audit
are the same on all of them.

- ``usage_records``: a row per finished reply (its token counts, time to first token, speed,
  finish reason) and per error the chat showed (its kind), with the login name ("" without
  login); never the text.
- ``audit_records``: a row per sign-in, refused sign-in, sign-out, shared or unshared chat,
  admin page view, sign-out everywhere (``revoke-sessions``) and deleted user, with the user,
  the client address the app trusts (uvicorn's, from the proxy's X-Forwarded-For only when the
  proxy is in ERNIE_TRUSTED_PROXIES; "cli" for a command), the time, and a detail (how, or
  which chat); never a message.

A refused sign-in names its user only when the name is a user's: someone who typed their
password into the name field would otherwise leave it in the audit.

Times are ISO texts in UTC, as Chainlit's ``createdAt``: their first ten characters are the day,
and a text comparison selects a period, on SQLite as on PostgreSQL.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Optional

SIGN_IN, SIGN_IN_REFUSED, SIGN_OUT = "sign_in", "sign_in_refused", "sign_out"
SHARE, UNSHARE, ADMIN_VIEW = "share", "unshare", "admin_view"
REVOKE_SESSIONS, DELETE_USER = "revoke_sessions", "delete_user"
ACTIONS = (SIGN_IN, SIGN_IN_REFUSED, SIGN_OUT, SHARE, UNSHARE, ADMIN_VIEW, REVOKE_SESSIONS, DELETE_USER)
NOT_A_USER = "(not a user)"  # the name of a refused sign-in whose name is no user's
COMMAND_LINE = "cli"  # the address of what a command did
AUDIT_SHOWN = 100  # the newest audit records on the admin page and in /admin.json

USAGE_TABLE, AUDIT_TABLE = "usage_records", "audit_records"
INSERT_USAGE = ('INSERT INTO usage_records ("at", "name", "prompt_tokens", "reply_tokens", "ttft_s", '
                '"tokens_per_s", "finish_reason", "error") VALUES (:at, :name, :prompt_tokens, '
                ':reply_tokens, :ttft_s, :tokens_per_s, :finish_reason, :error)')
INSERT_AUDIT = ('INSERT INTO audit_records ("at", "action", "name", "address", "detail") '
                'VALUES (:at, :action, :name, :address, :detail)')
# The usage of a period: replies and tokens per day and user, errors per day, user and kind.
REPLIES_SQL = """
SELECT substr("at", 1, 10) AS day, "name" AS name, count(*) AS replies,
       sum("prompt_tokens") AS prompt_tokens, sum("reply_tokens") AS reply_tokens
FROM usage_records WHERE "error" IS NULL AND "at" >= :since
GROUP BY 1, 2
"""
ERRORS_SQL = """
SELECT substr("at", 1, 10) AS day, "name" AS name, "error" AS kind, count(*) AS errors
FROM usage_records WHERE "error" IS NOT NULL AND "at" >= :since
GROUP BY 1, 2, 3
"""
RECENT_AUDIT_SQL = """
SELECT "at", "action", "name", "address", "detail" FROM audit_records
ORDER BY "at" DESC, "id" DESC LIMIT :limit
"""


def now_utc() -> str:
    return datetime.now(timezone.utc).isoformat()


def usage_row(name: Optional[str], prompt_tokens: Optional[int] = None, reply_tokens: Optional[int] = None,
              ttft_s: Optional[float] = None, tokens_per_s: Optional[float] = None,
              finish_reason: Optional[str] = None, error: Optional[str] = None) -> dict:
    """A reply's row, or with ``error`` an error's."""
    return {"at": now_utc(), "name": name or "", "prompt_tokens": prompt_tokens,
            "reply_tokens": reply_tokens, "ttft_s": ttft_s, "tokens_per_s": tokens_per_s,
            "finish_reason": finish_reason, "error": error}


def audit_row(action: str, name: Optional[str], address: Optional[str], detail: str = "") -> dict:
    if action not in ACTIONS:
        raise ValueError(f"{action!r} is not an audit action: one of {', '.join(ACTIONS)}")
    return {"at": now_utc(), "action": action, "name": (name or "")[:200],
            "address": (address or "unknown")[:100], "detail": detail[:200]}


def tried_name(typed: str, users) -> str:
    """What a refused sign-in records of the name typed: the name only if it is a user's."""
    return typed if typed in users else NOT_A_USER


def numbered(statement: str, row: dict) -> tuple[str, list]:
    """``statement`` with PostgreSQL's numbered parameters (``$1``) for its ``:names``, and the
    values in that order: the commands' queries take them (server/data_life/database.py)."""
    keys = list(row)
    return re.sub(r":(\w+)", lambda m: f"${keys.index(m.group(1)) + 1}", statement), [row[k] for k in keys]
